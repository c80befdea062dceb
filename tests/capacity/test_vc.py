"""Tests of :mod:`lnbook.capacity.vc`.

Checks of lnbook.capacity.build_float64: the width-3 LN-Net that classifies any labelling (chapter 3).

Every net is checked by running the real torch module on the samples in float64.

Checks of lnbook.capacity.vc: the VC lower bound max(D + 1, n + 1) for width-3 LN-Nets with D LN layers.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lnbook.capacity.build_float64 import (
    build_ln_net,
)
from lnbook.capacity.vc import (
    count_ln_layers,
    depth_d_net,
    exact_shatter_check,
    linear_shatters,
    linear_vc_dimension,
    linearly_separable,
    ln_net_from_linear,
    ln_net_vc_lower_bound,
    pad_exact_ln_net,
    pad_ln_net,
    shatter_check,
)
from tests.strategies import POINT_SETS

SQUARE = np.array([[0.0, 0.0], [1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])


@pytest.mark.slow  # about a minute of CPU; the default run sweeps every point set at m = 8
def test_exhaustive_m12_all_4096_labellings():
    """Slow sweep (pytest -m slow): all 2^12 labellings of 12 symmetric points on a circle. The builder runs on the
    2048 labellings with y_0 = 0; for each, the same blocks with the two read-out rows swapped are
    run on the complementary labelling (``shatter_check(symmetric=True)``); every net is run."""
    from lnbook.capacity.vc import shatter_check

    report = shatter_check(POINT_SETS["circle"](12))
    assert report["labellings"] == 4096
    assert report["correct"] == 4096, report["failures"][:3]
    assert report["max_ln_layers"] <= 11  # the theorem: m - 1
    print(f"m=12 circle: 4096/4096, max LN layers {report['max_ln_layers']}, min margin {report['min_margin']:.3f}")


@pytest.mark.parametrize("depth, n", [(1, 2), (2, 1), (3, 2), (1, 4), (2, 3), (5, 1)])
def test_the_bound_is_met_by_shattering_at_exactly_depth_d(depth, n):
    """ln_net_vc_lower_bound(D, n) = max(D + 1, n + 1) random points of R^n (affinely independent when
    n + 1 points) are shattered by nets with exactly D LN layers: every labelling gets a net of that depth
    (depth_d_net, the proof of the corollary) that classifies it. A bound one larger would not be met by
    this proof: D + 2 alternating points of the line need D + 1 layers."""
    m = ln_net_vc_lower_bound(depth, n=n)
    assert m == max(depth + 1, n + 1)  # the corollary's number, so a weaker bound cannot pass by shattering less
    X = np.random.default_rng(10 * depth + n).standard_normal((m, n))
    assert len(X) == max(depth + 1, n + 1)  # the points used are as many as the bound claims
    Xt = torch.from_numpy(X)
    for bits in itertools.product((0, 1), repeat=m):
        y = np.array(bits)
        net = depth_d_net(X, y, depth)
        assert count_ln_layers(net) == depth
        with torch.no_grad():
            np.testing.assert_array_equal(net(Xt).argmax(dim=1).numpy(), y)
    line = np.linspace(-1.0, 1.0, depth + 2)
    with pytest.raises(ValueError, match="not linearly separable"):
        depth_d_net(line, np.arange(depth + 2) % 2, depth)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bound_rejects_bad_depth(bad):
    with pytest.raises(ValueError, match="depth must be a positive integer"):
        ln_net_vc_lower_bound(bad)
    with pytest.raises(ValueError, match="n must be a positive integer"):
        linear_vc_dimension(bad)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 5), st.integers(0, 10_000))
def test_one_ln_layer_realises_every_affine_classifier(n, seed):
    rng = np.random.default_rng(seed)
    a, c = rng.standard_normal(n), float(rng.standard_normal())
    X = rng.standard_normal((50, n))
    score = X @ a + c
    keep = np.abs(score) > 1e-6
    net = ln_net_from_linear(a, c)
    assert count_ln_layers(net) == 1
    with torch.no_grad():
        pred = net(torch.from_numpy(X)).argmax(dim=1).numpy()
    np.testing.assert_array_equal(pred[keep], (score[keep] > 0).astype(int))


def test_linear_separability_by_lp():
    assert linearly_separable(SQUARE, np.array([0, 0, 1, 1]))[0] is False  # XOR
    assert linearly_separable(SQUARE, np.array([0, 1, 0, 0]))[0] is True  # AND-like
    assert linear_shatters(SQUARE[:3])  # 3 points in general position in R^2
    assert not linear_shatters(SQUARE)  # VC dimension of lines in R^2 is 3


def test_the_xor_square_is_shattered_at_depth_three():
    """Beside the linear bound: 4 points in R^2 are not linearly shattered, but depth-3 LN-Nets
    (D + 1 = 4) shatter them; every one of the 16 labellings is built and run. (Whether depth 2
    would do is not claimed: the bound D + 1 only says depth 3 is enough.)"""
    report = shatter_check(SQUARE, depth=3)
    assert report["correct"] == report["labellings"] == 16
    assert report["max_ln_layers"] <= 3


def test_small_sets_are_shattered_in_exact_arithmetic():
    """cor-vc as stated, in exact arithmetic (the float64 checks above run eager torch only): the XOR square at
    D = 3 and D + 1 random points of R^2 for D = 1..4, every labelling built exactly, padded with exact identity
    blocks to exactly D LN layers and certified through the real weights and LayerNorm. Planted: a padding
    block whose pole is not 0 (a projection, not the identity) is reported."""
    for X, depth in [(SQUARE, 3)] + [(np.random.default_rng(depth).standard_normal((depth + 1, 2)), depth)
                                     for depth in (1, 2, 3, 4)]:
        report = exact_shatter_check(X, depth=depth)
        assert report["correct"] == report["labellings"] == 2 ** len(X), report["failures"]
        assert report["min_margin"] > 0
    from lnbook.capacity.build_exact import build_exact_ln_net, verify_exact_ln_net
    from lnbook.capacity.certified_reals import Real

    y = np.array([0, 1, 1, 0])
    padded = pad_exact_ln_net(build_exact_ln_net(SQUARE, y), 4)
    good = verify_exact_ln_net(padded, SQUARE, y)
    assert padded.depth == 4 and good["errors"] == 0 and good["coincide"]
    bad = dataclasses.replace(padded, blocks=padded.blocks[:-1] + [dataclasses.replace(
        padded.blocks[-1], pole=(Real(1, 2), Real(0)))])
    report = verify_exact_ln_net(bad, SQUARE, y)
    assert report["errors"] > 0 or not report["coincide"]
    with pytest.raises(ValueError, match="more than depth"):
        pad_exact_ln_net(build_exact_ln_net(SQUARE, y), 1)


@pytest.mark.parametrize("depth", [1, 2, 3, 4, 5, 6])
def test_depth_d_shatters_d_plus_one_points(depth):
    """Exhaustive: D + 1 random points in R^2, all 2^(D+1) labellings, nets padded to exactly D."""
    X = np.random.default_rng(depth).standard_normal((depth + 1, 2))
    report = shatter_check(X, depth=depth)
    assert report["labellings"] == 2 ** (depth + 1)
    assert report["correct"] == report["labellings"], report["failures"][:3]
    assert report["max_ln_layers"] <= depth
    if depth + 1 > 3:  # beyond the VC dimension of lines: some labelling is not linearly separable
        assert not linear_shatters(X)


@pytest.mark.parametrize("depth", [4, 6])
def test_depth_d_on_one_dimensional_inputs(depth):
    """n = 1: thresholds have VC dimension 2, LN-Nets of depth D shatter D + 1 points of the line."""
    x = np.linspace(-1.0, 1.0, depth + 1)[:, None]
    assert not linear_shatters(x)
    report = shatter_check(x, depth=depth)
    assert report["correct"] == report["labellings"]


def test_padding_keeps_the_function_and_sets_the_depth():
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((6, 2)), rng.integers(0, 2, 6)
    net = build_ln_net(X, y)
    padded = pad_ln_net(net, net.n_ln_layers + 4)
    assert count_ln_layers(padded) == net.n_ln_layers + 4
    Xt = torch.from_numpy(X)
    with torch.no_grad():
        assert torch.allclose(padded(Xt), net(Xt), atol=1e-12)
    with pytest.raises(ValueError, match="already has"):
        pad_ln_net(net, 1 if net.n_ln_layers > 1 else 0)


def test_shatter_check_needs_two_points():
    with pytest.raises(ValueError, match="at least 2 points"):
        shatter_check(np.zeros((1, 2)))
