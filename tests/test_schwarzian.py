"""Checks of lnbook.schwarzian: chapter 3's distortion budget (the Schwarzian of a block map)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lnbook.schwarzian import (
    block_schwarzian,
    direction_map_identity,
    linear_direction_identity,
    peel_distortion,
    peeled_arc,
    predicted_block_schwarzian,
    predicted_end_ratio,
    sturm_width_limit,
)


def test_direction_map_identity_is_exact_sympy():
    """2 g'^2 + S g = 1/2 - (3/2)(R^2 - 1)/(1 - R cos t)^2 for the direction seen from a pole at distance R."""
    assert direction_map_identity() == 0


def test_linear_map_on_directions_identity_is_exact_sympy():
    """A linear map acting on directions has Schwarzian 2 - 2 h'^2 (any 2x2 matrix)."""
    assert linear_direction_identity() == 0


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(-2, 2), min_size=4, max_size=4),
    st.floats(0.2, 3.0),
    st.floats(0, 2 * math.pi),
    st.floats(0.3, math.pi - 0.3),
)
def test_block_schwarzian_matches_the_proposition(entries, R, omega, offset):
    """Exact derivatives (torch.func, float64) of a block map agree with 1/2 - 2D^2 - (3/2)(R^2-1)/(1-R cos)^2
    to 1e-7 relative, at points away from the pole's direction (where the map is smooth)."""
    S = np.array(entries).reshape(2, 2)
    if abs(np.linalg.det(S)) < 0.1:
        S = S + np.eye(2)
    pole = R * np.array([math.cos(omega), math.sin(omega)])
    theta = omega + np.array([offset, -offset, math.pi])  # never the pole's own direction
    d1, sch = block_schwarzian(theta, pole, S)
    want = predicted_block_schwarzian(theta, pole, d1)
    np.testing.assert_allclose(sch, want, rtol=1e-7, atol=1e-7 * (1 + np.abs(want).max()))


def test_width_preserving_blocks_with_outside_poles_have_schwarzian_below_minus_three_halves():
    """The corollary behind the short arc: pole on or outside the circle and D >= 1 => S F <= -3/2."""
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(200):
        S = rng.standard_normal((2, 2)) * 3
        R, omega = 1.0 + rng.exponential(0.3), rng.uniform(0, 2 * math.pi)
        pole = R * np.array([math.cos(omega), math.sin(omega)])
        theta = omega + rng.uniform(0.5, 2 * math.pi - 0.5, 8)
        d1, sch = block_schwarzian(theta, pole, S)
        big = np.abs(d1) >= 1
        assert (sch[big] <= -1.5 + 1e-9).all()
        checked += big.sum()
    assert checked > 100


def test_sturm_width_limit_is_tight_for_tan():
    """S(tan(a x)) = 2 a^2 and tan(a x) is smooth exactly on an interval of width pi/a: the limit is attained."""
    for a in (0.5, 1.0, 7.0):
        assert math.isclose(sturm_width_limit(2 * a * a), math.pi / a)
    assert sturm_width_limit(1.5 * 1000) < 0.12  # 1000 width-preserving blocks: an arc of width < 0.115 rad


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_sturm_rejects_non_positive_sigma(bad):
    with pytest.raises(ValueError, match="sigma must be positive"):
        sturm_width_limit(bad)


def test_block_schwarzian_rejects_singular_maps():
    with pytest.raises(ValueError, match="invertible"):
        block_schwarzian([0.5], [2.0, 0.0], np.zeros((2, 2)))


def test_peeling_distortion_follows_the_schwarzian_budget():
    """Evenly spaced points, peeled from both ends: the end/middle gap ratio matches cos^2 of the
    accumulated Schwarzian to 0.06 over the first half of the peeling, for a fixed arc of 0.1 rad and for
    the builder's arc w(n) = min(0.25, 3/sqrt n)."""
    from lnbook.constructions import arc_width_for

    for width in (0.1, arc_width_for):
        rows = peel_distortion(2000, width, 1000, every=250)
        assert len(rows) == 4
        for r in rows:
            assert abs(r["measured"] - r["predicted"]) < 0.06, (width, r)
        assert rows[-1]["measured"] < 0.7  # the ends do shrink: the distortion is real


def test_the_builders_arc_keeps_the_ends_above_three_tenths():
    """The chapter's claim for w(n) = min(0.25, 3/sqrt n): peeling 1800 of 2000 points, the gaps at the
    ends never fall below 0.3 of those in the middle (measured minimum 0.33), while a fixed 0.1-rad arc
    ends up below it."""
    from lnbook.constructions import arc_width_for

    assert min(r["measured"] for r in peel_distortion(2000, arc_width_for, 1800, every=300)) > 0.3
    assert peel_distortion(8000, 0.1, 4000, every=2000)[-1]["measured"] < 0.3


def test_a_wide_arc_collapses_past_sturms_limit():
    """w = 0.25 (the old builder's regime): the budget passes Sturm's limit within 300 blocks at n = 2000,
    the model predicts collapse, and the gaps at the ends are indeed 20 times smaller than in the middle."""
    rows = peel_distortion(2000, 0.25, 600, every=300)
    assert rows[0]["predicted"] == 0.0
    assert rows[0]["measured"] < 0.05 and rows[1]["measured"] < 0.01


def test_predicted_end_ratio_without_distortion_and_bad_input():
    assert 0.998 < predicted_end_ratio([0.1, 0.1], [100, 99]) < 1.0  # one block: hardly any distortion
    with pytest.raises(ValueError, match="two histories"):
        predicted_end_ratio([0.1], [100])
    with pytest.raises(ValueError, match="n >= 20"):
        peel_distortion(10, 0.1, 5)


def test_peeled_arc_keeps_its_width_and_collapses_past_sturms_limit():
    """peeled_arc: one point fewer per move, the width kept; on a 0.25-rad arc of 8000 points the end
    gaps collapse to rounding (after about 2600 moves, far past Sturm's limit) with a clear error."""
    theta = peeled_arc(300, 0.25, 40)
    assert len(theta) == 260 and np.all(np.diff(theta) > 0)
    np.testing.assert_allclose([theta[0], theta[-1]], [-0.125, 0.125], atol=1e-12)
    with pytest.raises(ValueError, match="collapsed"):
        peeled_arc(8000, 0.25, 3000)
    with pytest.raises(ValueError, match="0 <= moves"):
        peeled_arc(10, 0.25, 9)
