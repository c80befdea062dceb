"""Chapter 6, "Before and after a drop": what the folding criterion reads (the last LayerNorm's sphere), what the
read-out turn reads (the last LayerNorm's gain), and where a transition's steepest step is placed (referee 14 of
chapter 6, findings 4, 5 and 14: each of these could be changed with every other test passing)."""

from __future__ import annotations

import numpy as np
import torch

from lnbook.ln_activation.lab import DropSnapshot, SeedSweep, ln_mlp, steepest_step_snapshot
from lnbook.ln_activation.phases import phase_transitions
from lnbook.ml.data import spiral
from lnbook.ml.training import History
from tests.ln_activation.test_lab import _swap_of


def test_the_folding_criterion_reads_the_last_layer_norm():
    """A snapshot whose first LayerNorm's corrected points travel far (90 degrees, three times the others) and whose
    last LayerNorm's travel little (5 degrees): the verdict and the critical ratio are the last layer's (no; 0), not
    the first's (yes; 3)."""
    flipped = np.array([True] * 5 + [False] * 15)
    first = np.where(flipped, 90.0, 30.0)
    last = np.where(flipped, 5.0, 30.0)
    snap = DropSnapshot(0, 1, [], [], [first, last], flipped, ~flipped, 0.0)
    assert snap.supports_folding(layer=0) and snap.critical_ratio(layer=0) == 3.0
    assert not snap.supports_folding() and snap.critical_ratio() == 0.0


def test_the_read_out_turn_reads_the_last_layer_norms_gain():
    """A drop that changes only the last LayerNorm's gain (non-uniformly) moves no point on the spheres (positions are
    read before the gain) but turns the read-out's plane normal: the turn is the angle between P(gamma_before * dw) and
    P(gamma_after * dw), P the centring projector, dw the read-out's class difference."""

    def regain(state):
        state["3.weight"] = state["3.weight"] * torch.tensor([[3.0, 0.2, 1.0, -1.5]], dtype=state["3.weight"].dtype)

    snap, _ = _swap_of(regain)
    assert all(float(d.max()) < 1e-9 for d in snap.displacement)
    torch.manual_seed(0)
    model = ln_mlp(2, 2, features=4).double()
    dw = (model[4].weight[1] - model[4].weight[0]).detach()
    g0 = model[3].weight.detach()
    g1 = g0 * torch.tensor([3.0, 0.2, 1.0, -1.5], dtype=torch.float64)
    a, b = g0 * dw, g1 * dw
    a, b = a - a.mean(), b - b.mean()
    expected = float(torch.rad2deg(torch.arccos((a @ b) / (a.norm() * b.norm()))))
    assert snap.readout_turn > 1.0 and abs(snap.readout_turn - expected) < 1e-6, (snap.readout_turn, expected)


def test_a_transition_is_placed_at_the_end_of_its_steepest_logged_step():
    """On a loss logged every 10 epochs that sits at 1 until epoch 300 and is 1e-3 from epoch 310 on, the one
    transition found is steepest at epoch 310 exactly (the end of the falling step), and steepest_step_snapshot, driven
    by that transition on a sweep whose first layer is negated between 300 and 310, spans 300 to 310 (every first-LN
    point at its antipode); one sample early it would span 290 to 300, where nothing moves."""
    epochs = list(range(10, 410, 10))
    loss = [1.0 if e <= 300 else 1e-3 for e in epochs]
    (t,) = phase_transitions(epochs, loss, window=50)
    assert t.epoch == 310
    torch.manual_seed(0)
    model = ln_mlp(2, 2, features=4).double()
    before = {k: v.detach().clone().unsqueeze(0) for k, v in model.named_parameters()}
    after = {k: v.clone() for k, v in before.items()}
    after["0.weight"], after["0.bias"] = -after["0.weight"], -after["0.bias"]
    h = History(task="classification", epochs=epochs, loss=loss, accuracy=[0.5 if e <= 300 else 1.0 for e in epochs])
    sweep = SeedSweep([0], [h], [model], 0.95, states=[before if e <= 300 else after for e in epochs])
    X, y = spiral(200, seed=0)
    snap = steepest_step_snapshot(sweep, 0, t, X.double(), y)
    assert (snap.before_epoch, snap.after_epoch) == (300, 310)
    assert np.allclose(snap.displacement[0], 180.0, atol=1e-6)


def test_best_sector_rule_accuracy_does_not_change_when_data_and_apex_are_translated():
    """Referee 14 of chapter 6, finding 6: the 'at the apex' tie radius was relative to the coordinates' size from the
    origin, so the spiral moved by 1e6 with its apex lost every point to 'at the apex' (accuracy 0.0 instead of 0.749).
    Sizes are measured from the data's midrange: offsets up to 1e9 give the same value."""
    from lnbook.ln_activation.width3 import best_sector_rule_accuracy

    X, y = spiral(1000, turns=1.0, noise=0.0, seed=0)
    X, y = X.double().numpy(), y.numpy()
    apex = np.array([[0.3, 0.2]])
    at_origin = best_sector_rule_accuracy(X, y, apex)
    assert 0.7 < float(at_origin[0]) < 0.8
    for offset in (1e3, 1e6, 1e9):
        assert np.array_equal(best_sector_rule_accuracy(X + offset, y, apex + offset), at_origin), offset


def test_the_transition_rule_on_its_boundaries():
    """Referee 14 of chapter 6, finding 10: the rule's boundaries as the chapter states them. Logged every 10 epochs,
    window 50 (5 samples, the plateau as long): a fall of exactly min_drop decades whose first steep window starts at
    sample 5 (a full plateau before it) is a transition; one starting at sample 4 is not, and neither is the same fall
    when min_drop is a hair larger."""
    epochs = list(range(10, 410, 10))

    def falls_after(j):  # 1 up to sample j, then 0.1: exactly one decade
        return [1.0 if i <= j else 0.1 for i in range(len(epochs))]

    (t,) = phase_transitions(epochs, falls_after(9), window=50, min_drop=1.0)
    assert (t.start_epoch, t.epoch, t.drop_decades) == (60, 110, 1.0)
    assert phase_transitions(epochs, falls_after(8), window=50, min_drop=1.0) == []
    assert phase_transitions(epochs, falls_after(9), window=50, min_drop=1.0 + 1e-9) == []
