"""Tests of lnbook.group_ln.one_layer_lssr: the rank of one LN-G layer's outputs, LSSR on random labels, groups of two."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lnbook.core.norms import group_layer_norm
from lnbook.core.scatter_ratio import lssr
from lnbook.core.symbolic import symbolic_layer_norm
from lnbook.group_ln.one_layer_lssr import (
    centred_rank,
    expected_lssr_random_labels,
    lng_layer,
    lng_output_rtol,
    output_rank_bound,
    pair_signs,
    random_label_cloud,
    random_layer_lssr,
    xor_cloud,
)
from tests.strategies import seeds

CASES = [(k, d, G) for k in (1, 2, 4, 6) for d in (8, 12, 16) for G in range(1, d // 2 + 1) if d % G == 0]


def layer(seed: int, n: int, k: int, d: int):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, k, generator=g, dtype=torch.float64)
    return X, torch.randn(d, k, generator=g, dtype=torch.float64), torch.randn(d, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("eps", [0.0, 1e-5, 1.0])
def test_the_rank_bound_is_attained_by_gaussian_layers(eps):
    """prop-ch5-lng-rank: the rank of the centred outputs equals min(n - 1, G min(k + 1, m - 1)) for Gaussian W, c, X
    and groups of m >= 3 at every eps tried, and for groups of two at eps = 1 (with k in place of k + 1 it fails).
    Groups of two at eps = 0 are sign units: there the rank is that of the sign matrix, which can be lower (a unit
    whose hyperplane misses the data is constant); the test checks that it is, and that it happens."""
    lower = 0
    for i, (k, d, G) in enumerate(CASES):
        for n in (5, 40):
            X, W, c = layer(i, n, k, d)
            Z = lng_layer(X, W, c, G, eps)
            if d // G >= 3 or eps == 1.0:
                assert centred_rank(Z) == output_rank_bound(n, k, d, G), (k, d, G, n)
            elif eps == 0.0:
                assert centred_rank(Z) == centred_rank(pair_signs(X @ W.T + c)) <= output_rank_bound(n, k, d, G)
                lower += centred_rank(Z) < output_rank_bound(n, k, d, G)
    assert eps != 0.0 or lower > 0
    assert [output_rank_bound(64, 4, 16, G) for G in (1, 2, 4, 8)] == [5, 10, 12, 8]  # the ranks the chapter quotes


@settings(max_examples=40, deadline=None)
@given(seeds, st.sampled_from(CASES), st.sampled_from([0.0, 1e-5, 0.1]))
def test_each_group_output_lies_in_the_span_of_its_centred_weights_and_bias(seed, case, eps):
    """The proof's step: group g's output is a multiple of P(W_g x + c_g), in span(P W_g, P c_g)."""
    k, d, G = case
    X, W, c = layer(seed, 30, k, d)
    Z = lng_layer(X, W, c, G, eps)
    m = d // G
    for g in range(G):
        B = torch.cat([W[g * m:(g + 1) * m], c[g * m:(g + 1) * m, None]], dim=1)
        B = B - B.mean(dim=0)  # P [W_g, c_g]
        Zg = Z[:, g * m:(g + 1) * m].T
        residual = Zg - B @ torch.linalg.lstsq(B, Zg).solution
        assert float(residual.abs().max()) < 1e-10


def test_mean_lssr_over_all_labelings_is_one_minus_rank_over_n_minus_one():
    """prop-ch5-random-labels, exactly: the mean of LSSR over every arrangement of two classes of fixed sizes is
    1 - r / (n - 1), for LN-G outputs at eps = 0 and eps > 0 and for an arbitrary rank-deficient feature matrix."""
    n = 8
    X, W, c = layer(3, n, 2, 8)
    g = torch.Generator().manual_seed(4)
    features = [
        lng_layer(X, W, c, 2, 0.0),  # rank 6
        lng_layer(X, W, c, 4, 1e-5),  # groups of two: rank 4
        torch.randn(n, 3, generator=g, dtype=torch.float64) @ torch.randn(3, 5, generator=g, dtype=torch.float64),
    ]
    for Z in features:
        r = centred_rank(Z)
        assert 0 < r < n - 1
        for n1 in (3, 4):
            values = []
            for ones in itertools.combinations(range(n), n1):
                y = np.zeros(n, dtype=int)
                y[list(ones)] = 1
                values.append(lssr(Z, y))
            assert np.mean(values) == pytest.approx(expected_lssr_random_labels(r, n), abs=1e-10)
            assert np.mean(values) != pytest.approx(1 - r / n, abs=1e-3)  # the wrong denominator is far off


def test_random_label_experiment_matches_the_expectation_and_peaks_at_four_groups():
    """The lab's random-label section, smaller: 64 Gaussian points in R^4, width 16; the mean LSSR over draws of
    (X, labels, W, c) is 1 - r/63 within 4 standard errors, and four groups give the lowest mean."""
    means = {}
    for G in (1, 2, 4, 8):
        v = np.concatenate([random_layer_lssr(*random_label_cloud(64, 4, s), 16, G, 1e-5, 4, seed=100 + s)
                            for s in range(25)])
        expected = expected_lssr_random_labels(output_rank_bound(64, 4, 16, G), 64)
        assert abs(v.mean() - expected) < 4 * v.std(ddof=1) / np.sqrt(v.size), (G, v.mean(), expected)
        means[G] = v.mean()
    assert means[1] > means[8] > means[2] > means[4]


@settings(max_examples=30, deadline=None)
@given(seeds, st.sampled_from([2, 4, 8, 16]))
def test_groups_of_two_at_eps_zero_are_sign_units(seed, d):
    """prop-ch5-pairs-sign: LN-G with groups of two at eps = 0 maps (a, b) to sign(a - b)(1, -1) (float64: within 16 eps_mach max(|a|, |b|) / |a - b|, chapter 1's rounding bound);
    with eps > 0 every entry is strictly inside (-1, 1)."""
    h = torch.randn(50, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    s = pair_signs(h)
    expected = torch.stack([s, -s], dim=-1).reshape(h.shape)
    a, b = h[:, 0::2], h[:, 1::2]
    bound = 16 * np.finfo(np.float64).eps * torch.maximum(a.abs(), b.abs()) / (a - b).abs()  # chapter 1's float64 bound
    error = (group_layer_norm(h, d // 2, eps=0.0) - expected).abs().reshape(50, d // 2, 2).amax(dim=-1)
    assert bool((error <= bound).all())
    assert float(group_layer_norm(h, d // 2, eps=1e-5).abs().max()) < 1.0


def test_linear_pairs_linear_is_a_network_of_sign_units():
    """After ex-ch5-two: Linear -> LN-G with groups of two at eps = 0 -> Linear is exactly a one-hidden-layer network of
    d/2 sign units. Forward: a random such network equals sum_g sign(w_g x + c_g) v_g + b with w_g, c_g the differences
    of the rows and biases of group g and v_g the difference of its read-out columns. Converse: a random network of h
    sign units is rebuilt with first-layer rows w_g and 0 (biases c_g and 0) and read-out columns v_g and 0.
    Both on 200 Gaussian inputs, to 1e-9 (chapter 1's rounding bound is far below it at these inputs)."""
    gen = torch.Generator().manual_seed(2606)
    k, h, out, n = 5, 6, 3, 200

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    x = randn(n, k)
    W, c, U, b = randn(2 * h, k), randn(2 * h), randn(out, 2 * h), randn(out)
    net = group_layer_norm(x @ W.T + c, h, eps=0.0) @ U.T + b
    signs = torch.sign(x @ (W[0::2] - W[1::2]).T + (c[0::2] - c[1::2]))
    assert torch.allclose(net, signs @ (U[:, 0::2] - U[:, 1::2]).T + b, rtol=0, atol=1e-9)
    w_s, c_s, V = randn(h, k), randn(h), randn(out, h)  # a network of h sign units with read-out vectors V[:, g]
    W2, c2, U2 = torch.zeros(2 * h, k, dtype=torch.float64), torch.zeros(2 * h, dtype=torch.float64), \
        torch.zeros(out, 2 * h, dtype=torch.float64)
    W2[0::2], c2[0::2], U2[:, 0::2] = w_s, c_s, V
    rebuilt = group_layer_norm(x @ W2.T + c2, h, eps=0.0) @ U2.T + b
    assert torch.allclose(rebuilt, torch.sign(x @ w_s.T + c_s) @ V.T + b, rtol=0, atol=1e-9)


def test_groups_of_two_sign_exactly():
    a, b = sp.symbols("a b", real=True)
    delta = sp.symbols("delta", positive=True)
    out = symbolic_layer_norm(2, 0, x=sp.Matrix([b + delta, b]))[1]  # a - b = delta > 0
    assert [sp.simplify(v) for v in out] == [1, -1]
    out_eps = symbolic_layer_norm(2, sp.Rational(1, 100), x=sp.Matrix([b + delta, b]))[1]
    assert sp.simplify(out_eps[0] - delta / sp.sqrt(delta**2 + sp.Rational(4, 100))) == 0  # a smoothed sign


def test_one_layer_can_raise_lssr():
    """prop-ch5-no-monotonicity: LN can merge classes. x in {1, 2, 3, 4}, labels 0, 0, 1, 1 (LSSR 1/5); the layer
    h = (x, 0) maps every x > 0 to (1, -1) at eps = 0 (LSSR 1, the convention for equal samples), and for eps > 0
    the outputs are a squashed copy of x whose LSSR is above 1/5."""
    X = torch.tensor([[1.0], [2.0], [3.0], [4.0]], dtype=torch.float64)
    y = [0, 0, 1, 1]
    assert lssr(X, y) == pytest.approx(0.2, abs=1e-14)
    W, c = torch.tensor([[1.0], [0.0]], dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
    assert lssr(lng_layer(X, W, c, 1, 0.0), y) == 1.0
    for eps in (1e-2, 1.0):
        H = X @ W.T + c
        assert lssr(lng_layer(X, W, c, 1, eps), y, rtol=lng_output_rtol(H, 1, eps)) > 0.25


def test_xor_is_opened_by_one_layer_but_not_by_a_linear_map():
    """The other direction (chapter 2's XOR): LSSR of the noisy XOR inputs is near 1, one LN-G layer with four groups
    of four brings the median over 20 draws below 0.1, at eps = 0 and eps = 1e-5."""
    X, y = xor_cloud(200, 0.3, 0)
    assert lssr(X, y) > 0.99
    for eps in (0.0, 1e-5):
        assert np.median(random_layer_lssr(X, y, 16, 4, eps, 20, seed=1)) < 0.1


def test_deterministic_and_the_inputs_are_as_documented():
    X, y = xor_cloud(40, 0.0, 5)
    assert torch.equal(X[y == 0].mean(dim=0), torch.zeros(2, dtype=torch.float64)) and int(y.sum()) == 20
    X2, y2 = random_label_cloud(10, 3, 7)
    assert int(y2.sum()) == 5 and torch.equal(X2, random_label_cloud(10, 3, 7)[0])
    a = random_layer_lssr(X2, y2, 8, 2, 0.0, 3, seed=9)
    assert np.array_equal(a, random_layer_lssr(X2, y2, 8, 2, 0.0, 3, seed=9)) and a.shape == (3,)


def test_errors():
    with pytest.raises(ValueError, match="divide"):
        output_rank_bound(10, 2, 12, 5)
    with pytest.raises(ValueError, match="divide"):
        random_layer_lssr(torch.zeros(4, 2, dtype=torch.float64), [0, 0, 1, 1], 8, 8, 0.0, 1)
    with pytest.raises(ValueError, match="rank"):
        expected_lssr_random_labels(10, 10)
    with pytest.raises(ValueError, match="even width"):
        pair_signs(torch.zeros(2, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="eps > 0"):
        pair_signs(torch.ones(2, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="multiple of 4"):
        xor_cloud(10, 0.1, 0)
    with pytest.raises(ValueError, match="noise"):
        xor_cloud(8, -1.0, 0)
    with pytest.raises(ValueError, match="even"):
        random_label_cloud(9, 2, 0)
    with pytest.raises(TypeError):
        random_layer_lssr(np.zeros((4, 2)), [0, 0, 1, 1], 8, 2, 0.0, 1)
