r"""Closed-form derivatives of LayerNorm (no affine).

With :math:`z = Px` (:math:`P = I - \mathbf 1\mathbf 1^\top/d`) and
:math:`r = \sqrt{\|z\|^2 + d\varepsilon}`, :math:`\mathrm{LN}(x) = \sqrt d\, z / r` and

.. math:: J(x) = \frac{\partial\,\mathrm{LN}(x)}{\partial x} = \frac{\sqrt d}{r}\Big(P - \frac{z z^\top}{r^2}\Big),

a symmetric matrix with :math:`J\mathbf 1 = 0`, :math:`Jz = \sqrt d\, d\varepsilon\, z / r^3` and
:math:`Jv = (\sqrt d / r)\, v` for every :math:`v \perp \mathbf 1, z`.

The Hessian :math:`H_{ijk} = \partial^2 \mathrm{LN}_i / \partial x_j \partial x_k` is symmetric in
all three indices:

.. math:: H_{ijk} = \frac{\sqrt d}{r^3}\Big(\frac{3 z_i z_j z_k}{r^2} - P_{ij} z_k - P_{ik} z_j - P_{jk} z_i\Big).

**Sizes.** Both depend on ``x`` only through :math:`\rho = \|Px\|`, the distance of ``x`` from
the line spanned by :math:`\mathbf 1`, and :math:`r^2 = \rho^2 + d\varepsilon`:

* spectral norm :math:`\|J\|_2 = \sqrt d / r` for :math:`d \ge 3`
  (for :math:`d = 2`: :math:`\sqrt 2\, 2\varepsilon / r^3`);
* quadratic-form norm :math:`\|H\|_{q} = \sup_{\|h\|=1} \|H[h, h]\|`, with
  :math:`H[h,h]_i = \sum_{jk} H_{ijk} h_j h_k`: for :math:`d \ge 3`, it is :math:`2\sqrt d / (\sqrt 3\, r^2)`
  when :math:`\rho^2 \ge d\varepsilon / 2`, and :math:`3\sqrt d\, d\varepsilon\, \rho / r^5` otherwise
  (for :math:`d = 2` always the latter);
* Frobenius norm :math:`\|H\|_F^2 = \frac{d\rho^2}{r^6}\big(9 (d\varepsilon)^2/r^4 + 3(d-2)\big)`,
  which is :math:`3d(d-2)/\rho^4` at :math:`\varepsilon = 0`.

**Float64.** Both are computed in units of :math:`u = \max(\max_i |z_i|, \sqrt\varepsilon)` per row:
with :math:`z = u w`, :math:`r = u\, r_w`, :math:`r_w^2 = \|w\|^2 + d\varepsilon/u^2`,
:math:`J = \frac{\sqrt d}{u\, r_w}(P - ww^\top/r_w^2)` and :math:`H` likewise with :math:`\sqrt d/(u^2 r_w^3)`.
In exact arithmetic this changes nothing; in float64 it keeps :math:`\|z\|^2` from underflowing (which made a
tiny input look constant, or gave a silently wrong scale) or overflowing (NaN), so that at :math:`\varepsilon = 0`
:math:`J(cx) = J(x)/c` and :math:`H(cx) = H(x)/c^2` hold to rounding for every :math:`c > 0` whose results are
in range.

>>> import torch
>>> x = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64)
>>> layer_norm_hessian(x, eps=0.0).shape
torch.Size([3, 3, 3])
>>> round(float(distance_from_uniform_line(x)) ** 2, 12)  # |x - mean(x) 1|^2 = 14/3
4.666666666667
>>> layer_norm_jacobian_norm(3, 2.0, eps=0.0)  # sqrt(3) / 2
tensor(0.8660, dtype=torch.float64)
"""

from __future__ import annotations

import math

import torch

from lnbook.util.validation import as_float_tensor, check_eps, check_width, under_transform

__all__ = [
    "layer_norm_jacobian",
    "layer_norm_hessian",
    "distance_from_uniform_line",
    "layer_norm_jacobian_norm",
    "layer_norm_hessian_norm",
    "layer_norm_hessian_frobenius",
]


def _centred_input(x, eps, what: str):
    r"""Checked ``(d, u, w, rw2, P)`` for the derivative formulas, computed on rescaled rows.

    ``z = Px = u w`` and ``r = u sqrt(rw2)`` with ``rw2 = |w|^2 + d eps / u^2``, where the per-row unit is
    ``u = max(max_i |z_i|, sqrt(eps))``: the entries of ``w`` are at most 1 in modulus and ``d eps / u^2 <= d``,
    so nothing that matters is squared out of range (for ``eps = 0``, one entry of ``w`` is ``±1``; for
    ``eps > 0`` an entry of ``w`` that underflows when squared is negligible beside ``d eps / u^2``). The row is
    divided by its largest entry before centring, as in :func:`lnbook.core.norms.layer_norm`, so the mean
    cannot overflow. Squaring ``z`` itself (the formula as written) underflows for ``|z| < 1e-154`` (wrong or
    "constant input") and overflows for ``|z| > 1e154`` (NaN).
    """
    x = as_float_tensor(x)
    eps = check_eps(eps)
    d = x.shape[-1]
    check_width(d, 2, what)
    s0 = x.abs().amax(dim=-1, keepdim=True)
    s0 = torch.where(s0 > 0, s0, torch.ones_like(s0))
    x0 = x / s0
    z = (x0 - x0.mean(dim=-1, keepdim=True)) * s0
    t = z.abs().amax(dim=-1, keepdim=True)
    if eps == 0.0 and not under_transform(t) and bool((t == 0).any()):
        raise ValueError(f"{what}: LN is not differentiable at a constant input with eps=0; pass eps > 0")
    u = torch.maximum(t, torch.full_like(t, math.sqrt(eps))) if eps > 0.0 else torch.where(t > 0, t, torch.ones_like(t))
    w = z / u
    rw2 = w.pow(2).sum(dim=-1) + d * (math.sqrt(eps) / u.squeeze(-1)).pow(2)  # <= d; never 0/0
    P = torch.eye(d, dtype=x.dtype, device=x.device) - 1.0 / d
    return d, u.squeeze(-1), w, rw2, P


def _checked_range(out: torch.Tensor, what: str) -> torch.Tensor:
    if not under_transform(out) and not bool(torch.isfinite(out).all()):
        raise ValueError(
            f"{what}: the derivative at this input exceeds the float64 range (its size grows like "
            "1/||Px|| per order, and ||Px|| is too small); rescale the input or pass eps > 0"
        )
    return out


def layer_norm_jacobian(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Jacobian of :func:`lnbook.core.norms.layer_norm` at ``x`` of shape ``(..., d)``; returns ``(..., d, d)``.

    Computed on rescaled rows (see the module docstring, *Float64*): ``J(c x) = J(x) / c`` holds to rounding
    for every ``c > 0`` at ``eps = 0``, from ``||Px|| ~ 1e-300`` to ``1e300``.
    """
    d, u, w, rw2, P = _centred_input(x, eps, "layer_norm_jacobian")
    rw = rw2.sqrt()[..., None, None]
    scale = math.sqrt(d) / u[..., None, None] / rw
    return _checked_range(scale * (P - w.unsqueeze(-1) * w.unsqueeze(-2) / rw**2), "layer_norm_jacobian")


def layer_norm_hessian(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Hessian of :func:`lnbook.core.norms.layer_norm` at ``x`` of shape ``(..., d)``; returns ``(..., d, d, d)``.

    Entry ``[..., i, j, k]`` is the second derivative of output ``i`` with respect to inputs ``j``
    and ``k`` (the layout of ``torch.func.hessian``); formula in the module docstring, computed on rescaled
    rows as :func:`layer_norm_jacobian` (``H(c x) = H(x) / c^2`` at ``eps = 0``). Raises ``ValueError`` where
    the entries exceed the float64 range (``||Px||`` below about ``1e-154``); entries below it underflow to 0.
    """
    d, u, w, rw2, P = _centred_input(x, eps, "layer_norm_hessian")
    rw2 = rw2[..., None, None, None]
    uu = u[..., None, None, None]
    wi = w[..., :, None, None]
    wj = w[..., None, :, None]
    wk = w[..., None, None, :]
    sym = P[:, :, None] * wk + P[:, None, :] * wj + P[None, :, :] * wi
    scale = math.sqrt(d) / uu / uu / rw2.pow(1.5)
    return _checked_range(scale * (3.0 * wi * wj * wk / rw2 - sym), "layer_norm_hessian")


def distance_from_uniform_line(x: torch.Tensor) -> torch.Tensor:
    r"""The distance :math:`\rho = \|Px\| = \|x - \bar x \mathbf 1\|` of each ``x`` (last dim) from the line :math:`\mathbb R\mathbf 1`."""
    x = as_float_tensor(x)
    return (x - x.mean(dim=-1, keepdim=True)).norm(dim=-1)


def _check_size_args(d, rho, eps, what: str) -> tuple[int, torch.Tensor, float]:
    if isinstance(d, bool) or not isinstance(d, int):
        raise TypeError(f"{what}: d must be an integer, got {type(d).__name__}")
    check_width(d, 2, what)
    rho = torch.as_tensor(rho, dtype=torch.float64)
    if not bool(torch.isfinite(rho).all()) or bool((rho < 0).any()):
        raise ValueError(f"{what}: rho (the distance from the line of 1) must be finite and >= 0")
    eps = check_eps(eps)
    if eps == 0.0 and bool((rho == 0).any()):
        raise ValueError(f"{what}: at rho=0 with eps=0 LN is not differentiable; pass eps > 0 or rho > 0")
    return d, rho, eps


def layer_norm_jacobian_norm(d: int, rho, eps: float = 1e-5) -> torch.Tensor:
    r"""Spectral norm of LN's Jacobian at any ``x`` of width ``d`` with :math:`\|Px\| = \rho` (float64 tensor).

    :math:`\sqrt d / r` for :math:`d \ge 3` and :math:`\sqrt 2 \cdot 2\varepsilon / r^3` for
    :math:`d = 2`, with :math:`r = \sqrt{\rho^2 + d\varepsilon}`.
    """
    d, rho, eps = _check_size_args(d, rho, eps, "layer_norm_jacobian_norm")
    r = (rho.pow(2) + d * eps).sqrt()
    if d == 2:
        return math.sqrt(d) * d * eps / r.pow(3)
    return math.sqrt(d) / r


def layer_norm_hessian_norm(d: int, rho, eps: float = 1e-5) -> torch.Tensor:
    r"""Quadratic-form norm :math:`\sup_{\|h\|=1}\|H(x)[h,h]\|` of LN's Hessian at :math:`\|Px\| = \rho`.

    The largest second-order change of LN along a unit step, :math:`\mathrm{LN}(x + th) =
    \mathrm{LN}(x) + tJh + \tfrac{t^2}{2} H[h,h] + O(t^3)`. Closed form in the module docstring.
    """
    d, rho, eps = _check_size_args(d, rho, eps, "layer_norm_hessian_norm")
    r2 = rho.pow(2) + d * eps
    small = math.sqrt(d) * 3.0 * d * eps * rho / r2.pow(2.5)
    if d == 2:
        return small
    large = 2.0 * math.sqrt(d) / (math.sqrt(3.0) * r2)
    return torch.where(2.0 * rho.pow(2) >= d * eps, large, small)


def layer_norm_hessian_frobenius(d: int, rho, eps: float = 1e-5) -> torch.Tensor:
    r"""Frobenius norm of LN's Hessian at :math:`\|Px\| = \rho`; :math:`\sqrt{3d(d-2)}/\rho^2` when ``eps=0``."""
    d, rho, eps = _check_size_args(d, rho, eps, "layer_norm_hessian_frobenius")
    s = rho.pow(2)
    r2 = s + d * eps
    one_minus_q = d * eps / r2  # 9q^2 - 18q + 3(d+1) = 9(1-q)^2 + 3(d-2), written without cancellation
    return (d * s / r2.pow(3) * (9 * one_minus_q.pow(2) + 3 * (d - 2))).sqrt()
