"""Tests of :mod:`lnbook.isometry.hermite`.

Machine checks of chapter 4's statements that are not checks of one lnbook function
(book/ch04_isometry_at_initialisation.md): the gap bound of prop-ch4-isometry-properties (3), the exact range
of the correlation map in thm-ch4-rates (4), and the collapse criterion of prop-ch4-no-centring.

Activations are built from Hermite components and evaluated by quadrature of the activation itself
(:func:`lnbook.isometry.hermite.correlation_map`), never from the series that the statements are about.

Tests for lnbook.isometry.hermite: Hermite coefficients, beta_0, the mean-field correlation map (chapter 4).
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lnbook.isometry import hermite as H
from lnbook.isometry import mlp_at_init as M
from lnbook.isometry.hermite import (
    correlation_map,
    correlation_map_from_coefficients,
    gaussian_expectation,
    nonlinearity_strength,
)


def hermite_mixture(weights, constant: float = 0.3):
    """sigma = constant + sum_k sqrt(w_k) He_k / sqrt(k!) (k = 1, 2, ...): Var sigma = sum w_k, beta_0 = w_1 / sum w."""
    w = np.asarray(weights, dtype=np.float64)

    def sigma(x):
        x = torch.as_tensor(x)
        out = torch.full_like(x, constant)
        prev, cur = torch.ones_like(x), x  # He_0, He_1 (recurrence He_{k+1} = x He_k - k He_{k-1}: differentiable)
        for k, wk in enumerate(w, start=1):
            if wk:
                out = out + math.sqrt(wk) * cur / math.sqrt(math.factorial(k))
            prev, cur = cur, x * cur - k * prev
        return out

    return sigma


def extremal(beta0: float, K: int):
    """sqrt(beta_0) He_1 + sqrt(1 - beta_0) He_K / sqrt(K!): kappa(rho) = beta_0 rho + (1 - beta_0) rho^K."""
    return hermite_mixture([beta0] + [0.0] * (K - 2) + [1 - beta0])


RHO_POS = np.linspace(0.05, 0.95, 10)


RHO_NEG = -RHO_POS


def _derivative_square_ratio(sigma) -> float:
    """E sigma'(Z)^2 / E sigma(Z)^2, with sigma' from torch autograd at the quadrature nodes."""

    def moments(x):
        t = torch.as_tensor(x, dtype=torch.float64).requires_grad_(True)
        y = sigma(t)
        (dy,) = torch.autograd.grad(y.sum(), t)
        return np.stack([dy.detach().numpy() ** 2, y.detach().numpy() ** 2])

    d2, s2 = gaussian_expectation(moments)
    return float(d2 / s2)


NO_CENTRING_CASES = {
    # name: (activation, collapses?)  -- collapse iff E sigma'^2 <= E sigma^2
    "relu": (torch.relu, True),  # E sigma'^2 = E sigma^2 = 1/2: the critical case
    "exp": (torch.exp, True),  # E sigma'^2 = E sigma^2 = e^2: critical too
    "sigmoid": (torch.sigmoid, True),
    "he1+0.3": (hermite_mixture([1.0]), True),
    "tanh+0.1": (lambda x: torch.tanh(torch.as_tensor(x)) + 0.1, False),
    "he3+0.5": (hermite_mixture([0.0, 0.0, 1.0], constant=0.5), False),
    "he2+0.3": (hermite_mixture([0.0, 1.0]), False),
}


X = sp.Symbol("x", real=True)


def _bivariate_moment(poly_expr, z1, z2):
    """E[p(z1, z2)] for independent standard normals, exactly."""
    p = sp.Poly(sp.expand(poly_expr), z1, z2)
    return sp.Add(*[c * H._dfact(i - 1) * H._dfact(j - 1) for (i, j), c in p.terms() if i % 2 == 0 and j % 2 == 0])


@pytest.mark.parametrize("beta0", [0.0, 0.3, 0.7335, 0.95])
def test_correlation_range_for_positive_rho(beta0):
    """rho > 0: the upper bound of (1) is attained (He_1 + He_2 mixture) and the lower bound beta_0 rho is
    approached from above by He_1 + He_K mixtures as K grows, never reached."""
    upper = beta0 * RHO_POS + (1 - beta0) * RHO_POS**2
    sigma2 = extremal(beta0, 2)
    assert nonlinearity_strength(sigma2) == pytest.approx(beta0, abs=1e-12)
    np.testing.assert_allclose(correlation_map(sigma2, RHO_POS), upper, atol=1e-12)
    excess = [correlation_map(extremal(beta0, K), RHO_POS) - beta0 * RHO_POS for K in (3, 5, 8, 11)]
    for e_small, e_large in zip(excess[1:], excess[:-1]):
        assert np.all(e_small < e_large) and np.all(e_small > 0)
    assert np.max(excess[-1]) < (1 - beta0) * 0.95**11 + 1e-8


@pytest.mark.parametrize("beta0", [0.0, 0.3, 0.7335, 0.95])
def test_correlation_range_for_negative_rho(beta0):
    """rho < 0: kappa fills [beta_0 rho - (1 - beta_0)|rho|^3, beta_0 rho + (1 - beta_0) rho^2], both ends attained
    (He_3 and He_2 mixtures); the bound |rho| (beta_0 + (1 - beta_0)|rho|) of (1) is attained only when beta_0 = 0."""
    r = -RHO_NEG
    upper = beta0 * RHO_NEG + (1 - beta0) * r**2
    lower = beta0 * RHO_NEG - (1 - beta0) * r**3
    np.testing.assert_allclose(correlation_map(extremal(beta0, 2), RHO_NEG), upper, atol=1e-12)
    np.testing.assert_allclose(correlation_map(extremal(beta0, 3), RHO_NEG), lower, atol=1e-12)
    sharp = np.maximum(np.abs(upper), np.abs(lower))
    np.testing.assert_allclose(sharp, np.maximum(beta0 * r + (1 - beta0) * r**3, (1 - beta0) * r**2 - beta0 * r), atol=1e-15)
    root = -beta0 / (1 - beta0)  # sigma_2 sends it to 0: the sign, even the size, can be lost
    if 0 < beta0 < 0.5:  # the statement's range: a root with 0 < |rho| < 1
        assert -1 < root < 0 and abs(float(correlation_map(extremal(beta0, 2), root))) < 1e-12
    else:  # beta_0 = 0: the root is rho = 0 itself; beta_0 >= 1/2: it lies outside (-1, 0)
        assert root == 0 or root <= -1
    bound_of_part_1 = r * (beta0 + (1 - beta0) * r)
    if beta0 == 0.0:
        np.testing.assert_allclose(sharp, bound_of_part_1, atol=1e-15)
    else:
        assert np.all(bound_of_part_1 - sharp >= min(beta0 * 0.05, 1e-3) * 0.05)


@settings(max_examples=40)
@given(st.lists(st.floats(0.0, 1.0), min_size=6, max_size=6).filter(lambda w: sum(w) > 1e-3), st.floats(-0.98, 0.98))
def test_every_activation_stays_in_the_range(weights, rho):
    """Random activations (mixtures of He_1..He_6 plus a constant): kappa(rho), computed by quadrature of the
    activation, lies in the interval of (4) for its own beta_0, and inside the bounds of (1)."""
    sigma = hermite_mixture(weights)
    b = nonlinearity_strength(sigma)
    k = float(correlation_map(sigma, rho))
    r = abs(rho)
    assert k <= b * rho + (1 - b) * rho**2 + 1e-9
    assert k >= (b * rho - (1 - b) * r**3 if rho < 0 else b * rho) - 1e-9
    assert abs(k) <= r * (b + (1 - b) * r) + 1e-9


@pytest.mark.parametrize("name", sorted(NO_CENTRING_CASES))
def test_without_centring_the_batch_collapses_iff_derivative_energy_is_small(name):
    """rho* = 1 (collapse) iff kappa~'(1) <= 1 iff E sigma'(Z)^2 <= E sigma(Z)^2. The criterion is measured
    independently (autograd derivative), and the fixed points are located on kappa~ itself (quadrature): no
    crossing of the diagonal in (0, 1) exactly in the collapsing cases, including the two critical ones."""
    sigma, collapses = NO_CENTRING_CASES[name]
    ratio = _derivative_square_ratio(sigma)
    assert (ratio <= 1 + 1e-9) == collapses, ratio
    grid = np.concatenate([np.linspace(0.0, 0.99, 100), 1 - np.logspace(-2, -3, 6)])
    excess = correlation_map(sigma, grid, centered=False) - grid  # kappa~(rho) - rho
    floor = float(correlation_map(sigma, 0.0, centered=False))
    assert floor > 0  # kappa~(0) = a_0^2 / E sigma^2 > 0: correlations never reach 0
    if collapses:
        assert np.all(excess > 0)  # no fixed point below 1: the iteration climbs to 1
    else:
        assert np.any(excess < 0)
        root = grid[np.argmax(excess < 0)]  # the smallest crossing (to grid resolution)
        rho = 0.0
        for _ in range(200):
            rho = float(correlation_map(sigma, rho, centered=False))
            assert rho >= floor - 1e-12
        assert root - 0.011 <= rho <= root + 1e-9  # the iteration from 0 stops at the smallest fixed point


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
    """The official code's act_info (validations.ipynb, variable beta) and compute_beta0 (utils.py) return 2 - beta_0
    (Monte Carlo); ours is beta_0, in [0, 1]."""
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


def _relu_pair_errors(**quadrature):
    """|E[relu(U) relu(V)] - arc-cosine kernel| on 441 evenly spaced rho plus 46 points within 1e-12..1e-1 of +-1."""
    near = np.logspace(-12, -1, 23)
    r = np.unique(np.r_[np.linspace(-1, 1, 441), 1 - near, -1 + near])
    th = np.arccos(r)
    arccos = (np.sin(th) + (np.pi - th) * np.cos(th)) / (2 * np.pi)
    cov = np.empty(r.shape + (2, 2))
    cov[..., 0, 0] = cov[..., 1, 1] = 1.0
    cov[..., 0, 1] = cov[..., 1, 0] = r
    return r, np.abs(H.gaussian_pair_expectation(torch.relu, torch.relu, cov, **quadrature) - arccos)


def test_pair_quadrature_accuracy_against_the_arc_cosine_kernel():
    """The bounds the chapter quotes for gaussian_pair_expectation: default 1e-11 for |rho| <= 0.99 and 5e-8 up to
    |rho| = 1 (the error grows where the conditional law of V given U narrows); the faster setting of the mean-field
    iteration (m = 16, panels = 2) 1e-10 for |rho| <= 0.9 and 2e-6 everywhere."""
    r, err = _relu_pair_errors()
    assert err[np.abs(r) <= 0.99].max() < 1e-11
    assert err.max() < 5e-8
    r, err = _relu_pair_errors(m=16, panels=2)
    assert err[np.abs(r) <= 0.9].max() < 1e-10
    assert err.max() < 2e-6


def test_correlation_maps_gives_both_maps_from_one_quadrature():
    """correlation_maps returns (kappa, kappa~) with exactly the values of the two correlation_map calls."""
    rho = np.linspace(-1, 1, 9)
    for name in ("relu", "exp"):
        kappa, kappa_tilde = H.correlation_maps(name, rho)
        np.testing.assert_array_equal(kappa, H.correlation_map(name, rho))
        np.testing.assert_array_equal(kappa_tilde, H.correlation_map(name, rho, centered=False))
    with pytest.raises(ValueError, match="lie in"):
        H.correlation_maps("relu", [1.5])


def test_pair_expectation_on_a_gram_diagonal_is_the_second_moment():
    """A pair at correlation 1 (a Gram's diagonal: no inner quadrature is formed) gives E f(sqrt(q) Z)^2 (to the
    quadrature's 2e-6 at m=16, panels=2), and its
    neighbours in the batch are unchanged by its presence."""
    cov = np.array([[[2.0, 2.0], [2.0, 2.0]], [[2.0, 0.6], [0.6, 1.0]], [[1.0, 1.0], [1.0, 1.0]]])
    _, fn = H.get_activation("tanh")
    both = H.gaussian_pair_expectation(fn, fn, cov, m=16, panels=2)
    alone = H.gaussian_pair_expectation(fn, fn, cov[1:2], m=16, panels=2)
    assert both[1] == alone[0]
    for q, value in ((2.0, both[0]), (1.0, both[2])):
        m1, var = H.mean_and_variance("tanh", scale=math.sqrt(q))
        assert value == pytest.approx(var + m1**2, abs=2e-6)  # the error bound of m=16, panels=2


def test_step_correlation_map_near_one_matches_the_arcsine_law():
    """A step activation near |rho| = 1: E[g(V) | U] is Phi(rho U / sqrt(1 - rho^2)), almost a jump, which the outer
    panels must resolve (graded towards 0). kappa(rho) = (2/pi) arcsin(rho) to 1e-12, and 1 - kappa (what the
    isometry gap depends on) to a relative 1e-9, for rho and -rho up to 1 - 1e-6; also with the mean-field setting."""
    rho = np.array([0.9, 0.99, 0.995, 0.999, 0.9999, 0.99999, 0.999999])
    rho = np.r_[rho, -rho]
    exact = 2 / np.pi * np.arcsin(rho)
    got = H.correlation_map("step", rho)
    np.testing.assert_allclose(got, exact, rtol=0, atol=1e-12)
    np.testing.assert_allclose(1 - got[rho > 0], 1 - exact[rho > 0], rtol=1e-9)
    step = lambda x: (np.asarray(x) > 0).astype(float)  # noqa: E731
    fast = H.gaussian_pair_expectation(step, step, _unit_cov(rho), m=16, panels=2)
    np.testing.assert_allclose(fast, 0.25 + np.arcsin(rho) / (2 * np.pi), rtol=0, atol=1e-9)


def test_correlation_map_matches_series_and_closed_forms():
    near = np.logspace(-12, -1, 12)
    r = np.r_[np.linspace(-1, 1, 41), 1 - near, -1 + near]  # points close to +-1, where the quadrature is weakest
    np.testing.assert_allclose(H.correlation_map("exp", r), (np.exp(r) - 1) / (np.e - 1), atol=1e-9)
    th = np.arccos(r)
    arccos = (np.sin(th) + (np.pi - th) * np.cos(th)) / (2 * np.pi)
    m2 = 1 / (2 * np.pi)
    np.testing.assert_allclose(H.correlation_map("relu", r), (arccos - m2) / (0.5 - m2), atol=2e-7)
    np.testing.assert_allclose(H.correlation_map("relu", r, centered=False), arccos / 0.5, atol=1e-7)
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
    for bad in (float("nan"), [0.2, float("inf")]):  # blamed on rho, not on the activation
        with pytest.raises(ValueError, match="rho must be finite"):
            H.correlation_map("relu", bad)
    with pytest.raises(ValueError, match="method"):
        H.gaussian_expectation(np.cos, method="simpson")
    with pytest.raises(ValueError, match="scale"):
        H.nonlinearity_strength("relu", scale=-1.0)


def test_rate_part_three_needs_positive_beta0_and_rho0_and_stops_at_zero():
    """thm-ch4-rates (3): rho_l = Theta(beta_0^l) needs beta_0 > 0 and 0 < rho_0 < 1, and the ratio |rho_{l+1}|/|rho_l| is
    undefined once an iterate is 0. sigma_2 = sqrt(b) He_1 + sqrt(1 - b) He_2/sqrt(2) has kappa(rho) = b rho + (1 - b) rho^2."""
    def iterate(a, rho0, depth):
        out = [rho0]
        for _ in range(depth):
            out.append(float(correlation_map_from_coefficients(a, out[-1])))
        return np.array(out)

    b = 0.3
    sigma2 = [0.0, math.sqrt(b), math.sqrt(1 - b)]  # normalised coefficients a_0, a_1, a_2
    # beta_0 > 0, rho_0 > 0: rho_l / beta_0^l stays between rho_0 and a finite constant (Theta(beta_0^l))
    rho = iterate(sigma2, 0.6, 40)
    scaled = rho / b ** np.arange(41)
    assert bool((rho > 0).all()) and scaled.min() >= 0.6 - 1e-12 and scaled.max() < 10 and abs(scaled[-1] / scaled[-2] - 1) < 1e-9
    # rho_0 = 1 is a fixed point (kappa(1) = 1): the Theta claim needs rho_0 < 1 too
    assert np.all(iterate(sigma2, 1.0, 10) == 1.0) and float(correlation_map("relu", 1.0)) == pytest.approx(1.0, abs=1e-12)
    # rho_0 = -b / (1 - b) is sent to 0 in one layer, and 0 stays 0: no ratio to bound from there on
    grid = np.linspace(-1, 1, 41)
    np.testing.assert_allclose(correlation_map_from_coefficients(sigma2, grid), b * grid + (1 - b) * grid**2, atol=1e-15)
    B = Fraction(3, 10)  # the same map in exact arithmetic
    rho = [-B / (1 - B)]
    for _ in range(4):
        rho.append(B * rho[-1] + (1 - B) * rho[-1] ** 2)
    assert rho[0] != 0 and all(r == 0 for r in rho[1:])
    # beta_0 = 0 (He_2 alone): the lower bound beta_0^l rho_0 is 0 and rho_l = rho_0^(2^l) is not Theta(0^l)
    rho = iterate([0.0, 0.0, 1.0], 0.6, 5)
    np.testing.assert_allclose(rho, 0.6 ** (2.0 ** np.arange(6)), rtol=1e-12)
    assert bool((rho > 0).all())  # positive, while beta_0^l rho_0 = 0 for l >= 1: the Theta claim would be false
    # an even activation never sends a pair to 0: only even k carry weight, so kappa(rho) > 0 for every rho != 0
    even = [0.0, 0.0, math.sqrt(0.5), 0.0, math.sqrt(0.3), 0.0, math.sqrt(0.2)]  # normalised a_0..a_6, odd ones 0
    nonzero = grid[grid != 0]
    assert bool((correlation_map_from_coefficients(even, nonzero) > 0).all())
    rho = iterate(even, -0.9, 6)
    assert bool((rho[1:] > 0).all())


def _shifted_relu(x):
    return torch.relu(torch.as_tensor(x) - 0.5)


def _hardtanh(x):
    return torch.clamp(torch.as_tensor(x), -1.0, 1.0)


def _unit_cov(rho):
    rho = np.asarray(rho, dtype=np.float64)
    cov = np.empty(rho.shape + (2, 2))
    cov[..., 0, 0] = cov[..., 1, 1] = 1.0
    cov[..., 0, 1] = cov[..., 1, 0] = rho
    return cov


def test_kinks_away_from_zero_need_their_breakpoints():
    """relu(x - 1/2) and hardtanh have kinks off 0. With breakpoints the quadrature meets the closed forms
    (c_1 = Phi(-1/2) and 2 Phi(1) - 1 by Stein's lemma; E relu(Z-a)^2 = (1+a^2) Phi(-a) - a phi(a);
    E hardtanh(Z)^2 = 2 Phi(1) - 1 - 2 phi(1) + 2 Phi(-1)) to 1e-12, and the pair quadrature meets the Mehler series
    at |rho| <= 1/2 (where 60 terms are exact to rounding); without them the one-dimensional quadrature refuses
    for relu(x - 1/2) (halving its panels moves the result by ~1e-4; hardtanh's kinks are panel ends, exact anyway)
    and the pair quadrature (hence the correlation map of hardtanh) is off by >= 1e-7. With a gain s
    the kinks of x -> f(s x) move to cuts / s, which the functions do themselves."""
    from scipy.stats import norm

    a = 0.5
    m2 = (1 + a * a) * norm.cdf(-a) - a * norm.pdf(a)
    mean = norm.pdf(a) - a * norm.cdf(-a)
    exact = {
        "shift": (_shifted_relu, (0.5,), norm.cdf(-a), norm.cdf(-a) ** 2 / (m2 - mean**2), 2 * norm.cdf(-a / 2)),
        "hardtanh": (_hardtanh, (-1.0, 1.0), 2 * norm.cdf(1) - 1,
                     (2 * norm.cdf(1) - 1) ** 2 / (2 * norm.cdf(1) - 1 - 2 * norm.pdf(1) + 2 * norm.cdf(-1)),
                     2 * (2 * norm.cdf(0.5) - 1)),
    }
    rho = np.linspace(-0.5, 0.5, 11)
    for f, cuts, c1, beta0, c1_at_2 in exact.values():  # c1_at_2: c_1 of x -> f(2x), = 2 E f'(2Z) (Stein)
        assert H.hermite_coefficients(f, 1, breakpoints=cuts)[1] == pytest.approx(c1, abs=1e-12)
        assert H.nonlinearity_strength(f, breakpoints=cuts) == pytest.approx(beta0, abs=1e-12)
        assert H.hermite_coefficients(f, 1, scale=2.0, breakpoints=cuts)[1] == pytest.approx(c1_at_2, abs=1e-12)
        coeffs = H.hermite_coefficients(f, 60, normalized=True, breakpoints=cuts)
        var = H.mean_and_variance(f, breakpoints=cuts)[1]  # the full sum of a_k^2, k >= 1 (60 terms miss ~1e-3 of it)
        series = (rho[:, None] ** np.arange(1, 61)) @ coeffs[1:] ** 2 / var
        np.testing.assert_allclose(H.correlation_map(f, rho, breakpoints=cuts), series, atol=1e-10)
        if f is _shifted_relu:  # without its kink, the one-dimensional quadrature does not converge, and refuses
            for call in (lambda: H.correlation_map(f, rho), lambda: H.hermite_coefficients(f, 1),
                         lambda: H.nonlinearity_strength(f), lambda: H.mean_and_variance(f)):
                with pytest.raises(ValueError, match="breakpoints"):
                    call()
        else:  # hardtanh's kinks +-1 are ends of the unit panels: the one-dimensional quadrature is exact anyway
            assert H.nonlinearity_strength(f) == pytest.approx(beta0, abs=1e-12)
            assert np.abs(H.correlation_map(f, rho) - series).max() > 1e-7  # but the pair quadrature is not
        # the pair quadrature (its panels scale with the conditional spread) loses accuracy silently without them
        assert np.abs(H.gaussian_pair_expectation(f, f, _unit_cov(rho)) - H.gaussian_pair_expectation(
            f, f, _unit_cov(rho), breakpoints=cuts)).max() > 1e-7
    C0 = np.array([[1.0, 0.4], [0.4, 1.0]])
    mf = M.mean_field_grams(_shifted_relu, C0, 2, breakpoints=(0.5,))
    np.testing.assert_allclose(mf[1, 0, 1], H.correlation_map(_shifted_relu, 0.4, breakpoints=(0.5,)), atol=2e-6)
    # U degenerate (Sigma_11 = 0): E[f(0) g(V)] with V ~ N(0, 1), here f = 1 + x and g the shifted ReLU
    degenerate = np.array([[[0.0, 0.0], [0.0, 1.0]], [[0.0, 0.0], [0.0, 4.0]]])
    got = H.gaussian_pair_expectation(lambda x: 1 + x, _shifted_relu, degenerate, breakpoints=(0.5,))
    shifted_mean = [norm.pdf(a) - a * norm.cdf(-a), 2 * (norm.pdf(a / 2) - a / 2 * norm.cdf(-a / 2))]  # E relu(sZ - a)
    np.testing.assert_allclose(got, shifted_mean, atol=1e-12)
    with pytest.raises(TypeError, match="breakpoints"):
        H.correlation_map(_hardtanh, 0.3, breakpoints=1.0)


@pytest.mark.parametrize("s", [1.0, 3.0, 6.0, 7.0, 9.0])
def test_quadrature_window_widens_for_fast_growing_activations(s):
    """exp(s x) carries its mass of exp(2 s x) phi(x) around x = 2 s, beyond a fixed window for s >= 6: beta_0 must
    still match the closed form s^2 / (e^{s^2} - 1) (prop-ch4-closed-forms at scale s)."""
    exact = s * s / math.expm1(s * s)
    assert H.nonlinearity_strength("exp", scale=s) == pytest.approx(exact, rel=1e-12, abs=0)


@pytest.mark.parametrize("s", [0.5, 2.0, 3.0, 4.0])
def test_correlation_map_of_exp_at_large_scale_matches_the_closed_form(s):
    """kappa(rho) = (e^{s^2 rho} - 1)/(e^{s^2} - 1) and kappa~(rho) = e^{s^2 (rho - 1)} for exp(s x): the pair
    quadrature's window widens where the mass of exp lies far out."""
    rho = np.linspace(-1, 1, 41)
    np.testing.assert_allclose(H.correlation_map("exp", rho, scale=s), np.expm1(s * s * rho) / math.expm1(s * s),
                               rtol=0, atol=1e-13)
    np.testing.assert_allclose(H.correlation_map("exp", rho, scale=s, centered=False), np.exp(s * s * (rho - 1)),
                               rtol=1e-12, atol=1e-300)


def test_gaussian_expectation_refuses_an_integrand_it_cannot_contain():
    with pytest.raises(ValueError, match="grows too fast"), np.errstate(over="ignore"):
        H.gaussian_expectation(lambda x: np.exp(100.0 * x))
    # E e^{t Z} = e^{t^2/2}, with the mass around t, beyond the default window for t = 20
    assert H.gaussian_expectation(lambda x: np.exp(20.0 * x)) == pytest.approx(math.exp(200.0), rel=1e-12, abs=0)



def test_tanh_nonlinearity_strength_decreases_with_the_gain():
    """prop-ch4-no-centring's discussion: tanh without normalisation at gain s > 1 contracts at beta_0(tanh(s sqrt(q*) .))
    per layer, slower than LN at beta_0(tanh(s .)) because q* < 1 *and* c -> beta_0(tanh(c .)) decreases. Checked
    numerically on a grid of 60 gains from 0.05 to 10 (not proved): strictly decreasing, from near 1 (tanh is nearly
    linear at small c) towards, and above, beta_0(sign) = 2 / pi (c1 = E|Z| = sqrt(2 / pi), Var sign(Z) = 1)."""
    grid = np.geomspace(0.05, 10.0, 60)
    beta = np.array([H.nonlinearity_strength("tanh", scale=c) for c in grid])
    assert (np.diff(beta) < 0).all(), beta
    assert beta[0] > 0.999 and (beta > 2 / math.pi).all() and beta[-1] < 0.7
    assert H.nonlinearity_strength("tanh", scale=10.0) == pytest.approx(0.6859, abs=1e-4)  # the referee's value


def _shifted_relu_errors(shifts):
    """Accepted errors of nonlinearity_strength for relu(x - b) without its breakpoint, against the exact
    beta_0 = Phi(-b)^2 / Var relu(Z - b); and how many shifts the refinement check refused."""
    from scipy.stats import norm as _norm
    errors, refused = [], 0
    for b in shifts:
        P, p = _norm.cdf(-b), _norm.pdf(b)
        mean, second = p - b * P, (1 + b * b) * P - b * p
        exact = P**2 / (second - mean**2)
        try:
            value = H.nonlinearity_strength(lambda x, b=b: np.maximum(x - b, 0.0), breakpoints=())
        except ValueError:
            refused += 1
            continue
        errors.append(abs(value - exact))
    return np.array(errors), refused


def test_the_refinement_check_bounds_a_change_not_the_error_near_its_worst_case():
    """The one-dimensional quadrature refuses when halving the panels changes the answer by more than 1e-6 of
    E|g|; that is not an error bound. A shifted ReLU without its breakpoint, near b = -0.89 (the worst of the
    grid in the slow test), is accepted with an error above 1e-6 but below the 2e-6 the chapter states."""
    errors, _ = _shifted_relu_errors(np.linspace(-0.95, -0.83, 13))
    assert errors.size and errors.max() > 1e-6  # the check can accept an error above its 1e-6 threshold
    assert errors.max() < 2e-6


@pytest.mark.slow
def test_the_refinement_check_over_601_shifts_accepts_errors_below_2e_6():
    errors, refused = _shifted_relu_errors(np.linspace(-3.0, 3.0, 601))
    assert refused > 300  # most missing kinks are caught
    assert errors.max() < 2e-6
