r"""The width-3 limit of LN-MLPs (chapter 6): a two-layer width-3 LN-Net with :math:`\varepsilon = 0` sees a
planar input only through its direction from one point, the apex.

* :func:`width3_apex` — the apex :math:`x_0 = -M^{-1} c` of a first layer ``Linear(2, 3)``;
* :func:`sign_changes_on_circle` — how often a score changes sign around a point;
* :func:`best_sector_rule_accuracy` — the best accuracy of a rule that depends only on the direction from an apex.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch
from torch import nn

from lnbook.core.geometry import complement_basis
from lnbook.util.validation import check_positive_int

__all__ = ["width3_apex", "sign_changes_on_circle", "best_sector_rule_accuracy"]

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
    return (-torch.linalg.solve(M, c)).numpy()


def sign_changes_on_circle(score: Callable[[torch.Tensor], torch.Tensor], centre, radius: float, n: int = 4096) -> int:
    """How often ``score`` (a function of ``(m, 2)`` float64 points) changes sign on the circle of
    ``radius`` around ``centre``, sampled at ``n`` equally spaced angles (cyclically)."""
    n = check_positive_int(n, "n", minimum=3)
    phi = torch.arange(n, dtype=torch.float64) * (2 * math.pi / n)
    pts = torch.as_tensor(np.asarray(centre, dtype=float)) + radius * torch.stack([phi.cos(), phi.sin()], dim=1)
    s = np.sign(score(pts).detach().double().cpu().numpy().reshape(-1))
    s = s[s != 0]
    if len(s) == 0:
        return 0
    return int(np.sum(s != np.roll(s, 1)))


def best_sector_rule_accuracy(X, y, apexes, changes: int = 4) -> np.ndarray:
    r"""For every apex :math:`x_0`, the best training accuracy of a two-class rule that depends only on
    the direction of :math:`x - x_0` and changes class at most ``changes`` times around :math:`x_0`.

    The points are sorted by angle around the apex and the best labelling of that sequence with at
    most ``changes`` changes (read linearly from angle :math:`-\pi`, which allows at least every
    cyclic rule with ``changes`` changes) is found by dynamic programming, for all apexes at once.
    So the value is an **upper bound** on what such a rule reaches with that apex.
    """
    X = np.asarray(X, dtype=float)
    y = np.asarray(y).reshape(-1)
    apexes = np.asarray(apexes, dtype=float).reshape(-1, 2)
    if X.ndim != 2 or X.shape[1] != 2 or len(X) != len(y):
        raise ValueError("X must have shape (n, 2) and y shape (n,)")
    if not set(np.unique(y).tolist()) <= {0, 1}:
        raise ValueError("y must hold two classes, 0 and 1")
    changes = check_positive_int(changes, "changes", minimum=0)
    angles = np.arctan2(X[None, :, 1] - apexes[:, None, 1], X[None, :, 0] - apexes[:, None, 0])
    seq = y[np.argsort(angles, axis=1)]  # (A, n): labels in angular order around each apex
    A, n = seq.shape
    # best[a, c, v]: most matches so far with c changes used and current value v (-1: impossible)
    best = np.full((A, changes + 1, 2), -1, dtype=np.int64)
    best[:, 0, 0] = seq[:, 0] == 0
    best[:, 0, 1] = seq[:, 0] == 1
    for i in range(1, n):
        stay = best
        switch = np.full_like(best, -1)
        switch[:, 1:, :] = best[:, :-1, ::-1]
        m = np.maximum(stay, switch)
        hit = np.stack([seq[:, i] == 0, seq[:, i] == 1], axis=-1)[:, None, :]
        best = np.where(m >= 0, m + hit, -1)
    return best.reshape(A, -1).max(axis=1) / n
