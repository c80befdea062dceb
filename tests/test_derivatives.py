"""Tests of lnbook.derivatives: LN's closed-form Jacobian and Hessian, and their sizes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from lnbook.derivatives import (
    distance_from_uniform_line,
    layer_norm_hessian,
    layer_norm_hessian_frobenius,
    layer_norm_hessian_norm,
    layer_norm_jacobian,
    layer_norm_jacobian_norm,
)
from lnbook.norms import layer_norm
from lnbook.symbolic_ln import symbolic_centering_matrix, symbolic_jacobian_formula, symbolic_layer_norm

SEEDS = st.integers(min_value=0, max_value=2**31 - 1)
EPSILONS = st.sampled_from([0.0, 1e-5, 1e-2, 0.5])


def random_point(seed: int, d: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(d, generator=g, dtype=torch.float64) + 3.0  # an offset along 1 changes nothing


def rounding_tol(x: torch.Tensor, eps: float, order: int) -> float:
    """Absolute tolerance for a derivative of order 1 or 2 at x.

    Centring x costs a relative error of about machine-eps * |x|_inf / rho, which the derivative
    amplifies to its own size sqrt(d) / r**order (r^2 = rho^2 + d eps)."""
    d = x.shape[-1]
    rho = float(distance_from_uniform_line(x))
    return 1e-12 * (1 + float(x.abs().max()) / rho) * math.sqrt(d) / (rho**2 + d * eps) ** (order / 2)


# --------------------------------------------------------------------------- against autodiff


# the Jacobian against jacrev: tests/test_ch01_theorems.py::test_jacobian_matches_autograd


@settings(max_examples=30, deadline=None)
@given(SEEDS, st.integers(2, 7), EPSILONS)
def test_hessian_matches_torch_func_hessian(seed, d, eps):
    x = random_point(seed, d)
    auto = torch.func.hessian(lambda v: layer_norm(v, eps))(x)
    torch.testing.assert_close(layer_norm_hessian(x, eps), auto, rtol=1e-9, atol=rounding_tol(x, eps, 2))


def test_hessian_batched_shape_and_values():
    x = torch.randn(4, 3, 5, dtype=torch.float64)
    H = layer_norm_hessian(x, 1e-3)
    assert H.shape == (4, 3, 5, 5, 5)
    auto = torch.func.hessian(lambda v: layer_norm(v, 1e-3))(x[2, 1])
    torch.testing.assert_close(H[2, 1], auto, rtol=1e-9, atol=1e-11)


@settings(max_examples=20, deadline=None)
@given(SEEDS, st.integers(2, 6), EPSILONS)
def test_hessian_structure(seed, d, eps):
    """H is symmetric in all three indices and annihilates the 1-direction (LN(x + t1) = LN(x))."""
    H = layer_norm_hessian(random_point(seed, d), eps)
    for perm in [(0, 2, 1), (1, 0, 2), (2, 1, 0)]:
        torch.testing.assert_close(H, H.permute(*perm), rtol=0, atol=1e-12)
    torch.testing.assert_close(H @ torch.ones(d, dtype=torch.float64), torch.zeros(d, d, dtype=torch.float64))


def test_second_order_taylor_expansion():
    """LN(x + t h) - LN(x) - t J h - t^2/2 H[h, h] shrinks like t^3."""
    x, h = random_point(1, 6), random_point(2, 6) - 3.0
    J, H = layer_norm_jacobian(x, 1e-2), layer_norm_hessian(x, 1e-2)
    errors = []
    for t in (1e-1, 1e-2):
        rest = layer_norm(x + t * h, 1e-2) - layer_norm(x, 1e-2) - t * J @ h - 0.5 * t**2 * torch.einsum("ijk,j,k->i", H, h, h)
        errors.append(float(rest.norm()))
    assert 500 < errors[0] / errors[1] < 2000  # ratio 10^3 for a cubic remainder


# --------------------------------------------------------------------------- sympy at d = 3


def test_jacobian_and_hessian_sympy_d3():
    """Exact: at d = 3 with symbolic x and eps > 0, the closed forms equal sympy's derivatives of LN
    written from its definition (x - mean) / sqrt(var + eps)."""
    d = 3
    eps = sp.symbols("epsilon", positive=True)
    x, ln = symbolic_layer_norm(d, eps)
    P = symbolic_centering_matrix(d)
    z = P * x
    r = sp.sqrt((z.T * z)[0] + d * eps)
    J_closed = symbolic_jacobian_formula(x, eps)
    for i in range(d):
        for j in range(d):
            assert sp.simplify(sp.diff(ln[i], x[j]) - J_closed[i, j]) == 0
            for k in range(d):
                H_closed = sp.sqrt(d) / r**3 * (3 * z[i] * z[j] * z[k] / r**2 - P[i, j] * z[k] - P[i, k] * z[j] - P[j, k] * z[i])
                assert sp.simplify(sp.diff(ln[i], x[j], x[k]) - H_closed) == 0


def test_size_formulas_sympy():
    """Exact: the quadratic-form and Frobenius norms of H derived in the chapter (d >= 3).

    With h = a z/|z| + b w (w a unit vector orthogonal to 1 and z, a^2 + b^2 = 1) and q = rho^2/r^2:
    |H[h,h]|^2 r^6/(d rho^2) = ((3q - 2) a^2 - 1)^2 + 4 a^2 b^2, maximised at a^2 = 1/(3q) with value 4/(3q)."""
    a, q = sp.symbols("a q", positive=True)
    t = sp.symbols("t", positive=True)  # t = a^2
    f = ((3 * q - 2) * t - 1) ** 2 + 4 * t * (1 - t)
    t_star = sp.solve(sp.diff(f, t), t)
    assert t_star == [1 / (3 * q)]
    assert sp.simplify(f.subs(t, t_star[0]) - 4 / (3 * q)) == 0
    assert sp.simplify(f.subs(t, 1) - 9 * (1 - q) ** 2) == 0
    # Frobenius: |T|_F^2 = 9 s^3/r^4 - 18 s^2/r^2 + 3(d+1) s = s (9(1-q)^2 + 3(d-2)) (the form the code uses)
    dd, rho = sp.symbols("d rho", positive=True)
    assert sp.expand(9 * q**2 - 18 * q + 3 * (dd + 1) - (9 * (1 - q) ** 2 + 3 * (dd - 2))) == 0
    # ... and at eps = 0 (q = 1): d/rho^4 * (9 - 18 + 3(d + 1)) = 3 d (d - 2) / rho^4
    frob2 = dd * rho**2 / rho**6 * (9 - 18 + 3 * (dd + 1))
    assert sp.simplify(frob2 - 3 * dd * (dd - 2) / rho**4) == 0


# --------------------------------------------------------------------------- sizes


@settings(max_examples=30, deadline=None)
@given(SEEDS, st.integers(2, 7), EPSILONS, st.sampled_from([1e-3, 0.1, 1.0, 10.0]))
def test_jacobian_spectral_norm(seed, d, eps, scale):
    x = random_point(seed, d, scale)
    rho = distance_from_uniform_line(x)
    numeric = torch.linalg.matrix_norm(layer_norm_jacobian(x, eps), ord=2)
    torch.testing.assert_close(layer_norm_jacobian_norm(d, rho, eps), numeric, rtol=1e-10, atol=rounding_tol(x, eps, 1))


@settings(max_examples=30, deadline=None)
@given(SEEDS, st.integers(2, 7), EPSILONS, st.sampled_from([1e-2, 0.1, 1.0, 10.0]))
def test_hessian_frobenius_norm(seed, d, eps, scale):
    x = random_point(seed, d, scale)
    numeric = torch.linalg.norm(layer_norm_hessian(x, eps))
    rho = distance_from_uniform_line(x)
    closed = layer_norm_hessian_frobenius(d, rho, eps)
    torch.testing.assert_close(closed, numeric, rtol=1e-8, atol=rounding_tol(x, eps, 2))


def _max_quadratic_form(H: np.ndarray, starts: int, rng) -> float:
    d = H.shape[-1]

    def neg(h):
        h = h / np.linalg.norm(h)
        return -np.linalg.norm(np.einsum("ijk,j,k->i", H, h, h))

    return max(-minimize(neg, rng.normal(size=d), method="BFGS", tol=1e-14).fun for _ in range(starts))


@settings(max_examples=12, deadline=None)
@given(SEEDS, st.integers(2, 6), st.sampled_from([0.0, 1e-2, 0.3]), st.sampled_from([0.05, 0.3, 1.0, 5.0]))
def test_hessian_quadratic_norm_by_direct_maximisation(seed, d, eps, scale):
    """sup_{|h|=1} |H[h,h]| found by BFGS from 6 starts equals the closed form (rel. 1e-6) and never exceeds it."""
    x = random_point(seed, d, scale)
    H = layer_norm_hessian(x, eps).numpy()
    rho = distance_from_uniform_line(x)
    closed = float(layer_norm_hessian_norm(d, rho, eps))
    atol = rounding_tol(x, eps, 2)
    rng = np.random.default_rng(seed)
    found = _max_quadratic_form(H, 6, rng)
    assert found <= closed * (1 + 1e-9) + atol
    assert found == pytest.approx(closed, rel=1e-6, abs=atol)


@pytest.mark.parametrize("ratio", [0.1, 0.3, 0.45, 0.55, 0.75, 1.5, 4.0])
@pytest.mark.parametrize("d", [3, 5])
def test_hessian_quadratic_norm_on_both_sides_of_the_switch(ratio, d):
    """Points with rho^2 = ratio * d * eps on both sides of the switch rho^2 = d eps / 2 (rel. 1e-6)."""
    eps = 0.1
    rng = np.random.default_rng(d)
    v = rng.normal(size=d)
    v -= v.mean()
    x = torch.as_tensor(v / np.linalg.norm(v) * math.sqrt(ratio * d * eps) + 1.5)
    closed = float(layer_norm_hessian_norm(d, distance_from_uniform_line(x), eps))
    found = _max_quadratic_form(layer_norm_hessian(x, eps).numpy(), 6, rng)
    assert found == pytest.approx(closed, rel=1e-6)


def test_sizes_blow_up_near_the_uniform_line():
    """At eps = 0: |J| = sqrt(d)/rho and |H|_q = 2 sqrt(d)/(sqrt(3) rho^2)."""
    rho = torch.tensor([1e-3, 1.0, 10.0], dtype=torch.float64)
    torch.testing.assert_close(layer_norm_jacobian_norm(5, rho, 0.0), math.sqrt(5) / rho)
    torch.testing.assert_close(layer_norm_hessian_norm(5, rho, 0.0), 2 * math.sqrt(5) / (math.sqrt(3) * rho**2))
    torch.testing.assert_close(layer_norm_hessian_frobenius(5, rho, 0.0), math.sqrt(3 * 5 * 3) / rho**2)
    # with eps > 0 everything stays bounded: |J| <= 1/sqrt(eps) at rho = 0
    assert float(layer_norm_jacobian_norm(5, 0.0, 1e-4)) == pytest.approx(100.0)
    assert float(layer_norm_hessian_norm(5, 0.0, 1e-4)) == 0.0


# --------------------------------------------------------------------------- errors


def test_derivative_errors():
    const = torch.ones(4, dtype=torch.float64)
    with pytest.raises(ValueError, match="not differentiable"):
        layer_norm_hessian(const, 0.0)
    with pytest.raises(ValueError, match="at least 2 features"):
        layer_norm_hessian(torch.ones(1, dtype=torch.float64))
    with pytest.raises(TypeError, match="torch.Tensor"):
        layer_norm_hessian(np.ones(3))
    with pytest.raises(ValueError, match="non-finite"):
        layer_norm_hessian(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="rho=0 with eps=0"):
        layer_norm_jacobian_norm(4, 0.0, 0.0)
    with pytest.raises(ValueError, match=">= 0"):
        layer_norm_hessian_norm(4, -1.0, 1e-5)
    with pytest.raises(ValueError, match="at least 2 features"):
        layer_norm_hessian_frobenius(1, 1.0)
    with pytest.raises(TypeError, match="integer"):
        layer_norm_hessian_norm(3.0, 1.0)
