"""Tests of :mod:`lnbook.core.symbolic`.

Machine checks of chapter 1's statements (book/ch01_what_layernorm_computes.md).

Each test names the statement it checks. Exact checks use sympy at d = 3 (with eps a positive
symbol where the statement allows eps > 0); property tests check the same identities for larger d.

Tests of lnbook.core.derivatives: LN's closed-form Jacobian and Hessian, and their sizes.
"""

from __future__ import annotations

import pytest
import sympy as sp

from lnbook.core.symbolic import (
    symbolic_centering_matrix,
    symbolic_jacobian_formula,
    symbolic_layer_norm,
    symbols_vector,
)

EPS = sp.Symbol("epsilon", positive=True)


def is_zero(expr) -> bool:
    return all(sp.simplify(e) == 0 for e in sp.Matrix(expr))


@pytest.mark.parametrize("eps", [0, EPS])
def test_decomposition_exact_d3(eps):
    x, ln = symbolic_layer_norm(3, eps)
    z = symbolic_centering_matrix(3) * x
    assert is_zero(ln - sp.sqrt(3) * z / sp.sqrt((z.T * z)[0, 0] + 3 * eps))


def test_centering_matrix_is_the_orthogonal_projector_killing_one():
    P = symbolic_centering_matrix(4)
    assert P * P == P and P.T == P and P * sp.ones(4, 1) == sp.zeros(4, 1) and P.rank() == 3


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


@pytest.mark.parametrize("eps", [0, EPS])
def test_jacobian_formula_exact_d3(eps):
    x, ln = symbolic_layer_norm(3, eps)
    assert is_zero(ln.jacobian(x) - symbolic_jacobian_formula(x, eps))


def test_symbolic_helpers_reject_bad_d():
    with pytest.raises(ValueError, match="d must be >= 2"):
        symbols_vector(1)


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
        # H_ijk = d^2 LN_i / dx_j dx_k: each first derivative once, then the second ones for k >= j (mixed partials
        # of the smooth LN agree), at the rational point; the same entries as sp.diff(ln[i], x[j], x[k]), a quarter
        # of the differentiations at d = 4
        H = [[[None] * d for _ in range(d)] for _ in range(d)]
        for i in range(d):
            for j in range(d):
                first = sp.diff(ln[i], x[j])
                for k in range(j, d):
                    H[i][j][k] = H[i][k][j] = sp.diff(first, x[k]).subs(at)
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
