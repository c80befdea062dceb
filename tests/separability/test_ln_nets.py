"""Tests of lnbook.separability.ln_nets: the exact XOR counterexample (sympy and float64) and the SSR training experiment.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lnbook.core.norms import LayerNorm
from lnbook.core.scatter_ratio import lssr, ssr, symbolic_ssr
from lnbook.core.symbolic import symbolic_layer_norm
from lnbook.separability.ln_nets import (
    linear_net,
    ln_net,
    noisy_xor,
    plane_basis,
    plane_ln_layer,
    random_labelled_dataset,
    ssr_curves,
    to_plane,
    train_ssr,
    xor_dataset,
    xor_ln_net,
)
from tests.strategies import seeds


def test_xor_no_linear_net_helps():
    """Random linear nets on XOR: SSR stays exactly 1 (class means remain equal under affine maps)."""
    X, y = xor_dataset()
    for seed in range(5):
        torch.manual_seed(seed)
        with torch.no_grad():
            assert ssr(linear_net(2, 3, 2, 2)(X), y) == pytest.approx(1.0, abs=1e-12)


def test_builders_structure():
    lin = linear_net(4, 5, 3, 2)
    lnn = ln_net(4, 5, 3, 2, eps=1e-3)
    assert [m.out_features for m in lin if isinstance(m, torch.nn.Linear)] == [5, 5, 5, 2]
    assert [m.out_features for m in lnn if isinstance(m, torch.nn.Linear)] == [5, 5, 5, 2]
    assert sum(isinstance(m, LayerNorm) for m in lnn) == 3
    x = torch.randn(7, 4, dtype=torch.float64)
    assert lnn(x).shape == lin(x).shape == (7, 2)
    # the linear net is affine: f(a x + (1 - a) x') = a f(x) + (1 - a) f(x')
    x2 = torch.randn(7, 4, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(lin(0.3 * x + 0.7 * x2), 0.3 * lin(x) + 0.7 * lin(x2))


def test_random_labelled_dataset():
    X, y = random_labelled_dataset(10, 3, k=3, seed=4)
    X2, y2 = random_labelled_dataset(10, 3, k=3, seed=4)
    assert X.dtype == torch.float64 and X.shape == (10, 3)
    assert torch.equal(X, X2) and torch.equal(y, y2)
    assert sorted(torch.bincount(y).tolist()) == [3, 3, 4]


def test_linear_net_stalls_at_lssr_and_ln_net_goes_below():
    """Seeded: the trained linear net reaches LSSR (1e-4) and never goes below it (1e-9); the LN-Net ends below."""
    X, y = random_labelled_dataset(48, 3, seed=0)
    bound = lssr(X, y)
    curves = ssr_curves(X, y, width=4, depth=3, steps=300, seeds=(0,), lr=3e-2, device="cpu")
    assert curves["linear"].shape == curves["ln"].shape == (1, 301)
    assert curves["linear"].min() >= bound - 1e-9
    assert curves["linear"][0, -1] == pytest.approx(bound, abs=1e-4)
    assert curves["ln"][0, -1] < bound - 0.05


def test_training_errors():
    X, y = random_labelled_dataset(8, 2)
    with pytest.raises(ValueError, match="width >= 2"):
        ln_net(2, 1, 2, 1)
    with pytest.raises(ValueError, match="depth must be >= 1"):
        linear_net(2, 3, 0, 1)
    with pytest.raises(ValueError, match="steps must be >= 1"):
        train_ssr(linear_net(2, 3, 1, 1), X, y, steps=0)
    with pytest.raises(ValueError, match="lr must be a positive number"):
        train_ssr(linear_net(2, 3, 1, 1), X, y, steps=3, lr=-1.0)
    with pytest.raises(ValueError, match="integer torch tensor"):
        train_ssr(linear_net(2, 3, 1, 1), X, y.double(), steps=3)
    with pytest.raises(ValueError, match="one label >= 0 per row"):
        train_ssr(linear_net(2, 3, 1, 1), X, y[:-1], steps=3)
    with pytest.raises(ValueError, match="at least one seed"):
        ssr_curves(X, y, 3, 1, 3, seeds=())
    with pytest.raises(ValueError, match="cannot fill"):
        random_labelled_dataset(2, 2, k=3)
    assert np.isfinite(train_ssr(ln_net(2, 3, 1, 1), X, y, steps=3, device="cpu")).all()


def test_plane_basis_and_to_plane():
    E = plane_basis()
    torch.testing.assert_close(E.T @ E, torch.eye(2, dtype=torch.float64))
    torch.testing.assert_close(E @ E.T, torch.eye(3, dtype=torch.float64) - 1 / 3)
    v = torch.randn(5, 3, dtype=torch.float64)
    torch.testing.assert_close(to_plane(v).norm(dim=-1), (v - v.mean(-1, keepdim=True)).norm(dim=-1))
    with pytest.raises(ValueError, match="size 3"):
        to_plane(torch.zeros(2, 4))


@pytest.mark.parametrize("theta,offset", [(-math.pi / 4, 2.0), (0.3, 0.5), (1.0, 7.0)])
def test_plane_ln_layer_is_a_radial_projection(theta, offset):
    X, _ = noisy_xor(5, 0.2, seed=1)
    with torch.no_grad():
        Z = to_plane(plane_ln_layer(theta, offset)(X))
    R = torch.tensor([[math.cos(theta), -math.sin(theta)], [math.sin(theta), math.cos(theta)]], dtype=torch.float64)
    h = X @ R.T + torch.tensor([offset, 0.0], dtype=torch.float64)
    torch.testing.assert_close(Z, math.sqrt(3) * h / h.norm(dim=-1, keepdim=True))


def test_noisy_xor():
    X, y = noisy_xor(7, 0.0)
    assert X.shape == (28, 2) and torch.bincount(y).tolist() == [14, 14]
    assert lssr(X, y) == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError, match="noise"):
        noisy_xor(3, -1.0)


def test_plane_layer_separability_and_its_figure():
    """SSR and LSSR after one plane layer, for several shifts: LSSR <= SSR (the identity is a linear map), the
    figure helper draws the same numbers, and at theta = -45 deg a small shift already beats the input's bound."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lnbook.separability.figures import draw_plane_layer
    from lnbook.separability.ln_nets import plane_layer_separability

    X, y = noisy_xor(10, 0.15, seed=0)
    shifts = [0.5, 2.0, 8.0]
    s_after, l_after = plane_layer_separability(X, y, -math.pi / 4, shifts)
    assert s_after.shape == l_after.shape == (3,)
    assert np.all(l_after <= s_after + 1e-12) and np.all(s_after <= 1.0)
    assert l_after.min() < lssr(X, y) - 0.5
    fig, axes = plt.subplots(1, 2)
    drawn = draw_plane_layer(axes, X, y, -45.0, 2.0)
    plt.close(fig)
    assert drawn == pytest.approx((s_after[1], l_after[1]), rel=1e-12)
    # the chapter's figure (ch02-layer): four shifts side by side in the column's width, no text below 9 pt there
    from lnbook.util.plotting import COLUMN_WIDTH_IN, readability_problems, use_book_style

    use_book_style()
    fig, axes = plt.subplots(2, 4, figsize=(COLUMN_WIDTH_IN, 4.2))
    for j, s in enumerate(shifts + [4.0]):  # as the lab draws it: the shift above, the y label once
        drawn = draw_plane_layer(axes[:, j], X, y, -45.0, s, stats="short")
        axes[0, j].set_title(f"s = {s:g}", fontsize=10)
        if j:
            axes[0, j].set_ylabel("")
        # issue 33: three lines at 9 pt were unreadable; two short lines at 10 pt, the input's LSSR left to the text
        title = axes[1, j].get_title(loc="left")
        assert title == f"SSR {drawn[0]:.3f}\nLSSR {drawn[1]:.3f}" and axes[1, j]._left_title.get_fontsize() >= 10
        assert "input" not in title
    fig.tight_layout()
    assert readability_problems(fig) == []
    plt.close(fig)
    fig, axes = plt.subplots(1, 2)
    draw_plane_layer(axes, X, y, -45.0, 2.0, stats=None)
    assert axes[1].get_title(loc="left") == ""
    with pytest.raises(ValueError, match="stats must be one of"):
        draw_plane_layer(axes, X, y, -45.0, 2.0, stats="long")
    plt.close(fig)


def test_train_ssr_records_the_ssr_of_the_outputs():
    """The record of train_ssr is ssr() of the net's outputs (before each step and after the last), not the
    loss: checked at the start and the end, for a float32 net whose outputs shrink."""
    X, y = random_labelled_dataset(12, 3, k=2, seed=1)
    torch.manual_seed(0)
    net = ln_net(3, 4, 1, 2, eps=1e-3).float()
    with torch.no_grad():
        net[-1].weight.mul_(1e-8)  # outputs of size 1e-8: tr S_t is far below the old floor of 1e-12
        start = ssr(net(X.float()), y)
    history = train_ssr(net, X, y, steps=5, lr=1e-3, device="cpu")
    with torch.no_grad():
        end = ssr(net(X.float()), y)
    assert history[0] == pytest.approx(start, rel=1e-12) and history[-1] == pytest.approx(end, rel=1e-12)
    assert history[0] > 0.5


# --- the XOR counterexample and random linear nets, measured with lnbook.core.scatter_ratio


def sym_layer_norm(v, eps):
    """LN of the column vector v, written from its definition (x - mean) / sqrt(var + eps)."""
    return symbolic_layer_norm(v.shape[0], eps, x=v)[1]


def random_problem(seed: int):
    """Gaussian samples with class-dependent means (so that LSSR is neither 0 nor 1)."""
    rng = np.random.default_rng(seed)
    k, d = int(rng.integers(2, 5)), int(rng.integers(1, 6))
    m = int(rng.integers(k + d + 2, 40))
    y = np.concatenate([np.arange(k), rng.integers(0, k, m - k)])
    rng.shuffle(y)
    X = rng.normal(size=(k, d))[y] + rng.normal(size=(m, d)) * rng.uniform(0.3, 3.0, size=d)
    return X, y


def xor_exact():
    X, y = xor_dataset()
    pts = [sp.Matrix([int(a), int(b)]) for a, b in X.tolist()]
    net = xor_ln_net()
    W = sp.Matrix(net[0].weight.detach().numpy().astype(int).tolist())
    b = sp.Matrix(net[0].bias.detach().numpy().astype(int).tolist())
    u = sp.Matrix(net[2].weight.detach().numpy().astype(int).tolist())
    return pts, y.tolist(), W, b, u


def test_xor_counterexample_exact():
    """Exact: hidden SSR after LN is 6/7 at eps = 0, output SSR is 0 for every eps >= 0, while LSSR = 1."""
    pts, labels, W, b, u = xor_exact()
    hidden = [W * p + b for p in pts]
    assert [list(h) for h in hidden] == [[4, 2, 2], [4, 2, 2], [4, 0, 4], [4, 4, 0]]
    normed = [sym_layer_norm(h, 0) for h in hidden]
    assert all(sp.simplify((v.T * v)[0] - 3) == 0 for v in normed)  # on the circle of radius sqrt(3)
    assert symbolic_ssr(normed, labels) == sp.Rational(6, 7)
    out = [sp.simplify((u * v)[0]) for v in normed]
    assert out == [3 * sp.sqrt(2), 3 * sp.sqrt(2), 3 * sp.sqrt(2) / 2, 3 * sp.sqrt(2) / 2]
    assert symbolic_ssr([sp.Matrix([o]) for o in out], labels) == 0
    eps = sp.symbols("epsilon", positive=True)
    out_eps = [sp.simplify((u * sym_layer_norm(h, eps))[0]) for h in hidden]
    assert sp.simplify(out_eps[2] - out_eps[3]) == 0 and sp.simplify(out_eps[0] - out_eps[1]) == 0
    assert sp.simplify(out_eps[0] - out_eps[2]) != 0  # the two classes stay apart for every eps
    diff = sp.simplify(out_eps[0] - out_eps[2])
    assert all(float(diff.subs(eps, e)) > 0 for e in (1e-9, 1e-3, 1.0, 1e3))


@pytest.mark.parametrize("eps", [0.0, 1e-5, 1e-2])
def test_xor_counterexample_float64(eps):
    X, y = xor_dataset()
    net = xor_ln_net(eps)
    with torch.no_grad():
        hidden = net[1](net[0](X))
        out = net(X)
    assert lssr(X, y) == pytest.approx(1.0, abs=1e-12)
    assert ssr(out, y) < 1e-20
    assert ssr(hidden, y) < 1.0 - 1e-3
    if eps == 0.0:
        assert ssr(hidden, y) == pytest.approx(6 / 7, abs=1e-14)
    assert lssr(hidden, y) < 1e-12  # after one LN, a linear read-out separates XOR perfectly


@settings(max_examples=15)
@given(seeds, st.integers(1, 4), st.integers(1, 5))
def test_linear_networks_never_beat_lssr(seed, depth, width):
    """A composition of affine layers (lnbook.separability.ln_nets.linear_net, random weights) has SSR >= LSSR."""
    X, y = random_problem(seed)
    torch.manual_seed(seed)
    net = linear_net(X.shape[1], width, depth, 2)
    with torch.no_grad():
        Z = net(torch.as_tensor(X))
    assert ssr(Z, y) >= lssr(X, y) - 1e-10
