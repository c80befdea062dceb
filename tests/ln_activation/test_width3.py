"""lnbook.ln_activation.lab: LN MLPs, their hidden geometry, and the width-3 limit (chapter 6).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from lnbook.core.norms import LayerNorm
from lnbook.ln_activation.width3 import (
    best_sector_rule_accuracy,
    sign_changes_on_circle,
    width3_apex,
)
from lnbook.ml.data import spiral


def width3_net(seed: int) -> nn.Sequential:
    """Linear(2,3) -> LN -> Linear(3,3) -> LN -> Linear(3,2), eps = 0, float64, random weights."""
    g = torch.Generator().manual_seed(seed)
    net = nn.Sequential(nn.Linear(2, 3), LayerNorm(eps=0.0), nn.Linear(3, 3), LayerNorm(eps=0.0), nn.Linear(3, 2)).double()
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 1.5)
    return net


def score_of(net):
    def score(x):
        with torch.no_grad():
            out = net(x)
        return out[:, 1] - out[:, 0]

    return score


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 100_000))
def test_width3_net_sees_only_the_direction_from_its_apex(seed):
    net = width3_net(seed)
    apex = width3_apex(net[0])
    g = torch.Generator().manual_seed(seed + 1)
    directions = torch.randn(20, 2, generator=g, dtype=torch.float64)
    directions /= directions.norm(dim=1, keepdim=True)
    score = score_of(net)
    values = torch.stack([score(torch.as_tensor(apex) + r * directions) for r in (0.01, 0.3, 2.0, 50.0)])
    # the same value along every ray from the apex (float64 rounding only)
    assert float((values - values[0]).abs().max()) <= 1e-9 * (1 + float(values.abs().max()))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 100_000))
def test_width3_decision_changes_at_most_four_times_around_the_apex(seed):
    net = width3_net(seed)
    apex = width3_apex(net[0])
    for radius in (0.1, 1.0, 10.0):
        assert sign_changes_on_circle(score_of(net), apex, radius, n=4096) <= 4


def test_four_sign_changes_do_occur_so_the_bound_is_tight():
    counts = [sign_changes_on_circle(score_of(width3_net(seed)), width3_apex(width3_net(seed)[0]), 1.0, n=2048)
              for seed in range(300)]
    assert max(counts) == 4 and set(counts) <= {0, 2, 4}


def test_a_width4_layer_has_no_apex_and_width3_apex_refuses_it():
    # LN over 4 features after Linear(2, 4) is the core map of R^3: an injective map of the plane
    with pytest.raises(ValueError, match=r"nn.Linear\(2, 3\)"):
        width3_apex(nn.Linear(2, 4))
    singular = nn.Linear(2, 3).double()
    with torch.no_grad():
        singular.weight.copy_(torch.tensor([[1.0, 2.0], [2.0, 4.0], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="singular"):
        width3_apex(singular)


def test_sector_rule_ceiling_on_the_spiral_and_on_a_separable_set():
    """No rule "at most four rays from one point" classifies the noise-free 1-turn spiral: at every
    apex of a grid over the data (and far away, where sectors become strips), the best such rule
    misclassifies more than 10% of the points. On data that two sectors do separate it reaches 1."""
    X, y = spiral(1000, turns=1.0, noise=0.0, seed=0)
    ticks = np.linspace(-1.2, 1.2, 25)
    grid = np.stack(np.meshgrid(ticks, ticks), -1).reshape(-1, 2)
    far = 1e4 * np.stack([np.cos(np.linspace(0, 2 * np.pi, 64)), np.sin(np.linspace(0, 2 * np.pi, 64))], 1)
    ceiling = best_sector_rule_accuracy(X.numpy(), y.numpy(), np.concatenate([grid, far]))
    assert float(ceiling.max()) <= 0.9
    # a set that two opposite sectors around (0.1, 0.2) separate
    g = np.random.default_rng(0)
    P = g.uniform(-1, 1, size=(400, 2))
    ang = np.arctan2(P[:, 1] - 0.2, P[:, 0] - 0.1)
    lab = ((ang > 0.3) & (ang < 1.5)) | (ang < -2.0)
    assert best_sector_rule_accuracy(P, lab.astype(int), [[0.1, 0.2], [5.0, 5.0]])[0] == 1.0
    # and a random labelling is far from it
    assert best_sector_rule_accuracy(P, g.integers(0, 2, 400), [[0.1, 0.2]])[0] < 0.7
