r"""Effective rank of an embedding (Roy and Vetterli, 2007), and the share of its top eigenvalues.

:math:`\operatorname{erank}(Z) = \exp\big(-\sum_i p_i\log p_i\big)` with :math:`p_i = \sigma_i/\sum_j\sigma_j`, the
singular values of ``Z`` after centring each feature over the batch. It lies between 1 (all samples on a
line: collapse) and :math:`\min(N-1, d)` (equal singular values), and is unchanged by scaling and rotation.
"""

from __future__ import annotations

import torch

from lnbook.util.validation import holds
from lnbook.whitening.batch_axes import as_batch, collapsed_to_rounding, scaled_to_unit_max

__all__ = ["effective_rank", "top_eigenvalue_share"]


def effective_rank(Z: torch.Tensor, *, check: bool = True) -> torch.Tensor:
    """The effective rank of ``Z`` of shape ``(..., N, d)`` (a float tensor of shape ``(...)``).

    Raises ``ValueError`` for fewer than two samples and for a fully collapsed batch (all rows equal, exactly or to
    rounding: :func:`~lnbook.whitening.batch_axes.collapsed_to_rounding`), whose effective rank is undefined (no
    direction at all). ``check=False`` skips the value checks (NaN/inf, full
    collapse), as ``torch.func.vmap`` needs; a fully collapsed batch then gives NaN.
    """
    Z = as_batch(Z, "Z", 2, check)
    if Z.shape[-2] < 2:
        raise ValueError(f"effective_rank needs at least 2 samples, got shape {tuple(Z.shape)}")
    # divided by its largest |entry| (the effective rank is scale invariant): otherwise the singular values overflow
    # in float32 near its largest numbers (a healthy batch read as rank 1.0 at scale 1e37)
    Zs, _ = scaled_to_unit_max(Z)  # before the mean: a float32 sum near 1e38 overflows
    Zc = Zs - Zs.mean(dim=-2, keepdim=True)
    s = torch.linalg.svdvals(Zc)
    # a batch collapsed to rounding (every centred entry within the rounding error of the mean) has no direction:
    # its singular values are those of the rounding of the mean, one constant row, which would read as rank 1.0
    total = torch.where(collapsed_to_rounding(Zs, Zc).squeeze(-1), torch.zeros_like(s[..., :1]), s.sum(-1, keepdim=True))
    if check and not holds((total > 0).all()):
        raise ValueError("every sample is the same (full collapse): the effective rank is undefined; "
                         "report it as collapsed (0 directions) instead")
    p = s / total
    entropy = -torch.where(p > 0, p * torch.log(p.clamp_min(torch.finfo(p.dtype).tiny)), torch.zeros_like(p)).sum(-1)
    # check=False: a full collapse gives NaN (undefined), never a rank of 1
    return torch.where(total.squeeze(-1) > 0, torch.exp(entropy), torch.full_like(entropy, float("nan")))


def top_eigenvalue_share(Z: torch.Tensor, k: int = 5, *, check: bool = True) -> torch.Tensor:
    r"""The share :math:`\sum_{i\le k}\lambda_i/\sum_i\lambda_i` of the ``k`` largest eigenvalues of the covariance of
    ``Z`` (shape ``(..., N, d)``, each feature centred over the batch): the fraction of the variance in the top
    ``k`` directions. A threshold-free collapse measure beside :func:`effective_rank`: 1 when the embedding
    spans at most ``k`` directions, ``k/d`` for an isotropic one; unchanged by scaling and rotation.

    Raises ``ValueError`` for ``k < 1``, fewer than two samples and a fully collapsed batch, exactly or to rounding
    (``check=False``:
    NaN there, and the function is pure tensor code for ``torch.func``).
    """
    Z = as_batch(Z, "Z", 2, check)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k (the number of top eigenvalues) must be an integer >= 1, got {k!r}")
    if Z.shape[-2] < 2:
        raise ValueError(f"top_eigenvalue_share needs at least 2 samples, got shape {tuple(Z.shape)}")
    # divided by its largest |entry| (the share is scale invariant): otherwise the squares under- or overflow in
    # float32 at extreme scales (a false "full collapse" at 1e-30, NaN at 1e20)
    Zs, _ = scaled_to_unit_max(Z)  # before the mean: a float32 sum near 1e38 overflows
    centred = Zs - Zs.mean(dim=-2, keepdim=True)
    Zc, _ = scaled_to_unit_max(centred)
    lam = torch.linalg.svdvals(Zc).square()  # the covariance eigenvalues times (N - 1) / s^2, largest first
    # collapsed to rounding: no direction (not a share of 1 in the rounding of the mean), as in effective_rank
    total = torch.where(collapsed_to_rounding(Zs, centred)[..., 0, 0], torch.zeros_like(lam[..., 0]), lam.sum(-1))
    if check and not holds((total > 0).all()):
        raise ValueError("every sample is the same (full collapse): the eigenvalue share is undefined; "
                         "report it as collapsed instead")
    share = lam[..., :k].sum(-1) / total
    return torch.where(total > 0, share, torch.full_like(share, float("nan")))  # check=False: a collapse is NaN
