r"""The rank of an LN-Net's hidden features, layer by layer (chapter 5, random labels).

**Statement.** An LN-Net (or LN-G net) of depth :math:`L` made by :func:`lnbook.group_ln.lab.make_network` is
:math:`L` times ``Linear -> LN-G_eps [-> per-feature affine]``, then a linear read-out, with no elementwise
nonlinearity in between (``nn.GroupNorm(G, d)`` on inputs ``(N, d)`` is such a layer: LN-G and its affine map).
Apply chapter 5's one-layer rank bound (``prop-ch5-lng-rank``) to each layer, with the previous layer's features
written in coordinates of their affine span: if the centred features entering a layer have rank :math:`R`, those
leaving it have rank at most :math:`\min\big(n - 1, G\min(R + 1, m - 1)\big)` (:math:`G` groups of :math:`m`
features; LayerNorm is :math:`G = 1`), for every :math:`\varepsilon \ge 0`, and the per-feature affine map keeps
that rank. :func:`depth_rank_bound` iterates this from the centred rank of the inputs;
for an LN-Net on inputs of centred rank :math:`R_0` it is :math:`\min(n - 1, R_0 + L, d - 1)`, for every weight.

**Measurement.** :func:`hidden_feature_rank` runs the hidden layers in float64 (the book's
:func:`~lnbook.core.norms.group_layer_norm`, the network's own weights), carries a per-sample bound on the
difference between the computed and the exact features (matrix products: :math:`\gamma_{p+1}` of the standard
bound; LN-G: its Lipschitz constant :math:`\sqrt m/\rho` on the ball of the error, plus chapter 1's rounding bound
:math:`16\,m\,\epsilon_{\mathrm{mach}}\max|u|/r` per entry, the same factor as
:func:`~lnbook.core.scatter_ratio.layer_norm_rtol`; the affine map: :math:`\max|\gamma|` and two roundings), and
adds the rounding of the centring and of the SVD (:math:`\max(n, d)\,\epsilon_{\mathrm{mach}}\,\sigma_1`); the
tolerance is twice that sum. By Weyl's inequality every computed singular value above the tolerance belongs to a
nonzero exact one, so the returned rank is a lower bound on the exact rank (as far as chapter 1's LayerNorm rounding
bound holds: its factor 16 is eight times the worst measured), and singular values at or below it are consistent
with zero. It refuses (``ValueError``) a network with any other layer (an elementwise
nonlinearity, where the rank argument does not apply) and a layer whose error ball reaches a point where LN-G is
undefined (no bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from lnbook.core.norms import GroupLayerNorm, group_layer_norm
from lnbook.util.validation import as_float_tensor, check_positive_int

__all__ = ["depth_rank_bound", "RankCaps", "rank_caps", "CIFAR10_GRAYSCALE", "HiddenRank", "hidden_layers", "hidden_features", "hidden_feature_rank"]

_U = float(np.finfo(np.float64).eps) / 2  # unit roundoff of float64
_LN_ROUNDING_FACTOR = 16  # chapter 1's float64 paragraph (worst factor measured between 1/4 and 2), as layer_norm_rtol


def depth_rank_bound(samples: int, input_rank: int, width: int, groups: int, depth: int) -> int:
    """The largest centred rank of the features after ``depth`` layers ``Linear -> LN-G [-> affine]`` of ``width``.

    ``r <- min(samples - 1, groups * min(r + 1, width / groups - 1))`` ``depth`` times from ``r = min(input_rank,
    samples - 1)`` (module docstring); ``groups=1`` is an LN-Net: ``min(samples - 1, input_rank + depth, width - 1)``.
    """
    samples = check_positive_int(samples, "samples")
    input_rank = check_positive_int(input_rank, "input_rank", minimum=0)
    width = check_positive_int(width, "width", minimum=2)
    groups = check_positive_int(groups, "groups")
    depth = check_positive_int(depth, "depth", minimum=0)
    if width % groups or width // groups < 2:
        raise ValueError(f"groups={groups} must divide width={width} and leave at least 2 features per group")
    r = min(input_rank, samples - 1)
    for _ in range(depth):
        r = min(samples - 1, groups * min(r + 1, width // groups - 1))
    return r


# The harness's random-label data (chapter 5): grayscale CIFAR-10, 50000 training images of 32 x 32 = 1024 inputs.
CIFAR10_GRAYSCALE = {"samples": 50_000, "input_dim": 32 * 32}


@dataclass(frozen=True)
class RankCaps:
    r"""The caps of :func:`depth_rank_bound` on the last hidden features of an LN-Net and of LN-G, in one setting.

    ``ln``: the LN-Net's cap, :math:`\min(n - 1, R_0 + L, d - 1)`; ``lng``: LN-G's with ``groups`` groups; ``room``:
    what the samples and the width alone allow, :math:`\min(n - 1, d - 1)`.
    """

    ln: int
    lng: int
    room: int

    @property
    def input_limits_ln(self) -> bool:
        r"""Whether the inputs' rank, not the width or the samples, caps the LN-Net (``ln < room``): then
        ``cor-ch5-depth-rank`` bounds the LN-Net below what the width allows; otherwise it constrains nothing."""
        return self.ln < self.room


def rank_caps(samples: int, input_rank: int, width: int, depth: int, groups: int) -> RankCaps:
    r""":class:`RankCaps` for ``samples`` points of centred rank ``input_rank`` (Gaussian points in
    :math:`\mathbb R^{d_{in}}` with more points than dimensions: ``d_in``), networks of ``width`` and ``depth``, and LN-G with
    ``groups`` groups. In the lab's ci setting (500 points in :math:`\mathbb R^{16}`, width 128, depth 4, 16 groups) the
    LN-Net's cap is 20 and LN-G's 112, below the room 127; in the harness's (grayscale CIFAR-10, 1024 inputs, width
    256) the LN-Net's cap is the room, 255, and LN-G16's 240: the input dimension caps nothing there."""
    ln = depth_rank_bound(samples, input_rank, width, 1, depth)  # checks every argument
    lng = depth_rank_bound(samples, input_rank, width, groups, depth)
    return RankCaps(ln=ln, lng=lng, room=min(samples - 1, width - 1))


def hidden_layers(net: nn.Module) -> list[tuple[nn.Linear, int, float, torch.Tensor | None, torch.Tensor | None]]:
    """The hidden layers of an LN-Net / LN-G net as ``(linear, groups, eps, gain, bias)``, the read-out left out.

    ``net`` is an ``nn.Sequential`` of pairs ``nn.Linear`` then ``nn.LayerNorm`` (over the last dimension),
    :class:`~lnbook.core.norms.GroupLayerNorm` or ``nn.GroupNorm(G, C)`` with ``C`` the Linear's outputs, ending with an
    ``nn.Linear`` (what :func:`lnbook.ml.models.mlp` builds without an activation). ``nn.GroupNorm`` is read as what it
    is on 2-D inputs ``(N, C)``, the only ones the measurement feeds it: LN-G with ``G`` groups, its ``eps``, and its
    per-channel affine map (``GroupLayerNorm(G, affine=True)``). Raises ``ValueError`` for anything else, naming the
    layer.
    """
    if not isinstance(net, nn.Sequential) or len(net) == 0 or not isinstance(net[-1], nn.Linear):
        raise ValueError("net must be an nn.Sequential ending with its nn.Linear read-out (lnbook.group_ln.lab.make_network)")
    body = list(net)[:-1]
    for i, module in enumerate(body):
        if not isinstance(module, (nn.Linear, nn.LayerNorm, GroupLayerNorm, nn.GroupNorm)):
            raise ValueError(
                f"module {i} is {type(module).__name__}: the rank bound covers only Linear -> LayerNorm/LN-G/GroupNorm "
                "[-> affine] layers; an elementwise nonlinearity (or another norm) between layers breaks the argument"
            )
    if len(body) % 2:
        raise ValueError(
            f"the hidden part of net has {len(body)} modules; expected pairs Linear -> LayerNorm/GroupLayerNorm/GroupNorm"
        )
    layers = []
    for i in range(0, len(body), 2):
        lin, norm = body[i], body[i + 1]
        if not isinstance(lin, nn.Linear):
            raise ValueError(f"module {i} is {type(lin).__name__}, expected nn.Linear")
        if isinstance(norm, nn.LayerNorm):
            if len(norm.normalized_shape) != 1:
                raise ValueError(f"module {i + 1} normalises over {norm.normalized_shape}; the bound needs the last dimension only")
            groups = 1
        elif isinstance(norm, GroupLayerNorm):
            groups = norm.groups
        elif isinstance(norm, nn.GroupNorm):
            # on (N, C) inputs nn.GroupNorm(G, C) is LN-G with G groups of C/G consecutive features, then its
            # per-channel affine map (prop-ch5-groupnorm): the same layer as GroupLayerNorm(G, affine=True)
            if norm.num_channels != lin.out_features:
                raise ValueError(
                    f"module {i + 1} is nn.GroupNorm over {norm.num_channels} channels after a Linear with "
                    f"{lin.out_features} outputs; make them equal"
                )
            groups = norm.num_groups
        else:
            raise ValueError(
                f"module {i + 1} is {type(norm).__name__}, expected nn.LayerNorm, GroupLayerNorm or nn.GroupNorm after a Linear"
            )
        layers.append((lin, groups, float(norm.eps), norm.weight, norm.bias))
    return layers


@dataclass(frozen=True)
class HiddenRank:
    """The measured centred rank of the last hidden features, with its tolerance and the theorem's bound.

    ``rank`` counts singular values of the centred float64 features above ``tolerance``: a lower bound on the exact
    rank (module docstring). ``bound`` is :func:`depth_rank_bound` for the network and the inputs' rank.
    ``singular_values`` are the computed ones, largest first.
    """

    rank: int
    bound: int
    tolerance: float
    singular_values: np.ndarray

    @property
    def margin(self) -> float:
        """How clearly the count is decided: the smaller of ``s[rank-1] / tol`` and ``tol / s[rank]`` (inf when absent)."""
        s, tol = self.singular_values, self.tolerance
        above = s[self.rank - 1] / tol if self.rank > 0 else math.inf
        below = tol / s[self.rank] if self.rank < s.size and s[self.rank] > 0 else math.inf
        return float(min(above, below))


def _matmul_bound(h, e, W, b):
    """Computed ``h W^T + b`` and a per-row bound on its error, given a per-row bound ``e`` on the error of ``h``."""
    p = W.shape[1] + 1
    gamma = p * _U / (1 - p * _U)
    out = h @ W.T + (b if b is not None else 0)
    absolute = h.abs() @ W.abs().T + (b.abs() if b is not None else 0)
    W_norm = float(torch.linalg.matrix_norm(W, ord=2))
    return out, W_norm * e + gamma * absolute.norm(dim=1)


def _group_norm_bound(u, e, groups, eps):
    """Computed ``LN-G_eps(u)`` and a per-row error bound (Lipschitz on the error ball plus chapter 1's rounding)."""
    n, q = u.shape
    m = q // groups
    ug = u.reshape(n, groups, m)
    centred_norm = (ug - ug.mean(dim=-1, keepdim=True)).norm(dim=-1)  # ||P u_g||, (n, G)
    rho = (torch.clamp(centred_norm - e[:, None], min=0) ** 2 + m * eps).sqrt()
    if bool((rho == 0).any()):
        raise ValueError("the error ball of a layer's input reaches a constant group at eps = 0: LN-G is undefined there, no bound")
    r_hat = (centred_norm**2 + m * eps).sqrt()
    rounding = _LN_ROUNDING_FACTOR * m * _U * (ug.abs().amax(dim=-1) / r_hat).amax(dim=-1) * math.sqrt(q)
    z = group_layer_norm(u, groups, eps)
    return z, math.sqrt(m) * e / rho.amin(dim=-1) + rounding


def hidden_features(net: nn.Module, X) -> tuple[torch.Tensor, torch.Tensor]:
    """``net``'s last hidden features on the rows of ``X`` in float64, and a per-row bound on their error.

    ``(H, e)``: ``H`` is ``(n, width)`` (``X`` itself for depth 0), ``e[i]`` bounds the 2-norm of the difference
    between ``H[i]`` and the exact features (module docstring). ``net`` as in :func:`hidden_layers`; float64 on the
    CPU, the network is not changed. Raises ``ValueError`` where :func:`hidden_layers` does, for inputs of the wrong
    width, and where the error ball of a layer reaches a point where LN-G is undefined.
    """
    layers = hidden_layers(net)
    X = as_float_tensor(X, "X", min_dim=2).detach().cpu().to(torch.float64)
    if X.dim() != 2 or X.shape[0] < 2:
        note = ""
        if any(isinstance(module, nn.GroupNorm) for module in net):
            note = (
                "; nn.GroupNorm is LN-G only on (N, C) inputs (on (N, C, *) it also averages over the positions, and the "
                "rank bound does not cover it)"
            )
        raise ValueError(f"X must be an (n, d_in) matrix with n >= 2 samples, got shape {tuple(X.shape)}{note}")
    d_in = (layers[0][0] if layers else net[-1]).in_features
    if X.shape[1] != d_in:
        raise ValueError(f"X has {X.shape[1]} features; the network's first layer takes {d_in}")
    h, e = X, torch.zeros(X.shape[0], dtype=torch.float64)
    with torch.no_grad():
        for lin, groups, eps, gain, bias in layers:
            W = lin.weight.detach().cpu().to(torch.float64)
            b = None if lin.bias is None else lin.bias.detach().cpu().to(torch.float64)
            u, e = _matmul_bound(h, e, W, b)
            h, e = _group_norm_bound(u, e, groups, eps)
            if gain is not None:
                g = gain.detach().cpu().to(torch.float64)
                beta = torch.zeros_like(g) if bias is None else bias.detach().cpu().to(torch.float64)
                rounding = 2 * _U * (h.abs() * g.abs() + beta.abs()).norm(dim=1) / (1 - 2 * _U)
                h, e = h * g + beta, float(g.abs().max()) * e + rounding
    if not bool(torch.isfinite(e).all()):
        raise ValueError("the error bound of the hidden features is not finite; no rank can be certified")
    return h, e


def hidden_feature_rank(net: nn.Module, X) -> HiddenRank:
    """The centred rank of ``net``'s last hidden features on the rows of ``X``, counted above a bound on their error.

    Features and their error from :func:`hidden_features`; the tolerance is twice the sum of that error (Frobenius),
    the rounding of the centring and ``max(n, d) eps_mach`` times the largest singular value (module docstring).
    ``bound`` is :func:`depth_rank_bound` from the inputs' own centred rank, layer by layer. Raises ``ValueError``
    where :func:`hidden_features` does.
    """
    h, e = hidden_features(net, X)
    X = X.detach().cpu().to(torch.float64)
    n = X.shape[0]
    s_in, centring_in = _centred_svd(X)  # the inputs are exact; only their centring and SVD round
    bound = _count_above(s_in, 2 * (centring_in + _svd_rounding(X.shape, float(s_in[0]))))
    for lin, groups, *_ in hidden_layers(net):
        bound = depth_rank_bound(n, bound, lin.out_features, groups, 1)
    s, centring_error = _centred_svd(h)
    tol = 2 * (float(e.norm()) + centring_error + _svd_rounding(h.shape, float(s[0]) if s.size else 0.0))
    return HiddenRank(rank=_count_above(s, tol), bound=bound, tolerance=tol, singular_values=s)


def _centred_svd(H: torch.Tensor) -> tuple[np.ndarray, float]:
    """Singular values of the centred rows of ``H`` and a bound on the rounding of the centring (Frobenius)."""
    A = H.detach().cpu().numpy()
    n = A.shape[0]
    C = A - A.mean(axis=0)
    gamma = (n + 1) * _U / (1 - (n + 1) * _U)
    centring_error = math.sqrt(A.size) * (gamma + _U) * float(np.abs(A).max(initial=0.0)) * 2
    return np.linalg.svd(C, compute_uv=False), centring_error


def _svd_rounding(shape, largest: float) -> float:
    return max(shape) * 2 * _U * largest


def _count_above(s: np.ndarray, tol: float) -> int:
    return int((s > tol).sum())
