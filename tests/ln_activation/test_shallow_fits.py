"""lnbook.ln_activation.shallow_fits: shallow nets of the three kinds, their training and measured errors (chapter 6).
"""

from __future__ import annotations

import pytest
import torch

from lnbook.ln_activation.shallow_fits import (
    shallow_net,
    smooth_target,
    sup_error,
    train_shallow_net,
    train_shallow_nets,
    trained_errors,
)


def test_shallow_net_kinds_have_the_same_parameter_count():
    counts = {kind: sum(p.numel() for p in shallow_net(kind, 16).parameters()) for kind in ("pln", "ln", "relu")}
    assert set(counts.values()) == {3 * 16 + 1}
    with pytest.raises(ValueError, match="kind must be"):
        shallow_net("gelu", 8)


@pytest.mark.parametrize("kind,group_size", [("pln", 2), ("pln", 8), ("relu", 2)])
def test_train_shallow_nets_equals_separate_training_per_seed(kind, group_size):
    """train_shallow_nets trains each seed's network as train_shallow_net would (same initialisation, Adam on its own
    loss, same schedule): after 40 steps every parameter agrees to float32 rounding, and the seeds differ."""
    seeds = (0, 5, 9)
    together = train_shallow_nets(kind, smooth_target, 16, seeds, steps=40, lr=3e-3, eps=1e-3, group_size=group_size, device="cpu")
    for seed, net in zip(seeds, together):
        alone = train_shallow_net(kind, smooth_target, 16, steps=40, lr=3e-3, eps=1e-3, group_size=group_size, seed=seed, device="cpu")
        for p, q in zip(net.parameters(), alone.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    assert not torch.equal(together[0][0].weight, together[1][0].weight)
    with pytest.raises(ValueError, match="at least one seed"):
        train_shallow_nets("pln", smooth_target, 16, [], steps=5)
    with pytest.raises(ValueError, match="'pln' or 'relu'"):
        train_shallow_nets("ln", smooth_target, 16, [0, 1], steps=5)


def test_train_shallow_net_is_seeded_and_trained_errors_uses_it():
    nets = [train_shallow_net("pln", smooth_target, 8, steps=30, seed=3) for _ in range(2)]
    for p, q in zip(nets[0].parameters(), nets[1].parameters()):
        assert torch.equal(p, q)
    err = trained_errors("pln", smooth_target, [8], steps=30, seed=3)[8]
    assert err.sup == sup_error(nets[0], smooth_target, n=40 * 256)
