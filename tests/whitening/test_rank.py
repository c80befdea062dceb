"""Effective rank: its range, invariances and the collapsed case."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lnbook.whitening import effective_rank, top_eigenvalue_share


def test_effective_rank_extremes():
    line = torch.randn(50, 1, dtype=torch.float64) * torch.randn(1, 16, dtype=torch.float64)
    assert float(effective_rank(line)) == pytest.approx(1.0, abs=1e-6)
    Q, _ = torch.linalg.qr(torch.randn(40, 8, dtype=torch.float64))
    Q = Q - Q.mean(0)  # centred; singular values nearly equal
    assert float(effective_rank(torch.linalg.qr(Q)[0] @ torch.eye(8, dtype=torch.float64))) > 7.5
    assert float(effective_rank(torch.randn(5, 3, 20))[0]) <= 2 + 1e-9  # at most N - 1 after centring


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), scale=st.floats(1e-3, 1e3))
def test_effective_rank_is_invariant_to_scale_and_rotation(seed, scale):
    g = torch.Generator().manual_seed(seed)
    Z = torch.randn(30, 6, generator=g, dtype=torch.float64) * torch.logspace(0, 1, 6, dtype=torch.float64)
    Q, _ = torch.linalg.qr(torch.randn(6, 6, generator=g, dtype=torch.float64))
    assert float(effective_rank(scale * Z @ Q)) == pytest.approx(float(effective_rank(Z)), rel=1e-9)
    assert 1 - 1e-9 <= float(effective_rank(Z)) <= 6 + 1e-9


def test_effective_rank_errors():
    with pytest.raises(ValueError, match="full collapse"):
        effective_rank(torch.ones(5, 3))
    with pytest.raises(ValueError, match="at least 2 samples"):
        effective_rank(torch.ones(1, 3))


def test_effective_rank_of_a_known_spectrum():
    """Singular values (3, 1): p = (3/4, 1/4), erank = exp(-(3/4) log(3/4) - (1/4) log(1/4)) = 1.7548..."""
    Z = torch.tensor([[3.0, 0.0], [-3.0, 0.0], [0.0, 1.0], [0.0, -1.0]], dtype=torch.float64) / 2**0.5
    expected = math.exp(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert float(effective_rank(Z)) == pytest.approx(expected, rel=1e-12)


def test_effective_rank_under_torch_func_vmap():
    """Under vmap the value checks cannot run: the error says to pass check=False, which effective_rank
    accepts; the vmapped values equal the batched call to 1e-12, and check=False gives NaN for a collapse."""
    Z = torch.randn(3, 20, 12, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with pytest.raises(RuntimeError, match="check=False"):
        torch.func.vmap(effective_rank)(Z)
    vmapped = torch.func.vmap(lambda z: effective_rank(z, check=False))(Z)
    assert torch.allclose(vmapped, effective_rank(Z), atol=1e-12, rtol=0)
    assert torch.isnan(effective_rank(torch.ones(5, 3), check=False))


def test_top_eigenvalue_share_of_known_spectra():
    """Covariance eigenvalues (9, 4, 1, 1, 1, 0) (axes scaled by 3, 2, 1, 1, 1, 0, in a random basis): the top
    two hold 13/16, the top five all; a line holds everything in one direction; an isotropic batch of d
    features gives k/d; scale invariant; float64 to 1e-12."""
    g = torch.Generator().manual_seed(2)
    first = torch.cat([torch.ones(8, 1, dtype=torch.float64), torch.randn(8, 5, generator=g, dtype=torch.float64)], 1)
    U = torch.linalg.qr(first)[0][:, 1:6]  # five orthonormal columns orthogonal to 1: centred
    Z = U * torch.tensor([3.0, 2.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    R, _ = torch.linalg.qr(torch.randn(6, 6, generator=g, dtype=torch.float64))
    Z = torch.cat([Z, torch.zeros(8, 1, dtype=torch.float64)], 1) @ R
    assert float(top_eigenvalue_share(Z, 2)) == pytest.approx(13 / 16, abs=1e-12)
    assert float(top_eigenvalue_share(Z, 5)) == pytest.approx(1.0, abs=1e-12)
    assert float(top_eigenvalue_share(1e-7 * Z, 1)) == pytest.approx(9 / 16, abs=1e-12)
    line = torch.randn(50, 1, generator=g, dtype=torch.float64) * torch.randn(1, 16, generator=g, dtype=torch.float64)
    assert float(top_eigenvalue_share(line, 1)) == pytest.approx(1.0, abs=1e-12)
    iso = torch.linalg.qr(torch.cat([torch.ones(40, 1, dtype=torch.float64),
                                     torch.randn(40, 8, generator=g, dtype=torch.float64)], 1))[0][:, 1:]
    assert float(top_eigenvalue_share(iso, 3)) == pytest.approx(3 / 8, abs=1e-12)


@pytest.mark.parametrize("scale", [1e-30, 1e-20, 1e-10, 1.0, 1e10, 1e20, 1e30, 1e37])
def test_top_eigenvalue_share_is_scale_invariant_in_float32(scale):
    """The share is scale invariant, and computed on the centred batch divided by its largest |entry|: in float32
    from 1e-30 (where the squared singular values underflowed: a false "full collapse") to 1e30 (where they
    overflowed: NaN) it equals the float64 share at scale 1 within 10 k n u (k = 5, n = 32 features, u = 2^-24;
    the singular values have backward error of order n u relative to the largest)."""
    Z = torch.randn(16, 32, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    exact = float(top_eigenvalue_share(Z))
    got = float(top_eigenvalue_share((Z * scale).float()))
    assert abs(got - exact) <= 10 * 5 * 32 * 2.0**-24, (scale, got, exact)


@pytest.mark.parametrize("scale", [1e-30, 1e-20, 1.0, 1e20, 1e30, 1e37])
def test_effective_rank_is_scale_invariant_in_float32(scale):
    """The referee's overflow: at 1e37 in float32 the singular values (and the batch mean's sum) overflowed and a
    healthy batch read as rank 1.0. Divided by its largest |entry| first, the float32 effective rank equals the
    float64 one at scale 1 within 10 n u relative (n = 32 features, u = 2^-24) from 1e-30 to 1e37."""
    Z = torch.randn(16, 32, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    exact = float(effective_rank(Z))
    got = float(effective_rank((Z * scale).float()))
    assert abs(got - exact) <= 10 * 32 * 2.0**-24 * exact, (scale, got, exact)


def test_top_eigenvalue_share_errors():
    with pytest.raises(ValueError, match="full collapse"):
        top_eigenvalue_share(torch.ones(5, 3))
    with pytest.raises(ValueError, match="k"):
        top_eigenvalue_share(torch.randn(5, 3), 0)
    assert torch.isnan(top_eigenvalue_share(torch.ones(5, 3), check=False))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_full_collapse_that_rounding_left_nonzero_is_not_read_as_rank_one(dtype):
    """Identical samples whose rounded mean leaves a constant centred row of rounding size: its singular values
    read as one direction (effective rank 1.0, top share 1) before the fix; the collapse error now, NaN with
    check=False (also under vmap), and a batch that varies in one feature only still has rank 1."""
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        Z = torch.randn(128, generator=g, dtype=torch.float64).to(dtype).repeat(256, 1)
        for measure in (effective_rank, top_eigenvalue_share):
            with pytest.raises(ValueError, match="full collapse"):
                measure(Z)
            assert torch.isnan(measure(Z, check=False))
        assert torch.isnan(torch.func.vmap(lambda z: effective_rank(z, check=False))(Z[None])).all()
    Z = torch.ones(64, 16, dtype=dtype)
    Z[:, 5] = torch.randn(64, generator=g, dtype=torch.float64).to(dtype)
    assert float(effective_rank(Z)) == pytest.approx(1.0, rel=1e-4) and float(top_eigenvalue_share(Z, 1)) == pytest.approx(1.0)
