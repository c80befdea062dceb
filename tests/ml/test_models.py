"""Tests of :mod:`lnbook.ml.models`.

Chapter 5: local MNIST / CIFAR-10 readers (on files made here), the recall task, the small CNN,
the sequence read-out, train() with held-out data, and the random-label runs.

lnbook.ml.training (the one loop), lnbook.ml.models (norm switch) and lnbook.ml.data (made or shipped datasets).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from lnbook.core.norms import group_layer_norm, parallel_layer_norm
from lnbook.ml.models import (
    TinyTransformer,
    make_norm,
    mlp,
    small_cnn,
)
from lnbook.ml.training import train


def _probe(width: int) -> torch.Tensor:
    return torch.randn(5, width, generator=torch.Generator().manual_seed(1)) * 3 + 2


def test_small_cnn_norms():
    torch.manual_seed(0)
    x = torch.randn(6, 64)
    for norm, kw in (("none", {}), ("ln", {}), ("lng", {"groups": 4})):
        assert small_cnn((1, 8, 8), 10, norm=norm, **kw)(x).shape == (6, 10)
    net = small_cnn((1, 8, 8), 10, norm="lng", groups=4, affine=False)
    feats = net[1](net[0](x))  # (6, 16, 8, 8) after the first convolution
    out = net[2](feats)
    # LN-G over channel groups of a feature map = LN of each group's (C/G) x H x W values
    ref = group_layer_norm(feats.reshape(6, 4, -1), 1).reshape(feats.shape)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="does not divide the 16 channels"):
        small_cnn((1, 8, 8), 10, norm="lng", groups=3)
    with pytest.raises(ValueError, match="needs groups"):
        small_cnn((1, 8, 8), 10, norm="lng")
    with pytest.raises(ValueError, match="image_shape"):
        small_cnn((8, 8), 10)


def test_make_norm_computes_what_its_name_says():
    x = _probe(12)
    centred = x - x.mean(-1, keepdim=True)
    ln = centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + 1e-5)
    rms = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(make_norm("ln", 12)(x), ln)
    torch.testing.assert_close(make_norm("rms", 12)(x), rms)
    torch.testing.assert_close(make_norm("none", 12)(x), x)
    torch.testing.assert_close(make_norm("lng", 12, groups=3)(x), group_layer_norm(x, 3))
    torch.testing.assert_close(make_norm("pln", 12, group_size=4, p=1.5)(x), parallel_layer_norm(x, 4, p=1.5))
    # LN-G with one group is LN; the affine form starts as the plain norm and learns a gain
    torch.testing.assert_close(make_norm("lng", 12, groups=1)(x), ln)
    aff = make_norm("lng", 12, groups=3, affine=True)
    torch.testing.assert_close(aff(x), group_layer_norm(x, 3))
    assert sum(p.numel() for p in aff.parameters()) == 24
    # eps is passed through to RMSNorm (torch's default would be the dtype's machine epsilon)
    assert make_norm("rms", 12, eps=1e-3).eps == 1e-3


def test_make_norm_refuses_bad_configurations():
    with pytest.raises(ValueError, match="norm must be one of"):
        make_norm("batch", 8)
    with pytest.raises(ValueError, match="does not divide the width"):
        make_norm("lng", 10, groups=3)
    with pytest.raises(ValueError, match="needs groups="):
        make_norm("lng", 10)
    with pytest.raises(ValueError, match="does not divide the width"):
        make_norm("pln", 10, group_size=4)
    with pytest.raises(ValueError, match="only used by norm='lng'"):
        make_norm("ln", 10, groups=2)
    with pytest.raises(ValueError, match="width >= 2"):
        make_norm("ln", 1)


def test_mlp_layouts():
    net = mlp(2, 3, 2, 2, norm="ln")
    kinds = [type(m).__name__ for m in net]
    assert kinds == ["Linear", "LayerNorm", "Linear", "LayerNorm", "Linear"]
    relu = mlp(4, 8, 1, 3, norm="none", activation="relu")
    assert [type(m).__name__ for m in relu] == ["Linear", "Identity", "ReLU", "Linear"]
    # a linear net is an affine map: f(a x + (1-a) z) = a f(x) + (1-a) f(z); an LN-Net is not
    lin, lnnet = mlp(4, 8, 3, 2, norm="none"), mlp(4, 8, 3, 2, norm="ln")
    x, z = _probe(4), _probe(4).flip(0)
    for net, affine in ((lin, True), (lnnet, False)):
        with torch.no_grad():
            mix = net(0.3 * x + 0.7 * z) - (0.3 * net(x) + 0.7 * net(z))
        assert bool(mix.abs().max() < 1e-5) is affine
    with pytest.raises(ValueError, match="activation must be one of"):
        mlp(2, 3, 1, 2, activation="swishy")


@pytest.mark.parametrize("norm,kw", [("ln", {}), ("rms", {}), ("lng", {"groups": 4}), ("pln", {"group_size": 8})])
def test_tiny_transformer_runs_and_is_causal(norm, kw):
    torch.manual_seed(0)
    model = TinyTransformer(vocab_size=11, d_model=32, n_heads=4, n_layers=2, max_len=16, norm=norm, **kw)
    tokens = torch.randint(11, (3, 10), generator=torch.Generator().manual_seed(0))
    logits = model(tokens)
    assert logits.shape == (3, 10, 11)
    # causality: changing the last token changes no earlier position's logits
    changed = tokens.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 11
    torch.testing.assert_close(model(changed)[:, :-1], logits[:, :-1])
    assert not torch.allclose(model(changed)[:, -1], logits[:, -1])
    states = model.hidden_states(tokens)
    assert len(states) == 3 and all(s.shape == (3, 10, 32) for s in states)


def test_tiny_transformer_post_norm_and_bad_input():
    model = TinyTransformer(vocab_size=7, d_model=16, n_heads=2, n_layers=1, max_len=8, norm_first=False)
    assert isinstance(model.final_norm, nn.Identity)
    tokens = torch.zeros(2, 8, dtype=torch.long)
    # post-norm: the last residual state is the output of a LayerNorm (mean 0, variance 1 before the affine)
    last = model.hidden_states(tokens)[-1]
    torch.testing.assert_close(last.mean(-1), torch.zeros(2, 8), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="exceeds max_len"):
        model.hidden_states(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(TypeError, match="torch.long"):
        model.hidden_states(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="does not divide d_model"):
        TinyTransformer(vocab_size=7, d_model=10, n_heads=3)


def test_train_regression_reaches_target_loss():
    torch.manual_seed(0)
    x = torch.linspace(-1, 1, 64).unsqueeze(1)
    y = 3 * x.squeeze(1) - 1
    model = mlp(1, 4, 0, 1)  # a single linear layer fits a line
    h = train(model, x, y, task="regression", epochs=2000, batch_size=None, optimizer="adam", lr=0.05,
              target_loss=1e-6, progress=False, report=False)
    assert h.final_loss <= 1e-6 and h.stopped_early and math.isnan(h.final_accuracy)
