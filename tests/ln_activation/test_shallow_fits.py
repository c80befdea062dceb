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
    train_shallow_net_specs,
    train_shallow_net_widths,
    train_shallow_nets,
    trained_errors,
)


def test_shallow_net_kinds_have_the_same_parameter_count():
    counts = {kind: sum(p.numel() for p in shallow_net(kind, 16).parameters()) for kind in ("pln", "ln", "relu")}
    assert set(counts.values()) == {3 * 16 + 1}
    with pytest.raises(ValueError, match="kind must be"):
        shallow_net("gelu", 8)


@pytest.mark.parametrize("kind,group_size", [("pln", 2), ("pln", 8), ("relu", 2), ("ln", 2)])
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


@pytest.mark.parametrize("kind", ["pln", "ln", "relu"])
def test_train_shallow_net_widths_equals_separate_training_per_width(kind):
    """Widths trained side by side (LN over each block, PLN groups within blocks) equal train_shallow_net per
    width to float32 rounding after 40 steps; the cast keeps its order."""
    together = train_shallow_net_widths(kind, smooth_target, [16, 4, 8], steps=40, lr=3e-3, eps=1e-3, seed=2, device="cpu")
    assert list(together) == [16, 4, 8]
    for width, net in together.items():
        alone = train_shallow_net(kind, smooth_target, width, steps=40, lr=3e-3, eps=1e-3, seed=2, device="cpu")
        for p, q in zip(net.parameters(), alone.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="at least one width"):
        train_shallow_net_widths(kind, smooth_target, [], steps=5)


def test_train_shallow_net_specs_trains_mixed_nets_each_as_if_alone():
    """PLN pairs and groups of 8 at two eps, an LN net and a ReLU net, side by side: each equals its own
    train_shallow_net to float32 rounding after 40 steps (amplified to about 2e-5 in one weight)."""
    specs = [dict(kind="pln", width=16, seed=1, eps=1e-5, group_size=2), dict(kind="pln", width=16, seed=1, eps=1e-3, group_size=2),
             dict(kind="pln", width=16, seed=4, eps=1e-3, group_size=8), dict(kind="ln", width=8, seed=0),
             dict(kind="relu", width=8, seed=3), dict(kind="pln", width=16, seed=2, eps=1e-5, group_size=2)]
    nets = train_shallow_net_specs(specs, smooth_target, steps=40, lr=3e-3, device="cpu")
    for spec, net in zip(specs, nets):
        alone = train_shallow_net(spec["kind"], smooth_target, spec["width"], steps=40, lr=3e-3, seed=spec["seed"],
                                  eps=spec.get("eps", 1e-5), group_size=spec.get("group_size", 2), device="cpu")
        for p, q in zip(net.parameters(), alone.parameters()):  # a near-step pair at eps 1e-5 amplifies rounding a little
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="at least one net"):
        train_shallow_net_specs([], smooth_target, steps=5)
    with pytest.raises(ValueError, match="each spec"):
        train_shallow_net_specs([dict(kind="pln", width=8, lr=1.0)], smooth_target, steps=5)


def test_train_shallow_net_is_seeded_and_trained_errors_uses_it():
    nets = [train_shallow_net("pln", smooth_target, 8, steps=30, seed=3) for _ in range(2)]
    for p, q in zip(nets[0].parameters(), nets[1].parameters()):
        assert torch.equal(p, q)
    err = trained_errors("pln", smooth_target, [8], steps=30, seed=3)[8]
    assert err.sup == sup_error(train_shallow_net_widths("pln", smooth_target, [8], steps=30, seed=3)[8], smooth_target, n=40 * 256)
    assert err.sup == pytest.approx(sup_error(nets[0], smooth_target, n=40 * 256), rel=1e-4)
