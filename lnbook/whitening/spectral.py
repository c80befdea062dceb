r"""Spectral transformations: standardising and whitening over either axis of a batch.

A batch is ``X`` of shape ``(..., N, d)``: ``N`` samples (rows) of ``d`` features, with optional leading
batch dimensions. The ``axis`` convention is the one of INTL's official code:

* ``axis=1`` (batch whitening): centre every feature over the batch and whiten the ``d x d`` feature
  covariance :math:`\Sigma = X_c^\top X_c/(N-1)`; the output is :math:`X_c W^\top`.
* ``axis=0`` (channel whitening): centre every sample over its features (LayerNorm's first step) and
  whiten the ``N x N`` sample Gram :math:`\Sigma = X_c X_c^\top/(d-1)`; the output is :math:`W X_c`.

A *spectral transformation* (ST) with function ``g`` uses :math:`W = U g(\Lambda) U^\top` for
:math:`\Sigma = U\Lambda U^\top`; its output has covariance eigenvalues :math:`\lambda g(\lambda)^2`. ZCA
whitening is the ST with :math:`g(\lambda)=\lambda^{-1/2}`; Cholesky whitening (W-MSE) uses :math:`L^{-1}`
for :math:`\Sigma = LL^\top`, a rotation of ZCA (:func:`cholesky_rotation`).

``eps = 0`` is exact whitening, which needs a non-singular covariance (a clear ``ValueError`` otherwise:
an eigenvalue at or below ``n * machine epsilon * largest eigenvalue`` counts as zero); ``eps > 0`` whitens
:math:`\Sigma + \varepsilon I` instead, which is defined for every positive semi-definite covariance, singular
included (eigenvalues that rounding pushed slightly below zero count as zero).

A *full collapse* (axis 1: all samples identical; axis 0: every sample constant over its features) has a zero
covariance in exact arithmetic, but the rounded mean leaves a centred batch, and a covariance, of rounding size (on
which float32 ``eigh`` can even fail to converge). Every function here takes the covariance of a batch whose
centred entries are all within the rounding error of the mean
(:func:`~lnbook.whitening.batch_axes.collapsed_to_rounding`) as exactly zero, which is what it is for an exactly
collapsed batch: ``eps = 0`` then raises the collapse ``ValueError``, ``eps > 0`` returns :math:`X_c/\sqrt\varepsilon`
(formed without ``eigh``; zero for an exactly centred collapse), and the diagonal maps treat each constant-to-rounding
unit alike.
"""

from __future__ import annotations

from typing import Callable

import torch

from lnbook.util.device import without_autocast
from lnbook.util.validation import check_eps, holds
from lnbook.whitening.batch_axes import (
    as_batch, check_axis, collapse_description, collapsed_to_rounding, constant_to_rounding, from_units_view,
    scaled_for_shift, scaled_to_unit_max, units_view,
)

__all__ = [
    "centre",
    "covariance",
    "spectral_transform",
    "zca_whiten",
    "zca_matrix",
    "cholesky_whiten",
    "cholesky_rotation",
    "standardise",
    "layer_norm_via_gram",
]


def _zero_if_collapsed(M: torch.Tensor, Mc: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """``sigma`` with the covariance of each matrix that :func:`collapsed_to_rounding` flags set to exactly zero
    (its exact value for an exactly collapsed batch; ``eigh`` of it is then exact and cannot fail)."""
    return torch.where(collapsed_to_rounding(M, Mc), torch.zeros_like(sigma), sigma)


def centre(X: torch.Tensor, axis: int = 1) -> torch.Tensor:
    """``X`` minus its mean over the batch (``axis=1``, per feature) or over the features (``axis=0``, per sample)."""
    X = as_batch(X, "X", 2, check=False)
    axis = check_axis(axis)
    return X - X.mean(dim=-2 if axis == 1 else -1, keepdim=True)


@without_autocast
def covariance(X: torch.Tensor, axis: int = 1) -> torch.Tensor:
    """The matrix that ``axis`` whitens: ``d x d`` feature covariance (1) or ``N x N`` sample Gram (0), 1/(n-1)."""
    X = as_batch(X, "X", 2, check=False)
    M = units_view(X, check_axis(axis))
    Mc = M - M.mean(dim=-2, keepdim=True)
    return Mc.transpose(-1, -2) @ Mc / (M.shape[-2] - 1)


def _singular_error(lam: torch.Tensor, axis: int, shape) -> ValueError:
    """The error of :func:`zca_whiten` / :func:`cholesky_whiten` for a batch of ``shape`` with a singular covariance."""
    n, rank = lam.shape[-1], _numerical_rank(lam)
    if rank == 0:
        return ValueError(f"the covariance is zero, exactly or to rounding (full collapse: {collapse_description(axis)}; "
                          "or every centred entry is within the rounding error of the mean); nothing can be "
                          "whitened. Pass eps > 0 to get the output X_c / sqrt(eps) (zero for an exactly centred "
                          "collapse) instead of an error")
    N, d = shape[-2], shape[-1]
    if axis == 1 and N < d + 1:
        hint = f"the feature covariance of N={N} samples has rank at most N-1, so whitening {d} features needs N >= d+1"
    elif axis == 0 and N > d - 1:
        hint = (f"the Gram of samples centred over d={d} features has rank at most d-1, so whitening N={N} samples "
                f"needs N <= d-1")
    else:
        hint = ("the batch is rank-deficient although its shape allows full rank (linearly dependent "
                + ("features" if axis == 1 else "samples") + ", or a partial collapse)")
    return ValueError(f"the covariance is singular (numerical rank {rank} of {n}): {hint}; or pass eps > 0")


def _numerical_rank(lam: torch.Tensor) -> int:
    tol = lam.shape[-1] * torch.finfo(lam.dtype).eps * lam.abs().amax(dim=-1, keepdim=True).clamp_min(torch.finfo(lam.dtype).tiny)
    return int((lam > tol).sum(dim=-1).min())


def _singular_sigma_error(lam: torch.Tensor) -> ValueError:
    """The error of :func:`zca_matrix`: a covariance given directly, so nothing is known of its samples."""
    return ValueError(f"sigma is singular (numerical rank {_numerical_rank(lam)} of {lam.shape[-1]}), so it has no "
                      f"inverse square root; pass eps > 0 to whiten sigma + eps I instead")


def _inverse_sqrt_spectrum(lam: torch.Tensor, eps: float, check: bool, singular_error, shift=None) -> torch.Tensor:
    """``(lam + eps)^{-1/2}`` for the eigenvalues ``lam`` of a covariance, after the checks.

    ``shift`` (``eps > 0`` only) replaces ``eps`` in the formula: a float64 tensor that broadcasts against
    ``lam`` (the ``eps`` of a rescaled problem, ``eps / s**2``, which may lie outside ``lam``'s range); the
    sum is then formed in float64 and the result returned in ``lam``'s dtype.

    ``eps = 0``: every eigenvalue must lie above the numerical-rank tolerance ``n * machine epsilon *
    largest`` (otherwise ``singular_error(lam)`` is raised). ``eps > 0``: any positive semi-definite
    covariance is fine, singular included (that is what ``eps`` is for); eigenvalues that rounding pushed
    below zero, by at most the same tolerance, count as zero, and one further below means the matrix is
    not positive semi-definite (``ValueError``).
    """
    n = lam.shape[-1]
    tol = n * torch.finfo(lam.dtype).eps * lam.abs().amax(dim=-1, keepdim=True)
    if eps == 0:
        if check and not holds(((lam > tol) & (lam > 0)).all()):
            raise singular_error(lam)
        return lam.rsqrt()
    if check and not holds((lam >= -tol).all()):
        raise ValueError(
            f"the covariance has an eigenvalue {float(lam.min()):.3g}, below zero by more than rounding explains: it "
            f"is not positive semi-definite; pass a symmetric positive semi-definite covariance")
    if shift is None:
        return (lam.clamp_min(0) + eps).rsqrt()
    return (lam.clamp_min(0).double() + shift).rsqrt().to(lam.dtype)


@without_autocast
def spectral_transform(X: torch.Tensor, g: Callable[[torch.Tensor], torch.Tensor], axis: int = 1,
                       *, check: bool = True) -> torch.Tensor:
    r"""The ST of ``X`` with spectral function ``g``: centre, then apply :math:`U g(\Lambda) U^\top`.

    ``g`` maps the eigenvalues (a tensor) to the factors; the output's covariance has eigenvalues
    :math:`\lambda g(\lambda)^2` and the same eigenvectors.

    A covariance is positive semi-definite, but the eigenvalues that ``eigh`` returns for a singular one may be
    slightly negative or slightly positive (by at most ``n * machine epsilon * largest``, the numerical-rank
    tolerance of :func:`zca_whiten`). Rule: eigenvalues within that tolerance of zero, on either side, are set to
    exactly zero before ``g`` sees them (ZCA's numerical-rank rule), so ``g`` is evaluated on :math:`[0,\infty)`
    only and a singular covariance is treated alike whatever the sign of its rounding; one further below zero raises
    ``ValueError`` (the matrix is not a covariance). If ``g`` is undefined or infinite at an eigenvalue (for example
    :math:`\lambda^{-1/2}` at a zero eigenvalue), ``check=True`` raises ``ValueError`` saying what to do instead
    of returning NaN or inf; ``check=False`` returns them. A batch collapsed to rounding (the module docstring) has
    the covariance zero: every eigenvalue is 0, and the output is :math:`g(0)X_c`.
    """
    X = as_batch(X, "X", 2, check)
    axis = check_axis(axis)
    M = units_view(X, axis)
    Mc = M - M.mean(dim=-2, keepdim=True)
    sigma = _zero_if_collapsed(M, Mc, Mc.transpose(-1, -2) @ Mc / (M.shape[-2] - 1))
    lam, U = torch.linalg.eigh(sigma)
    tol = lam.shape[-1] * torch.finfo(lam.dtype).eps * lam.abs().amax(dim=-1, keepdim=True)
    if check and not holds((lam >= -tol).all()):
        raise ValueError(f"the covariance has an eigenvalue {float(lam.min()):.3g}, below zero by more than rounding "
                         f"explains; the input is not a batch of finite samples")
    # within the tolerance of zero on either side: exactly zero (a null eigenvalue rounded slightly above zero
    # would otherwise reach g as a tiny positive number, and lam^(-1/2) would be applied to it silently)
    lam = torch.where(lam <= tol, torch.zeros_like(lam), lam)
    factors = g(lam)
    if check and not holds(torch.isfinite(factors).all()):
        bad = lam[~torch.isfinite(factors)]
        raise ValueError(
            f"g is not finite at the eigenvalue {float(bad.min()):.3g} of the covariance (one of {lam.shape[-1]}; "
            f"eigenvalues within n * machine epsilon * largest of zero are taken as exactly 0): the covariance is "
            f"singular where g is undefined. Use a g defined on [0, inf) (for example (lam + eps)^(-1/2) with eps > "
            f"0), a batch whose covariance has full rank, or check=False to get the NaN or inf")
    W = (U * factors.unsqueeze(-2)) @ U.transpose(-1, -2)
    return from_units_view(Mc @ W, axis)


@without_autocast
def zca_matrix(sigma: torch.Tensor, eps: float = 0.0, *, check: bool = True) -> torch.Tensor:
    r""":math:`(\Sigma+\varepsilon I)^{-1/2}` of a symmetric positive semi-definite ``sigma`` (batched)."""
    sigma = as_batch(sigma, "sigma", 2, check)
    eps = check_eps(eps)
    if sigma.shape[-1] != sigma.shape[-2]:
        raise ValueError(f"sigma must be square, got shape {tuple(sigma.shape)}")
    lam, U = torch.linalg.eigh(sigma)
    g = _inverse_sqrt_spectrum(lam, eps, check, _singular_sigma_error)
    return (U * g.unsqueeze(-2)) @ U.transpose(-1, -2)


@without_autocast
def zca_whiten(X: torch.Tensor, axis: int = 1, eps: float = 0.0, *, check: bool = True) -> torch.Tensor:
    r"""ZCA whitening of ``X`` of shape ``(..., N, d)`` over ``axis`` (see the module docstring).

    ``eps = 0``: the output's covariance (``axis=1``, 1/(N-1)) or Gram (``axis=0``, 1/(d-1)) is exactly
    the identity; a singular covariance raises ``ValueError`` (too few samples for the axis, or collapse).
    ``eps > 0``: whitens :math:`\Sigma+\varepsilon I`, so the output covariance has eigenvalues
    :math:`\lambda/(\lambda+\varepsilon)` and a fully collapsed batch gives zeros: exactly
    :math:`X_c/\sqrt\varepsilon`, formed without ``eigh``, also for a batch collapsed to rounding (the module
    docstring), whose :math:`X_c` is of rounding size (and whose output is then within
    :math:`\sqrt n\max|X_c|/\sqrt\varepsilon` of the exact output of any batch it could have come from); with
    ``eps = 0`` such a batch raises the collapse ``ValueError``. Differentiable (``eigh``; the
    gradient is undefined where two eigenvalues coincide). ``check=False`` skips the value checks (for
    ``torch.func.vmap``); a singular covariance then gives inf/NaN, as in code without checks.

    Scale: the batch is divided by its largest ``|entry|`` ``s`` (per batch element) before the covariance
    is formed, and ``eps`` is replaced by ``eps / s**2`` (in float64), which is exactly the same map; so the
    covariance neither underflows nor overflows at extreme input scales. Where ``eps / s**2`` would exceed ``2**1000``
    (a safety floor below float64's overflow; ``s`` below :math:`\sqrt\varepsilon\,2^{-500}`, about 1e-151 for ``eps = 0.1``) the batch is divided by that
    floor instead (:func:`~lnbook.whitening.batch_axes.scaled_for_shift`): the covariance is then negligible beside
    the shift and the output :math:`X_c/\sqrt\varepsilon` to rounding. (With ``eps > 0`` a singular
    covariance at a scale where ``eps`` is below the rounding of its zero eigenvalues, ``eps < n u s**2``,
    gets no protection from ``eps``: that is a property of the data in this dtype, not of the rescaling.)
    """
    X = as_batch(X, "X", 2, check)
    axis = check_axis(axis)
    eps = check_eps(eps)
    if eps == 0:
        (M, _), shift = scaled_to_unit_max(units_view(X, axis)), None
    else:
        M, _, shift = scaled_for_shift(units_view(X, axis), eps)
        shift = shift.squeeze(-1)  # shape (..., 1): broadcasts over lam
    Mc = M - M.mean(dim=-2, keepdim=True)
    sigma = _zero_if_collapsed(M, Mc, Mc.transpose(-1, -2) @ Mc / (M.shape[-2] - 1))
    lam, U = torch.linalg.eigh(sigma)
    g = _inverse_sqrt_spectrum(lam, eps, check, lambda v: _singular_error(v, axis, X.shape), shift)
    W = (U * g.unsqueeze(-2)) @ U.transpose(-1, -2)
    return from_units_view(Mc @ W, axis)


@without_autocast
def cholesky_whiten(X: torch.Tensor, axis: int = 1, eps: float = 0.0, *, check: bool = True) -> torch.Tensor:
    r"""Cholesky whitening (as in W-MSE): :math:`W = L^{-1}` for :math:`\Sigma + \varepsilon I = LL^\top`.

    The output covariance is the identity, like ZCA's, but ``W`` is lower triangular, not symmetric;
    :func:`cholesky_rotation` gives the orthogonal ``Q`` with :math:`L^{-1} = Q\,\Sigma^{-1/2}`.
    ``eps = 0`` refuses a singular covariance by ZCA's numerical-rank rule (an eigenvalue at or below
    ``n * machine epsilon * largest``), not by whether the factorisation happens to succeed.

    Scale: as in :func:`zca_whiten`, the batch is divided by its largest ``|entry|`` ``s`` (per batch element)
    and ``eps`` replaced by ``eps / s**2``, the same map (:math:`\Sigma+\varepsilon I=s^2(\Sigma'+\varepsilon' I)`, so
    :math:`L=sL'` and :math:`X_cL^{-\top}=X_c'L'^{-\top}`); so the covariance neither underflows (which made a
    float32 batch at scale 1e-25 look fully collapsed) nor overflows (a failed factorisation at 1e25). With
    ``eps > 0`` the shifted covariance is factorised in float64, since ``eps / s**2`` may lie outside the range
    of ``X``'s dtype, and the output returned in ``X``'s dtype; where it would overflow float64 too, the batch is
    divided by :math:`\sqrt\varepsilon\,2^{-500}` instead of ``s`` (:func:`~lnbook.whitening.batch_axes.scaled_for_shift`).
    A batch collapsed to rounding is treated as by :func:`zca_whiten`: ``eps = 0`` raises the collapse ``ValueError``,
    ``eps > 0`` gives :math:`X_c/\sqrt\varepsilon` (:math:`L=\sqrt\varepsilon I`).
    """
    X = as_batch(X, "X", 2, check)
    axis = check_axis(axis)
    eps = check_eps(eps)
    if eps == 0:
        M, _ = scaled_to_unit_max(units_view(X, axis))
    else:
        M, _, shift = scaled_for_shift(units_view(X, axis), eps)
    Mc = M - M.mean(dim=-2, keepdim=True)
    n = Mc.shape[-1]
    sigma = _zero_if_collapsed(M, Mc, Mc.transpose(-1, -2) @ Mc / (M.shape[-2] - 1))
    if eps > 0:
        eye = torch.eye(n, dtype=torch.float64, device=X.device)
        L = torch.linalg.cholesky(sigma.double() + shift * eye)  # positive definite: eps' > 0, finite
        Y = torch.linalg.solve_triangular(L, Mc.double().transpose(-1, -2), upper=False).transpose(-1, -2)
        return from_units_view(Y.to(X.dtype), axis)
    if check and eps == 0:
        # the factorisation alone is no test of rank: rounding often leaves a tiny positive last pivot of a
        # singular covariance, and L^{-1} is then finite but far from whitening. Apply ZCA's numerical-rank rule.
        lam = torch.linalg.eigvalsh(sigma.detach())
        tol = n * torch.finfo(lam.dtype).eps * lam.abs().amax(dim=-1, keepdim=True)
        if not holds(((lam > tol) & (lam > 0)).all()):
            raise _singular_error(lam, axis, X.shape)
    L, info = torch.linalg.cholesky_ex(sigma)
    if check and not holds((info == 0).all()):
        raise _singular_error(torch.linalg.eigvalsh(sigma.detach()), axis, X.shape)
    # out = Mc L^{-T}: solve L Y^T = Mc^T
    Y = torch.linalg.solve_triangular(L, Mc.transpose(-1, -2), upper=False).transpose(-1, -2)
    return from_units_view(Y, axis)


@without_autocast
def cholesky_rotation(sigma: torch.Tensor) -> torch.Tensor:
    r"""The orthogonal :math:`Q = L^{-1}\Sigma^{1/2}` that turns ZCA's matrix into Cholesky's: :math:`L^{-1}=Q\Sigma^{-1/2}`."""
    sigma = as_batch(sigma, "sigma", 2, check=True)
    L = torch.linalg.cholesky(sigma)
    lam, U = torch.linalg.eigh(sigma)
    root = (U * lam.clamp_min(0).sqrt().unsqueeze(-2)) @ U.transpose(-1, -2)
    return torch.linalg.solve_triangular(L, root, upper=False)


def standardise(X: torch.Tensor, axis: int = 1, eps: float = 0.0, *, check: bool = True) -> torch.Tensor:
    r"""The *diagonal* ST: centre, then divide each whitened unit by its standard deviation.

    ``axis=1`` is batch normalisation without affine parameters up to the factor :math:`\sqrt{(N-1)/N}` (variance
    with 1/(N-1), torch's batch normalisation uses 1/N); ``axis=0`` is
    LayerNorm up to the factor :math:`\sqrt{(d-1)/d}` (variance with 1/(d-1), LayerNorm uses 1/d). A unit whose
    centred entries are all within the rounding error of its mean
    (:func:`~lnbook.whitening.batch_axes.constant_to_rounding`) has variance 0: ``eps = 0`` raises ``ValueError``,
    ``eps > 0`` divides it by :math:`\sqrt\varepsilon`.
    """
    X = as_batch(X, "X", 2, check)
    axis = check_axis(axis)
    eps = check_eps(eps)
    M = units_view(X, axis)
    # each unit divided by its largest |entry| s (eps by s^2): the same map, exactly, but the variance neither
    # underflows (a false "zero variance" in float32 at 1e-25) nor overflows (all zeros at 1e20); s is detached,
    # which gives the exact gradient (the map is invariant to the constant s)
    # (eps > 0: the scale is at least sqrt(eps) 2^-500, so that eps / s^2 is finite in float64, see scaled_for_shift)
    if eps == 0:
        M, _ = scaled_to_unit_max(M, dims=-2)
    else:
        M, _, shift = scaled_for_shift(M, eps, dims=-2)
    Mc = M - M.mean(dim=-2, keepdim=True)
    var = (Mc * Mc).sum(dim=-2, keepdim=True) / (M.shape[-2] - 1)
    # a unit constant to rounding has variance 0 (its exact value for a constant unit), not the variance of the
    # rounding of its mean, which eps = 0 would blow up to an O(1) output
    var = torch.where(constant_to_rounding(M, Mc, dim=-2), torch.zeros_like(var), var)
    if eps > 0:  # eps / s^2 in float64: in float32 it overflows at small scales (an output of 0, not LayerNorm's)
        var = var.double() + shift
    if check and not holds((var > 0).all()):
        raise ValueError("a unit has zero variance (a constant feature or sample, exactly or to rounding: every "
                         "centred entry within the rounding error of the mean); pass eps > 0")
    return from_units_view(Mc * var.rsqrt().to(Mc.dtype), axis)


@without_autocast
def layer_norm_via_gram(X: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    r"""LayerNorm written through the sample Gram: :math:`(\operatorname{diag}G+\varepsilon I)^{-1/2}X_c`, :math:`G = X_cX_c^\top/d`.

    Equals ``torch.nn.functional.layer_norm(X, (d,), eps=eps)`` (the identity of the chapter); channel
    whitening uses the whole :math:`G^{-1/2}` instead of its diagonal. A sample constant to rounding
    (:func:`~lnbook.whitening.batch_axes.constant_to_rounding`) counts as constant (``eps = 0``: ``ValueError``;
    ``eps > 0``: :math:`X_c/\sqrt\varepsilon`), where ``F.layer_norm`` would divide by the variance of the rounding.
    """
    X = as_batch(X, "X", 2, check=True)
    eps = check_eps(eps)
    Xc = X - X.mean(dim=-1, keepdim=True)
    constant = constant_to_rounding(X, Xc, dim=-1).squeeze(-1)  # (..., N): a sample constant to rounding
    # each sample divided by its largest |entry| s (eps by s^2): the same map, exactly, but G neither underflows
    # (a false "constant sample" in float32 at 1e-25) nor overflows at extreme scales
    # (eps > 0: the scale is at least sqrt(eps) 2^-500, so that eps / s^2 is finite in float64, see scaled_for_shift)
    if eps == 0:
        Xc, _ = scaled_to_unit_max(Xc, dims=-1)
    else:
        Xc, _, shift = scaled_for_shift(Xc, eps, dims=-1)
    G = Xc @ Xc.transpose(-1, -2) / X.shape[-1]
    diag = torch.diagonal(G, dim1=-2, dim2=-1)
    diag = torch.where(constant, torch.zeros_like(diag), diag)  # its exact value for a constant sample
    if eps > 0:  # eps / s^2 in float64: in float32 it overflows at small scales (an output of 0, not LayerNorm's)
        diag = diag.double() + shift.squeeze(-1)
    if not holds((diag > 0).all()):
        raise ValueError("a sample is constant over its features (exactly, or to rounding: every centred entry within "
                         "the rounding error of its mean) and eps = 0: LayerNorm is undefined there; pass eps > 0")
    return Xc * diag.rsqrt().to(Xc.dtype).unsqueeze(-1)
