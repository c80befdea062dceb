"""The centred rank of an LN-Net's last hidden features is at most k + depth, and generic weights attain it."""

from __future__ import annotations

import pytest
import torch

from lnbook.group_ln.depth_rank import depth_rank_bound, hidden_feature_rank, hidden_features, hidden_layers
from lnbook.group_ln.lab import FitConfig, Run, make_network
from lnbook.ml.models import mlp


def _random_net(run: Run, k: int, width: int, eps: float, affine: bool, seed: int) -> torch.nn.Module:
    """The lab's network with PyTorch's initialisation, and Gaussian per-feature gains and biases (not 1 and 0)."""
    torch.manual_seed(seed)
    net = make_network(run, k, 10, FitConfig(width=width, eps=eps, affine=affine))
    with torch.no_grad():
        for module in net:
            if not isinstance(module, torch.nn.Linear) and getattr(module, "weight", None) is not None:
                module.weight.normal_()
                module.bias.normal_()
    return net


def _inputs(n: int, k: int, seed: int) -> torch.Tensor:
    return torch.randn(n, k, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("eps", [0.0, 1e-5, 1e-1])
def test_ln_net_hidden_rank_is_k_plus_depth(eps):
    # k + L, literally (not through depth_rank_bound): a bound of k + L - 1 or k fails, and so does one of k + L + 1
    for k, width, depths, affine in ((16, 128, (1, 4, 8), True), (5, 32, (2, 6), False)):
        for depth in depths:
            net = _random_net(Run("ln", depth), k, width, eps, affine, seed=depth)
            r = hidden_feature_rank(net, _inputs(200, k, seed=depth))
            assert r.bound == k + depth == depth_rank_bound(200, k, width, 1, depth), (k, width, depth, affine)
            assert r.rank == k + depth, (k, width, depth, affine, r.rank)
            # decided with room: the (k+L)-th singular value far above the tolerance, the next far below
            assert r.margin > 10, (k, width, depth, affine, r.margin)


def test_the_width_and_the_samples_cap_the_rank():
    # width 8: at most 7 after centring, however deep; 12 samples: at most 11
    r = hidden_feature_rank(_random_net(Run("ln", 4), 5, 8, 1e-5, True, seed=1), _inputs(100, 5, seed=1))
    assert r.rank == r.bound == 7 == depth_rank_bound(100, 5, 8, 1, 4)
    r = hidden_feature_rank(_random_net(Run("ln", 8), 8, 64, 1e-5, True, seed=2), _inputs(12, 8, seed=2))
    assert r.rank == r.bound == 11
    # inputs of centred rank 3 in R^16: the bound starts from 3, not from 16
    X = _inputs(100, 3, seed=3).double() @ torch.randn(3, 16, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    r = hidden_feature_rank(_random_net(Run("ln", 4), 16, 64, 1e-5, True, seed=3), X)
    assert r.rank == r.bound == 3 + 4


@pytest.mark.parametrize(
    "groups, depth, width, expected",
    [(16, 1, 128, 112), (16, 4, 128, 112), (2, 4, 128, 126), (4, 3, 32, 28), (8, 2, 32, 24)],
)
def test_lng_nets_reach_groups_times_group_size_minus_one(groups, depth, width, expected):
    # G min(r + 1, m - 1) per layer: 16 groups of 8 reach 16 * 7 after one layer from k = 16
    net = _random_net(Run("lng", depth, groups), 16, width, 1e-5, True, seed=groups + depth)
    r = hidden_feature_rank(net, _inputs(300, 16, seed=7))
    assert r.rank == r.bound == expected == depth_rank_bound(300, 16, width, groups, depth)
    assert r.margin > 10


def test_hidden_features_are_the_networks_own_within_the_error_bound():
    for run in (Run("ln", 4), Run("lng", 2, 16), Run("linear", 0)):
        net = _random_net(run, 16, 128, 1e-5, True, seed=5).double()
        X = _inputs(50, 16, seed=5).double()
        H, e = hidden_features(net, X)
        with torch.no_grad():
            reference = net[:-1](X)  # torch's own kernels: another rounding of the same exact features
        # both lie within e of the exact features (torch's LayerNorm is held to the same bound)
        assert bool(((H - reference).norm(dim=1) <= 2 * e + 1e-300).all()), run.label
        assert bool((e < 1e-9 * H.norm(dim=1)).all()), run.label


def test_the_bound_recursion():
    assert depth_rank_bound(500, 16, 128, 1, 4) == 20
    assert depth_rank_bound(500, 16, 128, 1, 8) == 24
    assert depth_rank_bound(500, 16, 128, 16, 1) == depth_rank_bound(500, 16, 128, 16, 4) == 112
    assert depth_rank_bound(500, 16, 128, 2, 4) == 126
    assert depth_rank_bound(500, 16, 128, 1, 0) == 16
    assert depth_rank_bound(10, 16, 128, 1, 0) == 9


def test_refuses_what_the_argument_does_not_cover():
    relu_net = mlp(16, 32, 2, 10, norm="ln", activation="relu")
    with pytest.raises(ValueError, match="elementwise nonlinearity"):
        hidden_feature_rank(relu_net, _inputs(20, 16, seed=0))
    with pytest.raises(ValueError, match="RMSNorm"):
        hidden_layers(mlp(16, 32, 2, 10, norm="rms"))
    with pytest.raises(ValueError, match="features"):
        hidden_feature_rank(make_network(Run("ln", 2), 16, 10, FitConfig(width=32)), _inputs(20, 8, seed=0))
    with pytest.raises(ValueError, match="nn.Sequential"):
        hidden_layers(torch.nn.Linear(3, 2))
    with pytest.raises(ValueError, match="groups"):
        depth_rank_bound(100, 16, 32, 3, 2)
    with pytest.raises(ValueError):
        depth_rank_bound(100, -1, 32, 1, 2)
    # eps = 0 and a layer whose outputs are constant on a group: LN is undefined there, no bound
    net = make_network(Run("ln", 1), 2, 10, FitConfig(width=4, eps=0.0))
    with torch.no_grad():
        net[0].weight.zero_()
        net[0].bias.zero_()
    with pytest.raises(ValueError, match="undefined"):
        hidden_features(net, _inputs(5, 2, seed=0))


def _centred_rank(h: torch.Tensor) -> int:
    """Numerical rank of the features centred over the samples (float64; tolerance max(n, d) * eps * sigma_1)."""
    c = h - h.mean(dim=0, keepdim=True)
    s = torch.linalg.svdvals(c)
    return int((s > max(c.shape) * torch.finfo(c.dtype).eps * s[0]).sum())


def test_a_skip_connection_voids_the_depth_rank_corollary():
    """The chapter's note on `resLinearModel` (the harness's name; `res` is a skip in its model.py): without skips the
    centred rank of an LN-Net's features grows by one per layer (cor-ch5-depth-rank: 17, 18, 19, 20 from inputs of
    rank 16); with a skip h <- h + LN(W h + c) after the first layer it grows to 2r + 1 per layer up to width - 1
    (17, 35, 71, 127), so the corollary, and the chapter's explanation built on it, hold without skips only. Width
    128, 500 Gaussian points in R^16, float64, generic (seeded) weights."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(500, 16, dtype=torch.float64, generator=g)
    layers = [(torch.randn(128, k, dtype=torch.float64, generator=g) / k**0.5,
               torch.randn(128, dtype=torch.float64, generator=g)) for k in (16, 128, 128, 128)]

    def ln(u):
        return torch.nn.functional.layer_norm(u, (128,))

    plain, residual = [], []
    h = r = x
    for i, (W, c) in enumerate(layers):
        h = ln(h @ W.T + c)
        r = ln(r @ W.T + c) if i == 0 else r + ln(r @ W.T + c)
        plain.append(_centred_rank(h))
        residual.append(_centred_rank(r))
    assert plain == [17, 18, 19, 20] == [depth_rank_bound(500, 16, 128, 1, L) for L in (1, 2, 3, 4)]
    assert residual == [17, 35, 71, 127]


def _group_norm_net(groups: int, eps: float, affine: bool, seed: int, lng: bool = False) -> torch.nn.Sequential:
    """Linear(6, 32) -> GroupNorm(groups, 32) -> Linear(32, 32) -> GroupNorm -> Linear(32, 3), the harness's way
    (``nn.GroupNorm``), or with the book's ``GroupLayerNorm`` (``lng=True``): the same weights for the same seed, and
    Gaussian per-channel gains and biases when ``affine`` (not 1 and 0, so that a dropped affine map shows)."""
    from lnbook.core.norms import GroupLayerNorm

    torch.manual_seed(seed)
    linears = [torch.nn.Linear(6, 32), torch.nn.Linear(32, 32), torch.nn.Linear(32, 3)]
    gains = [(torch.randn(32), torch.randn(32)) for _ in range(2)]

    def norm(i):
        if lng:
            module = GroupLayerNorm(groups, eps, affine=affine, width=32) if affine else GroupLayerNorm(groups, eps)
        else:
            module = torch.nn.GroupNorm(groups, 32, eps=eps, affine=affine)
        if affine:
            with torch.no_grad():
                module.weight.copy_(gains[i][0])
                module.bias.copy_(gains[i][1])
        return module

    return torch.nn.Sequential(linears[0], norm(0), linears[1], norm(1), linears[2]).double()


def test_group_norm_layers_are_ln_g_with_their_groups():
    """The referee's network (200 Gaussian points in R^6, width 32): nn.GroupNorm(4, 32) twice gives rank 28 = bound
    28 = 4 (8 - 1), as the same network with GroupLayerNorm(4, affine=True) does (cor-ch5-depth-rank covers it:
    prop-ch5-groupnorm). Read with the wrong group count (1: LayerNorm) the bound would be 6 + 2 = 8."""
    torch.manual_seed(0)
    X = torch.randn(200, 6, dtype=torch.float64)
    for affine in (True, False):
        gn = hidden_feature_rank(_group_norm_net(4, 1e-5, affine, seed=0), X)
        lng = hidden_feature_rank(_group_norm_net(4, 1e-5, affine, seed=0, lng=True), X)
        assert gn.rank == gn.bound == lng.rank == lng.bound == 28 == depth_rank_bound(200, 6, 32, 4, 2), (affine, gn, lng)
        assert gn.margin > 10
    # 16 groups of 2: each group of two is +-1 (times its gain), so G (m - 1) = 16 after the first layer already
    torch.manual_seed(1)
    r = hidden_feature_rank(_group_norm_net(16, 1e-5, True, seed=1), torch.randn(200, 6, dtype=torch.float64))
    assert r.rank == r.bound == 16


@pytest.mark.parametrize("groups, eps, affine", [(4, 0.5, True), (8, 2.0, False), (2, 1e-5, True)])
def test_group_norm_hidden_features_are_torchs_own_within_the_error_bound(groups, eps, affine):
    # torch's nn.GroupNorm on (N, C) against the mapped LN-G: a wrong group count, eps (0.5 and 2 are far from
    # the default 1e-5) or a dropped affine map moves the features by O(1), far beyond the bound e (< 1e-9 |H|)
    net = _group_norm_net(groups, eps, affine, seed=groups)
    X = _inputs(50, 6, seed=groups).double()
    assert [layer[1:3] for layer in hidden_layers(net)] == [(groups, eps)] * 2
    H, e = hidden_features(net, X)
    with torch.no_grad():
        reference = net[:-1](X)
    assert bool(((H - reference).norm(dim=1) <= 2 * e + 1e-300).all()), (groups, eps, affine)
    assert bool((e < 1e-9 * H.norm(dim=1)).all())


def test_group_norm_is_read_on_two_dimensional_inputs_only():
    net = _group_norm_net(4, 1e-5, True, seed=0)
    with pytest.raises(ValueError, match=r"GroupNorm is LN-G only on \(N, C\) inputs"):
        hidden_feature_rank(net, _inputs(20, 6, seed=0).double().reshape(20, 6, 1))
    with pytest.raises(ValueError, match="channels"):
        hidden_layers(torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.GroupNorm(4, 16), torch.nn.Linear(16, 3)))
    with pytest.raises(ValueError, match="expected nn.LayerNorm, GroupLayerNorm or nn.GroupNorm"):
        hidden_layers(torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.Linear(32, 32), torch.nn.Linear(32, 3)))


def test_rank_caps_of_the_labs_setting_and_of_the_harness():
    """Referee 10 of chapter 5, finding 6: the lab's LN-Net is capped by its inputs' dimension (16 + 4 = 20 against a
    room of 127 at width 128), while in the harness's grayscale CIFAR-10 (1024 inputs, width 256) the LN-Net's cap is
    the room itself (255), above LN-G16's 240: there the corollary constrains nothing. Literal values, not through
    depth_rank_bound."""
    from lnbook.group_ln.depth_rank import CIFAR10_GRAYSCALE, rank_caps

    lab = rank_caps(500, 16, 128, 4, 16)
    assert (lab.ln, lab.lng, lab.room, lab.input_limits_ln) == (20, 112, 127, True)
    paper_lab = rank_caps(5000, 32, 256, 4, 16)
    assert (paper_lab.ln, paper_lab.lng, paper_lab.room, paper_lab.input_limits_ln) == (36, 240, 255, True)
    cifar = rank_caps(CIFAR10_GRAYSCALE["samples"], CIFAR10_GRAYSCALE["input_dim"], 256, 4, 16)
    assert (cifar.ln, cifar.lng, cifar.room, cifar.input_limits_ln) == (255, 240, 255, False)
    wide = rank_caps(500, 160, 128, 4, 16)  # inputs wider than the network: nothing capped by them
    assert (wide.ln, wide.input_limits_ln) == (127, False)
    assert rank_caps(10, 16, 128, 4, 16).room == 9  # the samples cap everything
    with pytest.raises(ValueError, match="must divide"):
        rank_caps(500, 16, 128, 4, 3)
