"""lnbook.ln_activation.lab: LN MLPs, their hidden geometry, and the width-3 limit (chapter 6).
"""

from __future__ import annotations

import copy
import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from lnbook.core.norms import LayerNorm, layer_norm
from lnbook.core.geometry import complement_basis
from lnbook.ln_activation.width3 import (
    best_sector_rule_accuracy,
    search_sector_apex,
    sign_changes_on_circle,
    width3_apex,
    with_eps,
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


def _same_function_at_new_eps(net, moved, x, eps=1e-6):
    """``moved = with_eps(net, eps)``: every norm has the new eps, the function is kept (1e-9), and setting eps
    alone, without the rescaling, would change it (more than 1e-3). Returns the norms."""
    from lnbook.core.norms import LayerNorm as BookLayerNorm
    from lnbook.core.norms import RMSNorm as BookRMSNorm

    kinds = (nn.LayerNorm, nn.RMSNorm, BookLayerNorm, BookRMSNorm)
    norms = [m for m in moved.modules() if isinstance(m, kinds)]
    assert all(m.eps == eps for m in norms)
    with torch.no_grad():
        torch.testing.assert_close(moved(x), net(x), rtol=1e-9, atol=1e-9)
        eps_only = copy.deepcopy(net)
        for m in eps_only.modules():
            if isinstance(m, kinds):
                m.eps = eps
        assert float((eps_only(x) - net(x)).abs().max()) > 1e-3
    return norms


@pytest.mark.parametrize("seed", range(5))
def test_second_layer_is_the_block_of_the_projection_lemma(seed):
    """The step of the proof of thm-ch6-width3-sectors (2): on the LN circle, a general second layer (W2, b2)
    acts as the block of lem-block-projection with M = E^T W2 E and h = E^T b2, because LN only sees the
    centred input P(W2 y + b2) = E(sqrt3 E^T W2 E e + E^T b2) for y = sqrt3 E e (eps = 0)."""
    g = torch.Generator().manual_seed(seed)
    W2, b2 = torch.randn(3, 3, generator=g, dtype=torch.float64), torch.randn(3, generator=g, dtype=torch.float64)
    E = complement_basis(3, dtype=torch.float64)
    M, h = E.T @ W2 @ E, E.T @ b2
    theta = torch.linspace(0, 2 * np.pi, 97, dtype=torch.float64)
    e = torch.stack([torch.cos(theta), torch.sin(theta)], 1)
    y = 3**0.5 * e @ E.T
    general = layer_norm(y @ W2.T + b2, eps=0.0)
    block = layer_norm(y @ (E @ M @ E.T).T + E @ h, eps=0.0)
    A = 3**0.5 * M
    o = -torch.linalg.solve(A, h)
    lemma = 3**0.5 * ((e - o) @ A.T / ((e - o) @ A.T).norm(dim=1, keepdim=True)) @ E.T
    torch.testing.assert_close(general, block, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(general, lemma, rtol=1e-10, atol=1e-10)


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


def adversarial_width3_net(seed: int, pole_distance: float, half_width: float) -> nn.Sequential:
    """A width-3 LN-Net (eps = 0) built by the proof of thm-ch6-width3-sectors so that its score changes sign
    as often as the proof allows: the second layer's pole o lies at ``pole_distance`` from the centre of the
    LN circle (outside it when > 1), and the read-out's positive arc is the arc of directions within
    ``half_width`` of the direction from o to the centre. Random M_1, S, rotations and apex."""
    g = np.random.default_rng(seed)
    E = complement_basis(3).numpy()
    M1 = g.normal(size=(2, 2)) + 2 * np.eye(2)
    x0 = g.uniform(-1, 1, size=2)
    S = g.normal(size=(2, 2)) * 0.3 + np.eye(2)
    rot = g.uniform(0, 2 * np.pi)
    o = pole_distance * np.array([np.cos(rot), np.sin(rot)])
    # phi(e) = S (e - o)/|S (e - o)|; the positive arc is the image under S of the directions within
    # half_width of -o (a linear map keeps a cone of angle < pi a cone): the arc between phi_1 and phi_2
    ends = []
    for sign in (1, -1):
        a = rot + np.pi + sign * half_width
        d = S @ np.array([np.cos(a), np.sin(a)])
        ends.append(d / np.linalg.norm(d))
    mid = ends[0] + ends[1]
    p = mid / np.linalg.norm(mid)
    q = -float(p @ ends[0])
    W1, b1 = E @ M1, -E @ M1 @ x0
    W2, b2 = E @ S @ E.T, -np.sqrt(3) * E @ S @ o
    return _eps0_width3_net(E, W1, b1, W2, b2, p, q)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 100_000), pole=st.floats(1.3, 4.0), frac=st.floats(0.2, 0.8))
def test_adversarial_width3_nets_change_sign_exactly_four_times_on_every_circle(seed, pole, frac):
    """Adversarial nets (pole outside the circle, both ends of the positive arc inside the cone of directions
    from the pole): exactly four sign changes, the most the theorem allows, on every circle around the apex."""
    half_width = frac * np.arcsin(1 / pole)  # inside the cone of directions from o to the circle
    net = adversarial_width3_net(seed, pole, half_width)
    apex = width3_apex(net[0])
    for radius in (0.1, 1.0, 10.0):
        assert sign_changes_on_circle(score_of(net), apex, radius, n=4096) == 4


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 100_000), pole=st.floats(0.0, 4.0), half_width=st.floats(0.0, 3.1), noise=st.integers(0, 10_000))
def test_perturbed_and_random_width3_nets_never_exceed_four_sign_changes_at_any_radius(seed, pole, half_width, noise):
    """The adversarial family with poles inside and outside the circle, any arc, all weights perturbed, and a
    random width-3 net: never more than 4 sign changes (and an even number), on circles of several radii."""
    net = adversarial_width3_net(seed, pole, half_width)
    g = torch.Generator().manual_seed(noise)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g, dtype=torch.float64))
    for candidate in (net, width3_net(noise)):
        apex = width3_apex(candidate[0])
        for radius in (0.05, 1.0, 20.0):
            changes = sign_changes_on_circle(score_of(candidate), apex, radius, n=2048)
            assert changes <= 4 and changes % 2 == 0


def test_pole_outside_gives_four_changes_inside_two_and_on_the_circle_at_most_two():
    """Proof of thm-ch6-width3-sectors, case by case: pole outside the circle (the adversarial arc) -> 4; pole
    inside -> every direction is reached once -> 2; pole on the circle -> at most 2 (3 by the ray count, and the
    number of sign changes around a closed curve is even)."""
    counts = [sign_changes_on_circle(score_of(net := adversarial_width3_net(s, 2.0, 0.3)), width3_apex(net[0]), 1.0, n=2048)
              for s in range(20)]
    assert counts == [4] * 20
    counts = [sign_changes_on_circle(score_of(net := adversarial_width3_net(s, 0.5, 1.0)), width3_apex(net[0]), 1.0, n=2048)
              for s in range(20)]
    assert counts == [2] * 20
    counts = [sign_changes_on_circle(score_of(net := adversarial_width3_net(s, 1.0, hw)), width3_apex(net[0]), 1.0, n=2048)
              for s in range(10) for hw in (0.2, 1.2, 2.8)]
    assert max(counts) <= 2 and 2 in counts


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 100_000), eps=st.sampled_from([1e-5, 1e-2, 0.3, 3.0]), new=st.sampled_from([1e-7, 1e-5, 0.3, 10.0]),
       width=st.sampled_from([3, 4]))
def test_rescaling_identity_moves_eps_without_changing_the_function(seed, eps, new, width):
    """LN_eps(lambda h) = LN_{eps/lambda^2}(h): an LN-MLP at eps equals the rescaled one at any other eps > 0."""
    from lnbook.ln_activation.lab import ln_mlp

    torch.manual_seed(seed)
    net = ln_mlp(2, 2, features=width, eps=eps).double()
    with torch.no_grad():
        for p in net.parameters():
            p.normal_()
        net[0].weight.mul_(0.01)  # small pre-activations: the eps term matters
    moved = with_eps(net, new)
    assert all(m.eps == new for m in moved if isinstance(m, nn.LayerNorm))
    x = torch.randn(500, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        torch.testing.assert_close(moved(x), net(x), rtol=1e-9, atol=1e-9)
        # and it is not the trivial identity: changing eps alone changes the function
        if new == eps:
            return
        same_weights = ln_mlp(2, 2, features=width, eps=new).double()
        same_weights.load_state_dict(net.state_dict())
        assert float((same_weights(x) - net(x)).abs().max()) > 1e-6
    with pytest.raises(ValueError, match="eps must be"):
        with_eps(net, 0.0)


@pytest.mark.parametrize("group_size, p", [(2, 2), (8, 2), (4, 3)])
@pytest.mark.parametrize("eps, new", [(1e-5, 1e-3), (1e-3, 1e-5)])
def test_pln_nets_compute_the_same_functions_at_every_eps(group_size, p, eps, new):
    """PLN normalises each group on its own slice of the Linear before it, so the identity holds group by group:
    Linear(1, 32) -> PLN(m) -> Linear(32, 1) at eps = 1e-5 equals its rescaled copy at eps = 1e-3 (and back), with
    lambda = (eps'/eps)^(1/p) for the exponent p; keeping the weights and changing eps alone changes the function."""
    from lnbook.core.norms import ParallelLayerNorm
    from lnbook.ln_activation.shallow_fits import shallow_net

    torch.manual_seed(group_size + p)
    net = shallow_net("pln", 32, eps=eps, group_size=group_size).double()
    if p != 2:
        net[1] = ParallelLayerNorm(group_size, p=p, eps=eps)
    with torch.no_grad():
        net[0].weight.mul_(0.01)  # small pre-activations: the eps term matters
        net[0].bias.mul_(0.01)
    moved = with_eps(net, new)
    assert type(moved[1]) is ParallelLayerNorm and moved[1].eps == new and moved[1].group_size == group_size
    x = torch.linspace(-1, 1, 2001, dtype=torch.float64).unsqueeze(1)
    with torch.no_grad():
        torch.testing.assert_close(moved(x), net(x), rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(moved[0].weight, net[0].weight * (new / eps) ** (1 / p))
        same_weights = copy.deepcopy(net)
        same_weights[1].eps = new
        assert float((same_weights(x) - net(x)).abs().max()) > 1e-3


def test_moving_to_a_smaller_eps_shrinks_every_linear_before_a_norm():
    """The rescaled net of prop-ch6-eps-rescaling for eps' < eps has SMALL weights: every Linear that feeds a
    LayerNorm is multiplied by lambda = sqrt(eps'/eps) < 1 (0.3 -> 1e-5: lambda ~ 0.0058), so its pre-activations
    are of order sqrt(eps'); the read-out Linear is unchanged."""
    import math

    from lnbook.ln_activation.lab import ln_mlp

    torch.manual_seed(0)
    net = ln_mlp(2, 2, features=3, eps=0.3).double()
    moved = with_eps(net, 1e-5)
    lam = math.sqrt(1e-5 / 0.3)
    linears = [i for i, m in enumerate(net) if isinstance(m, nn.Linear)]
    for i in linears[:-1]:  # each feeds a LayerNorm
        torch.testing.assert_close(moved[i].weight, lam * net[i].weight, rtol=1e-12, atol=0)
        torch.testing.assert_close(moved[i].bias, lam * net[i].bias, rtol=1e-12, atol=0)
        assert float(moved[i].weight.norm()) < 0.01 * float(net[i].weight.norm())
    torch.testing.assert_close(moved[linears[-1]].weight, net[linears[-1]].weight, rtol=0, atol=0)
    x = torch.randn(200, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        pre = moved[0](x)
    assert float(pre.abs().max()) < 100 * math.sqrt(1e-5)


def _with_small_pre_activations(net: nn.Module) -> tuple[nn.Module, torch.Tensor]:
    """``net`` with every linear weight scaled by 0.05 (small pre-activations: eps matters), and 300 float64
    inputs in R^2."""
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.Linear):
                m.weight.mul_(0.05)
    return net, torch.randn(300, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


def test_with_eps_reaches_nested_blocks_and_rmsnorm():
    """with_eps walks nested nn.Sequential blocks and rescales nn.RMSNorm too (RMS_eps(lambda z) = RMS_{eps/lambda^2}(z)):
    every norm gets the new eps and the function is unchanged to 1e-9, while setting eps alone changes it."""
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Sequential(nn.Linear(2, 5), nn.LayerNorm(5, eps=1e-2), nn.ReLU()),
        nn.Sequential(nn.Sequential(nn.Linear(5, 4), nn.RMSNorm(4, eps=0.3))),
        nn.Linear(4, 3), nn.LayerNorm(3, eps=1e-3), nn.Linear(3, 1),
    ).double()
    net, x = _with_small_pre_activations(net)
    moved = with_eps(net, 1e-6)
    assert len(_same_function_at_new_eps(net, moved, x)) == 3


def test_with_eps_rescales_the_books_layernorm_and_rmsnorm_modules():
    """The book's own nn.Module forms of LayerNorm and RMSNorm (lnbook.core.norms) obey the same identity as torch's:
    with_eps refused them as "a norm in disguise" (issue 32, fourth read); it now rescales them, keeps the function
    to 1e-9 and gives each the new eps, and setting eps alone changes the function."""
    from lnbook.core.norms import LayerNorm as BookLayerNorm
    from lnbook.core.norms import RMSNorm as BookRMSNorm

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 5), BookLayerNorm(eps=0.3), nn.ReLU(),
                        nn.Linear(5, 4), BookRMSNorm(eps=0.2), nn.Linear(4, 1)).double()
    net, x = _with_small_pre_activations(net)
    moved = with_eps(net, 1e-6)
    assert len(_same_function_at_new_eps(net, moved, x)) == 2


def test_with_eps_refuses_a_module_with_an_epsilon_and_says_why():
    """A module that keeps an epsilon is refused, not skipped, and the message says why: with_eps cannot tell whether
    that epsilon lies on a path the rescaling changes (a cosine-similarity head after the norms, the fourth read's
    case, is refused with that reason and a way out)."""

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(2, 4), nn.LayerNorm(4, eps=0.3), nn.Linear(4, 4))
            self.cos = nn.CosineSimilarity(dim=-1)
            self.proto = nn.Parameter(torch.randn(4))

        def forward(self, x):
            return self.cos(self.body(x), self.proto)

    with pytest.raises(TypeError, match="cannot tell whether that epsilon lies on a path the rescaling changes"):
        with_eps(Head(), 1e-5)
    assert with_eps(Head().body, 1e-5) is not None  # the way out the message names: the part before the head


def test_with_eps_rescales_the_books_ln_g_module():
    """prop-ch6-pln-special-cases(b): PLN with group size m is LN-G, and LN-G is LayerNorm on each group, so the
    eps identity holds with lambda = sqrt(eps'/eps). with_eps refused the book's own LN-G module (issue 32, third
    read); it now rescales it: every GroupLayerNorm gets the new eps, the function is kept to 1e-9, and setting eps
    alone changes it by more than 1e-3."""
    from lnbook.core.norms import GroupLayerNorm
    from lnbook.ml.models import mlp

    torch.manual_seed(0)
    net = mlp(2, 4, 2, 2, norm="lng", groups=2, eps=0.3).double()
    net, x = _with_small_pre_activations(net)
    moved = with_eps(net, 1e-6)
    norms = [m for m in moved.modules() if type(m) is GroupLayerNorm]
    assert len(norms) == 2 and all(m.eps == 1e-6 for m in norms)
    with torch.no_grad():
        torch.testing.assert_close(moved(x), net(x), rtol=1e-9, atol=1e-9)
        eps_only = copy.deepcopy(net)
        for m in eps_only.modules():
            if type(m) is GroupLayerNorm:
                m.eps = 1e-6
        assert float((eps_only(x) - net(x)).abs().max()) > 1e-3


def test_with_eps_refuses_what_it_cannot_rescale():
    """No normalisation module is skipped silently: other norms, norms in custom containers, norms not after a
    Linear, shared layers and RMSNorm's dtype-dependent eps=None raise."""

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.norm = nn.Linear(2, 3), nn.LayerNorm(3)

        def forward(self, x):
            return self.norm(self.lin(x)) + self.lin(x)

    shared = nn.Linear(3, 3)
    cases = [
        (nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3)), TypeError, "only nn.LayerNorm"),
        (nn.Sequential(nn.Sequential(nn.Linear(2, 4), nn.GroupNorm(2, 4))), TypeError, "only nn.LayerNorm"),
        (nn.Sequential(Block()), ValueError, "shared"),  # its forward calls self.lin twice
        (nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.LayerNorm(3)), ValueError, "must follow an nn.Linear"),
        (nn.Sequential(nn.Linear(2, 3), shared, nn.LayerNorm(3), shared), ValueError, "shared"),
        (nn.Sequential(nn.Linear(2, 3), nn.RMSNorm(3)), ValueError, "eps=None"),
        (nn.LayerNorm(3), ValueError, "on its own"),
    ]
    for model, error, message in cases:
        with pytest.raises(error, match=message):
            with_eps(model, 1e-3)


def test_search_sector_apex_finds_the_planted_apex_and_is_a_lower_bound():
    """On data labelled by four sectors around a planted apex, the search reaches accuracy 1 near it; on the
    spiral, refinement never lowers the grid's value (it is a search, so its value is a lower bound)."""
    g = np.random.default_rng(1)
    P = g.uniform(-1, 1, size=(400, 2))
    apex = np.array([0.31, -0.27])
    ang = np.arctan2(P[:, 1] - apex[1], P[:, 0] - apex[0])
    lab = (((ang > -2.5) & (ang < -0.5)) | ((ang > 0.7) & (ang < 2.0))).astype(int)
    found, acc = search_sector_apex(P, lab, grid=9, rounds=15, seed=0)
    assert acc == 1.0
    X, y = spiral(400, turns=1.0, noise=0.0, seed=0)
    _, grid_only = search_sector_apex(X.numpy(), y.numpy(), grid=15, rounds=0)
    _, refined = search_sector_apex(X.numpy(), y.numpy(), grid=15, rounds=10)
    assert refined >= grid_only


def test_search_sector_apex_reaches_the_intermediate_radius_optimum_on_the_lab_spiral():
    """On the lab's spiral (1000 points, seed 0) an independent search of 18,000 random apexes over radii from 0.05
    to 1000 found a four-sector rule of accuracy 0.898 with apex near (94.7, 32.0), between the data and the far
    strips; the search must reach it (with only the ring at radius 1e4, or too few kept apexes, it stops at 0.897).
    The value found is exact for its apex (recomputed here) and bad radii are refused."""
    X, y = spiral(1000, turns=1.0, noise=0.0, seed=0)
    X, y = X.numpy(), y.numpy()
    assert best_sector_rule_accuracy(X, y, np.array([[94.73, 32.02]]))[0] == 0.898
    apex, acc = search_sector_apex(X, y)
    assert acc >= 0.898
    assert best_sector_rule_accuracy(X, y, apex[None])[0] == acc
    for bad in [(0.0,), (np.inf,), (-10.0,)]:
        with pytest.raises(ValueError, match="far_radii"):
            search_sector_apex(X, y, far_radii=bad)
    with pytest.raises(ValueError, match="keep"):
        search_sector_apex(X, y, keep=300)


def test_search_sector_apex_is_the_same_in_any_units():
    """The problem is scale invariant, and so is the search: on the lab's spiral in units 1, 1000 and 1/1000 it finds
    the same accuracy (0.898) and the apex scaled by the unit. With the far rings at absolute radii 10 to 1e4 the
    spiral in units of 1/1000 had its best apex, about 100 data radii out, beyond the largest ring and the search
    stopped at 0.895 (ch6 referee 8, finding 2)."""
    X, y = spiral(1000, turns=1.0, noise=0.0, seed=0)
    X, y = X.numpy().astype(np.float64), y.numpy()
    apex1, acc1 = search_sector_apex(X, y)
    assert acc1 == 0.898
    for s in (1e3, 1e-3):
        apex, acc = search_sector_apex(X * s, y)
        assert acc == acc1
        np.testing.assert_allclose(apex / s, apex1, rtol=1e-6)


def _brute_force_sector_accuracy(X, y, apex, changes=4):
    """Every labelling of the points whose angular order around the apex has at most ``changes`` cyclic changes
    (exactly the labellings a direction rule with <= changes changes realises, barring ties): best agreement."""
    order = np.argsort(np.arctan2(X[:, 1] - apex[1], X[:, 0] - apex[0]))
    ys = y[order]
    best = 0
    for lab in itertools.product((0, 1), repeat=len(ys)):
        lab = np.array(lab)
        if int(np.sum(lab != np.roll(lab, 1))) <= changes:
            best = max(best, int(np.sum(lab == ys)))
    return best / len(ys)


def test_best_sector_rule_accuracy_is_exact_against_brute_force():
    """best_sector_rule_accuracy equals the brute force over all labellings with <= 4 cyclic changes (200 random
    cases of 1 to 9 points, several apexes each), and with <= 2 changes too: exact, not only an upper bound."""
    g = np.random.default_rng(0)
    for case in range(200):
        n = int(g.integers(1, 10))
        X, y = g.uniform(-1, 1, size=(n, 2)), g.integers(0, 2, n)
        apexes = g.uniform(-1.5, 1.5, size=(3, 2))
        for changes in (2, 4):
            fast = best_sector_rule_accuracy(X, y, apexes, changes=changes)
            slow = [_brute_force_sector_accuracy(X, y, a, changes) for a in apexes]
            np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-12, err_msg=f"case {case}, changes {changes}")


def _tie_aware_groups(X, y, apex):
    """Label counts per ray from the apex, in angular order (rays found by exact cross and dot products, which are
    exact for the small lattices below); points at the apex are dropped (no rule gets them right)."""
    d = X - apex
    rays = []
    for i in np.argsort(np.arctan2(d[:, 1], d[:, 0]), kind="stable"):
        if d[i, 0] == 0 and d[i, 1] == 0:
            continue
        for ray in rays:
            r = d[ray[0]]
            if r[0] * d[i, 1] - r[1] * d[i, 0] == 0 and r @ d[i] > 0:
                ray.append(i)
                break
        else:
            rays.append([i])
    return [[int(np.sum(y[ray] == c)) for c in (0, 1)] for ray in rays]


def _tie_aware_brute_force(X, y, apex, changes=4):
    """Every labelling of the rays (one label per ray) with <= changes cyclic changes: best agreement over all points."""
    counts = np.array(_tie_aware_groups(X, y, apex))
    best = 0
    for lab in itertools.product((0, 1), repeat=len(counts)):
        lab = np.array(lab)
        if int(np.sum(lab != np.roll(lab, 1))) <= changes:
            best = max(best, int(counts[np.arange(len(lab)), lab].sum()))
    return best / len(X)


def test_best_sector_rule_accuracy_gives_one_label_per_ray_on_lattice_data():
    """Points on one ray from the apex (lattice data) get one label and a point at the apex counts wrong, as for a
    direction rule: the DP equals a tie-aware brute force at apexes on lattice points, lattice lines and in general
    position. On the 5x5 integer grid with the labels of ch6 referee 9 (finding 1) the DP sorted tied points apart:
    the search returned 0.96 at an apex where the best rule reaches 0.88, above the 0.92 that no apex beat."""
    g = np.random.default_rng(3)
    X = np.array([(i, j) for i in range(4) for j in range(3)], float)
    apexes = np.concatenate([np.array([(i / 2, j / 2) for i in range(-2, 9) for j in range(-2, 7)]),
                             g.uniform(-1, 4, size=(20, 2))])
    for case in range(6):
        y = g.integers(0, 2, len(X))
        fast = best_sector_rule_accuracy(X, y, apexes)
        slow = [_tie_aware_brute_force(X, y, a) for a in apexes]
        np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-12, err_msg=f"labels {y.tolist()}")
    grid = np.array([(i, j) for i in range(5) for j in range(5)], float)
    y = np.array([0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1])
    # at the corner (0, 0) the diagonal holds 5 points; the old DP gave 0.96 there, the corner itself now counts wrong
    assert best_sector_rule_accuracy(grid, y, [[0.0, 0.0], [5.6e-17, 5.6e-17]]).tolist() == [0.84, 0.84]
    apex, acc = search_sector_apex(grid, y)
    assert acc == 0.92


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


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_eps0_width3_net_has_no_limit_at_its_apex(seed):
    # eps = 0: on rays from the apex the score is constant however close to the apex, and differs between rays,
    # so it has no limit there; the same weights with eps > 0 give nearly one value on a tiny circle (continuity)
    net = width3_net(seed)
    apex = torch.as_tensor(width3_apex(net[0]))
    phi = torch.linspace(0, 2 * np.pi, 64, dtype=torch.float64)[:-1]
    u = torch.stack([phi.cos(), phi.sin()], 1)
    at = {r: score_of(net)(apex + r * u) for r in (1e-2, 1e-6)}
    assert torch.allclose(at[1e-6], at[1e-2], rtol=1e-6, atol=1e-6)
    spread = float(at[1e-6].max() - at[1e-6].min())
    assert spread > 1e-2 * (1 + float(at[1e-6].abs().max()))
    smooth = copy.deepcopy(net)
    smooth[1].eps = smooth[3].eps = 1e-4
    near = score_of(smooth)(apex + 1e-6 * u)
    assert float(near.max() - near.min()) < 1e-3 * spread


def test_eps0_width3_net_with_rank1_first_layer_is_continuous_and_not_a_function_of_direction():
    """Why thm-ch6-width3-sectors needs an invertible M1: with W1 = w a^T (rank 1) and a bias b1 whose centred part is
    orthogonal to the centred w, the first LN sees w t + b1 with t = a^T x, of squared norm 2 t^2 + 6 >= 6, and the
    second LN sees sqrt3 e + P b2 with |P b2| = 5 sqrt2 > sqrt3, so at eps = 0 both LNs are continuous on the whole
    plane and the score is a continuous function f(a^T x). It is not a function of the direction from any point x0:
    the rays from x0 with a^T v < 0 (> 0) cover t < T (t > T), T = a^T x0, so f would be constant on both half-lines;
    but f(-1) != f(0) and f(0) != f(1), which no T allows. width3_apex refuses the net (it has no apex)."""
    net = nn.Sequential(nn.Linear(2, 3), LayerNorm(eps=0.0), nn.Linear(3, 3), LayerNorm(eps=0.0), nn.Linear(3, 2)).double()
    a = torch.tensor([1.0, 0.5], dtype=torch.float64)
    with torch.no_grad():
        net[0].weight.copy_(torch.outer(torch.tensor([1.0, -1.0, 0.0], dtype=torch.float64), a))
        net[0].bias.copy_(torch.tensor([1.0, 1.0, -2.0]))
        net[2].weight.copy_(torch.eye(3))
        net[2].bias.copy_(torch.tensor([5.0, 0.0, -5.0]))
        net[4].weight.copy_(torch.tensor([[0.3, -1.0, 0.7], [1.2, 0.4, -0.5]]))
        net[4].bias.zero_()
    score = score_of(net)
    g = torch.Generator().manual_seed(0)
    x = 4 * torch.randn(2000, 2, generator=g, dtype=torch.float64)
    with torch.no_grad():
        h1 = net[0](x)
        h2 = net[2](net[1](h1))
    centred = lambda h: h - h.mean(dim=1, keepdim=True)  # noqa: E731
    # both LN inputs stay away from the mean line (where LN at eps = 0 is undefined), as the bounds above say
    assert float(centred(h1).norm(dim=1).min()) >= 6**0.5 * (1 - 1e-12)
    assert float(centred(h2).norm(dim=1).min()) >= 5 * 2**0.5 - 3**0.5 - 1e-12
    # a function of t = a^T x: moving along the kernel of a^T changes nothing (float64 rounding only)
    along = torch.tensor([-0.5, 1.0], dtype=torch.float64)
    for shift in (-7.0, 0.3, 11.0):
        assert torch.allclose(score(x + shift * along), score(x), rtol=0, atol=1e-12)
    # non-constant on both sides of every T: f(-1), f(0), f(1) pairwise apart by far more than rounding
    f = score(torch.tensor([[-1.0, 0.0], [0.0, 0.0], [1.0, 0.0]], dtype=torch.float64))
    assert float((f[0] - f[1]).abs()) > 0.1 and float((f[1] - f[2]).abs()) > 0.1
    with pytest.raises(ValueError, match="no apex"):
        width3_apex(net[0])


def test_with_eps_refuses_sequential_subclasses_tied_weights_and_parametrized_linears():
    """Three models that an identity check by module type or module id would let through, each of which with_eps
    would otherwise change (the referee's cases): a Sequential subclass whose own forward adds the Linear's output
    back after the norm (seen in the traced graph), two Linears that share one weight Parameter, and a weight-normed
    Linear."""

    class Res(nn.Sequential):
        def forward(self, x):
            h = self[0](x)
            return self[2](self[1](h) + h)

    tied_a, tied_b = nn.Linear(2, 4), nn.Linear(2, 4)
    tied_b.weight = tied_a.weight


    cases = [
        (Res(nn.Linear(2, 4), nn.LayerNorm(4, eps=0.3), nn.Linear(4, 2)), ValueError, "used elsewhere"),
        (nn.Sequential(Res(nn.Linear(2, 4), nn.LayerNorm(4, eps=0.3), nn.Linear(4, 2))), ValueError, "used elsewhere"),
        (nn.Sequential(nn.Sequential(tied_a, nn.LayerNorm(4, eps=0.3)), nn.Sequential(tied_b, nn.LayerNorm(4, eps=0.3))),
         ValueError, "tied"),
        (nn.Sequential(nn.utils.parametrizations.weight_norm(nn.Linear(2, 4)), nn.LayerNorm(4, eps=0.3), nn.Linear(4, 2)),
         TypeError, "parametrized"),
    ]
    for model, error, message in cases:
        with pytest.raises(error, match=message):
            with_eps(model.double(), 1e-5)
    # the plain versions are accepted and keep the function
    plain = nn.Sequential(nn.Linear(2, 4), nn.LayerNorm(4, eps=0.3), nn.Linear(4, 2)).double()
    x = torch.randn(50, 2, dtype=torch.float64)
    assert torch.allclose(with_eps(plain, 1e-5)(x), plain(x), rtol=1e-9, atol=1e-9)


class _LoRALinear(nn.Linear):
    """A Linear subclass with its own forward (a low-rank update added to the output)."""

    def __init__(self, n_in, n_out, rank=2):
        super().__init__(n_in, n_out)
        self.A, self.B = nn.Parameter(torch.randn(rank, n_in)), nn.Parameter(torch.randn(n_out, rank))

    def forward(self, x):
        return super().forward(x) + x @ self.A.T @ self.B.T


class _HFStyleRMSNorm(nn.Module):
    """An RMSNorm that keeps its epsilon under another name, as some libraries do."""

    def __init__(self, d, eps):
        super().__init__()
        self.weight, self.variance_epsilon = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)


class _BufferEpsNorm(nn.Module):
    """A LayerNorm that keeps its epsilon as a tensor buffer."""

    def __init__(self, d, eps):
        super().__init__()
        self.register_buffer("eps", torch.tensor(eps))

    def forward(self, x):
        x = x - x.mean(-1, keepdim=True)
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def test_with_eps_refuses_linear_subclasses_and_norms_it_does_not_know():
    """Exact types only: a LoRA-style Linear subclass before the norm and a norm keeping its epsilon under another
    name or as a tensor raise TypeError naming the module (each would otherwise be skipped or rescaled wrongly and
    change the function); plain activations between blocks, and a Linear subclass after a norm (not rescaled, so
    the identity does not pass through it), are accepted and keep the function."""
    torch.manual_seed(0)
    cases = [
        nn.Sequential(_LoRALinear(2, 4), nn.LayerNorm(4, eps=1e-2), nn.Linear(4, 1)),
        nn.Sequential(nn.Linear(2, 3), _HFStyleRMSNorm(3, eps=0.3), nn.Linear(3, 1)),
        nn.Sequential(nn.Linear(2, 3), nn.Sequential(_BufferEpsNorm(3, eps=0.3)), nn.Linear(3, 1)),
    ]
    for model in cases:
        with pytest.raises(TypeError, match="exact types"):
            with_eps(model.double(), 1e-5)
    x = torch.randn(50, 2, dtype=torch.float64)
    for ok in (nn.Sequential(nn.Linear(2, 4), nn.LayerNorm(4, eps=0.3), nn.GELU(), nn.Linear(4, 4),
                             nn.RMSNorm(4, eps=0.1), nn.Tanh(), nn.Linear(4, 1)).double(),
               nn.Sequential(nn.Linear(2, 3), nn.LayerNorm(3, eps=0.3), _LoRALinear(3, 1)).double()):
        with torch.no_grad():
            torch.testing.assert_close(with_eps(ok, 1e-5)(x), ok(x), rtol=1e-9, atol=1e-9)


class _Stack(nn.Module):
    """A module tree with its own forward: Linear -> LN blocks in an nn.ModuleList (the norms in an nn.ModuleDict),
    a residual connection around each whole block and a read-out."""

    def __init__(self, width=5, depth=3):
        super().__init__()
        self.inp = nn.Linear(2, width)
        self.blocks = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.norms = nn.ModuleDict({f"n{i}": nn.LayerNorm(width, eps=0.3 / (i + 1)) for i in range(depth)})
        self.out = nn.Linear(width, 1)

    def forward(self, x):
        h = self.inp(x)
        for i, block in enumerate(self.blocks):
            h = h + torch.tanh(self.norms[f"n{i}"](block(h)))
        return self.out(h)


def test_with_eps_follows_module_trees_with_their_own_forward():
    """with_eps traces the forward (torch.fx): an nn.ModuleList / nn.ModuleDict model with residual connections
    around Linear -> LN blocks, and a norm at the head of a nested Sequential whose Linear ends the previous one, are
    rescaled (every norm gets the new eps, the function is unchanged to 1e-9 in float64, while setting eps alone
    changes it); what the graph cannot prove local is refused: data-dependent control flow, a functional layer_norm
    call, a forward that reads the Linear's weight, and a Linear output that also feeds a skip connection."""
    torch.manual_seed(0)
    across = nn.Sequential(nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 4)),
                           nn.Sequential(nn.LayerNorm(4, eps=0.2), nn.Linear(4, 3), nn.RMSNorm(3, eps=0.1)),
                           nn.Linear(3, 1))
    x = torch.randn(300, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for net in (_Stack().double(), across.double()):
        with torch.no_grad():
            for m in net.modules():
                if isinstance(m, nn.Linear):
                    m.weight.mul_(0.05)  # small pre-activations: eps matters
        moved = with_eps(net, 1e-6)
        assert _same_function_at_new_eps(net, moved, x)

    class Branching(_Stack):
        def forward(self, x):
            h = self.norms["n0"](self.blocks[0](self.inp(x)))
            return self.out(h) if float(h.sum()) > 0 else -self.out(h)  # Python control flow on a tensor value

    class Functional(_Stack):
        def forward(self, x):
            h = self.norms["n0"](self.blocks[0](self.inp(x)))
            return self.out(torch.nn.functional.layer_norm(h, h.shape[-1:], eps=1e-5))

    class ReadsWeight(_Stack):
        def forward(self, x):
            h = self.norms["n0"](self.blocks[0](self.inp(x)))
            return self.out(h) + self.blocks[0].weight.sum()

    class Skip(_Stack):
        def forward(self, x):
            z = self.blocks[0](self.inp(x))
            return self.out(self.norms["n0"](z) + z)

    for model, error, message in ((Branching(), TypeError, "cannot trace"), (Functional(), TypeError, "directly"),
                                  (ReadsWeight(), ValueError, "reads the weight"), (Skip(), ValueError, "used elsewhere")):
        with pytest.raises(error, match=message):
            with_eps(model.double(), 1e-5)


def test_with_eps_refuses_transformers_llama_rmsnorm():
    modeling = pytest.importorskip("transformers.models.llama.modeling_llama")
    model = nn.Sequential(nn.Linear(2, 3), modeling.LlamaRMSNorm(3, eps=0.3), nn.Linear(3, 1))
    with pytest.raises(TypeError, match="LlamaRMSNorm"):
        with_eps(model, 1e-5)


def test_best_sector_rule_accuracy_refuses_odd_changes():
    # four points at 0, 90, 180, 270 degrees labelled 0, 1, 0, 1 around the origin: any rule has an even number of
    # cyclic changes, so "at most 3" is "at most 2", whose best is 0.75; a DP with 3 linear changes would say 1.0
    X = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
    y = np.array([0, 1, 0, 1])
    assert best_sector_rule_accuracy(X, y, [[0.0, 0.0]], changes=2)[0] == 0.75
    for odd in (1, 3, 5):
        with pytest.raises(ValueError, match="even"):
            best_sector_rule_accuracy(X, y, [[0.0, 0.0]], changes=odd)


def test_with_eps_refuses_hooks_and_old_api_weight_reparametrisations():
    """Old-API spectral_norm/weight_norm recompute .weight from weight_orig (or weight_g, weight_v) in a
    pre-hook, and forward hooks change what a module computes: with_eps would silently return another
    function (referee: output differences 0.16 to 0.81), so it refuses them with the reason."""
    import torch
    from torch import nn

    from lnbook.ln_activation.width3 import with_eps

    def net():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(2, 3), nn.LayerNorm(3, eps=0.3), nn.Linear(3, 3), nn.LayerNorm(3, eps=0.3),
                             nn.Linear(3, 2)).double()

    m = net()
    m[2] = torch.nn.utils.spectral_norm(m[2])
    with pytest.raises(TypeError, match="forward hooks|not a registered Parameter"):
        with_eps(m, 1e-5)
    m = net()
    m[0].register_forward_hook(lambda mod, args, out: out + 1.0)
    with pytest.raises(TypeError, match="forward hooks"):
        with_eps(m, 1e-5)
    m = net()
    m[1].register_forward_pre_hook(lambda mod, args: (args[0] + 1.0,))
    with pytest.raises(TypeError, match="forward hooks"):
        with_eps(m, 1e-5)
    plain = net()  # the same model without hooks keeps its function
    x = torch.randn(50, 2, dtype=torch.float64)
    assert torch.allclose(with_eps(plain, 1e-5)(x), plain(x), atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_width3_first_layer_on_r3_is_constant_on_half_planes_of_the_kernel_line(seed):
    """Remark after prop-ch6-eps-rescaling: for Linear(3, 3) -> LN (eps = 0) with M_1 = Q^T W of rank 2 and x_0 any
    solution of M_1 x_0 = -c_1, the output is constant on each open half-plane {x_0 + t k + r d : r > 0} bounded by the
    line x_0 + ker M_1 (k spans the kernel), and differs between the half-planes of d and -d."""
    g = np.random.default_rng(seed)
    W, b = g.normal(size=(3, 3)), g.normal(size=3)
    Q = complement_basis(3).numpy()
    M, c = Q.T @ W, Q.T @ b
    assert np.linalg.matrix_rank(M) == 2
    k = np.linalg.svd(M)[2][-1]  # spans ker M_1
    x0 = np.linalg.lstsq(M, -c, rcond=None)[0] + g.normal() * k  # any solution, not only the least-norm one
    d = g.normal(size=3)
    t, r = g.normal(size=(20, 1)) * 5, np.exp(g.normal(size=(20, 1)) * 2)
    for sign in (1.0, -1.0):
        x = torch.as_tensor(x0 + t * k + r * sign * d)
        out = layer_norm(x @ torch.as_tensor(W).T + torch.as_tensor(b), eps=0.0)
        torch.testing.assert_close(out, out[:1].expand_as(out), atol=1e-9, rtol=1e-9)
        if sign > 0:
            first = out[0]
    assert (first - out[0]).abs().max() > 1e-3


class _LinearThenDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 16)
        self.dec = nn.TransformerDecoderLayer(16, 2, 32, dropout=0.0, batch_first=True)

    def forward(self, x):
        h = self.lin(x)
        return self.dec(h, h)


@pytest.mark.parametrize("make", [
    lambda: nn.Sequential(nn.Linear(8, 16), nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)),
    lambda: nn.Sequential(nn.Linear(8, 16), nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True,
                                                                       norm_first=True)),
    _LinearThenDecoder,
], ids=["encoder-layer", "encoder-layer-norm-first", "decoder-layer"])
def test_with_eps_refuses_norms_inside_a_block_torch_fx_does_not_open(make):
    """The referee's silent change: torch.fx calls torch.nn's Transformer layers as closed blocks, so their
    LayerNorms looked 'never called' and got the new epsilon without a rescaling (outputs off by 0.35 to 0.60).
    Such a norm is refused, naming the block; without the refusal the function changes."""
    torch.manual_seed(0)
    model = make().double().eval()
    with pytest.raises(TypeError, match=r"inside .* calls as one closed block"):
        with_eps(model, 0.3)
    changed = copy.deepcopy(model)
    for m in changed.modules():
        if isinstance(m, nn.LayerNorm):
            m.eps = 0.3
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    with torch.no_grad():
        assert float((changed(x) - model(x)).abs().max()) > 1e-3  # what setting eps alone would do


class _ModeBranch(nn.Module):
    """The referee's model: the forward takes lin_a -> ln_a in training mode and lin_b -> ln_b in eval mode."""

    def __init__(self):
        super().__init__()
        self.lin_a, self.ln_a = nn.Linear(2, 4), nn.LayerNorm(4)
        self.lin_b, self.ln_b = nn.Linear(2, 4), nn.LayerNorm(4)
        self.out = nn.Linear(4, 1)

    def forward(self, x):
        return self.out(self.ln_a(self.lin_a(x)) if self.training else self.ln_b(self.lin_b(x)))


class _UnusedNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.ln, self.spare = nn.Linear(2, 4), nn.LayerNorm(4), nn.LayerNorm(4)
        self.out = nn.Linear(4, 1)

    def forward(self, x):
        return self.out(self.ln(self.lin(x)))


def test_with_eps_refuses_a_forward_that_branches_on_the_mode_and_a_norm_it_never_calls():
    """The referee's silent change: fx traces the current mode only, so a model rescaled in training mode and used
    in eval mode differed by 0.33 (ln_b was 'never called' and got the new epsilon unrescaled). Both modes are
    traced now; a norm called in neither is refused; the model's modes are restored. Without the refusals the
    function changes (asserted on the copy made by hand)."""
    torch.manual_seed(0)
    model = _ModeBranch().double().train()
    with pytest.raises(ValueError, match="not called by the forward"):
        with_eps(model, 0.1)
    assert model.training and all(m.training for m in model.modules())  # modes restored
    by_hand = copy.deepcopy(model).eval()  # what the old with_eps did: ln_b got eps 0.1 without a rescaling
    by_hand.ln_a.eps = by_hand.ln_b.eps = 0.1
    by_hand.lin_a.weight.data.mul_(math.sqrt(0.1 / 1e-5))
    x = torch.randn(16, 2, dtype=torch.float64)
    assert float((by_hand(x) - model.eval()(x)).abs().max()) > 1e-3
    with pytest.raises(ValueError, match="not called by the forward"):
        with_eps(_UnusedNorm().double(), 0.1)


class _ModeSwitchedLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin_a, self.lin_b, self.ln, self.out = nn.Linear(2, 4), nn.Linear(2, 4), nn.LayerNorm(4), nn.Linear(4, 1)

    def forward(self, x):
        return self.out(self.ln(self.lin_a(x) if self.training else self.lin_b(x)))


def test_with_eps_refuses_a_norm_fed_by_different_linears_in_training_and_eval_mode():
    """Every norm is called in both modes, but through lin_a in training and lin_b in eval: rescaling either one is
    wrong in the other mode, so with_eps refuses, in whichever mode the model is given."""
    for training in (True, False):
        with pytest.raises(ValueError, match="different nn.Linear layers in training and in eval"):
            with_eps(_ModeSwitchedLinear().train(training), 0.1)


def test_sign_changes_on_a_circle_count_the_change_across_angle_zero():
    """The count is cyclic: a score positive on the upper half-plane and negative on the lower changes sign twice,
    once near angle 0 (between the last sample and the first) and once near pi; a linear count over the samples would
    see one (the second read of chapter 6: the wrap was untested)."""
    from lnbook.ln_activation.width3 import sign_changes_on_circle

    shifted = lambda p: p[:, 1] + 1e-9  # noqa: E731  (positive at angles 0 and pi: one change falls in the wrap)
    assert sign_changes_on_circle(shifted, (0.0, 0.0), 1.0, n=64) == 2
    assert sign_changes_on_circle(lambda p: p[:, 0], (0.0, 0.0), 1.0, n=64) == 2  # changes at pi/2 and 3 pi/2


def test_sign_changes_on_a_circle_refuse_non_finite_scores_unless_asked_to_drop_them():
    """A NaN has no sign: counted as a sample it made NaN != NaN a change twice, so a score that never changes sign
    but is NaN on a short arc gave 60 (ref11_ch6 finding 2); at eps = 0 that is the pole-on-the-circle case."""
    from lnbook.ln_activation.width3 import sign_changes_on_circle

    nan_arc = lambda p: torch.where(p[:, 0] > 0.999, torch.nan, 1.0)  # noqa: E731
    with pytest.raises(ValueError, match=r"NaN or infinite at 59 of the 4096 samples.*angle\(s\) 0, .*nonfinite=\"drop\""):
        sign_changes_on_circle(nan_arc, (0, 0), 1.0, n=4096)
    assert sign_changes_on_circle(nan_arc, (0, 0), 1.0, n=4096, nonfinite="drop") == 0
    inf_at_pi = lambda p: torch.where(p[:, 0] < -0.999, torch.inf, p[:, 1])  # noqa: E731
    with pytest.raises(ValueError, match="NaN or infinite"):
        sign_changes_on_circle(inf_at_pi, (0, 0), 1.0, n=64)
    assert sign_changes_on_circle(inf_at_pi, (0, 0), 1.0, n=64, nonfinite="drop") == 2
    with pytest.raises(ValueError, match='nonfinite must be "raise" or "drop"'):
        sign_changes_on_circle(nan_arc, (0, 0), 1.0, nonfinite="skip")


def _rescaling_range(pairs_of_eps_and_params, dtype, p=2.0):
    """The range of eps' that with_eps's docstring (**Range**) promises, from finfo and each Linear's largest parameter."""
    info, lo, hi = torch.finfo(dtype), 0.0, math.inf
    for eps, big in pairs_of_eps_and_params:
        lo = max(lo, min(eps, eps * info.tiny / big ** p))
        hi = min(hi, max(eps, eps * info.max / big ** p))
    return lo, hi


@pytest.mark.parametrize("case", ["float16 LN", "float32 LN", "float32 PLN p=3"])
def test_with_eps_refuses_an_eps_whose_rescaling_leaves_the_dtypes_range(case):
    """Referee 7 of ch6, F-a: a float16 LN-MLP moved to eps' = 1000 gave inf/NaN outputs silently, float32 moved to
    1e36 NaN, and to 1e-44 denormal errors. with_eps now refuses an eps' outside [eps tiny / M^p, eps max / M^p] (M the
    largest parameter of the Linear before each norm, finfo of its dtype), with the range in the message: just outside
    each end is refused, just inside is not; the norm's own eps is always allowed; inside, the referee's float16 net
    stays finite."""
    from lnbook.core.norms import ParallelLayerNorm

    torch.manual_seed(0)
    if case == "float16 LN":
        net = nn.Sequential(nn.Linear(2, 4), nn.LayerNorm(4), nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 2)).half()
        linears, p, dtype, bad = [net[0], net[2]], 2.0, torch.float16, (10.0, 1000.0)
    elif case == "float32 LN":
        net = nn.Sequential(nn.Linear(2, 4), nn.LayerNorm(4), nn.Linear(4, 2))
        linears, p, dtype, bad = [net[0]], 2.0, torch.float32, (1e36, 1e-44)
    else:
        net = nn.Sequential(nn.Linear(2, 4), ParallelLayerNorm(2, p=3, eps=1e-3), nn.Linear(4, 2))
        linears, p, dtype, bad = [net[0]], 3.0, torch.float32, (1e37, 1e-45)
    norm_eps = [m.eps for m in net if not isinstance(m, nn.Linear)]
    bigs = [max(float(l.weight.detach().abs().max()), float(l.bias.detach().abs().max())) for l in linears]
    lo, hi = _rescaling_range(zip(norm_eps, bigs), dtype, p)
    for e in bad:
        with pytest.raises(ValueError, match=rf"outside the range this model's {str(dtype)[6:]} parameters .* model\.double"):
            with_eps(net, e)
    for e in (hi * 1.01, lo * 0.99):
        with pytest.raises(ValueError, match="outside the range"):
            with_eps(net, e)
    for e in (hi * 0.99, lo * 1.01, norm_eps[0]):
        with_eps(net, e)
    if case == "float16 LN":
        x = (torch.randn(2000, 2, generator=torch.Generator().manual_seed(0)) * 3).half()
        with torch.no_grad():
            assert with_eps(net, 1.0)(x).isfinite().all()


def test_best_sector_rule_accuracy_refuses_non_finite_points_and_apexes():
    """ch6 referee 10, finding 2: a NaN point got a NaN angle, was sorted last and counted as classified right, so
    20 points labelled by x1 > 0 plus (nan, 0) gave 21 of 21 right, an accuracy no direction rule attains."""
    X = np.random.default_rng(0).normal(size=(20, 2))
    y = (X[:, 0] > 0).astype(int)
    assert best_sector_rule_accuracy(X, y, [[0.0, 0.0]])[0] == 1.0
    Xn, yn = np.vstack([X, [[np.nan, 0.0]]]), np.append(y, 1)
    for bad in (Xn, np.vstack([X, [[np.inf, 0.0]]])):
        with pytest.raises(ValueError, match="NaN or infinite coordinate"):
            best_sector_rule_accuracy(bad, yn, [[0.0, 0.0]])
    with pytest.raises(ValueError, match="NaN or infinite coordinate"):
        search_sector_apex(Xn, yn, grid=5, rounds=1)
    with pytest.raises(ValueError, match="apexes must be finite"):
        best_sector_rule_accuracy(X, y, [[0.0, 0.0], [np.nan, 1.0]])


def test_with_eps_names_a_compiled_model_and_says_to_pass_the_original():
    """ch6 referee 10, finding 4: with_eps(torch.compile(model), eps) was refused with advice for data-dependent
    control flow; it now names the compiled module and says to pass ``_orig_mod`` and compile the result again."""
    net = nn.Sequential(nn.Linear(2, 4), nn.LayerNorm(4), nn.Linear(4, 1)).double()
    for model, where in ((torch.compile(net), "the model"), (nn.Sequential(torch.compile(net), nn.Tanh()), "0")):
        with pytest.raises(TypeError, match=rf"torch\.compile'd module \({where}\).*_orig_mod"):
            with_eps(model, 1e-2)
    x = torch.randn(16, 2, dtype=torch.float64)
    torch.testing.assert_close(with_eps(torch.compile(net)._orig_mod, 1e-2)(x), net(x), rtol=1e-12, atol=1e-12)


def rank1_second_block_net(seed: int, *, through_origin: bool = False, adversarial: bool = True) -> nn.Sequential:
    """A width-3 LN-Net (eps = 0) whose second block E^T W_2 E = u v^T has rank 1 (the singular case of the
    proof of thm-ch6-width3-sectors): the second LN's input is E a with a = sqrt(3) (v.e) u + h. ``adversarial``: the read-out's positive arc
    is a small arc around the direction of h, inside the arc swept by a, so the score changes sign four times;
    ``through_origin``: h is a multiple of u (the directions of a are two opposite points)."""
    g = np.random.default_rng(seed)
    E = complement_basis(3).numpy()
    M1 = g.normal(size=(2, 2)) + 2 * np.eye(2)
    x0 = g.uniform(-1, 1, size=2)
    u, v = g.normal(size=2), g.normal(size=2)
    h = g.normal() * u if through_origin else g.normal(size=2)
    T = np.sqrt(3) * np.linalg.norm(v)
    unit = lambda a: a / np.linalg.norm(a)
    if adversarial and not through_origin:
        mid = unit(h)
        delta = 0.5 * min(np.arccos(np.clip(mid @ unit(h + t * u), -1, 1)) for t in (-T, T))
        p, q = mid, -np.cos(delta)
    else:
        p, q = g.normal(size=2), g.normal()
    W1, b1 = E @ M1, -E @ M1 @ x0
    W2, b2 = E @ np.outer(u, v) @ E.T, E @ h
    return _eps0_width3_net(E, W1, b1, W2, b2, p, q)


@pytest.mark.parametrize("seed", range(40))
def test_width3_sector_theorem_holds_with_a_rank1_second_block(seed):
    """ch6 referee 10, finding 5 (thm-ch6-width3-sectors, singular case): with E^T W_2 E = u v^T singular the score still depends
    only on the direction from the apex and changes sign at most four times around it; four is reached (a small
    positive arc inside the swept one); random read-outs stay within four; h parallel to u gives at most two."""
    for net, most, exact in ((rank1_second_block_net(seed), 4, True),
                             (rank1_second_block_net(seed, adversarial=False), 4, False),
                             (rank1_second_block_net(seed, through_origin=True), 2, False)):
        apex = width3_apex(net[0])
        counts = [sign_changes_on_circle(score_of(net), apex, radius, n=4096) for radius in (0.1, 1.0, 10.0)]
        assert len(set(counts)) == 1  # a function of the direction only: the same count on every circle
        assert counts[0] <= most and counts[0] % 2 == 0
        if exact:
            assert counts[0] == 4


def test_preactivation_scale_is_the_median_centred_rms_over_sqrt_eps_and_with_eps_keeps_it():
    """ch6 referee 10, finding 7: the chapter's 'pre-activations of order sqrt(eps')' is glued from
    preactivation_scale. A known case: pre-activations (t, -t, 0) have centred RMS |t| sqrt(2/3); and with_eps
    multiplies each norm's pre-activations by sqrt(eps'/eps), so the ratios are the same before and after."""
    from lnbook.ln_activation.width3 import preactivation_scale

    net = nn.Sequential(nn.Linear(1, 3), nn.LayerNorm(3, eps=0.25), nn.Linear(3, 1)).double()
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[1.0], [-1.0], [0.0]]))
        net[0].bias.zero_()
    x = torch.tensor([[1.0], [-2.0], [3.0]], dtype=torch.float64)  # |t| = 1, 2, 3: median 2
    assert preactivation_scale(net, x) == pytest.approx([2 * math.sqrt(2 / 3) / 0.5], rel=1e-12)
    # a non-zero mean, so that 'centred' is checked (ch6 referee 14, finding 3): pre-activations (1, 5, 5) have centred
    # RMS sqrt(32/9), uncentred sqrt(17)
    with torch.no_grad():
        net[0].weight.copy_(torch.tensor([[1.0], [0.0], [0.0]]))
        net[0].bias.copy_(torch.tensor([0.0, 5.0, 5.0]))
    assert preactivation_scale(net, torch.ones(1, 1, dtype=torch.float64)) == pytest.approx([math.sqrt(32 / 9) / 0.5], rel=1e-12)
    deep = width3_net(3)
    for m in deep.modules():
        if isinstance(m, LayerNorm):
            m.eps = 0.3
    X = torch.randn(200, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    before = preactivation_scale(deep, X)
    assert len(before) == 2
    assert preactivation_scale(with_eps(deep, 1e-5), X) == pytest.approx(before, rel=1e-9)
    with pytest.raises(ValueError, match="eps = 0"):
        preactivation_scale(width3_net(3), X)


def test_preactivation_scale_reads_rmsnorm_with_its_uncentred_rms():
    """ch6 referee 13, finding 11: on the essay's net, mlp(2, 3, 2, 2, norm="rms"), preactivation_scale returned [],
    though with_eps rescales that net exactly. RMSNorm divides by the uncentred RMS: pre-activations (t, 2t, 2t) have
    RMS sqrt(3)|t| (centred, it would be |t| sqrt(2/9)); with_eps keeps the values; eps = 0 and eps=None are refused."""
    from lnbook.core.norms import RMSNorm as BookRMS
    from lnbook.ln_activation.width3 import preactivation_scale
    from lnbook.ml.models import mlp

    x = torch.tensor([[1.0], [-2.0], [3.0]], dtype=torch.float64)  # |t| = 1, 2, 3: median 2
    for norm in (nn.RMSNorm(3, eps=0.25), BookRMS(eps=0.25)):
        net = nn.Sequential(nn.Linear(1, 3), norm, nn.Linear(3, 1)).double()
        with torch.no_grad():
            net[0].weight.copy_(torch.tensor([[1.0], [2.0], [2.0]]))
            net[0].bias.zero_()
        assert preactivation_scale(net, x) == pytest.approx([2 * math.sqrt(3) / 0.5], rel=1e-12)
    essay = mlp(2, 3, 2, 2, norm="rms", eps=0.3).double()
    X = torch.randn(200, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    before = preactivation_scale(essay, X)
    assert len(before) == 2 and all(v > 0 for v in before)
    assert preactivation_scale(with_eps(essay, 1e-5), X) == pytest.approx(before, rel=1e-9)
    with pytest.raises(ValueError, match="RMSNorm of the model has eps = 0"):
        preactivation_scale(mlp(2, 3, 2, 2, norm="rms", eps=0.0), X.float())
    with pytest.raises(ValueError, match="eps=None"):
        preactivation_scale(nn.Sequential(nn.Linear(2, 3), nn.RMSNorm(3), nn.Linear(3, 2)), X.float())


def _eps0_width3_net(E, W1, b1, W2, b2, p, q):
    """Linear(2, 3), LN (eps = 0), Linear(3, 3), LN, and a read-out whose second score is p . (the last LN's output
    in the plane of the basis E, E^T y / sqrt(3)) + q: the width-3 nets of these tests, from their weights."""
    R = np.zeros((2, 3))
    R[1] = E @ p / np.sqrt(3)
    r = np.array([0.0, q])
    net = nn.Sequential(nn.Linear(2, 3), LayerNorm(eps=0.0), nn.Linear(3, 3), LayerNorm(eps=0.0), nn.Linear(3, 2)).double()
    with torch.no_grad():
        for layer, (w, b) in zip((net[0], net[2], net[4]), ((W1, b1), (W2, b2), (R, r))):
            layer.weight.copy_(torch.as_tensor(w))
            layer.bias.copy_(torch.as_tensor(b))
    return net


def test_with_eps_says_its_refusals_of_a_shared_norm_and_a_relu_before_a_norm_are_conservative():
    """ref11_ch6 finding 7: a norm called on two Linears' outputs, and Linear -> ReLU -> LayerNorm, could be
    rescaled exactly; with_eps refuses both (it proves only the unshared pair, direct or through Dropout/Identity)
    and says the refusal is conservative, not that the rescaling would be wrong."""

    class TwoInputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.n = nn.Linear(2, 3), nn.Linear(2, 3), nn.LayerNorm(3)

        def forward(self, x):
            return self.n(self.a(x)) + self.n(self.b(x))

    with pytest.raises(ValueError, match="is shared .*conservative.*same factor"):
        with_eps(TwoInputs(), 1e-3)
    with pytest.raises(ValueError, match="must follow an nn.Linear.*conservative.*ReLU"):
        with_eps(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.LayerNorm(3)), 1e-3)


@pytest.mark.parametrize("between", [[nn.Dropout(0.3)], [nn.Identity()], [nn.Dropout(0.2), nn.Identity()]])
def test_with_eps_rescales_through_dropout_and_identity_exactly(between):
    """ref11_ch6 finding 7: Dropout and Identity commute with a positive scale (dropout with the same mask), so a
    norm reached from its Linear through them is rescaled; the function is the same in eval mode and, with the same
    dropout mask (the same seed), in training mode."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 5), *between, nn.LayerNorm(5), nn.Linear(5, 5), nn.LayerNorm(5),
                          nn.Linear(5, 2)).double()
    x = torch.randn(64, 2, dtype=torch.float64)
    for new in (1e-7, 10.0):
        moved = with_eps(model, new)
        assert moved[0].weight.abs().max() != model[0].weight.abs().max()  # the Linear before the Dropout moved
        for training in (False, True):
            model.train(training), moved.train(training)
            torch.manual_seed(1)
            a = model(x)
            torch.manual_seed(1)
            b = moved(x)
            torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-12)
        unscaled = copy.deepcopy(model).eval()
        for m in unscaled.modules():
            if isinstance(m, nn.LayerNorm):
                m.eps = new
        assert (unscaled(x) - model.eval()(x)).abs().max() > 1e-6  # changing eps alone changes the function


class _DropoutOnASkip(nn.Module):
    """Linear -> Dropout -> LayerNorm, the Dropout's output also on a skip path (its output has two users)."""

    def __init__(self):
        super().__init__()
        self.a, self.d, self.n, self.o = nn.Linear(4, 4), nn.Dropout(0.0), nn.LayerNorm(4, eps=0.3), nn.Linear(4, 2)

    def forward(self, x):
        h = self.d(self.a(x))
        return self.o(self.n(h) + h)


class _IdentityCalledTwice(nn.Module):
    """An Identity between the Linear and its LayerNorm that is also called on the skip path."""

    def __init__(self):
        super().__init__()
        self.a, self.i, self.n, self.o = nn.Linear(4, 4), nn.Identity(), nn.LayerNorm(4, eps=0.3), nn.Linear(4, 2)

    def forward(self, x):
        return self.o(self.n(self.i(self.a(x)))) + self.o(self.i(x))


@pytest.mark.parametrize("net", [_DropoutOnASkip, _IdentityCalledTwice])
def test_with_eps_does_not_rescale_through_a_pass_through_used_twice(net):
    """Referee 12 of chapter 6, finding 1: with_eps steps back over a Dropout or Identity only when it is called once
    and its output feeds the next node alone; otherwise rescaling the Linear before it would change another path (with
    the single-use clauses removed the tool accepted these nets and changed the function by up to 0.93). Both are
    refused, with the reason."""
    torch.manual_seed(0)
    model = net().double().eval()
    with pytest.raises(ValueError, match="follow an nn.Linear"):
        with_eps(model, 1e-5)
