"""Standardising and whitening over either axis: ZCA, the spectral transformation, Cholesky as a rotation of
ZCA, and LayerNorm as the diagonal of channel whitening."""

from __future__ import annotations

import math

import pytest
import sympy as sp
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from lnbook.whitening import (
    centre, cholesky_rotation, cholesky_whiten, covariance, iter_norm, layer_norm_via_gram, spectral_transform,
    standardise, zca_matrix, zca_whiten,
)


def batch(N, d, seed=0, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N, d, generator=g, dtype=torch.float64) * torch.logspace(0, spread, d, dtype=torch.float64)


def exact_covariance_eigenvalues(X: torch.Tensor) -> torch.Tensor:
    """The eigenvalues (ascending) of the exact 1/(N-1) feature covariance of the float64 batch ``X``, computed in
    mpmath at 60 digits and rounded to float64 once: no rounding eigenvalue where the exact one is 0."""
    import mpmath

    with mpmath.workdps(60):
        rows = [[mpmath.mpf(v) for v in r] for r in X.tolist()]
        N, d = len(rows), len(rows[0])
        mean = [mpmath.fsum(r[j] for r in rows) / N for j in range(d)]
        C = mpmath.matrix([[r[j] - mean[j] for j in range(d)] for r in rows])
        lam = mpmath.eigsy(C.T * C / (N - 1), eigvals_only=True)
        return torch.tensor(sorted(float(v) for v in lam), dtype=torch.float64).clamp_min(0)


@pytest.mark.parametrize("axis,shape", [(1, (50, 8)), (0, (8, 50))])
def test_zca_output_is_white_with_eps_zero(axis, shape):
    X = batch(*shape)
    n = shape[1] if axis == 1 else shape[0]
    assert torch.allclose(covariance(zca_whiten(X, axis), axis), torch.eye(n, dtype=X.dtype), atol=1e-12)


def test_zca_with_eps_has_eigenvalues_lambda_over_lambda_plus_eps():
    X, eps = batch(50, 8), 0.3
    lam = torch.linalg.eigvalsh(covariance(X))
    out = torch.linalg.eigvalsh(covariance(zca_whiten(X, eps=eps)))
    assert torch.allclose(out, lam / (lam + eps), atol=1e-12)
    assert torch.equal(zca_whiten(torch.ones(5, 3, dtype=torch.float64), eps=eps), torch.zeros(5, 3, dtype=torch.float64))


@pytest.mark.parametrize("axis", [0, 1])
def test_spectral_transform_output_eigenvalues_are_lambda_g_squared(axis):
    X = batch(12, 30, seed=1) if axis == 0 else batch(30, 12, seed=1)
    lam = torch.linalg.eigvalsh(covariance(X, axis))
    g = lambda v: (v + 1.0) ** -0.25  # noqa: E731 - any spectral function
    out = torch.linalg.eigvalsh(covariance(spectral_transform(X, g, axis), axis))
    assert torch.allclose(out, torch.sort(lam * g(lam) ** 2).values, atol=1e-12)
    zca = spectral_transform(X, lambda v: v.rsqrt(), axis)
    assert torch.allclose(zca, zca_whiten(X, axis), atol=1e-12)


def test_cholesky_whitening_is_a_rotation_of_zca():
    X = batch(40, 6, seed=3)
    sigma = covariance(X)
    Q = cholesky_rotation(sigma)
    I = torch.eye(6, dtype=X.dtype)
    assert torch.allclose(Q @ Q.T, I, atol=1e-12) and not torch.allclose(Q, I, atol=1e-3)
    L_inv = torch.linalg.inv(torch.linalg.cholesky(sigma))
    assert torch.allclose(L_inv, Q @ zca_matrix(sigma), atol=1e-12)
    assert not torch.allclose(L_inv, L_inv.T, atol=1e-3)  # Cholesky's matrix is not symmetric, ZCA's is
    chol, zca = cholesky_whiten(X), zca_whiten(X)
    assert torch.allclose(covariance(chol), I, atol=1e-12)
    assert torch.allclose(chol, zca @ Q.T, atol=1e-12)  # every whitened sample rotated by the same Q
    assert torch.allclose(chol.norm(dim=1), zca.norm(dim=1), atol=1e-12)  # so each sample keeps its norm


def test_cholesky_whitening_on_axis_zero_is_q_times_zca_and_mixes_the_samples():
    """Axis 0 whitens the N x N Gram: W X_c = Q Sigma^{-1/2} X_c, i.e. Q times the ZCA output, so the N x N matrix Q
    acts on the sample index: row i of the output is sum_j Q_ij z_j, a mixture of the ZCA samples z_j. (Since the
    whitened rows are orthogonal with equal norms, this is also one d x d orthogonal map R applied to every z_i,
    R^T = Z^T Q Z/(d-1) + I - Z^T Z/(d-1); but R is not Q, which is N x N.)"""
    X = batch(6, 40, seed=3)  # N = 6 <= d - 1: a non-singular Gram
    N, d = X.shape
    sigma = covariance(X, axis=0)
    Q = cholesky_rotation(sigma)
    I = torch.eye(N, dtype=X.dtype)
    assert torch.allclose(Q @ Q.T, I, atol=1e-12) and not torch.allclose(Q, I, atol=1e-3)
    chol, zca = cholesky_whiten(X, axis=0), zca_whiten(X, axis=0)
    assert torch.allclose(covariance(chol, axis=0), I, atol=1e-12)
    assert torch.allclose(chol, Q @ zca, atol=1e-12)  # Q times the ZCA output
    assert not torch.allclose(chol, zca, atol=1e-3)
    assert int((Q.abs() > 1e-3).sum(dim=1).max()) >= 2  # a row of Q mixes several samples
    R_T = zca.T @ Q @ zca / (d - 1) + torch.eye(d, dtype=X.dtype) - zca.T @ zca / (d - 1)
    assert torch.allclose(R_T @ R_T.T, torch.eye(d, dtype=X.dtype), atol=1e-12)
    assert torch.allclose(chol, zca @ R_T, atol=1e-12)


def test_cholesky_whitening_is_an_orthogonal_times_zca_sympy():
    """One exact instance of the proposition: for Sigma with the rational square root [[2, 1], [1, 2]],
    Cholesky's L^{-1} whitens Sigma and Q = L^{-1} Sigma^{1/2} is orthogonal (the general statement is
    checked numerically in test_whitening_matrices_are_exactly_the_orthogonal_transforms_of_zca)."""
    root = sp.Matrix([[2, 1], [1, 2]])  # symmetric positive definite (eigenvalues 1 and 3): Sigma^{1/2}
    S = root * root
    L = S.cholesky(hermitian=False)
    Q = sp.simplify(L.inv() * root)
    assert sp.simplify(Q * Q.T - sp.eye(2)) == sp.zeros(2)
    assert sp.simplify(L.inv() * S * L.inv().T - sp.eye(2)) == sp.zeros(2)
    assert Q != sp.eye(2)


def _haar_orthogonal(n, g):
    Q, R = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    return Q * torch.sign(torch.diagonal(R))


@pytest.mark.parametrize("seed", range(5))
def test_whitening_matrices_are_exactly_the_orthogonal_transforms_of_zca(seed):
    """prop-ch8-rotation, both directions and the uniqueness, float64 to 1e-10, n = 5:
    (if) W = Q Sigma^{-1/2} whitens for a random orthogonal Q; (only if) a whitening built without any Q,
    W = (A Sigma A^T)^{-1/2} A for a random A, has W Sigma^{1/2} orthogonal; (uniqueness) of the 2^n symmetric
    whitenings U S Lambda^{-1/2} U^T (S a diagonal of signs) exactly one is positive definite, and it is ZCA,
    while a random rotation of ZCA is not symmetric."""
    g = torch.Generator().manual_seed(100 + seed)
    n = 5
    B = torch.randn(n, n, generator=g, dtype=torch.float64)
    sigma = B @ B.T + 0.1 * torch.eye(n, dtype=torch.float64)
    I = torch.eye(n, dtype=torch.float64)
    zca = zca_matrix(sigma)
    root = torch.linalg.inv(zca)  # Sigma^{1/2}
    Q = _haar_orthogonal(n, g)
    W = Q @ zca
    assert torch.allclose(W @ sigma @ W.T, I, atol=1e-10)  # if
    assert not torch.allclose(W, W.T, atol=1e-3)  # an orthogonal transform of ZCA that is not symmetric
    A = torch.randn(n, n, generator=g, dtype=torch.float64)
    W = zca_matrix(A @ sigma @ A.T) @ A
    assert torch.allclose(W @ sigma @ W.T, I, atol=1e-10)
    assert torch.allclose((W @ root) @ (W @ root).T, I, atol=1e-10)  # only if: Q = W Sigma^{1/2} is orthogonal
    lam, U = torch.linalg.eigh(sigma)
    positive_definite = []
    for signs in range(2**n):
        S = torch.tensor([1.0 if signs >> k & 1 == 0 else -1.0 for k in range(n)], dtype=torch.float64)
        W = U @ torch.diag(S * lam.rsqrt()) @ U.T
        assert torch.allclose(W, W.T) and torch.allclose(W @ sigma @ W.T, I, atol=1e-10)
        if bool((torch.linalg.eigvalsh(W) > 0).all()):
            positive_definite.append(W)
    assert len(positive_definite) == 1 and torch.allclose(positive_definite[0], zca, atol=1e-10)


@pytest.mark.parametrize("n", [2, 3, 5, 6])
def test_cholesky_q_is_a_proper_rotation_and_a_reflection_of_zca_also_whitens(n):
    """prop-ch8-rotation: the Q of Cholesky whitening has det +1 (det L^{-1} > 0, det Sigma^{1/2} > 0; float64,
    1e-12, random Sigma of sizes 2, 3, 5, 6), while the orthogonal transforms of ZCA include reflections:
    W = diag(1, -1, 1, ...) Sigma^{-1/2} whitens Sigma and its Q = W Sigma^{1/2} has det -1."""
    g = torch.Generator().manual_seed(40 + n)
    B = torch.randn(n, n, generator=g, dtype=torch.float64)
    sigma = B @ B.T + 0.1 * torch.eye(n, dtype=torch.float64)
    I = torch.eye(n, dtype=torch.float64)
    Q = cholesky_rotation(sigma)
    assert torch.allclose(Q @ Q.T, I, atol=1e-12)
    assert float(torch.linalg.det(Q)) == pytest.approx(1.0, abs=1e-12)
    assert float(torch.linalg.det(torch.linalg.inv(torch.linalg.cholesky(sigma)))) > 0
    assert float(torch.linalg.det(torch.linalg.inv(zca_matrix(sigma)))) > 0  # det Sigma^{1/2}
    S = torch.ones(n, dtype=torch.float64)
    S[1] = -1.0
    W = torch.diag(S) @ zca_matrix(sigma)
    assert torch.allclose(W @ sigma @ W.T, I, atol=1e-10)
    reflection = W @ torch.linalg.inv(zca_matrix(sigma))
    assert torch.allclose(reflection @ reflection.T, I, atol=1e-10)
    assert float(torch.linalg.det(reflection)) == pytest.approx(-1.0, abs=1e-10)


def test_a_symmetric_whitening_need_not_be_zca():
    """The positive-definiteness in the uniqueness is needed: for Sigma = I, diag(1, -1) is a symmetric
    whitening matrix (an orthogonal times ZCA = I) that is not ZCA."""
    W, I = torch.diag(torch.tensor([1.0, -1.0], dtype=torch.float64)), torch.eye(2, dtype=torch.float64)
    assert torch.equal(W, W.T) and torch.equal(W @ I @ W.T, I)
    assert not torch.equal(W, zca_matrix(I)) and float(torch.linalg.eigvalsh(W).min()) < 0


@settings(max_examples=25, deadline=None)
@given(N=st.integers(2, 9), d=st.integers(2, 12), seed=st.integers(0, 10_000), eps=st.sampled_from([0.0, 1e-5, 0.1]))
def test_layer_norm_is_the_diagonal_of_the_sample_gram(N, d, seed, eps):
    """LN(X) = (diag G + eps)^{-1/2} X_c with G = X_c X_c^T / d; its output Gram has a unit diagonal (eps = 0)."""
    X = batch(N, d, seed=seed)
    ln = F.layer_norm(X, (d,), eps=eps)
    assert torch.allclose(layer_norm_via_gram(X, eps), ln, atol=1e-12)
    if eps == 0:
        G = ln @ ln.T / d
        assert torch.allclose(G.diagonal(), torch.ones(N, dtype=X.dtype), atol=1e-12)


@pytest.mark.parametrize("scale", [1e-25, 1e-21, 1e-10, 1.0, 1e10, 1e18, 1e20])
def test_layer_norm_via_gram_is_exact_at_every_scale_in_float32(scale):
    """LayerNorm with eps = 0 is scale invariant, and layer_norm_via_gram computes it on each sample divided by its
    largest |entry|: in float32 from 1e-25 (where the unscaled Gram underflows to 0 and the sample was called
    constant) to 1e20 (where it overflows), it equals the float64 LayerNorm within 8 d u (u = 2^-24, d = 40
    features: a few roundings per entry). With eps > 0, eps is divided by the same s^2 (float64, 1e-5 at scale 1e-3)."""
    X = torch.randn(6, 40, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    exact = F.layer_norm(X, (40,), eps=0.0)
    Y = (X * scale).float()  # float32 at that scale (normal numbers from 1e-25 to 1e20)
    assert float((layer_norm_via_gram(Y).double() - exact).abs().max()) <= 8 * 40 * 2.0**-24
    small = X * 1e-3
    assert torch.allclose(layer_norm_via_gram(small, 1e-5), F.layer_norm(small, (40,), eps=1e-5), atol=1e-12, rtol=0)


@settings(max_examples=30, deadline=None)
@given(d=st.integers(3, 12), rho=st.floats(-1, 1), seed=st.integers(0, 10_000))
def test_layer_norm_leaves_any_correlation_for_d_at_least_three(d, rho, seed):
    """For d >= 3 every correlation rho in [-1, 1] between two samples survives LayerNorm (eps = 0): samples
    built from two orthonormal directions of 1-perp, shifted and scaled, give the off-diagonal entry rho of
    the output Gram to 1e-12."""
    g = torch.Generator().manual_seed(seed)
    P = torch.eye(d, dtype=torch.float64) - 1.0 / d
    u, _ = torch.linalg.qr(P @ torch.randn(d, 2, generator=g, dtype=torch.float64))  # orthonormal in 1-perp
    x1 = 2.5 * u[:, 0] + 7.0
    x2 = 0.3 * (rho * u[:, 0] + math.sqrt(max(0.0, 1 - rho**2)) * u[:, 1]) - 4.0
    ln = F.layer_norm(torch.stack([x1, x2]), (d,), eps=0.0)
    assert float(ln[0] @ ln[1] / d) == pytest.approx(rho, abs=1e-12)


@settings(max_examples=30, deadline=None)
@given(N=st.integers(2, 10), d=st.integers(2, 12), seed=st.integers(0, 10_000))
def test_layer_norm_output_gram_is_a_correlation_matrix_of_rank_at_most_d_minus_one(N, d, seed):
    """thm-ch8-ln-diagonal, the joint constraint (eps = 0): the output Gram LN LN^T / d is positive
    semi-definite with a unit diagonal, and its rank is at most d - 1 (every row lies in 1-perp): the
    eigenvalues beyond the (d-1)-th vanish to 1e-12, float64."""
    ln = F.layer_norm(batch(N, d, seed=seed, spread=2.0), (d,), eps=0.0)
    G = ln @ ln.T / d
    lam = torch.linalg.eigvalsh(G).flip(0)
    assert torch.allclose(G.diagonal(), torch.ones(N, dtype=G.dtype), atol=1e-12)
    assert float(lam.min()) > -1e-12
    beyond = lam[d - 1:]  # empty when N <= d - 1
    assert beyond.numel() == 0 or float(beyond.abs().max()) < 1e-12


def test_three_samples_of_three_features_are_never_pairwise_uncorrelated_after_layer_norm():
    """The examples of thm-ch8-ln-diagonal (d = N = 3, eps = 0): the identity has rank 3 > d - 1, so every
    output Gram is at spectral distance at least 1 from it (random batches, float64, 1e-12); and the
    matrix with all off-diagonal entries -0.9, each entry a possible correlation, has an eigenvalue -0.8,
    so it is no Gram at all."""
    I = torch.eye(3, dtype=torch.float64)
    for seed in range(20):
        ln = F.layer_norm(batch(3, 3, seed=seed), (3,), eps=0.0)
        assert float(torch.linalg.matrix_norm(ln @ ln.T / 3 - I, ord=2)) > 1 - 1e-12
    C = torch.full((3, 3), -0.9, dtype=torch.float64).fill_diagonal_(1.0)
    assert float(torch.linalg.eigvalsh(C).min()) == pytest.approx(-0.8, abs=1e-12)


@settings(max_examples=30, deadline=None)
@given(N=st.integers(1, 10), d=st.integers(2, 12), seed=st.integers(0, 10_000), data=st.data())
def test_every_correlation_matrix_of_rank_at_most_d_minus_one_is_a_layer_norm_gram(N, d, seed, data):
    """thm-ch8-ln-diagonal, attainment (eps = 0): a random correlation matrix C of rank r <= min(N, d - 1)
    is factored as C = B B^T (eigh, B of size N x (d-1), unit rows); the rows of sqrt(d) B V^T, V an
    orthonormal basis of 1-perp, are centred with norm sqrt(d), fixed points of LayerNorm; after a
    per-row shift and positive scale, LayerNorm returns them, and the output Gram is C to 1e-10."""
    r = data.draw(st.integers(1, min(N, d - 1)))
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(N, r, generator=g, dtype=torch.float64)
    A = A / A.norm(dim=1, keepdim=True)
    C = A @ A.T  # unit diagonal, positive semi-definite, rank r
    lam, U = torch.linalg.eigh(C)
    lam, U = lam.flip(0)[: d - 1].clamp_min(0), U.flip(1)[:, : d - 1]
    B = U * lam.sqrt()
    B = torch.cat([B, torch.zeros(N, d - 1 - B.shape[1], dtype=B.dtype)], dim=1)
    assert torch.allclose(B @ B.T, C, atol=1e-12)
    P = torch.eye(d, dtype=torch.float64) - 1.0 / d
    V = torch.linalg.eigh(P)[1][:, 1:]  # the d - 1 eigenvectors of eigenvalue 1: an orthonormal basis of 1-perp
    X = math.sqrt(d) * B @ V.T
    shifted = X * torch.rand(N, 1, generator=g, dtype=torch.float64).add(0.5) + torch.randn(N, 1, generator=g, dtype=torch.float64)
    ln = F.layer_norm(shifted, (d,), eps=0.0)
    assert torch.allclose(ln, X, atol=1e-10)
    assert torch.allclose(ln @ ln.T / d, C, atol=1e-10)


@settings(max_examples=20, deadline=None)
@given(N=st.integers(2, 9), seed=st.integers(0, 10_000))
def test_layer_norm_of_two_features_correlates_every_pair_perfectly(N, seed):
    """d = 2: every centred sample is a multiple of (1, -1), so every off-diagonal entry of the output Gram
    of LayerNorm (eps = 0) is +1 or -1 (to 1e-12): the correlations are not free."""
    ln = F.layer_norm(batch(N, 2, seed=seed), (2,), eps=0.0)
    G = ln @ ln.T / 2
    assert torch.allclose(G.abs(), torch.ones(N, N, dtype=torch.float64), atol=1e-12)


def test_layer_norm_standardises_but_channel_whitening_decorrelates():
    X = batch(16, 64, seed=4) + 3.0 * torch.randn(16, 1, generator=torch.Generator().manual_seed(9), dtype=torch.float64) * torch.linspace(-1, 1, 64, dtype=torch.float64)
    ln = F.layer_norm(X, (64,))
    off = (ln @ ln.T / 64 - torch.eye(16, dtype=X.dtype)).abs().max()
    assert off > 0.5  # LayerNorm leaves the samples correlated
    assert torch.allclose(covariance(zca_whiten(X, 0), 0), torch.eye(16, dtype=X.dtype), atol=1e-10)
    # the diagonal ST over axis 0 is LayerNorm up to sqrt((d - 1)/d) (variance 1/(d-1) against 1/d)
    assert torch.allclose(standardise(X, 0), ln * math.sqrt(63 / 64), atol=1e-12)
    assert torch.allclose(centre(X, 0), X - X.mean(dim=1, keepdim=True))  # INTL's axis-0 centring is LN's


def test_layer_norm_and_channel_whitening_agree_exactly_when_the_gram_is_diagonal_eps_zero_and_positive():
    """eps = 0: LN_0 = G^{-1/2} X_c iff G is diagonal (then the output Gram is the identity). eps > 0: LN_eps equals
    the regularised channel whitening (G + eps I)^{-1/2} X_c iff G is diagonal, and then neither is white: the output
    Gram is diag(G_ii / (G_ii + eps))."""
    d = 12
    g = torch.Generator().manual_seed(5)
    ones = torch.ones(d, 1, dtype=torch.float64) / math.sqrt(d)
    basis, _ = torch.linalg.qr(torch.cat([ones, torch.randn(d, 4, generator=g, dtype=torch.float64)], dim=1))
    Xd = basis[:, 1:].T * torch.tensor([[0.5], [1.0], [2.0], [3.0]], dtype=torch.float64)  # 4 orthogonal centred rows
    Xg = Xd + 0.7 * Xd[[1, 2, 3, 0]]  # the same rows mixed: a non-diagonal Gram
    for X, diagonal in ((Xd, True), (Xg, False)):
        Xc = X - X.mean(dim=1, keepdim=True)
        G = Xc @ Xc.T / d
        assert torch.allclose(G, torch.diag(torch.diagonal(G)), atol=1e-12) == diagonal
        for eps in (0.0, 1e-1):
            ln = F.layer_norm(X, (d,), eps=eps)
            lam, U = torch.linalg.eigh(G)
            channel = (U * (lam + eps).rsqrt()) @ U.T @ Xc
            assert torch.allclose(ln, channel, atol=1e-12) == diagonal, (eps, diagonal)
            if diagonal:
                gram = ln @ ln.T / d
                assert torch.allclose(gram, torch.diag(torch.diagonal(G) / (torch.diagonal(G) + eps)), atol=1e-12)
                assert torch.allclose(gram, torch.eye(4, dtype=X.dtype), atol=1e-12) == (eps == 0)


def test_standardise_over_the_batch_is_batch_norm():
    X = batch(20, 5, seed=5)
    bn = F.batch_norm(X, None, None, training=True, eps=1e-300)  # torch refuses eps = 0
    assert torch.allclose(standardise(X, 1), bn * math.sqrt(19 / 20), atol=1e-12)


def test_zca_and_cholesky_refuse_singular_covariances():
    with pytest.raises(ValueError, match="N >= d\\+1"):
        zca_whiten(batch(5, 8))
    with pytest.raises(ValueError, match="N <= d-1"):
        zca_whiten(batch(8, 8), axis=0)
    with pytest.raises(ValueError, match="full collapse"):
        zca_whiten(torch.ones(6, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="singular"):
        cholesky_whiten(batch(5, 8))
    with pytest.raises(ValueError, match="eps"):
        zca_whiten(batch(9, 3), eps=-1.0)
    with pytest.raises(ValueError, match="NaN"):
        zca_whiten(torch.full((9, 3), math.nan))
    with pytest.raises(ValueError, match="at least 2"):
        zca_whiten(batch(1, 3))
    assert torch.isfinite(zca_whiten(batch(5, 8), eps=1e-3)).all()  # eps > 0 is always defined


def test_cholesky_refuses_every_singular_covariance_like_zca():
    """eps = 0: Cholesky whitening refuses a rank-deficient batch by ZCA's numerical-rank rule, not by whether
    cholesky_ex happens to fail (rounding often leaves a tiny positive last pivot, and L^{-1} is then finite but
    not white: ||cov(Y) - I||_F = 1 for the 20 x 20 batch below). Random singular batches: N <= d on axis 1
    (N = d included), an exactly dependent feature, both dtypes; every one is refused by both functions."""
    X = torch.randn(20, 20, generator=torch.Generator().manual_seed(2), dtype=torch.float64)  # cov rank 19
    with pytest.raises(ValueError, match="singular"):
        cholesky_whiten(X)
    g = torch.Generator().manual_seed(7)
    cases = []
    for dtype in (torch.float32, torch.float64):
        for _ in range(20):
            d = int(torch.randint(3, 24, (1,), generator=g))
            N = int(torch.randint(2, d + 1, (1,), generator=g))  # N <= d: rank <= N - 1 < d
            cases.append(torch.randn(N, d, generator=g, dtype=dtype))
            Z = torch.randn(4 * d, d, generator=g, dtype=dtype)
            Z[:, -1] = 3 * Z[:, -2] + Z[:, -3]  # a dependent feature: rank d - 1 with N = 4d
            cases.append(Z)
        cases.append(torch.randn(d, d, generator=g, dtype=dtype))  # N = d
    for X in cases:
        for whiten in (zca_whiten, cholesky_whiten):
            with pytest.raises(ValueError, match="singular|N >= d"):
                whiten(X)
    Y = cholesky_whiten(batch(40, 6))  # a non-singular batch is still whitened
    assert torch.allclose(covariance(Y), torch.eye(6, dtype=torch.float64), atol=1e-10)


def test_zca_with_positive_eps_accepts_every_singular_covariance():
    """eps > 0 whitens Sigma + eps I, defined for every positive semi-definite Sigma: rank-deficient batches at
    any scale, float32 and float64, give finite outputs with eigenvalues lambda/(lambda + eps) (zero where
    lambda = 0); only eps = 0 refuses them.

    The reference eigenvalues are those of the exact covariance of the float64 batch (mpmath, 60 digits): a
    float64 reference has rounding eigenvalues ~1e-12 where the exact one is 0 (u ||Sigma||, ||Sigma|| ~ 6e3), and
    lambda / (lambda + eps) turns them into ~1e-10, the tolerance itself (1.6e-10 on the CI Xeon). Against the exact
    reference the output is off by 7e-15 under every kernel setting tried, so atol = 1e-10 leaves a margin of 1e4
    and still fails an output perturbed by 1e-8."""
    g = torch.Generator().manual_seed(11)
    for X, eps in [(torch.randn(64, 512, generator=g) * 3, 1e-5), (torch.randn(5, 8, generator=g) * 100, 1e-3),
                   (torch.randn(5, 8, generator=g, dtype=torch.float64) * 1e5, 1e-3)]:
        Y = zca_whiten(X, eps=eps)
        assert torch.isfinite(Y).all()
        with pytest.raises(ValueError, match="singular"):
            zca_whiten(X)
    X = batch(5, 8, seed=12, spread=2.0)  # rank 4 of 8, float64
    lam = exact_covariance_eigenvalues(X)
    out = torch.linalg.eigvalsh(covariance(zca_whiten(X, eps=1e-2)))
    assert torch.allclose(out, lam / (lam + 1e-2), rtol=0, atol=1e-10)
    assert int((out > 1e-6).sum()) == 4
    sigma = covariance(X)
    assert torch.isfinite(zca_matrix(sigma, eps=1e-3)).all()
    with pytest.raises(ValueError, match="not positive semi-definite"):
        zca_matrix(torch.diag(torch.tensor([1.0, -1.0], dtype=torch.float64)), eps=0.5)


def test_zca_matrix_error_for_a_given_covariance_names_no_sample_count():
    """A covariance passed directly has no samples: the message says it is singular and to pass eps > 0,
    without a made-up hint about N or d."""
    with pytest.raises(ValueError, match="sigma is singular") as err:
        zca_matrix(torch.diag(torch.tensor([1.0, 0.0], dtype=torch.float64)))
    assert "N=" not in str(err.value) and "N >=" not in str(err.value) and "eps > 0" in str(err.value)
    with pytest.raises(ValueError, match="numerical rank 0 of 3"):
        zca_matrix(torch.zeros(3, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="square"):
        zca_matrix(torch.zeros(3, 2, dtype=torch.float64))
    sigma = torch.diag(torch.tensor([4.0, 0.25], dtype=torch.float64))
    assert torch.allclose(zca_matrix(sigma), torch.diag(torch.tensor([0.5, 2.0], dtype=torch.float64)), atol=1e-15)
    # a batch whose shape allows full rank but whose features are dependent: no hint about N >= d+1
    with pytest.raises(ValueError, match="rank-deficient although its shape allows full rank"):
        zca_whiten(batch(10, 3, seed=13).repeat(1, 2))


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("axis", [0, 1])
def test_zca_is_exact_from_1e_minus_30_to_1e30(axis, dtype, tol):
    """zca_whiten at every scale c = 1e-30 .. 1e30, float32 and float64, relative error below 1e-5 (float32)
    or 1e-12 (float64): eps = 0 against the float64 output at scale 1 (the map is scale invariant); eps = 1e-5
    against an independent float64 eigendecomposition at scale 1 with eps / c^2 (the same map), from the
    near-identity scaling (c tiny) to eps negligible (c huge). Without the rescaling the float32 covariance
    underflows below about 1e-19 and overflows at 1e20 (eigh fails)."""
    g = torch.Generator().manual_seed(6)
    X = torch.randn(16, 32, generator=g, dtype=torch.float64)
    X = X if axis == 0 else X.T
    ref = zca_whiten(X, axis=axis)
    M = X.T if axis == 0 else X  # rows: observations, columns: the whitened units
    Mc = M - M.mean(0)
    lam, U = torch.linalg.eigh(Mc.T @ Mc / (M.shape[0] - 1))
    for e in range(-30, 31, 2):
        c = 10.0**e
        Xs = (X * c).to(dtype)
        out = zca_whiten(Xs, axis=axis).double()
        assert float((out - ref).norm() / ref.norm()) < tol, (e, dtype, "eps = 0")
        expected = c * Mc @ (U * (c * c * lam + 1e-5).rsqrt()) @ U.T if e <= 0 else \
            Mc @ (U * (lam + 1e-5 / c**2).rsqrt()) @ U.T
        expected = expected if axis == 1 else expected.T
        out = zca_whiten(Xs, axis=axis, eps=1e-5).double()
        assert float((out - expected).norm() / expected.norm()) < tol, (e, dtype, "eps > 0")


def test_zca_under_torch_func():
    X = batch(30, 4, seed=6)
    g = torch.func.grad(lambda Z: zca_whiten(Z)[:, 0].pow(3).sum())(X)
    Z = X.clone().requires_grad_(True)
    zca_whiten(Z)[:, 0].pow(3).sum().backward()
    assert torch.allclose(g, Z.grad)
    stacked = torch.stack([X, batch(30, 4, seed=7)])
    assert torch.allclose(torch.func.vmap(lambda Z: zca_whiten(Z, check=False))(stacked), zca_whiten(stacked))
    with pytest.raises(RuntimeError, match="check=False"):
        torch.func.vmap(zca_whiten)(stacked)


def test_iter_norm_and_zca_agree_on_a_nearly_white_batch():
    """An eigenvalue ratio below (9 - sqrt 17)/2 keeps the iteration stable: 30 steps match ZCA to 1e-12."""
    X = torch.linalg.qr(batch(40, 6, seed=8))[0] * torch.linspace(1.0, 1.4, 6, dtype=torch.float64)
    X = X - X.mean(0)
    assert torch.allclose(iter_norm(X, 30), zca_whiten(X), atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_are_refused_with_a_conversion_hint(dtype):
    """The whitening functions work in float32 or float64 (the engineering notes); half precision is refused with
    a TypeError saying to convert, not silently computed with digits lost; the message names autocast, where such
    inputs come from (a layer's output under AMP)."""
    from lnbook.whitening import trace_loss

    X = batch(12, 4).to(dtype)
    for f in (zca_whiten, cholesky_whiten, standardise, centre, covariance, lambda Z: iter_norm(Z, 4), trace_loss):
        with pytest.raises(TypeError, match=r"float32 or float64.*autocast.*\.float\(\)"):
            f(X)
    with pytest.raises(TypeError, match="float32 or float64"):
        zca_matrix(torch.eye(3, dtype=dtype))
    assert zca_whiten(X.float()).dtype == torch.float32  # converting, as the message says, works


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("axis", [0, 1])
def test_cholesky_is_exact_from_1e_minus_30_to_1e30(axis, dtype, tol):
    """cholesky_whiten at every scale c = 1e-30 .. 1e30, float32 and float64, relative error below 1e-5 (float32)
    or 1e-12 (float64): eps = 0 against the float64 output at scale 1 (the map is scale invariant); eps = 1e-5
    against an independent float64 Cholesky factorisation of c^2 Sigma + eps I at scale c (float64 holds every
    such covariance). Without the rescaling the float32 covariance underflows at 1e-25 (reported as a full
    collapse) and overflows at 1e25 (the factorisation fails)."""
    g = torch.Generator().manual_seed(6)
    X = torch.randn(16, 32, generator=g, dtype=torch.float64)
    X = X if axis == 0 else X.T
    ref = cholesky_whiten(X, axis=axis)
    for e in range(-30, 31, 2):
        c = 10.0**e
        Xs = (X * c).to(dtype)
        out = cholesky_whiten(Xs, axis=axis).double()
        assert out.dtype == torch.float64 and float((out - ref).norm() / ref.norm()) < tol, (e, dtype, "eps = 0")
        M = Xs.double().T if axis == 0 else Xs.double()
        Mc = M - M.mean(0)
        L = torch.linalg.cholesky(Mc.T @ Mc / (M.shape[0] - 1) + 1e-5 * torch.eye(Mc.shape[1], dtype=torch.float64))
        expected = torch.linalg.solve_triangular(L, Mc.T, upper=False).T
        expected = expected if axis == 1 else expected.T
        out = cholesky_whiten(Xs, axis=axis, eps=1e-5)
        assert out.dtype == dtype
        assert float((out.double() - expected).norm() / expected.norm()) < tol, (e, dtype, "eps > 0")


@pytest.mark.parametrize("axis,shape", [(1, (40, 6)), (0, (6, 40)), (1, (5, 12)), (0, (12, 5))])
def test_cholesky_with_eps_whitens_sigma_plus_eps(axis, shape):
    """cholesky_whiten with eps = 0.1 on both axes, full-rank and singular batches (float64): the output equals
    X_c L^{-T} with L L^T = Sigma + 0.1 I (an independent factorisation, 1e-12), and its covariance has the
    eigenvalues lambda/(lambda + 0.1), those of ZCA with the same eps (1e-12), not 1: dropping eps fails this.
    eps = 0, axis 0: the output Gram is the identity."""
    X = batch(*shape, seed=3)
    M = X.T if axis == 0 else X
    Mc = M - M.mean(0)
    sigma = Mc.T @ Mc / (M.shape[0] - 1)
    L = torch.linalg.cholesky(sigma + 0.1 * torch.eye(sigma.shape[0], dtype=torch.float64))
    expected = torch.linalg.solve_triangular(L, Mc.T, upper=False).T
    out = cholesky_whiten(X, axis=axis, eps=0.1)
    assert torch.allclose(out, expected if axis == 1 else expected.T, atol=1e-12)
    lam = torch.linalg.eigvalsh(sigma).clamp_min(0)
    got = torch.linalg.eigvalsh(covariance(out, axis))
    assert torch.allclose(got, lam / (lam + 0.1), atol=1e-12)
    assert torch.allclose(got, torch.linalg.eigvalsh(covariance(zca_whiten(X, axis, eps=0.1), axis)), atol=1e-12)
    assert float((got - 1).abs().max()) > 1e-3
    if shape[0 if axis == 0 else 1] < shape[1 if axis == 0 else 0]:  # full rank: eps = 0 whitens exactly
        n = sigma.shape[0]
        assert torch.allclose(covariance(cholesky_whiten(X, axis=axis), axis), torch.eye(n, dtype=torch.float64), atol=1e-10)


@pytest.mark.parametrize("axis", [0, 1])
def test_standardise_with_eps_divides_by_sqrt_of_variance_plus_eps(axis):
    """standardise with eps = 0.5 (float64): every unit is X_c / sqrt(var + 0.5), so its variance is
    var/(var + 0.5), not 1 (dropping eps fails this); a constant unit gives zeros instead of an error."""
    X = batch(20, 7, seed=4, spread=0.5)
    X = X if axis == 1 else X.T
    M = X if axis == 1 else X.T
    Mc = M - M.mean(0)
    var = (Mc * Mc).sum(0) / (M.shape[0] - 1)
    out = standardise(X, axis=axis, eps=0.5)
    O = out if axis == 1 else out.T
    assert torch.allclose(O, Mc / (var + 0.5).sqrt(), atol=1e-13)
    assert torch.allclose((O * O).sum(0) / (M.shape[0] - 1), var / (var + 0.5), atol=1e-13)
    assert float((var / (var + 0.5) - 1).abs().min()) > 1e-2
    C = X.clone()
    if axis == 1:
        C[:, 0] = 3.0
    else:
        C[0, :] = 3.0
    Z = standardise(C, axis=axis, eps=0.5)
    assert float((Z[:, 0] if axis == 1 else Z[0, :]).abs().max()) == 0.0
    with pytest.raises(ValueError, match="zero variance"):
        standardise(C, axis=axis)


def test_spectral_transform_clamps_rounding_below_zero_and_refuses_an_undefined_g():
    """spectral_transform on a singular covariance (float64, 6 samples of 8 features, axis 1: rank 5 of 8), whose
    eigh returns eigenvalues slightly below zero: they are clamped to 0 (within n * machine epsilon * largest),
    so g = sqrt gives a finite output with covariance eigenvalues lambda * g(lambda)^2 = lambda^2 (1e-12);
    g = lambda^{-1/2}, undefined at 0, raises ValueError instead of returning NaN (check=False returns it)."""
    X = batch(6, 8, seed=0)
    lam = torch.linalg.eigvalsh(covariance(X))
    assert float(lam.min()) < 0  # rounding put a zero eigenvalue below zero: sqrt would give NaN unclamped
    out = spectral_transform(X, torch.sqrt)
    assert bool(torch.isfinite(out).all())
    got = torch.linalg.eigvalsh(covariance(out))
    assert torch.allclose(got, torch.sort(lam.clamp_min(0) ** 2).values, atol=1e-12)
    with pytest.raises(ValueError, match="g is not finite"):
        spectral_transform(X, torch.rsqrt)
    assert not bool(torch.isfinite(spectral_transform(X, torch.rsqrt, check=False)).all())
    # the negative eigenvalue lies within the clamping tolerance n * machine epsilon * largest
    assert float(lam.min()) >= -lam.shape[0] * torch.finfo(torch.float64).eps * float(lam.abs().max())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_spectral_transform_refuses_rsqrt_on_every_singular_covariance_whatever_the_sign_of_rounding(dtype):
    """Referee finding 2 (chapter 8): the null eigenvalues of a singular covariance may round slightly *above* zero;
    only those below were clamped, so lambda^(-1/2) was applied to them silently in 1 of 200 float64 batches (4 in
    float32). Now every eigenvalue within n * machine epsilon * largest of zero is 0 (ZCA's rule): on 200 batches of
    5 samples of 8 features (axis 1: rank 4 of 8), rsqrt raises in every one, like zca_whiten, including batches
    whose null eigenvalues all rounded above zero (asserted to occur); and g = sqrt then gives covariance eigenvalues
    lambda^2 with the null ones exactly 0 in the eigenbasis (to 1e-12 relative to the largest)."""
    positive_side = 0
    for seed in range(200):
        X = torch.randn(5, 8, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)
        lam = torch.linalg.eigh(covariance(X))[0]  # as spectral_transform computes them
        positive_side += int(float(lam[:4].min()) > 0)
        with pytest.raises(ValueError, match="g is not finite"):
            spectral_transform(X, torch.rsqrt)
        with pytest.raises(ValueError, match="numerical rank 4 of 8"):
            zca_whiten(X)
    assert positive_side > 0  # the positive side of rounding is exercised
    X = torch.randn(5, 8, generator=torch.Generator().manual_seed(191), dtype=torch.float64)
    lam = torch.linalg.eigvalsh(covariance(X))
    got = torch.linalg.eigvalsh(covariance(spectral_transform(X, torch.sqrt)))
    assert float((got[:4]).abs().max()) <= 1e-12 * float(lam.max()) ** 2
    assert torch.allclose(got[4:], lam[4:] ** 2, rtol=1e-10)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("scale", [1e-30, 1e-25, 1e-10, 1.0, 1e10, 1e20, 1e30])
def test_standardise_is_exact_in_float32_at_every_input_scale(axis, scale):
    """The referee's failures: standardise in float32 gave all zeros at scale 1e20 and a false 'zero variance'
    at 1e-25 (the variance under- and overflowed). Each unit is divided by its largest |entry| first (eps by its
    square): in float32 from 1e-30 to 1e30 the output equals the float64 output at scale 1 within 10 n u
    (n = 16 entries per unit at most, u = 2^-24)."""
    X = torch.randn(8, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    exact = standardise(X, axis=axis)
    got = standardise((X * scale).float(), axis=axis).double()
    assert float((got - exact).abs().max()) <= 10 * 16 * 2.0**-24 * float(exact.abs().max()), scale


@pytest.mark.parametrize("scale", [1e-23, 1e-20, 1e-10, 1.0, 1e10, 1e20])
def test_with_eps_layer_norm_via_gram_and_standardise_are_exact_in_float32_at_every_scale(scale):
    """eps > 0 in float32 at small scales: eps / s^2 overflowed float32 (s = the largest |entry|, 1e-20), and the
    output was exactly 0 where LayerNorm is a representable non-zero number (the referee's reproducer). Both now
    form eps / s^2 in float64. Reference: the float64 map of the float32 input, with relative error at most
    10 n u of the output's largest entry (n = 40 features, 8 samples; u = 2^-24)."""
    X = torch.randn(8, 40, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    Y = (X * scale).float()
    exact = F.layer_norm(Y.double(), (40,), eps=1e-5)
    got = layer_norm_via_gram(Y, 1e-5).double()
    assert float(exact.abs().max()) > 0 and float((got - exact).abs().max()) <= 10 * 40 * 2.0**-24 * float(exact.abs().max())
    for axis in (0, 1):
        exact = standardise(Y.double(), axis=axis, eps=1e-5)
        got = standardise(Y, axis=axis, eps=1e-5).double()
        assert float((got - exact).abs().max()) <= 10 * 40 * 2.0**-24 * float(exact.abs().max()), (axis, scale)


@pytest.mark.parametrize("scale", [1e-160, 1e-300])
@pytest.mark.parametrize("axis", [0, 1])
def test_eps_positive_at_float64_scales_where_s_squared_underflows(scale, axis):
    """Referee finding 3 (chapter 8, float64): with eps > 0 the batch was divided by its largest |entry| s and eps
    replaced by eps / s^2, which overflows float64 once s^2 underflows (s below about 1e-154): zca_whiten returned
    zeros and cholesky_whiten raised. Exact reference: at scale c the output is
    c X0c (c^2 Sigma0 + eps I)^{-1/2} = c X0c / sqrt(eps) (1 + O(c^2 lambda_max / eps)), and c^2 lambda_max / eps
    < 1e-300 here, far below u; so zca_whiten, cholesky_whiten, standardise (either axis) and layer_norm_via_gram
    (rows) must return the centred batch over sqrt(eps) within 10 n u of its largest entry (n = 40 entries per
    unit at most, u = 2^-53), and nothing else (no zeros, no error)."""
    eps, u = 0.1, 2.0**-53
    X0 = torch.randn(40, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    X = X0 * scale
    ref = centre(X0, axis) * scale / math.sqrt(eps)
    tol = 10 * 40 * u * float(ref.abs().max())
    for name, f in (("zca_whiten", zca_whiten), ("cholesky_whiten", cholesky_whiten), ("standardise", standardise)):
        got = f(X, axis, eps)
        assert float((got - ref).abs().max()) <= tol, (name, float(got.abs().max()), float(ref.abs().max()))
    if axis == 0:
        got = layer_norm_via_gram(X, eps)
        ref_ln = centre(X0, 0) * scale / math.sqrt(eps)
        assert float((got - ref_ln).abs().max()) <= tol


U32 = torch.finfo(torch.float32).eps / 2  # the unit roundoff of float32


def autocast_batch(axis: int) -> torch.Tensor:
    """A float32 batch of 512 observations of 64 units on ``axis`` (the referee's reproducer of issue 31)."""
    shape = (512, 64) if axis == 1 else (64, 512)
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


def whiteness_tolerance(X: torch.Tensor, axis: int) -> float:
    """``(m + n) u kappa``: a first-order bound on max|C - I| of a whitening computed in float32, for ``m``
    observations of ``n`` units (rounding of the covariance, ``m u``, and of its factorisation, ``n u``, in relative
    terms, amplified by the condition number ``kappa`` of the covariance, taken from float64)."""
    lam = torch.linalg.eigvalsh(covariance(X.double(), axis))
    m, n = (X.shape[-2], X.shape[-1]) if axis == 1 else (X.shape[-1], X.shape[-2])
    return (m + n) * U32 * float(lam[-1] / lam[0])


@pytest.mark.parametrize("name", ["zca_whiten", "cholesky_whiten", "spectral_transform"])
@pytest.mark.parametrize("axis", [0, 1])
def test_whitening_under_autocast_computes_in_the_inputs_dtype(name, axis):
    """Issue 31, finding 1: inside ``torch.autocast('cpu', bfloat16)`` (AMP, as INTL's ImageNet run trains) a
    float32 batch is whitened in float32: the output is float32 and max|C - I| meets the same tolerance as outside
    autocast, (m + n) u kappa (about 1.4e-4 here; measured 1e-6). Before, the covariance product ran in bfloat16:
    ZCA returned bfloat16 with max|C - I| = 8.9e-3 and Cholesky float32 with 4.5e-3."""
    f = {"zca_whiten": lambda Z: zca_whiten(Z, axis),
         "cholesky_whiten": lambda Z: cholesky_whiten(Z, axis),
         "spectral_transform": lambda Z: spectral_transform(Z, torch.rsqrt, axis)}[name]
    X = autocast_batch(axis)
    tol = whiteness_tolerance(X, axis)
    eye = torch.eye(64, dtype=torch.float64)
    for autocast in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            Y = f(X)
        assert Y.dtype == torch.float32, (autocast, Y.dtype)
        err = float((covariance(Y.double(), axis) - eye).abs().max())
        assert err <= tol, (autocast, err, tol)


def test_covariance_and_the_matrix_helpers_under_autocast_compute_in_the_inputs_dtype():
    """Issue 31, finding 1, the other functions of the module that form a product of the data: inside
    ``torch.autocast('cpu', bfloat16)`` they return float32 and meet float32 bounds. ``covariance``: each entry within
    (m + 2) u of the float64 one in units of (|X_c|^T |X_c|)/(m - 1) (a dot product of m terms, after centring);
    ``zca_matrix``: W Sigma W within (m + n) u kappa of I; ``cholesky_rotation``: Q^T Q within n u kappa^(1/2) of I
    times 8; ``layer_norm_via_gram``: within 8 d u of the float64 LayerNorm (its own test's bound). In bfloat16
    (u = 2^-9) every one of them is off by far more."""
    X = autocast_batch(1)
    m, n = X.shape
    Xc = (X - X.mean(0)).double()
    sigma64 = covariance(X.double())
    lam = torch.linalg.eigvalsh(sigma64)
    kappa = float(lam[-1] / lam[0])
    eye = torch.eye(n, dtype=torch.float64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        sigma = covariance(X)
        W = zca_matrix(sigma)
        Q = cholesky_rotation(sigma)
        ln = layer_norm_via_gram(X[:8])
    assert (sigma.dtype, W.dtype, Q.dtype, ln.dtype) == (torch.float32,) * 4
    scale = Xc.abs().T @ Xc.abs() / (m - 1)
    assert bool(((sigma.double() - sigma64).abs() <= (m + 2) * U32 * scale).all())
    W64 = W.double()
    assert float((W64 @ sigma64 @ W64 - eye).abs().max()) <= (m + n) * U32 * kappa
    Q64 = Q.double()
    assert float((Q64.T @ Q64 - eye).abs().max()) <= 8 * n * U32 * math.sqrt(kappa)
    exact = F.layer_norm(X[:8].double(), (n,), eps=0.0)
    assert float((ln.double() - exact).abs().max()) <= 8 * n * U32


def test_a_full_collapse_to_rounding_gives_what_the_chapter_promises():
    """256 identical float32 samples of 128 features (and the axis-0 analogue, samples constant over their features):
    the rounded mean leaves a centred batch of rounding size, whose float32 covariance made ``eigh`` fail to converge
    (seed 0). With eps > 0 ZCA, Cholesky and the ST give X_c / sqrt(eps), of rounding size (within the centring bound
    divided by sqrt(eps)); with eps = 0 they raise the collapse ValueError, as do standardise and LayerNorm via the
    Gram for a unit constant to rounding."""
    from lnbook.whitening.batch_axes import centring_rounding_bound, units_view

    eps = 0.1
    for seed in range(6):
        g = torch.Generator().manual_seed(seed)
        for dtype in (torch.float32, torch.float64):
            for X, axis in ((torch.randn(128, generator=g).to(dtype).repeat(256, 1), 1),
                            (torch.randn(256, 1, generator=g).to(dtype).repeat(1, 128), 0)):
                M = units_view(X, axis)
                limit = 2 * float(centring_rounding_bound(M).max()) / math.sqrt(eps)  # 2: the rescaling's rounding
                for out in (zca_whiten(X, axis, eps), cholesky_whiten(X, axis, eps),
                            spectral_transform(X, lambda v: (v + eps).rsqrt(), axis)):
                    assert out.dtype == dtype and float(out.abs().max()) <= limit
                expected = "all samples identical" if axis == 1 else "every sample constant over its features"
                for whiten in (zca_whiten, cholesky_whiten):
                    with pytest.raises(ValueError, match=f"(?s)to rounding.*{expected}"):
                        whiten(X, axis, 0.0)
                with pytest.raises(ValueError, match="g is not finite"):
                    spectral_transform(X, lambda v: v.rsqrt(), axis)
                with pytest.raises(ValueError, match="to rounding"):
                    standardise(X, axis)
                assert float(standardise(X, axis, eps).abs().max()) <= limit
    # samples constant over their features whose rounded mean left a nonzero centred row (the others centre to 0)
    X = torch.randn(8, 1, generator=torch.Generator().manual_seed(0)).repeat(1, 1000)
    rounded = X[(X - X.mean(dim=-1, keepdim=True) != 0).any(dim=-1)]
    assert rounded.shape[0] > 0
    with pytest.raises(ValueError, match="to rounding"):
        layer_norm_via_gram(rounded)
    assert float(layer_norm_via_gram(rounded, eps).abs().max()) <= 2 * 1003 * 2.0**-24 * float(rounded.abs().max()) / math.sqrt(eps)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_batches_with_a_large_common_offset_are_not_taken_for_a_collapse(dtype):
    g = torch.Generator().manual_seed(2)
    X = (1e3 + torch.randn(256, 16, generator=g, dtype=torch.float64)).to(dtype)
    for axis in (0, 1):
        Xa = X if axis == 1 else X.T
        assert torch.isfinite(standardise(Xa, axis)).all()
        assert torch.isfinite(zca_whiten(Xa, axis)).all() and torch.isfinite(cholesky_whiten(Xa, axis)).all()
    assert torch.isfinite(layer_norm_via_gram(X.T)).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_standardise_refuses_a_unit_constant_to_rounding(dtype):
    """standardise divides each unit by its own largest |entry|, which turns an exactly constant unit into +-1 and
    makes its centring exact; a unit whose entries differ by one ulp lies within the rounding error of its mean (the
    mean's worst-case error is about n ulps), so it cannot be told from a constant one: refused with eps = 0, divided
    by sqrt(eps) with eps > 0, on either axis. Its neighbours with a real spread are standardised as usual."""
    one_ulp_up = torch.nextafter(torch.ones((), dtype=dtype), torch.full((), 2.0, dtype=dtype))
    X = torch.randn(256, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64).to(dtype)
    X[:, 2] = 1.0
    X[::2, 2] = one_ulp_up
    for axis, Xa in ((1, X), (0, X.T)):
        with pytest.raises(ValueError, match="to rounding"):
            standardise(Xa, axis)
        out = standardise(Xa, axis, 0.1)
        unit = out[:, 2] if axis == 1 else out[2]
        assert float(unit.abs().max()) <= 2 * 259 * torch.finfo(dtype).eps / math.sqrt(0.1)
