r"""The book's small trainable models, each with a ``norm=`` switch.

* :func:`make_norm` builds one normalisation layer by name: ``"none"`` (identity), ``"ln"``,
  ``"rms"``, ``"lng"`` (LN-G, ``groups=``) or ``"pln"`` (parallel LN, ``group_size=``, ``p=``,
  ``centering=``), optionally with a per-feature affine.
* :func:`mlp` builds ``Linear -> norm -> [activation] -> ... -> Linear``: with ``norm="ln"`` and no
  activation it is an LN-Net (chapters 2, 3, 5, 6), with ``norm="none"`` and no activation a linear
  net, with ``activation="relu"`` an ordinary MLP.
* :class:`TinyTransformer` is a GPT-style decoder (token + position embeddings, ``n_layers`` blocks
  of causal self-attention and an MLP, a final norm, an unembedding) whose norms follow the same
  switch, pre-norm (``norm_first=True``, the GPT-2/Llama layout) or post-norm (BERT layout);
  :class:`LastPosition` turns it into a classifier of whole sequences.
* :func:`small_cnn` builds a small convolutional classifier with LN or LN-G (``nn.GroupNorm``) after
  each convolution (chapter 5).

Every model is an ordinary ``nn.Module`` made of standard layers (``nn.Linear``, ``nn.Embedding``)
and the norms of :mod:`lnbook.core.norms` or torch's own ``nn.LayerNorm``/``nn.RMSNorm``, so that it can
be trained with :func:`lnbook.ml.training.train` and traced with ``torch.fx``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lnbook.core.norms import GroupLayerNorm, ParallelLayerNorm
from lnbook.util.validation import check_eps, check_positive_int

__all__ = ["NORMS", "ACTIVATIONS", "make_norm", "mlp", "TinyTransformer", "small_cnn", "LastPosition"]

NORMS = ("none", "ln", "rms", "lng", "pln")
ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}


def _check_choice(value, name: str, choices) -> str:
    if not isinstance(value, str) or value.lower() not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value.lower()


def make_norm(
    norm: str,
    width: int,
    *,
    groups: int | None = None,
    group_size: int | None = None,
    p: float = 2,
    centering: bool = True,
    eps: float = 1e-5,
    affine: bool = False,
) -> nn.Module:
    """One normalisation layer over the last dimension of width ``width``.

    ``"ln"`` and ``"rms"`` are torch's ``nn.LayerNorm`` / ``nn.RMSNorm`` (fast kernels; ``eps`` is
    always passed explicitly, since ``nn.RMSNorm(eps=None)`` would use the dtype's machine epsilon);
    ``"lng"`` needs ``groups`` dividing ``width``; ``"pln"`` needs ``group_size`` dividing ``width``.
    ``affine=True`` adds the usual per-feature gain (and, except for RMSNorm, bias).
    """
    norm = _check_choice(norm, "norm", NORMS)
    width = check_positive_int(width, "width")
    eps = check_eps(eps)
    if norm != "lng" and groups is not None:
        raise ValueError(f"groups= is only used by norm='lng', got norm={norm!r}")
    if norm != "pln" and group_size is not None:
        raise ValueError(f"group_size= is only used by norm='pln', got norm={norm!r}")
    if norm == "none":
        return nn.Identity()
    if norm in ("ln", "lng", "pln") and width < 2:
        raise ValueError(f"norm={norm!r} needs width >= 2 (one feature has zero variance), got {width}")
    if norm == "ln":
        return nn.LayerNorm(width, eps=eps, elementwise_affine=affine)
    if norm == "rms":
        return nn.RMSNorm(width, eps=eps, elementwise_affine=affine)
    if norm == "lng":
        if groups is None:
            raise ValueError("norm='lng' needs groups= (the number of groups; it must divide the width)")
        layer = GroupLayerNorm(groups, eps=eps)
    else:
        if group_size is None:
            raise ValueError("norm='pln' needs group_size= (features per group; it must divide the width)")
        layer = ParallelLayerNorm(group_size, p=p, centering=centering, eps=eps)
    # run the layer once on a probe row (distinct values in every group), so that a group count or
    # size that does not divide the width fails here, with the functional form's message
    layer(torch.arange(width, dtype=torch.float32).unsqueeze(0))
    if affine and norm == "lng":  # the affine map fused into the LN-G operator
        return GroupLayerNorm(groups, eps=eps, affine=True, width=width)
    return _Affine(layer, width) if affine else layer


class _Affine(nn.Module):
    """A norm followed by a per-feature gain and bias (initialised to 1 and 0)."""

    def __init__(self, norm: nn.Module, width: int):
        super().__init__()
        self.norm = norm
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) * self.weight + self.bias


def mlp(
    d_in: int,
    width: int,
    depth: int,
    d_out: int,
    *,
    norm: str = "ln",
    activation: str | None = None,
    groups: int | None = None,
    group_size: int | None = None,
    p: float = 2,
    centering: bool = True,
    eps: float = 1e-5,
    affine: bool = False,
    bias: bool = True,
) -> nn.Sequential:
    """``depth`` hidden layers ``Linear(., width) -> norm -> [activation]``, then ``Linear(width, d_out)``.

    ``norm="ln"`` without activation is an LN-Net, ``norm="none"`` without activation a linear net
    (an affine map), ``norm="lng", groups=G`` an LN-G net. ``depth=0`` is a single linear layer.
    """
    d_in = check_positive_int(d_in, "d_in")
    width = check_positive_int(width, "width")
    depth = check_positive_int(depth, "depth", minimum=0)
    d_out = check_positive_int(d_out, "d_out")
    act = None if activation is None else ACTIVATIONS[_check_choice(activation, "activation", ACTIVATIONS)]
    layers: list[nn.Module] = []
    fan_in = d_in
    for _ in range(depth):
        layers.append(nn.Linear(fan_in, width, bias=bias))
        layers.append(
            make_norm(
                norm, width, groups=groups, group_size=group_size, p=p, centering=centering, eps=eps, affine=affine
            )
        )
        if act is not None:
            layers.append(act())
        fan_in = width
    layers.append(nn.Linear(fan_in, d_out, bias=bias))
    return nn.Sequential(*layers)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with one fused input projection and an output projection."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"n_heads={n_heads} does not divide d_model={d_model}")
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        h = self.n_heads
        q, k, v = self.qkv(x).split(C, dim=-1)
        q = q.view(B, T, h, C // h).transpose(1, 2)
        k = k.view(B, T, h, C // h).transpose(1, 2)
        v = v.view(B, T, h, C // h).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    """One transformer block: attention and MLP, each added to the residual stream.

    Pre-norm: ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``.
    Post-norm: ``norm1(x + attn(x))``, then ``norm2(x + mlp(x))``.
    """

    def __init__(self, d_model: int, n_heads: int, d_mlp: int, norm_first: bool, **norm_kw):
        super().__init__()
        self.norm_first = norm_first
        self.norm1 = make_norm(width=d_model, **norm_kw)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.norm2 = make_norm(width=d_model, **norm_kw)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_mlp), nn.GELU(), nn.Linear(d_mlp, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.norm_first:
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.mlp(x))


class TinyTransformer(nn.Module):
    """A small GPT-style decoder whose norms follow ``norm`` (``"ln"``, ``"rms"``, ``"lng"``, ``"pln"``).

    ``forward(tokens)`` maps a ``(batch, time)`` long tensor to logits ``(batch, time, vocab)``
    (it does no input checks, so that ``torch.fx`` can trace it; :meth:`hidden_states` checks);
    :meth:`hidden_states` returns the residual stream after the embedding and after each block.
    Norms carry a per-feature affine by default (as in GPT-2); with ``norm_first=False`` the blocks
    are post-norm (BERT layout) and there is no final norm.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        d_mlp: int | None = None,
        max_len: int = 64,
        *,
        norm: str = "ln",
        norm_first: bool = True,
        groups: int | None = None,
        group_size: int | None = None,
        eps: float = 1e-5,
        affine: bool = True,
    ):
        super().__init__()
        vocab_size = check_positive_int(vocab_size, "vocab_size", minimum=2)
        d_model = check_positive_int(d_model, "d_model", minimum=2)
        n_heads = check_positive_int(n_heads, "n_heads")
        n_layers = check_positive_int(n_layers, "n_layers")
        max_len = check_positive_int(max_len, "max_len")
        d_mlp = 4 * d_model if d_mlp is None else check_positive_int(d_mlp, "d_mlp")
        norm_kw = dict(norm=norm, groups=groups, group_size=group_size, eps=eps, affine=affine)
        self.max_len = max_len
        self.norm_first = norm_first
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(
            Block(d_model, n_heads, d_mlp, norm_first, **norm_kw) for _ in range(n_layers)
        )
        self.final_norm = make_norm(width=d_model, **norm_kw) if norm_first else nn.Identity()
        self.unembed = nn.Linear(d_model, vocab_size)

    def _check_tokens(self, tokens: torch.Tensor) -> None:
        if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.long or tokens.dim() != 2:
            raise TypeError("tokens must be a (batch, time) torch.long tensor")
        if tokens.shape[1] > self.max_len:
            raise ValueError(f"sequence length {tokens.shape[1]} exceeds max_len={self.max_len}")

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        return self.embed(tokens) + self.pos(positions)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self._embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.unembed(self.final_norm(x))

    def hidden_states(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        """The residual stream after the embedding and after each block (``n_layers + 1`` tensors)."""
        self._check_tokens(tokens)
        x = self._embed(tokens)
        states = [x]
        for block in self.blocks:
            x = block(x)
            states.append(x)
        return states


# --- chapter 5: a small CNN and a read-out of the last position --------------------------------


def _channel_norm(norm: str, channels: int, groups: int | None, eps: float, affine: bool) -> nn.Module:
    """LN / LN-G for feature maps ``(N, C, H, W)``: ``nn.GroupNorm`` with 1 or ``groups`` groups of channels."""
    if norm == "none":
        if groups is not None:
            raise ValueError("groups= is only used by norm='lng'")
        return nn.Identity()
    if norm == "ln":
        if groups is not None:
            raise ValueError("groups= is only used by norm='lng'")
        return nn.GroupNorm(1, channels, eps=eps, affine=affine)
    if groups is None:
        raise ValueError("norm='lng' needs groups= (the number of channel groups; it must divide every width)")
    groups = check_positive_int(groups, "groups")
    if channels % groups:
        raise ValueError(f"groups={groups} does not divide the {channels} channels of a convolution; choose a divisor")
    return nn.GroupNorm(groups, channels, eps=eps, affine=affine)


def small_cnn(
    image_shape: tuple[int, int, int],
    num_classes: int,
    *,
    channels: tuple[int, ...] = (16, 32),
    norm: str = "ln",
    groups: int | None = None,
    activation: str | None = "relu",
    eps: float = 1e-5,
    affine: bool = True,
) -> nn.Sequential:
    """A small CNN on flattened images: ``Unflatten -> [Conv3x3 -> norm -> act] per width -> pool -> Linear``.

    The input is ``(N, C*H*W)`` (how the book's datasets store images) with ``image_shape = (C, H, W)``.
    Each convolution after the first halves the resolution (stride 2). ``norm="ln"`` normalises each
    sample's whole feature map over channels and positions (``nn.GroupNorm(1, C)``, the CNN form of
    LayerNorm; its affine is per channel), ``norm="lng"`` does so per group of ``C / groups`` channels
    (``nn.GroupNorm(groups, C)``), ``norm="none"`` not at all.
    """
    norm = _check_choice(norm, "norm", ("none", "ln", "lng"))
    if len(image_shape) != 3 or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in image_shape):
        raise ValueError(f"image_shape must be (channels, height, width) of positive ints, got {image_shape!r}")
    num_classes = check_positive_int(num_classes, "num_classes", minimum=2)
    if not channels:
        raise ValueError("channels must name at least one convolution width")
    act = None if activation is None else ACTIVATIONS[_check_choice(activation, "activation", ACTIVATIONS)]
    eps = check_eps(eps)
    layers: list[nn.Module] = [nn.Unflatten(1, tuple(image_shape))]
    c_in = image_shape[0]
    for i, width in enumerate(channels):
        width = check_positive_int(width, "channels")
        layers.append(nn.Conv2d(c_in, width, kernel_size=3, stride=1 if i == 0 else 2, padding=1))
        layers.append(_channel_norm(norm, width, groups, eps, affine))
        if act is not None:
            layers.append(act())
        c_in = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, num_classes)]
    return nn.Sequential(*layers)


class LastPosition(nn.Module):
    """Wraps a sequence model ``(batch, time) -> (batch, time, classes)`` to return the last position's logits.

    With it, a :class:`TinyTransformer` is a classifier of whole sequences that
    :func:`lnbook.ml.training.train` can fit (e.g. :func:`lnbook.ml.data.associative_recall`).
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(tokens)[:, -1, :]
