"""Machine checks of chapter 1's statements (book/ch01_what_layernorm_computes.md).

Each test names the statement it checks. Exact checks use sympy at d = 3 (with eps a positive
symbol where the statement allows eps > 0); property tests check the same identities for larger d.
"""

from __future__ import annotations

import math

import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lnbook.derivatives import layer_norm_jacobian
from lnbook.norms import centering_matrix, layer_norm, uniform_vector
from lnbook.symbolic_ln import symbolic_centering_matrix, symbolic_jacobian_formula, symbolic_layer_norm, symbols_vector

EPS = sp.Symbol("epsilon", positive=True)
seeds = st.integers(0, 2**31 - 1)


def randn(*shape, seed=0):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def is_zero(expr) -> bool:
    return all(sp.simplify(e) == 0 for e in sp.Matrix(expr))


# --- thm-ln-decomposition: LN(x) = sqrt(d) P x / sqrt(|P x|^2 + d eps)


@pytest.mark.parametrize("eps", [0, EPS])
def test_decomposition_exact_d3(eps):
    x, ln = symbolic_layer_norm(3, eps)
    z = symbolic_centering_matrix(3) * x
    assert is_zero(ln - sp.sqrt(3) * z / sp.sqrt((z.T * z)[0, 0] + 3 * eps))


def test_centering_matrix_is_the_orthogonal_projector_killing_one():
    P = symbolic_centering_matrix(4)
    assert P * P == P and P.T == P and P * sp.ones(4, 1) == sp.zeros(4, 1) and P.rank() == 3


# --- prop-ln-sphere: LN(x) is orthogonal to 1, |LN(x)|^2 = d |Px|^2 / (|Px|^2 + d eps) (= d at eps = 0)


def test_output_geometry_exact_d3():
    x, ln = symbolic_layer_norm(3, EPS)
    z = symbolic_centering_matrix(3) * x
    s = (z.T * z)[0, 0]
    assert sp.simplify(sum(ln)) == 0
    assert sp.simplify((ln.T * ln)[0, 0] - 3 * s / (s + 3 * EPS)) == 0
    _, ln0 = symbolic_layer_norm(3, 0)
    assert sp.simplify((ln0.T * ln0)[0, 0]) == 3  # the circle of radius sqrt(3) in the plane sum(y) = 0


@settings(max_examples=50, deadline=None)
@given(seeds, st.integers(2, 64))
def test_output_on_sphere_radius_sqrt_d(seed, d):
    y = layer_norm(randn(8, d, seed=seed) * 5 + 2, eps=0.0)
    torch.testing.assert_close(y @ uniform_vector(d), torch.zeros(8, dtype=torch.float64), rtol=0, atol=1e-10)
    torch.testing.assert_close(y.norm(dim=-1), torch.full((8,), math.sqrt(d), dtype=torch.float64), rtol=1e-12, atol=0)


# --- thm-ln-invariance: LN(a x + b 1) = LN(x) for a > 0 and real b (eps = 0); b-invariance for every eps


def test_invariance_exact_d3():
    a = sp.Symbol("a", positive=True)
    b = sp.Symbol("b", real=True)
    x, ln = symbolic_layer_norm(3, 0)
    shifted = ln.subs({xi: a * xi + b for xi in x}, simultaneous=True)
    assert is_zero(shifted - ln)
    x, ln_eps = symbolic_layer_norm(3, EPS)
    assert is_zero(ln_eps.subs({xi: xi + b for xi in x}, simultaneous=True) - ln_eps)
    # with eps > 0 the scale invariance is only approximate: LN_eps(2x) != LN_eps(x)
    point = {x[0]: 1, x[1]: 0, x[2]: 0, EPS: sp.Rational(1, 10)}
    doubled = ln_eps.subs({xi: 2 * xi for xi in x}, simultaneous=True)
    assert sp.simplify((doubled - ln_eps).subs(point)) != sp.zeros(3, 1)


@settings(max_examples=50, deadline=None)
@given(seeds, st.integers(2, 32), st.floats(1e-3, 1e3), st.floats(-1e3, 1e3))
def test_invariance_property(seed, d, a, b):
    x = randn(5, d, seed=seed)
    torch.testing.assert_close(layer_norm(a * x + b, eps=0.0), layer_norm(x, eps=0.0), rtol=1e-8, atol=1e-8)


# --- thm-ln-fibres: LN(x) = LN(y) iff y = a x + b 1 (a > 0); x = mean(x) 1 + std(x) LN(x)


@settings(max_examples=50, deadline=None)
@given(seeds, st.integers(2, 32))
def test_reconstruction_from_mean_std_and_ln(seed, d):
    x = randn(6, d, seed=seed) * 3 - 1
    mean = x.mean(-1, keepdim=True)
    std = x.std(-1, unbiased=False, keepdim=True)
    torch.testing.assert_close(mean + std * layer_norm(x, eps=0.0), x, rtol=1e-12, atol=1e-12)


@settings(max_examples=50, deadline=None)
@given(seeds, st.integers(3, 16))
def test_equal_outputs_force_affine_relation(seed, d):
    # draw y in the fibre of x through the parametrisation y = m 1 + s LN(x) and recover (a, b) with a > 0
    x = randn(d, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    m, s = torch.randn(1, generator=g, dtype=torch.float64), torch.rand(1, generator=g, dtype=torch.float64) + 0.1
    y = m + s * layer_norm(x, eps=0.0)
    P = centering_matrix(d)
    a = (P @ y).norm() / (P @ x).norm()
    b = y.mean() - a * x.mean()
    assert a > 0
    torch.testing.assert_close(y, a * x + b, rtol=1e-10, atol=1e-10)


def test_batchnorm_can_learn_the_identity_layernorm_cannot():
    x = randn(64, 5, seed=7) * 2 + 3
    bn = torch.nn.BatchNorm1d(5, eps=1e-5, dtype=torch.float64).train()
    with torch.no_grad():
        bn.weight.copy_(torch.sqrt(x.var(0, unbiased=False) + 1e-5))
        bn.bias.copy_(x.mean(0))
    torch.testing.assert_close(bn(x), x, rtol=1e-12, atol=1e-12)
    # LN maps x and 2x + 5 to the same point, so no function of LN's output returns both inputs
    ln = torch.nn.LayerNorm(5, eps=0.0, dtype=torch.float64)  # any gamma, beta
    torch.testing.assert_close(ln(x), ln(2 * x + 5), rtol=1e-12, atol=1e-12)


# --- prop-ln-not-linear: exact counterexamples to additivity and homogeneity, and oddness


def test_not_linear_exact_d3():
    x, ln = symbolic_layer_norm(3, 0)

    def LN(v):
        return sp.simplify(ln.subs(dict(zip(x, v)), simultaneous=True))

    e1, e2, u = [1, 0, 0], [0, 1, 0], [1, 1, 0]
    assert LN([2, 1, 0]) == sp.Matrix([sp.sqrt(6) / 2, 0, -sp.sqrt(6) / 2])
    assert LN(e1) + LN(u) == sp.Matrix([3 * sp.sqrt(2) / 2, 0, -3 * sp.sqrt(2) / 2]) != LN([2, 1, 0])
    # additivity can hold by accident: P e1 + P e2 = -P e3 has the same norm as P e1
    assert LN([1, 1, 0]) == LN(e1) + LN(e2)
    assert LN([2, 0, 0]) == LN(e1) != 2 * LN(e1)
    assert LN([-1, 0, 0]) == -LN(e1)
    assert LN(e1) == sp.Matrix([sp.sqrt(2), -sp.sqrt(2) / 2, -sp.sqrt(2) / 2])


# --- thm-ln-jacobian: J = (sqrt d / r)(P - z z^T / r^2), and its eigenstructure


@pytest.mark.parametrize("eps", [0, EPS])
def test_jacobian_formula_exact_d3(eps):
    x, ln = symbolic_layer_norm(3, eps)
    assert is_zero(ln.jacobian(x) - symbolic_jacobian_formula(x, eps))


@settings(max_examples=40, deadline=None)
@given(seeds, st.integers(2, 24), st.sampled_from([0.0, 1e-5, 0.3]))
def test_jacobian_matches_autograd(seed, d, eps):
    x = randn(d, seed=seed) * 2
    auto = torch.func.jacrev(lambda v: layer_norm(v, eps=eps))(x)
    torch.testing.assert_close(layer_norm_jacobian(x, eps=eps), auto, rtol=1e-10, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(seeds, st.integers(3, 24), st.sampled_from([0.0, 1e-3, 0.3]))
def test_jacobian_eigenstructure(seed, d, eps):
    x = randn(d, seed=seed) * 2 + 1
    J = layer_norm_jacobian(x, eps=eps)
    z = x - x.mean()
    r = torch.sqrt(z @ z + d * eps)
    torch.testing.assert_close(J, J.T, rtol=0, atol=1e-14)
    torch.testing.assert_close(J @ uniform_vector(d), torch.zeros(d, dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(J @ z, math.sqrt(d) * d * eps / r**3 * z, rtol=1e-9, atol=1e-12)
    v = randn(d, seed=seed + 1)
    v = v - v.mean()
    v = v - (v @ z) / (z @ z) * z  # v orthogonal to 1 and z
    torch.testing.assert_close(J @ v, math.sqrt(d) / r * v, rtol=1e-9, atol=1e-12)


def test_symbolic_helpers_reject_bad_d():
    with pytest.raises(ValueError, match="d must be >= 2"):
        symbols_vector(1)
