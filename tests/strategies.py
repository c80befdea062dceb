"""The hypothesis strategies and small helpers that the test files share.

Imported explicitly (``from tests.strategies import seeds, widths``), never through ``conftest``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

#: seeds for the torch / numpy generators of a test
seeds = st.integers(min_value=0, max_value=2**31 - 1)

#: the LayerNorm epsilons the property tests sample (0 is the pure map of the theorems)
layer_norm_epsilons = st.sampled_from([0.0, 1e-5, 1e-2, 0.5])

#: positive epsilons (where the statement needs eps > 0)
positive_epsilons = st.sampled_from([1e-5, 1e-3, 0.1, 1.0])


def widths(min_d: int = 2, max_d: int = 12) -> st.SearchStrategy[int]:
    """Feature widths ``d`` (LayerNorm needs ``d >= 2``)."""
    return st.integers(min_d, max_d)


def finite_matrices(min_d: int = 2, max_d: int = 12, max_rows: int = 5, bound: float = 1e3) -> st.SearchStrategy:
    """float64 NumPy arrays of shape ``(rows, d)`` with finite entries in ``[-bound, bound]``."""
    return st.integers(min_d, max_d).flatmap(
        lambda d: arrays(
            np.float64,
            st.tuples(st.integers(1, max_rows), st.just(d)),
            elements=st.floats(-bound, bound, allow_nan=False, allow_infinity=False, width=64),
        )
    )


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    """Standard normal float64 tensor from a generator seeded with ``seed``."""
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def regular_polygon(m: int) -> np.ndarray:
    """The ``m`` vertices of the regular polygon inscribed in the unit circle, shape ``(m, 2)``."""
    a = 2 * np.pi * np.arange(m) / m
    return np.stack([np.cos(a), np.sin(a)], axis=1)


#: set-ups shared by the capacity tests: point sets of every kind the builders must handle
POINT_SETS = {
    "random": lambda m: np.random.default_rng(m).standard_normal((m, 3)),
    "circle": regular_polygon,
    "collinear": lambda m: np.outer(np.arange(m, dtype=np.float64), [1.0, -2.0, 0.5]),
    "nearly_coincident": lambda m: np.vstack(
        [np.random.default_rng(m).standard_normal((m - 2, 2)), [[0.3, 0.3], [0.3 + 1e-6, 0.3]]]
    ),
}


def random_point(seed: int, d: int, scale: float = 1.0) -> torch.Tensor:
    """A float64 point of R^d, offset along 1 (which LayerNorm ignores)."""
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(d, generator=g, dtype=torch.float64) + 3.0  # an offset along 1 changes nothing


def rounding_tol(x: torch.Tensor, eps: float, order: int) -> float:
    """Absolute tolerance for a derivative of order 1 or 2 of LayerNorm at x.

    Centring x costs a relative error of about machine-eps * |x|_inf / rho, which the derivative
    amplifies to its own size sqrt(d) / r**order (r^2 = rho^2 + d eps)."""
    from lnbook.core.derivatives import distance_from_uniform_line

    d = x.shape[-1]
    rho = float(distance_from_uniform_line(x))
    return 1e-12 * (1 + float(x.abs().max()) / rho) * math.sqrt(d) / (rho**2 + d * eps) ** (order / 2)


#: the devices a device-sensitive test runs on: the CPU always, CUDA when torch sees a GPU
devices = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                              reason="no CUDA device on this machine"))]
