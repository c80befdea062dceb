"""Chapter 5's paper-scale random-label runs (grayscale CIFAR-10, MNIST): run or read them, and what they say.

At paper scale :func:`random_label_runs` trains the harness's sweep (:func:`lnbook.group_ln.lab.official_runs`,
:meth:`FitConfig.official`) on each data set whose folder is named, by ``LNBOOK_CIFAR10_DIR`` or ``LNBOOK_MNIST_DIR``
(either on its own, or both), and stores it in the ``recorded`` subfolder of the paper-scale results folder (``load_comparisons`` reads every
JSON file of the folder itself as comparisons); at any scale it reads what is stored there. The lab ``ch05_random_labels_lab``
shows :func:`describe_official`, the status line, a figure and one comparison per data set from
:class:`StoredFits`. The book never downloads data: without the files a data set is "not checkable here".

The depth claims of the chapter at paper scale (LN-G with 16 groups at depths 2, 4, 8 and 14 on the lab's generated
data) are recorded by :func:`record_depth_runs` (``python -m lnbook.group_ln.paper_runs``) into
``results/paper/recorded/`` (:data:`DEPTH_FILE`, with its provenance; a subfolder, since ``load_comparisons`` reads
every JSON of ``results/paper/`` itself as comparisons) and read by :func:`read_depth_runs`. The drop-in lab's
recall Transformer at paper scale (LN against LN-G with 4 groups, :data:`DROP_IN_PAPER`) is recorded by
:func:`record_drop_in_recall` (``python -m lnbook.group_ln.paper_runs --drop-in``, :data:`DROP_IN_FILE`) and read by
:func:`read_drop_in_recall`.
Tests: tests/group_ln/test_paper_runs.py.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from lnbook.group_ln.lab import (
    OFFICIAL,
    RECALL_SETUP,
    RECALL_VARIANTS,
    FitConfig,
    Run,
    fit_random_labels,
    recall_transformer_runs,
    load_runs,
    official_runs,
    ordering_verdict,
    save_runs,
)
from lnbook.ml.data import cifar10_grayscale, mnist, random_labels
from lnbook.util.scale import SCALES
from lnbook.util.stats import SeedCount, count_seeds
from lnbook.util.tables import Table, number_range

__all__ = ["CIFAR_FILE", "MNIST_FILE", "StoredFits", "describe_official", "random_label_runs", "groups_curve",
           "DEPTH_FILE", "LAB_PAPER", "most_frequent_share", "lab_paper_config", "lab_paper_data", "record_depth_runs", "DepthRecord",
           "read_depth_runs", "seed_count_words", "depth_table", "depth_cells", "NEAR_CHANCE", "STALLED", "FitBands",
           "fit_bands", "identified_commit", "set_aside_words", "DROP_IN_FILE", "DROP_IN_PAPER", "run_drop_in_recall",
           "record_drop_in_recall", "read_drop_in_recall"]

CIFAR_FILE = "ch05-random-labels-cifar10.json"
MNIST_FILE = "ch05-random-labels-mnist.json"
_DATA = {CIFAR_FILE: "grayscale CIFAR-10", MNIST_FILE: "MNIST"}


def describe_official() -> str:
    """The harness's protocol (:data:`OFFICIAL`) in a few lines a reader can read (not a dict)."""
    o = OFFICIAL
    return "\n".join([
        f"data: {o['dataset']}",
        f"networks: width {o['width']}, depths {', '.join(map(str, o['depths']))}; "
        f"groups {', '.join(map(str, o['groups']))}",
        f"training: {o['optimizer']} (momentum {o['momentum']:g}, weight decay {o['weight_decay']:g}), "
        f"batch {o['batch_size']}, {o['epochs']} epochs, lr in {', '.join(f'{v:g}' for v in o['lrs'])} "
        f"multiplied by {o['lr_gamma']:g} every {o['lr_step']} epochs; eps {o['eps']:g}, seed {o['seed']}",
    ])


@dataclass
class StoredFits:
    """The best fits of one stored paper-scale run (``fits`` is ``None`` when none is stored)."""

    data: str
    fits: dict[str, float] | None = None
    meta: dict = field(default_factory=dict)

    @property
    def stored(self) -> bool:
        return self.fits is not None

    def verdict(self) -> tuple[float, str]:
        """``(best LN-G fit at depth 4, verdict)`` of :func:`lnbook.group_ln.lab.ordering_verdict`."""
        if self.fits is None:
            raise ValueError(f"no stored {self.data} run: run the lab at paper scale with the data first")
        return ordering_verdict(self.fits)

    def ours(self) -> str:
        """Our side of the comparison: ``linear 0.301, LN-Net 0.552, best LN-G 1.000``."""
        best, _ = self.verdict()
        return f"linear {self.fits['linear']:.3f}, LN-Net {self.fits['LN d4']:.3f}, best LN-G {best:.3f}"


def _read(folder: Path, name: str) -> StoredFits:
    path = folder / name
    if not path.exists():
        return StoredFits(_DATA[name])
    meta, histories = load_runs(path)
    return StoredFits(_DATA[name], {k: h.best_accuracy for k, h in histories.items()}, meta)


def random_label_runs(
    folder, scale: str, cifar_dir: Path | None = None, mnist_dir: Path | None = None, device=None
) -> tuple[str, StoredFits, StoredFits]:
    """``(status line, CIFAR-10 fits, MNIST fits)``: at ``scale="paper"`` the sweep is trained first on each data set
    whose folder is given (``cifar_dir``, ``mnist_dir``: either, both or neither) and stored in ``folder``; what
    ``folder`` holds is then read. The status line names what was trained and which variable to set for the rest."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    folder = Path(folder)
    if scale != "paper":
        status = ("ci scale: the CIFAR-10 and MNIST runs need LNBOOK_SCALE=paper, LNBOOK_CIFAR10_DIR or "
                  "LNBOOK_MNIST_DIR and, in practice, a GPU.")
        return status, _read(folder, CIFAR_FILE), _read(folder, MNIST_FILE)
    official = FitConfig.official(lr=0.1)
    trained, skipped = [], []
    for name, loader, depth_sweep, data, source, variable in (
        (CIFAR_FILE, cifar10_grayscale, True, OFFICIAL["dataset"], cifar_dir, "LNBOOK_CIFAR10_DIR"),
        (MNIST_FILE, mnist, False, "MNIST, pixels mapped to [-1, 1], random labels", mnist_dir, "LNBOOK_MNIST_DIR"),
    ):
        if source is None:
            skipped.append(f"{variable} is not set: the {_DATA[name]} runs are skipped")
            continue
        X, _ = loader(source)
        y = random_labels(len(X), 10, seed=OFFICIAL["seed"])
        hist = fit_random_labels(X, y, official_runs(depth_sweep=depth_sweep), official, seed=OFFICIAL["seed"],
                                 device=device)
        save_runs(folder / name, hist, {"data": data, "config": official.__dict__, "device": str(device)})
        trained.append(_DATA[name])
    parts = [f"paper scale: the {' and '.join(trained)} runs were trained now and stored in results/paper/recorded/"] if trained else []
    status = "; ".join(parts + skipped) + (" (the book never downloads data)." if skipped else ".")
    return status, _read(folder, CIFAR_FILE), _read(folder, MNIST_FILE)


def groups_curve(fits: dict[str, float], depth: int = 4, width: int = OFFICIAL["width"]) -> tuple[list[int], list[float]]:
    """The groups of the harness that divide ``width`` and the best LN-G fit of each at ``depth`` (for the figure)."""
    groups = [g for g in OFFICIAL["groups"] if width % g == 0]
    missing = [Run("lng", depth, g).label for g in groups if Run("lng", depth, g).label not in fits]
    if missing:
        raise ValueError(f"fits lacks the runs {missing}; pass the fits of official_runs()")
    return groups, [fits[Run("lng", depth, g).label] for g in groups]


# -- the lab's depth sweep of LN-G with 16 groups at paper scale, recorded on a CPU -------------------------------------

DEPTH_FILE = "ch05-random-labels-depth-lng16.json"
# The paper-scale values of ch05_random_labels_lab's setup cell (its at_scale(..., paper=...) arguments): points,
# input dimension, the seeds of the points (torch.Generator) and of the labels, the group count of the depth claims
# and the depths of the chapter's claims. tests/group_ln/test_paper_runs.py checks them against the lab's cell.
LAB_PAPER = {"n": 5000, "d_in": 32, "classes": 10, "points_seed": 100, "labels_seed": 0, "groups": 16,
             "depths": (2, 4, 8, 14)}


def lab_paper_config() -> FitConfig:
    """The lab's training setting at paper scale (its ``CFG`` with ``LNBOOK_SCALE=paper``)."""
    return FitConfig(width=256, batch_size=128, epochs=150, optimizer="adam", lr=1e-3, lr_step=None, log_every=5)


def lab_paper_data() -> tuple[torch.Tensor, torch.Tensor]:
    """The lab's points and random labels at paper scale (``X``, ``y`` of its setup cell)."""
    X = torch.randn(LAB_PAPER["n"], LAB_PAPER["d_in"], generator=torch.Generator().manual_seed(LAB_PAPER["points_seed"]))
    return X, random_labels(LAB_PAPER["n"], LAB_PAPER["classes"], seed=LAB_PAPER["labels_seed"])


def most_frequent_share(y: torch.Tensor) -> float:
    """The share of the most frequent label: the fit of a network that always answers it (chance level)."""
    return float(torch.bincount(y).max()) / len(y)


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                               cwd=Path(__file__).parent, check=True).stdout.strip()
        return out + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def _run_key(depth: int, seed: int) -> str:
    return f"{Run('lng', depth, LAB_PAPER['groups']).label} seed {seed}"


_RUN_PROVENANCE = ("command", "commit", "date", "threads", "device")


def record_depth_runs(folder, seeds=(0,), depths=LAB_PAPER["depths"], *, command: str = "", device=None,
                      log=print) -> Path:
    """Train the lab's LN-G with 16 groups at paper scale at each of ``depths`` for each of ``seeds`` (seed-major:
    every depth of the first seed first) and store every history, after each run, in ``folder/DEPTH_FILE``.

    The record's ``meta`` holds the configuration, the data, the group count, the torch version, the seeds and depths
    stored, and for each run (``meta["provenance"][key]``) the command, commit, date, threads, device and wall
    seconds that made it. Only finished runs are stored, so an interrupted recording keeps what it finished; a record
    already there is extended (its runs kept, runs it holds not trained again) when its configuration, data, groups
    and torch version are this one's, and refused otherwise (ValueError)."""
    seeds, depths = [int(s) for s in seeds], [int(d) for d in depths]
    if not seeds or not depths:
        raise ValueError("seeds and depths must both be non-empty")
    X, y = lab_paper_data()
    cfg = lab_paper_config()
    path = Path(folder) / DEPTH_FILE
    fixed = {
        "what": "ch05_random_labels_lab's depth sweep of LN-G with 16 groups at paper scale, recorded on a CPU",
        "torch": torch.__version__, "config": dict(cfg.__dict__),
        "data": {k: v for k, v in LAB_PAPER.items() if k not in ("groups", "depths")}, "groups": LAB_PAPER["groups"],
    }
    histories, meta = {}, {**fixed, "seeds": [], "depths": [], "finished": [], "provenance": {}}
    if path.exists():
        old_meta, histories = load_runs(path)
        old_meta = json.loads(json.dumps(old_meta))  # tuples stored as lists: compare like with like
        differs = [k for k in ("torch", "config", "data", "groups") if old_meta.get(k) != json.loads(json.dumps(fixed[k]))]
        if differs:
            raise ValueError(f"{path} was recorded with another {', '.join(differs)}: move it away or pass another folder")
        if "provenance" not in old_meta:  # the first recording's format: one command for every run
            old_meta["provenance"] = {k: {**{f: old_meta.get(f) for f in _RUN_PROVENANCE},
                                          "wall_seconds": old_meta["wall_seconds"][k]} for k in old_meta["finished"]}
        meta = {**meta, **{k: old_meta[k] for k in ("seeds", "depths", "finished", "provenance")}}
    run_meta = {"command": command, "commit": _commit(),
                "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                "threads": torch.get_num_threads(), "device": str(device or "cpu")}
    for seed in seeds:
        for depth in depths:
            run = Run("lng", depth, LAB_PAPER["groups"])
            key = _run_key(depth, seed)
            if key in histories:
                log(f"{key}: already stored, not trained again")
                continue
            start = time.perf_counter()
            h = fit_random_labels(X, y, [run], cfg, seed=seed, device=device, progress=False, report=False)[run.label]
            histories[key] = h
            meta["finished"].append(key)
            meta["provenance"][key] = {**run_meta, "wall_seconds": round(time.perf_counter() - start, 1)}
            meta["seeds"] = sorted(set(meta["seeds"]) | {seed})
            meta["depths"] = sorted(set(meta["depths"]) | {depth})
            save_runs(path, histories, meta)
            log(f"{key}: best fit {h.best_accuracy:.3f} after {h.epochs_run} epochs ({meta['provenance'][key]['wall_seconds']} s)")
    return path


def identified_commit(commit) -> bool:
    """Whether a run's recorded ``commit`` names the code that made it: a bare 40-digit hexadecimal hash. A hash with
    ``(with uncommitted changes)`` after it, ``unknown (not a git checkout)`` or no commit at all does not.

    >>> identified_commit("09e672bc79b69dc79d2e923bad5b6fe0e209346b"), identified_commit(
    ...     "09e672bc79b69dc79d2e923bad5b6fe0e209346b (with uncommitted changes)"), identified_commit(None)
    (True, False, False)
    """
    return isinstance(commit, str) and len(commit) == 40 and all(c in "0123456789abcdef" for c in commit.lower())


@dataclass
class DepthRecord:
    """The stored depth sweep: ``fits[seed][depth]`` is the best fit, ``epochs[seed][depth]`` the epochs run, over the
    runs whose code is identified (:func:`identified_commit`); ``set_aside[(seed, depth)]`` is ``(best fit, commit)``
    of each stored run whose code is not, which no count, range or table of this class includes."""

    meta: dict
    fits: dict[int, dict[int, float]]
    epochs: dict[int, dict[int, int]]
    set_aside: dict[tuple[int, int], tuple[float, str]] = field(default_factory=dict)

    def seeds_at(self, depth: int) -> list[int]:
        """The seeds whose run at ``depth`` is stored."""
        return [s for s in sorted(self.fits) if depth in self.fits[s]]

    def complete_seeds(self) -> list[int]:
        """The seeds whose run at every recorded depth is stored (an interrupted recording may leave one short)."""
        return [s for s in sorted(self.fits) if all(d in self.fits[s] for d in self.meta["depths"])]

    def full_fit(self, depth: int) -> SeedCount:
        """Over :meth:`complete_seeds`, the seeds in which the run at ``depth`` fitted every label (k of n with its
        interval)."""
        seeds = self.complete_seeds()
        if depth not in self.meta["depths"] or not seeds:
            raise ValueError(f"no seed is recorded at every depth including {depth}; record it with record_depth_runs")
        return count_seeds([self.fits[s][depth] == 1.0 for s in seeds])

    def fit_at(self, depth: int) -> SeedCount:
        """Over :meth:`seeds_at` ``depth`` (every seed whose run at that depth is stored, complete or not), the seeds
        whose run fitted every label: the count a table with one row per depth shows beside that row's seeds."""
        seeds = self.seeds_at(depth)
        if not seeds:
            raise ValueError(f"no run at depth {depth} is stored; record it with record_depth_runs")
        return count_seeds([self.fits[s][depth] == 1.0 for s in seeds])

    def spread(self, depth: int) -> str:
        """``0.971`` for one seed, ``0.95 to 0.98 over seeds 0, 1, 2`` (lowest to highest) for several."""
        seeds = self.seeds_at(depth)
        if not seeds:
            raise ValueError(f"no run at depth {depth} is stored; record it with record_depth_runs")
        values = [self.fits[s][depth] for s in seeds]
        if len(values) == 1:
            return f"{values[0]:.3f}"
        return f"{min(values):.3f} to {max(values):.3f} over seeds {', '.join(map(str, seeds))}"


NEAR_CHANCE = 0.01  # a run whose best fit is at most this above chance (the most frequent label's share) is "near chance"
STALLED = 0.05  # a run whose best fit is at most this above chance "stalled"


@dataclass(frozen=True)
class FitBands:
    """The seeds recorded at one depth, split by their best fit: ``stalled`` (at most :data:`STALLED` above
    ``chance``; ``near`` those of them at most :data:`NEAR_CHANCE` above it), ``partial`` (further, short of every
    label) and ``full`` (every label). Each list holds ``(seed, best fit)`` pairs, by seed."""

    depth: int
    chance: float
    stalled: list[tuple[int, float]]
    near: list[tuple[int, float]]
    partial: list[tuple[int, float]]
    full: list[tuple[int, float]]

    @property
    def seeds(self) -> int:
        return len(self.stalled) + len(self.partial) + len(self.full)

    def words(self) -> str:
        """``22 seeds at depth 8, 12 stalled (best fits 0.112 to 0.135; 4 of them near chance), 8 got further without
        fitting every label (best fits 0.183 to 0.608) and 2 fitted every label``; a band without seeds says none."""
        def fits(pairs):
            values = [f for _, f in pairs]
            low, high = f"{min(values):.3f}", f"{max(values):.3f}"
            return f"best fit {low}" if low == high else f"best fits {low} to {high}"

        unit = "seed" if self.seeds == 1 else "seeds"
        stalled = (f"{len(self.stalled)} stalled ({fits(self.stalled)}; {len(self.near)} of them near chance)"
                   if self.stalled else "none stalled")
        partial = (f"{len(self.partial)} got further without fitting every label ({fits(self.partial)})"
                   if self.partial else "none got further without fitting every label")
        return f"{self.seeds} {unit} at depth {self.depth}, {stalled}, {partial} and {len(self.full)} fitted every label"


def fit_bands(record: DepthRecord, depth: int, chance: float) -> FitBands:
    """The seeds recorded at ``depth`` (:meth:`DepthRecord.seeds_at`) in the bands of :class:`FitBands`, for the chance
    level ``chance`` (:func:`most_frequent_share` of the labels). A distribution of the best fits, so that a count of
    the runs near chance is read beside the runs that got further.

    >>> rec = DepthRecord({"depths": [8]}, {0: {8: 0.112}, 1: {8: 0.135}, 2: {8: 0.6}, 3: {8: 1.0}}, {})
    >>> fit_bands(rec, 8, 0.107).words()
    '4 seeds at depth 8, 2 stalled (best fits 0.112 to 0.135; 1 of them near chance), 1 got further without fitting every label (best fit 0.600) and 1 fitted every label'
    """
    if not isinstance(record, DepthRecord):
        raise TypeError(f"fit_bands needs a DepthRecord (read_depth_runs), got {type(record).__name__}")
    if not 0 < chance < 1:
        raise ValueError(f"chance must be the share of the most frequent label, in (0, 1); got {chance}")
    pairs = [(s, record.fits[s][depth]) for s in record.seeds_at(depth)]
    if not pairs:
        raise ValueError(f"no run at depth {depth} is stored; record it with record_depth_runs")
    stalled = [(s, f) for s, f in pairs if f <= chance + STALLED]
    return FitBands(depth, chance, stalled, [(s, f) for s, f in stalled if f <= chance + NEAR_CHANCE],
                    [(s, f) for s, f in pairs if chance + STALLED < f < 1.0], [(s, f) for s, f in pairs if f == 1.0])


def set_aside_words(record: DepthRecord) -> str:
    """The runs :class:`DepthRecord` leaves out because their code is not identified, as a sentence's object:
    ``seed 1 at depths 2, 4 and 8 (best fits 0.956, 1.000 and 0.112)``, ``none`` when every run's code is identified."""
    if not isinstance(record, DepthRecord):
        raise TypeError(f"set_aside_words needs a DepthRecord (read_depth_runs), got {type(record).__name__}")
    if not record.set_aside:
        return "none"

    def _list(items):
        items = list(items)
        return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]

    parts = []
    for seed in sorted({s for s, _ in record.set_aside}):
        depths = sorted(d for s, d in record.set_aside if s == seed)
        where = f"depth {depths[0]}" if len(depths) == 1 else f"depths {_list(map(str, depths))}"
        fits = _list(f"{record.set_aside[(seed, d)][0]:.3f}" for d in depths)
        parts.append(f"seed {seed} at {where} (best fit{'' if len(depths) == 1 else 's'} {fits})")
    return "; ".join(parts)


def seed_count_words(count: SeedCount) -> str:
    """``count.text`` (``2 of 3 seeds (95% interval 0.09–0.99)``), except over a single seed, whose 95% interval
    spans almost all of [0, 1] and says nothing: ``1 of 1 seed`` or ``0 of 1 seed``, without it."""
    if not isinstance(count, SeedCount):
        raise TypeError(f"seed_count_words needs a SeedCount (lnbook.util.stats.count_seeds), got {type(count).__name__}")
    if count.trials == 1:
        return f"{count.successes} of 1 seed"
    return count.text


def _best_fits(values: list[float]) -> str:
    """The best fits of the seeds at one depth as a cell: one value, or the lowest and the highest (``0.950–0.971``)."""
    low, high = f"{min(values):.3f}", f"{max(values):.3f}"
    return low if low == high else f"{low}–{high}"


def depth_table(record: DepthRecord) -> Table:
    """The lab's table of the recorded depth runs: one row per recorded depth with how many of the seeds recorded at
    that depth fitted every label (``0 of 2 seeds``, ``0 of 1 seed``), the 95% interval of that fraction, given for
    one seed too so that every row reads alike (``0.00–0.97``: one seed says little), and the seeds' best fits, the
    lowest and the highest (one value where they agree to three decimals). A row per depth, whatever the number of
    seeds: the seeds recorded at each depth differ (:meth:`DepthRecord.seeds_at`)."""
    if not isinstance(record, DepthRecord):
        raise TypeError(f"depth_table needs a DepthRecord (read_depth_runs), got {type(record).__name__}")
    rows = []
    for d in record.meta["depths"]:
        count = record.fit_at(d)
        unit = "seed" if count.trials == 1 else "seeds"
        rows.append([d, f"{count.successes} of {count.trials} {unit}", number_range(*count.interval, ".2f"),
                     _best_fits([record.fits[s][d] for s in record.seeds_at(d)])])
    return Table(rows, ["depth", "fitted every label", "95% interval", "best fit, lowest–highest"])


def depth_cells(record: DepthRecord) -> dict[str, str]:
    """Every cell of :func:`depth_table` under a key a chapter's table can paste one by one (``{glue:text}``):
    ``d<depth>-count`` (``0 of 2 seeds``), ``d<depth>-interval`` (``0.00–0.84``) and ``d<depth>-best`` (the seeds'
    best fits, ``0.104`` or ``0.112–0.608``). The same strings as the lab's table, so the chapter and the lab cannot
    disagree:

    >>> rec = DepthRecord({"seeds": [0, 1], "depths": [4, 14]}, {0: {4: 1.0, 14: 0.104}, 1: {4: 1.0}}, {})
    >>> cells = depth_cells(rec)
    >>> cells["d4-count"], cells["d4-interval"], cells["d4-best"], cells["d14-count"], cells["d14-best"]
    ('2 of 2 seeds', '0.16–1.00', '1.000', '0 of 1 seed', '0.104')
    """
    if not isinstance(record, DepthRecord):
        raise TypeError(f"depth_cells needs a DepthRecord (read_depth_runs), got {type(record).__name__}")
    if not record.meta["depths"]:
        raise ValueError("the record holds no depth: record it with record_depth_runs")
    table = depth_table(record)
    return {f"d{row[0]}-{key}": cell for row in table.cells for key, cell in zip(("count", "interval", "best"), row[1:])}


RECORDS = Path(__file__).resolve().parents[2] / "results" / "paper" / "recorded"  # the repository's committed paper-scale records


def read_depth_runs(folder=RECORDS) -> DepthRecord:
    """The stored depth sweep in ``folder`` (default: the repository's committed ``results/paper/recorded/``, which the lab
    reads whatever ``LNBOOK_RESULTS_DIR`` says); a missing record raises ``FileNotFoundError`` saying how to make it.
    A run whose recorded commit does not identify its code (:func:`identified_commit`: recorded from a working copy
    with uncommitted changes, or outside a git checkout) goes to ``set_aside``, not to the fits that are counted."""
    path = Path(folder) / DEPTH_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: record it with `python -m lnbook.group_ln.paper_runs --seeds 0` "
                                "from the repository's root (or restore it from git)")
    meta, histories = load_runs(path)
    fits: dict[int, dict[int, float]] = {}
    epochs: dict[int, dict[int, int]] = {}
    set_aside: dict[tuple[int, int], tuple[float, str]] = {}
    for seed in meta["seeds"]:
        for depth in meta["depths"]:
            key = _run_key(depth, seed)
            if key in histories:
                commit = meta.get("provenance", {}).get(key, {}).get("commit", meta.get("commit"))
                if not identified_commit(commit):
                    set_aside[(seed, depth)] = (histories[key].best_accuracy, str(commit))
                    continue
                fits.setdefault(seed, {})[depth] = histories[key].best_accuracy
                epochs.setdefault(seed, {})[depth] = histories[key].epochs_run
    return DepthRecord(meta, fits, epochs, set_aside)


DROP_IN_FILE = "ch05-drop-in-recall.json"
# ch05_drop_in_lab's recall Transformer at paper scale (its at_scale(paper=...) values; the test holds them equal)
DROP_IN_PAPER = {"seeds": 10, "n_train": 10000, "epochs": 30, **RECALL_SETUP}


def run_drop_in_recall(seeds=range(DROP_IN_PAPER["seeds"]), *, n_train: int = DROP_IN_PAPER["n_train"],
                       epochs: int = DROP_IN_PAPER["epochs"], device=None) -> dict:
    """The drop-in lab's recall Transformer runs (:func:`lnbook.group_ln.lab.recall_transformer_runs`, the function
    the lab calls), at the given sizes: ``{"seeds": [...], "LN": [...], "LN-G, 4 groups": [...]}``, the held-out
    accuracy after the last epoch, one per seed."""
    seeds = [int(s) for s in seeds]
    runs = recall_transformer_runs(seeds, n_train=n_train, epochs=epochs, device=device)
    return {"seeds": seeds, **{name: [float(runs[name, s].val_accuracy[-1]) for s in seeds] for name in RECALL_VARIANTS}}


def record_drop_in_recall(folder=RECORDS, seeds=range(DROP_IN_PAPER["seeds"]), *, command: str = "",
                          device=None) -> Path:
    """Run :func:`run_drop_in_recall` at paper scale and store it in ``folder/DROP_IN_FILE`` with its provenance
    (command, commit, date, torch, threads, device, sizes, wall seconds)."""
    start = time.perf_counter()
    result = run_drop_in_recall(seeds, device=device)
    record = {"what": "ch05_drop_in_lab's recall Transformer (LN against LN-G with 4 groups) at paper scale",
              "sizes": dict(DROP_IN_PAPER), "result": result,
              "provenance": {"command": command, "commit": _commit(),
                             "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                             "torch": torch.__version__, "threads": torch.get_num_threads(),
                             "device": str(device or "cpu"), "wall_seconds": round(time.perf_counter() - start, 1)}}
    path = Path(folder) / DROP_IN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def read_drop_in_recall(folder=RECORDS) -> dict:
    """The stored record of :func:`record_drop_in_recall` (``sizes``, ``result``, ``provenance``); a missing record
    raises ``FileNotFoundError`` saying how to make it, one whose sizes are not :data:`DROP_IN_PAPER` or whose
    code is not identified (:func:`identified_commit`) a ``ValueError``."""
    path = Path(folder) / DROP_IN_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: record it with `python -m lnbook.group_ln.paper_runs --drop-in` "
                                "from the repository's root (or restore it from git)")
    record = json.loads(path.read_text())
    if record.get("sizes") != json.loads(json.dumps(DROP_IN_PAPER)):
        raise ValueError(f"{path} was recorded with other sizes than DROP_IN_PAPER: record it again")
    if not identified_commit(record["provenance"]["commit"]):
        raise ValueError(f"{path} was recorded from code that is not identified ({record['provenance']['commit']}): "
                         "record it again from a clean checkout")
    return record


def _main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m lnbook.group_ln.paper_runs",
        description="Record ch05_random_labels_lab's paper-scale depth sweep of LN-G with 16 groups in results/paper/recorded/.")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--depths", type=int, nargs="+", default=list(LAB_PAPER["depths"]))
    parser.add_argument("--folder", default=str(RECORDS), help="the paper-scale results folder (default: the repository's results/paper/recorded)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads, one as in the lab (default: %(default)s)")
    parser.add_argument("--drop-in", action="store_true",
                        help="record ch05_drop_in_lab's recall Transformer at paper scale instead (10 seeds; --seeds ignored)")
    args = parser.parse_args(argv)
    if args.threads < 1:
        raise ValueError(f"--threads must be a positive integer, got {args.threads}")
    torch.set_num_threads(args.threads)
    command = "python -m lnbook.group_ln.paper_runs " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.drop_in:
        folder = args.folder
        print(f"stored in {record_drop_in_recall(folder, command=command.strip())}")
        return
    path = record_depth_runs(args.folder, args.seeds, args.depths, command=command.strip())
    print(f"stored in {path}")


if __name__ == "__main__":
    _main()
