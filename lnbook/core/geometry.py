r"""Winsor's geometric primitives of LayerNorm: the core map, stretching and folding.

The core nonlinearity inside LN is (almost) the normalisation of a vector,

.. math:: u_\varepsilon(x) = \frac{x}{\sqrt{\|x\|^2 + \varepsilon}},

because :math:`\mathrm{LN}(x) = \sqrt d\, u_{d\varepsilon}(Px)` with the centring projector
:math:`P`. Pre-composing :math:`u` with simple affine maps gives two primitives:

* **stretching** by a factor :math:`a` along a unit direction :math:`e`:
  :math:`x \mapsto u(x + (a-1)\langle e, x\rangle e)`;
* **folding** by a shift :math:`s` along :math:`e`: :math:`x \mapsto u(x + s e)`.

All functions act on the last dimension of a floating-point torch tensor.
"""

from __future__ import annotations

import math

import torch

from lnbook.util.validation import as_float_tensor, check_eps, check_positive_int

__all__ = [
    "plane_basis",
    "spherical_normalize",
    "stretch",
    "fold",
    "activation_curve",
    "stretch_curve",
    "fold_curve",
    "activation_surface",
    "circle_points",
    "complement_basis",
    "complement_coordinates",
]


def plane_basis(dtype=torch.float64) -> torch.Tensor:
    r"""Orthonormal basis :math:`E \in \mathbb R^{3\times 2}` of the plane :math:`\{z : \sum z = 0\}`
    in which width-3 LayerNorm outputs live.

    Columns :math:`(1,-1,0)/\sqrt2` and :math:`(1,1,-2)/\sqrt6`; :math:`E E^\top = I - \mathbf 1\mathbf 1^\top/3`.
    """
    E = torch.tensor([[1.0, 1.0], [-1.0, 1.0], [0.0, -2.0]], dtype=torch.float64)
    return (E / E.norm(dim=0)).to(dtype)


def _unit_direction(direction, d: int, like: torch.Tensor) -> torch.Tensor:
    if isinstance(direction, int) and not isinstance(direction, bool):
        if not -d <= direction < d:
            raise ValueError(f"direction index {direction} is out of range for width d={d}")
        e = torch.zeros(d, dtype=like.dtype, device=like.device)
        e[direction] = 1.0
        return e
    e = torch.as_tensor(direction, dtype=like.dtype, device=like.device)
    if e.shape != (d,):
        raise ValueError(f"direction must be an axis index or a vector of shape ({d},), got shape {tuple(e.shape)}")
    norm = torch.linalg.vector_norm(e)
    if not bool(torch.isfinite(norm)) or float(norm) == 0.0:
        raise ValueError("direction must be a finite, non-zero vector")
    return e / norm


def spherical_normalize(x: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """The core map ``x / sqrt(|x|^2 + eps)`` of the last dimension. Raises on ``x = 0`` with ``eps = 0``."""
    x = as_float_tensor(x)
    eps = check_eps(eps)
    denom = torch.sqrt(x.pow(2).sum(dim=-1, keepdim=True) + eps)
    if eps == 0.0 and bool((denom == 0).any()):
        raise ValueError("spherical_normalize: an input vector is 0 and eps=0 (0/0); pass eps > 0")
    return x / denom


def stretch(x: torch.Tensor, factor: float, direction=0, eps: float = 0.0) -> torch.Tensor:
    """Scale ``x`` by ``factor`` along ``direction`` (axis index or vector), then normalise."""
    x = as_float_tensor(x)
    e = _unit_direction(direction, x.shape[-1], x)
    along = (x @ e).unsqueeze(-1) * e
    return spherical_normalize(x + (float(factor) - 1.0) * along, eps)


def fold(x: torch.Tensor, shift: float, direction=0, eps: float = 0.0) -> torch.Tensor:
    """Shift ``x`` by ``shift`` along ``direction`` (axis index or vector), then normalise."""
    x = as_float_tensor(x)
    e = _unit_direction(direction, x.shape[-1], x)
    return spherical_normalize(x + float(shift) * e, eps)


def activation_curve(t: torch.Tensor, eps: float = 1.0) -> torch.Tensor:
    """The core map in one dimension, ``t / sqrt(t^2 + eps)``: a sigmoid-shaped curve from -1 to 1."""
    t = as_float_tensor(t)
    eps = check_eps(eps)
    return spherical_normalize(t.unsqueeze(-1), eps).squeeze(-1)


def circle_points(n: int, dtype=torch.float64) -> torch.Tensor:
    """``n`` points evenly spaced on the unit circle, shape ``(n, 2)``, starting at angle 0."""
    theta = torch.arange(n, dtype=dtype) * (2 * torch.pi / n)
    return torch.stack([torch.cos(theta), torch.sin(theta)], dim=-1)


def stretch_curve(c: torch.Tensor, factor: float) -> torch.Tensor:
    r"""First coordinate after stretching a point of the unit circle with first coordinate ``c``.

    For :math:`x = (c, \pm\sqrt{1-c^2})` and stretching by :math:`a` along :math:`e_1`,
    the output's first coordinate is :math:`a c / \sqrt{a^2 c^2 + 1 - c^2}`: the identity for
    :math:`a=1`, approaching :math:`\operatorname{sign}(c)` as :math:`a \to \infty`.
    """
    c = as_float_tensor(c)
    if bool((c.abs() > 1).any()):
        raise ValueError("stretch_curve: c is a coordinate of a unit-circle point, so |c| <= 1 is required")
    a = float(factor)
    return a * c / torch.sqrt(a * a * c * c + 1 - c * c)


def fold_curve(t: torch.Tensor, shift: float, eps: float = 0.0) -> torch.Tensor:
    r"""Coordinate along the shift after folding the line :math:`\{(t, 0)\}`: :math:`s / \sqrt{t^2 + s^2 + \varepsilon}`.

    It is even in :math:`t`: folding maps :math:`t` and :math:`-t` to the same value, the
    "absolute value" (divot) shape; large :math:`|t|` (extremes) are separated from small ones.
    """
    t = as_float_tensor(t)
    x = torch.stack([t, torch.zeros_like(t)], dim=-1)
    return fold(x, shift, direction=1, eps=eps)[..., 1]


def activation_surface(x1: torch.Tensor, x2: torch.Tensor, coordinate: int = 0, eps: float = 0.0) -> torch.Tensor:
    """Coordinate ``coordinate`` of the core map on the 2-D grid ``(x1, x2)`` (broadcast together).

    Slices of this surface along lines are the 1-D curves: the line ``x2 = s`` read in coordinate 0
    is a sigmoid of width ``s``; read in coordinate 1 it is the fold curve.
    """
    x1, x2 = torch.broadcast_tensors(as_float_tensor(x1, "x1", 0), as_float_tensor(x2, "x2", 0))
    if coordinate not in (0, 1):
        raise ValueError(f"coordinate must be 0 or 1 for a 2-D surface, got {coordinate}")
    return spherical_normalize(torch.stack([x1, x2], dim=-1), eps)[..., coordinate]


def complement_basis(d: int, dtype=torch.float64) -> torch.Tensor:
    r"""Orthonormal basis :math:`Q \in \mathbb R^{d \times (d-1)}` of :math:`\mathbf 1^\perp` (Helmert's).

    Column :math:`k` is :math:`(1, \dots, 1, -k, 0, \dots, 0)/\sqrt{k(k+1)}` (``k`` ones), so that
    :math:`Q^\top Q = I` and :math:`QQ^\top = I - \mathbf 1\mathbf 1^\top/d`.
    """
    d = check_positive_int(d, "d", minimum=2)
    Q = torch.zeros(d, d - 1, dtype=dtype)
    for k in range(1, d):
        Q[:k, k - 1] = 1.0
        Q[k, k - 1] = -float(k)
        Q[:, k - 1] /= math.sqrt(k * (k + 1))
    return Q


def complement_coordinates(z: torch.Tensor) -> torch.Tensor:
    r"""Coordinates of LN outputs ``z`` (shape ``(n, d)``) in :func:`complement_basis`, divided by
    :math:`\sqrt d`: LN outputs land on the unit sphere of :math:`\mathbb R^{d-1}` (a circle for ``d = 3``)."""
    d = z.shape[-1]
    Q = complement_basis(d, dtype=z.dtype).to(z.device)
    return z @ Q / math.sqrt(d)
