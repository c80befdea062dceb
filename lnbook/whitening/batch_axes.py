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
    :math:`\sqrt\varepsilon\,2^{-500}`: there ``eps / s**2`` would exceed ``2**1000``, a safety floor below float64's overflow (for ``eps = 0.1``
    below ``s`` of about 1e-151, reached only by float64 input), and ``r`` is that floor instead. Then ``shift`` is at most
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


def centring_rounding_bound(M: torch.Tensor, dim: int = -2) -> torch.Tensor:
    r"""The largest ``|entry|`` that centring ``M`` over ``dim`` (``M - M.mean(dim, keepdim=True)``, in ``M``'s dtype)
    can leave in a unit (a slice along ``dim``) whose ``n`` entries are all equal, so whose exact centred entries are
    zero: :math:`\gamma_{n+3}\max|M|` over the unit (keepdim), :math:`\gamma_k = ku/(1-ku)`, :math:`u` the unit
    roundoff of ``M``'s dtype; inf where :math:`(n+3)u\ge1`.

    Derivation (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., sections 3.1 and 4.2). The unit
    holds ``n`` copies of ``m``. A floating-point sum of ``n`` terms in *any* order (recursive, pairwise, the blocked
    and vectorised sums of CPU and GPU kernels) is within :math:`\gamma_{n-1}\sum_i|M_i| = \gamma_{n-1}\,n|m|` of
    the exact sum; dividing by ``n`` (or multiplying by a rounded ``1/n``) costs at most two more factors
    :math:`(1+\delta)`, :math:`|\delta|\le u`, so the computed mean is within :math:`\gamma_{n+1}|m|` of ``m``; the
    subtraction :math:`fl(m-\bar m)=(m-\bar m)(1+\delta)` gives :math:`\gamma_{n+2}|m|`. One more ``u`` covers the
    rounding of the product :math:`\gamma\max|M|` itself: :math:`\gamma_{n+3}`, with :math:`|m|=\max|M|` there."""
    n = M.shape[dim]
    u = torch.finfo(M.dtype).eps / 2
    k = n + 3
    gamma = k * u / (1 - k * u) if k * u < 1 else math.inf
    return gamma * M.detach().abs().amax(dim=dim, keepdim=True)


def constant_to_rounding(M: torch.Tensor, Mc: torch.Tensor, dim: int = -2) -> torch.Tensor:
    """For each unit of ``M`` (a slice along ``dim``; a boolean tensor, ``dim`` kept with length 1): whether its
    computed centred entries ``Mc`` are all within :func:`centring_rounding_bound`, so that the unit cannot be told
    from a constant one (in exact arithmetic a constant unit centres to exactly zero, but the rounded mean leaves
    entries of rounding size, which a scale-invariant map such as IterNorm or LayerNorm with ``eps = 0`` blows up to
    O(1)). A unit whose entries really differ by more is never flagged; a constant unit always is, whatever order
    the mean was summed in. No value check: pure tensor code, also under ``torch.func``."""
    Mc = Mc.detach()
    return ((Mc.abs() <= centring_rounding_bound(M, dim)) | (Mc == 0)).all(dim=dim, keepdim=True)


def collapsed_to_rounding(M: torch.Tensor, Mc: torch.Tensor) -> torch.Tensor:
    """Whether each matrix of the units view ``M`` (``(..., rows, n)``, centred over its rows as ``Mc``) is a full
    collapse to rounding: every column constant to rounding (:func:`constant_to_rounding`), i.e. all rows of ``M``
    identical up to the rounding of the mean. A boolean tensor of shape ``(..., 1, 1)``. In exact arithmetic a full
    collapse has a zero covariance (a zero trace); in floating point its covariance is of rounding size, which
    no whitening can tell from a real direction of the data."""
    return constant_to_rounding(M, Mc, dim=-2).all(dim=-1, keepdim=True)


def collapse_description(axis: int) -> str:
    """What a full collapse is on ``axis``: the words of the errors of :mod:`lnbook.whitening`."""
    return ("all samples identical, over the batch (axis 1)" if axis == 1 else
            "every sample constant over its features (axis 0)")


def collapsed_to_rounding_error(axis: int, n_rows: int, dtype: torch.dtype, what: str) -> ValueError:
    """The ``ValueError`` of a batch that :func:`collapsed_to_rounding` flags, for the operator named ``what``."""
    return ValueError(
        f"full collapse ({collapse_description(axis)}), exactly or collapsed to rounding: after centring, every entry "
        f"is within the rounding error of the computed mean (gamma_(n+3) * largest |entry| of its "
        f"{'feature' if axis == 1 else 'sample'}, n = {n_rows}, {dtype}), so the batch cannot be told from one whose "
        f"covariance is zero, and {what} of it would only amplify rounding. Nothing can be whitened: perturb the "
        f"input; if it is not collapsed, subtract its large common offset first or compute in float64")
