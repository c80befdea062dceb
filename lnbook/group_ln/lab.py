r"""Fitting random labels with linear nets, LN-Nets and LN-G nets (chapter 5).

A *run* trains one network on inputs whose labels were drawn at random, once, and records how much
of the training set it fits (:func:`lnbook.ml.training.train` measures the fit on the whole training
set). Three kinds of network are compared (the LN-Net and the LN-G net of the same depth and width):

* ``"linear"`` — one linear layer from the input to the classes (the harness's ``Linear`` model;
  deeper linear networks compute the same functions, affine maps);
* ``"ln"`` — an LN-Net: ``depth`` times ``Linear -> LayerNorm``, then a linear read-out;
* ``"lng"`` — the same with LN-G, ``groups`` groups per layer (``nn.GroupNorm(groups, width)`` in
  the harness, :class:`lnbook.core.norms.GroupLayerNorm` plus a per-feature affine here).

:data:`OFFICIAL` holds the configuration of the public harness of Ni et al.
(``Whsjrczr/CBWC-cuda``, ``model_exp/cifar/exp/batch-exp.sh`` and ``cifar10-Randomlabel.py``),
value by value; :class:`FitConfig` is one concrete setting (the notebook's ci setting is its own).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import torch

from lnbook.ml.models import mlp
from lnbook.ml.training import History, train
from lnbook.util.stats import SeedCount, count_seeds
from lnbook.util.validation import check_positive_int

__all__ = [
    "OFFICIAL", "FitConfig", "Run", "official_runs", "step_schedule", "make_network", "fit_random_labels",
    "best_fits_over_seeds", "ordering_verdict", "ordering_over_seeds", "random_label_decisions", "drop_in_decisions", "RECALL_SETUP", "RECALL_VARIANTS", "recall_transformer_runs",
    "save_runs", "load_runs",
]

# The harness's sweep (batch-exp.sh), value by value. `groups` includes 6, which does not divide the
# width 256: nn.GroupNorm(6, 256) raises, so those runs of the harness cannot have trained.
# `epochs` is the script's --epochs; its loop runs range(start_epoch + 1, epochs), and the default of
# start_epoch is not in the public snapshot (extension/trainer only as .pyc): 149 epochs if it is 0.
OFFICIAL = {
    "dataset": "CIFAR-10, grayscale 32x32 (ToTensor -> Normalize((0.5,), (0.5,)) -> Grayscale), random labels drawn once",
    "width": 256,
    "depths": (1, 2, 4, 6, 8, 10, 12, 14),
    "groups": (2, 4, 6, 8, 16, 32, 64, 128),
    "lrs": (0.01, 0.03, 0.05, 0.1),
    "batch_size": 128,
    "epochs": 150,
    "optimizer": "sgd",
    "momentum": 0.0,
    "weight_decay": 0.0,
    "lr_step": 20,
    "lr_gamma": 0.5,
    "affine": True,
    "eps": 1e-5,
    "seed": 1,
}


@dataclass(frozen=True)
class FitConfig:
    """One training setting for all networks of a comparison."""

    width: int = 256
    batch_size: int = 128
    epochs: int = 150
    optimizer: str = "sgd"
    lr: float = 0.1
    momentum: float = 0.0
    weight_decay: float = 0.0
    lr_step: int | None = 20  # halve (lr_gamma) every lr_step epochs; None: constant learning rate
    lr_gamma: float = 0.5
    affine: bool = True
    eps: float = 1e-5
    log_every: int = 1

    @classmethod
    def official(cls, lr: float = 0.1) -> "FitConfig":
        """The harness's setting with one of its four learning rates."""
        if lr not in OFFICIAL["lrs"]:
            raise ValueError(f"the harness used the learning rates {OFFICIAL['lrs']}, got {lr}")
        keys = ("width", "batch_size", "epochs", "optimizer", "momentum", "weight_decay", "lr_step", "lr_gamma", "affine", "eps")
        return cls(lr=lr, **{k: OFFICIAL[k] for k in keys})


@dataclass(frozen=True)
class Run:
    """One network of a comparison: ``kind`` in ``linear``/``ln``/``lng``, its depth and groups."""

    kind: str
    depth: int = 4
    groups: int | None = None

    def __post_init__(self):
        if self.kind not in ("linear", "ln", "lng"):
            raise ValueError(f"kind must be 'linear', 'ln' or 'lng', got {self.kind!r}")
        check_positive_int(self.depth, "depth", minimum=0 if self.kind == "linear" else 1)
        if (self.kind == "lng") != (self.groups is not None):
            raise ValueError("groups= is required for kind='lng' and only for it")

    @property
    def label(self) -> str:
        if self.kind == "linear":
            return "linear"
        return f"LN d{self.depth}" if self.kind == "ln" else f"LN-G{self.groups} d{self.depth}"


def official_runs(depth: int = 4, groups_for_depths: int = 32, depth_sweep: bool = True) -> list[Run]:
    """The paper-scale runs: linear, LN-Net and LN-G for every harness group count that divides the
    width 256 (all but 6) at ``depth``, then (``depth_sweep``) LN-Net and LN-G with
    ``groups_for_depths`` groups at the harness's other depths."""
    runs = [Run("linear", 0), Run("ln", depth)]
    runs += [Run("lng", depth, g) for g in OFFICIAL["groups"] if OFFICIAL["width"] % g == 0]
    if depth_sweep:
        runs += [Run(kind, d, groups_for_depths if kind == "lng" else None)
                 for kind in ("ln", "lng") for d in OFFICIAL["depths"] if d != depth]
    return runs


def step_schedule(step: int, gamma: float) -> Callable[[int], float]:
    """The harness's step decay: it calls ``StepLR.step()`` before every epoch, so epoch ``e``
    (0-based) trains with ``gamma ** ((e + 1) // step)`` times the base learning rate."""
    step = check_positive_int(step, "step")
    if not (0 < gamma <= 1):
        raise ValueError(f"gamma must lie in (0, 1], got {gamma}")
    return lambda epoch: gamma ** ((epoch + 1) // step)


def make_network(run: Run, d_in: int, num_classes: int, cfg: FitConfig) -> torch.nn.Module:
    """The network of ``run`` for inputs of width ``d_in`` (PyTorch's default initialisation)."""
    if run.kind == "linear":
        return mlp(d_in, cfg.width, 0, num_classes, norm="none")
    return mlp(
        d_in, cfg.width, run.depth, num_classes, norm=run.kind, groups=run.groups, eps=cfg.eps, affine=cfg.affine
    )


def fit_random_labels(
    X: torch.Tensor,
    y: torch.Tensor,
    runs: list[Run],
    cfg: FitConfig,
    *,
    seed: int = 0,
    device=None,
    progress: bool = True,
    report: bool = True,
) -> dict[str, History]:
    """Train every network of ``runs`` on ``(X, y)`` from the same seed; return their histories by label.

    Each network is built after ``torch.manual_seed(seed)`` and trained with ``cfg`` by
    :func:`lnbook.ml.training.train` (full-set fit every ``cfg.log_every`` epochs, early stop at 100%
    fit, throughput printed at the end of each run when ``report``).
    """
    if not runs:
        raise ValueError("runs is empty: name at least one network to train")
    num_classes = int(y.max()) + 1
    schedule = None if cfg.lr_step is None else step_schedule(cfg.lr_step, cfg.lr_gamma)
    out: dict[str, History] = {}
    for run in runs:
        torch.manual_seed(seed)
        net = make_network(run, X[0].numel(), num_classes, cfg)
        out[run.label] = train(
            net,
            X.reshape(len(X), -1),
            y,
            epochs=cfg.epochs,
            batch_size=cfg.batch_size,
            optimizer=cfg.optimizer,
            lr=cfg.lr,
            momentum=cfg.momentum,
            weight_decay=cfg.weight_decay,
            lr_schedule=schedule,
            seed=seed,
            device=device,
            log_every=cfg.log_every,
            progress=progress,
            report=report,
            label=run.label,
        )
    return out


def best_fits_over_seeds(
    X: torch.Tensor, y: torch.Tensor, settings: list[tuple[Run, float]], cfg: FitConfig, seeds: list[int], *, device=None
) -> dict[tuple[str, float], list[float]]:
    """The best fit of every ``(run, eps)`` in ``settings`` for each seed of ``seeds`` (same data, same
    labels, ``cfg`` with ``eps`` replaced): ``{(label, eps): [fit for seed in seeds]}``."""
    if not settings or not seeds:
        raise ValueError("settings and seeds must both be non-empty")
    out: dict[tuple[str, float], list[float]] = {(r.label, float(e)): [] for r, e in settings}
    for seed in seeds:
        for run, eps in settings:
            h = fit_random_labels(X, y, [run], replace(cfg, eps=eps), seed=seed, device=device, progress=False, report=False)
            out[(run.label, float(eps))].append(h[run.label].best_accuracy)
    return out


def ordering_verdict(fits: dict[str, float], depth: int = 4) -> tuple[float, str]:
    """Judge a random-label comparison against the paper's qualitative claim.

    ``fits`` maps run labels (``"linear"``, ``"LN d<depth>"``, ``"LN-G<G> d<depth>"``) to best fits.
    Returns the best LN-G fit at ``depth`` and the verdict: ``"consistent (reconstruction)"`` when the
    ordering linear < LN-Net < best LN-G = 1 holds, else ``"differs"``. Never ``"reproduced"``: the
    paper's numbers are not available, our labels are another draw, ``LinearModel`` stands in for the
    harness's ``resLinearModel`` and the scheduler is our reading, so only the ordering is compared.
    """
    ln = f"LN d{depth}"
    lng = [v for k, v in fits.items() if k.startswith("LN-G") and k.endswith(f" d{depth}")]
    missing = [k for k in ("linear", ln) if k not in fits] + ([] if lng else [f"LN-G<G> d{depth}"])
    if missing:
        raise ValueError(f"fits lacks the runs {missing}; pass the histories of official_runs()")
    best = max(lng)
    holds = fits["linear"] < fits[ln] < best == 1.0
    return best, "consistent (reconstruction)" if holds else "differs"


def _fractions(values, name: str) -> list[float]:
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a sequence of fits (fractions in [0, 1]), got {type(values).__name__}") from None
    if not out or not all(0.0 <= v <= 1.0 for v in out):
        raise ValueError(f"{name} must hold at least one fit, each in [0, 1], got {out}")
    return out


def ordering_over_seeds(seed_fits: dict[str, list[float]]) -> SeedCount:
    """The seeds in which linear < LN-Net < LN-G = 1, as a :class:`~lnbook.util.stats.SeedCount` (k of n with
    its interval): ``seed_fits`` maps ``"linear"``, ``"ln"`` and ``"lng"`` to the best fit of each seed, in the same
    seed order."""
    keys = ("linear", "ln", "lng")
    if not isinstance(seed_fits, dict) or set(seed_fits) != set(keys):
        raise ValueError(f"seed_fits must map exactly {keys} to the fits of each seed")
    per_seed = [_fractions(seed_fits[k], f"seed_fits[{k!r}]") for k in keys]
    if len({len(v) for v in per_seed}) != 1:
        raise ValueError("seed_fits must hold one fit per seed for each of linear, ln and lng (the same seeds)")
    return count_seeds([a < b < c == 1.0 for a, b, c in zip(*per_seed)])


def random_label_decisions(fits: dict[str, float], seed_fits: dict[str, list[float]], eps_fits: dict[float, float],
                           depth_fits: dict[str, dict[int, float]], *, depth: int = 4, few: float = 0.35) -> dict:
    """The claims chapter 5 makes on the random-label lab, decided the same way at every scale (the lab asserts
    them at ci and at paper scale; the prose states them with the lab's glued set-up).

    ``fits``: best fit per run label of the first run (:func:`ordering_verdict`'s input); ``seed_fits``: for
    ``"linear"``, ``"ln"`` and ``"lng"`` (LN-G with the lab's group count) the best fit of each seed, in the same
    seed order; ``eps_fits``: ``{eps: best fit}`` of the small-group network; ``depth_fits``: ``{"ln": {depth:
    fit}, "lng": {depth: fit}}``. Returns

    * ``"ordering"``: linear < LN-Net < best LN-G = 1 in the first run (:func:`ordering_verdict`);
    * ``"ordering_seeds"``: :func:`ordering_over_seeds` (stated as k of n with its interval, never "every seed";
      the lab asserts ``.some``);
    * ``"eps_increases"``: the small groups' fit rises strictly with every larger eps;
    * ``"pairs_few"``: at the smallest eps they fit less than ``few`` of the labels;
    * ``"lng_fits_at_depth"``: LN-G fits every label at ``depth``, the depth of the main comparison (not "at every
      depth >= 2 tried": at paper scale, in a run on a CPU with the lab's setting and seed, LN-G with 16 groups fell
      short of a full fit at depths 2, 8 and 14 within its epochs while depth 4 fitted);
    * ``"lng_fit_depths"``: the depths tried at which LN-G fits every label, in increasing order (for the prose, which
      glues them instead of stating depths the run did not show);
    * ``"ln_never_fits"``: no LN-Net depth tried fits every label.
    """
    ordering_seeds = ordering_over_seeds(seed_fits)
    if not isinstance(eps_fits, dict) or len(eps_fits) < 2:
        raise ValueError("eps_fits must map at least two eps values to fits")
    eps = sorted(eps_fits)
    if eps[0] <= 0:
        raise ValueError(f"eps values must be > 0, got {eps}")
    eps_values = _fractions([eps_fits[e] for e in eps], "eps_fits")
    if not isinstance(depth_fits, dict) or set(depth_fits) != {"ln", "lng"}:
        raise ValueError('depth_fits must map "ln" and "lng" to {depth: fit}')
    if depth not in depth_fits["lng"] or not depth_fits["ln"]:
        raise ValueError(f"depth_fits needs LN-Net depths and the LN-G fit at depth={depth}")
    _fractions(list(depth_fits["lng"].values()) + list(depth_fits["ln"].values()), "depth_fits")
    return {
        "ordering": ordering_verdict(fits, depth)[1] == "consistent (reconstruction)",
        "ordering_seeds": ordering_seeds,
        "eps_increases": all(a < b for a, b in zip(eps_values, eps_values[1:])),
        "pairs_few": eps_values[0] < few,
        "lng_fits_at_depth": depth_fits["lng"][depth] == 1.0,
        "lng_fit_depths": sorted(d for d, f in depth_fits["lng"].items() if f == 1.0),
        "ln_never_fits": max(depth_fits["ln"].values()) < 1.0,
    }


def drop_in_decisions(cnn_final: dict[str, list[float]], tf_final: dict[str, list[float]], *,
                      solved: float = 0.9) -> dict:
    """Chapter 5's drop-in comparison decided the same way at every scale: held-out accuracies after the last
    epoch, one per seed (same seeds in every list). ``cnn_final`` holds ``"none"``, ``"LN"``, ``"LN-G, 4 groups"``,
    ``"LN-G, 16 groups"``; ``tf_final`` holds ``"LN"`` and ``"LN-G, 4 groups"``. Returns

    * ``"norm_helps"``: the CNN without normalisation has the lowest mean of the four (the one mean claim);
    * ``"lng16_ahead"``, ``"lng4_ahead"``: :class:`~lnbook.util.stats.SeedCount` of the seeds where the CNN with
      LN-G (16 or 4 groups) ends above LN; ``"tf_lng_behind"``: seeds where the Transformer with LN-G ends below
      LN; ``"tf_ln_solved"``, ``"tf_lng_solved"``: seeds above ``solved`` (each stated as k of n with its
      interval: none is a claim about every seed);
    * ``"lng16_gap"``: the mean over seeds of LN-G (16 groups) minus LN on the CNN.
    """
    cnn_keys, tf_keys = ("none", "LN", "LN-G, 4 groups", "LN-G, 16 groups"), ("LN", "LN-G, 4 groups")
    if not isinstance(cnn_final, dict) or set(cnn_final) != set(cnn_keys):
        raise ValueError(f"cnn_final must map exactly {cnn_keys} to the held-out accuracy of each seed")
    if not isinstance(tf_final, dict) or set(tf_final) != set(tf_keys):
        raise ValueError(f"tf_final must map exactly {tf_keys} to the held-out accuracy of each seed")
    cnn = {k: _fractions(cnn_final[k], f"cnn_final[{k!r}]") for k in cnn_keys}
    tf = {k: _fractions(tf_final[k], f"tf_final[{k!r}]") for k in tf_keys}
    if len({len(v) for v in list(cnn.values()) + list(tf.values())}) != 1:
        raise ValueError("every list must hold one accuracy per seed, for the same seeds")
    n = len(cnn["LN"])
    mean = {k: sum(v) / n for k, v in cnn.items()}
    return {
        "norm_helps": mean["none"] < min(m for k, m in mean.items() if k != "none"),
        "lng16_ahead": count_seeds([a > b for a, b in zip(cnn["LN-G, 16 groups"], cnn["LN"])]),
        "lng4_ahead": count_seeds([a > b for a, b in zip(cnn["LN-G, 4 groups"], cnn["LN"])]),
        "lng16_gap": mean["LN-G, 16 groups"] - mean["LN"],
        "tf_lng_behind": count_seeds([a < b for a, b in zip(tf["LN-G, 4 groups"], tf["LN"])]),
        "tf_ln_solved": count_seeds([a > solved for a in tf["LN"]]),
        "tf_lng_solved": count_seeds([a > solved for a in tf["LN-G, 4 groups"]]),
    }


# The drop-in lab's recall Transformer: every size but the number of seeds, training sequences and epochs (which
# the lab sets by scale), and the two norms it compares.
RECALL_SETUP = {"n_test": 1000, "batch_size": 64, "lr": 3e-3, "pairs": 4, "keys": 16, "values": 16, "vocabulary": 32,
                "d_model": 32, "n_heads": 4, "n_layers": 2}
RECALL_VARIANTS = {"LN": {"norm": "ln"}, "LN-G, 4 groups": {"norm": "lng", "groups": 4}}


def recall_transformer_runs(seeds, *, n_train: int, epochs: int, device=None) -> dict[tuple[str, int], History]:
    """The drop-in lab's recall Transformers: for each norm of :data:`RECALL_VARIANTS` and each seed, a
    :class:`lnbook.ml.models.TinyTransformer` (read at the last position) trained with Adam on ``n_train``
    associative-recall sequences (:func:`lnbook.ml.data.associative_recall`, data seed 0) for ``epochs`` epochs and
    validated on ``RECALL_SETUP["n_test"]`` held-out sequences (data seed 1); ``torch.manual_seed(seed)`` before
    building each model. Returns the training histories by ``(norm name, seed)``."""
    from lnbook.ml.data import associative_recall
    from lnbook.ml.models import LastPosition, TinyTransformer
    from lnbook.ml.training import train_for_epochs

    seeds = [int(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must name at least one seed, each once; got {seeds}")
    check_positive_int(n_train, "n_train")
    check_positive_int(epochs, "epochs")
    c = RECALL_SETUP
    task = dict(pairs=c["pairs"], keys=c["keys"], values=c["values"])
    Xs, ys = associative_recall(n_train, **task, seed=0)
    Xt, yt = associative_recall(c["n_test"], **task, seed=1)
    runs = {}
    for name, kw in RECALL_VARIANTS.items():
        for seed in seeds:
            torch.manual_seed(seed)
            model = LastPosition(TinyTransformer(c["vocabulary"], d_model=c["d_model"], n_heads=c["n_heads"],
                                                 n_layers=c["n_layers"], max_len=Xs.shape[1], **kw))
            runs[name, seed] = train_for_epochs(model, Xs, ys, epochs=epochs, batch_size=c["batch_size"],
                                                optimizer="adam", lr=c["lr"], seed=seed, device=device,
                                                validation=(Xt, yt))
    return runs


def save_runs(path, histories: dict[str, History], meta: dict | None = None) -> Path:
    """Write histories (and a ``meta`` dict: data, configuration, device) to a small JSON file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"meta": meta or {}, "runs": {k: h.to_dict() for k, h in histories.items()}}
    path.write_text(json.dumps(payload, indent=1, sort_keys=True, default=_jsonable) + "\n")
    return path


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"cannot store {type(value).__name__} in the results JSON")


def load_runs(path) -> tuple[dict, dict[str, History]]:
    """Read what :func:`save_runs` wrote: ``(meta, histories)``; a malformed file raises ``ValueError``."""
    path = Path(path)
    try:
        payload = json.loads(path.read_text())
        return payload["meta"], {k: History.from_dict(v) for k, v in payload["runs"].items()}
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise ValueError(f"{path} is not a results file written by save_runs ({err}); delete it and re-run") from None

