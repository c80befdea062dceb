"""Tests of :mod:`lnbook.core.scatter_ratio`: SSR, its invariances, LSSR's closed form, the linear bound, conventions,
errors, float64 resolution. (The XOR counterexample network and random linear nets are tested with
:mod:`lnbook.separability.ln_nets`, in ``tests/separability/test_ln_nets.py``.)
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import eigh as generalized_eigh
from scipy.optimize import minimize
from scipy.stats import ortho_group

from lnbook.core.norms import LayerNorm
from lnbook.core.scatter_ratio import (
    default_rtol,
    layer_norm_rtol,
    lssr,
    lssr_direction,
    scatter_matrices,
    ssr,
    ssr_from_onehot,
    ssr_loss,
    symbolic_ssr,
)
from tests.strategies import seeds


def xor_dataset():
    """XOR on four points (as chapter 2's lnbook.separability.ln_nets.xor_dataset): both class means are 0."""
    X = torch.tensor([[1.0, 1.0], [-1.0, -1.0], [1.0, -1.0], [-1.0, 1.0]], dtype=torch.float64)
    return X, torch.tensor([0, 0, 1, 1])


def random_problem(seed: int, m: int | None = None, d: int | None = None, k: int | None = None):
    """Gaussian samples with class-dependent means (so that LSSR is neither 0 nor 1)."""
    rng = np.random.default_rng(seed)
    k = k or int(rng.integers(2, 5))
    d = d or int(rng.integers(1, 6))
    m = m or int(rng.integers(k + d + 2, 40))
    y = np.concatenate([np.arange(k), rng.integers(0, k, m - k)])
    rng.shuffle(y)
    centres = rng.normal(size=(k, d))
    X = centres[y] + rng.normal(size=(m, d)) * rng.uniform(0.3, 3.0, size=d)
    return X, y


def test_xor_lssr_is_exactly_one():
    """Both class means are 0, so S_b = 0, S_w = S_t and every direction has Rayleigh quotient 1."""
    X, y = xor_dataset()
    pts, labels = [sp.Matrix([int(a), int(b)]) for a, b in X.tolist()], y.tolist()
    for c in (0, 1):
        cls = [p for p, lab in zip(pts, labels) if lab == c]
        assert sum(cls, sp.zeros(2, 1)) == sp.zeros(2, 1)
    w1, w2 = sp.symbols("w1 w2", real=True)
    w = sp.Matrix([[w1, w2]])
    assert symbolic_ssr([w * p for p in pts], labels) == 1  # any nonzero 1-D projection (symbolic w)


def test_exercise_width_two_layer_norm_on_xor():
    """Exercise ex-ch2-width-two: with d = 2 and eps = 0, LN(h) = sign(h_1 - h_2)(1, -1); the best SSR that one
    Linear(2, 2) -> LN layer reaches on XOR is 2/3 (over every sign pattern a line can cut out), attained by
    h = (x_1 + x_2 + 1, 0)."""
    X, y = xor_dataset()
    h = torch.stack([X[:, 0] + X[:, 1] + 1, torch.zeros(4, dtype=torch.float64)], dim=1)
    out = LayerNorm(0.0)(h)
    assert ssr(out, y) == pytest.approx(2 / 3, abs=1e-14)
    best = 1.0
    for pattern in itertools.product((-1.0, 1.0), repeat=4):
        if pattern in [(1.0, 1.0, -1.0, -1.0), (-1.0, -1.0, 1.0, 1.0)]:
            continue  # the XOR labelling itself: no line cuts it out
        pts = torch.tensor(pattern, dtype=torch.float64)[:, None] * torch.tensor([[1.0, -1.0]], dtype=torch.float64)
        best = min(best, ssr(pts, y))
    assert best == pytest.approx(2 / 3, abs=1e-14)


def test_ssr_hand_example():
    # class 0: 0 and 2 (mean 1, within 2); class 1: 10 (within 0); grand mean 4, total 16 + 4 + 36 = 56
    X = np.array([[0.0], [2.0], [10.0]])
    assert ssr(X, [0, 0, 1]) == pytest.approx(2 / 56, abs=1e-15)


@settings(max_examples=40)
@given(seeds)
def test_ssr_in_unit_interval_and_scatter_decomposition(seed):
    X, y = random_problem(seed)
    value = ssr(X, y)
    assert 0.0 <= value <= 1.0
    S_w, S_b, S_t = scatter_matrices(X, y)
    np.testing.assert_allclose(S_w + S_b, S_t, atol=1e-10 * np.abs(S_t).max())
    assert value == pytest.approx(np.trace(S_w) / np.trace(S_t), rel=1e-12)


def test_ssr_extremes():
    X = np.array([[1.0, 2.0], [1.0, 2.0], [5.0, -1.0]])
    assert ssr(X, [0, 0, 1]) == 0.0  # each class one point
    Y = np.array([[1.0], [-1.0], [2.0], [-2.0]])
    assert ssr(Y, [0, 0, 1, 1]) == pytest.approx(1.0, abs=1e-15)  # equal class means


@settings(max_examples=40)
@given(seeds, st.floats(-5, 5).filter(lambda c: abs(c) > 1e-3))
def test_ssr_invariances_numeric(seed, c):
    """Translation, nonzero scaling and orthogonal maps leave SSR unchanged (rel. 1e-10)."""
    X, y = random_problem(seed)
    rng = np.random.default_rng(seed + 1)
    d = X.shape[1]
    Q = ortho_group.rvs(d, random_state=seed) if d > 1 else np.array([[-1.0]])
    base = ssr(X, y)
    assert ssr(X + rng.normal(size=d) * 10, y) == pytest.approx(base, rel=1e-10)
    assert ssr(c * X, y) == pytest.approx(base, rel=1e-10)
    assert ssr(X @ Q.T, y) == pytest.approx(base, rel=1e-10)
    # relabelling the classes changes nothing either
    assert ssr(X, (y + 1) % (y.max() + 1) + 7) == pytest.approx(base, rel=1e-12)


def test_ssr_invariances_sympy():
    """Exact: SSR(QX + b) = SSR(X) and SSR(cX) = SSR(X) for symbolic b, c != 0 and rotation angle t."""
    a = sp.symbols("a0:6", real=True)
    b1, b2, t = sp.symbols("b1 b2 t", real=True)
    c = sp.symbols("c", nonzero=True, real=True)
    pts = [sp.Matrix([a[0], a[1]]), sp.Matrix([a[2], a[3]]), sp.Matrix([a[4], 0]), sp.Matrix([1, 2])]
    labels = [0, 0, 1, 1]
    base = symbolic_ssr(pts, labels)
    Q = sp.Matrix([[sp.cos(t), -sp.sin(t)], [sp.sin(t), sp.cos(t)]])
    shift = sp.Matrix([b1, b2])
    moved = symbolic_ssr([Q * p + shift for p in pts], labels)
    scaled = symbolic_ssr([c * p for p in pts], labels)
    assert sp.simplify(moved - base) == 0
    assert sp.simplify(scaled - base) == 0


def test_ssr_not_invariant_under_general_linear_maps():
    """Why LSSR is needed: an anisotropic scaling changes SSR (the classes differ along x only)."""
    X = np.array([[0.0, 0.0], [0.0, 3.0], [1.0, 0.0], [1.0, 3.0]])
    y = [0, 0, 1, 1]
    A = np.diag([1.0, 0.1])
    assert ssr(X, y) == pytest.approx(9 / 10)
    assert ssr(X @ A.T, y) == pytest.approx(0.09 / 1.09)


@settings(max_examples=40)
@given(seeds)
def test_lssr_is_smallest_generalised_eigenvalue(seed):
    X, y = random_problem(seed)
    S_w, _, S_t = scatter_matrices(X, y)
    lam = generalized_eigh(S_w, S_t, eigvals_only=True)[0]  # S_t is full rank for these samples
    assert lssr(X, y) == pytest.approx(lam, abs=1e-10)


@settings(max_examples=15)
@given(seeds)
def test_lssr_equals_direct_minimisation_over_linear_maps(seed):
    """min over A (2 x d matrices, BFGS from 5 random starts) of SSR(X A^T) equals lssr to 1e-6."""
    X, y = random_problem(seed, m=30)
    d = X.shape[1]
    rng = np.random.default_rng(seed)
    best = np.inf
    for _ in range(5):
        res = minimize(lambda a: ssr(X @ a.reshape(2, d).T, y), rng.normal(size=2 * d), method="BFGS", tol=1e-12)
        best = min(best, res.fun)
    target = lssr(X, y)
    assert best >= target - 1e-10  # nothing linear beats it
    assert best == pytest.approx(target, abs=1e-6)  # and it is reached


@settings(max_examples=40)
@given(seeds, st.integers(1, 6), st.booleans())
def test_ssr_of_any_affine_map_is_at_least_lssr(seed, d_out, rank_deficient):
    X, y = random_problem(seed)
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d_out, X.shape[1]))
    if rank_deficient and d_out > 1:
        A[-1] = A[0] * 2.5
    Z = X @ A.T + rng.normal(size=d_out)
    assert ssr(Z, y) >= lssr(X, y) - 1e-10


@settings(max_examples=30)
@given(seeds, st.integers(1, 6))
def test_linear_maps_never_lower_lssr(seed, d_out):
    """LSSR(XA^T) >= LSSR(X) for every A, with equality for invertible A (and any translation)."""
    X, y = random_problem(seed)
    rng = np.random.default_rng(seed)
    d = X.shape[1]
    assert lssr(X @ rng.normal(size=(d_out, d)).T, y) >= lssr(X, y) - 1e-9
    B = rng.normal(size=(d, d)) + 3 * np.eye(d)
    assert lssr(X @ B.T + rng.normal(size=d), y) == pytest.approx(lssr(X, y), abs=1e-9)


@settings(max_examples=40)
@given(seeds)
def test_direction_attains_lssr(seed):
    X, y = random_problem(seed)
    w = lssr_direction(X, y)
    assert np.linalg.norm(w) == pytest.approx(1.0)
    assert ssr(X @ w, y) == pytest.approx(lssr(X, y), abs=1e-10)


@settings(max_examples=30)
@given(seeds)
def test_two_class_fisher_closed_form(seed):
    """k = 2: LSSR = 1 - (n0 n1 / m) delta^T S_t^+ delta, direction parallel to S_t^+ delta."""
    X, y = random_problem(seed, k=2)
    S_w, S_b, S_t = scatter_matrices(X, y)
    n0, n1 = np.sum(y == 0), np.sum(y == 1)
    delta = X[y == 1].mean(0) - X[y == 0].mean(0)
    fisher = np.linalg.pinv(S_t) @ delta
    assert lssr(X, y) == pytest.approx(1 - n0 * n1 / len(y) * delta @ fisher, abs=1e-10)
    w = lssr_direction(X, y)
    assert abs(w @ fisher) / np.linalg.norm(fisher) == pytest.approx(1.0, abs=1e-8)


def test_lssr_closed_form_sympy_exact():
    """Exact rationals, 3 classes in R^2: the smallest root of det(S_w - lam S_t) equals lssr (1e-12),
    S_w - lam_min S_t is positive semidefinite (the key step of the proof), and the rank-one map
    w^T x with the exact eigenvector has SSR exactly lam_min."""
    pts = [(0, 0), (1, 2), (3, 1), (4, 4), (2, -1), (5, 0), (1, 3)]
    labels = [0, 0, 1, 1, 2, 2, 0]
    Xs = [sp.Matrix(p) for p in pts]
    mu = sum(Xs, sp.zeros(2, 1)) / len(Xs)
    S_t = sum(((p - mu) * (p - mu).T for p in Xs), sp.zeros(2, 2))
    S_w = sp.zeros(2, 2)
    for c in set(labels):
        cls = [p for p, lab in zip(Xs, labels) if lab == c]
        mc = sum(cls, sp.zeros(2, 1)) / len(cls)
        S_w += sum(((p - mc) * (p - mc).T for p in cls), sp.zeros(2, 2))
    lam = sp.symbols("lam")
    roots = sp.solve(sp.Eq((S_w - lam * S_t).det(), 0), lam)
    lam_min = min(roots, key=lambda r: float(r))
    X = np.array(pts, dtype=float)
    assert float(lam_min) == pytest.approx(lssr(X, labels), abs=1e-12)
    assert all(sp.simplify(ev) >= 0 for ev in (S_w - lam_min * S_t).eigenvals())
    w = (S_w - lam_min * S_t).nullspace()[0]
    exact = symbolic_ssr([w.T * p for p in Xs], labels)
    assert sp.simplify(exact - lam_min) == 0


def test_single_point_class():
    X, y = random_problem(3, m=20, d=3, k=3)
    y = y.copy()
    y[y == 2] = 1
    y[0] = 2  # class 2 has exactly one sample
    value = lssr(X, y)
    S_w, _, S_t = scatter_matrices(X, y)
    assert value == pytest.approx(generalized_eigh(S_w, S_t, eigvals_only=True)[0], abs=1e-10)
    assert 0.0 <= ssr(X, y) <= 1.0


def test_rank_deficient_total_scatter_duplicate_feature():
    """A repeated (or linearly dependent) feature adds no direction: LSSR unchanged, direction still attains it."""
    X, y = random_problem(5, m=25, d=3)
    Xd = np.column_stack([X, X[:, 0] - 2 * X[:, 1]])
    assert lssr(Xd, y) == pytest.approx(lssr(X, y), abs=1e-9)
    assert ssr(Xd @ lssr_direction(Xd, y), y) == pytest.approx(lssr(Xd, y), abs=1e-9)
    # optimal maps need not be rank one: rows in the optimal eigenspace plus the kernel of S_t also attain it
    w = lssr_direction(Xd, y)
    kernel = np.array([-1.0, 2.0, 0.0, 1.0])  # Xd @ kernel is constant (the dependent feature)
    A = np.stack([w, 2 * w + kernel, -w])
    assert ssr(Xd @ A.T, y) == pytest.approx(lssr(Xd, y), abs=1e-9)
    # ... provided at least one row lies outside the kernel: rows all in ker S_t map every sample to one point (SSR 1)
    assert ssr(Xd @ np.stack([kernel, -2 * kernel]).T, y) == 1.0
    # ... while a row outside that eigenspace makes it worse
    assert ssr(Xd @ np.stack([w, np.eye(4)[2]]).T, y) > lssr(Xd, y) + 1e-6


def test_more_features_than_samples_gives_zero_lssr():
    """m points in general position in R^d with d >= m - 1: some affine map collapses each class, LSSR = 0."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6, 8))
    y = np.array([0, 1, 0, 1, 2, 2])
    assert lssr(X, y) == pytest.approx(0.0, abs=1e-9)
    assert ssr(X @ lssr_direction(X, y), y) == pytest.approx(0.0, abs=1e-9)


def test_all_samples_equal_convention():
    X = np.ones((4, 3))
    y = [0, 1, 0, 1]
    assert ssr(X, y) == 1.0
    assert lssr(X, y) == 1.0
    np.testing.assert_array_equal(lssr_direction(X, y), [1.0, 0.0, 0.0])


def test_torch_and_numpy_agree_and_direction_type():
    X, y = random_problem(7)
    Xt, yt = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y)
    assert ssr(Xt, yt) == pytest.approx(ssr(X.astype(np.float32), y), rel=1e-12)
    assert lssr(torch.as_tensor(X), yt) == lssr(X, y)
    w = lssr_direction(torch.as_tensor(X), yt)
    assert isinstance(w, torch.Tensor) and w.dtype == torch.float64
    assert isinstance(lssr_direction(X, y), np.ndarray)


def test_ssr_loss_matches_ssr_and_has_gradients():
    X, y = random_problem(11)
    Z = torch.as_tensor(X).requires_grad_(True)
    loss = ssr_loss(Z, torch.as_tensor(y))
    assert float(loss.detach()) == pytest.approx(ssr(X, y), rel=1e-12)
    loss.backward()
    assert torch.isfinite(Z.grad).all() and Z.grad.abs().sum() > 0
    onehot = torch.nn.functional.one_hot(torch.as_tensor(y)).double()
    assert float(ssr_from_onehot(torch.as_tensor(X), onehot)) == pytest.approx(ssr(X, y), rel=1e-12)


@pytest.mark.parametrize("fn", [ssr, lssr, lssr_direction, scatter_matrices])
def test_error_paths(fn):
    X = np.arange(8.0).reshape(4, 2)
    with pytest.raises(ValueError, match="only one class"):
        fn(X, [3, 3, 3, 3])
    with pytest.raises(ValueError, match=r"class\(es\) \[1\] have no samples"):
        fn(X, [0, 0, 2, 2], num_classes=3)
    with pytest.raises(ValueError, match="same length"):
        fn(X, [0, 1, 0])
    bad = X.copy()
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        fn(bad, [0, 1, 0, 1])
    with pytest.raises(ValueError, match="non-finite"):
        fn(torch.tensor([[0.0, float("inf")], [1.0, 2.0]]), [0, 1])
    with pytest.raises(ValueError, match="must be integers"):
        fn(X, [0.0, 1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="must be integers"):
        fn(X, torch.tensor([0.5, 1.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match="must lie in 0..1"):
        fn(X, [0, 1, 2, 1], num_classes=2)
    with pytest.raises(ValueError, match="shape"):
        fn(np.zeros((2, 2, 2)), [0, 1])
    with pytest.raises(ValueError, match="no samples"):
        fn(np.zeros((0, 2)), np.zeros(0, dtype=int))


def test_ssr_loss_errors():
    Z = torch.zeros(4, 2)
    with pytest.raises(ValueError, match="integer"):
        ssr_loss(Z, torch.tensor([0.0, 1.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match="shape"):
        ssr_loss(Z, torch.tensor([0, 1, 0]))
    with pytest.raises(TypeError, match="floating-point"):
        ssr_loss(torch.zeros(4, 2, dtype=torch.long), torch.tensor([0, 1, 0, 1]))


# --- float64: tolerances that scale with the data, scale invariance (issue 24)


def test_one_fibre_after_layer_norm_has_ssr_and_lssr_one():
    """thm-ln-fibres: the points a v + b 1 (a > 0) form one fibre of LN_0, so their images are one point in exact
    arithmetic and SSR = LSSR = 1 (the convention for equal samples). In float64 the images differ by rounding
    (amplified by |h| / |Ph|); ssr and lssr must see equal samples, not the ratio of two rounding errors."""
    v = torch.tensor([0.3, -1.1, 0.8], dtype=torch.float64)
    fibre = torch.stack([a * v + b for a, b in [(1.0, 0.0), (3.7, 5.0), (0.01, -2.0), (250.0, 1e3)]])
    Z = LayerNorm(0.0)(fibre)
    assert float((Z - Z[0]).abs().max()) > 0  # the rounding is there
    y = [0, 0, 1, 1]
    assert ssr(Z, y) == 1.0 and lssr(Z, y) == 1.0
    assert ssr(Z, y, rtol=0.0) < 0.9  # the raw ratio of rounding errors, what the old tolerance returned


def test_xor_through_random_width_two_layers_gives_the_exact_ssr():
    """ex-ch2-width-two: Linear(2, 2) -> LN_0 maps XOR to sign(h_1 - h_2)(1, -1), so the exact SSR (and LSSR) of
    the image is 1, or 2/3 when the line cuts off one or three corners. 20 000 layers drawn as torch initialises
    Linear(2, 2). In float64 LN's outputs carry rounding of up to about d eps_mach max|h| / ||Ph|| (chapter 1's
    float64 paragraph), amplified by the condition max|h| / ||Ph|| (up to 7e4 here). With that error bound as the
    resolution (rtol = 16 d eps_mach * condition) ssr and lssr give the exact value on the 400 worst-conditioned draws
    and 200 others; with the default resolution (the rounding of the data themselves, 2**8 eps_mach) they give it on
    every draw whose bound is below the default, and on some of the worst draws they do not: no rule that sees only
    the data can tell amplified rounding from a genuine spread, so the caller passes the bound."""
    X, y = xor_dataset()
    g = torch.Generator().manual_seed(0)
    n, bound, d, u = 20_000, 2**-0.5, 2, float(np.finfo(np.float64).eps)
    W = (2 * torch.rand(n, 2, 2, generator=g, dtype=torch.float64) - 1) * bound
    b = (2 * torch.rand(n, 1, 2, generator=g, dtype=torch.float64) - 1) * bound
    H = torch.einsum("ij,nkj->nik", X, W) + b
    Z = LayerNorm(0.0)(H)
    positive = (H[..., 0] > H[..., 1]).sum(dim=1)
    exact = np.where(((positive == 1) | (positive == 3)).numpy(), 2 / 3, 1.0)
    condition = (H.abs().amax(dim=-1) / (H - H.mean(dim=-1, keepdim=True)).norm(dim=-1)).amax(dim=1)
    worst = condition.argsort(descending=True)[:400]
    picked = torch.cat([worst, torch.arange(0, n, n // 200)]).tolist()
    assert {1.0, 2 / 3} <= set(exact[picked].tolist())
    for i in picked:
        rtol = layer_norm_rtol(H[i])
        assert rtol == pytest.approx(max(default_rtol(torch.float64), 16 * d * u * float(condition[i])), rel=1e-6)
        assert ssr(Z[i], y, rtol=rtol) == pytest.approx(exact[i], abs=1e-12), i
        assert lssr(Z[i], y, rtol=rtol) == pytest.approx(exact[i], abs=1e-12), i
        if rtol <= default_rtol(torch.float64):
            assert ssr(Z[i], y) == pytest.approx(exact[i], abs=1e-12), i
            assert lssr(Z[i], y) == pytest.approx(exact[i], abs=1e-12), i
    assert sum(abs(ssr(Z[i], y) - exact[i]) > 1e-6 for i in worst.tolist()) > 0  # the documented limit


def test_layer_norm_rtol_on_a_moderately_conditioned_xor_layer():
    """Referee's reproducer (issue 24): a Linear(2, 2) layer, 1 in ~5000 Gaussian draws, puts one XOR point at
    condition max|h| / ||Ph|| ~ 3.3e3, where LN_0's rounding (~3e-13) exceeds the default resolution. All four
    points have h_1 < h_2, so LN maps them to (-1, 1) and the exact SSR and LSSR are 1; the default resolution
    gives 2/3 on our layer_norm's outputs, the resolution from layer_norm_rtol gives 1 on ours and on PyTorch's."""
    X, y = xor_dataset()
    W = torch.tensor([[-0.72732, 1.20192], [-0.41049, 0.18226]], dtype=torch.float64)
    H = X @ W.T + torch.tensor([-1.04811, 0.28876], dtype=torch.float64)
    assert bool((H[:, 0] < H[:, 1]).all())  # one side of the line: the exact image is one point
    rtol = layer_norm_rtol(H)
    Z = LayerNorm(0.0)(H)
    assert ssr(Z, y) < 0.7 and lssr(Z, y) < 0.7  # the documented limit of the default resolution
    for Z in (Z, torch.nn.functional.layer_norm(H, (2,), eps=0.0)):
        assert ssr(Z, y, rtol=rtol) == 1.0 and lssr(Z, y, rtol=rtol) == 1.0
    assert layer_norm_rtol(H, eps=1e-5) < rtol  # eps > 0 bounds the condition by max|h| / sqrt(d eps)
    with pytest.raises(ValueError, match="constant"):
        layer_norm_rtol(torch.ones(3, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="eps"):
        layer_norm_rtol(H, eps=-1.0)


@pytest.mark.parametrize("c", [1e-300, 1e-160, 1e160, 1e300])
def test_ssr_and_lssr_at_extreme_scales(c):
    """SSR and LSSR are invariant under X -> c X: also where the squares of c X overflow or underflow."""
    X, y = random_problem(3)
    assert ssr(X * c, y) == pytest.approx(ssr(X, y), rel=1e-12)
    assert lssr(X * c, y) == pytest.approx(lssr(X, y), rel=1e-9)
    onehot = torch.nn.functional.one_hot(torch.as_tensor(y)).double()
    assert float(ssr_from_onehot(torch.as_tensor(X) * c, onehot)) == pytest.approx(ssr(X, y), rel=1e-12)


def test_ssr_loss_is_scale_invariant_at_every_scale():
    """The training loss is SSR at every scale: ssr_loss(c Z) stays at ssr(Z) as c -> 0 (a floor on tr S_t made
    it fall to 0 there, a spurious global minimum), in float64 and float32, and its gradient scales as 1/c."""
    X, y = random_problem(5)
    yt = torch.as_tensor(y)
    target = ssr(X, y)
    for dtype in (torch.float64, torch.float32):
        Z = torch.as_tensor(X, dtype=dtype)
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        for c in (1e-30, 1e-12, 1e-9, 1e-3, 1.0, 1e6, 1e30):
            assert float(ssr_loss(c * Z, yt)) == pytest.approx(target, rel=tol), (dtype, c)
    Z = torch.as_tensor(X)
    g1 = torch.func.grad(lambda z: ssr_loss(z, yt))(Z)
    g2 = torch.func.grad(lambda z: ssr_loss(z, yt))(1e-9 * Z)
    torch.testing.assert_close(1e-9 * g2, g1, rtol=1e-9, atol=0)
    # under torch.func: vmap over a batch of outputs
    onehot = torch.nn.functional.one_hot(yt).double()
    batch = torch.stack([Z, 1e-9 * Z, Z.flip(0)])
    vals = torch.func.vmap(lambda z: ssr_from_onehot(z, onehot))(batch)
    torch.testing.assert_close(vals, torch.tensor([target, target, ssr(X[::-1], y)], dtype=torch.float64))


# --- resolution relative to each feature, not to the largest entry of the data (referee read of chapters 1-2)


@pytest.mark.parametrize("offset", [0.0, 1.0, 1e6, 1.7e9, 1e12])
def test_referee_offsets_keep_the_exact_ssr(offset):
    """prop-ssr-invariance in float64: [[0], [0], [1], [1]] + offset with labels [0, 0, 1, 1] is exact data with SSR =
    LSSR = 0 for every offset (a resolution relative to the largest entry, 1e-9, returned 1 from 1.7e9 on)."""
    X = np.array([[0.0], [0.0], [1.0], [1.0]]) + offset
    y = np.array([0, 0, 1, 1])
    assert ssr(X, y) == 0.0 and lssr(X, y) == 0.0
    Z = torch.tensor(X, requires_grad=True)
    loss = ssr_loss(Z, torch.as_tensor(y))
    assert float(loss.detach()) == 0.0
    # the loss is not stuck at the convention's 1 with zero gradient: move a point and it rises, with a gradient
    Z2 = torch.tensor(X + np.array([[0.0], [0.5], [0.0], [0.0]]), requires_grad=True)
    loss2 = ssr_loss(Z2, torch.as_tensor(y))
    loss2.backward()
    assert float(loss2.detach()) == pytest.approx(ssr(X + np.array([[0.0], [0.5], [0.0], [0.0]]), y), rel=1e-12) and float(loss2.detach()) > 0.01
    assert float(Z2.grad.abs().max()) > 1e-3


@settings(max_examples=30)
@given(seeds, st.sampled_from([1e9, 1e10, 1e11, 1e12]))
def test_ssr_and_lssr_are_invariant_under_huge_shifts(seed, factor):
    """SSR(X + b) = SSR(X) and LSSR(X + b) = LSSR(X) for shifts |b| of 1e9 to 1e12 times the spread of the data. The
    data lie on a grid of step 2**-8 and b on a grid of step 1, so X + b is exact in float64 (checked) and the
    exact answers are the same: ssr to 1e-12 relative, lssr to 1e-10, the loss and its gradient likewise."""
    X, y = random_problem(seed)
    X = np.round(X * 2**8) / 2**8
    rng = np.random.default_rng(seed + 7)
    spread = float(np.sqrt(np.mean((X - X.mean(axis=0)) ** 2)))
    b = np.round(rng.choice([-1.0, 1.0], size=X.shape[1]) * factor * spread * rng.uniform(1, 2, size=X.shape[1]))
    moved = X + b
    assert np.array_equal(moved - b, X)  # the shift is exact
    assert ssr(moved, y) == pytest.approx(ssr(X, y), rel=1e-12, abs=1e-15)
    assert lssr(moved, y) == pytest.approx(lssr(X, y), abs=1e-10)
    assert ssr(X @ lssr_direction(moved, y), y) == pytest.approx(lssr(X, y), abs=1e-9)  # the same optimal direction
    yt = torch.as_tensor(y)
    grad = torch.func.grad(lambda z: ssr_loss(z, yt))
    Xt = torch.as_tensor(X)
    assert float(ssr_loss(torch.as_tensor(moved), yt)) == pytest.approx(ssr(X, y), rel=1e-12, abs=1e-15)
    g0, g1 = grad(Xt), grad(torch.as_tensor(moved))
    torch.testing.assert_close(g1, g0, rtol=1e-8, atol=1e-8 * float(g0.abs().max()))


@settings(max_examples=30)
@given(seeds)
def test_lssr_is_invariant_under_rescaling_single_features(seed):
    """thm-lssr-closed-form: LSSR is invariant under invertible linear maps; in float64 exactly so (to rounding) for
    rescaling single features by factors from 1e-10 to 1e10 (the resolution is relative to each feature), with the
    direction rescaled accordingly, and for a general invertible map as long as it pushes no direction below the
    resolution (test_linear_maps_never_lower_lssr)."""
    X, y = random_problem(seed)
    rng = np.random.default_rng(seed)
    D = 10.0 ** rng.choice([-10, -5, 0, 5, 10], size=X.shape[1])
    assert lssr(X * D, y) == pytest.approx(lssr(X, y), abs=1e-10)
    w = lssr_direction(X * D, y)
    assert ssr((X * D) @ w, y) == pytest.approx(lssr(X, y), abs=1e-9)


def test_referee_features_of_different_scales():
    """Feature 1 ~ N(0, 1e6) noise, feature 2 = 1e-4 * label + 1e-6 noise (m = 40): LSSR = 0.000466 (the second
    feature nearly separates) before and after scaling feature 2 by 1e10, and with rtol = 0; a resolution relative
    to the largest entry of the data dropped feature 2 and returned 0.976."""
    rng = np.random.default_rng(0)
    m = 40
    y = np.arange(m) % 2
    F = np.column_stack([rng.normal(0.0, 1e6, m), 1e-4 * y + 1e-6 * rng.normal(size=m)])
    exact = lssr(F, y, rtol=0.0)
    S_w, _, S_t = scatter_matrices(F, y)
    assert exact == pytest.approx(generalized_eigh(S_w, S_t, eigvals_only=True)[0], rel=1e-6)
    assert exact < 1e-3
    for A in (np.eye(2), np.diag([1.0, 1e10]), np.diag([1e-6, 1.0])):
        assert lssr(F @ A, y) == pytest.approx(exact, rel=1e-9)
        assert ssr((F @ A) @ lssr_direction(F @ A, y), y) == pytest.approx(exact, rel=1e-6)


def test_default_resolution_follows_the_dtype():
    """2**8 units of rounding: 5.7e-14 for float64 (and integers), 3.1e-5 for float32, numpy or torch alike; ssr of
    float32 samples uses the float32 resolution (so float32 rounding of equal samples is not a spread)."""
    assert default_rtol(np.float64) == default_rtol(torch.float64) == default_rtol(np.int64) == 2**8 * 2.0**-52
    assert default_rtol(np.float32) == default_rtol(torch.float32) == 2**8 * 2.0**-23
    assert f"{default_rtol(np.float64):.1e}" == "5.7e-14" and f"{default_rtol(np.float32):.1e}" == "3.1e-05"
    v = np.array([[0.1, 0.7], [0.1, 0.7], [0.1, 0.7], [0.1, 0.7]], dtype=np.float32)
    v[1, 0] = np.nextafter(v[1, 0], np.float32(1))  # one float32 rounding step
    assert ssr(v, [0, 0, 1, 1]) == 1.0 and ssr(v.astype(np.float64), [0, 0, 1, 1]) < 1.0
    with pytest.raises(ValueError, match="rtol must be 0 or"):
        ssr(v, [0, 0, 1, 1], rtol=1.5)
