"""lnbook.ln_activation.ensemble: many seeds trained at once equal separate runs of train()."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lnbook.ln_activation.ensemble import seed_sweep_batched
from lnbook.ln_activation.lab import ln_mlp
from lnbook.ml.data import spiral
from lnbook.ml.models import mlp
from lnbook.ml.training import model_device, train
from tests.strategies import devices


@pytest.mark.parametrize("make", [lambda: ln_mlp(2, 2, features=4), lambda: mlp(2, 3, 2, 2, norm="rms"),
                                  lambda: mlp(2, 4, 2, 2, norm="none", activation="tanh")])
@pytest.mark.parametrize("device", devices)
def test_batched_seeds_equal_separate_runs(make, device):
    X, y = spiral(200, seed=0)  # on the CPU: both functions move them to ``device``
    sweep = seed_sweep_batched(make, X, y, [3, 7], epochs=40, lr=0.01, log_every=10, progress=False, keep_states=True,
                               device=device)
    for i, seed in enumerate([3, 7]):
        torch.manual_seed(seed)
        alone = make()
        h = train(alone, X, y, epochs=40, batch_size=None, optimizer="adam", lr=0.01, log_every=10,
                  stop_at_fit=False, progress=False, report=False, device=device)
        # both stay on the device they trained on (on CUDA one came back on the CPU before, issue 29)
        assert model_device(alone).type == model_device(sweep.models[i]).type == torch.device(device).type
        assert sweep.histories[i].device == h.device
        for a, b in zip(alone.parameters(), sweep.models[i].parameters()):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
        assert sweep.histories[i].epochs == h.epochs == [10, 20, 30, 40]
        assert sweep.histories[i].loss == pytest.approx(h.loss, rel=1e-4)
        # the state kept at the last log is the trained model
        for a, b in zip(sweep.model_at(i, 40).parameters(), sweep.models[i].parameters()):
            torch.testing.assert_close(a, b)


def test_batched_sweep_refuses_what_it_cannot_train():
    X, y = spiral(50, seed=0)
    with pytest.raises(TypeError, match="nn.Sequential"):
        seed_sweep_batched(lambda: nn.Sequential(nn.Linear(2, 2), nn.GELU()), X, y, [0], epochs=1, lr=0.1)
    with pytest.raises(ValueError, match="outputs"):
        seed_sweep_batched(lambda: ln_mlp(2, 1, d_out=1), X, y, [0], epochs=1, lr=0.1, progress=False)
    sweep = seed_sweep_batched(lambda: ln_mlp(2, 1), X, y, [0], epochs=3, lr=0.1, progress=False)
    with pytest.raises(ValueError, match="kept no states"):
        sweep.model_at(0, 3)


@pytest.mark.parametrize("share", ["module", "parameter"])
def test_batched_sweep_refuses_a_module_or_parameter_used_twice(share):
    # parameters are looked up by position and named_parameters() lists a shared one once, so a LayerNorm used at
    # positions 1 and 3 was trained at position 1 only while the returned model used it at both (ref11_ch6 finding 1:
    # the sweep reported 0.95 for a model that evaluates to 0.67)
    def make():
        if share == "module":
            ln = nn.LayerNorm(4)
            return nn.Sequential(nn.Linear(2, 4), ln, nn.Linear(4, 4), ln, nn.Linear(4, 2))
        a, b = nn.LayerNorm(4), nn.LayerNorm(4)
        b.weight = a.weight
        return nn.Sequential(nn.Linear(2, 4), a, nn.Linear(4, 4), b, nn.Linear(4, 2))

    X, y = spiral(50, seed=0)
    with pytest.raises(ValueError, match=r"positions \[1, 3\].*separate module for each position"):
        seed_sweep_batched(make, X, y, [0], epochs=1, lr=0.1, progress=False)
    # the same net with distinct modules trains
    seed_sweep_batched(lambda: nn.Sequential(nn.Linear(2, 4), nn.LayerNorm(4), nn.Linear(4, 4), nn.LayerNorm(4),
                                             nn.Linear(4, 2)), X, y, [0], epochs=1, lr=0.1, progress=False)


def test_batched_sweep_refuses_frozen_parameters_and_subclassed_layers():
    """Referee 14 of chapter 6, findings 7 and 8: seed_sweep_batched trained parameters with requires_grad=False (a
    frozen first layer moved by 0.32, where train() leaves it alone) and computed a subclass of nn.LayerNorm with its
    own forward as a plain LayerNorm (initial loss 0.99 against the model's 0.86). Both are refused, saying to use
    train(); the same models run under train()."""
    X, y = spiral(50, seed=0)

    def frozen():
        model = ln_mlp(2, 2, features=4)
        model[0].weight.requires_grad_(False)
        return model

    with pytest.raises(ValueError, match=r"requires_grad=False.*lnbook.ml.training.train"):
        seed_sweep_batched(frozen, X, y, [0], epochs=1, lr=0.1, progress=False)
    model = frozen()
    before = model[0].weight.detach().clone()
    train(model, X, y, epochs=5, batch_size=None, optimizer="adam", lr=0.1, progress=False, report=False)
    assert torch.equal(model[0].weight, before)

    class ScaleOnlyLN(nn.LayerNorm):
        def forward(self, x):
            return x / x.pow(2).mean(-1, keepdim=True).add(self.eps).sqrt() * self.weight

    def subclassed():
        model = ln_mlp(2, 2, features=4)
        model[1] = ScaleOnlyLN(4)
        return model

    with pytest.raises(TypeError, match=r"not subclasses.*ScaleOnlyLN"):
        seed_sweep_batched(subclassed, X, y, [0], epochs=1, lr=0.1, progress=False)
