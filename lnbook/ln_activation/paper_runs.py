"""Chapter 6's paper-scale runs recorded on a CPU: run them, store them with their provenance, read what they say.

Four verdicts of chapter 6 are about paper-scale runs that a small-scale (``ci``) build does not make; each is
recorded here by the computation its lab makes at paper scale (the same lnbook functions, sizes and seeds):

* ``width3`` (``ch06_width3_lab``): LayerNorm over three neurons on the spiral, trained at :math:`\\varepsilon = 0.3`
  and moved to :math:`10^{-5}` by :func:`~lnbook.ln_activation.width3.with_eps`, against the best four-sector rule
  :func:`~lnbook.ln_activation.width3.search_sector_apex` finds (and the nets trained directly at :math:`10^{-5}`);
* ``sphere`` (``ch06_sphere_digits_lab``): LN-MLPs with four and with two LN layers on the sphere cut in eight parts,
  the seeds that reach 95% training accuracy at each depth and the two-sided Fisher exact test on the two counts;
* ``pln_eps`` (``ch06_parallel_ln_lab``): PLN nets of 32 neurons on :math:`\\cos(2\\pi x)`, groups of 2 against
  groups of 8 at every :math:`\\varepsilon` of the paper grid, with the paper budget of steps;
* ``ln_mlp`` (``ch06_ln_mlp_lab``): the LN-MLP over four neurons on the spiral, every drop of its successful runs (the
  folding criterion and the two read-out swaps) and the seeds of the tanh and ReLU controls that learn the spiral.

:func:`run_width3`, :func:`run_sphere`, :func:`run_pln_eps` and :func:`run_ln_mlp` compute one part each (sizes :data:`PAPER_SIZES`);
:func:`store_part` writes it into the record (``results/paper/recorded/ch06_cpu_runs.json``, :data:`RECORD_NAME`,
beside the paper-scale comparisons and not among them) with the provenance its caller passes; :func:`read_record`
reads it back as :class:`CpuRuns`, whose methods give each verdict as counts with 95% Clopper-Pearson intervals
(:func:`lnbook.util.stats.binomial_interval`). ``benchmarks/ch06_cpu_runs.py`` regenerates the record.
Tests: tests/ln_activation/test_paper_runs.py.
"""

from __future__ import annotations

import datetime

import fcntl
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lnbook.ln_activation.ensemble import seed_sweep_batched
from lnbook.ln_activation.lab import ln_mlp
from lnbook.ln_activation.shallow_fits import _eps_text, compare_over_seeds, fit_error, smooth_target, train_shallow_net_specs
from lnbook.ln_activation.width3 import search_sector_apex, with_eps
from lnbook.ml.data import sphere_octants, spiral
from lnbook.ml.training import evaluate
from lnbook.util.stats import SeedCount

__all__ = ["PAPER_SIZES", "PARTS", "PART_TITLES", "RECORD_NAME", "CpuRuns", "read_record", "run_ln_mlp", "run_pln_eps", "run_sphere",
           "run_width3", "store_part"]

RECORD_NAME = "recorded/ch06_cpu_runs.json"  # under the paper-scale results folder (a subfolder: not a comparison)
SUCCESS = 0.95  # the labs' threshold: a run "learns the task" when its final training accuracy reaches this

# the paper-scale sizes of the four labs (their ``at_scale(..., paper=...)``; tests/ln_activation/test_paper_runs.py
# checks that the labs still use them)
PAPER_SIZES = {
    "width3": dict(seeds=32, steps=4000, grid=121, lr=0.01, n=1000),
    "sphere": dict(seeds=32, steps=6000, n=2000, lr=0.005, depths=(4, 2), features=4),
    "pln_eps": dict(seeds=32, steps=20000, neurons=32, lr=3e-3, groups=(2, 8),
                    eps_grid=(1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)),
    "ln_mlp": dict(seeds=32, steps=4000, n=1000, lr=0.01, features=4, window=50),
}
PARTS = tuple(PAPER_SIZES)
# each part in words and the lab that reads it (the reproduction page lists the record by these)
PART_TITLES = {
    "width3": ("LayerNorm over three neurons on the spiral, against the best four-sector rule", "ch06_width3_lab"),
    "sphere": ("four against two LN layers on the sphere cut in eight parts", "ch06_sphere_digits_lab"),
    "pln_eps": ("PLN pairs against groups of 8 over the paper's grid of ε", "ch06_parallel_ln_lab"),
    "ln_mlp": ("LayerNorm over four neurons on the spiral: its drops, and the tanh and ReLU controls", "ch06_ln_mlp_lab"),
}


def _seeds(seeds) -> list[int]:
    seeds = [int(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must name at least one seed, each once; got {seeds}")
    return seeds


def run_width3(seeds=range(32), *, steps: int = 4000, grid: int = 121, device=None) -> dict:
    """``ch06_width3_lab``'s spiral runs: per seed, the final training accuracy of LN over three neurons trained at
    eps = 1e-5, and the training and test accuracies of the net trained at eps = 0.3 and moved to 1e-5; and the best
    four-sector rule found (accuracy and apex)."""
    seeds = _seeds(seeds)
    X, y = spiral(1000, turns=1.0, noise=0.0, seed=0)
    X_test, y_test = spiral(1000, turns=1.0, noise=0.0, seed=1)
    fit = dict(epochs=steps, lr=0.01, log_every=10, success_at=SUCCESS, progress=False, device=device)
    direct = seed_sweep_batched(lambda: ln_mlp(2, 2, features=3), X, y, seeds, label="LN over 3", **fit)
    wide = seed_sweep_batched(lambda: ln_mlp(2, 2, features=3, eps=0.3), X, y, seeds, label="LN over 3, eps 0.3", **fit)
    rescaled = [with_eps(m, 1e-5) for m in wide.models]
    apex, ceiling = search_sector_apex(X.cpu().numpy(), y.cpu().numpy(), grid=grid)
    return {
        "seeds": seeds,
        "ceiling": float(ceiling),
        "apex": [float(v) for v in apex],
        "direct_train": [float(a) for a in direct.final_accuracies],
        "rescaled_train": [float(evaluate(m, X, y)[1]) for m in rescaled],
        "rescaled_test": [float(evaluate(m, X_test, y_test)[1]) for m in rescaled],
    }


def run_sphere(seeds=range(32), *, steps: int = 6000, n: int = 2000, device=None) -> dict:
    """``ch06_sphere_digits_lab``'s sphere runs: per seed, the final training accuracy with four and with two LN layers
    over four neurons."""
    seeds = _seeds(seeds)
    X, y = sphere_octants(n, seed=0)
    fit = dict(epochs=steps, lr=0.005, log_every=10, success_at=SUCCESS, progress=False, device=device)
    out = {"seeds": seeds}
    for depth in PAPER_SIZES["sphere"]["depths"]:
        sweep = seed_sweep_batched(lambda: ln_mlp(3, depth, features=4), X, y, seeds, label=f"sphere, {depth} LN", **fit)
        out[f"depth{depth}_train"] = [float(a) for a in sweep.final_accuracies]
    return out


def run_pln_eps(seeds=range(32), *, steps: int = 20000, eps_grid=PAPER_SIZES["pln_eps"]["eps_grid"], device=None) -> dict:
    """``ch06_parallel_ln_lab``'s eps experiment: per eps, group size and seed, the sup error on cos(2 pi x) of a PLN
    net of 32 neurons (every net trained side by side, each as if alone up to float rounding, as the lab does)."""
    seeds = _seeds(seeds)
    eps_grid = [float(e) for e in eps_grid]
    specs = [dict(kind="pln", width=32, seed=s, eps=e, group_size=m) for e in eps_grid for m in (2, 8) for s in seeds]
    nets = train_shallow_net_specs(specs, smooth_target, steps=steps, lr=3e-3, device=device)
    sup = {(sp["eps"], sp["group_size"], sp["seed"]): fit_error(net, smooth_target, n=40 * 256).sup
           for sp, net in zip(specs, nets)}
    return {"seeds": seeds, "eps_grid": eps_grid,
            "sup": {f"{e:g}": {f"groups of {m}": [float(sup[(e, m, s)]) for s in seeds] for m in (2, 8)}
                    for e in eps_grid}}


def run_ln_mlp(seeds=range(32), *, steps: int = 4000, device=None) -> dict:
    """``ch06_ln_mlp_lab``'s spiral runs: per seed, the final training accuracy of the LN-MLP over four neurons and of
    the tanh and ReLU controls of the same widths; and, for every phase transition of a successful LN run
    (:func:`~lnbook.ln_activation.lab.drop_snapshots`, window 50), its seed, epochs, corrected points, whether it meets
    the folding criterion, its critical ratio (:meth:`~lnbook.ln_activation.lab.DropSnapshot.critical_ratio`) over that
    interval and over the one logged step where it is steepest
    (:func:`~lnbook.ln_activation.lab.steepest_step_snapshot`), and the two read-out swaps' shares
    (:func:`~lnbook.ln_activation.lab.readout_swap`)."""
    from lnbook.ln_activation.lab import drop_snapshots, readout_swap, steepest_step_snapshot
    from lnbook.ml.models import mlp

    seeds = _seeds(seeds)
    sizes = PAPER_SIZES["ln_mlp"]
    X, y = spiral(sizes["n"], turns=1.0, noise=0.0, seed=0)
    fit = dict(epochs=steps, lr=sizes["lr"], log_every=10, success_at=SUCCESS, progress=False, device=device)
    sweep = seed_sweep_batched(lambda: ln_mlp(2, 2, features=sizes["features"]), X, y, seeds, keep_states=True,
                               label="LN over 4", **fit)
    out = {"seeds": seeds, "ln_train": [float(a) for a in sweep.final_accuracies], "drops": []}
    for act in ("tanh", "relu"):
        control = seed_sweep_batched(lambda: mlp(2, sizes["features"], 2, 2, norm="none", activation=act), X, y, seeds,
                                     label=act, **fit)
        out[f"{act}_train"] = [float(a) for a in control.final_accuracies]
    for i, t, snap in drop_snapshots(sweep, X, y, window=sizes["window"]):
        swap = readout_swap(sweep.model_at(i, snap.before_epoch), sweep.model_at(i, snap.after_epoch), X, y)
        narrow = steepest_step_snapshot(sweep, i, t, X, y)
        out["drops"].append({"seed": seeds[i], "before_epoch": int(snap.before_epoch),
                             "after_epoch": int(snap.after_epoch), "corrected": int(swap.corrected),
                             "folding": bool(snap.supports_folding()),
                             "critical_ratio": float(snap.critical_ratio()),
                             "steepest_step": [int(narrow.before_epoch), int(narrow.after_epoch)],
                             "steepest_critical_ratio": float(narrow.critical_ratio()),
                             "last_linear_share": float(swap.last_linear_share),
                             "norm_affine_share": float(swap.norm_affine_share)})
    return out


def store_part(folder, part: str, result: dict, provenance: dict) -> Path:
    """Write ``result`` with its ``provenance`` (command, commit, date, torch version, threads, device, sizes) as
    ``part`` of the record in ``folder`` (the paper-scale results folder), keeping the other parts; safe when the
    parts are run at once in separate processes."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    for key in ("command", "commit", "date", "torch", "sizes"):
        if key not in provenance:
            raise ValueError(f"provenance lacks {key!r}: give command, commit, date, torch and sizes")
    path = Path(folder) / RECORD_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = json.loads(path.read_text()) if path.exists() else {}
        record[part] = {"provenance": provenance, "result": result}
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        tmp.replace(path)
    path.with_suffix(".lock").unlink(missing_ok=True)
    return path


def _count(k: int, n: int) -> str:
    return SeedCount(int(k), int(n)).text  # "k of n seeds (95% interval lo–hi)", as every lab writes it


@dataclass
class CpuRuns:
    """The stored record (``parts``: part name -> ``{"provenance": ..., "result": ...}``)."""

    parts: dict

    def _part(self, part: str) -> dict:
        if part not in self.parts:
            raise ValueError(f"the record holds no {part!r} run: run benchmarks/ch06_cpu_runs.py --part {part}")
        return self.parts[part]["result"]

    def provenance(self, part: str) -> dict:
        self._part(part)
        return self.parts[part]["provenance"]

    def setting(self, part: str) -> str:
        """``"16 seeds, 4000 steps"``: what a sentence quoting the run names (with ``", 2000 points"`` when the part
        records its training-set size ``n``, which can differ from the small scale's; and, for a part of the pln grid,
        its eps).
        How and where it ran (torch build, machine, date) is :meth:`machine`'s, for the reproduction page: the
        chapter's sentence names only the sizes (issue 33: build details do not belong in the prose)."""
        sizes = self.provenance(part)["sizes"]
        grid = sizes.get("eps_grid")
        only = (f", ε = {', '.join(_eps_text(e) for e in grid)} only" if grid is not None
                and len(grid) < len(PAPER_SIZES["pln_eps"]["eps_grid"]) else "")
        points = f", {sizes['n']} points" if sizes.get("n") is not None else ""
        return f"{len(self._part(part)['seeds'])} seeds, {sizes['steps']} steps{points}{only}"

    def machine(self, part: str) -> str:
        """``"run on one thread of a CPU with torch 2.13.0 (CPU build) on 29 November 2026, in 110 minutes"``:
        how and where the part was run, from its provenance, as words a sentence can carry (not a log line). The CPU's
        architecture stays in the record: the reproduction page names every recorded run's machine the same way, and
        chapter 5's record does not store it (issue 33)."""
        p = self.provenance(part)
        threads = p.get("threads")
        on = ("" if threads is None else "one thread of " if threads == 1 else f"{threads} threads of ") + "a CPU"
        version, _, build = str(p["torch"]).partition("+")
        torch_text = f"torch {version}" + ("" if not build else " (CPU build)" if build == "cpu" else f" (build {build})")
        day = datetime.date.fromisoformat(str(p["date"])[:10])
        seconds = p.get("wall_seconds")
        wall = ("" if seconds is None else f", in {seconds:.0f} seconds" if seconds < 120
                else f", in {seconds / 60:.0f} minutes")
        return f"run on {on} with {torch_text} on {day.day} {day:%B} {day.year}{wall}"

    # width3: the rescaled nets against the best four-sector rule found
    def width3_beat(self) -> tuple[int, int]:
        """``(k, n)``: the rescaled eps > 0 nets whose training accuracy is above the rule found, of all seeds."""
        r = self._part("width3")
        return int(np.sum(np.asarray(r["rescaled_train"]) > r["ceiling"])), len(r["seeds"])

    def width3_below(self) -> int:
        """The rescaled nets whose training accuracy is strictly below the rule found."""
        r = self._part("width3")
        return int(np.sum(np.asarray(r["rescaled_train"]) < r["ceiling"]))

    def width3_direct_successes(self) -> tuple[int, int]:
        """``(k, n)``: the nets with LayerNorm over three neurons trained directly at eps = 1e-5 whose final training
        accuracy reaches 95% (the labs' success), of all seeds."""
        r = self._part("width3")
        return int(np.sum(np.asarray(r["direct_train"]) >= SUCCESS)), len(r["seeds"])

    def width3_text(self) -> str:
        r = self._part("width3")
        k, n = self.width3_beat()
        train = np.asarray(r["rescaled_train"])
        below = train[train <= r["ceiling"]]
        low = f"; the other {n - k} at {below.min():.3f} to {below.max():.3f}" if len(below) else ""
        return (f"{_count(k, n)} beat the rule found ({r['ceiling']:.3f}), best {train.max():.3f} train, "
                f"{r['rescaled_test'][int(np.argmax(train))]:.3f} test{low}")

    # sphere: four against two LN layers
    def sphere_counts(self) -> tuple[int, int, int]:
        """``(successes with four LN layers, successes with two, seeds)``."""
        r = self._part("sphere")
        four, two = (int(np.sum(np.asarray(r[f"depth{d}_train"]) >= SUCCESS)) for d in (4, 2))
        return four, two, len(r["seeds"])

    def sphere_p(self) -> float:
        """Two-sided Fisher exact test on the 2 x 2 table of successes and failures at the two depths."""
        from scipy.stats import fisher_exact

        four, two, n = self.sphere_counts()
        return float(fisher_exact([[four, n - four], [two, n - two]])[1])

    def sphere_text(self) -> str:
        four, two, n = self.sphere_counts()
        p = self.sphere_p()
        verdict = ("four LN layers ahead" if p <= 0.05 and four > two else "two LN layers ahead" if p <= 0.05
                   else "no significant difference between the depths")
        return f"four LN layers {_count(four, n)}, two {_count(two, n)}; Fisher's exact test p = {p:.2f}: {verdict}"

    # pln_eps: pairs against groups of 8
    def pln_comparisons(self) -> dict:
        """eps -> :class:`~lnbook.ln_activation.shallow_fits.SeedComparison` of pairs against groups of 8."""
        r = self._part("pln_eps")
        return {float(e): compare_over_seeds(v["groups of 2"], v["groups of 8"], names=("pairs", "groups of 8"), factor=1.25)
                for e, v in r["sup"].items()}

    def pln_text(self) -> str:
        c = self.pln_comparisons()
        lo = c[min(c)]
        every = all(v.median_a < v.median_b for v in c.values())
        return (f"at eps = 1e-5 {lo.verdict} (median sup error {lo.median_a:.3f} against {lo.median_b:.3f}; pairs better in "
                f"{_count(lo.a_better_seeds, lo.seeds)}); pairs have the lower median "
                + ("at every eps of the grid" if every else f"at {sum(v.median_a < v.median_b for v in c.values())} of "
                   f"{len(c)} eps of the grid"))

    # ln_mlp: the drops of the LN-MLP over four neurons, and the controls
    def ln_mlp_successes(self) -> dict[str, tuple[int, int]]:
        """``{"LN over 4" | "tanh" | "ReLU": (seeds reaching 95% training accuracy, seeds)}``."""
        r = self._part("ln_mlp")
        n = len(r["seeds"])
        return {name: (int(np.sum(np.asarray(r[key]) >= SUCCESS)), n)
                for name, key in (("LN over 4", "ln_train"), ("tanh", "tanh_train"), ("ReLU", "relu_train"))}

    def ln_mlp_drop_counts(self, keeps: float = 0.9, carries: float = 0.75) -> dict[str, int]:
        """Over the recorded drops (a drop that corrects no point has NaN shares and counts in neither):
        ``drops``; ``folding``, those meeting the folding criterion; ``keep``, those where putting back the last Linear
        keeps at least ``keeps`` of the corrected points; ``carry``, those where putting back the gain and bias too
        keeps less than ``carries``; ``both``."""
        d = self._part("ln_mlp")["drops"]
        keep = [x["last_linear_share"] >= keeps for x in d]
        carry = [x["norm_affine_share"] < carries for x in d]
        return {"drops": len(d), "folding": sum(x["folding"] for x in d), "keep": sum(keep), "carry": sum(carry),
                "both": sum(a and b for a, b in zip(keep, carry))}

    def ln_mlp_folding_by_interval(self, ratio: float = 3.0) -> dict[str, int]:
        """How many recorded drops meet the folding criterion at threshold ``ratio`` (a drop meets it when its critical
        ratio is at least ``ratio``): ``window``, over the lab's interval (the steep stretch extended by the window);
        ``steepest``, over the one logged step where the drop is steepest; ``drops``, all of them. A record made
        before the critical ratios were stored is refused, saying how to make it again."""
        d = self._part("ln_mlp")["drops"]
        if any("steepest_critical_ratio" not in x for x in d):
            raise ValueError("the ln_mlp part of the record has no critical ratios: record it again with "
                             "`benchmarks/ch06_cpu_runs.py --part ln_mlp`")
        return {"drops": len(d), "window": sum(x["critical_ratio"] >= ratio for x in d),
                "steepest": sum(x["steepest_critical_ratio"] >= ratio for x in d)}

    def ln_mlp_lowest_keep(self) -> float:
        """The smallest share of its corrected points that a drop keeps with the last Linear put back."""
        shares = [x["last_linear_share"] for x in self._part("ln_mlp")["drops"] if x["last_linear_share"] == x["last_linear_share"]]
        if not shares:
            raise ValueError("the recorded ln_mlp run has no drop that corrects a point")
        return float(min(shares))


def read_record(folder) -> CpuRuns:
    """The record stored in ``folder`` (the paper-scale results folder); refuses a missing one with the way to make it."""
    path = Path(folder) / RECORD_NAME
    if not path.exists():
        raise ValueError(f"no record at {path}: run benchmarks/ch06_cpu_runs.py to make it")
    return CpuRuns(json.loads(path.read_text()))
