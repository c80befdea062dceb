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

import math

import torch

from lnbook.whitening._checks import (
    check_axis, check_iterations, check_tensor, from_units_view, is_true, scaled_to_unit_max, units_view,
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
]

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
    x = check_tensor(x, "x", 0, check=False)
    T = check_iterations(T)
    for _ in range(T):
        x = newton_map(x)
    return x


def _trace_check(trace: torch.Tensor, check: bool) -> None:
    if check and not is_true((trace > 0).all()):
        raise ValueError(
            "the covariance has zero trace (full collapse: after centring every sample is the same, or the "
            "input is zero); IterNorm divides by the trace, and the official code returns NaN here. Nothing "
            "can be whitened: perturb the input, or pass check=False to get the NaN"
        )


def iternorm_matrix(sigma: torch.Tensor, T: int, *, check: bool = True) -> torch.Tensor:
    r""":math:`W_T = P_T/\sqrt{\operatorname{tr}\Sigma}` for a symmetric PSD ``sigma`` of shape ``(..., n, n)``."""
    sigma = check_tensor(sigma, "sigma", 2, check)
    T = check_iterations(T)
    if sigma.shape[-1] != sigma.shape[-2]:
        raise ValueError(f"sigma must be square, got shape {tuple(sigma.shape)}")
    trace = torch.diagonal(sigma, dim1=-2, dim2=-1).sum(-1)
    _trace_check(trace, check)
    sigma_n = sigma / trace[..., None, None]
    P = torch.eye(sigma.shape[-1], dtype=sigma.dtype, device=sigma.device).expand_as(sigma)
    for _ in range(T):
        P = 1.5 * P - 0.5 * (P @ P @ P) @ sigma_n
    return P * trace.rsqrt()[..., None, None]


def iter_norm(X: torch.Tensor, T: int, axis: int = 1, *, check: bool = True) -> torch.Tensor:
    r"""IterNorm with ``T`` Newton steps over ``axis`` of ``X`` (shape ``(..., N, d)``), as in INTL's code.

    ``axis=1``: centre each feature over the batch, whiten the ``d x d`` covariance (1/(N-1)); output
    :math:`X_cW_T`. ``axis=0``: centre each sample over its features, whiten the ``N x N`` Gram (1/(d-1));
    output :math:`W_TX_c`. The output covariance has eigenvalues :math:`\varphi_T(\lambda/\operatorname{tr}\Sigma)`:
    never exactly white for finite ``T``. A singular covariance is fine (zero eigenvalues stay zero); a zero
    trace (full collapse) raises ``ValueError`` (``check=False``: NaN, as in the official code, and the
    function is pure tensor code for ``torch.func``). The operator is exactly scale invariant, so it is
    computed on ``X`` divided by its largest ``|entry|`` (per batch element): any finite input, from
    subnormal-prone to near-overflow scales, gives the same output to rounding.
    """
    X = check_tensor(X, "X", 2, check)
    axis = check_axis(axis)
    T = check_iterations(T)
    M, _ = scaled_to_unit_max(units_view(X, axis))
    Mc = M - M.mean(dim=-2, keepdim=True)
    sigma = Mc.transpose(-1, -2) @ Mc / (M.shape[-2] - 1)
    return from_units_view(Mc @ iternorm_matrix(sigma, T, check=check), axis)


def linearised_error_factor(r):
    r"""The factor :math:`(2 - r - r^2)/2` by which one Newton step multiplies the error component
    :math:`E_{ij}` at the fixed point :math:`A^{-1/2}`, with :math:`r = \sqrt{a_j/a_i}` (numbers or sympy)."""
    return (2 - r - r**2) / 2


def isotropic_output_eigenvalue(n: int, T: int) -> float:
    r""":math:`\varphi_T(1/n)`: every output eigenvalue of IterNorm on an isotropic covariance of size ``n``."""
    return float(iternorm_spectrum(torch.tensor(1.0 / n, dtype=torch.float64), T))


def iterations_to_whiten(n: int, tol: float = 1e-3) -> int:
    r"""The smallest ``T`` with :math:`\varphi_T(1/n) > 1 - \text{tol}`."""
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


def inverse_sqrt_errors(sigma: torch.Tensor, T_max: int) -> torch.Tensor:
    r"""Relative Frobenius errors :math:`\|W_T - \Sigma^{-1/2}\|/\|\Sigma^{-1/2}\|` for ``T = 0..T_max``.

    The iteration runs in ``sigma``'s dtype; the reference is computed in float64 by ``eigh``.
    """
    sigma = check_tensor(sigma, "sigma", 2, check=True)
    T_max = check_iterations(T_max, "T_max")
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
