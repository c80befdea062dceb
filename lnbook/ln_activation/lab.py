r"""LayerNorm as the only activation of a small MLP (chapter 6, after Winsor's "Re-Examining LayerNorm").

* :func:`ln_mlp` — ``Linear -> LN -> ... -> Linear`` with LN over ``features`` neurons: with
  ``features = 4`` every LN output lies on a 2-sphere of the 3-D space :math:`\mathbf 1^\perp`
  (the core map in three dimensions); with ``features = 3``, on a circle;
* :func:`seed_sweep` — train one such network per seed with :func:`lnbook.ml.training.train` and count
  the seeds that fit;
* :func:`norm_outputs`, :func:`complement_coordinates`, :func:`layer_path`,
  :func:`interpolate_path` — the data from layer to layer, embedded in 3-D and aligned, for the
  animation and the small multiples;
* :func:`decision_grid`, :func:`plot_decision_regions` — a 2-D classifier's probabilities on a grid and its
  decision regions drawn over the data;
* :func:`plot_path_small_multiples` — the layer-to-layer path as rows of 3-D panels;
* :func:`digits_comparison` — LN-only, ReLU and linear MLPs on scikit-learn's digits, seed by seed;
* :func:`construction_errors` — the PLN staircase and the ReLU interpolant of a target, with their proved bounds;
  :func:`construction_tables` shows them, every number in one style (:func:`plain_digits`);
* :class:`DropSnapshot`, :func:`drop_snapshot`, :func:`drop_snapshots` — the hidden geometry just before and just
  after a phase transition (from the states that :func:`lnbook.ln_activation.ensemble.seed_sweep_batched` keeps):
  how far the points move on each LN sphere and how far the read-out turns, with a stated criterion for the
  folding hypothesis (:meth:`DropSnapshot.supports_folding`);
* :class:`ReadoutSwap`, :func:`readout_swap` — which side of a drop the read-out is on: the after-drop network with its
  last Linear, or the last LayerNorm's gain and bias and its last Linear, put back to their before-drop values;

The width-3 limit is in :mod:`lnbook.ln_activation.width3`; the basis of :math:`\mathbf 1^\perp` in
:mod:`lnbook.core.geometry`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lnbook.core.geometry import complement_coordinates
from lnbook.core.norms import LayerNorm as BookLayerNorm
from lnbook.core.norms import RMSNorm as BookRMSNorm
from lnbook.ln_activation.shallow_fits import _eval_mode
from lnbook.ml.models import mlp
from lnbook.ml.training import History, predict, train
from lnbook.util.progress import progress_bar
from lnbook.util.validation import check_positive_int

__all__ = [
    "train_kinds_on_targets",
    "pln_eps_sweep",
    "ln_mlp",
    "SeedSweep",
    "seed_sweep",
    "plot_sweep_curves",
    "norm_outputs",
    "layer_path",
    "interpolate_path",
    "point_on_path",
    "plot_drop_criterion",
    "decision_grid",
    "plot_decision_regions",
    "plot_path_small_multiples",
    "digits_comparison",
    "dead_relu_units",
    "construction_errors",
    "plain_digits",
    "construction_tables",
    "DropSnapshot",
    "drop_snapshot",
    "drop_snapshots",
    "steepest_step_snapshot",
    "next_folding_threshold",
    "travel_ratios",
    "ReadoutSwap",
    "readout_swap",
]


def ln_mlp(d_in: int, depth: int, *, features: int = 4, d_out: int = 2, eps: float = 1e-5, affine: bool = True) -> nn.Sequential:
    """``depth`` layers ``Linear(., features) -> LayerNorm(features)``, then ``Linear(features, d_out)``.

    LayerNorm is the only nonlinearity. ``affine=True`` keeps torch's per-feature gain and bias
    (they do not change the functions the network can compute, since the next linear layer can
    absorb them, but they help Adam). Call ``torch.manual_seed`` first: the initialisation is torch's.
    """
    depth = check_positive_int(depth, "depth")
    features = check_positive_int(features, "features", minimum=2)
    return mlp(d_in, features, depth, d_out, norm="ln", eps=eps, affine=affine)


@dataclass
class SeedSweep:
    """Networks trained from several seeds: their histories, and which seeds fit."""

    seeds: list[int]
    histories: list[History]
    models: list[nn.Module] = field(repr=False)
    success_at: float
    states: list[dict] | None = field(default=None, repr=False)

    @property
    def final_accuracies(self) -> list[float]:
        return [h.final_accuracy for h in self.histories]

    @property
    def successes(self) -> list[bool]:
        """Seed by seed: did the final training accuracy reach ``success_at``?"""
        return [a >= self.success_at for a in self.final_accuracies]

    @property
    def n_success(self) -> int:
        return sum(self.successes)

    def best(self) -> int:
        """Index of the seed with the highest final accuracy (the first one on ties)."""
        return int(np.argmax(self.final_accuracies))

    def model_at(self, index: int, epoch: int) -> nn.Module:
        """A copy of run ``index`` with its parameters at logged ``epoch`` (needs ``keep_states=True`` in
        :func:`lnbook.ln_activation.ensemble.seed_sweep_batched`)."""
        import copy

        if self.states is None:
            raise ValueError("this sweep kept no states: run seed_sweep_batched(..., keep_states=True)")
        epochs = self.histories[index].epochs
        if epoch not in epochs:
            raise ValueError(f"epoch {epoch} was not logged; logged epochs are {epochs[0]}, {epochs[1]}, ... {epochs[-1]}")
        state = self.states[epochs.index(epoch)]
        model = copy.deepcopy(self.models[index])
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(state[name][index])
        return model


def seed_sweep(
    make_model: Callable[[], nn.Module],
    X: torch.Tensor,
    y: torch.Tensor,
    seeds,
    *,
    success_at: float = 0.99,
    progress: bool = True,
    label: str = "",
    **train_kwargs,
) -> SeedSweep:
    """For every seed: ``torch.manual_seed(seed)``, build ``make_model()``, train it with
    :func:`lnbook.ml.training.train` (``train_kwargs`` are passed on, with ``seed=seed``).

    ``success_at`` is the training accuracy that counts as "the network learned the task".
    """
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    if not (0 < success_at <= 1):
        raise ValueError(f"success_at must be an accuracy in (0, 1], got {success_at!r}")
    histories, models = [], []
    for seed in progress_bar(seeds, desc=label or "seeds", enabled=bool(progress)):
        torch.manual_seed(seed)
        model = make_model()
        histories.append(train(model, X, y, seed=seed, progress=False, report=False, label=f"{label} seed {seed}", **train_kwargs))
        models.append(model)
    return SeedSweep(seeds, histories, models, success_at)


def plot_sweep_curves(axes, sweep: SeedSweep, window: int) -> int:
    """Loss (log scale) on ``axes[0]`` and accuracy on ``axes[1]`` of every run of ``sweep``, with the
    phase transitions that :func:`lnbook.ln_activation.phases.phase_transitions` finds circled; runs that did not
    succeed are grey; the loss axis labelled by :func:`lnbook.util.plotting.plain_log_ticks` (no crowded minor labels).
    Returns how many runs show at least one transition."""
    from lnbook.ln_activation.phases import phase_transitions
    from lnbook.util.plotting import PALETTE, plain_log_ticks

    n_with = 0
    for i, (h, ok) in enumerate(zip(sweep.histories, sweep.successes)):
        color = PALETTE[i % len(PALETTE)] if ok else "0.7"
        axes[0].semilogy(h.epochs, h.loss, color=color, lw=1.1)
        axes[1].plot(h.epochs, h.accuracy, color=color, lw=1.1)
        found = phase_transitions(h.epochs, h.loss, window=window)
        n_with += bool(found)
        for t in found:
            k = h.epochs.index(t.epoch)
            for ax, values in zip(axes, (h.loss, h.accuracy)):
                ax.plot(t.epoch, values[k], "o", color=color, ms=6, mfc="none", mew=1.5)
    axes[0].set_ylabel("training loss")
    axes[1].set_ylabel("training accuracy")
    for ax in axes:
        ax.set_xlabel("epoch (full-batch Adam step)")
    plain_log_ticks(axes[0])  # under two decades: a few plain values (0.02, 0.05, 0.1, ...), not 6×10⁻¹ 4×10⁻¹ 3×10⁻¹
    return n_with


def _norm_kind(layer: nn.Module) -> str | None:
    """``"ln"`` for torch's or the book's LayerNorm, ``"rms"`` for torch's or the book's RMSNorm, else None."""
    if isinstance(layer, (nn.LayerNorm, BookLayerNorm)):
        return "ln"
    if isinstance(layer, (nn.RMSNorm, BookRMSNorm)):
        return "rms"
    return None


def _normalised(layer: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """What the norm ``layer`` makes of ``h``, before its gain and bias (the book's norms have none)."""
    shape = tuple(layer.normalized_shape) if isinstance(layer, (nn.LayerNorm, nn.RMSNorm)) else h.shape[-1:]
    if _norm_kind(layer) == "ln":
        return F.layer_norm(h, shape, eps=layer.eps)
    return F.rms_norm(h, shape, eps=layer.eps)


def _norm_states(model: nn.Sequential, X: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """``(kind, output before the gain)`` for every LayerNorm and RMSNorm of ``model``, in order."""
    if not isinstance(model, nn.Sequential):
        raise TypeError("model must be an nn.Sequential such as ln_mlp(...) or mlp(..., norm='rms') builds")
    states = []
    h = X
    with _eval_mode(model):  # each submodule's own mode is restored afterwards, also if a layer raises
        for layer in model:
            kind = _norm_kind(layer)
            if kind is not None:
                states.append((kind, _normalised(layer, h)))
            h = layer(h)
    if not states:
        raise ValueError("model has no nn.LayerNorm or nn.RMSNorm layer (nor the book's LayerNorm or RMSNorm)")
    return states


@torch.no_grad()
def norm_outputs(model: nn.Sequential, X: torch.Tensor) -> list[torch.Tensor]:
    r"""The input and the output of every LayerNorm and RMSNorm of ``model``, **before** the norm's gain and bias.

    ``model`` is a ``nn.Sequential`` whose norms are ``nn.LayerNorm`` (as built by :func:`ln_mlp`), ``nn.RMSNorm``
    (``mlp(..., norm="rms")``) or the book's :class:`lnbook.core.norms.LayerNorm` / :class:`~lnbook.core.norms.RMSNorm`.
    Without the affine part, each LN output has mean 0 and lies on (or, for inputs near the line of constant
    vectors, inside) the sphere of radius :math:`\sqrt d` of :math:`\mathbf 1^\perp`; each RMSNorm output lies on
    (or, near 0, inside) the sphere of radius :math:`\sqrt d` of :math:`\mathbb R^d`.
    """
    return [X] + [z for _, z in _norm_states(model, X)]


def _sphere_coordinates(z: torch.Tensor, kind: str) -> torch.Tensor:
    r"""Norm outputs ``z`` (before the gain) on a unit sphere: LN outputs in :func:`complement_coordinates`
    (:math:`\mathbb R^{d-1}`), RMSNorm outputs divided by :math:`\sqrt d` (:math:`\mathbb R^d`, no basis needed)."""
    if kind == "ln":
        return complement_coordinates(z)
    return z / math.sqrt(z.shape[-1])


def _pad3(a: np.ndarray, kind: str = "ln") -> np.ndarray:
    if a.shape[1] > 3:
        if kind == "rms":
            raise ValueError(f"cannot draw RMSNorm over {a.shape[1]} features in 3-D: its outputs lie on the unit sphere "
                             f"of R^{a.shape[1]}, not in a 3-D subspace; use RMSNorm over at most 3 features")
        raise ValueError(f"cannot draw {a.shape[1]}-D points in 3-D; use LN over at most 4 features")
    return np.pad(a, ((0, 0), (0, 3 - a.shape[1])))


def _procrustes(reference: np.ndarray, moving: np.ndarray) -> np.ndarray:
    """The **rotation** R (orthogonal, det R = +1) minimising ||moving @ R - reference|| (Frobenius):
    orthogonal Procrustes with the sign of the last singular direction fixed (Kabsch), so that the
    alignment never mirrors a cloud."""
    U, _, Vt = np.linalg.svd(moving.T @ reference)
    D = np.eye(U.shape[0])
    D[-1, -1] = np.sign(np.linalg.det(U @ Vt)) or 1.0
    return U @ D @ Vt


def layer_path(model: nn.Sequential, X: torch.Tensor, align: bool = True) -> list[np.ndarray]:
    r"""The data from layer to layer as 3-D point clouds: the input, then every LN or RMSNorm output.

    The input is drawn as it is (2-D inputs in the plane :math:`z = 0`); LN outputs in the
    coordinates of :func:`complement_coordinates` (the unit sphere for LN over 4 features, the unit
    circle for 3); RMSNorm outputs (before the gain) divided by :math:`\sqrt d`, as they are (the unit sphere
    of :math:`\mathbb R^3` for RMSNorm over 3 features, the essay's own net ``mlp(2, 3, depth, 2, norm="rms")``;
    over more than 3 features it is refused). Coordinates inside :math:`\mathbf 1^\perp` are defined only up to a
    rotation (the next linear layer can absorb any), so with ``align=True`` every cloud is turned by the rotation
    (det +1) that brings it closest to the previous one (orthogonal Procrustes): the interpolation then
    shows how the layer moves the points, not an arbitrary choice of axes.
    """
    with torch.no_grad():
        states = _norm_states(model, X)
    path = [_pad3(X.detach().double().cpu().numpy())]
    for kind, z in states:
        cloud = _pad3(_sphere_coordinates(z.double(), kind).cpu().numpy(), kind)
        if align:
            cloud = cloud @ _procrustes(path[-1], cloud)
        path.append(cloud)
    return path


def interpolate_path(path: list[np.ndarray], steps: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Linear interpolation between consecutive clouds, ``steps`` frames per layer.

    Returns the frames and their positions ``tau`` (``tau = l`` is exactly cloud ``l``; the last
    frame is the last cloud).
    """
    steps = check_positive_int(steps, "steps")
    if len(path) < 2:
        raise ValueError("a path needs at least two clouds")
    taus = np.linspace(0.0, len(path) - 1, steps * (len(path) - 1) + 1)
    return [point_on_path(path, tau) for tau in taus], taus


def point_on_path(path: list[np.ndarray], tau: float) -> np.ndarray:
    """The cloud at position ``tau`` in ``[0, len(path) - 1]``: ``(1 - s) path[l] + s path[l + 1]``."""
    if not (0 <= tau <= len(path) - 1):
        raise ValueError(f"tau must lie in [0, {len(path) - 1}], got {tau}")
    lo = min(int(math.floor(tau)), len(path) - 2)
    s = tau - lo
    return (1 - s) * path[lo] + s * path[lo + 1]


def decision_grid(model: nn.Module, lim: float = 1.2, n: int = 200) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(xx, yy, p)``: the probability of class 1 of a 2-D, two-class ``model`` on an ``n x n`` grid
    of ``[-lim, lim]^2``."""
    n = check_positive_int(n, "n", minimum=2)
    ticks = torch.linspace(-lim, lim, n, dtype=torch.float64)
    xx, yy = torch.meshgrid(ticks, ticks, indexing="xy")
    param = next(model.parameters(), None)  # a module without parameters: float64 on the CPU
    dtype, device = (torch.float64, "cpu") if param is None else (param.dtype, param.device)
    grid = torch.stack([xx.reshape(-1), yy.reshape(-1)], dim=1).to(dtype=dtype, device=device)
    out = predict(model, grid)
    if out.shape[-1] != 2:
        raise ValueError(f"decision_grid needs a two-class model (2 outputs), got {out.shape[-1]}")
    p = torch.softmax(out.double(), dim=-1)[:, 1].reshape(n, n)
    return xx.cpu().numpy(), yy.cpu().numpy(), p.cpu().numpy()




# --- the hidden geometry across a phase transition ----------------------------------------------


def _unit_rows(a: np.ndarray) -> np.ndarray:
    return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-300)


def _angle_degrees(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Row-wise angle between the directions of ``u`` and ``v`` in degrees: ``2 atan2(|u - v|, |u + v|)`` of the unit
    vectors, accurate near 0 and near 180 degrees, where ``arccos`` of the dot product is not."""
    a, b = _unit_rows(u), _unit_rows(v)
    return np.degrees(2 * np.arctan2(np.linalg.norm(a - b, axis=1), np.linalg.norm(a + b, axis=1)))


def _readout_normal(model: nn.Sequential) -> np.ndarray:
    r"""The normal of the read-out's decision plane in the coordinates of the last LN sphere: the
    direction :math:`Q^\top (\gamma \odot (w_1 - w_0))` (LN's gain moved onto the read-out)."""
    from lnbook.core.geometry import complement_basis

    last, norm = model[-1], model[-2]
    if not (isinstance(last, nn.Linear) and last.out_features == 2 and isinstance(norm, nn.LayerNorm)):
        raise TypeError("the model must end in nn.LayerNorm -> nn.Linear(m, 2), as ln_mlp(..., d_out=2) builds")
    w = (last.weight[1] - last.weight[0]).detach().double().cpu()
    if norm.weight is not None:
        w = w * norm.weight.detach().double().cpu()
    return (complement_basis(len(w)).T @ w).cpu().numpy()


@dataclass(frozen=True)
class DropSnapshot:
    r"""The hidden geometry of one run just before (``before_epoch``) and just after (``after_epoch``) a drop.

    ``clouds_before[l]`` and ``clouds_after[l]`` are the outputs of LN layer ``l + 1`` in the coordinates of
    :func:`complement_coordinates` (on the unit sphere); ``displacement[l]`` is each point's angle (degrees)
    between its two positions on that sphere. Neuron coordinates are the same at both epochs, so no alignment
    is involved. ``flipped``: points misclassified before and classified correctly after; ``kept``: correct at
    both. ``readout_turn``: the angle (degrees) between the read-out's plane normals before and after.
    """

    before_epoch: int
    after_epoch: int
    clouds_before: list[np.ndarray] = field(repr=False)
    clouds_after: list[np.ndarray] = field(repr=False)
    displacement: list[np.ndarray] = field(repr=False)
    flipped: np.ndarray = field(repr=False)
    kept: np.ndarray = field(repr=False)
    readout_turn: float

    def median_displacement(self, which: str = "flipped", layer: int = -1) -> float:
        """Median angular displacement (degrees) of the ``"flipped"`` or the ``"kept"`` points on LN layer ``layer``."""
        if which not in ("flipped", "kept"):
            raise ValueError(f"which must be 'flipped' or 'kept', got {which!r}")
        mask = self.flipped if which == "flipped" else self.kept
        if not mask.any():
            return float("nan")
        return float(np.median(self.displacement[layer][mask]))

    def supports_folding(self, ratio: float = 3.0, min_degrees: float = 20.0, layer: int = -1) -> bool:
        r"""The folding hypothesis's prediction for this drop, as a yes/no criterion: the points that the drop
        corrects travel across the sphere of LN layer ``layer`` (median angle at least ``min_degrees``) and travel
        at least ``ratio`` times as far as the points that were already right (median). No flipped point: False."""
        f, k = self.median_displacement("flipped", layer), self.median_displacement("kept", layer)
        if math.isnan(f):
            return False
        return f >= min_degrees and (math.isnan(k) or f >= ratio * k)

    def critical_ratio(self, min_degrees: float = 20.0, layer: int = -1) -> float:
        r"""The largest ``ratio`` at which :meth:`supports_folding` still says yes for this drop: the ratio of the
        two medians when the corrected points travel at least ``min_degrees`` (``inf`` when no point was right at
        both ends or the kept points did not move), and 0 when the criterion fails at every ratio. So the verdict
        on this drop flips where the threshold crosses this number."""
        f, k = self.median_displacement("flipped", layer), self.median_displacement("kept", layer)
        if math.isnan(f) or f < min_degrees:
            return 0.0
        if math.isnan(k) or k == 0:
            return math.inf
        return f / k


def next_folding_threshold(critical, threshold: float = 3.0) -> tuple[float, int] | None:
    """Below ``threshold``, the largest ratio threshold on a grid of 0.1 at which more drops meet the folding criterion,
    and how many more than at ``threshold``: ``(t, extra)``, from the drops' :meth:`DropSnapshot.critical_ratio`
    values. ``t`` is the largest such ratio **rounded down** to one decimal (a drop meets the criterion when its ratio
    is at least the threshold, so 2.57 must print as 2.5: at 2.6 it would not meet it); ``extra`` counts the ratios in
    ``[t, threshold)`` (0 is "at no threshold", and never counts). ``None`` when no drop has a ratio in
    ``(0, threshold)``."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not threshold > 0 or math.isinf(threshold):
        raise ValueError(f"threshold must be a positive finite number, got {threshold!r}")
    ratios = [float(r) for r in critical]
    if any(math.isnan(r) or r < 0 for r in ratios):
        raise ValueError(f"critical ratios are >= 0 (inf allowed) and never NaN, got {ratios}")
    below = [r for r in ratios if 0 < r < threshold]
    if not below:
        return None
    top = max(below)
    t = round(math.floor(10 * top) / 10, 1)
    if round(t + 0.1, 1) <= top:  # 10 * 2.3 is 22.999...: the floor lands one step low
        t = round(t + 0.1, 1)
    return t, sum(t <= r < threshold for r in below)


def drop_snapshot(sweep: SeedSweep, index: int, before_epoch: int, after_epoch: int, X: torch.Tensor,
                  y: torch.Tensor) -> DropSnapshot:
    """The :class:`DropSnapshot` of run ``index`` of ``sweep`` (kept states) between two logged epochs, on ``(X, y)``."""
    if not before_epoch < after_epoch:
        raise ValueError(f"before_epoch must come before after_epoch, got {before_epoch} and {after_epoch}")
    X = torch.as_tensor(X)
    y = np.asarray(torch.as_tensor(y).cpu()).reshape(-1)
    models = [sweep.model_at(index, e).cpu() for e in (before_epoch, after_epoch)]
    clouds, right = [], []
    for model in models:
        dtype = next(model.parameters()).dtype
        with torch.no_grad():
            states = _norm_states(model, X.to(dtype))
        clouds.append([_sphere_coordinates(z.double(), kind).cpu().numpy() for kind, z in states])
        right.append(predict(model, X.to(dtype)).argmax(-1).cpu().numpy() == y)
    return DropSnapshot(
        before_epoch=int(before_epoch), after_epoch=int(after_epoch), clouds_before=clouds[0], clouds_after=clouds[1],
        displacement=[_angle_degrees(a, b) for a, b in zip(clouds[0], clouds[1])],
        flipped=~right[0] & right[1], kept=right[0] & right[1],
        readout_turn=float(_angle_degrees(_readout_normal(models[0])[None], _readout_normal(models[1])[None])[0]),
    )


def drop_snapshots(sweep: SeedSweep, X: torch.Tensor, y: torch.Tensor, *, window: int) -> list[tuple[int, "object", DropSnapshot]]:
    """For every run of ``sweep`` that succeeded and every phase transition in it (found by
    :func:`lnbook.ln_activation.phases.phase_transitions` with ``window``): ``(run index, transition, snapshot)``,
    the snapshot taken at the transition's ``start_epoch`` and ``end_epoch`` (the steep run, extended by the window)."""
    from lnbook.ln_activation.phases import phase_transitions

    found = []
    for i, (h, ok) in enumerate(zip(sweep.histories, sweep.successes)):
        if not ok:
            continue
        for t in phase_transitions(h.epochs, h.loss, window=window):
            found.append((i, t, drop_snapshot(sweep, i, t.start_epoch, t.end_epoch, X, y)))
    return found


def steepest_step_snapshot(sweep: SeedSweep, index: int, transition, X: torch.Tensor, y: torch.Tensor) -> DropSnapshot:
    """The :class:`DropSnapshot` of run ``index`` over the one logged step that ends where ``transition`` (a
    :class:`lnbook.ln_activation.phases.Transition` of that run) is steepest: from the last logged epoch before
    ``transition.epoch`` to it. The narrow counterpart of :func:`drop_snapshots`' interval (the steep stretch
    extended by the window), over which the points that were right at both ends have less time to drift."""
    epochs = [int(e) for e in sweep.histories[index].epochs]
    if int(transition.epoch) not in epochs:
        raise ValueError(f"epoch {transition.epoch} of the transition was not logged in run {index}: pass a transition "
                         "found in that run's history")
    before = [e for e in epochs if e < int(transition.epoch)]
    if not before:
        raise ValueError(f"no logged epoch before {transition.epoch} in run {index}: the steepest step has no start")
    return drop_snapshot(sweep, index, max(before), int(transition.epoch), X, y)


def travel_ratios(snapshots, layer: int = -1) -> tuple[list[tuple[float, int]], int]:
    """Drop by drop, the ratio of the median travel of the corrected points to that of the points right at both
    ends, with the number of corrected points, sorted by ratio, for every snapshot where both medians exist; and
    the number of snapshots where the ratio is undefined (a drop that corrects no point, or leaves none right at
    both ends): these count in neither direction and are left out, never compared as NaN."""
    ratios, undefined = [], 0
    for s in snapshots:
        if not isinstance(s, DropSnapshot):
            raise TypeError(f"travel_ratios takes DropSnapshot objects, got {type(s).__name__}")
        f, k = s.median_displacement("flipped", layer), s.median_displacement("kept", layer)
        if math.isnan(f) or math.isnan(k):
            undefined += 1
        else:  # kept points that did not move: the corrected points travel infinitely further
            ratios.append((f / k if k > 0 else math.inf, int(s.flipped.sum())))
    return sorted(ratios), undefined


@dataclass(frozen=True)
class ReadoutSwap:
    r"""The after-drop network with parts of its read-out side put back to their before-drop values (hybrids).

    ``accuracy_before`` and ``accuracy_after``: the two snapshots' accuracies; ``corrected``: how many points the drop
    corrects (wrong before, right after). Hybrid (a), ``last_linear_*``: the after-drop network with the before-drop
    last Linear. Hybrid (b), ``norm_affine_*``: the same with the last LayerNorm's gain and bias put back too, so that
    only the layers up to the last LayerNorm's normalisation are after-drop. ``*_accuracy`` is the hybrid's accuracy,
    ``*_share`` the share of the corrected points it classifies right (NaN when the drop corrects none): near 1, the
    put-back part does not matter for the points the drop corrects; well below 1, that part carries that much of
    the drop. The folding criterion (:meth:`DropSnapshot.supports_folding`) reads positions on the sphere, before the
    gain and bias, and so cannot see what hybrid (b) measures beyond hybrid (a).
    """

    accuracy_before: float
    accuracy_after: float
    corrected: int
    last_linear_accuracy: float
    last_linear_share: float
    norm_affine_accuracy: float
    norm_affine_share: float


def _ln_readout_ends(model: nn.Module, name: str) -> tuple[nn.LayerNorm, nn.Linear]:
    if not (isinstance(model, nn.Sequential) and len(model) >= 2 and isinstance(model[-1], nn.Linear)
            and isinstance(model[-2], nn.LayerNorm)):
        raise TypeError(f"{name} must be an nn.Sequential ending in nn.LayerNorm -> nn.Linear, as ln_mlp builds, "
                        f"got {type(model).__name__}")
    if model[-2].weight is None or model[-2].bias is None:
        raise ValueError(f"the last LayerNorm of {name} has no gain and bias (affine=False): build it with "
                         "ln_mlp(..., affine=True), or swap the last Linear by hand")
    return model[-2], model[-1]


def readout_swap(before: nn.Module, after: nn.Module, X: torch.Tensor, y: torch.Tensor) -> ReadoutSwap:
    r"""Swap the read-out side between the two snapshots of a drop: the :class:`ReadoutSwap` of ``after`` with (a) the
    last Linear of ``before`` and (b) the last LayerNorm's gain and bias and the last Linear of ``before``, on ``(X, y)``.

    ``before`` and ``after`` are two states of one :func:`ln_mlp` network (:meth:`SeedSweep.model_at` at a drop's
    ``before_epoch`` and ``after_epoch``); neither is changed. Exact: each hybrid is a copy of ``after`` whose
    swapped parameters are copied bit for bit from ``before``, evaluated in the networks' own dtype.
    """
    import copy

    norm_b, last_b = _ln_readout_ends(before, "before")
    norm_a, last_a = _ln_readout_ends(after, "after")
    if (last_b.weight.shape != last_a.weight.shape or norm_b.weight.shape != norm_a.weight.shape
            or len(before) != len(after)):
        raise ValueError("before and after must be two states of one network (same layers and shapes), "
                         f"got {before} and {after}")
    X = torch.as_tensor(X)
    y = np.asarray(torch.as_tensor(y).cpu()).reshape(-1)
    if X.ndim != 2 or len(X) != len(y):
        raise ValueError(f"X must be (n, d) with one label in y per row, got X {tuple(X.shape)} and {len(y)} labels")

    def right(model: nn.Module) -> np.ndarray:  # computed on the model's device, returned on the CPU
        return predict(model, X.to(next(model.parameters()).dtype)).argmax(-1).cpu().numpy() == y

    linear_only = copy.deepcopy(after)
    linear_only[-1].load_state_dict(last_b.state_dict())
    with_affine = copy.deepcopy(linear_only)
    with_affine[-2].load_state_dict(norm_b.state_dict())
    r_before, r_after, r_a, r_b = (right(m) for m in (before, after, linear_only, with_affine))
    corrected = ~r_before & r_after
    n = int(corrected.sum())

    def share(r: np.ndarray) -> float:
        return float(r[corrected].mean()) if n else float("nan")

    return ReadoutSwap(
        accuracy_before=float(r_before.mean()), accuracy_after=float(r_after.mean()), corrected=n,
        last_linear_accuracy=float(r_a.mean()), last_linear_share=share(r_a),
        norm_affine_accuracy=float(r_b.mean()), norm_affine_share=share(r_b),
    )


# --- figures and the digits comparison ------------------------------------------------------------


def plot_decision_regions(ax, model: nn.Module, X: torch.Tensor, y: torch.Tensor, text: str = "", lim: float = 1.25,
                          n: int = 240) -> None:
    """The two classes' regions of a 2-D, two-class ``model`` on ``[-lim, lim]^2`` (shaded, with the boundary),
    the data on top, and ``text`` as the panel's title (above it: in a corner the boundary ran through it)."""
    from lnbook.util.plotting import MIN_FONT_PT, PALETTE

    xx, yy, p = decision_grid(model, lim=lim, n=n)
    ax.contourf(xx, yy, p, levels=[0, 0.5, 1], colors=[PALETTE[0], PALETTE[1]], alpha=0.18)
    ax.contour(xx, yy, p, levels=[0.5], colors="0.3", linewidths=1)
    labels = np.asarray(torch.as_tensor(y).cpu()).reshape(-1)
    ax.scatter(X[:, 0], X[:, 1], c=np.where(labels == 0, PALETTE[0], PALETTE[1]), s=3)
    ax.set_aspect("equal")
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_title(text, fontsize=MIN_FONT_PT)  # above the panel, where no boundary crosses it; readable in the page


def plot_drop_criterion(ax, snapshots, ratio: float = 3.0, min_degrees: float = 20.0, color=None):
    """Each drop of ``snapshots`` (:class:`DropSnapshot`) as a point: the median travel of the points right at both
    ends (x) against that of the corrected points (y), drawn on top of the shaded region where
    :meth:`DropSnapshot.supports_folding` holds, ``y >= max(min_degrees, ratio * x)`` (exactly that region, bounded
    by the dotted line ``y = ratio * x``), with limits that show every point. Returns the scatter; a drop whose
    medians are not both finite (no point corrected or none kept) cannot be placed and is refused."""
    from matplotlib.patches import Polygon

    from lnbook.util.plotting import PALETTE

    snapshots = list(snapshots)
    if not snapshots:
        raise ValueError("snapshots must hold at least one drop")
    if not (ratio > 0 and min_degrees >= 0):
        raise ValueError(f"ratio must be positive and min_degrees non-negative, got {ratio!r} and {min_degrees!r}")
    xy = np.array([[s.median_displacement("kept"), s.median_displacement("flipped")] for s in snapshots], dtype=float)
    if not np.isfinite(xy).all():
        bad = [i for i, row in enumerate(xy) if not np.isfinite(row).all()]
        raise ValueError(f"drops {bad} have no corrected or no kept points, so no place on this plot; leave them out "
                         "and say so in the text")
    x_max = 1.15 * max(xy[:, 0].max(), min_degrees / ratio, 1.0)
    y_max = 1.15 * max(xy[:, 1].max(), min_degrees, 1.0)
    corners = sorted({0.0, min_degrees / ratio, y_max / ratio, x_max})
    lower = [(x, min(max(min_degrees, ratio * x), y_max)) for x in corners if x <= x_max]
    ax.add_patch(Polygon([(0.0, y_max)] + lower + [(x_max, y_max)], closed=True, color="0.9", lw=0, zorder=0,
                         label=f"criterion: $y \\geq \\max({min_degrees:g}, {ratio:g}x)$"))
    ax.plot([0, min(x_max, y_max / ratio)], [0, min(ratio * x_max, y_max)], "k:", lw=1, zorder=1)
    points = ax.scatter(xy[:, 0], xy[:, 1], color=PALETTE[2] if color is None else color, zorder=3, s=24,
                        edgecolors="k", linewidths=0.5)
    ax.set_xlim(0, x_max)
    ax.set_ylim(0, y_max)
    return points


def plot_path_small_multiples(path: list[np.ndarray], colors, names: list[str], taus, point_size: float = 1.5,
                              per_row: int = 3):
    """One 3-D panel per position ``tau`` along ``path`` (``names[l]`` labels cloud ``l``; a half-way position is
    labelled "halfway to" the next), at most ``per_row`` to a row (3; 2 draws each sphere half the column wide), so that
    the figure is the book's column wide and its labels readable there (:func:`lnbook.util.plotting.readability_problems`).
    Returns the figure."""
    import matplotlib.pyplot as plt

    from lnbook.util.plotting import COLUMN_WIDTH_IN, MIN_FONT_PT, draw_cloud_3d

    if len(names) != len(path):
        raise ValueError(f"names must label every cloud of the path: {len(names)} names for {len(path)} clouds")
    if isinstance(per_row, bool) or not isinstance(per_row, int) or per_row < 1:
        raise ValueError(f"per_row must be a whole number of panels >= 1, got {per_row!r}")
    cols = min(per_row, len(taus))
    rows = -(-len(taus) // cols)
    panel = COLUMN_WIDTH_IN / per_row
    label_in = 0.15  # a strip under each panel for its label, clear of the sphere
    fig = plt.figure(figsize=(panel * cols, (panel + label_in) * rows))
    for i, tau in enumerate(taus):
        ax = fig.add_subplot(rows, cols, i + 1, projection="3d")
        # zoom: at 1 matplotlib draws the unit sphere ~60% of the panel (~110 px in the page); at 1.4, ~85%
        draw_cloud_3d(ax, point_on_path(path, tau), colors, size=point_size, zoom=SMALL_MULTIPLES_ZOOM)
        label = names[int(tau)] if float(tau).is_integer() else f"halfway to {names[int(tau) + 1]}"
        ax.text2D(0.5, 0.04, label, transform=ax.transAxes, ha="center", va="top",
                  fontsize=MIN_FONT_PT + 1)
    fig.subplots_adjust(left=0, right=1, bottom=label_in / (panel + label_in) / rows, top=1, wspace=0,
                        hspace=label_in / panel)
    return fig


SMALL_MULTIPLES_ZOOM = 1.4


DIGITS_KINDS = {"LN only": dict(norm="ln", affine=True), "ReLU": dict(norm="none", activation="relu"),
                "linear": dict(norm="none")}


def digits_comparison(X_train, y_train, X_test, y_test, *, widths=(8, 64), seeds=(0, 1, 2), epochs: int = 30,
                      lr: float = 3e-3, device=None) -> dict[tuple[int, str], np.ndarray]:
    """``{(width, kind): array (seeds, 2)}`` of (final training accuracy, test accuracy) for the MLPs
    ``mlp(64, width, 2, 10, ...)`` of :data:`DIGITS_KINDS` (LN as the only nonlinearity, ReLU, none), each trained
    from every seed with Adam on mini-batches of 64 for ``epochs`` epochs."""
    from lnbook.ml.training import evaluate

    epochs = check_positive_int(epochs, "epochs")
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    out = {}
    for width in widths:
        for name, kw in DIGITS_KINDS.items():
            rows = []
            for seed in seeds:
                torch.manual_seed(seed)
                net = mlp(X_train.shape[1], int(width), 2, int(torch.as_tensor(y_train).max()) + 1, **kw)
                h = train(net, X_train, y_train, epochs=epochs, batch_size=64, optimizer="adam", lr=lr, seed=seed,
                          log_every=epochs, stop_at_fit=False, progress=False, report=False, device=device)
                dev = next(net.parameters()).device
                rows.append((h.final_accuracy, evaluate(net, X_test.to(dev), y_test.to(dev))[1]))
            out[(int(width), name)] = np.array(rows)
    return out


def dead_relu_units(net: nn.Sequential, X) -> list[int]:
    """For each ``nn.ReLU`` of ``net`` (an ``nn.Sequential`` applied layer by layer), how many of its units are
    **dead** on ``X``: zero on every row of ``X``, so that no gradient reaches their incoming weights from these
    inputs. The net is run in eval mode (dropout off, batch norm on its running statistics, which are not changed),
    and each module's mode is restored. Raises if the net has no ReLU."""
    if not isinstance(net, nn.Sequential):
        raise TypeError(f"dead_relu_units needs an nn.Sequential applied layer by layer, got {type(net).__name__}")
    if not any(type(m) is nn.ReLU for m in net):
        raise ValueError("the net has no nn.ReLU: there are no ReLU units to count")
    p = next(net.parameters(), None)
    x = torch.as_tensor(X)
    if x.ndim != 2 or len(x) == 0:
        raise ValueError(f"X must be a non-empty (n, features) batch, got shape {tuple(x.shape)}")
    if p is not None:
        x = x.to(device=p.device, dtype=p.dtype)
    dead = []
    with torch.no_grad(), _eval_mode(net):  # the function the net computes; batch-norm statistics untouched
        for m in net:
            x = m(x)
            if type(m) is nn.ReLU:
                dead.append(int(((x > 0).sum(0) == 0).sum()))
    return dead


def construction_errors(g, ks, *, lipschitz: float, eps: float = 1e-5, second_derivative: float | None = None,
                        interval=(-1.0, 1.0)) -> list[dict]:
    r"""For every ``k`` of ``ks``: the sup error of the PLN staircase with ``k`` steps (``2k`` neurons, slope from
    :func:`~lnbook.ln_activation.staircase.step_slope_for`) and of the ReLU interpolant at ``k + 1`` nodes
    (``k`` neurons), each beside its proved bound (``second_derivative``: a bound on ``|g''|`` for the ReLU's
    second-order bound). Each row also gives the staircase's ``slope`` and its smoothing width
    :math:`\sqrt\varepsilon/s` as a fraction of the cell :math:`h` (``width_per_cell``): the error's rate in
    :math:`k` depends on whether that fraction changes (slope floored at 1) or not (slope above its floor)."""
    from lnbook.ln_activation.shallow_fits import sup_error
    from lnbook.ln_activation.staircase import (
        pln_step_network, relu_error_bound, relu_interpolant_network, step_error_bound, step_slope_for,
    )

    rows = []
    for k in ks:
        k = check_positive_int(k, "k")
        s = step_slope_for(k, interval, eps=eps)
        rows.append(dict(
            k=k, slope=s, width_per_cell=math.sqrt(eps) / s / ((interval[1] - interval[0]) / k),
            pln_neurons=2 * k, pln=sup_error(pln_step_network(g, k, interval, slope=s, eps=eps), g, interval),
            pln_bound=step_error_bound(lipschitz, k, interval, slope=s, eps=eps),
            relu_neurons=k, relu=sup_error(relu_interpolant_network(g, k, interval), g, interval),
            relu_bound=relu_error_bound(lipschitz, k, interval, second_derivative=second_derivative),
        ))
    return rows


def plain_digits(value, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits in plain decimals, trailing zeros kept, for every size: ``"1.00"``,
    ``"0.0525"``, ``"0.000301"`` (not ``"3.01×10⁻⁴"``), so that a column of errors spanning several decades reads in
    one style (issue 33: the construction table mixed 0.00120 with 3.01×10⁻⁴); a minus sign, ``"0"`` for zero.
    Refuses NaN, infinities and ``digits < 1``.

    >>> plain_digits(1.0), plain_digits(0.052512), plain_digits(3.0143e-4), plain_digits(-2.5, 2)
    ('1.00', '0.0525', '0.000301', '−2.5')
    """
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 1:
        raise ValueError(f"plain_digits needs a whole number of digits >= 1, got {digits!r}")
    if isinstance(value, bool):
        raise TypeError(f"plain_digits needs a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"plain_digits needs a finite number, got {value!r}")
    if value == 0:
        return "0"
    exponent = int(format(abs(value), f".{digits - 1}e").split("e")[1])  # of the value rounded to its digits
    return ("−" if value < 0 else "") + format(abs(value), f".{max(0, digits - 1 - exponent)}f")


def construction_tables(construction: dict) -> dict:
    """The lab's tables of :func:`construction_errors`, one per target (``{name: Table}`` for ``construction[name]``):
    one row per number of steps ``k``, the PLN staircase's and the ReLU interpolant's sup error, each beside its proved
    bound, every number by :func:`plain_digits` (one style in each column, three significant digits). The lab names
    the target above its table: a target column repeated the same name in every row and made the table wrap
    (screenshot read, issue 33)."""
    from lnbook.util.tables import Table

    return {name: Table([[r["k"], *(plain_digits(r[key]) for key in ("pln", "pln_bound", "relu", "relu_bound"))]
                         for r in rows],
                        ["steps k", "PLN error", "PLN bound", "ReLU error", "ReLU bound"])
            for name, rows in construction.items()}


def train_kinds_on_targets(kinds: dict, targets: dict, widths, seeds, *, steps: int, lr: float = 3e-3,
                           eval_points: int = 40 * 256, device=None, progress: bool = True) -> tuple[dict, dict]:
    """The parallel-LN lab's training: every kind of ``kinds`` (a label and the keyword arguments of one net of
    :func:`~lnbook.ln_activation.shallow_fits.train_shallow_net_specs`, e.g. ``dict(kind="pln", group_size=2)``), every
    width of ``widths`` that the kind's groups fit (a multiple of the group size, at least two groups) and every seed,
    fitted to each target of ``targets`` (a name and its function). All nets of one target train side by side in one
    run, each as if alone up to float rounding. A progress bar over the targets (silent under ``LNBOOK_PROGRESS=0``,
    as the book's build runs the lab; ``progress=False`` turns it off).

    Returns ``trained``, keyed ``(target name, kind label)``: for each width the
    :func:`~lnbook.ln_activation.shallow_fits.fit_error` of every seed on ``eval_points`` points; and ``nets``, keyed by
    target name: the fitted nets keyed ``(kind label, width, seed)``."""
    from lnbook.ln_activation.shallow_fits import fit_error, train_shallow_net_specs
    from lnbook.util.progress import progress_bar

    seeds = tuple(seeds)
    trained, nets = {}, {}
    for name in progress_bar(list(targets), desc="targets", enabled=progress):
        specs = {(label, w, s): dict(width=w, seed=s, **kw) for label, kw in kinds.items() for w in widths for s in seeds
                 if w % kw.get("group_size", 1) == 0 and w >= 2 * kw.get("group_size", 1)}
        fitted = dict(zip(specs, train_shallow_net_specs(specs.values(), targets[name], steps=steps, lr=lr, device=device)))
        nets[name] = fitted
        for label in kinds:
            trained[(name, label)] = {w: [fit_error(fitted[(label, w, s)], targets[name], n=eval_points) for s in seeds]
                                      for w in widths if (label, w, seeds[0]) in fitted}
    return trained, nets


def pln_eps_sweep(eps_grid, width: int, seeds, target, *, steps: int, group_sizes=(2, 8), reuse: dict | None = None,
                  lr: float = 3e-3, eval_points: int = 40 * 256, device=None) -> tuple[dict, dict]:
    """PLN nets of ``width`` neurons with groups of each size of ``group_sizes`` fitted to ``target`` at every
    :math:`\varepsilon` of ``eps_grid`` and every seed, side by side in one run (each as if alone up to float
    rounding); ``reuse`` gives nets already trained, keyed ``(eps, group size, seed)`` (the lab's nets at
    :math:`10^{-5}`), which are not trained again.

    Returns the sup errors, keyed ``(eps, group size)`` (an array over the seeds), and, when groups of 2 are among the
    sizes, the transition half-widths of every trained pair at each :math:`\varepsilon`
    (:func:`~lnbook.ln_activation.staircase.pln_pair_widths`, all seeds together)."""
    from lnbook.ln_activation.shallow_fits import fit_error, train_shallow_net_specs
    from lnbook.ln_activation.staircase import pln_pair_widths

    seeds = tuple(seeds)
    nets = dict(reuse or {})
    specs = [dict(kind="pln", width=width, seed=s, eps=e, group_size=m) for e in eps_grid for m in group_sizes
             for s in seeds if (e, m, s) not in nets]
    nets.update(zip([(sp["eps"], sp["group_size"], sp["seed"]) for sp in specs],
                    train_shallow_net_specs(specs, target, steps=steps, lr=lr, device=device)))
    errors = {(e, m): np.array([fit_error(nets[(e, m, s)], target, n=eval_points).sup for s in seeds])
              for e in eps_grid for m in group_sizes}
    pair_widths = ({e: np.concatenate([pln_pair_widths(nets[(e, 2, s)]) for s in seeds]) for e in eps_grid}
                   if 2 in group_sizes else {})
    return errors, pair_widths
