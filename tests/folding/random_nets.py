"""Helpers shared by tests/folding/test_fold.py and tests/folding/test_zero_mean.py: random LayerNorm
gains and biases, the relative output difference of two models, a quiet fold, and the random residual
networks (:class:`RandomNet`) with their exactness check (:func:`check_random_net`), and a writer made exactly
centred (:func:`make_exactly_centred`)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from lnbook.folding.fold import centre_writers, find_foldable_layernorms, fold_layernorms, max_output_difference

__all__ = ["randomise_norms", "relative_difference", "quiet_fold", "RandomNet", "check_random_net", "make_exactly_centred"]


def randomise_norms(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give every LayerNorm a random gain and bias, as after training (at init they are 1 and 0)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm) and m.weight is not None:
                m.weight.copy_(1 + 0.3 * torch.randn(m.weight.shape, generator=g, dtype=m.weight.dtype))
                m.bias.copy_(0.3 * torch.randn(m.bias.shape, generator=g, dtype=m.bias.dtype))
    return model


def make_exactly_centred(linear: nn.Linear) -> nn.Linear:
    """Make every column and the bias of ``linear`` sum to exactly 0 in every dtype: the second half of its outputs
    is minus the first (in place; needs an even number of outputs)."""
    half, rest = divmod(linear.out_features, 2)
    if rest:
        raise ValueError(f"make_exactly_centred needs an even number of outputs, got {linear.out_features}")
    with torch.no_grad():
        linear.weight[half:] = -linear.weight[:half]
        if linear.bias is not None:
            linear.bias[half:] = -linear.bias[:half]
    return linear


def relative_difference(a, b, *inputs, **kwargs) -> float:
    diff, scale = max_output_difference(a, b, inputs if len(inputs) != 1 else inputs[0], kwargs or None)
    return diff / scale


def quiet_fold(model, example, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fold_layernorms(model, example, **kw)


class RandomNet(nn.Module):
    """Token embedding, then a random sequence of blocks, then an optional head."""

    BLOCKS = ("pre", "post", "ln", "linear", "relu", "scale", "gain", "bias", "mix", "flip", "drop")

    def __init__(self, blocks, head, affine, d=8, vocab=11, tokens=5):
        super().__init__()
        self.blocks = list(blocks)
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList()
        for i, kind in enumerate(self.blocks):
            aff = affine[i % len(affine)]
            if kind == "pre":
                self.layers.append(nn.Sequential(nn.LayerNorm(d, elementwise_affine=aff), nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d)))
            elif kind == "post":
                self.layers.append(nn.ModuleList([nn.Linear(d, d), nn.LayerNorm(d, elementwise_affine=aff)]))
            elif kind == "ln":
                self.layers.append(nn.LayerNorm(d, elementwise_affine=aff))
            elif kind == "linear":
                self.layers.append(nn.Linear(d, d))
            elif kind in ("gain", "bias"):
                self.layers.append(nn.ParameterList([nn.Parameter(torch.randn(d))]))
            elif kind == "mix":
                self.layers.append(nn.ParameterList([nn.Parameter(torch.randn(tokens, tokens))]))
            elif kind == "drop":
                self.layers.append(nn.Dropout(0.3))
            else:
                self.layers.append(nn.Identity())
        self.head = nn.Linear(d, 3) if head else None

    def forward(self, tokens):
        x = self.embed(tokens)
        for kind, layer in zip(self.blocks, self.layers):
            if kind == "pre":
                x = x + layer(x)
            elif kind == "post":
                x = layer[1](x + layer[0](x))
            elif kind in ("ln", "linear", "drop"):
                x = layer(x)
            elif kind == "relu":
                x = torch.relu(x)
            elif kind == "scale":
                x = 0.5 * x
            elif kind == "gain":
                x = x * layer[0]
            elif kind == "bias":
                x = x + layer[0]
            elif kind == "mix":
                x = torch.softmax(layer[0], -1) @ x
            elif kind == "flip":
                x = x.flip(1)
        return self.head(x) if self.head is not None else x


def check_random_net(blocks, head, affine, seed):
    torch.manual_seed(seed)
    model = randomise_norms(RandomNet(blocks, head, affine), seed).double()
    tokens = torch.randint(0, 11, (2, 5))
    report = find_foldable_layernorms(model, tokens)
    other = torch.randint(0, 11, (4, 5))
    assert relative_difference(model, centre_writers(model, report), other) < 1e-12, report.table()
    if any(v.foldable and v.module for v in report.layer_norms):
        folded = quiet_fold(model, tokens, report=report)
        assert relative_difference(model, folded, other) < 1e-12, report.table()
    else:
        with pytest.raises(ValueError):
            fold_layernorms(model, tokens, report=report)
    return report


class UncentredRMSNorm(nn.Module):
    """A wrong fold for negative controls: RMSNorm with the LayerNorm's gain and eps, plus its bias, writers NOT
    centred."""

    def __init__(self, ln: nn.LayerNorm):
        super().__init__()
        self.rms = nn.RMSNorm(ln.normalized_shape, eps=ln.eps, dtype=ln.weight.dtype)
        with torch.no_grad():
            self.rms.weight.copy_(ln.weight)
        self.bias = nn.Parameter(ln.bias.detach().clone())

    def forward(self, x):
        return self.rms(x) + self.bias
