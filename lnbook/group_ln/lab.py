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
from lnbook.util.validation import check_positive_int

__all__ = [
    "OFFICIAL", "FitConfig", "Run", "official_runs", "step_schedule", "make_network", "fit_random_labels",
    "best_fits_over_seeds", "ordering_verdict", "save_runs", "load_runs",
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

