"""Tests of :mod:`lnbook.capacity.build_exact`.

Checks of lnbook.capacity.build_float64: the width-3 LN-Net that classifies any labelling (chapter 3).

Every net is checked by running the real torch module on the samples in float64.

The theorem of chapter 3 checked by its own construction, in exact arithmetic (lnbook.capacity.build_exact).

Every net here is built by the proof's algorithm with exact (constructible) numbers, then every sample is
run through the net's exact weights, independently of the construction's books, and the claims are
certified by interval arithmetic: correct label, all samples of a label at one point, depth exactly
1 + m' - k.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from lnbook.capacity.build_exact import (
    ExactBlock,
    _generic_direction,
    build_exact_ln_net,
    exact_pole,
    to_float64_net,
    verify_exact_ln_net,
)
from lnbook.capacity.build_float64 import layer_bound
from lnbook.capacity.certified_reals import Real, Undecided
from lnbook.capacity.nets import verify_ln_net
from tests.strategies import regular_polygon


def _theorem_depth(y) -> int:
    """1 + m' - k for distinct samples, computed here from the labels alone (not with layer_bound)."""
    k = len(set(np.asarray(y).tolist()))
    return 1 if k == 1 else 1 + len(y) - k


def _check(net, X, y):
    """The theorem's claims on one labelling; returns the verification report."""
    report = verify_exact_ln_net(net, X, y)
    assert report["errors"] == 0, report
    assert report["coincide"], report
    assert net.depth == _theorem_depth(y) == report["bound"], (net.depth, report)
    sinks = set(net.sinks.values())
    moved = [b.moved for b in net.blocks]
    assert len(set(moved)) == len(moved), "a cluster moved twice"
    assert not sinks & set(moved), "a sink moved"
    assert all(int(y[b.moved]) == int(y[b.onto]) and b.onto in sinks for b in net.blocks), "a move onto a wrong sink"
    if net.n_classes >= 2:
        assert set(moved) | sinks == set(range(len(y))), "a cluster that is not a sink never moved"
    return report


def _pole_residuals(pole_fn):
    """<o, T> - 1 and the cross product of p - o and q - o, simplified, for symbolic circle points p, q, T."""
    a, b, c = sp.symbols("a b c", real=True)
    p, q, t = ((sp.cos(x), sp.sin(x)) for x in (a, b, c))
    o = pole_fn(p, q, t)
    on_tangent = sp.simplify(o[0] * t[0] + o[1] * t[1] - 1)
    collinear = sp.simplify((p[0] - o[0]) * (q[1] - o[1]) - (p[1] - o[1]) * (q[0] - o[0]))
    return on_tangent, collinear


EXACT_SETS = {
    "random": lambda m: np.random.default_rng(m).standard_normal((m, 3)),
    "circle": regular_polygon,
    "collinear": lambda m: np.outer(np.arange(m), [1, -2, 3]).astype(object),  # integers, exactly
    "nearly_coincident": lambda m: np.vstack([np.random.default_rng(m).standard_normal((m - 2, 2)),
                                              [[0.3, 0.3], [0.3 + 1e-9, 0.3]]]),
}


def _tamper(net, index, **changes):
    blocks = list(net.blocks)
    old = blocks[index]
    blocks[index] = ExactBlock(**{**old.__dict__, **changes})
    return type(net)(**{**net.__dict__, "blocks": blocks})


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 14), st.integers(1, 4), st.integers(0, 10_000))
def test_layer_bound_is_the_depth_of_the_exact_construction(m, k, seed):
    """layer_bound(m', k) against an independent count: the number of LN layers of the exact construction
    (one block per move, moves until one cluster per label is left) on random problems with duplicates."""
    from lnbook.capacity.build_exact import build_exact_ln_net

    rng = np.random.default_rng(seed)
    X = rng.integers(0, 4, (m, 2))  # small integers: identical samples happen
    y = rng.integers(0, k, m)
    keep = {}
    for i, row in enumerate(map(tuple, X)):
        keep.setdefault(row, i)
    y = np.array([y[keep[tuple(row)]] for row in X])  # identical samples, identical labels
    if len(keep) < 2:
        return
    net = build_exact_ln_net(X, y)
    assert net.depth == layer_bound(len(keep), len(set(y.tolist())))
    assert net.n_distinct == len(keep)


def test_exact_pole_is_on_the_tangent_and_on_the_line_sympy():
    """Lemma lem-merge (a) for the code's own pole formula, exactly: the pole lies on the tangent at T and
    on the line pq, for all angles. A planted pole on the line but off the tangent fails. The sign of beta (the
    pole beyond p) is not checked here: the builder certifies it at every move, and
    test_near_set_of_every_move_is_the_moved_cluster_alone checks it."""
    assert _pole_residuals(exact_pole) == (0, 0)

    def planted(p, q, t):  # o = p + s (q - p): on the line, but not on the tangent
        s = (1 - (t[0] * p[0] + t[1] * p[1])) / (t[0] * (p[0] - q[0]) + t[1] * (p[1] - q[1]))
        return (p[0] + s * (q[0] - p[0]), p[1] + s * (q[1] - p[1]))

    assert _pole_residuals(planted)[0] != 0


def test_every_binary_labelling_of_eight_points():
    """All 2^8 labellings of 8 random points of R^2: exact depth 1 + m' - k, certified correct."""
    X = np.random.default_rng(1).standard_normal((8, 2))
    for bits in itertools.product((0, 1), repeat=8):
        y = np.array(bits)
        _check(build_exact_ln_net(X, y), X, y)


def test_every_three_label_labelling_of_five_points():
    """All 3^5 labellings of 5 random points of R^3 (k = 1, 2 or 3), including moves from inside the arc."""
    X = np.random.default_rng(2).standard_normal((5, 3))
    inner = 0
    for bits in itertools.product((0, 1, 2), repeat=5):
        y = np.array(bits)
        net = build_exact_ln_net(X, y)
        _check(net, X, y)
        inner += sum(b.end == "inner" for b in net.blocks)
    assert inner > 0, "no labelling needed a move from inside the arc"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXACT_SETS))
def test_every_binary_labelling_m10_all_point_sets(name):
    """All 2^10 labellings of each point set (2 to 5 minutes per set on one shared core)."""
    X = EXACT_SETS[name](10)
    for bits in itertools.product((0, 1), repeat=10):
        y = np.array(bits)
        _check(build_exact_ln_net(X, y), X, y)


@pytest.mark.slow
def test_every_four_label_labelling_of_six_points():
    X = np.random.default_rng(4).standard_normal((6, 2))
    for bits in itertools.product(range(4), repeat=6):
        y = np.array(bits)
        _check(build_exact_ln_net(X, y), X, y)


@pytest.mark.parametrize("m, k, n, seed", [(12, 2, 3, 0), (20, 3, 2, 1), (30, 5, 4, 2), (40, 2, 1, 3)])
def test_random_labellings_larger_m(m, k, n, seed):
    rng = np.random.default_rng(seed)
    X, y = rng.standard_normal((m, n)), rng.integers(0, k, m)
    _check(build_exact_ln_net(X, y), X, y)


@pytest.mark.slow
@pytest.mark.parametrize("m, k", [(60, 2), (60, 4), (100, 3)])
def test_random_labellings_m60_and_m100(m, k):
    rng = np.random.default_rng(m + k)
    X, y = rng.standard_normal((m, 3)), rng.integers(0, k, m)
    _check(build_exact_ln_net(X, y), X, y)


def test_first_layer_uses_the_arc_between_rational_points():
    """The chapter's choices: the first layer puts the two extreme samples exactly at the rational points
    (4/5, -3/5) and (4/5, 3/5) of the circle (an arc of width 2 arctan(3/4) < pi/2), every tangent point is
    a rational point of the circle, and the direction is (1, t, ..., t^(n-1)) for an integer t >= 1."""
    X = np.random.default_rng(7).standard_normal((9, 3))
    y = np.arange(9) % 2
    net = build_exact_ln_net(X, y)
    firsts = [net.first_point(x) for x in X]
    lows = [v for v in firsts if v[1].is_rational and v[1].q == Fraction(-3, 5)]
    highs = [v for v in firsts if v[1].is_rational and v[1].q == Fraction(3, 5)]
    assert len(lows) == len(highs) == 1 and lows[0][0].q == highs[0][0].q == Fraction(4, 5)
    assert 2 * math.atan(3 / 4) < math.pi / 2
    t = net.direction[1]
    assert t.denominator == 1 and t >= 1 and net.direction == (1, t, t * t)
    for b in net.blocks:
        r = b.tangent
        assert isinstance(r, Fraction) and ((1 - r * r) / (1 + r * r)) ** 2 + (2 * r / (1 + r * r)) ** 2 == 1


def test_identical_samples_and_trivial_cases():
    X = np.array([[0, 1], [2, 1], [0, 1], [3, -1], [2, 1]], dtype=object)
    y = np.array([0, 1, 0, 0, 1])
    net = build_exact_ln_net(X, y)
    assert net.n_distinct == 3 and net.depth == 1 + 3 - 2
    assert verify_exact_ln_net(net, X, y)["errors"] == 0
    one = build_exact_ln_net(X, np.zeros(5, dtype=int))
    assert one.depth == 1 and verify_exact_ln_net(one, X, np.zeros(5, dtype=int))["errors"] == 0
    two = build_exact_ln_net(np.array([[0], [1]]), np.array([1, 0]))
    assert two.depth == 1 and verify_exact_ln_net(two, np.array([[0], [1]]), np.array([1, 0]))["errors"] == 0
    with pytest.raises(ValueError, match=r"samples 1 and 3 are identical but have different labels"):
        build_exact_ln_net(np.array([[0, 1], [1, 1], [2, 2], [1, 1]]), np.array([0, 0, 1, 1]))
    with pytest.raises(ValueError, match="at least 2 samples"):
        build_exact_ln_net(np.zeros((1, 2)), np.array([0]))


def test_planted_errors_are_caught():
    """A pole moved off the line pq by 1/1000, a block dropped, or two class points swapped: the
    verification of the same samples reports it."""
    rng = np.random.default_rng(5)
    X, y = rng.standard_normal((10, 2)), rng.integers(0, 2, 10)
    net = build_exact_ln_net(X, y)
    _check(net, X, y)
    o = net.blocks[2].pole
    off_line = _tamper(net, 2, pole=(o[0] + Fraction(1, 1000), o[1]))
    assert not verify_exact_ln_net(off_line, X, y)["coincide"]
    dropped = type(net)(**{**net.__dict__, "blocks": net.blocks[:-1]})
    report = verify_exact_ln_net(dropped, X, y)
    assert report["depth"] < report["bound"] and not report["coincide"]
    swapped = type(net)(**{**net.__dict__, "class_points": {0: net.class_points[1], 1: net.class_points[0]}})
    assert verify_exact_ln_net(swapped, X, y)["errors"] == len(y)


def test_exact_net_runs_as_a_float64_torch_module():
    """The exact net's weights, rounded to float64, give a torch LN-Net of the same depth that classifies
    the same samples (small m: the levers are long enough for float64)."""
    rng = np.random.default_rng(6)
    X, y = rng.standard_normal((12, 3)), rng.integers(0, 3, 12)
    net = build_exact_ln_net(X, y)
    module = to_float64_net(net)
    assert module.n_ln_layers == net.depth == sum(1 for mod in module if type(mod).__name__ == "LayerNorm")
    assert verify_ln_net(module, X, y)["errors"] == 0


def test_verification_runs_the_real_weights_and_layernorm(monkeypatch):
    """verify_exact_ln_net evaluates the real Linear weights and LayerNorm (mean, variance, square root), not the
    construction's circle formula: its weights are to_float64_net's (to 1e-12), the last LN output equals the
    circle formula's sqrt(3) E v, and a block bias of the wrong sign or a variance divided by 2 instead of 3
    (planted in the weights or in LN alone, the circle formula untouched) is reported."""
    from lnbook.capacity import build_exact as be

    real_layer_norm = be._layer_norm

    rng = np.random.default_rng(3)
    X, y = rng.standard_normal((7, 2)), rng.integers(0, 3, 7)
    net = build_exact_ln_net(X, y)
    assert verify_exact_ln_net(net, X, y)["errors"] == 0
    weights, module = net.weights(), to_float64_net(net)
    linears = [mod for mod in module if type(mod).__name__ == "Linear"]
    assert len(linears) == len(weights)
    for (W, b), lin in zip(weights, linears):
        assert np.allclose([[float(v) for v in row] for row in W], lin.weight.detach().numpy(), rtol=0, atol=1e-12)
        assert np.allclose([float(v) for v in b], lin.bias.detach().numpy(), rtol=0, atol=1e-12)
    E, s3 = be._exact_basis(), Real(3).sqrt()
    for x in X[:3]:
        z, _ = net.forward_through_weights(x)
        v = net.forward(x)
        for i in range(3):
            assert abs(float(z[i] - s3 * (E[i][0] * v[0] + E[i][1] * v[1]))) < 1e-12
    circle, weighted = verify_exact_ln_net(net, X, y, through="circle"), verify_exact_ln_net(net, X, y)
    assert circle["errors"] == weighted["errors"] == 0 and circle["coincide"] and weighted["coincide"]
    assert circle["margin"] == pytest.approx(weighted["margin"], rel=0.02)
    with pytest.raises(ValueError, match="through must be"):
        verify_exact_ln_net(net, X, y, through="torch")
    real_weights = be.ExactLNNet.weights
    monkeypatch.setattr(be.ExactLNNet, "weights", lambda self: [
        (W, tuple(-v for v in b)) if 0 < i < len(self.blocks) + 1 else (W, b) for i, (W, b) in enumerate(real_weights(self))])
    report = verify_exact_ln_net(net, X, y)
    assert report["errors"] > 0 or not report["coincide"]
    monkeypatch.setattr(be.ExactLNNet, "weights", real_weights)
    monkeypatch.setattr(be, "_layer_norm", lambda z: tuple(zi * Real(3, 2).sqrt() for zi in real_layer_norm(z)))
    assert not verify_exact_ln_net(net, X, y)["coincide"]


# --- the tangent point in closed form, and the cost of a move (issue 24)


def test_inputs_with_gaps_far_below_the_others_build_and_verify():
    """The tangent point is chosen in closed form (lem-tangent-choice), so no ratio of gaps makes the
    construction give up: a gap of 2^-85 next to gaps of 1/2 (exact rationals), and a float64 input with a
    gap of 1e-300 next to the moved cluster, both build, with depth 1 + m' - k, and verify exactly."""
    X = np.array([[Fraction(-3, 4)], [Fraction(0)], [Fraction(1, 2)], [Fraction(1, 2) + Fraction(1, 2**85)], [Fraction(3, 4)]],
                 dtype=object)
    y = np.array([0, 2, 2, 3, 1])
    X64 = np.array([[-1.0], [-0.5], [0.0], [1e-300], [0.2]])
    for data in (X, X64):
        net = build_exact_ln_net(data, y)
        report = verify_exact_ln_net(net, data, y)
        assert report["errors"] == 0 and report["coincide"] and net.depth == report["bound"] == 2


def test_logits_on_the_circle_agree_with_the_weights_read_out_for_absent_labels():
    """Labels 0 and 2 only (1 does not occur): logits() (unit circle) is a third of the real read-out of weights()
    for every label, the absent one included (score ABSENT_SCORE = -4/3, bias -4), to 2^-60, and the float64 net's
    bias is the same -4."""
    from lnbook.capacity.build_exact import ABSENT_SCORE

    rng = np.random.default_rng(5)
    X, y = rng.standard_normal((6, 2)), np.array([0, 2, 2, 0, 2, 0])
    net = build_exact_ln_net(X, y)
    weights = net.weights()
    for x in X:
        circle, (_, real) = net.logits(x), net.forward_through_weights(x, weights)
        for a, b in zip(circle, real):
            lo, hi = (b / 3 - a).bounds(128)
            assert -Fraction(1, 2**60) < lo <= hi < Fraction(1, 2**60)
        assert float(circle[1]) == float(ABSENT_SCORE) < -1
    assert float(to_float64_net(net)[-1].bias.detach()[1]) == -4.0


def test_inputs_closer_than_the_precision_limit_raise_undecided_saying_why():
    """Signs are decided to MAX_PREC = 16384 bits: X = [0, 2^-e, 1, 2] (exact rationals), y = [0, 1, 0, 1]
    builds and verifies at e = 1500, and at e = 2500 raises Undecided with a message naming the precision limit
    and the input's relative gap (never a net it has not certified); float64 extremes (gap 5e-324, range 2e308) pass."""
    y = np.array([0, 1, 0, 1])
    X = [[Fraction(0)], [Fraction(1, 2**1500)], [Fraction(1)], [Fraction(2)]]
    report = verify_exact_ln_net(build_exact_ln_net(X, y), X, y)
    assert report["errors"] == 0 and report["coincide"]
    X = [[Fraction(0)], [Fraction(1, 2**2500)], [Fraction(1)], [Fraction(2)]]
    with pytest.raises(Undecided, match=r"16384 bits.*relative gap \(first projection\) is 2\^-2501"):
        verify_exact_ln_net(build_exact_ln_net(X, y), X, y)
    X64 = np.array([[0.0], [5e-324], [-1e308], [1e308]])
    report = verify_exact_ln_net(build_exact_ln_net(X64, y), X64, y)
    assert report["errors"] == 0 and report["coincide"]


def _count_exact_operations(monkeypatch):
    """Count the exact numbers created (formula nodes: one per arithmetic operation) and the certified signs, per move."""
    from lnbook.capacity import build_exact, certified_reals

    counts = {"nodes": 0, "signs": 0}
    per_move = []
    init, sign, move = certified_reals.Real.__init__, certified_reals.Real.sign, build_exact._move

    def counted_init(self, *args, **kwargs):
        counts["nodes"] += 1
        init(self, *args, **kwargs)

    def counted_sign(self):
        counts["signs"] += 1
        return sign(self)

    def counted_move(order, *args):
        before = dict(counts)
        out = move(order, *args)
        per_move.append(((counts["nodes"] - before["nodes"]) / len(order), (counts["signs"] - before["signs"]) / len(order)))
        return out

    monkeypatch.setattr(certified_reals.Real, "__init__", counted_init)
    monkeypatch.setattr(certified_reals.Real, "sign", counted_sign)
    monkeypatch.setattr(build_exact, "_move", counted_move)
    return counts, per_move


def test_a_move_costs_order_m_exact_operations(monkeypatch):
    """thm-capacity's cost claim, for what runs: every move creates at most 60 exact numbers (arithmetic
    operations) and decides at most 8 certified signs per cluster left, so a move is O(m) and the construction
    O(m^2) exact operations (checked for m = 10, 20, 40 with three labels: the total grows by at most 4.5x per
    doubling). These count operations on formulas; the time of a certified sign grows with the formula's depth."""
    counts, per_move = _count_exact_operations(monkeypatch)
    totals = []
    for m in (10, 20, 40):
        rng = np.random.default_rng(m)
        X, y = rng.standard_normal((m, 1)), rng.integers(0, 3, m)
        counts.update(nodes=0, signs=0)
        per_move.clear()
        net = build_exact_ln_net(X, y)
        assert len(per_move) == net.depth - 1
        assert max(nodes for nodes, _ in per_move) <= 60 and max(signs for _, signs in per_move) <= 8
        totals.append(counts["nodes"])
    assert totals[1] <= 4.5 * totals[0] and totals[2] <= 4.5 * totals[1]


def _cross(u, v):
    return u[0] * v[1] - u[1] * v[0]


# a close pair in 1-D where the closed-form bound min_c beta_c D/2 (not the room before M) fixes T: with the room
# before M alone (delta = gap) the pole would see a second cluster
CLOSE_PAIR = (np.array([[0.22587], [0.23587], [0.25886], [0.56223], [0.88812], [0.96606]]), np.array([2, 0, 2, 1, 2, 1]))


def _near_set_problem(case):
    if case == "close pair":
        return CLOSE_PAIR
    m, k, seed = case
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, 2)), rng.integers(0, k, m)


@pytest.mark.parametrize("case", [(8, 2, 0), (12, 3, 1), (15, 2, 2), (10, 4, 3), "close pair"])
def test_near_set_of_every_move_is_the_moved_cluster_alone(case, monkeypatch):
    """def-moves: the near set of a move is the set of clusters v with <v, o> > 1 (the points the pole sees),
    and it is {p}. Checked on the clusters' exact points, advanced block by block by the circle formula of
    lem-block-projection from each block's pole and linear map (``_apply``; that this formula is what the real
    weights compute is test_verification_runs_the_real_weights_and_layernorm's check), not from the construction's
    books of which cluster is where. On the close pair the PBA bound min_c beta_c D/2 of the choice of T is the
    binding one at some move (smaller than the room before M), and with that room alone the builder would pick a
    pole that sees a second cluster (it refuses). The earlier wording, "the clusters strictly between p and T",
    names a set that is always empty (T lies strictly between p and its neighbour), so it could never be {p}:
    checked too."""
    from lnbook.capacity import build_exact
    from lnbook.capacity.build_exact import _apply, _exact_row
    from lnbook.capacity.nets import ConstructionError

    X, y = _near_set_problem(case)
    widths = []
    choose = build_exact._choose_delta
    monkeypatch.setattr(build_exact, "_choose_delta", lambda bound, gap: widths.append((bound, gap)) or choose(bound, gap))
    net = build_exact_ln_net(X, y)
    if case == "close pair":
        assert any(bound < gap for bound, gap in widths)  # the beta_c bound decides T at some move
        monkeypatch.setattr(build_exact, "_choose_delta", lambda bound, gap: gap)  # the room before M alone
        with pytest.raises(ConstructionError, match="does not see the moved cluster alone"):
            build_exact_ln_net(X, y)
    points = {}
    for i, row in enumerate(X):  # one exact point per cluster (its smallest index), layer by layer
        points.setdefault(tuple(row), (i, net.first_point(_exact_row(row))))
    current = dict(points.values())
    for block in net.blocks:
        o = block.pole
        near = {c for c, v in current.items() if (v[0] * o[0] + v[1] * o[1] - 1).sign() > 0}
        assert near == {block.moved}
        r = block.tangent
        T = ((1 - r * r) / (1 + r * r), 2 * r / (1 + r * r))
        p = current[block.moved]
        side = (_cross(p, T)).sign()
        between = {c for c, v in current.items() if c != block.moved
                   and (_cross(p, v)).sign() == side and (_cross(v, T)).sign() == side}
        assert between == set()  # the old wording's set: empty, never {p}
        current = {c: _apply(block, v) for c, v in current.items() if c != block.moved}  # p is now on its sink
    assert len(current) == len(set(int(v) for v in y))  # one cluster per label is left


def test_first_layer_search_needs_quadratically_many_tries_on_adversarial_samples():
    """thm-capacity's cost: on a = ceil(m'/2) points (i, 0) and b = floor(m'/2) points (-(1 + a j), 1) the pair
    (i, j) collides exactly at t = 1 + i + a j, so every t <= ab = floor(m'^2/4) fails and the direction (1, t)
    is found at t = floor(m'^2/4) + 1, within the bound C(m', 2)(n - 1) + 1 tries."""
    for m in (2, 5, 6, 7, 10, 21, 40):
        a, b = (m + 1) // 2, m // 2
        rows = [(Fraction(i), Fraction(0)) for i in range(a)] + [(Fraction(-(1 + a * j)), Fraction(1)) for j in range(b)]
        found = _generic_direction(rows)
        assert found == (1, m * m // 4 + 1) and m * m // 4 + 1 <= math.comb(m, 2) * 1 + 1
    rng = np.random.default_rng(0)  # random samples: the first try works
    rows = [tuple(Fraction(int(v)) for v in r) for r in rng.integers(-10**6, 10**6, size=(50, 3))]
    assert _generic_direction(rows) == (1, 1, 1)
