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

from conftest import layer_norm_epsilons, seeds
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


@settings(max_examples=30)
@given(seeds, st.integers(2, 7), layer_norm_epsilons)
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


@settings(max_examples=20)
@given(seeds, st.integers(2, 6), layer_norm_epsilons)
def test_hessian_structure(seed, d, eps):
    """thm-ln-hessian's structure, read off the Hessian of LN itself (torch.func.hessian): symmetric in all three
    indices (the symmetry in i <-> j is not automatic) and annihilating the 1-direction (LN(x + t1) = LN(x))."""
    x = random_point(seed, d)
    H = torch.func.hessian(lambda v: layer_norm(v, eps))(x)
    atol = rounding_tol(x, eps, 2)
    for perm in [(0, 2, 1), (1, 0, 2), (2, 1, 0)]:
        torch.testing.assert_close(H, H.permute(*perm), rtol=1e-9, atol=atol)
    torch.testing.assert_close(H @ torch.ones(d, dtype=torch.float64), torch.zeros(d, d, dtype=torch.float64), rtol=0, atol=atol * d)


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
    """Exact: the quadratic-form and Frobenius norms of H derived in thm-ln-derivative-sizes (d >= 3), from the
    Hessian of LN itself (sympy differentiates LN written from its definition, at rational points, symbolic eps).

    With h = a z/|z| + b w (w a unit vector orthogonal to 1 and z, b^2 = 1 - a^2) and q = rho^2/r^2:
    |H[h,h]|^2 r^6/(d rho^2) = ((3q - 2) a^2 - 1)^2 + 4 a^2 b^2 =: f(a^2), maximised at a^2 = 1/(3q) with value
    4/(3q), and f(1) = 9 (1 - q)^2; sum_ijk H_ijk^2 = d rho^2 / r^6 (9 (d eps)^2 / r^4 + 3 (d - 2))."""
    eps = sp.Symbol("epsilon", positive=True)
    a = sp.Symbol("a", real=True)
    for d, point in [(3, [0, 1, 3]), (4, [0, 1, 3, -2])]:
        x, ln = symbolic_layer_norm(d, eps)
        at = dict(zip(x, point))
        H = [[[sp.diff(ln[i], x[j], x[k]).subs(at) for k in range(d)] for j in range(d)] for i in range(d)]
        z = symbolic_centering_matrix(d) * sp.Matrix(point)
        rho2 = (z.T * z)[0]
        r2 = rho2 + d * eps
        frobenius2 = sum(H[i][j][k] ** 2 for i in range(d) for j in range(d) for k in range(d))
        assert sp.simplify(frobenius2 - d * rho2 / r2**3 * (9 * (d * eps / r2) ** 2 + 3 * (d - 2))) == 0
        if d == 3:
            w = sp.Matrix([1, 1, 1]).cross(z)
            h = a * z / sp.sqrt(rho2) + sp.sqrt(1 - a**2) * w / sp.sqrt((w.T * w)[0])
            Hhh = sp.Matrix([sum(H[i][j][k] * h[j] * h[k] for j in range(d) for k in range(d)) for i in range(d)])
            q = rho2 / r2
            assert sp.simplify((Hhh.T * Hhh)[0] * r2**3 / (d * rho2) - (((3 * q - 2) * a**2 - 1) ** 2 + 4 * a**2 * (1 - a**2))) == 0
    # the one-variable maximisation of f(t), t = a^2 in [0, 1]
    q, t = sp.symbols("q t", positive=True)
    f = ((3 * q - 2) * t - 1) ** 2 + 4 * t * (1 - t)
    t_star = sp.solve(sp.diff(f, t), t)
    assert t_star == [1 / (3 * q)]
    assert sp.simplify(f.subs(t, t_star[0]) - 4 / (3 * q)) == 0
    assert sp.simplify(f.subs(t, 1) - 9 * (1 - q) ** 2) == 0
    assert sp.diff(f, t, 2).subs(q, sp.Rational(1, 2)) < 0 and sp.expand(sp.diff(f, t, 2)) == 18 * q**2 - 24 * q  # concave for 0 < q <= 1


# --------------------------------------------------------------------------- sizes


@settings(max_examples=30)
@given(seeds, st.integers(2, 7), layer_norm_epsilons, st.sampled_from([1e-3, 0.1, 1.0, 10.0]))
def test_jacobian_spectral_norm(seed, d, eps, scale):
    x = random_point(seed, d, scale)
    rho = distance_from_uniform_line(x)
    numeric = torch.linalg.matrix_norm(layer_norm_jacobian(x, eps), ord=2)
    torch.testing.assert_close(layer_norm_jacobian_norm(d, rho, eps), numeric, rtol=1e-10, atol=rounding_tol(x, eps, 1))


@settings(max_examples=30)
@given(seeds, st.integers(2, 7), layer_norm_epsilons, st.sampled_from([1e-2, 0.1, 1.0, 10.0]))
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


@settings(max_examples=12)
@given(seeds, st.integers(2, 6), st.sampled_from([0.0, 1e-2, 0.3]), st.sampled_from([0.05, 0.3, 1.0, 5.0]))
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


@pytest.mark.parametrize("rho", [1e-3, 1.0, 10.0])
def test_sizes_blow_up_near_the_uniform_line(rho):
    """At eps = 0, measured on LN itself (torch.func) at a point at distance rho from the line R1:
    |J| = sqrt(d)/rho, |H|_F = sqrt(3 d (d - 2))/rho^2 and sup |H[h,h]| = 2 sqrt(d)/(sqrt(3) rho^2)."""
    d = 5
    rng = np.random.default_rng(0)
    v = rng.normal(size=d)
    v -= v.mean()
    x = torch.as_tensor(v / np.linalg.norm(v) * rho + 0.7)
    J = torch.func.jacrev(lambda u: layer_norm(u, 0.0))(x)
    H = torch.func.hessian(lambda u: layer_norm(u, 0.0))(x)
    assert float(torch.linalg.matrix_norm(J, ord=2)) == pytest.approx(math.sqrt(d) / rho, rel=1e-9)
    assert float(torch.linalg.norm(H)) == pytest.approx(math.sqrt(3 * d * (d - 2)) / rho**2, rel=1e-9)
    assert _max_quadratic_form(H.numpy(), 6, rng) == pytest.approx(2 * math.sqrt(d) / (math.sqrt(3) * rho**2), rel=1e-6)
    # the closed forms of lnbook.derivatives agree, and with eps > 0 everything stays bounded at rho = 0
    assert float(layer_norm_jacobian_norm(d, rho, 0.0)) == pytest.approx(math.sqrt(d) / rho, rel=1e-12)
    assert float(layer_norm_hessian_frobenius(d, rho, 0.0)) == pytest.approx(math.sqrt(3 * d * (d - 2)) / rho**2, rel=1e-12)
    assert float(layer_norm_jacobian_norm(d, 0.0, 1e-4)) == pytest.approx(100.0)
    assert float(layer_norm_hessian_norm(d, 0.0, 1e-4)) == 0.0


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
