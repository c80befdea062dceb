"""Chapter 7: hidden vectors against the uniform vector (lnbook.folding.uniform_angles).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import sympy as sp
import torch
from torch import nn
from hypothesis import given, settings
from hypothesis import strategies as st

from lnbook.core.symbolic import symbolic_centering_matrix, symbols_vector
from lnbook.folding.uniform_angles import (
    angle_profile,
    angle_to_uniform,
    capture_norm_inputs,
    cosine_to_uniform,
    family_p_values,
    ln_rms_angle,
    mean_share,
    null_profile,
    orthogonality_verdict,
    random_mean_abs_cosine,
    stands_out,
    UniformNull,
    uniform_null,
    group_by_source,
    zero_average_rejected,
)
from lnbook.ml.models import TinyTransformer


def test_centring_removes_the_cos_squared_share_sympy():
    """|P x|^2 = |x|^2 (1 - cos^2 theta) and x^T P x = |P x|^2, so the angle between x and P x
    has cosine |P x| / |x| = sin theta: LN(x) and RMS(x) are |90 - theta| degrees apart."""
    d = 3
    x = symbols_vector(d)
    P = symbolic_centering_matrix(d)
    norm2 = (x.T * x)[0, 0]
    cos2 = sum(x) ** 2 / (d * norm2)
    assert sp.simplify((P * x).T * (P * x) - sp.Matrix([norm2 * (1 - cos2)])) == sp.zeros(1, 1)
    assert sp.simplify(x.T * P * x - (P * x).T * (P * x)) == sp.zeros(1, 1)


@settings(max_examples=60, deadline=None)
@given(d=st.integers(2, 64), seed=st.integers(0, 2**31 - 1), shift=st.floats(-3, 3),
       eps=st.sampled_from([0.0, 1e-5, 0.5, 10.0]))
def test_ln_and_rms_are_ninety_minus_theta_apart(d, seed, shift, eps):
    """prop-ch7-angle: the angle is |90 - theta| for every eps >= 0 (referee 13 of chapter 7, finding 3)."""
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(5, d, generator=g, dtype=torch.float64) + shift  # shift moves theta away from 90
    expected = (90 - angle_to_uniform(h)).abs()
    assert torch.allclose(ln_rms_angle(h, eps), expected, atol=1e-5)
    assert torch.allclose(mean_share(h), torch.cos(torch.deg2rad(angle_to_uniform(h))) ** 2, atol=1e-12)
    if eps == 0.0:  # the distance (referee 18 of chapter 7, finding 5): |LN(h) - RMS(h)| = 2 sqrt(d) sin(|90 - theta| / 2)
        ln = (h - h.mean(-1, keepdim=True)) / (h - h.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True).sqrt()
        rms = h / h.pow(2).mean(-1, keepdim=True).sqrt()
        distance = 2 * math.sqrt(d) * torch.sin(torch.deg2rad(expected) / 2)
        assert torch.allclose((ln - rms).norm(dim=-1), distance, atol=1e-9 * math.sqrt(d))


def test_random_baseline_is_exact():
    assert random_mean_abs_cosine(2) == pytest.approx(2 / math.pi, abs=1e-14)
    assert random_mean_abs_cosine(3) == pytest.approx(0.5, abs=1e-14)
    assert random_mean_abs_cosine(10_000) == pytest.approx(math.sqrt(2 / (math.pi * 10_000)), rel=1e-3)
    g = torch.Generator().manual_seed(0)
    for d in (8, 100):
        cos = cosine_to_uniform(torch.randn(200_000, d, generator=g, dtype=torch.float64))
        se = float(cos.abs().std()) / math.sqrt(len(cos))
        assert abs(float(cos.abs().mean()) - random_mean_abs_cosine(d)) < 4 * se
        assert float((cos**2).mean()) == pytest.approx(1 / d, rel=0.02)  # E cos^2 = 1/d


def test_angle_profile_on_known_vectors():
    d = 16
    ortho = torch.randn(50, d, dtype=torch.float64)
    ortho = ortho - ortho.mean(-1, keepdim=True)
    ones = torch.ones(3, d) * torch.tensor([[1.0], [2.0], [5.0]])
    rows = angle_profile({"ortho": ortho, "ones": ones, "minus": -ones})
    assert rows[0].mean_angle == pytest.approx(90, abs=1e-9) and rows[0].mean_share < 1e-28
    assert rows[1].mean_angle == pytest.approx(0, abs=1e-5) and rows[1].mean_share == pytest.approx(1)
    assert rows[0].mean_deviation == pytest.approx(0, abs=1e-9) and rows[1].mean_deviation == pytest.approx(90, abs=1e-5)
    assert rows[2].mean_angle == pytest.approx(180, abs=1e-5)
    assert rows[0].random_abs_cos == random_mean_abs_cosine(d) and rows[0].n_vectors == 50


def test_the_signed_mean_cosine_is_the_average_component_not_the_mean_angle():
    """Referee 36 of chapter 7, finding 3: 'on average no component along 1' is a mean cosine of 0, which is not a
    mean angle of 90 degrees. Unit vectors with cosines (0.9, -0.45, -0.45) to 1 have mean cosine 0 (0 degrees from
    90) and mean angle 86.4 degrees; with cosines (0.1, 0.1, 0.1) both read 5.7 degrees."""
    d = 8
    u = torch.ones(d, dtype=torch.float64) / math.sqrt(d)
    e = torch.zeros(d, dtype=torch.float64)
    e[0], e[1] = 1 / math.sqrt(2), -1 / math.sqrt(2)  # a unit vector orthogonal to 1

    def states(cosines):
        return torch.stack([c * u + math.sqrt(1 - c * c) * e for c in cosines])

    row = angle_profile({"x": states([0.9, -0.45, -0.45])})[0]
    assert row.mean_cos == pytest.approx(0.0, abs=1e-15) and row.mean_cos_degrees == pytest.approx(0.0, abs=1e-12)
    assert 90 - row.mean_angle == pytest.approx(3.6, abs=0.05)
    even = angle_profile({"x": states([0.1] * 3)})[0]
    assert even.mean_cos == pytest.approx(0.1, abs=1e-15)
    assert even.mean_cos_degrees == pytest.approx(90 - even.mean_angle, abs=1e-12) == pytest.approx(5.74, abs=0.01)


def _unit_states_with_cosines(cosines, d=8):
    """Unit vectors whose cosines with 1 are the given ones (the rest along a fixed direction orthogonal to 1)."""
    u = torch.ones(d, dtype=torch.float64) / math.sqrt(d)
    e = torch.zeros(d, dtype=torch.float64)
    e[0], e[1] = 1 / math.sqrt(2), -1 / math.sqrt(2)
    c = torch.as_tensor(cosines, dtype=torch.float64).reshape(-1, 1)
    return c * u + torch.sqrt(1 - c * c) * e


def test_the_spread_of_the_signed_mean_is_over_texts_not_tokens():
    """Read 39 of chapter 7, finding 2: whether a layer's average component along 1 is zero is a question about the
    spread over texts (the tokens of one text are not independent draws). With one token per text the clustered
    standard error is the ordinary one and the p-value scipy's one-sample t-test; repeating every token of every text
    five times (no new information) leaves the mean, the standard error and the p-value as they were, where a
    standard error over tokens would shrink by sqrt(5)."""
    from scipy.stats import ttest_1samp

    g = torch.Generator().manual_seed(0)
    cosines = (0.05 + 0.1 * torch.randn(12, generator=g, dtype=torch.float64)).clamp(-0.9, 0.9)
    one_each = angle_profile({"x": [_unit_states_with_cosines([c]) for c in cosines]})[0]
    reference = ttest_1samp(cosines.numpy(), 0.0)
    assert one_each.n_texts == 12 and one_each.mean_cos == pytest.approx(float(cosines.mean()), abs=1e-15)
    assert one_each.mean_cos_se == pytest.approx(float(cosines.std()) / math.sqrt(12), rel=1e-12)
    assert one_each.mean_cos_t == pytest.approx(reference.statistic, rel=1e-12)
    assert one_each.mean_cos_p == pytest.approx(reference.pvalue, rel=1e-9)
    assert (one_each.texts_positive, one_each.texts_negative) == (int((cosines > 0).sum()), int((cosines < 0).sum()))
    repeated = angle_profile({"x": [_unit_states_with_cosines([c] * 5) for c in cosines]})[0]
    assert repeated.n_vectors == 60 and repeated.mean_cos == pytest.approx(one_each.mean_cos, abs=1e-15)
    assert repeated.mean_cos_se == pytest.approx(one_each.mean_cos_se, rel=1e-12)
    assert repeated.mean_cos_p == pytest.approx(one_each.mean_cos_p, rel=1e-9)
    # the sign test counts texts (12 signs), not tokens (60; referee 41 of chapter 7, finding 1)
    assert (repeated.texts_positive, repeated.texts_negative) == (one_each.texts_positive, one_each.texts_negative)
    assert repeated.sign_p == one_each.sign_p
    # texts of unequal lengths: the pooled mean weighs tokens, and the standard error is that of this ratio of sums
    lengths = [1, 3, 2, 7, 1, 4, 2, 2, 5, 1, 3, 6]
    uneven = [_unit_states_with_cosines([c] * k) for c, k in zip(cosines, lengths)]
    row = angle_profile({"x": uneven})[0]
    sums = torch.tensor([float(c) * k for c, k in zip(cosines, lengths)], dtype=torch.float64)
    n = torch.tensor(lengths, dtype=torch.float64)
    m = float(sums.sum() / n.sum())
    assert row.mean_cos == pytest.approx(m, abs=1e-15)
    expected_se = math.sqrt(12 / 11 * float(((sums - m * n) ** 2).sum())) / float(n.sum())
    assert row.mean_cos_se == pytest.approx(expected_se, rel=1e-12)


def test_zero_average_rejected_finds_a_planted_component_and_keeps_a_balanced_one():
    """Texts whose states all lean towards +1 by a little: every layer rejects 'no average component'. Texts leaning
    +c and -c in equal numbers (a zero average over texts, though every state has a component): no layer does, with
    either test. The test is calibrated: over 400 layers of isotropic states (16 texts of 1-30 tokens, d = 8) the
    clustered t rejects at level 5% in a share of the layers consistent with 5% (between 2% and 9%)."""
    g = torch.Generator().manual_seed(1)

    def text(lean, k):
        x = torch.randn(k, 16, generator=g, dtype=torch.float64)
        return x - x.mean(-1, keepdim=True) + lean

    leaning = {f"l{i}": [text(0.3, 10) for _ in range(16)] for i in range(5)}
    balanced = {f"b{i}": [text(0.3 * (-1) ** j, 10) for j in range(16)] for i in range(5)}
    for test in ("t", "sign"):
        assert zero_average_rejected(angle_profile(leaning), test=test) == [True] * 5
        assert zero_average_rejected(angle_profile(balanced), test=test) == [False] * 5
    rows = angle_profile({f"n{i}": [torch.randn(int(torch.randint(1, 31, (1,), generator=g)), 8, generator=g,
                                                dtype=torch.float64) for _ in range(16)] for i in range(400)})
    share = sum(r.mean_cos_p <= 0.05 for r in rows) / len(rows)
    assert 0.02 <= share <= 0.09


def test_texts_of_one_source_form_one_cluster():
    """Referee 40 of chapter 7, finding 2: paragraphs of one module are not independent draws, so the spread is taken
    over modules. Merging by source keeps every state (the pooled mean is unchanged) and clusters by source: six texts
    from two sources give the standard error of two clusters, not of six texts."""
    g = torch.Generator().manual_seed(2)
    parts = [torch.randn(int(k), 8, generator=g, dtype=torch.float64) + 0.1 * i for i, k in enumerate([3, 5, 2, 4, 1, 6])]
    sources = ["a", "b", "a", "c", "b", "a"]
    merged = group_by_source(parts, sources)
    assert [x.shape[0] for x in merged] == [3 + 2 + 6, 5 + 1, 4]
    assert torch.equal(merged[0], torch.cat([parts[0], parts[2], parts[5]]))
    by_text, by_source = angle_profile({"x": parts})[0], angle_profile({"x": merged})[0]
    assert by_source.n_texts == 3 and by_source.mean_cos == pytest.approx(by_text.mean_cos, abs=1e-15)
    assert by_source.texts_positive + by_source.texts_negative == 3  # one sign per cluster
    assert by_source.mean_cos_se != pytest.approx(by_text.mean_cos_se, rel=1e-6)
    with pytest.raises(ValueError, match="one source label per text"):
        group_by_source(parts, sources[:-1])


def test_the_spread_over_texts_refuses_what_it_cannot_measure():
    pooled = angle_profile({"x": torch.randn(10, 8)})[0]
    assert pooled.n_texts is None
    for what in ("mean_cos_t", "mean_cos_p", "sign_p"):
        with pytest.raises(ValueError, match="grouped by text"):
            getattr(pooled, what)
    with pytest.raises(ValueError, match="at least 2"):
        angle_profile({"x": [torch.randn(3, 8)]})
    with pytest.raises(ValueError, match="non-empty"):
        angle_profile({"x": [torch.randn(3, 8), torch.randn(0, 8)]})
    with pytest.raises(ValueError, match="share the last dimension"):
        angle_profile({"x": [torch.randn(3, 8), torch.randn(3, 6)]})
    with pytest.raises(ValueError, match="'t'"):
        zero_average_rejected([pooled], test="z")
    with pytest.raises(ValueError, match="grouped by text"):
        zero_average_rejected([pooled])


def test_bad_input():
    with pytest.raises(ValueError, match="zero vector"):
        angle_to_uniform(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="uniform direction"):
        ln_rms_angle(torch.ones(1, 4))
    for c, d in ((0.1, 3), (0.7, 7), (1 / 3, 384)):  # constant vectors whose centring leaves rounding residue: the
        for eps in (0.0, 1e-5):  # angle was NaN (referee 31 of chapter 7, finding 1)
            with pytest.raises(ValueError, match="uniform direction"):
                ln_rms_angle(torch.full((1, d), c, dtype=torch.float64), eps=eps)
    with pytest.raises(TypeError, match="torch.Tensor"):
        cosine_to_uniform([1.0, 2.0])
    with pytest.raises(ValueError, match="no LayerNorm or RMSNorm"):
        with capture_norm_inputs(torch.nn.Linear(3, 3)):
            pass


def test_capture_norm_inputs_sees_the_residual_stream():
    torch.manual_seed(0)
    model = TinyTransformer(20, 16, 2, 2, max_len=8).eval()
    tokens = torch.randint(0, 20, (3, 8))
    with torch.no_grad(), capture_norm_inputs(model) as seen:
        model(tokens)
        stream = model.hidden_states(tokens)
    assert list(seen) == ["blocks.0.norm1", "blocks.0.norm2", "blocks.1.norm1", "blocks.1.norm2", "final_norm"]
    # the first norm of each block reads the residual stream (the second call is hidden_states' own)
    assert torch.equal(seen["blocks.0.norm1"][0], stream[0]) and torch.equal(seen["blocks.1.norm1"][0], stream[1])
    assert torch.equal(seen["final_norm"][0], stream[2])
    assert not model.blocks[0].norm1._forward_pre_hooks  # hooks removed after the block


def _plus_minus_ones_states(d=64, n=634, n_minus=318, seed=0):
    """States +-2*1 plus a vector in 1-perp of squared norm d: 80% of the squared norm lies along 1, and
    two more minus than plus signs make the signed mean angle 90.2 degrees."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, d, generator=g, dtype=torch.float64)
    z = z - z.mean(-1, keepdim=True)
    z = z / z.norm(dim=-1, keepdim=True) * math.sqrt(d)
    signs = torch.ones(n, 1, dtype=torch.float64)
    signs[:n_minus] = -1
    return 2 * signs * torch.ones(d, dtype=torch.float64) + z


def test_the_signed_mean_angle_counterexample_is_flagged():
    """634 states, 316 along +1 and 318 along -1 (the counts the chapter states): mean angle 90.2 degrees;
    with 317 of each the angles pair off around 90 and the mean is 90 up to rounding."""
    h = _plus_minus_ones_states()
    assert int((h.sum(-1) > 0).sum()) == 316 and int((h.sum(-1) < 0).sum()) == 318
    row = angle_profile({"x": h})[0]
    assert row.mean_share == pytest.approx(0.8, abs=1e-12)
    assert row.mean_angle == pytest.approx(90.2, abs=0.01)  # the old "within 3 degrees of 90" check passed
    one_angle = math.degrees(math.acos(math.sqrt(0.8)))  # each state is this far from +1 or from -1
    assert row.mean_angle == pytest.approx((316 * one_angle + 318 * (180 - one_angle)) / 634, abs=1e-9)
    balanced = angle_profile({"x": _plus_minus_ones_states(n_minus=317)})[0]
    assert balanced.mean_share == pytest.approx(0.8, abs=1e-12) and balanced.mean_angle == pytest.approx(90.0, abs=1e-9)
    assert balanced.mean_cos == pytest.approx(0.0, abs=1e-12) and row.mean_cos == pytest.approx(-2 * math.sqrt(0.8) / 634, abs=1e-12)
    null = uniform_null(h, n_directions=400, seed=1)
    assert null.uniform_abs_cos == pytest.approx(math.sqrt(0.8), abs=1e-12)
    assert null.percentile == 100.0 and null.uniform_abs_cos > 2 * null.null[-1]
    lean, avoid, words = orthogonality_verdict([null])
    assert (lean, avoid) == (100.0, 0.0) and words == "leans towards 1 in 1 of 1 layers"


def test_states_orthogonal_to_one_are_below_every_random_direction():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(300, 32, generator=g, dtype=torch.float64)
    rows = null_profile({"centred": h - h.mean(-1, keepdim=True), "shifted": h + 0.5}, n_directions=300)
    assert rows[0].uniform_abs_cos < 1e-12 and rows[0].percentile == 0.0
    assert rows[1].percentile == 100.0  # a common shift of 0.5 per feature: 1 is where the states lean
    assert orthogonality_verdict(rows[:1]) == (0.0, 100.0, "nearly orthogonal; more orthogonal than chance in 1 of 1 layers")
    assert orthogonality_verdict(rows) == (50.0, 50.0, "leans towards 1 in 1 of 2 layers")


def test_the_null_of_isotropic_states_is_the_random_baseline():
    """For Gaussian states every direction is alike: the null's mean |cos| sits at E|cos| of the sphere
    (within 3 standard errors of a mean over 4000 states), and so does the uniform direction's."""
    g = torch.Generator().manual_seed(3)
    d, n = 48, 4000
    row = uniform_null(torch.randn(n, d, generator=g, dtype=torch.float64), n_directions=200, max_vectors=n, seed=2)
    se = math.sqrt(1 / d - random_mean_abs_cosine(d) ** 2) / math.sqrt(n)
    assert abs(row.null_quantile(0.5) - random_mean_abs_cosine(d)) < 3 * se
    assert abs(row.uniform_abs_cos - random_mean_abs_cosine(d)) < 4 * se
    assert row.n_vectors == n and len(row.null) == 200 and list(row.null) == sorted(row.null)


def test_uniform_null_is_seeded_and_checks_its_input():
    h = _plus_minus_ones_states(n=50, n_minus=25)
    assert uniform_null(h, seed=4) == uniform_null(h, seed=4)
    assert uniform_null(h, max_vectors=10).n_vectors == 10
    with pytest.raises(ValueError, match="zero vector"):
        uniform_null(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="n_directions"):
        uniform_null(h, n_directions=3)
    with pytest.raises(ValueError, match="non-empty dict"):
        null_profile([h])


def _typical_one_states(seed, n_layers=61, n=40, d=24, shift=3.0, shared=False, plant=None):
    """Gaussian states plus a random mean direction (per layer, or one for all layers): 1 is a typical
    direction by construction. ``plant``: one layer that also gets a shift along 1 of the same size."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(d, generator=g, dtype=torch.float64)
    states = {}
    for layer in range(n_layers):
        if not shared:
            v = torch.randn(d, generator=g, dtype=torch.float64)
        h = torch.randn(n, d, generator=g, dtype=torch.float64) + shift * v / v.norm()
        if layer == plant:
            h = h + shift * torch.ones(d, dtype=torch.float64) / math.sqrt(d)
        states[str(layer)] = h
    return null_profile(states, n_directions=99, seed=seed)


def _with_direction_as_one(rows, j):
    """The same rows with random direction ``j`` in the role of 1 and 1 in the slot of direction ``j``."""
    out = []
    for r in rows:
        values = list(r.by_direction)
        values[j], ones = r.uniform_abs_cos, values[j]
        out.append(dataclasses.replace(r, uniform_abs_cos=ones, by_direction=tuple(values)))
    return out


@pytest.mark.parametrize("case", ["typical-independent", "typical-shared", "planted-lean", "few-layers"])
def test_at_most_five_percent_of_the_directions_stand_out_on_any_states(case):
    """prop-ch7-family-level, checked exactly, with no sampling: on one fixed set of states, let each of the
    K + 1 = 100 directions (1 and the 99 random ones) play the role of 1 in turn. The max-T p-value treats the
    directions symmetrically, so the directions that would "stand out" at 5% are the ones whose T is among the
    5 largest: exactly 5 of 100 when the T values are distinct, whatever the states (1 typical or not). Under
    exchangeability 1 is each of these 100 with the same chance, so P(verdict "leans") = 5/100 exactly. An
    off-by-one in the p-value (strict > instead of >=, dividing by K instead of K + 1) makes it 6."""
    rows = {"typical-independent": lambda: _typical_one_states(3),
            "typical-shared": lambda: _typical_one_states(4, shared=True),
            "planted-lean": lambda: _typical_one_states(7, plant=30),
            "few-layers": lambda: _typical_one_states(5, n_layers=3)}[case]()
    k = len(rows[0].by_direction)
    assert k + 1 == 100
    standing = [orthogonality_verdict(rows)[0] > 0]
    standing += [orthogonality_verdict(_with_direction_as_one(rows, j))[0] > 0 for j in range(k)]
    assert sum(standing) == 5, sum(standing)
    assert standing[0] == (case == "planted-lean")  # the planted lean is among the five; a typical 1 is not here
    # the "avoid" side is the same max-T test on the other tail: exactly 5 of 100 directions avoid beyond chance
    avoiding = [orthogonality_verdict(rows)[1] > 0]
    avoiding += [orthogonality_verdict(_with_direction_as_one(rows, j))[1] > 0 for j in range(k)]
    assert sum(avoiding) == 5, sum(avoiding)


def _stands_out_share(d: int, seeds, trials_per_seed: int, *, n: int = 40, k: int = 19, state_seed: int = 0) -> float:
    """The share of simulated one-layer models (n isotropic Gaussian states in R^d, rotation invariant) in which 1
    stands out at 5% (family-wise p-value <= 0.05) against k random directions, each direction seed in ``seeds``
    used for ``trials_per_seed`` fresh draws of the states."""
    g = torch.Generator().manual_seed(state_seed)
    hits = total = 0
    for seed in seeds:
        for _ in range(trials_per_seed):
            states = {"l0": torch.randn(n, d, generator=g, dtype=torch.float64)}
            lean, _ = family_p_values(null_profile(states, n_directions=k, seed=seed))
            hits += min(lean) <= 0.05
            total += 1
    return hits / total


def test_the_level_holds_over_the_draw_of_the_directions_not_for_each_seed():
    """prop-ch7-family-level as restated after referee 20 of chapter 7 (finding 1): the probability is over the
    states and the draw of the K directions. With K + 1 = 20 directions, 1 stands out iff its statistic is the
    largest, which under rotation-invariant states and uniformly drawn directions has probability exactly 1/20.
    Averaged over direction seeds (3000 models at d = 2, each with its own seed), the share is within 4 binomial
    standard errors of 5% (sqrt(0.05 * 0.95 / 3000) = 0.004, so within 0.016). As documentation of why the seed is
    part of the probability: with the directions fixed by one seed (seed 2) at d = 2, the share over 1000 models
    exceeds 5% by more than 4 standard errors (0.05 + 4 * 0.0069 = 0.078; the referee measured 0.12): there the
    rank of 1 depends on the Gram matrix of the fixed directions, and 1 is not exchangeable with them."""
    averaged = _stands_out_share(2, range(3000), 1)
    assert abs(averaged - 0.05) <= 4 * math.sqrt(0.05 * 0.95 / 3000), averaged
    fixed = _stands_out_share(2, [2], 1000, state_seed=1)
    assert fixed > 0.05 + 4 * math.sqrt(0.05 * 0.95 / 1000), fixed


def test_the_verdict_holds_its_family_wise_level_where_one_is_typical():
    """def-ch7-uniform-null: over 80 simulated 61-layer models in which 1 is typical (independent and
    shared mean directions), the verdict says "leans" in at most 8 of them (the level is exactly 5%, and
    P(Binomial(80, 0.05) > 8) = 0.018; the seeds are fixed), while "1 above the 95th percentile in some
    layer" says so in at least half of them. The level itself is checked exactly by
    test_at_most_five_percent_of_the_directions_stand_out_on_any_states, and with a binomial bound over
    2000 models by the slow test_the_verdict_level_is_five_percent_over_2000_models."""
    verdicts, per_layer = [], []
    for seed in range(80):
        rows = _typical_one_states(seed, shared=seed % 2 == 1)
        verdicts.append(orthogonality_verdict(rows)[0] > 0)
        per_layer.append(any(stands_out(r) for r in rows))
    assert sum(verdicts) <= 8, sum(verdicts)
    assert sum(per_layer) >= 40, sum(per_layer)  # the uncorrected per-layer rule fails this test


@pytest.mark.slow
def test_the_verdict_level_is_five_percent_over_2000_models():
    """2000 simulated 61-layer models in which 1 is typical (about 70 s): the count of "leans" verdicts is at
    most 131, the largest count with P(Binomial(2000, 0.05) > 131) < 0.001; an implementation at level 8%
    would exceed it with probability 0.99 (P(Binomial(2000, 0.08) > 131) = 0.992)."""
    leans = sum(orthogonality_verdict(_typical_one_states(seed, shared=seed % 2 == 1))[0] > 0 for seed in range(2000))
    assert leans <= 131, leans
    assert binomial_sf(131, 2000, 0.05) < 1e-3 and binomial_sf(131, 2000, 0.08) > 0.99


def binomial_sf(c: int, n: int, p: float) -> float:
    """P(Binomial(n, p) > c), exactly in rationals, then as a float."""
    q = sp.Rational(str(p))
    return float(1 - sum(sp.binomial(n, i) * q**i * (1 - q) ** (n - i) for i in range(c + 1)))


def test_binomial_sf_matches_known_values():
    assert binomial_sf(0, 1, 0.5) == 0.5 and binomial_sf(1, 2, 0.5) == 0.25
    assert abs(binomial_sf(8, 80, 0.05) - 0.0184) < 5e-4  # the bound quoted by the 80-model test


def test_the_verdict_detects_a_planted_lean_in_one_of_61_layers():
    rows = _typical_one_states(7, plant=30)
    lean, avoid = family_p_values(rows)
    assert lean[30] <= 0.05 and all(p > 0.05 for i, p in enumerate(lean) if i != 30)
    assert orthogonality_verdict(rows)[2] == "leans towards 1 in 1 of 61 layers"
    assert min(avoid) >= 1 / 100  # a p-value of a 99-direction null is at least 1/(K+1)


def test_each_layer_is_standardised_before_the_layers_are_compared():
    """def-ch7-uniform-null standardises each layer's K+1 values (mean and standard deviation) before the max over
    layers: a layer whose directions spread little, where 1 stands 5 standard deviations out, is found beside a
    layer whose directions spread 100 times more; centring alone would let the wide layer's spread hide it
    (referee 27 of chapter 7, finding 2: without the division by the spread every other test passed)."""
    g = torch.Generator().manual_seed(0)
    k = 99

    def row(name, centre, spread, uniform):
        values = centre + spread * torch.randn(k, generator=g, dtype=torch.float64)
        values = (values - values.mean()) / values.std() * spread + centre  # exactly this mean and spread
        return UniformNull(layer=name, n_vectors=100, uniform_abs_cos=uniform, null=tuple(sorted(values.tolist())),
                           percentile=float((values <= uniform).double().mean() * 100),
                           by_direction=tuple(values.tolist()), seed=0, dim=16)

    rows = [row("narrow", 0.1, 1e-3, 0.1 + 5e-3), row("wide", 0.5, 0.1, 0.5)]
    lean, _ = family_p_values(rows)
    assert lean[0] <= 0.02 and lean[1] > 0.3
    assert orthogonality_verdict(rows)[2] == "leans towards 1 in 1 of 2 layers"


def test_family_p_values_need_one_null_profile():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(50, 8, generator=g, dtype=torch.float64)
    a, b = uniform_null(h, n_directions=50, seed=1), uniform_null(h, n_directions=50, seed=2)
    with pytest.raises(ValueError, match="same random directions"):
        family_p_values([a, b])
    with pytest.raises(ValueError, match="alpha"):
        orthogonality_verdict([a], alpha=1.5)
    # referee 17 of chapter 7, finding 7: layers of two widths (per-head q/k norms beside the stream's) from one
    # null_profile call were refused with advice to use one null_profile call; the message now names the widths
    rows = null_profile({"stream": torch.randn(40, 32, generator=g), "q_norm": torch.randn(160, 8, generator=g)},
                        n_directions=50)
    with pytest.raises(ValueError, match=r"widths \[8, 32\].*h.shape\[-1\] == 32"):
        family_p_values(rows)


@pytest.mark.parametrize("eps", [1e-5, 0.5, 10.0])
def test_at_positive_eps_the_two_norms_differ_exactly_when_the_mean_is_not_zero(eps):
    """prop-ch7-angle's remark on eps > 0 (referee 15 of chapter 7, finding 2): |LN_eps(h)|^2 = t/(t/d + eps) at
    t = |Ph|^2 and |RMS_eps(h)|^2 is the same increasing map at t = |h|^2, so both are below sqrt(d), and they are
    equal exactly when mu(h) = 0 (theta = 90 degrees, where the two outputs coincide)."""
    from lnbook.core.norms import layer_norm, rms_norm

    d = 6
    g = torch.Generator().manual_seed(0)
    h = torch.randn(200, d, generator=g, dtype=torch.float64) + torch.linspace(-2, 2, 200, dtype=torch.float64)[:, None]
    ln, rms = layer_norm(h, eps=eps).norm(dim=-1), rms_norm(h, eps=eps).norm(dim=-1)
    assert bool((ln < d ** 0.5).all() and (rms < d ** 0.5).all())
    t_ln, t_rms = (h - h.mean(-1, keepdim=True)).pow(2).sum(-1), h.pow(2).sum(-1)
    assert torch.allclose(ln ** 2, t_ln / (t_ln / d + eps), rtol=1e-12) and torch.allclose(rms ** 2, t_rms / (t_rms / d + eps), rtol=1e-12)
    assert bool((rms > ln).all())  # mu(h) != 0 for every row here: |h| > |Ph|, so the norms differ
    centred = h - h.mean(-1, keepdim=True)  # mu = 0: equal norms, the same output
    assert torch.allclose(layer_norm(centred, eps=eps), rms_norm(centred, eps=eps), rtol=0, atol=1e-12)


def test_a_verdict_that_too_few_directions_cannot_reach_is_refused():
    """Referee 17 of chapter 7, finding 2: every family-wise p-value is at least 1/(K + 1), so with K = 18 random
    directions no layer can stand out at 5% and the verdict read "nearly orthogonal" even for states shifted far along
    1 (every percentile 100). Such a K is refused with the number needed; K = 19 reaches the level and says "leans"."""
    from lnbook.folding.uniform_angles import null_profile, orthogonality_verdict

    g = torch.Generator().manual_seed(0)
    states = {f"l{i}": torch.randn(300, 64, generator=g, dtype=torch.float64) + 5.0 for i in range(3)}
    with pytest.raises(ValueError, match="cannot reach the level alpha = 0.05.*at least 19 directions"):
        orthogonality_verdict(null_profile(states, n_directions=18, seed=0))
    lean, _, words = orthogonality_verdict(null_profile(states, n_directions=19, seed=0))
    assert lean == 100.0 and words.startswith("leans towards 1 in 3 of 3")


def test_capture_puts_the_normalised_axis_last_and_refuses_a_norm_over_several_axes():
    """Referee 17 of chapter 7, finding 3: a channels-first LayerNorm (transformers' ConvNextLayerNorm) was captured
    as it is, and the angles measured along the image width (mean share along 1: 0.075 where the channel vectors
    the norm centres have 0.96). The channel axis is now moved last; a LayerNorm over two axes is refused."""
    tf = pytest.importorskip("transformers")
    from lnbook.folding.uniform_angles import angle_profile, capture_norm_inputs

    ConvNextLayerNorm = tf.models.convnext.modeling_convnext.ConvNextLayerNorm
    torch.manual_seed(0)
    conv, norm = nn.Conv2d(3, 32, 1), ConvNextLayerNorm(32, data_format="channels_first")
    with torch.no_grad():
        conv.bias.zero_()
        conv.weight.fill_(1.0).add_(0.05 * torch.randn_like(conv.weight))  # every channel vector nearly along 1
    model = nn.Sequential(conv, norm).eval()
    with torch.no_grad(), capture_norm_inputs(model) as seen:
        model(torch.randn(8, 3, 16, 16))
    h = seen["1"][0]
    assert h.shape == (8, 16, 16, 32)
    assert angle_profile([h])[0].mean_share > 0.9
    keyword = nn.LayerNorm(4)  # a norm called by keyword (referee 17: IndexError before)
    with torch.no_grad(), capture_norm_inputs(nn.Sequential(keyword)) as seen:
        keyword(input=torch.ones(2, 4) * torch.arange(4.0))
    assert seen["0"][0].shape == (2, 4)
    with pytest.raises(ValueError, match="normalises over 2 axes"):
        with capture_norm_inputs(nn.Sequential(nn.Linear(4, 4), nn.LayerNorm((3, 4)))):
            pass
