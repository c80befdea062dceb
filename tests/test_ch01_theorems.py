"""Machine checks of chapter 1's statements (book/ch01_what_layernorm_computes.md).

Each test names the statement it checks. Exact checks use sympy at d = 3 (with eps a positive
symbol where the statement allows eps > 0); property tests check the same identities for larger d.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import positive_epsilons, randn, seeds, widths
from lnbook.derivatives import layer_norm_jacobian
from lnbook.norms import layer_norm, layer_norm_preimage, uniform_vector
from lnbook.symbolic_ln import symbolic_centering_matrix, symbolic_jacobian_formula, symbolic_layer_norm, symbols_vector

EPS = sp.Symbol("epsilon", positive=True)


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
    # the open ball: d - |LN_eps(x)|^2 = d^2 eps / (|Px|^2 + d eps), which is > 0 for every x
    gap = sp.factor(sp.simplify(3 - (ln.T * ln)[0, 0]))
    assert sp.simplify(gap - 9 * EPS / (s + 3 * EPS)) == 0
    s_sym = sp.Symbol("s", nonnegative=True)  # s = |Px|^2 >= 0
    assert (9 * EPS / (s_sym + 3 * EPS)).is_positive
    _, ln0 = symbolic_layer_norm(3, 0)
    assert sp.simplify((ln0.T * ln0)[0, 0]) == 3  # the circle of radius sqrt(3) in the plane sum(y) = 0


@settings(max_examples=50)
@given(seeds, widths(2, 64))
def test_output_on_sphere_radius_sqrt_d(seed, d):
    y = layer_norm(randn(8, d, seed=seed) * 5 + 2, eps=0.0)
    torch.testing.assert_close(y @ uniform_vector(d), torch.zeros(8, dtype=torch.float64), rtol=0, atol=1e-10)
    torch.testing.assert_close(y.norm(dim=-1), torch.full((8,), math.sqrt(d), dtype=torch.float64), rtol=1e-12, atol=0)


@settings(max_examples=60)
@given(seeds, widths(2, 16), positive_epsilons, st.floats(0.0, 0.999))
def test_image_of_ln_eps_is_the_open_ball(seed, d, eps, fraction):
    """prop-ln-sphere, eps > 0: every y orthogonal to 1 with |y| < sqrt(d) is LN_eps of some x (the explicit
    preimage t y of `layer_norm_preimage`), and no input reaches the sphere |y| = sqrt(d) or leaves 1-perp."""
    v = randn(d, seed=seed)
    v = v - v.mean()
    y = v / v.norm() * fraction * math.sqrt(d)  # a point of the open ball, radius fraction * sqrt(d)
    x = layer_norm_preimage(y, eps=eps)
    torch.testing.assert_close(layer_norm(x, eps=eps), y, rtol=1e-9, atol=1e-9)
    # inputs of every size map strictly inside the ball (|Px|^2 up to ~1e6 d eps, where float64 still resolves it)
    xs = randn(20, d, seed=seed + 1) * torch.logspace(-3, 3, 20, dtype=torch.float64)[:, None] * math.sqrt(eps)
    out = layer_norm(xs, eps=eps)
    assert bool((out.norm(dim=-1) < math.sqrt(d)).all())
    torch.testing.assert_close(out.sum(-1), torch.zeros(20, dtype=torch.float64), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="open ball"):
        layer_norm_preimage(_on_sphere(d), eps=eps)  # |y| = sqrt(d) (rounded up): not in the image


def _on_sphere(d: int) -> torch.Tensor:
    e = torch.zeros(d, dtype=torch.float64)
    e[0], e[1] = 1.0, -1.0
    return e * math.sqrt(d / 2) * (1 + 1e-12)


def test_float64_rounds_large_inputs_onto_the_sphere():
    """The float64 remark of prop-ln-sphere: once |Px|^2 exceeds d eps / eps_mach, |LN_eps(x)| rounds to sqrt(d)."""
    d, eps = 8, 1e-5
    x = randn(d, seed=3) * 1e9
    norm = float(layer_norm(x, eps=eps).norm())
    assert abs(norm - math.sqrt(d)) <= 4 * math.ulp(math.sqrt(d))  # exact arithmetic: sqrt(d) * (1 - ~1e-24)


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


@settings(max_examples=50)
@given(seeds, widths(2, 32), st.floats(1e-3, 1e3), st.floats(-1e3, 1e3))
def test_invariance_property(seed, d, a, b):
    x = randn(5, d, seed=seed)
    torch.testing.assert_close(layer_norm(a * x + b, eps=0.0), layer_norm(x, eps=0.0), rtol=1e-8, atol=1e-8)


# --- thm-ln-fibres: LN(x) = LN(y) iff y = a x + b 1 (a > 0); x = mean(x) 1 + std(x) LN(x)


@settings(max_examples=50)
@given(seeds, widths(2, 32))
def test_reconstruction_from_mean_std_and_ln(seed, d):
    x = randn(6, d, seed=seed) * 3 - 1
    mean = x.mean(-1, keepdim=True)
    std = x.std(-1, unbiased=False, keepdim=True)
    torch.testing.assert_close(mean + std * layer_norm(x, eps=0.0), x, rtol=1e-12, atol=1e-12)


def _exact_layer_norm_key(point) -> tuple:
    """LN(x) in exact arithmetic, from the definition (x - mu)/sqrt(var): the entries are sign(c_i) sqrt(c_i^2/var)
    with c_i = x_i - mu and var rational, so (sign(c_i), c_i^2/var) determines LN(x) exactly."""
    d = len(point)
    mu = Fraction(sum(point), d)
    c = [Fraction(v) - mu for v in point]
    var = sum(ci * ci for ci in c) / d
    return tuple(((ci > 0) - (ci < 0), ci * ci / var) for ci in c)


@pytest.mark.parametrize("d, values", [(3, range(-3, 4)), (4, range(0, 4)), (5, range(0, 3))])
def test_equal_outputs_only_on_fibres_exact_grid(d, values):
    """thm-ln-fibres part 2, the implication tested as stated: among all non-constant integer vectors of a grid,
    every pair with exactly equal outputs LN(x) = LN(y) (exact rational arithmetic) satisfies y = a x + b 1 with
    a > 0. Nothing is built inside a fibre: the grid is searched for coincidences, and they must be there."""
    groups: dict[tuple, list[tuple]] = {}
    for point in itertools.product(values, repeat=d):
        if len(set(point)) > 1:  # constant vectors are outside the domain of LN
            groups.setdefault(_exact_layer_norm_key(point), []).append(point)
    pairs = 0
    for members in groups.values():
        for x, y in itertools.combinations(members, 2):
            mx, my = Fraction(sum(x), d), Fraction(sum(y), d)
            px, py = [v - mx for v in x], [v - my for v in y]
            a = sum(p * q for p, q in zip(px, py)) / sum(p * p for p in px)
            b = my - a * mx
            assert a > 0 and all(yi == a * xi + b for xi, yi in zip(x, y)), (x, y)
            pairs += 1
    assert pairs > 50, f"only {pairs} pairs with equal outputs: the grid tests nothing"


def test_batchnorm_can_learn_the_identity_layernorm_cannot():
    """BatchNorm at inference normalises with fixed per-feature statistics, and its gain and bias are per
    feature: set once from the running statistics of training batches, it is the identity on fresh inputs it
    has never seen. LayerNorm with any gain and bias maps x and 2x + 5 to the same output, so even the best
    (least-squares) gain and bias leave one of the two at distance >= |x + 5| / 2 from its image."""
    bn = torch.nn.BatchNorm1d(5, eps=1e-5, momentum=None, dtype=torch.float64).train()  # cumulative averages
    with torch.no_grad():
        for k in range(10):
            bn(randn(64, 5, seed=k) * 2 + 3)
        bn.weight.copy_(torch.sqrt(bn.running_var + 1e-5))
        bn.bias.copy_(bn.running_mean)
        bn.eval()
        fresh = randn(200, 5, seed=99) * 40 - 7  # other data, far outside the training range
        torch.testing.assert_close(bn(fresh), fresh, rtol=1e-12, atol=1e-10)

    x = randn(64, 5, seed=7) * 2 + 3
    pair = 2 * x + 5
    batch = torch.cat([x, pair])
    ln = torch.nn.LayerNorm(5, eps=0.0, dtype=torch.float64)
    with torch.no_grad():
        normed = ln(batch)  # gain 1, bias 0 at construction: the plain LN
        # best per-feature gain and bias for the identity, by least squares on the whole batch
        A = torch.stack([normed, torch.ones_like(normed)], dim=-1).permute(1, 0, 2)  # (5, 128, 2)
        coef = torch.linalg.lstsq(A, batch.T.unsqueeze(-1)).solution.squeeze(-1)  # (5, 2)
        ln.weight.copy_(coef[:, 0])
        ln.bias.copy_(coef[:, 1])
        out = ln(batch)
    torch.testing.assert_close(out[:64], out[64:], rtol=1e-12, atol=1e-12)  # x and 2x + 5 are not told apart
    worst = torch.maximum((out[:64] - x).norm(dim=-1), (out[64:] - pair).norm(dim=-1))
    assert bool((worst >= (x + 5).norm(dim=-1) / 2 - 1e-9).all())
    assert float(worst.mean()) > 1.0


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


@settings(max_examples=40)
@given(seeds, widths(2, 24), st.sampled_from([0.0, 1e-5, 0.3]))
def test_jacobian_matches_autograd(seed, d, eps):
    x = randn(d, seed=seed) * 2
    auto = torch.func.jacrev(lambda v: layer_norm(v, eps=eps))(x)
    torch.testing.assert_close(layer_norm_jacobian(x, eps=eps), auto, rtol=1e-10, atol=1e-12)


@settings(max_examples=40)
@given(seeds, widths(3, 24), st.sampled_from([0.0, 1e-3, 0.3]))
def test_jacobian_eigenstructure(seed, d, eps):
    """The eigenstructure of thm-ln-jacobian, read off the Jacobian of LN itself (torch.func.jacrev), not off
    the closed form: symmetric, J 1 = 0, J z = sqrt(d) d eps / r^3 z, J v = sqrt(d)/r v for v orthogonal to 1, z,
    and spectral norm sqrt(d)/r."""
    x = randn(d, seed=seed) * 2 + 1
    J = torch.func.jacrev(lambda v: layer_norm(v, eps=eps))(x)
    z = x - x.mean()
    r = torch.sqrt(z @ z + d * eps)
    torch.testing.assert_close(J, J.T, rtol=0, atol=1e-12)
    torch.testing.assert_close(J @ uniform_vector(d), torch.zeros(d, dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(J @ z, math.sqrt(d) * d * eps / r**3 * z, rtol=1e-9, atol=1e-12)
    v = randn(d, seed=seed + 1)
    v = v - v.mean()
    v = v - (v @ z) / (z @ z) * z  # v orthogonal to 1 and z
    torch.testing.assert_close(J @ v, math.sqrt(d) / r * v, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(torch.linalg.matrix_norm(J, ord=2), math.sqrt(d) / r, rtol=1e-9, atol=0)


def test_symbolic_helpers_reject_bad_d():
    with pytest.raises(ValueError, match="d must be >= 2"):
        symbols_vector(1)
