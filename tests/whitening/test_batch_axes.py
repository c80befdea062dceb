"""The rounding of centring a constant unit: the bound of ``centring_rounding_bound`` holds in every summation
order, so ``constant_to_rounding`` flags every constant unit, and no unit that really varies."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lnbook.whitening.batch_axes import centring_rounding_bound, collapsed_to_rounding, constant_to_rounding

NUMPY = {torch.float32: np.float32, torch.float64: np.float64}


def recursive_mean(column: np.ndarray) -> np.floating:
    """The mean by left-to-right summation in the column's dtype, then one division: the summation order with the
    largest worst-case error, which torch's kernels do not use."""
    total = column.dtype.type(0)
    for value in column:
        total = column.dtype.type(total + value)
    return column.dtype.type(total / column.dtype.type(len(column)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [3, 7, 100, 256, 1000])
def test_centring_a_constant_unit_stays_within_the_bound_in_torch_and_in_the_worst_order(dtype, n):
    g = torch.Generator().manual_seed(n)
    values = (torch.randn(200, generator=g, dtype=torch.float64) * 10 ** torch.randint(-20, 20, (200,), generator=g)).to(dtype)
    M = values.repeat(n, 1)  # n identical rows: every column constant, exact centred entries all zero
    bound = centring_rounding_bound(M)
    torch_centred = M - M.mean(dim=-2, keepdim=True)
    assert bool((torch_centred.abs() <= bound).all())
    assert bool(constant_to_rounding(M, torch_centred).all()) and bool(collapsed_to_rounding(M, torch_centred).all())
    nonzero = int((torch_centred != 0).any(dim=0).sum())  # the rounding the check exists for (a count, not asserted)
    cols = M.numpy().astype(NUMPY[dtype])
    worst = np.stack([cols[:, j] - recursive_mean(cols[:, j]) for j in range(0, cols.shape[1], 5)], axis=1)
    assert bool((torch.from_numpy(np.abs(worst)) <= bound[..., ::5]).all()), nonzero


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_unit_that_varies_beyond_the_bound_is_not_flagged(dtype):
    n = 256
    u = torch.finfo(dtype).eps / 2
    for offset in (0.0, 1.0, 1e3):
        M = torch.full((n, 4), offset, dtype=dtype) + torch.zeros(n, 4, dtype=dtype)
        M[0, 1] += max(offset, 1.0) * 4 * (n + 3) * u  # one entry of column 1 off by about 4 bounds
        Mc = M - M.mean(dim=-2, keepdim=True)
        flags = constant_to_rounding(M, Mc)
        assert flags.tolist() == [[True, False, True, True]]
        assert not bool(collapsed_to_rounding(M, Mc))
    X = 1e3 + torch.randn(256, 128, generator=torch.Generator().manual_seed(0)).to(dtype)  # a large common offset
    assert not bool(constant_to_rounding(X, X - X.mean(dim=-2, keepdim=True)).any())
