"""Tests for lnbook.hermite: Hermite coefficients, beta_0, the mean-field correlation map (chapter 4)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lnbook import hermite as H

X = sp.Symbol("x", real=True)


# ---------------------------------------------------------------- coefficients


@pytest.mark.parametrize("j", range(9))
def test_hermite_polynomials_have_unit_coefficient_vectors(j):
    """He_j has c = e_j (quadrature, probabilists' convention) and exactly e_j (sympy)."""
    f = lambda x: H.hermite_polynomials(x, j)[j]  # noqa: E731
    c = H.hermite_coefficients(f, 10)
    e = np.zeros(11)
    e[j] = 1.0
    np.testing.assert_allclose(c, e, atol=1e-10)
    exact = H.exact_hermite_coefficients(sp.expand(H._he_rec(j)), 10)
    assert exact == [sp.Integer(1) if i == j else sp.Integer(0) for i in range(11)]
    # normalised version: He_j / sqrt(j!) has a = e_j
    a = H.hermite_coefficients(lambda x: H.hermite_polynomials(x, j, normalized=True)[j], 10, normalized=True)
    np.testing.assert_allclose(a, e, atol=1e-10)


@pytest.mark.parametrize("name", ["relu", "exp", "sin", "cos", "step", "identity"])
def test_quadrature_matches_sympy_closed_forms(name):
    exact = np.array([float(v) for v in H.exact_hermite_coefficients(name, 16)])
    fn = {"step": lambda x: (np.asarray(x) > 0).astype(float), "cos": np.cos}.get(name, name)
    np.testing.assert_allclose(H.hermite_coefficients(fn, 16), exact, atol=1e-8, rtol=0)


def test_relu_closed_form_is_an_integral_not_a_guess():
    """The stored ReLU formula equals sympy's own Gaussian integral for the first degrees."""
    phi = sp.exp(-(X**2) / 2) / sp.sqrt(2 * sp.pi)
    for j in range(7):
        direct = sp.integrate(X * H._he_rec(j) * phi, (X, 0, sp.oo)) / sp.factorial(j)
        assert sp.simplify(direct - H._relu_coeff(j)) == 0


def test_exp_and_sin_closed_forms_are_integrals():
    """The closed forms against 30-digit numerical integrals (mpmath; sympy's symbolic integration of
    f(x) He_k(x) phi(x) is exact but takes minutes), and E e^Z = e^{1/2} symbolically."""
    phi = sp.exp(-(X**2) / 2) / sp.sqrt(2 * sp.pi)
    e = sp.integrate(sp.exp(X) * phi, (X, -sp.oo, sp.oo))
    assert sp.simplify((e - H.EXACT_ACTIVATIONS["exp"](0)).rewrite(sp.erf)) == 0
    mpmath.mp.dps = 30
    for name, fn in (("exp", mpmath.exp), ("sin", mpmath.sin), ("cos", mpmath.cos)):
        for j in range(6):
            he = sp.lambdify(X, H._he_rec(j), "mpmath")
            num = mpmath.quad(lambda t: fn(t) * he(t) * mpmath.npdf(t), [-mpmath.inf, 0, mpmath.inf]) / math.factorial(j)
            assert abs(float(num - H.EXACT_ACTIVATIONS[name](j).evalf(30))) < 1e-25


def test_plain_gauss_hermite_struggles_with_the_relu_kink():
    """Why the default quadrature splits at 0: Gauss-Hermite is exact for smooth f, slow for ReLU."""
    exact = np.array([float(v) for v in H.exact_hermite_coefficients("relu", 8)])
    gh = H.hermite_coefficients("relu", 8, method="hermite", n_hermite=60)
    assert np.abs(gh - exact).max() > 1e-6
    assert np.abs(H.hermite_coefficients("relu", 8) - exact).max() < 1e-12
    gh_exp = H.hermite_coefficients("exp", 8, method="hermite", n_hermite=60)
    np.testing.assert_allclose(gh_exp, [float(v) for v in H.exact_hermite_coefficients("exp", 8)], atol=1e-12)


def test_torch_and_numpy_callables_agree():
    np.testing.assert_allclose(H.hermite_coefficients(torch.tanh, 6), H.hermite_coefficients(np.tanh, 6), atol=1e-14)


def test_scale_argument():
    """c_k of x -> f(s x) for f = exp: E[e^{sZ} He_k(Z)]/k! = e^{s^2/2} s^k / k!."""
    s = 0.7
    expected = [math.exp(s * s / 2) * s**k / math.factorial(k) for k in range(6)]
    np.testing.assert_allclose(H.hermite_coefficients("exp", 5, scale=s), expected, atol=1e-12)


# ---------------------------------------------------------------- beta_0


@pytest.mark.parametrize("name", sorted(H.EXACT_BETA0))
def test_beta0_quadrature_matches_closed_form(name):
    assert H.nonlinearity_strength(name) == pytest.approx(float(H.EXACT_BETA0[name]), abs=1e-10)


def test_beta0_relu_is_pi_over_2_pi_minus_1_from_the_coefficients():
    c = H.exact_hermite_coefficients("relu", 1)
    var = sp.Rational(1, 2) - c[0] ** 2  # E relu(Z)^2 = 1/2
    assert sp.simplify(c[1] ** 2 / var - sp.pi / (2 * (sp.pi - 1))) == 0


def test_beta0_gelu_closed_form_by_sympy():
    """E[Z^2 Phi(Z)^2] = 1/3 + 1/(2 pi sqrt 3) (Stein), checked by sympy numerically to 1e-12."""
    Phi = (1 + sp.erf(X / sp.sqrt(2))) / 2
    phi = sp.exp(-(X**2) / 2) / sp.sqrt(2 * sp.pi)
    mpmath.mp.dps = 25
    m2 = mpmath.quad(lambda t: t**2 * mpmath.ncdf(t) ** 2 * mpmath.npdf(t), [-mpmath.inf, 0, mpmath.inf])
    assert float(m2) == pytest.approx(float(sp.Rational(1, 3) + 1 / (2 * sp.pi * sp.sqrt(3))), abs=1e-12)
    m1 = sp.integrate(X * Phi * phi, (X, -sp.oo, sp.oo))
    assert sp.simplify(m1 - 1 / (2 * sp.sqrt(sp.pi))) == 0


def test_beta0_is_not_the_official_codes_beta():
    """The official compute_beta returns 2 - beta_0 (Monte Carlo); ours is beta_0, in [0, 1]."""
    b = H.nonlinearity_strength("relu")
    z = torch.randn(400_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y = torch.relu(z)
    official = 2 - float((y * z).mean() ** 2 / (y.pow(2).mean() - y.mean() ** 2))
    assert official == pytest.approx(2 - b, abs=5e-3)
    assert 0 <= b <= 1 < official


def test_scaled_beta0_for_homogeneous_relu_is_scale_free():
    assert H.nonlinearity_strength("relu", scale=3.0) == pytest.approx(H.nonlinearity_strength("relu"), abs=1e-12)
    # tanh becomes linear for small inputs: beta_0 -> 1
    assert H.nonlinearity_strength("tanh", scale=0.01) > 0.9999


# ---------------------------------------------------------------- Mehler and the correlation map


def _bivariate_moment(poly_expr, z1, z2):
    """E[p(z1, z2)] for independent standard normals, exactly."""
    p = sp.Poly(sp.expand(poly_expr), z1, z2)
    return sp.Add(*[c * H._dfact(i - 1) * H._dfact(j - 1) for (i, j), c in p.terms() if i % 2 == 0 and j % 2 == 0])


def test_mehler_identity_sympy():
    """E[He_j(U) He_k(V)] = delta_jk k! rho^k for a standard pair with correlation rho (exact)."""
    z1, z2, rho = sp.symbols("z1 z2 rho", real=True)
    s = sp.Symbol("s", positive=True)  # s = sqrt(1 - rho^2)
    for j in range(5):
        for k in range(5):
            u = H._he_rec(j).subs(X, z1)
            v = H._he_rec(k).subs(X, rho * z1 + s * z2)
            val = sp.expand(_bivariate_moment(u * v, z1, z2).subs(s, sp.sqrt(1 - rho**2)))
            expected = sp.factorial(k) * rho**k if j == k else 0
            assert sp.simplify(val - expected) == 0, (j, k, val)


def test_rate_bounds_algebra_sympy():
    """kappa = sum_k w_k rho^k, w_1 = beta: the bounds used in the rate theorem, symbolically."""
    rho, beta = sp.symbols("rho beta", real=True)
    w = sp.symbols("w2:8", nonnegative=True)
    total = beta + sum(w)
    kappa = beta * rho + sum(wk * rho ** (k + 2) for k, wk in enumerate(w))
    worst = beta * rho + (1 - beta) * rho**2
    # worst - kappa = sum_k w_k rho^2 (1 - rho^(k-2)) once sum(w) = 1 - beta
    diff = sp.expand((worst - kappa).subs(beta, 1 - sum(w)))
    assert sp.simplify(diff - sum(wk * rho**2 * (1 - rho**k) for k, wk in enumerate(w))) == 0
    assert total.subs(beta, 1 - sum(w)) == 1
    # potential phi(r) = r/(1-r): phi(worst(r)) = phi(r) * f(r), f(r) = (beta + (1-beta) r)/(1 + (1-beta) r)
    f = (beta + (1 - beta) * rho) / (1 + (1 - beta) * rho)
    assert sp.simplify(worst / (1 - worst) - rho / (1 - rho) * f) == 0
    # 1/(2 - beta) - f = (1-beta)^2 (1-rho) / ((2-beta)(1+(1-beta) rho)) >= 0
    gap = sp.factor(sp.simplify(1 / (2 - beta) - f))
    assert sp.simplify(gap - (1 - beta) ** 2 * (1 - rho) / ((2 - beta) * (1 + (1 - beta) * rho))) == 0


def test_equicorrelated_isometry_formula_sympy():
    """Eigenvalues of (1-r) I + r 11^T are 1-r (n-1 times) and 1+(n-1) r (used for the no-centering limit)."""
    r = sp.Symbol("r")
    for n in (2, 3, 4):
        M = (1 - r) * sp.eye(n) + r * sp.ones(n, n)
        assert sp.factor(M.det() - (1 - r) ** (n - 1) * (1 + (n - 1) * r)) == 0


@pytest.mark.parametrize("name", ["relu", "tanh", "exp", "gelu"])
def test_correlation_map_matches_monte_carlo(name):
    gen = torch.Generator().manual_seed(1)
    N = 400_000
    z1 = torch.randn(N, generator=gen, dtype=torch.float64)
    z2 = torch.randn(N, generator=gen, dtype=torch.float64)
    _, fn = H.get_activation(name)
    mean, var = H.mean_and_variance(name)
    for rho in (-0.6, 0.0, 0.5, 0.9):
        u, v = z1, rho * z1 + math.sqrt(1 - rho * rho) * z2
        prod = (fn(u) - mean) * (fn(v) - mean) / var
        est, se = float(prod.mean()), float(prod.std() / math.sqrt(N))
        assert abs(float(H.correlation_map(name, rho)) - est) < 5 * se + 1e-4, (name, rho)


def test_correlation_map_matches_series_and_closed_forms():
    r = np.linspace(-1, 1, 41)
    np.testing.assert_allclose(H.correlation_map("exp", r), (np.exp(r) - 1) / (np.e - 1), atol=1e-9)
    th = np.arccos(r)
    arccos = (np.sin(th) + (np.pi - th) * np.cos(th)) / (2 * np.pi)
    m2 = 1 / (2 * np.pi)
    np.testing.assert_allclose(H.correlation_map("relu", r), (arccos - m2) / (0.5 - m2), atol=1e-9)
    np.testing.assert_allclose(H.correlation_map("relu", r, centered=False), arccos / 0.5, atol=1e-9)
    a = H.hermite_coefficients("tanh", 41, normalized=True)
    inner = np.linspace(-0.9, 0.9, 19)
    np.testing.assert_allclose(H.correlation_map_from_coefficients(a, inner), H.correlation_map("tanh", inner), atol=1e-8)
    np.testing.assert_allclose(H.correlation_map("he2", r), r**2, atol=1e-9)
    np.testing.assert_allclose(H.correlation_map("he3", r), r**3, atol=1e-9)


@settings(max_examples=30)
@given(
    name=st.sampled_from(["relu", "gelu", "silu", "elu", "selu", "tanh", "sigmoid", "sin", "exp"]),
    rho=st.floats(-1.0, 1.0),
)
def test_rate_bounds_hold_for_common_activations(name, rho):
    """|kappa(rho)| <= |rho| (beta_0 + (1 - beta_0)|rho|), and kappa(rho) >= beta_0 rho for rho >= 0."""
    b = H.nonlinearity_strength(name)
    k = float(H.correlation_map(name, rho))
    assert abs(k) <= abs(rho) * (b + (1 - b) * abs(rho)) + 1e-9
    if rho >= 0:
        assert k >= b * rho - 1e-9


# ---------------------------------------------------------------- errors


def test_errors():
    with pytest.raises(ValueError, match="k must be >= 0"):
        H.hermite_coefficients("relu", -1)
    with pytest.raises(TypeError, match="k must be an integer"):
        H.hermite_coefficients("relu", 2.5)
    with pytest.raises(TypeError, match="callable"):
        H.hermite_coefficients(3.0, 2)
    with pytest.raises(TypeError, match="callable"):
        H.nonlinearity_strength([1, 2])
    with pytest.raises(ValueError, match="unknown activation"):
        H.nonlinearity_strength("swish2")
    with pytest.raises(ValueError, match="constant"):
        H.nonlinearity_strength(lambda x: np.ones_like(x))
    with pytest.raises(ValueError, match="no closed form"):
        H.exact_hermite_coefficients("tanh", 3)
    with pytest.raises(ValueError, match="k must be >= 0"):
        H.exact_hermite_coefficients("relu", -2)
    y = sp.Symbol("y")
    with pytest.raises(ValueError, match="one variable"):
        H.exact_hermite_coefficients(X * y, 2)
    with pytest.raises(ValueError, match="non-finite"):
        H.hermite_coefficients(lambda x: np.where(x > 0, np.inf, 0.0), 2)
    with pytest.raises(ValueError, match="elementwise"):
        H.hermite_coefficients(lambda x: np.sum(x), 2)
    with pytest.raises(ValueError, match="rho must lie"):
        H.correlation_map("relu", 1.5)
    with pytest.raises(ValueError, match="method"):
        H.gaussian_expectation(np.cos, method="simpson")
    with pytest.raises(ValueError, match="scale"):
        H.nonlinearity_strength("relu", scale=-1.0)
