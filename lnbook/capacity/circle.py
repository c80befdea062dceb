r"""The LN circle of width 3 and the blocks that act on it (chapter 3).

With three neurons and :math:`\varepsilon = 0`, LayerNorm sends every input off
:math:`\mathrm{span}(\mathbf 1)` onto the circle :math:`C = \{z : \sum z = 0,\ \|z\| = \sqrt 3\}`.
In the orthonormal plane coordinates :math:`u = E^\top z` (``E =`` :func:`~lnbook.core.geometry.plane_basis`)
a block ``Linear(3,3) -> LN`` with weight :math:`E M E^\top` and bias :math:`E c` maps the circle point
:math:`\sqrt 3\,E v` (:math:`v` on the unit circle) to :math:`\sqrt 3\,E\,\mathrm{normalise}(A(v - o))`
with :math:`A = \sqrt 3 M` and the **pole** :math:`o = -M^{-1}c/\sqrt 3`: the central projection from
:math:`o` followed by the linear map :math:`A` acting on directions. Everything here works on the
unit circle (angles :math:`\theta`) in float64 numpy; :func:`block_weights` turns a pole and a linear
part into the weights of the real ``torch`` block.

* :func:`pole_for_move`: the pole that sends one circle point onto another (on the line through both,
  beyond the first, and on the tangent at a chosen point :math:`T`);
* :func:`block_image`: where every sample goes under the projection from a pole followed by the
  **re-spread** (the linear map that puts the two extreme image directions on the ends of an arc);
* :func:`second_hits`, :func:`line_meet`: the circle and line geometry the float64 planner uses;
* :func:`identity_block`, :func:`linear_module`, :func:`ln_module`: float64 ``torch`` modules.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from lnbook.core.geometry import plane_basis

__all__ = [
    "SQRT3",
    "unit",
    "to_plane",
    "circle_angles",
    "block_weights",
    "linear_module",
    "ln_module",
    "identity_block",
    "poles_for_move",
    "pole_for_move",
    "second_hits",
    "line_meet",
    "block_image",
    "sample_separation",
]

SQRT3 = math.sqrt(3.0)
_E = plane_basis().cpu().numpy()


def unit(angle) -> np.ndarray:
    """The unit vector(s) :math:`(\\cos\\theta, \\sin\\theta)` for a scalar angle (shape ``(2,)``) or an array (``(..., 2)``)."""
    if np.ndim(angle) == 0:
        return np.array([math.cos(angle), math.sin(angle)])
    angle = np.asarray(angle, dtype=np.float64)
    return np.stack([np.cos(angle), np.sin(angle)], axis=-1)


def to_plane(z) -> np.ndarray:
    """Plane coordinates :math:`E^\\top z` of points ``z`` of shape ``(..., 3)`` (numpy or torch)."""
    z = z.detach().cpu().numpy() if isinstance(z, torch.Tensor) else np.asarray(z, dtype=np.float64)
    return z @ _E


def circle_angles(z) -> np.ndarray:
    """Angles (radians) of the LN outputs ``z`` (shape ``(..., 3)``) in the plane basis :func:`plane_basis`."""
    u = to_plane(z)
    return np.arctan2(u[..., 1], u[..., 0])


def block_weights(A: np.ndarray, pole: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Weight and bias of ``Linear(3,3)`` realising :math:`v \mapsto \mathrm{normalise}(A(v - o))` on the unit circle.

    :math:`W = E (A/\sqrt 3) E^\top`, :math:`b = -E A o` (float64 tensors): on the LN circle the block
    then maps :math:`\sqrt3\,E v` to :math:`\sqrt 3\,E\,\mathrm{normalise}(A(v - o))`.
    """
    A = np.asarray(A, dtype=np.float64)
    pole = np.asarray(pole, dtype=np.float64)
    W = _E @ (A / SQRT3) @ _E.T
    b = -_E @ (A @ pole)
    return torch.from_numpy(W.copy()), torch.from_numpy(b.copy())


def linear_module(weight: torch.Tensor, bias: torch.Tensor) -> nn.Linear:
    """A float64 ``nn.Linear`` with the given weight ``(out, in)`` and bias, built without random init."""
    lin = nn.Linear.__new__(nn.Linear)
    nn.Module.__init__(lin)
    lin.in_features, lin.out_features = int(weight.shape[1]), int(weight.shape[0])
    lin.weight = nn.Parameter(weight.to(torch.float64).clone())
    lin.bias = nn.Parameter(bias.to(torch.float64).clone())
    return lin


def ln_module() -> nn.LayerNorm:
    """``LayerNorm(3, eps=0)`` without affine parameters, in float64."""
    return nn.LayerNorm(3, eps=0.0, elementwise_affine=False, dtype=torch.float64)


def identity_block() -> list[nn.Module]:
    """``[Linear(3,3) = identity, LN]``: the identity on the LN circle (padding a net to a fixed depth)."""
    return [linear_module(torch.eye(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)), ln_module()]


def poles_for_move(theta_p: float, theta_target: float, c) -> tuple[np.ndarray, np.ndarray]:
    """:func:`pole_for_move` for an array ``c`` of tangent angles: poles ``(T, 2)`` and levers ``(T,)``."""
    c = np.asarray(c, dtype=np.float64)
    p = unit(theta_p)
    mid = 0.5 * (theta_p + theta_target)
    sgn = 1.0 if theta_p > theta_target else -1.0
    d = sgn * np.array([-math.sin(mid), math.cos(mid)])  # unit vector from the target towards p
    dT = sgn * np.sin(c - mid)  # <d, T>, exact
    s = 2.0 * np.sin((c - theta_p) / 2) ** 2 / dT  # (1 - <p,T>) / <d,T>: then <o,T> = 1
    return p[None, :] + s[:, None] * d[None, :], s


def pole_for_move(theta_p: float, theta_target: float, c: float) -> tuple[np.ndarray, float]:
    r"""Pole :math:`o` that sends the circle point at angle ``theta_p`` onto the one at ``theta_target``.

    :math:`o` lies on the line through :math:`p` and the target, beyond :math:`p`, and on the tangent
    to the unit circle at :math:`T = (\cos c, \sin c)`, where the tangent angle ``c`` lies strictly
    between ``theta_p`` and the midpoint of ``theta_p`` and ``theta_target``.
    Returns ``(o, s)`` with the **lever** :math:`s = \|o - p\|`.
    """
    mid = 0.5 * (theta_p + theta_target)
    if not (math.sin(c - mid) * (1.0 if theta_p > theta_target else -1.0)) > 0:
        raise ValueError("the tangent point must lie between p and the midpoint of p and the target")
    o, s = poles_for_move(theta_p, theta_target, [c])
    return o[0], float(s[0])


def second_hits(poles: np.ndarray, thetas: np.ndarray) -> np.ndarray:
    """Angles ``(T, len(thetas))`` of the second point where the line from each pole through each circle
    point ``thetas`` meets the circle (where a point folded across the tangent point lands)."""
    d = unit(thetas)[None, :, :] - poles[:, None, :]
    t = (np.sum(poles * poles, axis=1)[:, None] - 1.0) / np.sum(d * d, axis=2)
    w = poles[:, None, :] + t[:, :, None] * d
    return np.arctan2(w[..., 1], w[..., 0])


def line_meet(P, A, Q, B):
    """Intersection of the line :math:`P + t(P - A)` with each line :math:`Q + u(Q - B_i)`: points ``(T, 2)``, ``t``, ``u``."""
    d1 = P - A
    d2 = Q[None, :] - B
    r = Q - P
    det = -d1[0] * d2[:, 1] + d1[1] * d2[:, 0]
    with np.errstate(divide="ignore", invalid="ignore"):  # parallel lines: inf/nan, rejected by the caller
        t = (-r[0] * d2[:, 1] + r[1] * d2[:, 0]) / det
        u = (d1[0] * r[1] - d1[1] * r[0]) / det
        return P[None, :] + t[:, None] * d1[None, :], t, u


def block_image(theta: np.ndarray, pole: np.ndarray, arc: float, tilt: float = 1.0):
    """Map every sample angle through the projection from ``pole``, then re-spread onto [-arc/2, arc/2].

    Returns ``(new_theta, A)`` (numpy model of one block: it predicts where the samples go). ``A``
    sends the two extreme image directions to the ends of the arc; a projective map of the arc that
    fixes its ends has one free parameter left, ``tilt``: 1 treats both ends alike, ``tilt > 1``
    stretches the end at ``-arc/2`` by about ``tilt`` and shrinks the other by about ``1/tilt``.
    """
    cx = np.cos(theta) - pole[0]
    cy = np.sin(theta) - pole[1]
    # the directions seen from the pole lie within a half-turn of ``base``: towards the centre from a pole
    # outside the circle, outwards from a pole inside it (a straightening block; its arc lies that way)
    base = math.atan2(-pole[1], -pole[0]) if float(pole @ pole) > 1.0 else math.atan2(pole[1], pole[0])
    alpha = np.arctan2(cy, cx) - base
    alpha = (alpha + math.pi) % (2 * math.pi) - math.pi  # the cone of directions seen from the pole
    lo, hi = float(alpha.min()), float(alpha.max())
    D = np.array([[math.cos(base + lo), math.cos(base + hi)], [math.sin(base + lo), math.sin(base + hi)]])
    h = arc / 2
    Tm = np.array([[math.cos(h), tilt * math.cos(h)], [-math.sin(h), tilt * math.sin(h)]])
    A = Tm @ np.linalg.inv(D)
    yx = A[0, 0] * cx + A[0, 1] * cy
    yy = A[1, 0] * cx + A[1, 1] * cy
    return np.arctan2(yy, yx), A


def sample_separation(theta, y) -> float:
    """Smallest angle between two samples of different labels that are adjacent in angular order (inf if one label)."""
    order = np.argsort(theta, kind="stable")
    lab = y[order]
    diff = lab[1:] != lab[:-1]
    if not diff.any():
        return math.inf
    return float(np.diff(theta[order])[diff].min())
