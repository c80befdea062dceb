r"""LN-G measured with chapter 2's LSSR: how well a linear read-out separates the outputs of one LN-G layer (chapter 5).

**What is measured.** Samples :math:`x_1, \dots, x_n \in \mathbb R^{d_{\text{in}}}` (rows of ``X``) with labels ``y``;
one layer

.. math:: z = \mathrm{LN\text{-}G}_\varepsilon(W x + c), \qquad W \in \mathbb R^{d\times d_{\text{in}}},\ c \in \mathbb R^d,

with :math:`G` groups of :math:`m = d/G \ge 2` features; the number is :math:`\mathrm{LSSR}(Z, y)`
(:func:`lnbook.core.scatter_ratio.lssr`), the smallest SSR that any affine read-out of the layer's outputs reaches.
:func:`random_layer_lssr` draws ``W`` and ``c`` with independent standard Gaussian entries (``eps`` and the seed
fixed), one value per draw, so the result is a distribution over layers, not one number.

**Rank.** Each group's output :math:`\sqrt m\, P u / \sqrt{\|Pu\|^2 + m\varepsilon}` (:math:`u = W_g x + c_g`,
:math:`P` the centring matrix) is a multiple of :math:`Pu`, which lies in the span of :math:`P W_g` and
:math:`P c_g`: at most :math:`\min(d_{\text{in}} + 1, m - 1)` dimensions. So the centred outputs of ``n`` samples
have rank at most :func:`output_rank_bound`
:math:`= \min\big(n - 1, \sum_g \min(d_{\text{in}} + 1, m - 1)\big) = \min(n-1, G\min(d_{\text{in}}+1, m-1))`, for every :math:`\varepsilon \ge 0`; :func:`centred_rank` measures the rank.

**Random labels (two classes).** For two classes :math:`\mathrm{LSSR}(Z, y)` is one minus the share of the
centred label indicator explained by the centred features (Fisher's formula of chapter 2). If the labels are a
uniformly random arrangement of fixed class sizes, independent of ``Z``, then
:math:`\mathbb E[\mathrm{LSSR}] = 1 - R/(n - 1)` exactly, with :math:`R` the rank of the centred ``Z``
(:func:`expected_lssr_random_labels`): on random labels a layer helps a linear read-out only through the rank
of its outputs.

**Groups of two at** :math:`\varepsilon = 0`. A group :math:`(a, b)` is mapped to
:math:`\operatorname{sign}(a - b)\,(1, -1)` (:func:`pair_signs`): the layer is a layer of
:math:`d/2` sign units, and its outputs depend on ``W`` and ``c`` only through the sign patterns.

>>> import torch
>>> from lnbook.core.norms import group_layer_norm
>>> h = torch.tensor([[3.0, 1.0, -2.0, 5.0]], dtype=torch.float64)
>>> pair_signs(h)  # sign(3 - 1), sign(-2 - 5)
tensor([[ 1., -1.]], dtype=torch.float64)
>>> bool(torch.allclose(group_layer_norm(h, 2, eps=0.0), torch.tensor([[1.0, -1.0, -1.0, 1.0]], dtype=torch.float64)))
True
>>> output_rank_bound(samples=100, input_dim=2, width=16, groups=4)  # 4 groups of 4: 4 * min(3, 3)
12
"""

from __future__ import annotations

import numpy as np
import torch

from lnbook.core.norms import group_layer_norm
from lnbook.core.scatter_ratio import layer_norm_rtol, lssr
from lnbook.util.validation import as_float_tensor, check_eps, check_positive_int

__all__ = [
    "output_rank_bound",
    "expected_lssr_random_labels",
    "pair_signs",
    "lng_layer",
    "lng_output_rtol",
    "centred_rank",
    "random_layer_lssr",
    "xor_cloud",
    "random_label_cloud",
]


def _check_groups(width: int, groups: int) -> tuple[int, int]:
    width = check_positive_int(width, "width", minimum=2)
    groups = check_positive_int(groups, "groups")
    if width % groups or width // groups < 2:
        raise ValueError(f"groups={groups} must divide width={width} and leave at least 2 features per group")
    return width, groups


def output_rank_bound(samples: int, input_dim: int, width: int, groups: int) -> int:
    """The largest rank of the centred outputs of one LN-G layer on ``samples`` inputs from ``R^input_dim``.

    ``min(samples - 1, groups * min(input_dim + 1, width / groups - 1))`` (module docstring); every ``eps >= 0``.
    """
    samples = check_positive_int(samples, "samples")
    input_dim = check_positive_int(input_dim, "input_dim")
    width, groups = _check_groups(width, groups)
    return min(samples - 1, groups * min(input_dim + 1, width // groups - 1))


def expected_lssr_random_labels(rank: int, samples: int) -> float:
    """``1 - rank / (samples - 1)``: the mean LSSR over all arrangements of two classes of fixed sizes (module docstring)."""
    samples = check_positive_int(samples, "samples", minimum=2)
    rank = check_positive_int(rank, "rank", minimum=0)
    if rank > samples - 1:
        raise ValueError(f"the centred outputs of {samples} samples have rank <= {samples - 1}, got rank={rank}")
    return 1.0 - rank / (samples - 1)


def pair_signs(h: torch.Tensor) -> torch.Tensor:
    """``sign(h[..., 0::2] - h[..., 1::2])``: what LN-G with groups of two computes at ``eps = 0`` (times ``(1, -1)``).

    Refuses a zero difference (LN is undefined there at ``eps = 0``) and an odd width.
    """
    h = as_float_tensor(h, "h")
    if h.shape[-1] % 2:
        raise ValueError(f"groups of two need an even width, got {h.shape[-1]}")
    diff = h[..., 0::2] - h[..., 1::2]
    if bool((diff == 0).any()):
        raise ValueError("a group of two has equal entries: LN-G at eps = 0 is undefined there (use eps > 0)")
    return torch.sign(diff)


def lng_layer(X: torch.Tensor, W: torch.Tensor, c: torch.Tensor, groups: int, eps: float) -> torch.Tensor:
    """``LN-G_eps(X W^T + c)`` for the rows of ``X``: one layer, no affine map after the normalisation."""
    return group_layer_norm(X @ W.T + c, groups, eps)


def lng_output_rtol(H: torch.Tensor, groups: int, eps: float) -> float:
    """The resolution for :func:`~lnbook.core.scatter_ratio.lssr` of ``LN-G_eps(H)``: chapter 1's rounding bound per group.

    The largest :func:`~lnbook.core.scatter_ratio.layer_norm_rtol` over the groups (each group is a LayerNorm of its
    own features, and ``rtol`` is relative to each feature's largest entry). Raises where that function does.
    """
    H = as_float_tensor(H, "H", min_dim=2).to(torch.float64)
    _, groups = _check_groups(H.shape[-1], groups)
    m = H.shape[-1] // groups
    return max(layer_norm_rtol(H[:, g * m:(g + 1) * m], eps) for g in range(groups))


def centred_rank(Z) -> int:
    """Numerical rank of the centred rows of ``Z``: singular values above ``max(n, d) * eps_mach`` times the largest."""
    Z = np.asarray(torch.as_tensor(Z).detach().cpu().to(torch.float64))
    C = Z - Z.mean(axis=0)
    s = np.linalg.svd(C, compute_uv=False)
    if s.size == 0 or s[0] == 0:
        return 0
    return int((s > max(C.shape) * np.finfo(np.float64).eps * s[0]).sum())


def random_layer_lssr(X, y, width: int, groups: int, eps: float, draws: int, seed: int = 0) -> np.ndarray:
    r"""LSSR of ``LN-G_eps(W x + c)`` for ``draws`` layers with standard Gaussian ``W`` (``width x k``) and ``c``.

    Float64. Each value uses the resolution :func:`lng_output_rtol` of its layer. Deterministic for a given seed;
    returns a float64 array of length ``draws``.
    """
    X = as_float_tensor(X, "X", min_dim=2).to(torch.float64)
    width, groups = _check_groups(width, groups)
    eps = check_eps(eps)
    draws = check_positive_int(draws, "draws")
    g = torch.Generator().manual_seed(int(seed))
    out = np.empty(draws)
    for i in range(draws):
        W = torch.randn(width, X.shape[1], generator=g, dtype=torch.float64)
        c = torch.randn(width, generator=g, dtype=torch.float64)
        H = X @ W.T + c
        out[i] = lssr(group_layer_norm(H, groups, eps), y, rtol=lng_output_rtol(H, groups, eps))
    return out


def random_label_cloud(samples: int, dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``samples`` standard Gaussian points in ``R^dim`` with two classes of equal size (``samples`` even) in random order."""
    samples = check_positive_int(samples, "samples", minimum=4)
    if samples % 2:
        raise ValueError(f"samples must be even (two classes of equal size), got {samples}")
    g = torch.Generator().manual_seed(int(seed))
    X = torch.randn(samples, check_positive_int(dim, "dim"), generator=g, dtype=torch.float64)
    y = torch.arange(samples)[torch.randperm(samples, generator=g)] % 2
    return X, y


def xor_cloud(samples: int, noise: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    r"""XOR in the plane: ``samples`` points (a multiple of 4) around the corners :math:`(\pm1, \pm1)`, Gaussian noise.

    Class 0 around :math:`(1, 1)` and :math:`(-1, -1)`, class 1 around :math:`(1, -1)` and :math:`(-1, 1)`, equally many
    per corner: both class means are 0 before the noise, so a linear read-out of the inputs is near chance.
    """
    samples = check_positive_int(samples, "samples", minimum=4)
    if samples % 4:
        raise ValueError(f"samples must be a multiple of 4 (one quarter per corner), got {samples}")
    if not (isinstance(noise, (int, float)) and not isinstance(noise, bool) and 0 <= noise < float("inf")):
        raise ValueError(f"noise must be a finite number >= 0, got {noise!r}")
    corners = torch.tensor([[1.0, 1.0], [-1.0, -1.0], [1.0, -1.0], [-1.0, 1.0]], dtype=torch.float64)
    g = torch.Generator().manual_seed(int(seed))
    idx = torch.arange(samples) % 4
    X = corners[idx] + noise * torch.randn(samples, 2, generator=g, dtype=torch.float64)
    return X, (idx >= 2).long()
