"""Chapter 7 helpers: shipped text (lnbook.ml.text), timing (lnbook.util.timing), next-token training, TinyViT.
"""

from __future__ import annotations

import pytest
import torch

from lnbook.ml.vit import TinyViT


def test_tiny_vit_shapes_and_errors():
    model = TinyViT(image_size=8, patch_size=4, n_classes=3, d_model=16, n_heads=2, n_layers=1)
    assert model(torch.randn(5, 1, 8, 8)).shape == (5, 3)
    assert model.pos.shape == (1, 5, 16)
    with pytest.raises(ValueError, match="must divide image_size"):
        TinyViT(image_size=8, patch_size=3)
    with pytest.raises(ValueError, match="does not divide d_model"):
        TinyViT(d_model=10, n_heads=4)
    rms = TinyViT(norm="rms", n_layers=1)
    assert sum(isinstance(m, torch.nn.RMSNorm) for m in rms.modules()) == 3
