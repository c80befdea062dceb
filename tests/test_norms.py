"""lnbook.norms: agreement with torch's built-ins (float64), the three-step decomposition, PLN/LN-G
special cases, and clear errors on bad input."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import finite_matrices, positive_epsilons, seeds

from lnbook import norms
from lnbook.norms import (
    GroupLayerNorm,
    LayerNorm,
    ParallelLayerNorm,
    RMSNorm,
    centering_matrix,
    group_layer_norm,
    layer_norm,
    layer_norm_three_steps,
    parallel_layer_norm,
    rms_norm,
)

TOL = dict(rtol=1e-12, atol=1e-12)  # float64 agreement with torch's kernels


def assert_close_conditioned(ours, theirs, x, eps, groups=1):
    """|ours - theirs| <= 1e-12 (1 + max|x| / sqrt(var + eps)) per group: both kernels round the
    mean to about max|x| * 1e-16, and that rounding is divided by sqrt(var + eps)."""
    g = x.reshape(*x.shape[:-1], groups, -1)
    scale = g.abs().amax(-1, keepdim=True) / torch.sqrt(g.var(-1, unbiased=False, keepdim=True) + eps)
    bound = (1e-12 * (1 + scale)).expand_as(g).reshape(x.shape)
    assert bool(((ours - theirs).abs() <= bound).all()), (ours - theirs).abs().max()


def well_spread(x: torch.Tensor) -> bool:
    # away from the zero-variance corner, where eps dominates and relative errors are meaningless
    return bool((x.std(dim=-1, unbiased=False) > 1e-3).all())


@settings(max_examples=60)
@given(finite_matrices(), positive_epsilons)
def test_layer_norm_matches_torch(a, eps):
    x = torch.from_numpy(a)
    assert_close_conditioned(layer_norm(x, eps=eps), F.layer_norm(x, (x.shape[-1],), eps=eps), x, eps)


@settings(max_examples=60)
@given(finite_matrices(min_d=1), positive_epsilons)
def test_rms_norm_matches_torch(a, eps):
    x = torch.from_numpy(a)
    torch.testing.assert_close(rms_norm(x, eps=eps), F.rms_norm(x, (x.shape[-1],), eps=eps), **TOL)


@settings(max_examples=60)
@given(st.integers(1, 4), st.integers(2, 5), st.integers(1, 6), positive_epsilons, seeds)
def test_group_layer_norm_matches_group_norm(groups, per_group, n, eps, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, groups * per_group, generator=g, dtype=torch.float64) * 10
    assert_close_conditioned(group_layer_norm(x, groups, eps=eps), F.group_norm(x, groups, eps=eps), x, eps, groups)


@settings(max_examples=60)
@given(finite_matrices(), st.sampled_from([0.0, 1e-5, 1.0]))
def test_three_step_decomposition_equals_layer_norm(a, eps):
    x = torch.from_numpy(a)
    if eps == 0.0 and not well_spread(x):
        return
    torch.testing.assert_close(layer_norm_three_steps(x, eps=eps), layer_norm(x, eps=eps), rtol=1e-10, atol=1e-10)


@settings(max_examples=60)
@given(finite_matrices())
def test_layer_norm_is_sqrt_d_P_x_over_norm(a):
    # LN(x) = sqrt(d) P x / |P x| at eps = 0
    x = torch.from_numpy(a)
    if not well_spread(x):
        return
    d = x.shape[-1]
    Px = x @ centering_matrix(d)
    expected = math.sqrt(d) * Px / torch.linalg.vector_norm(Px, dim=-1, keepdim=True)
    torch.testing.assert_close(layer_norm(x, eps=0.0), expected, rtol=1e-10, atol=1e-10)


@settings(max_examples=40)
@given(finite_matrices(min_d=4, max_d=12), positive_epsilons)
def test_parallel_layer_norm_special_cases(a, eps):
    x = torch.from_numpy(a)
    d = x.shape[-1]
    torch.testing.assert_close(parallel_layer_norm(x, d, p=2, centering=True, eps=eps), layer_norm(x, eps=eps), **TOL)
    torch.testing.assert_close(parallel_layer_norm(x, d, p=2, centering=False, eps=eps), rms_norm(x, eps=eps), **TOL)
    for size in (s for s in range(2, d + 1) if d % s == 0):
        torch.testing.assert_close(
            parallel_layer_norm(x, size, eps=eps), group_layer_norm(x, d // size, eps=eps), **TOL
        )


def test_parallel_layer_norm_p1_and_pls_group_of_one():
    x = torch.tensor([[1.0, -3.0, 2.0, 0.0]], dtype=torch.float64)
    # p = 1, no centring, one group: x / mean|x|
    torch.testing.assert_close(parallel_layer_norm(x, 4, p=1, centering=False, eps=0.0), x / 1.5)
    # group size 1 without centring is the sign function on non-zero entries
    y = parallel_layer_norm(x[:, :3], 1, centering=False, eps=0.0)
    torch.testing.assert_close(y, torch.tensor([[1.0, -1.0, 1.0]], dtype=torch.float64))


def test_outputs_have_zero_mean_and_unit_mean_square():
    x = torch.randn(50, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 4 + 3
    y = layer_norm(x, eps=0.0)
    torch.testing.assert_close(y.mean(-1), torch.zeros(50, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(y.pow(2).mean(-1), torch.ones(50, dtype=torch.float64), atol=1e-12, rtol=0)


def test_modules_match_functions_and_have_no_parameters():
    x = torch.randn(3, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    cases = [
        (LayerNorm(eps=1e-3), layer_norm(x, eps=1e-3)),
        (RMSNorm(eps=1e-3), rms_norm(x, eps=1e-3)),
        (GroupLayerNorm(2, eps=1e-3), group_layer_norm(x, 2, eps=1e-3)),
        (ParallelLayerNorm(4, p=2, centering=True, eps=1e-3), parallel_layer_norm(x, 4, eps=1e-3)),
        (LayerNorm(eps=1e-3, validate=False), layer_norm(x, eps=1e-3)),
        (RMSNorm(eps=1e-3, validate=False), rms_norm(x, eps=1e-3)),
    ]
    for module, expected in cases:
        torch.testing.assert_close(module(x), expected, **TOL)
        assert list(module.parameters()) == []
        assert "eps" in repr(module)


def test_zero_variance_input():
    const = torch.full((2, 5), 3.25, dtype=torch.float64)
    # eps > 0: defined and equal to the zero vector, as documented
    assert torch.equal(layer_norm(const, eps=1e-5), torch.zeros_like(const))
    # eps = 0: 0/0 is refused instead of returning NaN
    with pytest.raises(ValueError, match="zero variance.*eps > 0"):
        layer_norm(const, eps=0.0)
    with pytest.raises(ValueError, match="zero variance"):
        group_layer_norm(torch.tensor([[1.0, 1.0, 2.0, 3.0]]), 2, eps=0.0)
    with pytest.raises(ValueError, match="zero norm"):
        rms_norm(torch.zeros(1, 4), eps=0.0)
    with pytest.raises(ValueError, match="zero variance"):
        layer_norm_three_steps(const, eps=0.0)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: layer_norm([1.0, 2.0]), TypeError, "torch.Tensor.*torch.as_tensor"),
        (lambda: layer_norm(torch.tensor([1, 2, 3])), TypeError, "floating-point"),
        (lambda: layer_norm(torch.tensor(1.0)), ValueError, "at least 1 dimension"),
        (lambda: layer_norm(torch.tensor([[1.0], [2.0]])), ValueError, "at least 2 features"),
        (lambda: layer_norm(torch.tensor([1.0, float("nan")])), ValueError, "non-finite"),
        (lambda: rms_norm(torch.tensor([1.0, float("inf")])), ValueError, "non-finite"),
        (lambda: layer_norm(torch.ones(2, 3), eps=-1e-3), ValueError, "eps must be a finite number >= 0"),
        (lambda: layer_norm(torch.ones(2, 3), eps="1e-5"), TypeError, "eps must be a real number"),
        (lambda: group_layer_norm(torch.ones(2, 6), 4), ValueError, r"groups=4 does not divide the width d=6.*\[1, 2, 3, 6\]"),
        (lambda: group_layer_norm(torch.ones(2, 6), 6), ValueError, "at least 2 features"),
        (lambda: group_layer_norm(torch.ones(2, 6), 0), ValueError, "groups must be >= 1"),
        (lambda: group_layer_norm(torch.ones(2, 6), 2.0), TypeError, "groups must be an integer"),
        (lambda: parallel_layer_norm(torch.ones(2, 6), 4), ValueError, "group_size=4 does not divide"),
        (lambda: parallel_layer_norm(torch.ones(2, 6), 1), ValueError, "group_size must be >= 2"),
        (lambda: parallel_layer_norm(torch.ones(2, 6), 3, p=0), ValueError, "p must be a finite number > 0"),
        (lambda: GroupLayerNorm(0), ValueError, "groups must be >= 1"),
    ],
)
def test_bad_input_gets_a_clear_error(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_public_api():
    for name in ("layer_norm", "rms_norm", "group_layer_norm", "parallel_layer_norm"):
        assert callable(getattr(norms, name))
