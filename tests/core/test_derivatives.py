"""Tests of :mod:`lnbook.core.derivatives`.

Machine checks of chapter 1's statements (book/ch01_what_layernorm_computes.md).

Each test names the statement it checks. Exact checks use sympy at d = 3 (with eps a positive
symbol where the statement allows eps > 0); property tests check the same identities for larger d.

Tests of lnbook.core.derivatives: LN's closed-form Jacobian and Hessian, and their sizes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from lnbook.core.derivatives import (
    distance_from_uniform_line,
    layer_norm_hessian,
    layer_norm_hessian_frobenius,
    layer_norm_hessian_norm,
    layer_norm_jacobian,
    layer_norm_jacobian_norm,
)
from lnbook.core.norms import layer_norm
from tests.strategies import (
    layer_norm_epsilons,
    randn,
    random_point,
    rounding_tol,
    seeds,
    widths,
)


def _max_quadratic_form(H: np.ndarray, starts: int, rng) -> float:
    """max over unit h of |H[h, h]|, by BFGS on -|H[h,h]|^2 / |h|^4 with its exact gradient (H symmetric in j, k)."""
    d = H.shape[-1]

    def neg_and_grad(h):
        n2 = h @ h
        v = np.einsum("ijk,j,k->i", H, h, h)
        g = np.einsum("i,ijk,k->j", v, H, h)  # the gradient of |H[h,h]|^2 is 4 g
        value = (v @ v) / n2**2
        return -value, -(4 * g / n2**2 - 4 * value * h / n2)

    def best(h0):
        res = minimize(neg_and_grad, h0, jac=True, method="BFGS", options={"gtol": 1e-13, "maxiter": 2000})
        return math.sqrt(max(-res.fun, 0.0))

    return max(best(rng.normal(size=d)) for _ in range(starts))


@settings(max_examples=40)
@given(seeds, widths(2, 24), st.sampled_from([0.0, 1e-5, 0.3]))
def test_jacobian_matches_autograd(seed, d, eps):
    x = randn(d, seed=seed) * 2
    auto = torch.func.jacrev(lambda v: layer_norm(v, eps=eps))(x)
    torch.testing.assert_close(layer_norm_jacobian(x, eps=eps), auto, rtol=1e-10, atol=1e-12)


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


def test_second_order_taylor_expansion():
    """LN(x + t h) - LN(x) - t J h - t^2/2 H[h, h] shrinks like t^3."""
    x, h = random_point(1, 6), random_point(2, 6) - 3.0
    J, H = layer_norm_jacobian(x, 1e-2), layer_norm_hessian(x, 1e-2)
    errors = []
    for t in (1e-1, 1e-2):
        rest = layer_norm(x + t * h, 1e-2) - layer_norm(x, 1e-2) - t * J @ h - 0.5 * t**2 * torch.einsum("ijk,j,k->i", H, h, h)
        errors.append(float(rest.norm()))
    assert 500 < errors[0] / errors[1] < 2000  # ratio 10^3 for a cubic remainder


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


@settings(max_examples=12)
@given(seeds, st.integers(2, 6), st.sampled_from([0.0, 1e-2, 0.3]), st.sampled_from([0.05, 0.3, 1.0, 5.0]))
def test_hessian_quadratic_norm_by_direct_maximisation(seed, d, eps, scale):
    """sup_{|h|=1} |H[h,h]| found by BFGS from 6 starts (3 at d <= 3) equals the closed form (rel. 1e-6) and never exceeds it."""
    x = random_point(seed, d, scale)
    H = layer_norm_hessian(x, eps).numpy()
    rho = distance_from_uniform_line(x)
    closed = float(layer_norm_hessian_norm(d, rho, eps))
    atol = rounding_tol(x, eps, 2)
    rng = np.random.default_rng(seed)
    found = _max_quadratic_form(H, 3 if d <= 3 else 6, rng)  # the unit sphere of 1-perp is a point pair or a circle at d <= 3
    assert found <= closed * (1 + 1e-9) + atol
    assert found == pytest.approx(closed, rel=1e-6, abs=atol)


def _point_at_distance_ratio(d: int, ratio: float, eps: float, rng) -> torch.Tensor:
    """A float64 point off the uniform line with rho^2 = ratio * d * eps (shifted along 1 by 1.5)."""
    v = rng.normal(size=d)
    v -= v.mean()
    return torch.as_tensor(v / np.linalg.norm(v) * math.sqrt(ratio * d * eps) + 1.5)


@pytest.mark.parametrize("ratio", [0.1, 0.3, 0.45, 0.55, 0.75, 1.5, 4.0])
@pytest.mark.parametrize("d", [3, 5])
def test_hessian_quadratic_norm_on_both_sides_of_the_switch(ratio, d):
    """Points with rho^2 = ratio * d * eps on both sides of the switch rho^2 = d eps / 2 (rel. 1e-6)."""
    eps = 0.1
    rng = np.random.default_rng(d)
    x = _point_at_distance_ratio(d, ratio, eps, rng)
    closed = float(layer_norm_hessian_norm(d, distance_from_uniform_line(x), eps))
    found = _max_quadratic_form(layer_norm_hessian(x, eps).numpy(), 6, rng)
    assert found == pytest.approx(closed, rel=1e-6)


@pytest.mark.parametrize("ratio", [0.6, 1.5, 20.0])
@pytest.mark.parametrize("d", [3, 6])
def test_second_to_first_order_ratio(ratio, d):
    """d >= 3, rho^2 >= d eps / 2: max |H[h,h]|/2 over max |Jh| (unit h) is 1/(sqrt(3) r), here from F.layer_norm."""
    eps = 0.1
    rng = np.random.default_rng(d)
    x = _point_at_distance_ratio(d, ratio, eps, rng)
    ln = lambda u: torch.nn.functional.layer_norm(u, (d,), eps=eps)  # noqa: E731
    second = 0.5 * _max_quadratic_form(torch.func.hessian(ln)(x).numpy(), 6, rng)
    first = float(torch.linalg.matrix_norm(torch.func.jacrev(ln)(x), ord=2))
    r = math.sqrt((ratio + 1) * d * eps)
    assert second / first == pytest.approx(1 / (math.sqrt(3) * r), rel=1e-6)


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
    # the closed forms of lnbook.core.derivatives agree, and with eps > 0 everything stays bounded at rho = 0
    assert float(layer_norm_jacobian_norm(d, rho, 0.0)) == pytest.approx(math.sqrt(d) / rho, rel=1e-12)
    assert float(layer_norm_hessian_frobenius(d, rho, 0.0)) == pytest.approx(math.sqrt(3 * d * (d - 2)) / rho**2, rel=1e-12)
    assert float(layer_norm_jacobian_norm(d, 0.0, 1e-4)) == pytest.approx(100.0)
    assert float(layer_norm_hessian_norm(d, 0.0, 1e-4)) == 0.0


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


@pytest.mark.parametrize("scale", [1e-300, 1e-170, 1e-160, 1e-100, 1e-20, 1.0, 1e20, 1e100, 1e160, 1e200, 1e300])
def test_derivatives_at_huge_and_tiny_inputs(scale):
    """J(c x) = J(x) / c and H(c x) = H(x) / c^2 at eps = 0 (LN is homogeneous of degree 0) for c from 1e-300 to 1e300:
    the formulas are evaluated in units of max|Px| (squaring Px itself underflowed below 1e-154, calling x = (1, 2, 4)
    * 1e-170 constant and returning a relative error of 9e-5 at 1e-160, and overflowed to NaN above 1e154). A Hessian
    whose entries exceed the float64 range raises; one below it underflows to 0. eps > 0: J_eps(c x) = J_{eps/c^2}(x) / c."""
    x = torch.tensor([[1.0, 2.0, 4.0], [0.3, -1.1, 0.8]], dtype=torch.float64)
    J1, H1 = layer_norm_jacobian(x, 0.0), layer_norm_hessian(x, 0.0)
    torch.testing.assert_close(layer_norm_jacobian(scale * x, 0.0) * scale, J1, rtol=1e-14, atol=1e-14)
    if 1e-150 <= scale <= 1e150:
        torch.testing.assert_close(layer_norm_hessian(scale * x, 0.0) * scale * scale, H1, rtol=1e-13, atol=1e-13)
    elif scale < 1e-150:  # entries of order 1/c^2 > 1e300: not representable, so refused
        with pytest.raises(ValueError, match="exceeds the float64 range"):
            layer_norm_hessian(scale * x, 0.0)
    else:  # entries of order 1/c^2 < 1e-300: 0 or subnormal, never NaN
        H = layer_norm_hessian(scale * x, 0.0)
        assert torch.isfinite(H).all() and float(H.abs().max()) < 1e-300
    P = torch.eye(3, dtype=torch.float64) - 1.0 / 3
    for eps in (1e-5, 0.3):
        J = layer_norm_jacobian(scale * x, eps)
        if scale <= 1e-20:  # |c Px|^2 << eps: J -> P / sqrt(eps)
            torch.testing.assert_close(J, (P / math.sqrt(eps)).expand(2, 3, 3), rtol=1e-13, atol=0)
        elif scale >= 1e20:  # eps / c^2 is negligible: J -> J_0(x) / c
            torch.testing.assert_close(J * scale, J1, rtol=1e-13, atol=1e-13)
        else:
            torch.testing.assert_close(J * scale, layer_norm_jacobian(x, eps / scale**2), rtol=1e-13, atol=1e-13)
    # vmap (no data-dependent control flow on the traced path) gives the same values
    torch.testing.assert_close(torch.func.vmap(lambda v: layer_norm_jacobian(v, 0.0))(scale * x) * scale, J1,
                               rtol=1e-14, atol=1e-14)
