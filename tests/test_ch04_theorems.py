"""Machine checks of chapter 4's statements that are not checks of one lnbook function
(book/ch04_isometry_at_initialisation.md): the gap bound of prop-ch4-isometry-properties (3), the exact range
of the correlation map in thm-ch4-rates (4), and the collapse criterion of prop-ch4-no-centring.

Activations are built from Hermite components and evaluated by quadrature of the activation itself
(:func:`lnbook.hermite.correlation_map`), never from the series that the statements are about.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import seeds
from lnbook.hermite import correlation_map, gaussian_expectation, nonlinearity_strength
from lnbook.isometry import isometry, isometry_gap


# ---------------------------------------------------------------- prop-ch4-isometry-properties (3)


def _correlation_matrix(n: int, d: int, seed: int, common: float) -> np.ndarray:
    """Correlation matrix of n random vectors in R^d sharing a common direction of weight `common`."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(d, n)) + common * rng.normal(size=(d, 1))
    X /= np.linalg.norm(X, axis=0)
    return X.T @ X


def _gap_bound(G: np.ndarray) -> float:
    n = G.shape[0]
    lam_min = np.linalg.eigvalsh(G)[0]
    return float(np.sum((G - np.eye(n)) ** 2) / (2 * n * lam_min))


@settings(max_examples=80)
@given(seeds, st.integers(2, 12), st.integers(0, 30), st.floats(0.0, 3.0))
def test_isometry_gap_of_a_correlation_matrix_is_below_the_frobenius_bound(seed, n, extra, common):
    """-log I(G) <= |G - I|_F^2 / (2 n lambda_min) for correlation matrices, from nearly orthogonal (d >> n)
    to nearly singular (d close to n, strong common direction); and the Gershgorin corollary when
    eta = max |G_ab| < 1/(n - 1)."""
    G = _correlation_matrix(n, n + extra, seed, common)
    gap = float(isometry_gap(G))
    assert gap <= _gap_bound(G) * (1 + 1e-9) + 1e-15
    eta = np.max(np.abs(G - np.eye(n)))
    if eta < 1 / (n - 1):
        assert gap <= (n - 1) * eta**2 / (2 * (1 - (n - 1) * eta)) * (1 + 1e-9) + 1e-15


@pytest.mark.parametrize("n", [2, 5, 10])
def test_isometry_gap_bound_is_sharp_near_the_identity(n):
    """The constant 1/(2n) cannot be improved: for G = I + t E with small t the gap over the bound tends to 1,
    so a statement with a smaller constant would fail here."""
    E = _correlation_matrix(n, n + 3, 1, 1.0) - np.eye(n)
    ratios = [float(isometry_gap(np.eye(n) + t * E)) / _gap_bound(np.eye(n) + t * E) for t in (1e-1, 1e-2, 1e-3)]
    assert ratios[-1] == pytest.approx(1.0, abs=1e-2)
    assert all(r <= 1 + 1e-9 for r in ratios)


def test_scalar_inequalities_behind_the_bound_sympy():
    """x - 1 - log x <= (x-1)^2/(2x) for 0 < x <= 1 and <= (x-1)^2/2 for x >= 1 (the two steps of the proof),
    and the equicorrelated isometry formula of prop-ch4-no-centring against `isometry`."""
    x = sp.Symbol("x", positive=True)
    h = (x - 1) ** 2 / (2 * x) - (x - 1 - sp.log(x))
    assert sp.simplify(sp.diff(h, x) + (1 - 1 / x) ** 2 / 2) == 0 and h.subs(x, 1) == 0  # h decreasing, h(1)=0
    g = (x - 1) ** 2 / 2 - (x - 1 - sp.log(x))
    assert sp.simplify(sp.diff(g, x) - (x - 1) ** 2 / x) == 0 and g.subs(x, 1) == 0  # g increasing, g(1)=0
    for n, r in [(3, 0.2), (10, 0.7), (10, 0.99)]:
        G = (1 - r) * np.eye(n) + r * np.ones((n, n))
        formula = (1 - r) ** ((n - 1) / n) * (1 + (n - 1) * r) ** (1 / n)
        assert float(isometry(G)) == pytest.approx(formula, rel=1e-12)


# ---------------------------------------------------------------- thm-ch4-rates (4): the exact range of kappa


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
    if beta0 < 0.5:  # sigma_2 sends rho = -beta_0 / (1 - beta_0) to 0: the sign, even the size, can be lost
        assert abs(float(correlation_map(extremal(beta0, 2), -beta0 / (1 - beta0)))) < 1e-12
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


# ---------------------------------------------------------------- prop-ch4-no-centring: when the batch collapses


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
