"""Chapter 7 helpers: shipped text (lnbook.ml.text), timing (lnbook.util.timing), next-token training, TinyViT.
"""

from __future__ import annotations

import numpy as np
import pytest

from lnbook.util.timing import amdahl_speedup, interleaved_min_times, speedup


def test_interleaved_min_times_and_speedup():
    calls = {"a": 0, "b": 0}

    def make(name):
        def fn():
            calls[name] += 1

        return fn

    times = interleaved_min_times({"a": make("a"), "b": make("b")}, repeats=4, inner=3, warmup=1)
    assert calls == {"a": 1 + 4 * (1 + 3), "b": 1 + 4 * (1 + 3)} and all(t >= 0 for t in times.values())
    assert speedup(1.1, 1.0) == pytest.approx(0.1) and speedup(1.0, 2.0) == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="positive"):
        speedup(0.0, 1.0)
    with pytest.raises(ValueError, match="empty"):
        interleaved_min_times({})


def test_amdahl_numbers_of_the_exercise():
    """ex-ch7-amdahl: f = 1% gives 0.33%-0.45% (0.334% and 0.446%, as the chapter prints them to two
    decimals); 12% needs f = 32% (s = 1.5) or 24% (s = 1.8); 2% needs f = 5.9% (s = 1.5) or 4.4% (s = 1.8)."""
    assert amdahl_speedup(0.01, 0.5) == pytest.approx(0.00334, abs=5e-6)
    assert amdahl_speedup(0.01, 0.8) == pytest.approx(0.00446, abs=5e-6)
    assert (round(100 * amdahl_speedup(0.01, 0.5), 2), round(100 * amdahl_speedup(0.01, 0.8), 2)) == (0.33, 0.45)
    for s, f in [(1.5, 0.32), (1.8, 0.24)]:
        needed = (1 - 1 / 1.12) / (1 - 1 / s)
        assert needed == pytest.approx(f, abs=0.005) and amdahl_speedup(needed, s - 1) == pytest.approx(0.12)
    for s, f in [(1.5, 0.059), (1.8, 0.044)]:
        needed = (1 - 1 / 1.02) / (1 - 1 / s)
        assert needed == pytest.approx(f, abs=0.0005) and amdahl_speedup(needed, s - 1) == pytest.approx(0.02)
    assert amdahl_speedup(0.0, 5.0) == 0.0 and amdahl_speedup(1.0, 1.0) == pytest.approx(1.0)
    # reviewers: the norms take 7-12% of the wall time; "50-80% faster" read as s = 1.5-1.8 or as a cut of the
    # norm's time by 50-80% (s = 2-5)
    assert 100 * amdahl_speedup(0.07, 0.5) == pytest.approx(2.4, abs=0.05)
    assert 100 * amdahl_speedup(0.12, 0.8) == pytest.approx(5.6, abs=0.05)
    assert 100 * amdahl_speedup(0.07, 1.0) == pytest.approx(3.6, abs=0.05)
    assert 100 * amdahl_speedup(0.12, 4.0) == pytest.approx(10.6, abs=0.05)
    assert amdahl_speedup(0.12, 4.0) < 0.12  # the paper's best 12% is out of reach at f = 12% either way


def test_amdahl_cap():
    """prop-ch7-amdahl: the speed-up is at most f / (1 - f) for every s >= 1, increases in s, and tends to the cap."""
    for f in np.linspace(0.0, 0.95, 39):
        cap = f / (1 - f)
        gains = [amdahl_speedup(f, s - 1) for s in (1.0, 1.01, 1.5, 2.0, 10.0, 1e3, 1e6)]
        assert all(g <= cap * (1 + 1e-12) + 1e-15 for g in gains), (f, gains, cap)
        assert all(a <= b + 1e-15 for a, b in zip(gains, gains[1:]))
        assert gains[-1] == pytest.approx(cap, rel=1e-4, abs=1e-12)
    with pytest.raises(ValueError, match="share"):
        amdahl_speedup(1.5, 0.1)
