"""Input checks shared by the functions of :mod:`lnbook.whitening`.

Every check raises a :class:`TypeError` or :class:`ValueError` that names the argument and says what to
do. Checks that look at tensor *values* (NaN, a singular or zero-trace covariance) are Python control flow
on data: they run under autograd and ``torch.func.grad``, but not under ``torch.func.vmap``; there the
public functions take ``check=False`` and are then pure tensor code (see :func:`is_true`).
"""

from __future__ import annotations

import numbers

import torch

AXES = (0, 1)
VMAP_HINT = (
    "the input checks of lnbook.whitening look at tensor values, which torch.func.vmap cannot do; "
    "call the function with check=False inside vmap (it is then pure tensor code; every function is "
    "also batched over leading dimensions, so vmap is rarely needed)"
)


def is_true(condition: torch.Tensor) -> bool:
    """``bool(condition)``, with a clear message when called under ``torch.func.vmap``."""
    try:
        return bool(condition)
    except RuntimeError as err:
        if "data-dependent control flow" in str(err):
            raise RuntimeError(VMAP_HINT) from err
        raise


def check_tensor(X, name: str, min_dim: int, check: bool) -> torch.Tensor:
    if not isinstance(X, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor, got {type(X).__name__}; convert it with "
            f"torch.as_tensor({name}, dtype=torch.float64)"
        )
    if not torch.is_floating_point(X):
        raise TypeError(f"{name} must have a floating-point dtype, got {X.dtype}; use {name}.double() or {name}.float()")
    if X.dtype not in (torch.float32, torch.float64):
        raise TypeError(
            f"{name} has dtype {X.dtype}; lnbook.whitening works in float32 or float64 only (eigendecompositions and "
            f"the Newton iteration lose whole digits in half precision): convert with {name}.float() or {name}.double()"
        )
    if X.dim() < min_dim:
        raise ValueError(
            f"{name} must have at least {min_dim} dimensions (samples x features, with optional leading batch "
            f"dimensions), got shape {tuple(X.shape)}"
        )
    if check and not is_true(torch.isfinite(X).all()):
        raise ValueError(f"{name} contains NaN or inf; clean the input (a NaN embedding usually means the training diverged)")
    return X


def check_axis(axis) -> int:
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral) or int(axis) not in AXES:
        raise ValueError(
            f"axis must be 0 (whiten the N x N sample Gram, after centring each sample over its features) or "
            f"1 (whiten the d x d feature covariance, after centring each feature over the batch), got {axis!r}"
        )
    return int(axis)


def check_iterations(T, name: str = "T") -> int:
    if isinstance(T, bool) or not isinstance(T, numbers.Integral):
        raise TypeError(f"{name} (the number of Newton iterations) must be an integer, got {type(T).__name__}")
    if T < 0:
        raise ValueError(f"{name} (the number of Newton iterations) must be >= 0, got {T}; T = 0 is a pure trace scaling")
    return int(T)


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


def scaled_to_unit_max(M: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(M / s, s)`` with ``s`` the largest ``|entry|`` of each matrix of ``M`` (shape ``(..., 1, 1)``; 1 where
    ``M`` is zero, so a zero input stays zero).

    Whitening operators that are scale invariant (IterNorm, ZCA with ``eps = 0``) are computed on ``M / s``
    so that the covariance, of order ``s**2``, neither underflows into subnormals nor overflows to inf at
    extreme input scales. ``s`` is detached: the identity ``f(M) = f(M / s)`` holds for every constant
    ``s > 0``, so treating ``s`` as a constant gives the exact gradient (also under ``torch.func``).
    """
    s = M.detach().abs().amax(dim=(-2, -1), keepdim=True)
    s = torch.where(s > 0, s, torch.ones_like(s))
    return M / s, s


def from_units_view(M: torch.Tensor, axis: int) -> torch.Tensor:
    return M if axis == 1 else M.transpose(-1, -2)
