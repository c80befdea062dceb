r"""IterNorm: Newton's iteration for the inverse square root, and the polynomial it applies to the spectrum.

INTL's operator (winci-ai/INTL, ``methods/whitening.py``, written here from its formulas): with
:math:`\Sigma_N = \Sigma/\operatorname{tr}\Sigma`,

.. math::  P_0 = I,\qquad P_k = \tfrac32 P_{k-1} - \tfrac12 P_{k-1}^3\Sigma_N,\qquad W_T = P_T/\sqrt{\operatorname{tr}\Sigma}.

Each :math:`P_k` is a polynomial :math:`p_k(\Sigma_N)`, so the output covariance :math:`W_T\Sigma W_T` has
the eigenvalues :math:`\varphi_T(x) = x\,p_T(x)^2 = h^{\circ T}(x)` with :math:`h(y) = y(3-y)^2/4`
(:func:`iternorm_spectrum`). The chapter proves this and its consequences; here are the maps and the
measurements behind them.
"""

from __future__ import annotations

import functools
import math

import torch

from lnbook.util.device import without_autocast
from lnbook.util.validation import check_positive_int, holds
from lnbook.whitening.batch_axes import (
    as_batch, check_axis, collapsed_to_rounding, collapsed_to_rounding_error, from_units_view, scaled_to_unit_max,
    units_view,
)

__all__ = [
    "newton_map",
    "iternorm_spectrum",
    "iternorm_matrix",
    "iter_norm",
    "INSTABILITY_RATIO",
    "linearised_error_factor",
    "isotropic_output_eigenvalue",
    "iterations_to_whiten",
    "matrix_with_condition_number",
    "inverse_sqrt_errors",
    "best_iterations_over_bases",
    "coupled_newton_schulz_matrix",
    "coupled_inverse_sqrt_errors",
    "null_space_error_factor",
    "singular_rounding_estimate",
    "output_covariance_tolerance",
    "small_eigenvalue_rounding_estimate",
    "MEASURED_ABOVE_T",
    "output_covariance_error",
    "iter_norm_output_error",
    "batch_with_one_dominant_direction",
]

# iter_norm(check=True) measures its output for T above this (INTL's default T = 4 is not measured: see
# small_eigenvalue_rounding_estimate)
MEASURED_ABOVE_T = 4

# the eigenvalue ratio beyond which the linearised uncoupled Newton iteration amplifies rounding errors
INSTABILITY_RATIO = (9 - math.sqrt(17)) / 2


def newton_map(y):
    """One Newton step on an eigenvalue of the normalised covariance: ``h(y) = y (3 - y)^2 / 4``.

    Works on numbers, tensors and sympy expressions alike.
    """
    return y * (3 - y) ** 2 / 4


def iternorm_spectrum(x: torch.Tensor, T: int) -> torch.Tensor:
    r""":math:`\varphi_T(x) = h^{\circ T}(x)`: the eigenvalue that IterNorm with ``T`` steps gives an eigenvalue ``x``
    of :math:`\Sigma/\operatorname{tr}\Sigma` (so :math:`x\in[0,1]`; the polynomial is evaluated anywhere)."""
    x = as_batch(x, "x", 0, check=False)
    T = check_positive_int(T, "T", minimum=0)
    for _ in range(T):
        x = newton_map(x)
    return x


def _trace_check(trace: torch.Tensor, check: bool) -> None:
    if check and not holds((trace > 0).all()):
        raise ValueError(
            "the covariance has zero trace (full collapse: all samples identical, for the covariance over the batch "
            "(axis 1), or every sample constant over its features, for the Gram (axis 0); or the input is zero); "
            "IterNorm divides by the trace, and the official code returns NaN here. Nothing can be whitened: perturb "
            "the input, or pass check=False to get the NaN"
        )


def _checked_covariance(sigma: torch.Tensor, T: int, check: bool):
    """``(sigma, T, trace)`` of a square batch ``(..., n, n)`` with a positive trace, checked as both iterations need."""
    sigma = as_batch(sigma, "sigma", 2, check)
    T = check_positive_int(T, "T", minimum=0)
    if sigma.shape[-1] != sigma.shape[-2]:
        raise ValueError(f"sigma must be square, got shape {tuple(sigma.shape)}")
    trace = torch.diagonal(sigma, dim1=-2, dim2=-1).sum(-1)
    _trace_check(trace, check)
    return sigma, T, trace


@without_autocast
def iternorm_matrix(sigma: torch.Tensor, T: int, *, check: bool = True) -> torch.Tensor:
    r""":math:`W_T = P_T/\sqrt{\operatorname{tr}\Sigma}` for a symmetric PSD ``sigma`` of shape ``(..., n, n)``."""
    sigma, T, trace = _checked_covariance(sigma, T, check)
    sigma_n = sigma / trace[..., None, None]
    P = torch.eye(sigma.shape[-1], dtype=sigma.dtype, device=sigma.device).expand_as(sigma)
    for _ in range(T):
        P = 1.5 * P - 0.5 * (P @ P @ P) @ sigma_n
    return P * trace.rsqrt()[..., None, None]


@without_autocast
def coupled_newton_schulz_matrix(sigma: torch.Tensor, T: int, *, check: bool = True) -> torch.Tensor:
    r"""The coupled Newton-Schulz iteration (Higham 1997) for the same :math:`W_T`: with :math:`\Sigma_N=\Sigma/\operatorname{tr}\Sigma`,

    .. math::  Y_0=\Sigma_N,\ Z_0=I,\qquad M_k=\tfrac12(3I-Z_kY_k),\ Y_{k+1}=Y_kM_k,\ Z_{k+1}=M_kZ_k,

    and :math:`W_T=Z_T/\sqrt{\operatorname{tr}\Sigma}`. In exact arithmetic :math:`Z_k=P_k` (IterNorm's iterate) and
    :math:`Y_k=\Sigma_NP_k`, so it returns :func:`iternorm_matrix`; in floating point the coupled form does not amplify
    rounding near the fixed point (the chapter's comparison with the uncoupled iteration)."""
    sigma, T, trace = _checked_covariance(sigma, T, check)
    eye = torch.eye(sigma.shape[-1], dtype=sigma.dtype, device=sigma.device)
    Y, Z = sigma / trace[..., None, None], eye.expand_as(sigma)
    for _ in range(T):
        M = 0.5 * (3 * eye - Z @ Y)
        Y, Z = Y @ M, M @ Z
    return Z * trace.rsqrt()[..., None, None]


def null_space_error_factor(T: int, a):
    r"""The factors :math:`g_k(a)`, ``k = 0..T-1``, by which Newton step ``k`` multiplies the error component of
    :math:`P_k` whose row lies in the null space of a singular :math:`\Sigma_N` and whose column is an
    eigenvector of eigenvalue ``a``: :math:`g_k(a) = \tfrac32 - \tfrac a2\big(p_k(0)^2 + p_k(0)p_k(a) + p_k(a)^2\big)`,
    :math:`p_k(0) = (3/2)^k` (the remark ``rem-ch8-singular-newton``). For large ``k`` it is about
    :math:`-(9/4)^k a/2`. ``a`` is a float or a float64 tensor; the result has a leading axis of length ``T``.
    """
    T = check_positive_int(T, "T", minimum=0)
    a = torch.as_tensor(a, dtype=torch.float64)
    p0, pa, out = 1.0, torch.ones_like(a), []
    for _ in range(T):
        out.append(1.5 - a / 2 * (p0 * p0 + p0 * pa + pa * pa))
        p0, pa = 1.5 * p0, (3 * pa - a * pa**3) / 2
    return torch.stack(out) if out else torch.empty((0, *a.shape), dtype=torch.float64)


def output_covariance_tolerance(dtype: torch.dtype) -> float:
    r"""The tolerance on the output covariance that :func:`iter_norm` enforces: :math:`\sqrt u` (half the digits of
    ``dtype``; :math:`u` is the unit roundoff, ``torch.finfo(dtype).eps / 2``), on the spectral norm of the error of
    a matrix whose eigenvalues lie in [0, 1] (:func:`output_covariance_error`), so on every output eigenvalue."""
    return math.sqrt(torch.finfo(dtype).eps / 2)


def singular_rounding_estimate(T: int, a, dtype: torch.dtype) -> torch.Tensor:
    r"""Estimated error of IterNorm's output covariance from the *exact null directions* of :math:`\Sigma_N` when its
    largest eigenvalue is ``a``: :math:`u^2\,(9/4)^T\prod_{k<T}\max(1, |g_k(a)|)` (:func:`null_space_error_factor`).

    Rounding leaves errors of relative size :math:`u` in the block of :math:`P_k` between the null space (rows) and
    the range (columns); step ``k`` multiplies them by :math:`g_k(a)`, so by :math:`\prod_k|g_k|`, about
    :math:`(a/2)^T(9/4)^{T(T-1)/2}` in all. The output :math:`X_cP_T` sees that block only through a second rounding
    error of size :math:`u` (the component of :math:`X_c` on an exact null space). An estimate, not a bound, and
    only of this one mechanism: eigenvalues that are small but not zero, not yet lifted by the iteration, are
    multiplied by the same :math:`g_k` while :math:`X_c` has components of size :math:`\sqrt{x_i}` along them, so
    the second factor :math:`u` is missing (:func:`small_eigenvalue_rounding_estimate`); and a non-singular
    spectrum has the instability of ``thm-ch8-instability``. :func:`iter_norm` therefore measures its output
    instead of trusting this estimate.
    """
    u = torch.finfo(dtype).eps / 2
    g = null_space_error_factor(T, a).abs().clamp_min(1.0)
    return u * u * 2.25**T * g.prod(dim=0)


def small_eigenvalue_rounding_estimate(T: int, a, dtype: torch.dtype) -> torch.Tensor:
    r"""Estimated error of IterNorm's output covariance from small, not yet converged eigenvalues of :math:`\Sigma_N`
    (largest eigenvalue ``a``): :math:`u\,(9/4)^T\prod_{k<T}\max(1,|g_k(a)|)`, :func:`singular_rounding_estimate`
    with one factor :math:`u` instead of two (the component of :math:`X_c` along such a direction is not a rounding
    error). An estimate, not a bound. Its maximum over ``a`` in [0, 1] is below :math:`\sqrt u` up to ``T = 4`` in
    float32 (about 3e-5 against 2.4e-4) and above it from ``T = 5``: this is why :func:`iter_norm` measures its
    output only for ``T > MEASURED_ABOVE_T = 4``; the tests check ``T = 4`` on adversarial spectra (rotated, one
    dominant direction, rank deficient, a tiny singular value).
    """
    u = torch.finfo(dtype).eps / 2
    g = null_space_error_factor(T, a).abs().clamp_min(1.0)
    return u * 2.25**T * g.prod(dim=0)


def output_covariance_error(Mc: torch.Tensor, Y: torch.Tensor, T: int) -> torch.Tensor:
    r"""Measured error of IterNorm's output: the spectral norm :math:`\|C - V\varphi_T(x)V^\top\|_2`, with :math:`C`
    the covariance of the output ``Y`` (``(..., N, n)``, ``N - 1`` in the denominator) and
    :math:`V\operatorname{diag}(x)V^\top` the eigendecomposition of :math:`\Sigma/\operatorname{tr}\Sigma` for the
    centred input ``Mc`` (same shape), both in float64 (one ``eigh`` and one ``eigvalsh`` of the symmetric
    difference). By Weyl's inequality every output eigenvalue lies within this number of the corresponding
    :math:`\varphi_T(x_i)`, and every entry of :math:`C` within it of the exact one (the largest entry alone can be
    up to ``n`` times smaller than the spectral norm, so it bounds no eigenvalue). The reference is itself exact only
    to about :math:`n\,u_{64}(9/4)^T`, the conditioning of :math:`\varphi_T` (its slope is at most :math:`9/4` per
    step). A float64 tensor of shape ``(...)``; NaN where the output is not finite."""
    with torch.no_grad():
        M64, Y64 = Mc.detach().double(), Y.detach().double()
        m = M64.shape[-2] - 1
        lam, V = torch.linalg.eigh(M64.transpose(-1, -2) @ M64 / m)
        x = (lam / lam.sum(-1, keepdim=True)).clamp(0, 1)
        exact = (V * iternorm_spectrum(x, T).unsqueeze(-2)) @ V.transpose(-1, -2)
        C = Y64.transpose(-1, -2) @ Y64 / m
        D = C - exact
        finite = torch.isfinite(D).all(dim=-1).all(dim=-1)
        D = torch.where(finite[..., None, None], D, torch.zeros_like(D))
        D = (D + D.transpose(-1, -2)) / 2  # symmetric to rounding already; eigvalsh reads one triangle
        err = torch.linalg.eigvalsh(D).abs().amax(dim=-1)
        return torch.where(finite, err, torch.full_like(err, math.nan))


def _check_output(Mc: torch.Tensor, Y: torch.Tensor, T: int) -> None:
    """Refuse an output whose covariance is farther than :func:`output_covariance_tolerance` from the exact
    :math:`V\\varphi_T(x)V^T` (:func:`output_covariance_error`), for ``T > MEASURED_ABOVE_T``."""
    if T <= MEASURED_ABOVE_T:
        return
    dtype, tol = Y.dtype, output_covariance_tolerance(Y.dtype)
    err = output_covariance_error(Mc, Y, T)
    bad = ~(err <= tol)  # NaN counts as bad
    if not holds(bad.any()):
        return
    i = int(torch.nonzero(bad.reshape(-1))[0])
    raise ValueError(
        f"IterNorm with T={T} in {dtype}: the covariance of the output differs from the exact V phi_T(x) V^T by "
        f"{float(err.reshape(-1)[i]):.1e} in spectral norm (measured in float64), more than the tolerance sqrt(u) = {tol:.1e}. The "
        f"uncoupled Newton iteration amplifies rounding near its fixed point (thm-ch8-instability), and on small or "
        f"zero eigenvalues by about (9/4)^k a/2 at step k (rem-ch8-singular-newton). Use fewer steps (INTL's T = 4 "
        f"is not measured), float64, the coupled Newton-Schulz iteration (coupled_newton_schulz_matrix), or "
        f"check=False to get the computed output unchecked")


@without_autocast
def iter_norm(X: torch.Tensor, T: int, axis: int = 1, *, check: bool = True) -> torch.Tensor:
    r"""IterNorm with ``T`` Newton steps over ``axis`` of ``X`` (shape ``(..., N, d)``), as in INTL's code.

    ``axis=1``: centre each feature over the batch, whiten the ``d x d`` covariance (1/(N-1)); output
    :math:`X_cW_T`. ``axis=0``: centre each sample over its features, whiten the ``N x N`` Gram (1/(d-1));
    output :math:`W_TX_c`. The output covariance has eigenvalues :math:`\varphi_T(\lambda/\operatorname{tr}\Sigma)`:
    never exactly white for finite ``T``. A full collapse (axis 1: all samples identical; axis 0: every sample
    constant over its features) raises ``ValueError``, also when rounding of the mean left it a rounding-size
    nonzero trace, which IterNorm (scale invariant) would blow up to an O(1) output, the same for every sample
    (:func:`~lnbook.whitening.batch_axes.collapsed_to_rounding`: every centred entry within the rounding error of
    the computed mean). ``check=False`` skips this, as the official code: NaN on an exactly zero trace, the
    amplified rounding otherwise; the function is then pure tensor code for ``torch.func``.

    Rounding is amplified by the uncoupled Newton iteration: near its fixed point once two eigenvalues differ by
    more than ``INSTABILITY_RATIO`` (``thm-ch8-instability``), and on zero or small eigenvalues of
    :math:`\Sigma_N`, whose rounding errors step ``k`` multiplies by :math:`g_k(a)\approx -(9/4)^k a/2`, ``a`` its
    largest eigenvalue (:func:`null_space_error_factor`, ``rem-ch8-singular-newton``): a super-exponential growth.
    So for ``T > MEASURED_ABOVE_T = 4``, ``check=True`` measures the output: where the covariance of the output
    differs from the exact :math:`V\varphi_T(x)V^\top` by more than :math:`\sqrt u` in spectral norm, so where some
    output eigenvalue may be off :math:`\varphi_T(x_i)` by more than that (:func:`output_covariance_error`,
    :func:`output_covariance_tolerance`; one float64 ``eigh`` and one ``eigvalsh`` per batch element)
    it raises ``ValueError`` saying what to do. At INTL's ``T = 4`` and below nothing is measured (no extra work):
    the estimate :func:`small_eigenvalue_rounding_estimate` is below :math:`\sqrt u` for every ``a`` there, an
    estimate that the tests check on adversarial spectra, not a proof.

    The operator is exactly scale invariant, so it is computed on ``X`` divided by its largest ``|entry|`` (per
    batch element): any finite input, from subnormal-prone to near-overflow scales, gives the same output to
    rounding.
    """
    X = as_batch(X, "X", 2, check)
    axis = check_axis(axis)
    T = check_positive_int(T, "T", minimum=0)
    M, _ = scaled_to_unit_max(units_view(X, axis))
    Mc = M - M.mean(dim=-2, keepdim=True)
    if check and holds(collapsed_to_rounding(M, Mc).any()):
        raise collapsed_to_rounding_error(axis, M.shape[-2], X.dtype, "IterNorm (which divides by the trace)")
    sigma = Mc.transpose(-1, -2) @ Mc / (M.shape[-2] - 1)
    W = iternorm_matrix(sigma, T, check=check)
    Y = Mc @ W
    if check:
        _check_output(Mc, Y, T)
    return from_units_view(Y, axis)


@without_autocast
def iter_norm_output_error(X: torch.Tensor, T: int, axis: int = 1) -> torch.Tensor:
    r"""The error that :func:`iter_norm`'s check measures, for any ``T``: :func:`output_covariance_error` of
    ``iter_norm(X, T, axis, check=False)`` (computed in ``X``'s dtype) against the exact :math:`V\varphi_T(x)V^\top`
    (float64). Compare it with :func:`output_covariance_tolerance` of ``X.dtype``; NaN where the iteration overflowed."""
    X = as_batch(X, "X", 2, check=True)
    axis = check_axis(axis)
    T = check_positive_int(T, "T", minimum=0)
    M, _ = scaled_to_unit_max(units_view(X, axis))
    Y = units_view(iter_norm(X, T, axis, check=False), axis)  # the output is scale invariant: no scale to undo
    return output_covariance_error(M - M.mean(dim=-2, keepdim=True), Y, T)


def batch_with_one_dominant_direction(N: int = 80, d: int = 64, big: float = 30.0, smallest: float = 1.0, *,
                                      dtype=torch.float32, seed: int = 0) -> torch.Tensor:
    """A centred ``N x d`` batch (axis 1) whose singular values are ``big`` once, ``smallest`` once and 1 otherwise, in
    a random rotated basis (``seed``): a collapsed-looking spectrum with one dominant direction (``big = 30``,
    ``d = 64``: the largest eigenvalue of Sigma/tr Sigma is 0.935), full rank unless ``smallest = 0``. Built in
    float64, returned in ``dtype``. The spectrum on which float32 IterNorm blows up by ``T = 8``."""
    N, d = check_positive_int(N, "N", minimum=2), check_positive_int(d, "d", minimum=2)
    if N <= d:
        raise ValueError(f"need N > d so that the centred batch can have rank d, got N={N}, d={d}")
    if not (big > 0 and smallest >= 0):
        raise ValueError(f"big must be > 0 and smallest >= 0, got big={big}, smallest={smallest}")
    g = torch.Generator().manual_seed(seed)
    Z = torch.randn(N, d, generator=g, dtype=torch.float64)
    U, _, Vt = torch.linalg.svd(Z - Z.mean(0), full_matrices=False)
    s = torch.ones(d, dtype=torch.float64)
    s[0], s[-1] = float(big), float(smallest)
    Q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    return ((U * s) @ Vt @ Q).to(dtype)


def linearised_error_factor(r):
    r"""The factor :math:`(2 - r - r^2)/2` by which one Newton step multiplies the error component
    :math:`E_{ij}` at the fixed point :math:`A^{-1/2}`, with :math:`r = \sqrt{a_j/a_i}` (numbers or sympy)."""
    return (2 - r - r**2) / 2


def isotropic_output_eigenvalue(n: int, T: int) -> float:
    r""":math:`\varphi_T(1/n)`: every output eigenvalue of IterNorm on an isotropic covariance of size ``n``."""
    return float(iternorm_spectrum(torch.tensor(1.0 / n, dtype=torch.float64), T))


def iterations_to_whiten(n: int, tol: float = 1e-3) -> int:
    r"""The smallest ``T`` with :math:`\varphi_T(1/n) > 1 - \text{tol}` (computed in float64, so ``tol`` must be
    at least float64's unit roundoff, about 1.1e-16: below it ``1 - tol`` rounds to 1, which no step exceeds)."""
    check_positive_int(n, "n")
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 2.0**-53 <= tol < 1:
        raise ValueError(f"tol must be a number in [2**-53, 1) (float64 computes phi_T; 1 - tol must stay below 1), "
                         f"got {tol!r}")
    x, T = torch.tensor(1.0 / n, dtype=torch.float64), 0
    while float(x) <= 1 - tol:
        x, T = newton_map(x), T + 1
    return T


def matrix_with_condition_number(d: int, kappa: float, dtype=torch.float64, seed: int = 0) -> torch.Tensor:
    """A ``d x d`` SPD matrix with eigenvalues log-spaced from 1 to ``kappa``, in a random orthonormal basis."""
    g = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    lam = torch.logspace(0, math.log10(kappa), d, dtype=torch.float64)
    return ((Q * lam) @ Q.T).to(dtype)


@without_autocast
def inverse_sqrt_errors(sigma: torch.Tensor, T_max: int) -> torch.Tensor:
    r"""Relative Frobenius errors :math:`\|W_T - \Sigma^{-1/2}\|/\|\Sigma^{-1/2}\|` for ``T = 0..T_max``.

    The iteration runs in ``sigma``'s dtype; the reference is computed in float64 by ``eigh``.
    """
    sigma = as_batch(sigma, "sigma", 2, check=True)
    T_max = check_positive_int(T_max, "T_max", minimum=0)
    lam, U = torch.linalg.eigh(sigma.double())
    exact = (U * lam.rsqrt()) @ U.T
    trace = sigma.diagonal().sum()
    sigma_n = sigma / trace
    P = torch.eye(sigma.shape[-1], dtype=sigma.dtype)
    errors = []
    for _ in range(T_max + 1):
        W = (P / trace.sqrt()).double()
        errors.append(torch.linalg.norm(W - exact) / torch.linalg.norm(exact))
        P = 1.5 * P - 0.5 * (P @ P @ P) @ sigma_n
    # past the blow-up the iterates overflow: report an infinite error rather than NaN
    return torch.nan_to_num(torch.stack(errors), nan=math.inf)


def best_iterations_over_bases(d: int, kappa: float, T_max: int, dtype=torch.float32, bases: int = 6) -> dict:
    r"""The best number of Newton steps for one spectrum in several random bases.

    For ``seed = 0 .. bases-1`` the ``d x d`` matrix :func:`matrix_with_condition_number` ``(d, kappa, seed=seed)``
    (the same eigenvalues, log-spaced from 1 to ``kappa``, in the orthonormal basis drawn from that seed) is cast to
    ``dtype`` and :func:`inverse_sqrt_errors` measures :math:`W_T` for ``T = 0..T_max``. In exact arithmetic the
    errors do not depend on the basis; in floating point rounding does, so the best ``T`` of one basis is one
    sample. Returns ``{"best_T": [...], "best_error": [...], "T_range": (min, max)}`` over the bases.
    """
    bases = check_positive_int(bases, "bases")
    d = check_positive_int(d, "d", minimum=2)
    best_T, best_error = [], []
    for seed in range(bases):
        errors = inverse_sqrt_errors(matrix_with_condition_number(d, float(kappa), seed=seed).to(dtype), T_max)
        best_T.append(int(errors.argmin()))
        best_error.append(float(errors.min()))
    return {"best_T": best_T, "best_error": best_error, "T_range": (min(best_T), max(best_T))}


@without_autocast
def coupled_inverse_sqrt_errors(sigma: torch.Tensor, T_max: int) -> torch.Tensor:
    r"""As :func:`inverse_sqrt_errors`, for the coupled Newton-Schulz iteration
    (:func:`coupled_newton_schulz_matrix`): relative Frobenius errors of its :math:`W_T` for ``T = 0..T_max``, the
    iteration in ``sigma``'s dtype, the reference :math:`\Sigma^{-1/2}` in float64 by ``eigh``."""
    sigma = as_batch(sigma, "sigma", 2, check=True)
    T_max = check_positive_int(T_max, "T_max", minimum=0)
    lam, U = torch.linalg.eigh(sigma.double())
    exact = (U * lam.rsqrt()) @ U.T
    trace = sigma.diagonal().sum()
    eye = torch.eye(sigma.shape[-1], dtype=sigma.dtype)
    Y, Z = sigma / trace, eye
    errors = []
    for _ in range(T_max + 1):
        W = (Z / trace.sqrt()).double()
        errors.append(torch.linalg.norm(W - exact) / torch.linalg.norm(exact))
        M = 0.5 * (3 * eye - Z @ Y)
        Y, Z = Y @ M, M @ Z
    return torch.nan_to_num(torch.stack(errors), nan=math.inf)

