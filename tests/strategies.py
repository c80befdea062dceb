"""The hypothesis strategies and small helpers that the test files share.

Imported explicitly (``from tests.strategies import seeds, widths``), never through ``conftest``.
"""

from __future__ import annotations

import numpy as np
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
