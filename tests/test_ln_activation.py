"""lnbook.ln_activation: LN MLPs, their hidden geometry, and the width-3 limit (chapter 6)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from lnbook.data import spiral
from lnbook.ln_activation import (
    complement_basis,
    complement_coordinates,
    decision_grid,
    interpolate_path,
    layer_path,
    ln_mlp,
    norm_outputs,
    point_on_path,
    seed_sweep,
    sign_changes_on_circle,
    width3_apex,
    best_sector_rule_accuracy,
)
from lnbook.norms import LayerNorm


def test_ln_mlp_layout_and_norm_outputs_on_the_sphere():
    torch.manual_seed(0)
    net = ln_mlp(2, 3, features=4)
    assert [type(m).__name__ for m in net] == ["Linear", "LayerNorm"] * 3 + ["Linear"]
    with torch.no_grad():  # a gain and bias that are not the identity, to see that they are skipped
        net[1].weight.mul_(3.0)
        net[1].bias.add_(1.0)
    X, _ = spiral(200, seed=0)
    states = norm_outputs(net, X)
    assert len(states) == 4 and torch.equal(states[0], X)
    for z in states[1:]:
        torch.testing.assert_close(z.mean(-1), torch.zeros(200), atol=1e-6, rtol=0)
        # radius sqrt(d) = 2, up to eps = 1e-5 (inputs far from the line of constant vectors)
        assert float((z.norm(dim=-1) - 2).abs().max()) < 1e-2
    with pytest.raises(ValueError, match="no nn.LayerNorm"):
        norm_outputs(nn.Sequential(nn.Linear(2, 2)), X)
    with pytest.raises(ValueError, match="depth must be"):
        ln_mlp(2, 0)


@pytest.mark.parametrize("d", [2, 3, 4, 7])
def test_complement_basis_is_orthonormal_and_spans_the_complement(d):
    Q = complement_basis(d)
    torch.testing.assert_close(Q.T @ Q, torch.eye(d - 1, dtype=torch.float64))
    torch.testing.assert_close(Q @ Q.T, torch.eye(d, dtype=torch.float64) - 1.0 / d)
    z = torch.nn.functional.layer_norm(torch.randn(50, d, dtype=torch.float64) * 3, (d,), eps=0.0)
    torch.testing.assert_close(complement_coordinates(z).norm(dim=-1), torch.ones(50, dtype=torch.float64))


def test_layer_path_is_aligned_by_rotations_only():
    torch.manual_seed(1)
    net = ln_mlp(2, 2, features=4)
    X, _ = spiral(300, seed=2)
    raw = layer_path(net, X, align=False)
    aligned = layer_path(net, X)
    assert [c.shape for c in aligned] == [(300, 3)] * 3
    np.testing.assert_array_equal(aligned[0][:, 2], 0.0)  # planar input in the plane z = 0
    for r, a in zip(raw[1:], aligned[1:]):
        np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-2)  # unit sphere
        # an orthogonal map: all pairwise distances kept
        dr = np.linalg.norm(r[:, None] - r[None], axis=-1)
        da = np.linalg.norm(a[:, None] - a[None], axis=-1)
        np.testing.assert_allclose(da, dr, atol=1e-9)
    # and the alignment never moves a cloud further from its predecessor than the raw coordinates
    for i in (1, 2):
        prev = aligned[i - 1]
        assert np.linalg.norm(aligned[i] - prev) <= np.linalg.norm(raw[i] - prev) + 1e-9


def test_interpolation_passes_through_every_cloud():
    path = [np.zeros((5, 3)), np.ones((5, 3)), 3 * np.ones((5, 3))]
    frames, taus = interpolate_path(path, steps=4)
    assert len(frames) == 9 and taus[0] == 0 and taus[-1] == 2
    for l, cloud in enumerate(path):
        np.testing.assert_allclose(frames[4 * l], cloud)
    np.testing.assert_allclose(point_on_path(path, 1.5), 2 * np.ones((5, 3)))
    with pytest.raises(ValueError, match="tau must lie"):
        point_on_path(path, 2.5)


def test_decision_grid_gives_probabilities():
    torch.manual_seed(0)
    net = ln_mlp(2, 1, features=4)
    xx, yy, p = decision_grid(net, lim=1.0, n=17)
    assert xx.shape == yy.shape == p.shape == (17, 17)
    assert float(p.min()) >= 0 and float(p.max()) <= 1
    with pytest.raises(ValueError, match="two-class"):
        decision_grid(ln_mlp(2, 1, d_out=3), n=5)


def test_seed_sweep_counts_successes():
    X = torch.tensor([[-1.0, 0.0], [-0.8, 0.3], [0.9, 0.1], [1.0, -0.2]])
    y = torch.tensor([0, 0, 1, 1])
    sweep = seed_sweep(lambda: ln_mlp(2, 1, features=4), X, y, [0, 1], epochs=200, batch_size=None,
                       optimizer="adam", lr=0.05, progress=False)
    assert sweep.seeds == [0, 1] and sweep.n_success == 2 and sweep.successes == [True, True]
    assert sweep.best() in (0, 1)
    with pytest.raises(ValueError, match="success_at"):
        seed_sweep(lambda: ln_mlp(2, 1), X, y, [0], success_at=1.5, epochs=1)


def test_plot_sweep_curves_circles_the_transitions_of_each_run():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lnbook.ln_activation import SeedSweep, plot_sweep_curves
    from lnbook.phases import phase_transitions
    from lnbook.training import History

    epochs = list(range(1, 401))
    step = [1.0 if e < 200 else 1e-3 for e in epochs]  # one sudden drop after a plateau
    flat = [1.0 - 1e-4 * e for e in epochs]  # no transition
    runs = [History("classification", epochs, step, [0.5] * 200 + [1.0] * 200),
            History("classification", epochs, flat, [0.5] * 400)]
    sweep = SeedSweep([0, 1], runs, [None, None], success_at=0.99)
    fig, axes = plt.subplots(1, 2)
    assert plot_sweep_curves(axes, sweep, window=50) == 1
    expected_marks = len(phase_transitions(epochs, step, window=50))
    assert expected_marks >= 1
    for ax in axes:  # two curves, then one circle per transition
        assert len(ax.lines) == 2 + expected_marks
    assert axes[0].lines[-1].get_color() == "0.7"  # the run that did not fit (drawn last) is grey
    plt.close(fig)


# --- the width-3 limit (thm-ch6-width3-sectors) --------------------------------------------------


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


# --- exercises -----------------------------------------------------------------------------------


@pytest.mark.parametrize("m", [2, 3, 5])
def test_ln_over_m_plus_one_neurons_is_rmsnorm_over_m(m):
    """ex-ch6-rms: LN over m + 1 neurons after Linear(n, m + 1) is sqrt((m+1)/m) Q RMSNorm_m(M x + c)
    with RMSNorm's eps = (m + 1) eps / m, M = Q^T W, c = Q^T b."""
    from lnbook.norms import layer_norm, rms_norm

    g = torch.Generator().manual_seed(m)
    W = torch.randn(m + 1, 3, generator=g, dtype=torch.float64)
    b = torch.randn(m + 1, generator=g, dtype=torch.float64)
    x = torch.randn(100, 3, generator=g, dtype=torch.float64) * 0.01  # small inputs: eps matters
    Q = complement_basis(m + 1)
    for eps in (1e-5, 1e-2):
        left = layer_norm(x @ W.T + b, eps=eps)
        right = math.sqrt((m + 1) / m) * rms_norm(x @ (Q.T @ W).T + Q.T @ b, eps=(m + 1) * eps / m) @ Q.T
        torch.testing.assert_close(left, right, rtol=1e-12, atol=1e-12)


def test_width_two_shallow_ln_is_one_sigmoid():
    """ex-ch6-width-two: Linear(1, 2) -> LN -> Linear(2, 1) is c + (a1 - a2) sigma_eps(((w1 - w2) x + b1 - b2) / 2)."""
    torch.manual_seed(0)
    eps = 1e-3
    net = nn.Sequential(nn.Linear(1, 2), nn.LayerNorm(2, eps=eps, elementwise_affine=False), nn.Linear(2, 1)).double()
    (w1, w2), (b1, b2) = net[0].weight.detach().ravel().tolist(), net[0].bias.detach().tolist()
    (a1, a2), c = net[2].weight.detach().ravel().tolist(), float(net[2].bias.detach())
    x = torch.linspace(-4, 4, 101, dtype=torch.float64)
    t = ((w1 - w2) * x + (b1 - b2)) / 2
    with torch.no_grad():
        torch.testing.assert_close(net(x.unsqueeze(1)).ravel(), c + (a1 - a2) * t / torch.sqrt(t * t + eps))
