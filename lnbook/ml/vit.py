r"""A small ViT-style image classifier with a ``norm=`` switch (chapter 7's vision example).

:class:`TinyViT` cuts an image into patches with a strided ``nn.Conv2d`` (the usual patch
embedding), prepends a learned class token, adds learned position embeddings and runs pre-norm
blocks (``x + attn(norm1(x))``, ``x + mlp(norm2(x))``) whose attention is torch's
``nn.MultiheadAttention``; a final norm and a linear head read the class token. It is small enough
to train on scikit-learn's 8x8 digits in seconds, and it is the book's example of a vision model
whose every LayerNorm is foldable (:mod:`lnbook.folding.fold`): the patch convolution, the class token,
the position embeddings and the output projections of attention and MLP all write to the residual
stream, and everything that reads the stream is a norm.
"""

from __future__ import annotations

import torch
from torch import nn

from lnbook.ml.models import make_norm
from lnbook.util.validation import check_positive_int

__all__ = ["ViTBlock", "TinyViT"]


class ViTBlock(nn.Module):
    """Pre-norm block: ``x + attn(norm1(x))`` then ``x + mlp(norm2(x))`` (``nn.MultiheadAttention``)."""

    def __init__(self, d_model: int, n_heads: int, d_mlp: int, dropout: float = 0.0, **norm_kw):
        super().__init__()
        self.norm1 = make_norm(width=d_model, **norm_kw)
        self.attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.norm2 = make_norm(width=d_model, **norm_kw)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_mlp), nn.GELU(), nn.Linear(d_mlp, d_model), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class TinyViT(nn.Module):
    """ViT-style classifier of ``(batch, channels, size, size)`` images.

    ``patch_size`` must divide ``image_size``; the sequence is the class token followed by
    ``(image_size / patch_size)**2`` patch tokens. ``norm`` is any name of
    :func:`lnbook.ml.models.make_norm` (with a per-feature affine, as in ViT).
    """

    def __init__(
        self,
        image_size: int = 8,
        patch_size: int = 2,
        in_channels: int = 1,
        n_classes: int = 10,
        d_model: int = 32,
        n_heads: int = 4,
        n_layers: int = 2,
        d_mlp: int | None = None,
        *,
        norm: str = "ln",
        eps: float = 1e-5,
        dropout: float = 0.0,
    ):
        super().__init__()
        image_size = check_positive_int(image_size, "image_size")
        patch_size = check_positive_int(patch_size, "patch_size")
        if image_size % patch_size != 0:
            raise ValueError(f"patch_size={patch_size} must divide image_size={image_size}")
        d_model = check_positive_int(d_model, "d_model", minimum=2)
        n_heads = check_positive_int(n_heads, "n_heads")
        if d_model % n_heads != 0:
            raise ValueError(f"n_heads={n_heads} does not divide d_model={d_model}")
        d_mlp = 4 * d_model if d_mlp is None else check_positive_int(d_mlp, "d_mlp")
        n_patches = (image_size // patch_size) ** 2
        norm_kw = dict(norm=norm, eps=eps, affine=True)
        self.image_size, self.in_channels = image_size, check_positive_int(in_channels, "in_channels")
        self.patch = nn.Conv2d(in_channels, d_model, patch_size, stride=patch_size)
        self.cls = nn.Parameter(0.02 * torch.randn(1, 1, d_model))
        self.pos = nn.Parameter(0.02 * torch.randn(1, n_patches + 1, d_model))
        self.blocks = nn.ModuleList(
            ViTBlock(d_model, n_heads, d_mlp, dropout, **norm_kw) for _ in range(check_positive_int(n_layers, "n_layers"))
        )
        self.norm = make_norm(width=d_model, **norm_kw)
        self.head = nn.Linear(d_model, check_positive_int(n_classes, "n_classes"))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch(images).flatten(2).transpose(1, 2)  # (batch, patches, d_model)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x[:, 0]))
