"""The fast module path of LN-G and PLN (chapter 5): same values as the checked functions, checks kept."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lnbook.models import TinyTransformer, make_norm, mlp
from lnbook.norms import GroupLayerNorm, ParallelLayerNorm, group_layer_norm, parallel_layer_norm


@settings(max_examples=40, deadline=None)
@given(
    groups=st.sampled_from([1, 2, 3, 4, 6]),
    m=st.integers(2, 7),
    lead=st.lists(st.integers(1, 3), min_size=0, max_size=2),
    eps=st.sampled_from([1e-5, 1e-2, 1.0]),
    seed=st.integers(0, 10_000),
)
def test_fast_lng_equals_checked_function(groups, m, lead, eps, seed):
    x = torch.randn(*lead, groups * m, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)) * 3 + 1
    torch.testing.assert_close(GroupLayerNorm(groups, eps=eps)(x), group_layer_norm(x, groups, eps=eps), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ParallelLayerNorm(m, eps=eps)(x), group_layer_norm(x, groups, eps=eps), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("p,centering", [(2, True), (2, False), (1, True), (1.5, False), (3, True)])
def test_fast_pln_equals_checked_function(p, centering):
    x = torch.randn(4, 3, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 2 - 1
    torch.testing.assert_close(
        ParallelLayerNorm(4, p=p, centering=centering)(x), parallel_layer_norm(x, 4, p=p, centering=centering), rtol=1e-12, atol=1e-12
    )


def test_fast_path_gradients_match():
    x = torch.randn(5, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(3), requires_grad=True)
    w = torch.randn(5, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    (g_fast,) = torch.autograd.grad((GroupLayerNorm(6)(x) * w).sum(), x)
    (g_ref,) = torch.autograd.grad((group_layer_norm(x, 6) * w).sum(), x)
    torch.testing.assert_close(g_fast, g_ref, rtol=1e-10, atol=1e-12)


def test_fast_path_keeps_the_clear_errors():
    with pytest.raises(ValueError, match=r"groups=5 does not divide the width d=12"):
        GroupLayerNorm(5)(torch.ones(2, 12))
    with pytest.raises(ValueError, match="at least 2 features"):
        GroupLayerNorm(12)(torch.ones(2, 12))
    with pytest.raises(TypeError, match="floating-point"):
        GroupLayerNorm(2)(torch.ones(2, 12, dtype=torch.long))
    with pytest.raises(ValueError, match="group_size=5 does not divide"):
        ParallelLayerNorm(5)(torch.ones(2, 12))
    with pytest.raises(ValueError, match="p must be a finite number > 0"):
        ParallelLayerNorm(4, p=0)
    # values are checked on request, and always when eps = 0 (where a constant group gives 0/0)
    nan = torch.tensor([[1.0, float("nan"), 2.0, 3.0]])
    assert torch.isnan(GroupLayerNorm(2)(nan)).any()  # fast path: NaN in, NaN out, like nn.LayerNorm
    with pytest.raises(ValueError, match="non-finite"):
        GroupLayerNorm(2, validate=True)(nan)
    with pytest.raises(ValueError, match="zero variance"):
        GroupLayerNorm(2, eps=0.0)(torch.tensor([[1.0, 1.0, 2.0, 3.0]]))
    with pytest.raises(ValueError, match="zero variance"):
        ParallelLayerNorm(2, eps=0.0)(torch.tensor([[1.0, 1.0, 2.0, 3.0]]))


def test_lng_networks_trace_with_fx_and_match():
    torch.manual_seed(0)
    net = mlp(6, 12, 2, 3, norm="lng", groups=3, affine=True)
    traced = torch.fx.symbolic_trace(net)
    assert any(n.target is torch.nn.functional.layer_norm for n in traced.graph.nodes)
    x = torch.randn(4, 6)
    torch.testing.assert_close(traced(x), net(x))
    for norm, kw in (("lng", {"groups": 4}), ("pln", {"group_size": 8})):
        model = TinyTransformer(11, d_model=32, n_heads=4, n_layers=1, max_len=8, norm=norm, **kw)
        tokens = torch.randint(11, (2, 8), generator=torch.Generator().manual_seed(1))
        torch.testing.assert_close(torch.fx.symbolic_trace(model)(tokens), model(tokens))


def test_make_norm_still_refuses_groups_that_do_not_divide():
    with pytest.raises(ValueError, match="does not divide the width"):
        make_norm("lng", 10, groups=4)


@settings(max_examples=30, deadline=None)
@given(
    groups=st.sampled_from([1, 2, 3, 4]),
    m=st.integers(3, 6),
    a=st.floats(0.01, 100.0),
    seed=st.integers(0, 10_000),
)
def test_lng_image_is_a_product_of_spheres(groups, m, a, seed):
    """eps = 0: each group's output has mean 0 and squared norm m; adding a constant to any group and
    scaling by a > 0 change nothing; the Jacobian has rank d - 2G (mean and scale of each group are lost)."""
    g = torch.Generator().manual_seed(seed)
    d = groups * m
    x = torch.randn(d, dtype=torch.float64, generator=g)
    y = group_layer_norm(x, groups, eps=0.0).reshape(groups, m)
    torch.testing.assert_close(y.sum(-1), torch.zeros(groups, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(y.pow(2).sum(-1), torch.full((groups,), float(m), dtype=torch.float64))
    shifts = torch.repeat_interleave(torch.randn(groups, dtype=torch.float64, generator=g) * 5, m)
    torch.testing.assert_close(group_layer_norm(a * x + shifts, groups, eps=0.0).reshape(groups, m), y)
    J = torch.func.jacrev(lambda v: group_layer_norm(v, groups, eps=0.0))(x)
    assert int(torch.linalg.matrix_rank(J)) == d - 2 * groups
