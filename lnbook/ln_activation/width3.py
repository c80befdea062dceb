r"""The width-3 limit of LN-MLPs (chapter 6): a two-layer width-3 LN-Net with :math:`\varepsilon = 0` sees a
planar input only through its direction from one point, the apex.

* :func:`width3_apex` — the apex :math:`x_0 = -M^{-1} c` of a first layer ``Linear(2, 3)``;
* :func:`sign_changes_on_circle` — how often a score changes sign around a point;
* :func:`best_sector_rule_accuracy` — the best accuracy of a rule that depends only on the direction from an apex;
* :func:`search_sector_apex` — a search over apexes (grid, far apexes, batched local refinement): the best rule it
  finds is a **lower bound** on the best four-sector rule over all apexes;
* :func:`with_eps` — the same LN-MLP function with another :math:`\varepsilon`, by the rescaling identity
  :math:`\mathrm{LN}_\varepsilon(\lambda h) = \mathrm{LN}_{\varepsilon/\lambda^2}(h)`: for :math:`\varepsilon > 0` the
  function class of an LN-MLP does not depend on :math:`\varepsilon` (LayerNorm, RMSNorm and parallel LayerNorm, in
  any module tree torch.fx can trace, each placed after its Linear by the traced graph; what it cannot prove raises).
"""

from __future__ import annotations

import copy
import math
import re
import sys
from typing import Callable

import numpy as np
import torch
import torch.fx
from torch import nn

from lnbook.core.geometry import complement_basis
from lnbook.core.norms import GroupLayerNorm, ParallelLayerNorm
from lnbook.core.norms import LayerNorm as BookLayerNorm
from lnbook.core.norms import RMSNorm as BookRMSNorm
from lnbook.util.validation import check_positive_int

__all__ = ["width3_apex", "sign_changes_on_circle", "best_sector_rule_accuracy", "search_sector_apex", "with_eps"]

def width3_apex(first: nn.Linear) -> np.ndarray:
    r"""The point :math:`x_0 = -M^{-1} c` from which a width-3 LN-Net sees a planar input.

    For ``first = Linear(2, 3)`` with weight :math:`W` and bias :math:`b`, :math:`M = Q^\top W` and
    :math:`c = Q^\top b` with :math:`Q` = :func:`complement_basis` (3): the first LN output depends
    only on the direction of :math:`M(x - x_0)` (at :math:`\varepsilon = 0`). Raises if :math:`M` is singular.
    """
    if not isinstance(first, nn.Linear) or first.in_features != 2 or first.out_features != 3:
        raise ValueError("width3_apex needs the first layer of a width-3 LN-Net on planar inputs: nn.Linear(2, 3)")
    Q = complement_basis(3)
    M = Q.T @ first.weight.detach().double().cpu()
    c = Q.T @ (first.bias.detach().double().cpu() if first.bias is not None else torch.zeros(3, dtype=torch.float64))
    if abs(float(torch.linalg.det(M))) < 1e-12 * float(M.abs().max()) ** 2:
        raise ValueError("the first layer's 2x2 map M = Q^T W is singular: the network has no apex")
    return (-torch.linalg.solve(M, c)).cpu().numpy()


def sign_changes_on_circle(score: Callable[[torch.Tensor], torch.Tensor], centre, radius: float, n: int = 4096, *,
                           nonfinite: str = "raise") -> int:
    """How often ``score`` (a function of ``(m, 2)`` float64 points) changes sign on the circle of
    ``radius`` around ``centre``, sampled at ``n`` equally spaced angles (cyclically); samples where the score is 0
    are skipped.

    A NaN or infinite score (at :math:`\\varepsilon = 0` a LayerNorm whose input is constant gives NaN) has no sign:
    by default (``nonfinite="raise"``) it raises a ValueError saying how many samples and at which angles;
    ``nonfinite="drop"`` skips those samples too and counts the changes among the finite ones.
    """
    n = check_positive_int(n, "n", minimum=3)
    if nonfinite not in ("raise", "drop"):
        raise ValueError(f'nonfinite must be "raise" or "drop", got {nonfinite!r}')
    phi = torch.arange(n, dtype=torch.float64) * (2 * math.pi / n)
    pts = torch.as_tensor(np.asarray(centre, dtype=float)) + radius * torch.stack([phi.cos(), phi.sin()], dim=1)
    values = score(pts).detach().double().cpu().numpy().reshape(-1)
    if len(values) != n:
        raise ValueError(f"score must give one value per point: {n} points gave {len(values)} values")
    finite = np.isfinite(values)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        if nonfinite == "raise":
            shown = ", ".join(f"{phi[i].item():.4g}" for i in bad[:5]) + (", ..." if len(bad) > 5 else "")
            raise ValueError(
                f"score is NaN or infinite at {len(bad)} of the {n} samples on the circle of radius {radius!r} around "
                f"{tuple(np.asarray(centre, dtype=float).tolist())}, at angle(s) {shown} (radians): such a sample has "
                "no sign, and counting it would add spurious changes. Move or resize the circle, or pass "
                'nonfinite="drop" to count the changes among the finite samples only')
    s = np.sign(values[finite])
    s = s[s != 0]
    if len(s) == 0:
        return 0
    return int(np.sum(s != np.roll(s, 1)))


#: Angles (radians) closer than this around an apex are one ray (one label) in :func:`best_sector_rule_accuracy`.
ANGLE_TIE = 1e-9
#: A point closer to the apex than this times the size of the coordinates (max |x_i| + max |apex|) has no
#: direction (counted wrong). It keeps the rounding of the angles of the other points below ANGLE_TIE.
APEX_TIE = 1e-6


def best_sector_rule_accuracy(X, y, apexes, changes: int = 4) -> np.ndarray:
    r"""For every apex :math:`x_0`, the best training accuracy of a two-class rule that depends only on
    the direction of :math:`x - x_0` and changes class at most ``changes`` times around :math:`x_0`.

    The points are sorted by angle around the apex and the best labelling of that sequence with at
    most ``changes`` changes (read linearly from angle :math:`-\pi`) is found by dynamic programming, for
    all apexes at once. For even ``changes`` a labelling of the cycle has at most ``changes`` cyclic changes
    exactly when its linear reading has at most ``changes`` (the cyclic count is the linear one plus one when
    the ends differ, and is even), and any labelling of the sorted points is realised by a rule with
    boundaries between consecutive angles. Points on one ray from the apex (equal angles, up to
    :data:`ANGLE_TIE` radians, as on lattice data) get one label, as any direction rule gives them; a point at
    the apex (within :data:`APEX_TIE` of it, relative to the size of the coordinates measured from the data's
    midrange, so that translating data and apexes together changes nothing) has no direction and counts as
    wrong; the order is cut at its widest angular gap, so no ray is split by the cut. So the value is the
    **exact** best accuracy of such a rule with that apex on data in general position, and on any data an
    accuracy that some such rule attains (near-ties within :data:`ANGLE_TIE` are merged, which can only lower
    it). An odd ``changes`` raises (at most :math:`2k+1` cyclic changes is at most :math:`2k`).
    """
    X = np.asarray(X, dtype=float)
    y = np.asarray(y).reshape(-1)
    apexes = np.asarray(apexes, dtype=float).reshape(-1, 2)
    if X.ndim != 2 or X.shape[1] != 2 or len(X) != len(y):
        raise ValueError("X must have shape (n, 2) and y shape (n,)")
    if not set(np.unique(y).tolist()) <= {0, 1}:
        raise ValueError("y must hold two classes, 0 and 1")
    if not np.isfinite(X).all():
        bad = int((~np.isfinite(X).all(axis=1)).sum())
        raise ValueError(f"X holds {bad} point(s) with a NaN or infinite coordinate: such a point has no direction "
                         "from any apex, so no sector rule classifies it; drop or impute those points first")
    if not np.isfinite(apexes).all():
        raise ValueError("apexes must be finite (a NaN or infinite apex has no directions); drop those apexes")
    changes = check_positive_int(changes, "changes", minimum=0)
    if changes % 2:
        raise ValueError(f"changes must be even (the number of class changes around a closed curve is even; the DP is "
                         f"exact only for even counts), got {changes}: pass {changes - 1} for at most {changes}")
    if len(X):  # measure sizes from the data's midrange, so that a translation of data and apexes changes nothing
        centre = (X.max(axis=0) + X.min(axis=0)) / 2
        X, apexes = X - centre, apexes - centre
    dx, dy = X[None, :, 0] - apexes[:, None, 0], X[None, :, 1] - apexes[:, None, 1]
    scale = np.abs(X).max(initial=0.0) + np.abs(apexes).max(axis=1, keepdims=True)
    at_apex = np.hypot(dx, dy) <= APEX_TIE * np.maximum(scale, np.finfo(float).tiny)
    angles = np.where(at_apex, 0.0, np.arctan2(dy, dx))
    order = np.argsort(angles, axis=1, kind="stable")
    a_sorted = np.take_along_axis(angles, order, axis=1)
    A, n = a_sorted.shape
    # cut the cycle at its widest gap (never inside a ray: the widest gap is >= 2 pi / n > ANGLE_TIE)
    gaps = np.diff(a_sorted, axis=1, append=a_sorted[:, :1] + 2 * np.pi)  # gaps[:, i]: from sorted i to i + 1
    start = (np.argmax(gaps, axis=1) + 1) % n
    roll = (start[:, None] + np.arange(n)[None, :]) % n
    order = np.take_along_axis(order, roll, axis=1)
    a_sorted = np.take_along_axis(a_sorted, roll, axis=1)
    seq = y[order]  # (A, n): labels in angular order around each apex
    scored = ~np.take_along_axis(at_apex, order, axis=1)  # a point at the apex matches neither label
    step = np.mod(np.diff(a_sorted, axis=1), 2 * np.pi)
    tied = np.concatenate([np.zeros((A, 1), bool), step <= ANGLE_TIE], axis=1)  # same ray as the point before
    # best[a, c, v]: most matches so far with c changes used and current value v (-1: impossible)
    best = np.full((A, changes + 1, 2), -1, dtype=np.int64)
    best[:, 0, 0] = (seq[:, 0] == 0) & scored[:, 0]
    best[:, 0, 1] = (seq[:, 0] == 1) & scored[:, 0]
    for i in range(1, n):
        stay = best
        switch = np.full_like(best, -1)
        switch[:, 1:, :] = best[:, :-1, ::-1]
        switch[tied[:, i]] = -1  # a ray has one label: no change between points on it
        m = np.maximum(stay, switch)
        hit = np.stack([(seq[:, i] == 0) & scored[:, i], (seq[:, i] == 1) & scored[:, i]], axis=-1)[:, None, :]
        best = np.where(m >= 0, m + hit, -1)
    return best.reshape(A, -1).max(axis=1) / n


def search_sector_apex(X, y, *, grid: int = 49, far_radii=(10.0, 30.0, 100.0, 300.0, 1e3, 1e4), rounds: int = 25,
                       candidates: int = 256, keep: int = 32, seed: int = 0, changes: int = 4) -> tuple[np.ndarray, float]:
    r"""The best apex found for :func:`best_sector_rule_accuracy`, and its accuracy.

    The objective is piecewise constant in the apex, so the search is derivative-free: a ``grid x grid``
    grid over the data's box (enlarged by 10%), 256 apexes on each circle of radius ``far_radii`` times the data's
    radius :math:`R = \max_i \|x_i - \bar x\|` around the data's mean :math:`\bar x` (far out, sectors become strips;
    the best apex may lie at an intermediate radius), then ``rounds`` rounds of batched local refinement:
    ``candidates`` Gaussian perturbations of the ``keep`` best apexes so far (several kept, so that one cluster of
    near-ties does not crowd out the others), with a radius that halves every five rounds and grows with the apex's
    distance from :math:`\bar x` in units of :math:`10R`. Every length is relative to the data (the grid spacing and
    :math:`R`), so the search is the same in any units: ``search_sector_apex(s * X, y)`` finds ``s`` times the apex
    and the same accuracy, up to rounding. Every value is an accuracy that a rule with that apex attains (points on
    one ray share a label, see :func:`best_sector_rule_accuracy`), so the result is a **lower bound** on the best
    rule over all apexes, not an upper bound. Seeded, deterministic.
    """
    X = np.asarray(X, dtype=float)
    grid = check_positive_int(grid, "grid", minimum=2)
    rounds = check_positive_int(rounds, "rounds", minimum=0)
    candidates = check_positive_int(candidates, "candidates")
    keep = check_positive_int(keep, "keep")
    if keep > candidates:
        raise ValueError(f"keep ({keep}) must not exceed candidates ({candidates}): each kept apex needs a perturbation")
    far_radii = np.asarray(far_radii, dtype=float).reshape(-1)
    if not np.all(np.isfinite(far_radii) & (far_radii > 0)):
        raise ValueError(f"far_radii must be finite positive radii, got {far_radii.tolist()}")
    lo, hi = X.min(0), X.max(0)
    pad = 0.1 * (hi - lo)
    tx, ty = (np.linspace(lo[i] - pad[i], hi[i] + pad[i], grid) for i in range(2))
    phi = np.linspace(0, 2 * np.pi, 256, endpoint=False)
    centre = X.mean(0)
    extent = float(np.linalg.norm(X - centre, axis=1).max())
    extent = extent if extent > 0 else 1.0  # all points at one place: any unit will do
    apexes = np.concatenate([np.stack(np.meshgrid(tx, ty), -1).reshape(-1, 2),
                             (centre + extent * far_radii[:, None, None] * np.stack([np.cos(phi), np.sin(phi)], 1)).reshape(-1, 2)])
    values = best_sector_rule_accuracy(X, y, apexes, changes)
    rng = np.random.default_rng(seed)
    radius = float((tx[1] - tx[0]))
    for r in range(rounds):
        top = apexes[np.argsort(-values, kind="stable")[:keep]]
        scale = radius * 0.5 ** (r // 5) * (1 + np.linalg.norm(top - centre, axis=1, keepdims=True) / (10 * extent))
        new = np.repeat(top, candidates // keep, axis=0) + rng.standard_normal((candidates // keep * len(top), 2)) * np.repeat(scale, candidates // keep, axis=0)
        apexes = np.concatenate([apexes, new])
        values = np.concatenate([values, best_sector_rule_accuracy(X, y, new, changes)])
    k = int(np.argmax(values))
    return apexes[k], float(values[k])


def _is_normalisation(module: nn.Module) -> bool:
    """Whether ``module`` normalises (a torch norm layer, or any module with a numeric ``eps``)."""
    torch_norms = (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm, nn.LocalResponseNorm, nn.modules.batchnorm._NormBase)
    eps = getattr(module, "eps", None)
    return isinstance(module, torch_norms) or (isinstance(eps, (int, float)) and not isinstance(eps, bool))


# The norms with_eps rescales (exact types: a subclass may compute something else), and functional normalisations that
# a forward may call directly (their epsilon is an argument, which with_eps cannot set, so they are refused).
_RESCALED_NORMS = (nn.LayerNorm, nn.RMSNorm, GroupLayerNorm, ParallelLayerNorm, BookLayerNorm, BookRMSNorm)
_RESCALED_NAMES = "nn.LayerNorm, nn.RMSNorm and the book's LayerNorm, RMSNorm, GroupLayerNorm and ParallelLayerNorm"
#: Modules (exact types) allowed between a Linear and its norm: each commutes with a positive scale,
#: m(lambda h) = lambda m(h) (dropout with the same mask), so rescaling the Linear still only rescales the norm's input.
_PASS_THROUGH = (nn.Dropout, nn.Identity)
_FUNCTIONAL_NORMS = {torch.nn.functional.layer_norm, torch.nn.functional.group_norm, torch.nn.functional.batch_norm,
                     torch.nn.functional.instance_norm, torch.nn.functional.normalize, torch.layer_norm,
                     torch.group_norm, torch.batch_norm, torch.instance_norm}
for _name in ("rms_norm",):
    for _where in (torch.nn.functional, torch):
        if hasattr(_where, _name):
            _FUNCTIONAL_NORMS.add(getattr(_where, _name))


def _keeps_an_epsilon(module: nn.Module) -> bool:
    """Whether ``module`` keeps something named like an epsilon (``eps``, ``variance_epsilon``, an ``eps`` buffer):
    a norm in disguise, whose epsilon with_eps would otherwise skip silently."""
    names = set(vars(module)) | set(module._buffers) | set(module._parameters)
    return any(re.search(r"(^|_)eps($|_)|epsilon", name.lower()) for name in names if not name.startswith("_"))


def _refuse(where: str, module: nn.Module) -> TypeError:
    return TypeError(f"with_eps rescales only the exact types {_RESCALED_NAMES}, each directly after an exact "
                     f"nn.Linear (no subclasses); {where or 'the model'} is {type(module).__name__}, which keeps an "
                     "epsilon (an attribute, buffer or parameter named like one) or may compute something else. with_eps "
                     "cannot tell whether that epsilon lies on a path the rescaling changes (it does for a "
                     "normalisation, it need not for a head such as nn.CosineSimilarity after the norms), so it refuses "
                     "rather than guess: replace the module by one of those types, rescale the model yourself, or apply "
                     "with_eps to the part of the model before that module")


class _NormTracer(torch.fx.Tracer):
    """torch.fx's tracer, with nn.Linear and the rescaled norms (and their subclasses) kept as single calls."""

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return isinstance(m, (nn.Linear,) + _RESCALED_NORMS) or super().is_leaf_module(m, module_qualified_name)


def _norms_after_linears(model: nn.Module) -> list[tuple[nn.Linear, nn.Module]]:
    """:func:`_norms_after_linears_as_traced` in training and in eval mode (fx follows the mode the model is in, and a
    ``forward`` may branch on ``self.training``): the two traces must find the same Linear before each norm, else the
    rescaling would be right in one mode and change the function in the other. The model's mode is restored."""
    modes = {m: m.training for m in model.modules()}
    try:
        traced = []
        for training in (True, False):
            model.train(training)
            traced.append(_norms_after_linears_as_traced(model))
    finally:
        for m, training in modes.items():
            m.training = training
    in_training, in_eval = ({(id(lin), id(norm)) for lin, norm in t} for t in traced)
    if in_training != in_eval:
        raise ValueError("the model's forward pairs its norms with different nn.Linear layers in training and in eval "
                         "mode: a rescaling right in one mode would change the function in the other; make the path "
                         "independent of the mode, or rescale the model yourself")
    return traced[1]


def _norms_after_linears_as_traced(model: nn.Module) -> list[tuple[nn.Linear, nn.Module]]:
    r"""Every normalisation module of ``model`` with the ``nn.Linear`` whose output it normalises, or an error saying
    why the rescaling cannot be placed.

    The model may be any tree of modules (nested ``nn.Sequential``, ``nn.ModuleList`` or ``nn.ModuleDict`` used in a
    custom ``forward``, residual blocks): its ``forward`` is traced with ``torch.fx``, and a norm is rescaled only
    where the graph proves the rescaling local: the norm's one input is the output of an exact ``nn.Linear``
    (directly, or through ``nn.Dropout`` / ``nn.Identity`` modules called once, which commute with a positive scale)
    that is called once, whose output goes to that norm only, and whose weight and bias are used nowhere else (not
    tied to another layer, not read in a forward). Then scaling that Linear by :math:`\lambda` changes nothing but
    the norm's input, and the identity :math:`\mathrm{LN}_{\varepsilon'}(\lambda h) = \mathrm{LN}_\varepsilon(h)`
    keeps the function. A model that cannot be traced (data-dependent control flow), a functional normalisation
    call in a ``forward`` (its epsilon is an argument), a norm of another kind or one keeping its epsilon under
    another name, a subclass of a rescaled norm or of ``nn.Linear`` before a norm, a norm or Linear called more than
    once, a parametrized Linear, and a norm that the traced ``forward`` never calls (another path might) raise
    instead of being skipped."""
    pairs: list[tuple[nn.Linear, nn.Module]] = []
    if _is_normalisation(model):
        raise ValueError("the model is a norm on its own: there is no nn.Linear before it to rescale")
    for where, m in model.named_modules():
        if type(m) in _RESCALED_NORMS:
            continue
        if _is_normalisation(m) and isinstance(m, (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm, nn.LocalResponseNorm,
                                                   nn.modules.batchnorm._NormBase)) and type(m) not in _RESCALED_NORMS:
            raise TypeError(f"with_eps rescales only {_RESCALED_NAMES}; {where} is "
                            f"{type(m).__name__}, for which LN_eps(lambda h) = LN_(eps/lambda^2)(h) is not checked here "
                            "(exact types)")
        if _is_normalisation(m) or _keeps_an_epsilon(m):
            raise _refuse(where, m)
    try:
        graph = _NormTracer().trace(model)
    except Exception as error:  # torch.fx raises several types (TraceError, TypeError, NotImplementedError, ...)
        raise TypeError(f"with_eps follows the model's forward with torch.fx to find the nn.Linear before each norm, and "
                        f"it cannot trace this model ({type(error).__name__}: {error}); write the data-dependent part "
                        "without Python control flow on tensor values, or rescale the model yourself") from error
    modules = dict(model.named_modules())
    calls: dict[str, list] = {}
    for node in graph.nodes:
        if node.op == "call_module":
            calls.setdefault(node.target, []).append(node)
        elif node.op in ("call_function", "call_method") and (
                node.target in _FUNCTIONAL_NORMS or node.target in ("layer_norm", "rms_norm", "group_norm")):
            raise TypeError(f"the model's forward calls {getattr(node.target, '__name__', node.target)} directly: its "
                            "epsilon is an argument of the call, which with_eps cannot set; use an nn.LayerNorm module")
    read_attrs = [node.target for node in graph.nodes if node.op == "get_attr"]
    for where, norm in modules.items():
        if type(norm) not in _RESCALED_NORMS:
            if isinstance(norm, _RESCALED_NORMS):
                raise _refuse(where, norm)
            continue
        uses = calls.get(where, [])
        closed = [target for target in calls if where.startswith(target + ".")]
        if closed:
            raise TypeError(f"the norm {where} is inside {closed[0]} ({type(modules[closed[0]]).__name__}), which torch.fx "
                            "calls as one closed block (a torch.nn module it does not open): with_eps cannot see which "
                            "layer feeds the norm, and setting its epsilon without the rescaling would change the "
                            "function; rebuild the block from nn.Linear and norm modules, or rescale it yourself")
        if not uses:
            raise ValueError(f"the norm {where} is not called by the forward as traced: with_eps cannot prove that a new "
                             "epsilon leaves the function unchanged where another path calls it (a branch on the "
                             "mode or on a flag); remove the unused norm, or set its epsilon yourself")
        if len(uses) > 1:
            raise ValueError(f"the norm {where} is shared (called {len(uses)} times in the forward): rescaling the layer "
                             "before one call would change the others. The refusal is conservative: when every Linear "
                             "feeding the norm could take the same factor the rescaling would be exact, but with_eps "
                             "does not prove that case; give each call its own norm, or rescale the model yourself")
        node = uses[0]
        source = node.args[0] if len(node.args) == 1 and not node.kwargs else None
        # step back over nn.Dropout / nn.Identity called once, on one input, whose output feeds only the next node
        while (isinstance(source, torch.fx.Node) and source.op == "call_module"
               and type(modules[source.target]) in _PASS_THROUGH and len(source.args) == 1 and not source.kwargs
               and len(source.users) == 1 and len(calls[source.target]) == 1):
            source = source.args[0]
        if not (isinstance(source, torch.fx.Node) and source.op == "call_module"
                and isinstance(modules[source.target], nn.Linear)):
            raise ValueError(f"every norm must follow an nn.Linear, directly or through nn.Dropout / nn.Identity (its "
                             f"only input the Linear's output); {where} does not. The refusal is conservative: another "
                             "positively homogeneous module between them (ReLU, for instance) would keep the rescaling "
                             "exact, but with_eps proves only those cases; remove the module between them, or rescale "
                             "the model yourself")
        linear = modules[source.target]
        if nn.utils.parametrize.is_parametrized(linear):
            raise TypeError(f"the nn.Linear {source.target} before {where} is parametrized (weight_norm, spectral_norm, "
                            "...): its weight is computed, and scaling that tensor would not change the network; remove "
                            "the parametrization")
        if type(linear) is not nn.Linear:
            raise _refuse(source.target, linear)
        if len(calls[source.target]) > 1:
            raise ValueError(f"the nn.Linear {source.target} before {where} is shared (called "
                             f"{len(calls[source.target])} times): rescaling it would change its other uses")
        if len(source.users) > 1:
            raise ValueError(f"the output of the nn.Linear {source.target} is used elsewhere besides the norm {where} "
                             "(a residual or skip connection): rescaling it would change that use")
        if any(attr == source.target or attr.startswith(source.target + ".") for attr in read_attrs):
            raise ValueError(f"the forward reads the weight or bias of the nn.Linear {source.target} directly: rescaling "
                             "it would change that use too")
        pairs.append((linear, norm))
    for where, m in model.named_modules():
        # a hook changes what a module computes (and runs after the rescaling); the old-API weight_norm /
        # spectral_norm recompute .weight from weight_orig / weight_g, weight_v on every forward
        hooks = [h for h in ("_forward_hooks", "_forward_pre_hooks", "_forward_hooks_with_kwargs") if getattr(m, h, None)]
        if hooks:
            raise TypeError(f"{where or 'the model'} has forward hooks: they change what it computes, and with_eps "
                            "cannot rescale through them; remove the hooks (old-API weight_norm/spectral_norm are hooks)")
        if isinstance(m, nn.Linear) and not all(isinstance(m._parameters.get(k), nn.Parameter) for k in ("weight",)):
            raise TypeError(f"{where}: the weight of this nn.Linear is not a registered Parameter (computed by a hook "
                            "such as the old-API spectral_norm): scaling it would not change the network")
    uses: dict[int, int] = {}
    for _, m in model.named_modules(remove_duplicate=False):
        uses[id(m)] = uses.get(id(m), 0) + 1
    if any(uses[id(lin)] > 1 or uses[id(norm)] > 1 for lin, norm in pairs):
        raise ValueError("a Linear -> norm pair of the model is shared (registered more than once): rescaling it "
                         "would change its other uses")
    for lin, _ in pairs:
        if nn.utils.parametrize.is_parametrized(lin):
            raise TypeError("an nn.Linear before a norm is parametrized (weight_norm, spectral_norm, ...): its weight is "
                            "computed, and scaling that tensor would not change the network; remove the parametrization")
    param_uses: dict[int, int] = {}
    for _, prm in model.named_parameters(remove_duplicate=False):
        param_uses[id(prm)] = param_uses.get(id(prm), 0) + 1
    if any(param_uses[id(prm)] > 1 for lin, _ in pairs for prm in lin.parameters(recurse=False)):
        raise ValueError("a parameter of an nn.Linear before a norm is shared with another layer (tied weights): "
                         "rescaling it would change the other layer too")
    return pairs




def _check_rescaled_range(pairs, eps: float) -> None:
    """Refuse an ``eps`` at which the rescaling of :func:`with_eps` takes a Linear's largest parameter out of the range
    where its norm's power ``|lambda * M|^p`` is a normal number of the Linear's dtype (see with_eps, **Range**)."""
    lo, hi, dtypes = 0.0, math.inf, set()
    for linear, norm in pairs:
        params = [t.detach() for t in (linear.weight, linear.bias) if t is not None and t.numel()]
        if not params or not all(t.is_floating_point() for t in params):
            continue
        big = max(float(t.abs().max()) for t in params)
        if not math.isfinite(big):
            raise ValueError("a Linear before a norm has a non-finite weight or bias: with_eps cannot rescale it")
        if big == 0.0:
            continue  # all zeros stay zeros at any eps
        p = float(norm.p) if type(norm) is ParallelLayerNorm else 2.0
        info = torch.finfo(linear.weight.dtype)
        dtypes.add(str(linear.weight.dtype).removeprefix("torch."))
        log_m = p * math.log(big)  # in logs: M^p of a float64 weight may not be a Python float
        low = math.exp(min(math.log(norm.eps) + math.log(info.tiny) - log_m, 709.0))
        high = math.exp(min(math.log(norm.eps) + math.log(info.max) - log_m, 709.0))
        lo, hi = max(lo, min(low, norm.eps)), min(hi, max(high, norm.eps))
    if not lo <= eps <= hi:
        raise ValueError(
            f"eps={eps!r} is outside the range this model's {' and '.join(sorted(dtypes))} parameters can be moved to, "
            f"[{lo:.3g}, {hi:.3g}]: with_eps multiplies the weight and bias of the Linear before each norm by "
            f"lambda = (eps / norm.eps)^(1/p), and beyond that range the norm's powers |lambda * M|^p of its largest "
            f"parameter M leave finfo.tiny..finfo.max (inf/NaN or denormal outputs). Pass an eps in that range, or move "
            f"the model to a wider dtype first (model.float() or model.double())")


def with_eps(model: nn.Module, eps: float) -> nn.Module:
    r"""A copy of the LN-MLP ``model`` that computes the same function with every ``nn.LayerNorm``'s and
    ``nn.RMSNorm``'s (and LN-G's and PLN's) :math:`\varepsilon` set to ``eps``.

    LayerNorm is invariant to a common shift and scale-equivariant: :math:`\mathrm{LN}_{\varepsilon'}(\lambda h) =
    \mathrm{LN}_{\varepsilon'/\lambda^2}(h)` for :math:`\lambda > 0`, and so is RMSNorm. So multiplying the weight and
    bias of the ``nn.Linear`` just before a norm by :math:`\lambda = \sqrt{\varepsilon'/\varepsilon}` and setting its
    :math:`\varepsilon` to :math:`\varepsilon'` leaves the network's function unchanged (exactly, up to float
    rounding). Both values must be > 0 (at :math:`\varepsilon = 0` the class is different: the sector theorem).
    A :class:`~lnbook.core.norms.ParallelLayerNorm` normalises each group by
    :math:`(\tfrac1g\sum_i |x_i - c\mu|^p + \varepsilon)^{1/p}`, so the same holds group by group with
    :math:`\lambda = (\varepsilon'/\varepsilon)^{1/p}` (:math:`\sqrt{\varepsilon'/\varepsilon}` for :math:`p = 2`).
    A :class:`~lnbook.core.norms.GroupLayerNorm` (LN-G) is LayerNorm on each group, with the same
    :math:`\lambda = \sqrt{\varepsilon'/\varepsilon}` (its gain and bias act after the normalisation).

    The model may be any tree of modules (nested ``nn.Sequential``, ``nn.ModuleList`` or ``nn.ModuleDict`` in a
    custom ``forward``, residual blocks) that ``torch.fx`` can trace: each norm is rescaled where the traced graph
    proves the rescaling local (its one input is the output of an exact ``nn.Linear`` called once, directly or through
    ``nn.Dropout`` / ``nn.Identity``, used by that norm
    only, whose parameters are used nowhere else). Whatever it cannot prove raises an error instead of being
    skipped: a model fx cannot trace, a functional normalisation in a ``forward``, another normalisation (BatchNorm,
    GroupNorm, a norm keeping its epsilon under another name or as a tensor), a subclass of ``nn.Linear`` or of a
    rescaled norm where the rescaling would go through it, a norm not after an ``nn.Linear`` (directly, or through
    ``nn.Dropout`` or ``nn.Identity`` modules, which commute with a positive scale), a Linear
    whose output also goes elsewhere (a skip connection), a shared layer or norm, a Linear whose weight or bias is tied to
    another layer's, forward hooks, a parametrized Linear, a norm the ``forward`` never calls, or a forward that
    pairs norms and Linears differently in training and in eval mode (both modes are traced). What is proved is the
    forward as traced with the model's current Python attributes: a ``forward`` that branches on other Python state
    (a flag flipped after the call) or computes with a norm's ``eps`` as a number (``+ self.norm.eps * x``, which
    fx records as a constant) is outside it, and with_eps cannot see it.

    These refusals are conservative: some refused models could be rescaled exactly, for instance a norm called on the
    outputs of two Linears that both take the same factor, or a positively homogeneous module other than
    ``nn.Dropout`` and ``nn.Identity`` (a ReLU) between the Linear and its norm. with_eps refuses them because it
    proves only the unshared Linear -> norm pair, direct or through those two; what it rescales is exact.

    **Range.** In floating point the identity holds where the norm's powers :math:`|\lambda h|^p` of its rescaled
    pre-activations stay normal numbers of the dtype (``finfo.tiny`` to ``finfo.max``): beyond that they overflow to
    inf/NaN or underflow into denormals. A pre-activation is made of the Linear's parameters, so ``eps`` is refused (a
    ``ValueError`` giving the range) when the rescaling takes the largest parameter :math:`M` of a Linear before a norm
    out of that range, that is outside :math:`[\varepsilon\,\mathrm{tiny}/M^p,\ \varepsilon\,\mathrm{max}/M^p]`
    (widened to include the norm's own :math:`\varepsilon`, so a model is never refused the move to where it already
    is). Inside it the rescaled network equals the original on every input whose rescaled pre-activations keep
    :math:`|\lambda h|^p` in the dtype's range; inputs with pre-activations far above :math:`M` can still overflow,
    as they would in the original at a correspondingly larger scale. For float16 and bfloat16 the rule is
    conservative (their norms form the powers in float32; the Linear's output itself overflows at ``finfo.max``, which
    the pre-activations of a wide layer on large inputs reach well before :math:`\lambda M` does): move such a model
    to float32 for a wider range.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"with_eps needs an nn.Module (Linear -> LayerNorm blocks), got {type(model).__name__}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not (0 < eps < math.inf):
        raise ValueError(f"eps must be a finite number > 0 (the identity needs eps > 0 on both sides), got {eps!r}")
    # a compiled module exists only once torch._dynamo is imported; named_modules lists the wrapper itself
    frame = sys.modules.get("torch._dynamo.eval_frame")
    optimized = getattr(frame, "OptimizedModule", None)
    compiled = [name or "the model" for name, m in model.named_modules() if optimized is not None and isinstance(m, optimized)]
    if compiled:
        raise TypeError(f"with_eps got a torch.compile'd module ({compiled[0]}): torch.fx cannot trace a compiled "
                        "module, so no rescaling can be proved local; pass the module before compiling "
                        "(compiled._orig_mod) and torch.compile the result of with_eps again")
    out = copy.deepcopy(model)
    pairs = _norms_after_linears(out)
    norms = [m for m in out.modules() if type(m) in _RESCALED_NORMS]
    for norm in norms:
        if norm.eps is None:
            raise ValueError("an nn.RMSNorm of the model has eps=None (a dtype-dependent default): give it an explicit eps")
        if norm.eps <= 0:
            raise ValueError("a norm of the model has eps = 0: no rescaling reaches eps > 0 from it")
    _check_rescaled_range(pairs, eps)
    for linear, norm in pairs:
        # LN, RMSNorm and PLN with p = 2: sqrt; PLN with exponent p divides by (mean |.|^p + eps)^(1/p)
        lam = (eps / norm.eps) ** (1.0 / norm.p) if type(norm) is ParallelLayerNorm else math.sqrt(eps / norm.eps)
        with torch.no_grad():
            linear.weight.mul_(lam)
            if linear.bias is not None:
                linear.bias.mul_(lam)
    for norm in norms:  # every norm is rescaled (one the forward never calls was refused)
        norm.eps = float(eps)
    return out


def preactivation_scale(model: nn.Module, x) -> list[float]:
    r"""For every LayerNorm and RMSNorm of ``model`` (``nn.LayerNorm``, ``nn.RMSNorm`` or the book's ``LayerNorm`` and
    ``RMSNorm``), in the order the forward calls them on ``x``: the median over the rows of ``x`` of the RMS that the
    norm divides by, without its :math:`\varepsilon` (for LayerNorm the centred RMS of its input, its standard
    deviation over the normalised features; for RMSNorm the uncentred RMS), divided by :math:`\sqrt{\varepsilon}` of
    that norm.

    A value near 1 means the pre-activations are of order :math:`\sqrt\varepsilon`, where the :math:`\varepsilon`
    term of the norm matters. :func:`with_eps` multiplies the pre-activations of each norm by
    :math:`\sqrt{\varepsilon'/\varepsilon}`, so it leaves these values unchanged. A norm called twice, one with
    ``eps = 0``, or an ``nn.RMSNorm`` with ``eps=None`` (a dtype-dependent default) raises a ``ValueError``; a model
    with neither norm returns ``[]``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"preactivation_scale needs an nn.Module, got {type(model).__name__}")
    norms = [m for m in model.modules() if type(m) in (nn.LayerNorm, BookLayerNorm, nn.RMSNorm, BookRMSNorm)]
    for m in norms:
        if m.eps is None:
            raise ValueError("an nn.RMSNorm of the model has eps=None (a dtype-dependent default): give it an explicit eps")
        if not (m.eps > 0):
            raise ValueError(f"preactivation_scale divides by sqrt(eps): a {type(m).__name__} of the model has eps = 0")
    seen: list[tuple[nn.Module, float]] = []

    def record(module, args):
        h = args[0].detach()
        dims = (tuple(range(-len(module.normalized_shape), 0)) if isinstance(module, (nn.LayerNorm, nn.RMSNorm))
                else (-1,))
        c = h if isinstance(module, (nn.RMSNorm, BookRMSNorm)) else h - h.mean(dim=dims, keepdim=True)  # RMSNorm: uncentred
        rms = c.pow(2).mean(dim=dims).sqrt().reshape(-1)
        seen.append((module, float(rms.median()) / math.sqrt(module.eps)))

    handles = [m.register_forward_pre_hook(record) for m in norms]
    try:
        with torch.no_grad():
            model(torch.as_tensor(x, dtype=next(model.parameters()).dtype, device=next(model.parameters()).device))
    finally:
        for h in handles:
            h.remove()
    if len({id(m) for m, _ in seen}) != len(seen):
        raise ValueError("a norm of the model is called more than once in its forward: its pre-activations have "
                         "no single scale; measure each call separately")
    return [v for _, v in seen]
