r"""INTL's trace loss and its objective, and the spectral facts behind them.

Written from the formulas of winci-ai/INTL (``methods/intl.py``, ``methods/base.py``):

* the trace loss :math:`\mathrm{TL}(Z) = \sum_j (\hat C_{jj} - 1)^2`, with :math:`\hat C` the covariance of
  ``Z`` with 1/(N-1) (``axis=1``: per feature over the batch), or :math:`\sum_i(\operatorname{var}_i - 1)^2`
  with the variance of each sample over its features, 1/(d-1) (``axis=0``: the statistic LayerNorm sets to 1);
* the alignment term :math:`2 - 2\,\overline{\cos}(z_1, z_2)` between the whitened views;
* the coefficient :math:`\beta = 0.01(\log_2 N - 3)` for ``axis=0`` (``N`` = batch) and
  :math:`0.01(\log_2 d - 3)` otherwise (``d`` = embedding width); it is ``<= 0`` for sizes up to 8, where
  :func:`intl_beta` warns and :func:`intl_loss` asks for an explicit ``beta``;
* INTL with two views: :math:`\ell = 2 - 2\overline{\cos}(\hat z_1,\hat z_2) + \beta(\mathrm{TL}(\hat z_1)+\mathrm{TL}(\hat z_2))`,
  :math:`\hat z = ` IterNorm of the projector output.
"""

from __future__ import annotations

import math
import warnings

import torch

from lnbook.util.device import without_autocast
from lnbook.util.validation import check_positive_int
from lnbook.whitening.batch_axes import as_batch, check_axis, units_view
from lnbook.whitening.iternorm import iter_norm, iternorm_spectrum

__all__ = [
    "trace_loss",
    "trace_loss_gradient",
    "alignment_loss",
    "intl_beta",
    "intl_loss",
    "spectral_loss",
    "spectral_loss_gradient",
    "small_eigenvalue_weight",
    "trace_loss_floor",
]


def trace_loss(Z: torch.Tensor, axis: int = 1, *, check: bool = True) -> torch.Tensor:
    """INTL's trace loss of ``Z`` of shape ``(..., N, d)`` over ``axis`` (see the module docstring); shape ``(...)``."""
    Z = as_batch(Z, "Z", 2, check)
    M = units_view(Z, check_axis(axis), "Z")
    Mc = M - M.mean(dim=-2, keepdim=True)
    var = (Mc * Mc).sum(dim=-2) / (M.shape[-2] - 1)
    return ((var - 1) ** 2).sum(-1)


def trace_loss_gradient(Z: torch.Tensor, axis: int = 1) -> torch.Tensor:
    r"""The closed form :math:`\partial\mathrm{TL}/\partial Z = \frac{4}{m-1} M_c\operatorname{diag}(v-1)` (in the axis's view)."""
    Z = as_batch(Z, "Z", 2, check=True)
    axis = check_axis(axis)
    M = units_view(Z, axis, "Z")
    Mc = M - M.mean(dim=-2, keepdim=True)
    m = M.shape[-2]
    var = (Mc * Mc).sum(dim=-2, keepdim=True) / (m - 1)
    G = 4 / (m - 1) * Mc * (var - 1)
    return G if axis == 1 else G.transpose(-1, -2)


def alignment_loss(z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
    r""":math:`2 - 2\,\overline{\cos}(z_1, z_2)`, the mean over the rows (samples) of the two views."""
    z1 = as_batch(z1, "z1", 2, check=False)
    z2 = as_batch(z2, "z2", 2, check=False)
    if z1.shape != z2.shape:
        raise ValueError(f"the two views must have the same shape, got {tuple(z1.shape)} and {tuple(z2.shape)}")
    cos = (z1 * z2).sum(-1) / (z1.norm(dim=-1) * z2.norm(dim=-1)).clamp_min(1e-12)
    return 2 - 2 * cos.mean(-1)


def _code_beta(N: int, d: int, axis: int) -> float:
    axis = check_axis(axis)
    size = N if axis == 0 else d
    if size < 1:
        raise ValueError(f"the batch size and width must be positive, got N={N}, d={d}")
    return (math.log2(size) - 3) * 0.01


def _nonpositive_beta_message(beta: float, N: int, d: int, axis: int) -> str:
    size = f"N={N} (axis 0: the batch size)" if axis == 0 else f"d={d} (axis 1: the embedding width)"
    return (f"the code's rule 0.01 (log2 {size} - 3) gives beta = {beta:.4g} <= 0, which "
            + ("rewards a larger trace loss" if beta < 0 else "drops the trace loss")
            + " (the official code does the same; the rule assumes more than 8)")


def intl_beta(N: int, d: int, axis: int = 0) -> float:
    r"""The trace-loss coefficient of INTL's code: :math:`0.01(\log_2 N - 3)` for ``axis=0``, :math:`0.01(\log_2 d - 3)` for ``axis=1``.

    For ``N <= 8`` (axis 0) or ``d <= 8`` (axis 1) the rule gives ``beta <= 0``: the value is returned as the
    code computes it, with a :class:`UserWarning` saying that it rewards (or ignores) the trace loss.
    """
    beta = _code_beta(N, d, axis)
    if beta <= 0:
        warnings.warn(_nonpositive_beta_message(beta, N, d, int(axis)), UserWarning, stacklevel=2)
    return beta


@without_autocast
def intl_loss(z1: torch.Tensor, z2: torch.Tensor, T: int = 4, axis: int = 0, beta: float | None = None,
              *, check: bool = True) -> torch.Tensor:
    """INTL's objective for two views ``z1``, ``z2`` of shape ``(..., N, d)``: IterNorm each, align, add β·TL.

    ``beta=None`` takes the code's rule (:func:`intl_beta`) and refuses (``ValueError``) where that rule gives
    ``beta <= 0`` (``N <= 8`` for axis 0, ``d <= 8`` for axis 1), which would reward a larger trace loss; pass
    ``beta`` explicitly there. ``beta=0`` is IterNorm without the trace loss.
    """
    z1 = as_batch(z1, "z1", 2, check)
    z2 = as_batch(z2, "z2", 2, check)
    axis = check_axis(axis)
    T = check_positive_int(T, "T", minimum=0)
    if z1.shape != z2.shape:
        raise ValueError(f"the two views must have the same shape, got {tuple(z1.shape)} and {tuple(z2.shape)}")
    N, d = z1.shape[-2:]
    if beta is None:
        beta = _code_beta(N, d, axis)
        if beta <= 0:
            raise ValueError(_nonpositive_beta_message(beta, N, d, axis) + "; pass beta explicitly (beta=0.0 for "
                             "IterNorm without the trace loss, a positive value for the penalty, or "
                             "beta=intl_beta(N, d, axis) to reproduce the official code)")
    beta = float(beta)
    w1, w2 = iter_norm(z1, T, axis, check=check), iter_norm(z2, T, axis, check=check)
    loss = alignment_loss(w1, w2)
    if beta != 0:
        loss = loss + beta * (trace_loss(w1, axis, check=False) + trace_loss(w2, axis, check=False))
    return loss


def _normalised(lam: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lam = as_batch(lam, "lam", 1, check=True)
    if not bool((lam >= 0).all()) or not bool((lam.sum(-1) > 0).all()):
        raise ValueError("lam must be a non-negative spectrum with a positive sum")
    S = lam.sum(-1, keepdim=True)
    return lam / S, S


def spectral_loss(lam: torch.Tensor, T: int) -> torch.Tensor:
    r""":math:`L(\lambda)=\sum_i(\varphi_T(\lambda_i/S)-1)^2`, :math:`S=\sum\lambda`: :math:`\|C-I\|_F^2` of IterNorm's output
    covariance :math:`C`, an upper bound on the trace loss, equal to it when :math:`C` is diagonal."""
    x, _ = _normalised(lam)
    return ((iternorm_spectrum(x, T) - 1) ** 2).sum(-1)


def small_eigenvalue_weight(x: torch.Tensor, T: int) -> torch.Tensor:
    r""":math:`q(x) = (1-\varphi_T(x))\,\varphi_T'(x)`, the weight the spectral loss's gradient gives an eigenvalue
    share :math:`x`; strictly decreasing on [0, 1) (the chapter's theorem), so the smallest eigenvalues weigh most."""
    x = as_batch(x, "x", 0, check=True).detach().requires_grad_(True)
    phi = iternorm_spectrum(x, T)
    (dphi,) = torch.autograd.grad(phi.sum(), x)
    return ((1 - phi) * dphi).detach()


def spectral_loss_gradient(lam: torch.Tensor, T: int) -> torch.Tensor:
    r"""The closed form :math:`\partial L/\partial\lambda_k = -\frac2S\big(q(x_k) - \sum_i x_iq(x_i)\big)`."""
    x, S = _normalised(lam)
    q = small_eigenvalue_weight(x, T)
    return -2 / S * (q - (x * q).sum(-1, keepdim=True))


def trace_loss_floor(n: int, T: int, rank: int | None = None) -> float:
    r"""The smallest trace loss of IterNorm's output over every input of size ``n`` and the given ``rank``:
    :math:`(n - r\,\varphi_T(1/r))^2/n` (part 3 of the chapter's theorem ``thm-ch8-trace-loss``).

    A lower bound by Jensen's inequality, and attained: by ``r`` equal non-zero eigenvalues whose span has an
    orthogonal projection with constant diagonal (for example ``r`` columns of the real Fourier basis), which
    is the covariance of a batch with more than ``r`` observations on the axis. ``rank=None`` is ``n``: the
    equal spectrum, :math:`\Sigma = cI`.
    """
    check_positive_int(T, "T", minimum=0)
    r = n if rank is None else int(rank)
    if not 1 <= r <= n:
        raise ValueError(f"rank must lie in 1..n={n}, got {rank}")
    total = r * float(iternorm_spectrum(torch.tensor(1.0 / r, dtype=torch.float64), T))
    return (n - total) ** 2 / n
