"""lnbook.ln_activation.phases: the phase-transition rule on curves whose steps are known.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lnbook.ln_activation.phases import loss_envelope, phase_transitions


def stepped_curve(steps, sizes, n_epochs=3000, every=10, width=8.0, base=-0.3, drift=0.0, seed=0, spikes=0):
    """log10 loss = base - drift*t - sum of logistic steps (centre, size in decades), times noise and spikes."""
    t = np.arange(every, n_epochs + 1, every, dtype=float)
    y = base - drift * t
    for centre, size in zip(steps, sizes):
        y = y - size / (1 + np.exp(-(t - centre) / width))
    rng = np.random.default_rng(seed)
    y = y + 0.01 * rng.standard_normal(len(t))
    if spikes:  # upward spikes (an optimiser overshooting) on random samples
        idx = rng.choice(len(t), size=spikes, replace=False)
        y[idx] += rng.uniform(0.2, 0.8, size=spikes)
    return t, 10**y


def test_two_known_steps_are_found_where_they_are():
    t, loss = stepped_curve([800, 2100], [1.0, 0.6])
    found = phase_transitions(t, loss, window=50)
    assert [round(f.epoch, -1) for f in found] == pytest.approx([800, 2100], abs=30)
    assert [f.drop_decades for f in found] == pytest.approx([1.0, 0.6], abs=0.08)
    assert found[0].factor == pytest.approx(10.0, rel=0.25)
    assert all(f.start_epoch <= f.epoch <= f.end_epoch for f in found)


def test_upward_spikes_neither_create_nor_hide_a_step():
    t, loss = stepped_curve([1500], [0.8], spikes=25, seed=3)
    found = phase_transitions(t, loss, window=50)
    assert len(found) == 1 and abs(found[0].epoch - 1500) <= 30


def test_smooth_decay_has_no_transition():
    t = np.arange(10, 3001, 10, dtype=float)
    assert phase_transitions(t, np.exp(-t / 400), window=50) == []  # slow: never steep
    assert phase_transitions(t, 1 / (1 + t / 20), window=50) == []  # power law: steep only at the start
    # fast from the first epoch: steep, but there is no plateau before it (the initial fall)
    assert phase_transitions(t, np.exp(-t / 40) + 1e-6, window=50) == []


def test_a_step_on_a_falling_slope_is_not_after_a_plateau():
    # the same step, once after a flat stretch and once on a slope falling 0.4 decades per window
    flat = phase_transitions(*stepped_curve([1200], [1.0]), window=50)
    sloped = phase_transitions(*stepped_curve([1200], [1.0], drift=0.4 / 50), window=50)
    assert len(flat) == 1 and sloped == []


@pytest.mark.parametrize("seed", range(5))
def test_only_the_plateau_clause_rejects_a_step_on_a_gentle_slope(seed):
    """def-ch6-phase-transition's plateau clause, alone: on a descent of 0.2 decades per window (never steep by
    itself, 0.2 < delta = 0.3) the run of the step starts after p epochs and is extended as usual, but the envelope
    fell by about 0.2 > delta/2 = 0.15 decades in the p epochs before it, so the step is not a transition; on 0.1
    decades per window (a fall of about 0.1 <= 0.15) the same step is one. With plateau_drop raised to 0.25 the
    0.2 curve's step is found, so no other clause rejects it."""
    gentle = stepped_curve([1500], [1.0], drift=0.1 / 50, seed=seed)
    found = phase_transitions(*gentle, window=50)
    assert len(found) == 1 and abs(found[0].epoch - 1500) <= 30
    slope = stepped_curve([1500], [1.0], drift=0.2 / 50, seed=seed)
    assert phase_transitions(*slope, window=50) == []
    found = phase_transitions(*slope, window=50, plateau_drop=0.25)
    assert len(found) == 1 and abs(found[0].epoch - 1500) <= 30


@settings(max_examples=40, deadline=None)
@given(
    centre=st.integers(400, 2600),
    size=st.floats(0.5, 2.0),
    seed=st.integers(0, 10_000),
)
def test_one_random_step_is_found_once(centre, size, seed):
    t, loss = stepped_curve([centre], [size], seed=seed)
    found = phase_transitions(t, loss, window=50)
    assert len(found) == 1
    assert abs(found[0].epoch - centre) <= 30
    assert abs(found[0].drop_decades - size) <= 0.1


def test_envelope_is_the_running_minimum_of_log10():
    env = loss_envelope([1.0, 0.1, 0.5, 0.01, 0.02])
    np.testing.assert_allclose(env, [0, -1, -1, -2, -2])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(1e-3, 10.0), min_size=2, max_size=30), st.integers(1, 8))
def test_envelope_equals_its_formula(loss, k):
    """def-ch6-phase-transition: e_i = min over window starts j <= min(i, n - k) (0-based) of the max of log10 loss
    over samples j .. j + k - 1, written out here as two loops."""
    n = len(loss)
    k = min(k, n)
    logy = np.log10(np.asarray(loss, dtype=float))
    expected = [min(max(logy[j : j + k]) for j in range(min(i, n - k) + 1)) for i in range(n)]
    np.testing.assert_allclose(loss_envelope(loss, persist=k), expected, rtol=0, atol=1e-15)


def test_envelope_reads_ahead_and_is_blind_in_the_final_window():
    """A low that lasts k samples is in the envelope from its first sample (the envelope reads k - 1 samples
    ahead); a drop in the last k - 1 samples of a curve is never detected, one that lasts k samples is."""
    t = np.arange(10, 3001, 10, dtype=float)  # window 50 epochs = k = 5 samples
    n, k = len(t), 5
    y = np.full(n, 0.5)
    y[100:] = 0.05
    env = loss_envelope(y, persist=k)
    assert env[99] == pytest.approx(np.log10(0.5)) and env[100] == pytest.approx(np.log10(0.05))
    for last in range(1, k + 2):
        y = np.full(n, 0.5)
        y[n - last :] = 0.05
        assert bool(phase_transitions(t, y, window=50)) == (last >= k), last


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: phase_transitions([1, 2], [1.0, 0.5], window=1), "at least 3 points"),
        (lambda: phase_transitions([1, 2, 4], [1.0, 0.5, 0.2], window=1), "uniformly spaced"),
        (lambda: phase_transitions([1, 2, 3], [1.0, 0.0, 0.2], window=1), "must be > 0"),
        (lambda: phase_transitions([1, 2, 3], [1.0, float("nan"), 0.2], window=1), "finite"),
        (lambda: phase_transitions([1, 2, 3], [1.0, 0.5], window=1), "equal length"),
        (lambda: phase_transitions([1, 2, 3], [1.0, 0.5, 0.2], window=0), "window must be"),
        (lambda: phase_transitions([1, 2, 3], [1.0, 0.5, 0.2], window=1, min_drop=0), "min_drop"),
        (lambda: phase_transitions([1, 2, 3], [1.0, 0.5, 0.2], window=1, plateau_drop=1.0), "plateau_drop"),
    ],
)
def test_bad_curves_get_clear_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_flat_noisy_curves_rarely_show_a_transition():
    """500 flat curves with 0.2 decades of Gaussian noise on log10 of the loss (a factor 1.6, one standard
    deviation): the persistent envelope flags at most 3% of them (10 at the time of writing); the running
    minimum (persist of one sample), which takes a single downward outlier for a new low, flags over 5%."""
    t = np.arange(10, 3001, 10, dtype=float)
    curves = [10 ** (-0.3 + 0.2 * np.random.default_rng(s).standard_normal(len(t))) for s in range(500)]
    persistent = sum(bool(phase_transitions(t, c, window=50)) for c in curves)
    running_min = sum(bool(phase_transitions(t, c, window=50, persist=10)) for c in curves)
    assert persistent <= 15
    assert running_min >= 25


def test_a_new_low_must_persist():
    t = np.arange(10, 3001, 10, dtype=float)
    y = np.full(len(t), 0.5)
    y[150] = 0.05  # one sample a decade lower: an outlier, not a transition
    assert phase_transitions(t, y, window=50) == []
    assert len(phase_transitions(t, y, window=50, persist=10)) == 1  # the running minimum takes it
    np.testing.assert_allclose(loss_envelope(y, persist=3)[-1], np.log10(0.5))


def test_trains_off_grid_last_log_is_accepted():
    """train() logs the last epoch also off the logging grid: phase_transitions accepts any length."""
    import torch

    from lnbook.ml.training import train

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 2))
    X, y = torch.randn(64, 2), torch.randint(0, 2, (64,))
    h = train(net, X, y, epochs=105, batch_size=None, optimizer="adam", lr=0.01, log_every=10,
              stop_at_fit=False, progress=False, report=False)
    assert h.epochs[-2:] == [100, 105]
    assert isinstance(phase_transitions(h.epochs, h.loss, window=50), list)
    with pytest.raises(ValueError, match="uniformly spaced"):
        phase_transitions([10, 20, 30, 45], [1.0, 0.5, 0.2, 0.1], window=10)  # a longer last step is not train's


def test_overlapping_steep_runs_are_one_transition():
    # two falls of 0.35 decades 80 epochs apart: each steep run passes the (short) plateau test on its own, and the
    # second starts before the first run, extended by the 50-epoch window, ends: one drop, counted once
    i = np.arange(100)
    t = 10.0 * (i + 1)
    loss = 10 ** np.where(i <= 30, 0.0, np.where(i <= 38, -0.35, -0.7))
    found = phase_transitions(t, loss, window=50, plateau=20)
    assert len(found) == 1
    assert abs(found[0].drop_decades - 0.7) < 1e-9
    assert found[0].start_epoch < 320 < 400 <= found[0].end_epoch
    # far enough apart, the two falls are two transitions
    loss2 = 10 ** np.where(i <= 30, 0.0, np.where(i <= 48, -0.35, -0.7))
    assert len(phase_transitions(t, loss2, window=50, plateau=20)) == 2


def test_values_at_starts_reads_the_plateau_before_each_drop():
    from lnbook.ln_activation.phases import values_at_starts

    t, loss = stepped_curve([800, 2100], [1.0, 0.6])
    found = phase_transitions(t, loss, window=50)
    levels = values_at_starts(t, loss, found)
    assert len(levels) == 2
    assert np.allclose(np.log10(levels), [-0.3, -1.3], atol=0.05)  # the plateaus before the two steps
    with pytest.raises(ValueError, match="not logged"):
        values_at_starts(t[::2], loss[::2], [found[0].__class__(5, 5, 15, 0.5)])


def test_a_drop_within_the_first_plateau_is_never_a_transition():
    """def-ch6-phase-transition asks for i0 > p/Delta: a steep run that starts before the first p epochs have been
    recorded has no plateau to compare with and is not a transition, however flat the curve was before it; the same
    step later, or with a shorter plateau, is found."""
    early = stepped_curve([200], [1.0], n_epochs=1500)
    assert phase_transitions(*early, window=50, plateau=300) == []
    found = phase_transitions(*early, window=50, plateau=100)
    assert len(found) == 1 and abs(found[0].epoch - 200) <= 30
    late = stepped_curve([800], [1.0], n_epochs=1500)
    assert len(phase_transitions(*late, window=50, plateau=300)) == 1


def test_a_window_that_is_not_a_whole_number_of_logging_intervals_is_refused():
    """window, plateau and persist are whole multiples of the logging interval, or ValueError: the rule once ran with
    window=3 on a curve logged every 10 epochs as if it were 10 (and window=15 as 20), silently (issue 32, fourth
    read). A multiple runs."""
    epochs = np.arange(10, 1001, 10)
    loss = np.where(epochs < 500, 1.0, 1e-2)
    for kwargs in (dict(window=3), dict(window=15), dict(window=50, plateau=25), dict(window=50, persist=35)):
        with pytest.raises(ValueError, match="not a whole number of logging intervals"):
            phase_transitions(epochs, loss, **kwargs)
    assert len(phase_transitions(epochs, loss, window=20)) == 1
