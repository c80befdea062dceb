r"""Closed-form derivatives of LayerNorm (no affine).

With :math:`z = Px` (:math:`P = I - \mathbf 1\mathbf 1^\top/d`) and
:math:`r = \sqrt{\|z\|^2 + d\varepsilon}`, :math:`\mathrm{LN}(x) = \sqrt d\, z / r` and

.. math:: J(x) = \frac{\partial\,\mathrm{LN}(x)}{\partial x} = \frac{\sqrt d}{r}\Big(P - \frac{z z^\top}{r^2}\Big),

a symmetric matrix with :math:`J\mathbf 1 = 0`, :math:`Jz = \sqrt d\, d\varepsilon\, z / r^3` and
:math:`Jv = (\sqrt d / r)\, v` for every :math:`v \perp \mathbf 1, z`.
"""

from __future__ import annotations

import math

import torch

from lnbook.validation import as_float_tensor, check_eps, check_width

__all__ = ["layer_norm_jacobian"]


def layer_norm_jacobian(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Jacobian of :func:`lnbook.norms.layer_norm` at ``x`` of shape ``(..., d)``; returns ``(..., d, d)``."""
    x = as_float_tensor(x)
    eps = check_eps(eps)
    d = x.shape[-1]
    check_width(d, 2, "layer_norm_jacobian")
    z = x - x.mean(dim=-1, keepdim=True)
    r2 = z.pow(2).sum(dim=-1) + d * eps
    if eps == 0.0 and bool((r2 == 0).any()):
        raise ValueError("layer_norm_jacobian: LN is not differentiable at a constant input with eps=0; pass eps > 0")
    P = torch.eye(d, dtype=x.dtype, device=x.device) - 1.0 / d
    r = r2.sqrt()[..., None, None]
    return math.sqrt(d) / r * (P - z.unsqueeze(-1) * z.unsqueeze(-2) / r**2)
