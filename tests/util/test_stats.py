"""The Clopper-Pearson interval (lnbook/util/stats.py): known values, its defining tail equations, exact
coverage at least the confidence, and its checks."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from lnbook.util.stats import binomial_interval, count_seeds, count_words, holm_rejections, interval_words, sign_test_p


def test_known_values():
    """R's ``binom.test(3, 4)$conf.int`` is 0.1941204 0.9936905; ``binom.test(24, 32)`` 0.5659506 0.8853840."""
    np.testing.assert_allclose(binomial_interval(3, 4), (0.1941204, 0.9936905), atol=1e-7)
    np.testing.assert_allclose(binomial_interval(24, 32), (0.5659506, 0.8853840), atol=1e-7)
    assert binomial_interval(0, 10)[0] == 0.0 and binomial_interval(10, 10)[1] == 1.0
    np.testing.assert_allclose(binomial_interval(0, 10)[1], 1 - 0.025 ** (1 / 10), rtol=1e-9)


@pytest.mark.parametrize("n", [1, 4, 16, 32])
@pytest.mark.parametrize("confidence", [0.9, 0.95])
def test_ends_solve_the_tail_equations_and_contain_the_estimate(n, confidence):
    alpha = 1 - confidence
    for k in range(n + 1):
        lo, hi = binomial_interval(k, n, confidence)
        assert 0 <= lo <= k / n <= hi <= 1
        if k > 0:  # P(X >= k | lo) = alpha / 2
            assert binom.sf(k - 1, n, lo) == pytest.approx(alpha / 2, rel=1e-8)
        if k < n:  # P(X <= k | hi) = alpha / 2
            assert binom.cdf(k, n, hi) == pytest.approx(alpha / 2, rel=1e-8)


@pytest.mark.parametrize("n", [4, 16, 32])
def test_coverage_is_at_least_the_confidence(n):
    """For every p on a grid, the probability (summed exactly over k) that the interval contains p."""
    intervals = [binomial_interval(k, n) for k in range(n + 1)]
    for p in np.linspace(0.001, 0.999, 199):
        covered = sum(binom.pmf(k, n, p) for k, (lo, hi) in enumerate(intervals) if lo <= p <= hi)
        assert covered >= 0.95 - 1e-12, (p, covered)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="between 0 and trials=4"):
        binomial_interval(5, 4)
    with pytest.raises(ValueError, match="between 0 and trials"):
        binomial_interval(-1, 4)
    with pytest.raises(ValueError, match="trials must be >= 1"):
        binomial_interval(0, 0)
    with pytest.raises(TypeError, match="successes must be an integer"):
        binomial_interval(1.0, 4)
    with pytest.raises(ValueError, match="confidence"):
        binomial_interval(1, 4, confidence=1.0)


def test_importing_it_does_not_import_torch():
    """Like lnbook.util itself (the runner and the CLI start without torch)."""
    import subprocess
    import sys

    code = "import sys, lnbook.util.stats; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


def test_seed_counts_say_some_and_not_all_exactly_at_their_counts():
    """count_seeds: some holds iff at least one seed succeeded, not_all iff at least one failed (the interval's
    ends move off 0 and 1 exactly there); the text carries the count and the interval; non-booleans refused."""
    import numpy as np

    from lnbook.util.stats import count_seeds

    for n in (1, 3, 4, 8):
        for k in range(n + 1):
            c = count_seeds([True] * k + [False] * (n - k))
            assert (c.successes, c.trials) == (k, n)
            assert c.some == (k >= 1) and c.not_all == (k < n)
            assert c.interval == binomial_interval(k, n)
            assert c.text.startswith(f"{k} of {n} seeds (95% interval ")
    assert count_seeds(np.array([0.1, 0.3]) < 0.2).text == "1 of 2 seeds (95% interval 0.01\u20130.99)"
    # an end strictly inside (0, 1) never prints as 0.00 or 1.00: 7 of 8 must not read like 8 of 8
    assert count_seeds([True] * 7 + [False]).interval_text == "0.473\u20130.997"
    assert count_seeds([True] * 8).interval_text == "0.63\u20131.00"
    assert count_seeds([True] + [False] * 31).interval_text == "0.001\u20130.162"
    for n in (8, 32, 100, 1000):
        for k in (1, n - 1):
            low, high = count_seeds([True] * k + [False] * (n - k)).interval_text.split("\u2013")
            assert 0 < float(low) and float(high) < 1
    with pytest.raises(ValueError, match="at least one"):
        count_seeds([])
    with pytest.raises(TypeError, match="booleans"):
        count_seeds([1, 0, 1])
    with pytest.raises(TypeError, match="sequence"):
        count_seeds(3)


@pytest.mark.parametrize("n", [1, 2, 4, 8, 32, 64])
def test_interval_words_never_prints_an_end_of_zero_or_one_that_is_not_exact(n):
    """Referee 7 of ch6, finding 4: 7 of 8 seeds printed "0.47 to 1.00", which reads like 8 of 8. For every count of
    n seeds, an end prints as 0.00 or 1.00 exactly when it is 0 (no success) or 1 (every seed); otherwise it has two
    decimals, or the fewest more that keep it off 0 and 1 (both ends alike), and reads back within half a unit of its last
    digit."""
    for k in range(n + 1):
        low, high = binomial_interval(k, n)
        words = interval_words(low, high)
        a, b = words.split("\u2013")  # an en dash, as every range of the book (issue 33)
        assert (float(a) == 0.0) == (k == 0) and (float(b) == 1.0) == (k == n), (k, n, words)
        digits = len(a.split(".")[1])
        assert len(b.split(".")[1]) == digits >= 2  # one precision for both ends (screenshot read 48, item 12)
        for text, value in ((a, low), (b, high)):
            assert abs(float(text) - value) <= 0.5 * 10.0 ** -digits + 1e-15
        if digits > 2:  # more digits only where fewer would print an end as 0 or 1
            assert any(v not in (0.0, 1.0) and float(f"{v:.{digits - 1}f}") in (0.0, 1.0) for v in (low, high))
        assert count_seeds([True] * k + [False] * (n - k)).interval_text == words
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        interval_words(-0.1, 0.5)
    with pytest.raises(ValueError, match="above the high end"):
        interval_words(0.6, 0.5)


def test_count_words_says_all_none_and_k_of_n_in_words_up_to_ten():
    assert count_words(6, 6, "LN-Nets") == "all six LN-Nets"
    assert count_words(2, 2, "runs") == "both runs"
    assert count_words(0, 6, "drops") == "none of the six drops"
    assert count_words(1, 6, "drops") == "one of the six drops"
    assert count_words(3, 12, "seeds") == "three of the 12 seeds"
    assert count_words(11, 12, "seeds") == "11 of the 12 seeds"
    assert count_words(6, 6, "LN-Nets", starts_sentence=True) == "All six LN-Nets"
    assert count_words(0, 6, "drops", starts_sentence=True) == "None of the six drops"


@pytest.mark.parametrize("count, total", [(-1, 6), (7, 6), (0, 0)])
def test_count_words_refuses_a_count_outside_the_total(count, total):
    with pytest.raises(ValueError):
        count_words(count, total, "seeds")


def test_count_words_refuses_a_non_integer():
    with pytest.raises(TypeError):
        count_words(2.0, 6, "seeds")
    with pytest.raises(TypeError):
        count_words(True, 6, "seeds")


@pytest.mark.parametrize("n", [1, 2, 7, 16, 61])
def test_the_sign_test_is_the_exact_two_sided_binomial_test(n):
    """sign_test_p (chapter 7's test over texts) against scipy's exact binomial test, every split of n signs."""
    from scipy.stats import binomtest

    for k in range(n + 1):
        assert sign_test_p(k, n - k) == pytest.approx(binomtest(k, n, 0.5).pvalue, rel=1e-12, abs=0)
    assert sign_test_p(16, 0) == 2 / 2**16 and sign_test_p(8, 8) == 1.0


def test_the_sign_test_refuses_what_is_not_a_count():
    for bad in ((-1, 3), (1.5, 2), (True, 2)):
        with pytest.raises(ValueError, match="count"):
            sign_test_p(*bad)
    with pytest.raises(ValueError, match="at least one sign"):
        sign_test_p(0, 0)


def _holm_by_adjusted_p_values(p, alpha):
    """Holm's procedure written the other way: adjusted p-values max_{j <= k} (m - j) p_(j), rejected when <= alpha."""
    m = len(p)
    order = np.argsort(p, kind="stable")
    adjusted, running = np.empty(m), 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * p[i]))
        adjusted[i] = running
    return [bool(a <= alpha) for a in adjusted]


def test_holm_rejects_step_down_and_agrees_with_its_adjusted_p_values():
    assert holm_rejections([0.01, 0.02, 0.005]) == [True, True, True]  # Bonferroni would keep 0.02
    assert holm_rejections([0.03, 0.001, 0.2]) == [False, True, False]  # stops at the first that fails
    assert holm_rejections([0.04, 0.04], alpha=0.05) == [False, False]
    rng = np.random.default_rng(0)
    for _ in range(300):
        m = int(rng.integers(1, 40))
        p = np.where(rng.random(m) < 0.5, rng.random(m) * 0.01, rng.random(m))
        for alpha in (0.01, 0.05, 0.2):
            assert holm_rejections(p, alpha) == _holm_by_adjusted_p_values(p, alpha)


def test_holm_refuses_what_is_not_a_p_value():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm_rejections([0.1, float("nan")])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm_rejections([1.2])
    with pytest.raises(ValueError, match="at least one"):
        holm_rejections([])
    with pytest.raises(TypeError, match="sequence of p-values"):
        holm_rejections(0.3)
    with pytest.raises(ValueError, match="alpha"):
        holm_rejections([0.1], alpha=1.5)
