"""INTL's trace loss: the reference formulas, its floor, the equal spectrum as its minimiser, the penalty on
low rank, the 'Robin Hood' gradient on the spectrum (proved), and the gradient through IterNorm (numerical)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lnbook.whitening import (
    covariance, intl_beta, intl_loss, iter_norm, iternorm_spectrum, small_eigenvalue_weight, spectral_loss,
    spectral_loss_gradient, standardise, trace_loss, trace_loss_floor, trace_loss_gradient, zca_whiten,
)
from tests.whitening import reference_intl as ref


def batch(N, d, seed=0):
    return torch.randn(N, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("axis", [0, 1])
def test_trace_loss_and_intl_loss_match_the_reference(axis):
    z1, z2 = batch(32, 48, 1), batch(32, 48, 2)
    assert float(trace_loss(z1, axis)) == pytest.approx(ref.trace_loss(z1.numpy(), axis), rel=1e-13)
    for T in (1, 4):
        assert float(intl_loss(z1, z2, T, axis)) == pytest.approx(ref.intl([z1.numpy(), z2.numpy()], T, axis), rel=1e-12)


def test_beta_follows_the_code_rule():
    assert intl_beta(256, 2048, axis=0) == pytest.approx(0.05) == pytest.approx(ref.trade_off(256, 2048, 0))
    assert intl_beta(256, 8192, axis=1) == pytest.approx(0.10) == pytest.approx(ref.trade_off(256, 8192, 1))
    z1, z2 = batch(16, 40, 3), batch(16, 40, 4)
    assert float(intl_loss(z1, z2, 4, 0, beta=0.0)) < float(intl_loss(z1, z2, 4, 0))


def test_a_nonpositive_beta_is_never_used_silently():
    """The code's rule gives beta <= 0 for N <= 8 (axis 0) or d <= 8 (axis 1): intl_beta returns the code's
    value with a warning, intl_loss refuses unless beta is passed explicitly; sizes above 8 are silent."""
    for N, d, axis, value in [(4, 64, 0, -0.01), (8, 64, 0, 0.0), (64, 4, 1, -0.01)]:
        with pytest.warns(UserWarning, match="<= 0"):
            assert intl_beta(N, d, axis) == pytest.approx(value, abs=1e-15)
        assert value == pytest.approx(ref.trade_off(N, d, axis), abs=1e-15)  # what the official code uses
        z1, z2 = batch(max(N, 2), max(d, 2), 10), batch(max(N, 2), max(d, 2), 11)
        with pytest.raises(ValueError, match="pass beta explicitly"):
            intl_loss(z1, z2, 4, axis)
        explicit = float(intl_loss(z1, z2, 4, axis, beta=value))  # the official behaviour, on request
        assert explicit == pytest.approx(ref.intl([z1.numpy(), z2.numpy()], 4, axis), rel=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert intl_beta(16, 4, 0) > 0 and intl_beta(4, 16, 1) > 0
        intl_loss(batch(16, 6, 12), batch(16, 6, 13), 4, 0)


def test_quadratic_mean_bound_sympy():
    """sum_j (c_j - 1)^2 = (n - sum c)^2 / n + sum_j (c_j - mean c)^2, so TL >= (n - tr C)^2 / n, with equality
    iff the diagonal is constant."""
    c = sp.symbols("c1:6", real=True)
    n = len(c)
    mean = sum(c) / n
    assert sp.expand(sum((ci - 1) ** 2 for ci in c) - (n - sum(c)) ** 2 / n - sum((ci - mean) ** 2 for ci in c)) == 0


def test_the_bound_is_attained_in_a_hadamard_basis():
    """Rotating a diagonal covariance by a normalised Hadamard matrix makes its diagonal constant."""
    H = torch.tensor([[1.0]], dtype=torch.float64)
    for _ in range(4):
        H = torch.cat([torch.cat([H, H], 1), torch.cat([H, -H], 1)], 0)
    H = H / 4
    lam = torch.linspace(0.1, 2.0, 16, dtype=torch.float64)
    C = H @ torch.diag(lam) @ H.T
    assert torch.allclose(C.diagonal(), torch.full((16,), float(lam.mean()), dtype=torch.float64), atol=1e-12)
    assert float(((C.diagonal() - 1) ** 2).sum()) == pytest.approx((16 - float(lam.sum())) ** 2 / 16, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 64), T=st.integers(1, 8), seed=st.integers(0, 10_000))
def test_equal_spectrum_maximises_the_output_trace(n, T, seed):
    """Jensen on the concave phi_T: sum_i phi_T(x_i) <= n phi_T(1/n) for every spectrum with sum 1."""
    x = torch.tensor(np.random.default_rng(seed).dirichlet(np.full(n, 0.3)))
    assert float(iternorm_spectrum(x, T).sum()) <= n * float(iternorm_spectrum(torch.tensor(1.0 / n, dtype=torch.float64), T)) + 1e-12


def test_trace_loss_floor_and_the_penalty_on_low_rank():
    """The floor (n - r phi_T(1/r))^2/n grows as the rank r falls (phi_T(x)/x decreases, by concavity)."""
    assert trace_loss_floor(256, 4) == pytest.approx(209.6, abs=0.05)
    assert trace_loss_floor(256, 4, rank=64) == pytest.approx(215.7, abs=0.05)
    assert trace_loss_floor(256, 4, rank=1) == pytest.approx(254.0, abs=0.05)
    floors = [trace_loss_floor(256, 4, rank=r) for r in range(1, 257)]
    assert all(a > b for a, b in zip(floors, floors[1:]))
    assert [round(trace_loss_floor(n, 4), 1) for n in (128, 512, 1024)] == [85.8, 463.3, 974.0]
    assert round(0.05 * trace_loss_floor(256, 4), 1) == 10.5  # times the code's beta at batch 256


def constant_diagonal_frame(n, r):
    """n x r orthonormal columns whose projection F F^T has the constant diagonal r/n: blocks of the real
    discrete Fourier basis (the constant vector, (cos, sin) pairs with row norms 2/n, the alternating vector)."""
    j = torch.arange(n, dtype=torch.float64)
    pairs = [torch.stack([torch.cos(2 * math.pi * k * j / n), torch.sin(2 * math.pi * k * j / n)], 1) * math.sqrt(2 / n)
             for k in range(1, (n - 1) // 2 + 1)]
    const, alt = torch.full((n, 1), 1 / math.sqrt(n), dtype=torch.float64), ((-1.0) ** j)[:, None] / math.sqrt(n)
    if r % 2:
        blocks = [const] + pairs[: (r - 1) // 2]
    elif r // 2 <= len(pairs):
        blocks = pairs[: r // 2]
    else:  # r = n even
        blocks = [const, alt] + pairs
    return torch.cat(blocks, 1)


def batch_with_covariance_frame(F, other, axis, seed):
    """A batch whose covariance over ``axis`` is F F^T (size n = F.shape[0]): ``other`` is the number of samples
    (axis 1) or features (axis 0); needs other - 1 >= rank."""
    r = F.shape[1]
    A = torch.randn(other, r, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    B, _ = torch.linalg.qr(A - A.mean(dim=0, keepdim=True))  # r orthonormal columns, orthogonal to 1
    M = math.sqrt(other - 1) * B @ F.T  # other x n, centred over its rows, M^T M / (other - 1) = F F^T
    shift = torch.randn(1, F.shape[0], generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    return (M + shift) if axis == 1 else (M + shift).T


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 12), data=st.data(), T=st.integers(0, 6), axis=st.sampled_from([0, 1]), seed=st.integers(0, 1000))
def test_the_rank_r_floor_is_attained(n, data, T, axis, seed):
    """thm-ch8-trace-loss part 3, attainment: an input of rank r with r equal non-zero eigenvalues whose span has
    a constant-diagonal projection (real Fourier blocks) gives IterNorm an output whose trace loss equals
    trace_loss_floor(n, T, r) to 1e-9 relative, on either axis; r = n is part 2 (Sigma = cI)."""
    r = data.draw(st.integers(1, n))
    F = constant_diagonal_frame(n, r)
    P = F @ F.T
    assert torch.allclose(F.T @ F, torch.eye(r, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(P.diagonal(), torch.full((n,), r / n, dtype=torch.float64), atol=1e-12)
    X = batch_with_covariance_frame(F, r + 3, axis, seed)
    assert torch.allclose(covariance(X, axis), P, atol=1e-10)
    tl = float(trace_loss(iter_norm(X, T, axis), axis))
    assert tl == pytest.approx(trace_loss_floor(n, T, rank=r), rel=1e-9, abs=1e-12)


@settings(max_examples=20, deadline=None)
@given(N=st.integers(4, 20), data=st.data(), seed=st.integers(0, 10_000), T=st.integers(0, 6))
def test_iter_norm_output_never_goes_below_the_floor_of_its_rank(N, data, seed, T):
    """Random batches of rank r < N (axis 0): the trace loss of IterNorm's output is never below the rank-r
    floor, which is above the full-rank floor."""
    r = data.draw(st.integers(1, N - 1))
    d = 2 * N + 3
    X = batch(N, r, seed) @ batch(r, d, seed + 1) * torch.logspace(0, 1, d, dtype=torch.float64)
    lam = torch.linalg.eigvalsh(covariance(X, 0))
    assert int((lam > 1e-9 * lam.max()).sum()) == r
    tl = float(trace_loss(iter_norm(X, T, axis=0), axis=0))
    assert tl >= trace_loss_floor(N, T, rank=r) - 1e-9 and trace_loss_floor(N, T, rank=r) > trace_loss_floor(N, T) - 1e-12


@settings(max_examples=20, deadline=None)
@given(N=st.integers(4, 20), seed=st.integers(0, 10_000), T=st.integers(0, 6))
def test_iter_norm_output_never_goes_below_the_floor(N, seed, T):
    X = batch(N, 2 * N + 3, seed) * torch.logspace(0, 1, 2 * N + 3, dtype=torch.float64)
    Y = iter_norm(X, T, axis=0)
    assert float(trace_loss(Y, axis=0)) >= trace_loss_floor(N, T) - 1e-9
    # and the trace loss is at most the Frobenius form ||C - I||^2 of the spectrum
    lam = torch.linalg.eigvalsh(covariance(X, 0)).clamp_min(0)
    assert float(trace_loss(Y, axis=0)) <= float(spectral_loss(lam, T)) + 1e-9


def test_small_eigenvalue_weight_is_strictly_decreasing_sympy():
    """q = (1 - phi_T) phi_T' has q' = -phi_T'^2 + (1 - phi_T) phi_T'' < 0 on [0, 1): Sturm, T = 1..3."""
    x = sp.symbols("x")
    phi = x
    for T in range(1, 4):
        phi = sp.expand(phi * (3 - phi) ** 2 / 4)
        q = sp.Poly(sp.expand((1 - phi) * sp.diff(phi, x)), x)
        dq = q.diff(x)
        assert dq.count_roots(0, 1) == 1 and dq.eval(1) == 0 and dq.eval(0) < 0
        assert q.eval(0) == sp.Rational(9, 4) ** T and q.eval(1) == 0
    grid = torch.linspace(0, 1, 2001, dtype=torch.float64)
    for T in range(1, 9):  # numerically (T up to 8): strictly decreasing while q > 1e-6; beyond, rounding (1e-25)
        q = small_eigenvalue_weight(grid, T)
        assert bool((q.diff() <= 1e-25).all()) and bool((q.diff()[q[1:] > 1e-6] < 0).all())


@pytest.mark.parametrize("T", [1, 4])
def test_spectral_gradient_formula_and_scale_invariance(T):
    lam = torch.tensor([0.05, 0.2, 1.0, 3.0, 7.5], dtype=torch.float64, requires_grad=True)
    spectral_loss(lam, T).backward()
    closed = spectral_loss_gradient(lam.detach(), T)
    assert torch.allclose(lam.grad, closed, atol=1e-12)
    h = 1e-6
    fd = torch.stack([(spectral_loss(lam.detach() + h * e, T) - spectral_loss(lam.detach() - h * e, T)) / (2 * h)
                      for e in torch.eye(5, dtype=torch.float64)])
    assert torch.allclose(fd, closed, atol=1e-8)
    assert float((lam.detach() * closed).sum()) == pytest.approx(0.0, abs=1e-12)  # scale-invariant
    descent = -closed  # the smallest grows, the largest shrinks, and the push decreases with the eigenvalue
    assert float(descent[0]) > 0 > float(descent[-1]) and bool((descent.diff() < 0).all())


def test_zero_eigenvalues_are_always_pushed_up():
    lam = torch.tensor([0.0, 0.0, 1.0, 2.0], dtype=torch.float64)
    assert bool((spectral_loss_gradient(lam, 4)[:2] < 0).all())


@pytest.mark.parametrize("T", [1, 4])
def test_collapsed_spectrum_leaves_its_largest_eigenvalues_fixed_but_shrinks_their_shares(T):
    """thm-ch8-robin-hood's edge case: lambda = (1, 1, 0) (non-zero part equal) has a zero gradient on the largest
    eigenvalues and a push up on the zero; the largest shares x_k = lambda_k / S still fall along -grad L. Random
    spectra with zeros: the largest eigenvalue never grows, its share falls, every zero grows."""
    lam = torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64)
    grad = spectral_loss_gradient(lam, T)
    assert torch.allclose(grad[:2], torch.zeros(2, dtype=torch.float64), atol=1e-12)
    assert float(grad[2]) < -1.0
    g = torch.Generator().manual_seed(3)
    spectra = [lam] + [torch.rand(6, generator=g, dtype=torch.float64) * (torch.rand(6, generator=g) > 0.4)
                       for _ in range(50)]
    for lam in spectra:
        if float(lam.sum()) == 0:
            continue
        v = -spectral_loss_gradient(lam, T)  # the flow's velocity
        S, k = lam.sum(), int(lam.argmax())
        share_velocity = (v[k] - lam[k] / S * v.sum()) / S
        assert float(v[k]) <= 1e-12 and float(v.sum()) >= -1e-12
        assert float(share_velocity) < 0
        assert bool((v[lam == 0] > 0).all())


@pytest.mark.parametrize("T", [1, 4])
def test_gradient_flow_on_the_spectrum_reaches_the_equal_spectrum(T):
    """Adam on log lambda from condition number 1e3 (d = 16): ends with condition number < 1.01."""
    log_lam = torch.linspace(0, math.log(1e3), 16, dtype=torch.float64).requires_grad_(True)
    opt = torch.optim.Adam([log_lam], lr=0.05)
    for _ in range(1500):
        opt.zero_grad()
        spectral_loss(log_lam.exp(), T).backward()
        opt.step()
    lam = log_lam.detach().exp()
    assert float(lam.max() / lam.min()) < 1.01


@pytest.mark.parametrize("axis", [0, 1])
def test_trace_loss_gradient_closed_form(axis):
    Z = batch(12, 20, 5).requires_grad_(True)
    trace_loss(Z, axis).backward()
    assert torch.allclose(Z.grad, trace_loss_gradient(Z.detach(), axis), atol=1e-13)


def test_axis_zero_trace_loss_is_a_soft_layer_norm_constraint():
    X = batch(10, 30, 6) * 3 + 1
    assert float(trace_loss(standardise(X, 0), axis=0)) == pytest.approx(0.0, abs=1e-20)
    assert float(trace_loss(X, axis=0)) > 100


def test_at_T_one_the_trace_loss_hardly_penalises_low_rank():
    """The chapter's reading of the T = 1 collapse (part 3 of thm-ch8-trace-loss): at the lab's batch (N = 64,
    axis 0, the code's beta = 0.03) the floor of rank 5 exceeds that of full rank by 0.52 at T = 1 against 25.6 at
    T = 4, i.e. 0.015 against 0.77 once weighted by beta (0.0155 and 0.768), per view: about fifty times more; and
    the penalty grows with T."""
    beta = intl_beta(64, 128, axis=0)
    assert beta == pytest.approx(0.03, abs=1e-15)
    gap = {T: trace_loss_floor(64, T, rank=5) - trace_loss_floor(64, T) for T in (1, 4)}
    assert gap[1] == pytest.approx(0.516, abs=5e-4) and gap[4] == pytest.approx(25.61, abs=5e-3)
    extra = {T: beta * (trace_loss_floor(64, T, rank=5) - trace_loss_floor(64, T)) for T in (1, 2, 4, 8)}
    assert extra[1] == pytest.approx(0.0155, abs=5e-5) and extra[4] == pytest.approx(0.768, abs=5e-4)
    assert 45 < extra[4] / extra[1] < 55
    assert extra[1] < extra[2] < extra[4] < extra[8]


def test_the_trace_loss_gradient_can_grow_the_largest_eigenvalue():
    """What thm-ch8-robin-hood does NOT say: its conclusion is for the spectral loss ||C - I||^2, not for the trace
    loss. Counterexample, float64: IterNorm with T = 1 over axis 1 of a batch whose covariance is U diag(lam) U^T,
    lam = (0.3, 2.5, 2.7), U a fixed random rotation (seed 6). Along minus the gradient of the trace loss of the
    real IterNorm output with respect to lam (U fixed) the largest eigenvalue grows (about +0.013), while along
    minus the gradient of the spectral loss it shrinks. The gradient through iter_norm equals the closed form
    TL(lam) = sum_j ((U phi_T(lam/S) U^T)_jj - 1)^2 to 1e-10."""
    lam0 = torch.tensor([0.3, 2.5, 2.7], dtype=torch.float64)
    U, _ = torch.linalg.qr(torch.randn(3, 3, generator=torch.Generator().manual_seed(6), dtype=torch.float64))
    Z = zca_whiten(torch.randn(50, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64))  # cov(Z) = I

    def through_iter_norm(lam):
        return trace_loss(iter_norm(Z * lam.sqrt() @ U.T, 1, axis=1))  # the batch's covariance is U diag(lam) U^T

    def closed_form(lam):
        C = (U * iternorm_spectrum(lam / lam.sum(), 1)) @ U.T
        return ((C.diagonal() - 1) ** 2).sum()

    grads = []
    for f in (through_iter_norm, closed_form):
        lam = lam0.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(f(lam), lam)
        grads.append(-g)
    assert torch.allclose(grads[0], grads[1], atol=1e-10)
    descent = grads[0]
    assert float(descent[2]) > 0.01  # the largest eigenvalue grows along minus the trace-loss gradient
    assert float(descent[0]) > 0.1 and float(descent[1]) < 0  # (the smallest grows, the middle one shrinks)
    assert float(-spectral_loss_gradient(lam0, 1)[2]) < 0  # the spectral loss shrinks it (thm-ch8-robin-hood)
    assert float(through_iter_norm(lam0)) < float(spectral_loss(lam0, 1))  # TL < ||C - I||^2: C is not diagonal


def test_descending_the_trace_loss_through_iternorm_equalises_the_input_spectrum():
    """The implicit update: gradient steps on the *input* of IterNorm (T = 4, axis 1, d = 8) with the trace loss
    of its output shrink the input's condition number from about 100 to below 1.1, and the loss reaches its floor
    within 1% (numerical, not proved)"""
    X = (batch(64, 8, 7) * torch.logspace(0, 1, 8, dtype=torch.float64)).requires_grad_(True)
    kappa = lambda Z: float((lambda v: v.max() / v.min())(torch.linalg.eigvalsh(covariance(Z.detach()))))  # noqa: E731
    assert kappa(X) > 50
    opt = torch.optim.Adam([X], lr=0.02)
    for _ in range(1500):
        opt.zero_grad()
        loss = trace_loss(iter_norm(X, 4, axis=1), axis=1)
        loss.backward()
        opt.step()
    assert kappa(X) < 1.1 and float(loss.detach()) < 1.01 * trace_loss_floor(8, 4)


def test_trace_loss_and_intl_errors():
    with pytest.raises(ValueError, match="at least 2 samples"):
        trace_loss(batch(1, 4))
    with pytest.raises(ValueError, match="same shape"):
        intl_loss(batch(8, 4), batch(8, 5))
    with pytest.raises(ValueError, match=">= 0"):
        intl_loss(batch(8, 4), batch(8, 4), T=-2)
    with pytest.raises(ValueError, match="full collapse"):
        intl_loss(torch.ones(16, 4, dtype=torch.float64), torch.ones(16, 4, dtype=torch.float64))


def test_intl_loss_under_torch_func():
    z1, z2 = batch(16, 24, 8), batch(16, 24, 9)
    g = torch.func.grad(lambda a: intl_loss(a, z2))(z1)
    a = z1.clone().requires_grad_(True)
    intl_loss(a, z2).backward()
    assert torch.allclose(g, a.grad, atol=1e-12)


def test_the_smallest_eigenvalue_grows_unless_the_spectrum_is_equal():
    """Along minus the gradient of L the smallest eigenvalue grows for every spectrum that is not equal
    (zeros included); for an equal spectrum the gradient vanishes, so nothing grows: the qualification is needed."""
    g = torch.Generator().manual_seed(11)
    for T in (1, 4):
        for n in (2, 5, 16):
            for _ in range(20):
                lam = torch.rand(n, generator=g, dtype=torch.float64) ** 3
                lam[torch.randint(n, (1,), generator=g)] = 0.0 if n > 2 else lam.min()
                if torch.allclose(lam, lam.mean().expand(n)):
                    continue
                push = -spectral_loss_gradient(lam, T)
                assert float(push[lam.argmin()]) > 0, (T, lam)
            equal = torch.full((n,), 0.3, dtype=torch.float64)
            assert float(spectral_loss_gradient(equal, T).abs().max()) <= 1e-12 * float(small_eigenvalue_weight(torch.tensor(0.0, dtype=torch.float64), T))


def test_intl_loss_under_autocast_computes_in_the_inputs_dtype():
    """Issue 31, finding 1: inside ``torch.autocast('cpu', bfloat16)`` (AMP, as INTL's ImageNet run trains) the INTL
    loss of two float32 views (256 x 512, axis 0, T = 4) is float32 and within sqrt(u) (relative; the tolerance
    IterNorm holds its output covariance to) of the float64 loss, as outside autocast. Before, it raised
    ``TypeError: sigma has dtype torch.bfloat16``."""
    g = torch.Generator().manual_seed(1)
    z1, z2 = torch.randn(256, 512, generator=g), torch.randn(256, 512, generator=g)
    exact = float(intl_loss(z1.double(), z2.double(), 4, 0))
    for autocast in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = intl_loss(z1, z2, 4, 0)
        assert loss.dtype == torch.float32, autocast
        assert abs(float(loss) - exact) <= math.sqrt(torch.finfo(torch.float32).eps / 2) * abs(exact), autocast
