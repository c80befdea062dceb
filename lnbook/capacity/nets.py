r"""Width-3 LN-Nets as the constructions of chapter 3 return them: the net, its record, its bounds, its check.

* :class:`LNNet`: the float64 ``nn.Sequential`` ``Linear(n,3) -> LN -> [Linear(3,3) -> LN] x B -> Linear(3,K)``
  with the construction's record attached (a :class:`MoveRecord` per hidden block);
* :func:`layer_bound`: the theorem's depth :math:`1 + m' - k` (exact arithmetic); :func:`float64_layer_bound`:
  the float64 builder's, with the straightening allowance;
* :func:`verify_ln_net`: run a net on the samples (float64 or another dtype) and count the errors;
* :class:`ConstructionError`: a ``RuntimeError`` with ``layer`` and ``reason``, raised where float64 runs out.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from lnbook.capacity.schwarzian import straightening_allowance

__all__ = ["ConstructionError", "layer_bound", "float64_layer_bound", "MoveRecord", "LNNet", "verify_ln_net"]


class ConstructionError(RuntimeError):
    """The float64 builder cannot place a block precisely enough: it stops instead of returning a wrong net.

    ``layer`` is the LN layer (1-based) it was building, ``reason`` says what failed. The message reads
    ``"layer <layer>: <reason>"``.
    """

    def __init__(self, layer: int, reason: str):
        self.layer = int(layer)
        self.reason = str(reason)
        super().__init__(f"layer {self.layer}: {self.reason}")

    def __reduce__(self):
        return (type(self), (self.layer, self.reason))


def layer_bound(n_distinct: int, n_classes: int) -> int:
    r"""The theorem's number of LN layers: :math:`1 + m' - k` for :math:`k\ge 2`, 1 for :math:`k=1`.

    ``n_distinct`` is :math:`m'`, the number of distinct samples, ``n_classes`` is :math:`k`: the first
    LN layer, then one block per cluster that is not a sink. The exact construction
    (:mod:`lnbook.capacity.build_exact`) has exactly this depth; the float64 builder's merging blocks
    never exceed it.
    """
    if n_classes <= 1:
        return 1
    return 1 + n_distinct - n_classes


def float64_layer_bound(n_distinct: int, n_classes: int, straighten: bool | None = None) -> int:
    r"""The float64 builder's bound on its depth: :func:`layer_bound` plus the straightening allowance.

    :math:`1 + (m' - k) + \lfloor (m' - k)/8 \rfloor` when it straightens (``straighten=None``: from 2000
    distinct samples on), else :math:`1 + m' - k`. Straightening blocks merge nothing, so from 2000
    distinct samples on the float64 depth may exceed :math:`m - 1`.
    """
    return layer_bound(n_distinct, n_classes) + straightening_allowance(n_distinct, n_classes, straighten)


@dataclass
class MoveRecord:
    """What one hidden block (``Linear(3,3) -> LN``) of the construction did.

    ``kind`` is ``"merge"`` (cluster ``moved`` joined the sink ``onto`` of its label; ``end`` says
    where ``moved`` sat: ``"front"``, ``"back"``, or ``"inner"`` when both ends were sinks),
    ``"cut"`` (binary finish: the pole is on the circle in the gap between the two runs of labels;
    ``moved = -1``, ``pole_gap`` is half that gap) or ``"straighten"`` (float64, large problems: the
    pole is inside the circle, nothing merges; ``moved = -1``, ``pole_gap`` is the pole's distance to
    the circle). Clusters are named by their smallest sample
    index (a sink keeps its name).
    ``members`` lists the sample indices carried by the moved cluster. ``pole`` is :math:`o` in
    unit-circle plane coordinates, ``pole_gap`` the lever :math:`\\|o - p\\|` (small values cost
    precision: the block's Lipschitz constant at :math:`p` is about ``1/pole_gap``),
    ``visibility_margin`` is :math:`\\min (1 - \\langle v, o\\rangle)` over the samples the pole does
    not see (PBA: must be > 0), ``separation`` the smallest angle between consecutive samples of
    different labels after the block (radians, on the arc of width ``arc_width``).
    A **pair move** also merges ``moved_also`` (samples ``members_also``) into its sink
    ``onto_also``. ``relocated`` lists the companions: clusters seen by the pole besides ``moved``
    that did not merge but were moved elsewhere on the arc (float64 only; they move on later).
    ``tangent_fraction`` says where the tangent point sat: 0 at ``moved``, 1 at the first cluster
    the pole does not see.
    """

    layer: int
    kind: str
    end: str
    moved: int
    onto: int | None
    label: int
    members: list[int]
    pole: tuple[float, float]
    pole_gap: float
    visibility_margin: float
    separation: float
    n_clusters: int
    tangent_fraction: float = 0.0
    moved_also: int | None = None
    onto_also: int | None = None
    members_also: list = field(default_factory=list)
    relocated: list = field(default_factory=list)


class LNNet(nn.Sequential):
    """The constructed LN-Net: an ``nn.Sequential`` with the construction's record attached.

    Attributes: ``trace`` (list of :class:`MoveRecord`, one per hidden block), ``n_classes``,
    ``n_ln_layers``, ``bound`` (the theorem's bound), ``n_distinct``, ``initial_separation`` and
    ``min_separation`` (radians), ``class_angles`` (final angle of each class point), ``angles``
    (``(n_ln_layers, m)`` array of every sample's angle after each LN layer, when recorded),
    ``arc_widths`` (the width of the arc after each LN layer), ``labels`` (the labels of the
    samples, as given), ``note`` (e.g. the trivial one-class case).
    """

    trace: list
    n_classes: int

    def predict(self, X) -> torch.Tensor:
        """``argmax`` of the logits for inputs ``X`` of shape ``(m, n)`` (float64)."""
        X = torch.as_tensor(X, dtype=torch.float64)
        with torch.no_grad():
            return self(X).argmax(dim=-1)

    def ln_outputs(self, X) -> list[torch.Tensor]:
        """The output of every LN layer for inputs ``X`` (list of ``(m, 3)`` tensors)."""
        out = []
        h = torch.as_tensor(X, dtype=torch.float64)
        with torch.no_grad():
            for module in self:
                h = module(h)
                if isinstance(module, nn.LayerNorm):
                    out.append(h)
        return out


def verify_ln_net(net: nn.Module, X, y, dtype=torch.float64) -> dict:
    """Run ``net`` on ``X`` (in ``dtype``) and compare ``argmax`` with ``y``.

    Returns ``{"errors": number of wrong predictions, "accuracy": fraction correct,
    "margin": min over samples of (true logit - best other logit)}``.
    """
    X = torch.as_tensor(np.asarray(X, dtype=np.float64)).reshape(len(y), -1)
    y = torch.as_tensor(np.asarray(y), dtype=torch.long)
    model = net if dtype == torch.float64 else _cast(net, dtype)
    with torch.no_grad():
        logits = model(X.to(dtype)).to(torch.float64)
    pred = logits.argmax(dim=-1)
    true = logits.gather(1, y[:, None]).squeeze(1)
    other = logits.clone()
    other.scatter_(1, y[:, None], -math.inf)
    margin = float((true - other.max(dim=1).values).min())
    errors = int((pred != y).sum())
    return {"errors": errors, "accuracy": 1.0 - errors / len(y), "margin": margin}


def _cast(net: nn.Module, dtype) -> nn.Module:
    """A copy of ``net`` in ``dtype``. A plain ``nn.Sequential`` (an :class:`LNNet`: its forward is Sequential's)
    is copied module by module, without the construction's record (its trace and angles, most of a deep copy's
    cost); the forward is the same modules in the same order."""
    if isinstance(net, nn.Sequential) and type(net).forward is nn.Sequential.forward:
        return nn.Sequential(*(copy.deepcopy(module) for module in net)).to(dtype)
    return copy.deepcopy(net).to(dtype)
