"""Input checks shared by every public function of :mod:`lnbook`.

Each check raises a :class:`TypeError` or :class:`ValueError` whose message names the
argument and says what to do, so that bad input never turns into a silent NaN.
"""

from __future__ import annotations

import numbers

import torch


def as_float_tensor(x, name: str = "x", min_dim: int = 1) -> torch.Tensor:
    """Return ``x`` if it is a floating-point torch tensor with at least ``min_dim`` dimensions.

    Raises ``TypeError`` for anything that is not a floating-point tensor and ``ValueError``
    for too few dimensions or non-finite entries.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor, got {type(x).__name__}; "
            f"convert it with torch.as_tensor({name}, dtype=torch.float64)"
        )
    if not torch.is_floating_point(x):
        raise TypeError(
            f"{name} must have a floating-point dtype, got {x.dtype}; "
            f"convert it with {name}.double() or {name}.float()"
        )
    if x.dim() < min_dim:
        raise ValueError(
            f"{name} must have at least {min_dim} dimension(s) (features on the last one), "
            f"got shape {tuple(x.shape)}"
        )
    if not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise ValueError(f"{name} contains {bad} non-finite value(s) (NaN or inf); clean the input first")
    return x


def check_eps(eps, name: str = "eps") -> float:
    """Return ``eps`` as a float after checking that it is a finite number >= 0."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(eps).__name__}")
    eps = float(eps)
    if not eps >= 0 or eps == float("inf"):
        raise ValueError(f"{name} must be a finite number >= 0, got {eps}")
    return eps


def check_positive_int(value, name: str, minimum: int = 1) -> int:
    """Return ``value`` if it is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_width(d: int, minimum: int, what: str) -> None:
    """Raise if the feature width ``d`` (last dimension) is below ``minimum``."""
    if d < minimum:
        raise ValueError(
            f"{what} needs at least {minimum} features on the last dimension, got {d}; "
            "a single feature has zero variance, so its normalisation is undefined"
        )
