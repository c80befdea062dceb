"""The two axes of a batch in :mod:`lnbook.whitening`, and the input check of a batch.

A batch ``X`` has shape ``(..., N, d)``. ``axis=1`` whitens the ``d x d`` feature covariance, ``axis=0`` the
``N x N`` sample Gram (INTL's convention; see :mod:`lnbook.whitening.spectral`). :func:`units_view` turns either
case into one matrix whose columns are whitened. Type, shape and value checks are those of
:mod:`lnbook.util.validation` (:func:`~lnbook.util.validation.as_float_tensor`,
:func:`~lnbook.util.validation.holds`): a value check runs under autograd and ``torch.func.grad`` but not under
``torch.func.vmap``, where the public functions take ``check=False`` and are then pure tensor code.
"""

from __future__ import annotations

import math
import numbers

import torch

from lnbook.util.validation import as_float_tensor

AXES = (0, 1)
FLOAT_DTYPES = (torch.float32, torch.float64)
HALF_PRECISION_REASON = (
    "lnbook.whitening works in float32 or float64 only: eigendecompositions and the Newton iteration lose whole "
    "digits in half precision; inside torch.autocast a layer's output is half precision, convert it before this call, "
    "which then computes in float32 or float64 whatever the autocast setting"
)


def as_batch(X, name: str = "X", min_dim: int = 2, check: bool = True) -> torch.Tensor:
    """``X`` after the checks of :func:`lnbook.util.validation.as_float_tensor`: a float32 or float64 tensor with at
    least ``min_dim`` dimensions, and (``check=True``) finite, a check that under ``vmap`` says to pass ``check=False``."""
    return as_float_tensor(X, name, min_dim, dtypes=FLOAT_DTYPES, check=bool(check), why=HALF_PRECISION_REASON)


def check_axis(axis) -> int:
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral) or int(axis) not in AXES:
        raise ValueError(
            f"axis must be 0 (whiten the N x N sample Gram, after centring each sample over its features) or "
            f"1 (whiten the d x d feature covariance, after centring each feature over the batch), got {axis!r}"
        )
    return int(axis)


def units_view(X: torch.Tensor, axis: int, name: str = "X") -> torch.Tensor:
    """The matrix ``M`` whose *columns* are whitened: ``X`` for axis 1, ``X^T`` for axis 0.

    Rows of ``M`` are the observations over which the covariance is taken: samples for axis 1 (the
    covariance of the d features), features for axis 0 (the Gram of the N samples). At least two rows are
    needed, since the covariance divides by ``rows - 1``.
    """
    M = X if axis == 1 else X.transpose(-1, -2)
    rows = M.shape[-2]
    if rows < 2:
        what = "samples in the batch (N)" if axis == 1 else "features per sample (d)"
        raise ValueError(
            f"{name} has shape {tuple(X.shape)}: axis={axis} needs at least 2 {what}, since the covariance "
            f"divides by {'N' if axis == 1 else 'd'} - 1; use a larger {'batch' if axis == 1 else 'embedding'} "
            f"or the other axis"
        )
    return M


def scaled_to_unit_max(M: torch.Tensor, dims=(-2, -1)) -> tuple[torch.Tensor, torch.Tensor]:
    """``(M / s, s)`` with ``s`` the largest ``|entry|`` over ``dims`` (default: each matrix of ``M``, ``s`` of
    shape ``(..., 1, 1)``; ``dims=-2``: each column, ``-1``: each row); 1 where that part of ``M`` is zero, so a
    zero input stays zero.

    Whitening operators that are scale invariant (IterNorm, ZCA with ``eps = 0``) are computed on ``M / s``
    so that the covariance, of order ``s**2``, neither underflows into subnormals nor overflows to inf at
    extreme input scales. ``s`` is detached: the identity ``f(M) = f(M / s)`` holds for every constant
    ``s > 0``, so treating ``s`` as a constant gives the exact gradient (also under ``torch.func``).
    """
    s = M.detach().abs().amax(dim=dims, keepdim=True)
    s = torch.where(s > 0, s, torch.ones_like(s))
    return M / s, s


# with eps > 0 the scale is at least sqrt(eps) * 2**SHIFT_EXPONENT, so that eps / scale**2 <= 2**1000 is finite in float64
SHIFT_EXPONENT = -500


def scaled_for_shift(M: torch.Tensor, eps: float, dims=(-2, -1)):
    r"""``(M / r, r, shift)`` for an operator that whitens or standardises :math:`\Sigma+\varepsilon I` with
    ``eps > 0``: the same map is computed on ``M / r`` with ``eps`` replaced by ``shift = eps / r**2`` (a float64
    tensor of ``r``'s shape, formed as ``eps / r / r`` so that ``r**2`` never underflows).

    ``r`` is ``s`` of :func:`scaled_to_unit_max` (the largest ``|entry|`` over ``dims``), except where ``s`` is below
    :math:`\sqrt\varepsilon\,2^{-500}`: there ``eps / s**2`` would overflow float64 (for ``eps = 0.1`` below
    ``s`` of about 1e-152, reached only by float64 input), and ``r`` is that floor instead. Then ``shift`` is at most
    :math:`2^{1000}` while the covariance of ``M / r`` is at most 1, below :math:`2^{-1000}` of the shift: the output
    is :math:`X_c/\sqrt\varepsilon` to rounding, as it is in exact arithmetic to that relative accuracy. ``r`` is
    detached (a constant: the map is invariant to it)."""
    s = M.detach().abs().amax(dim=dims, keepdim=True)
    s = torch.where(s > 0, s, torch.ones_like(s))
    r = s.clamp_min(math.sqrt(eps) * 2.0**SHIFT_EXPONENT)
    r64 = r.double()
    return M / r, r, eps / r64 / r64


def from_units_view(M: torch.Tensor, axis: int) -> torch.Tensor:
    return M if axis == 1 else M.transpose(-1, -2)
