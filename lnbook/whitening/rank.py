r"""Effective rank of an embedding (Roy and Vetterli, 2007).

:math:`\operatorname{erank}(Z) = \exp\big(-\sum_i p_i\log p_i\big)` with :math:`p_i = \sigma_i/\sum_j\sigma_j`, the
singular values of ``Z`` after centring each feature over the batch. It lies between 1 (all samples on a
line: collapse) and :math:`\min(N-1, d)` (equal singular values), and is unchanged by scaling and rotation.
"""

from __future__ import annotations

import torch

from lnbook.whitening._checks import check_tensor, is_true

__all__ = ["effective_rank"]


def effective_rank(Z: torch.Tensor, *, check: bool = True) -> torch.Tensor:
    """The effective rank of ``Z`` of shape ``(..., N, d)`` (a float tensor of shape ``(...)``).

    Raises ``ValueError`` for fewer than two samples and for a fully collapsed batch (all rows equal), whose
    effective rank is undefined (no direction at all). ``check=False`` skips the value checks (NaN/inf, full
    collapse), as ``torch.func.vmap`` needs; a fully collapsed batch then gives NaN.
    """
    Z = check_tensor(Z, "Z", 2, check)
    if Z.shape[-2] < 2:
        raise ValueError(f"effective_rank needs at least 2 samples, got shape {tuple(Z.shape)}")
    Zc = Z - Z.mean(dim=-2, keepdim=True)
    s = torch.linalg.svdvals(Zc)
    total = s.sum(-1, keepdim=True)
    if check and not is_true((total > 0).all()):
        raise ValueError("every sample is the same (full collapse): the effective rank is undefined; "
                         "report it as collapsed (0 directions) instead")
    p = s / total
    entropy = -torch.where(p > 0, p * torch.log(p.clamp_min(torch.finfo(p.dtype).tiny)), torch.zeros_like(p)).sum(-1)
    # check=False: a full collapse gives NaN (undefined), never a rank of 1
    return torch.where(total.squeeze(-1) > 0, torch.exp(entropy), torch.full_like(entropy, float("nan")))
