r"""How sure a fraction of seeds is: the exact (Clopper-Pearson) interval of a binomial proportion.

A lab that trains ``n`` seeds and finds that ``k`` of them do something reports ``k`` of ``n`` together with
:func:`binomial_interval`, the interval of the probability ``p`` that one more seed does it. Statements
such as "every seed beats X", a minimum over seeds, can be broken by the next seed; ``k`` of ``n`` with its
interval cannot, and it is what a lab should assert about (for example that the lower end is above 0, "some
seeds do", or the upper end below 1).

The Clopper-Pearson interval inverts two one-sided binomial tests: :math:`p_{lo}` solves
:math:`P(X \ge k \mid p) = \alpha/2` and :math:`p_{hi}` solves :math:`P(X \le k \mid p) = \alpha/2` for
:math:`X \sim \mathrm{Binomial}(n, p)` (the quantiles of Beta distributions), with :math:`p_{lo} = 0` for
:math:`k = 0` and :math:`p_{hi} = 1` for :math:`k = n`. Both are found by bisection on the exact tail sums in pure
Python (no scipy import, which would cost a lab about a second). It covers ``p`` with
probability at least the stated confidence for every ``p`` and ``n`` (it is conservative; Wilson's score
interval is shorter but can cover less), which is what small seed counts (4 at ci scale) need.

>>> lo, hi = binomial_interval(24, 32)
>>> round(lo, 3), round(hi, 3)
(0.566, 0.885)
>>> binomial_interval(0, 4)[0], binomial_interval(4, 4)[1]
(0.0, 1.0)
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

__all__ = ["binomial_interval", "interval_words", "SeedCount", "count_seeds", "sign_test_p", "holm_rejections"]


def binomial_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided ``confidence`` interval of the success probability after
    ``successes`` of ``trials`` independent trials: ``(low, high)`` with ``0 <= low <= successes / trials <= high
    <= 1``."""
    for name, value in (("trials", trials), ("successes", successes)):  # (no torch: lnbook.util.validation imports it)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    trials = int(trials)
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be between 0 and trials={trials}, got {successes}")
    if isinstance(confidence, bool) or not isinstance(confidence, numbers.Real) or not 0 < confidence < 1:
        raise ValueError(f"confidence must be a number strictly between 0 and 1, got {confidence!r}")
    alpha = 1.0 - float(confidence)
    k, n = int(successes), trials
    # P(X >= k | p) rises with p and P(X <= k | p) falls with p: bisection to the last bit of p
    low = 0.0 if k == 0 else _solve(lambda p: _tail_at_least(k, n, p) - alpha / 2)
    high = 1.0 if k == n else _solve(lambda p: alpha / 2 - _tail_at_most(k, n, p))
    return low, high


def interval_words(low: float, high: float) -> str:
    """An interval of a fraction as the text and the tables write it, ``"0.19–0.99"``: an en dash, as every range of the
    book (:func:`lnbook.util.tables.number_range`; the prose wrote "0.29 to 1.00" where the tables wrote "0.29–1.00":
    screenshot read, issue 33), both ends with two decimals, unless an end that two decimals would print as 0.00 or
    1.00 is not exactly 0 or 1: then both get as many more as that end needs (7 of 8 seeds: ``"0.473–0.997"``, not
    ``"0.47–1.00"``, which would read like 8 of 8, nor ``"0.47–0.997"``, two precisions in one interval: screenshot
    read 48, item 12). Ends of :func:`binomial_interval` are exactly 0 for no success and exactly 1 for all. Refuses
    ends outside [0, 1] or ``low > high``.

    >>> interval_words(*binomial_interval(7, 8)), interval_words(*binomial_interval(8, 8))
    ('0.473–0.997', '0.63–1.00')
    """
    for name, v in (("low", low), ("high", high)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0.0 <= v <= 1.0:
            raise ValueError(f"interval_words needs ends in [0, 1] (a fraction's interval), got {name}={v!r}")
    if low > high:
        raise ValueError(f"the low end {low!r} is above the high end {high!r}: give interval_words(low, high)")
    digits = max(_end_digits(float(low)), _end_digits(float(high)))
    return f"{float(low):.{digits}f}\u2013{float(high):.{digits}f}"


_SMALL_COUNTS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def count_words(count: int, total: int, plural: str, *, starts_sentence: bool = False) -> str:
    """``count`` of ``total`` things as a sentence says it, lower case unless ``starts_sentence`` (then only its first
    letter is a capital, so that "LN-Nets" stays as it is): ``"all six LN-Nets"``, ``"none of the six drops"``, ``"two of the six drops"``; counts up to ten in
    words, larger ones in digits. The text wrote "6 of the 6 LN-Nets" and "Of the 6 drops, 0 meet" (screenshot
    read, issue 33). Refuses a count outside 0..total and a total below 1.

    >>> count_words(6, 6, "LN-Nets"), count_words(0, 6, "drops"), count_words(2, 12, "seeds")
    ('all six LN-Nets', 'none of the six drops', 'two of the 12 seeds')
    """
    for name, v in (("count", count), ("total", total)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"count_words needs an integer {name}, got {v!r}")
    if total < 1 or not 0 <= count <= total:
        raise ValueError(f"count_words needs 0 <= count <= total and total >= 1, got count={count}, total={total}")

    def word(n: int) -> str:
        return _SMALL_COUNTS[n] if 0 < n <= 10 else f"{n}"

    if count == total:
        words = f"both {plural}" if total == 2 else f"all {word(total)} {plural}"
    elif count == 0:
        words = f"none of the {word(total)} {plural}"
    else:
        words = f"{word(count)} of the {word(total)} {plural}"
    return words[0].upper() + words[1:] if starts_sentence else words


def _end_digits(v: float) -> int:
    """The decimals an end of a fraction's interval needs: two, or the fewest more that keep it off 0 and 1 when it
    is neither."""
    digits = 2
    while v not in (0.0, 1.0) and float(f"{v:.{digits}f}") in (0.0, 1.0) and digits < 17:
        digits += 1
    return digits


def _log_pmf(i: int, n: int, p: float) -> float:
    return (math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
            + i * math.log(p) + (n - i) * math.log1p(-p))


def _tail_at_least(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), 0 < p < 1."""
    return math.fsum(math.exp(_log_pmf(i, n, p)) for i in range(k, n + 1))


def _tail_at_most(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), 0 < p < 1."""
    return math.fsum(math.exp(_log_pmf(i, n, p)) for i in range(0, k + 1))


def _solve(rising) -> float:
    """The root in (0, 1) of an increasing function, by bisection until the bracket stops shrinking."""
    lo, hi = 0.0, 1.0
    while True:
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            return mid
        if rising(mid) < 0:
            lo = mid
        else:
            hi = mid


@dataclass(frozen=True)
class SeedCount:
    """``successes`` of ``trials`` seeds did something: the count, its 95% Clopper-Pearson interval and the
    sentences a lab glues and asserts. ``some`` (the interval's lower end is above 0: one more seed does it with
    a probability bounded away from 0) holds exactly when ``successes >= 1``; ``not_all`` (upper end below 1)
    exactly when ``successes < trials``.

    >>> c = count_seeds([True, False, True, True])
    >>> c.text, c.some, c.not_all
    ('3 of 4 seeds (95% interval 0.19–0.99)', True, True)
    """

    successes: int
    trials: int

    @property
    def interval(self) -> tuple[float, float]:
        return binomial_interval(self.successes, self.trials)

    @property
    def some(self) -> bool:
        return self.interval[0] > 0

    @property
    def not_all(self) -> bool:
        return self.interval[1] < 1

    @property
    def interval_text(self) -> str:
        return interval_words(*self.interval)

    @property
    def text(self) -> str:
        return f"{self.successes} of {self.trials} seeds (95% interval {self.interval_text})"


def count_seeds(flags) -> SeedCount:
    """:class:`SeedCount` of a sequence of booleans, one per seed (``True``: the seed did it). Refuses an empty
    sequence and anything that is not a bool (a 0/1 array: pass ``arr.astype(bool)`` or compare explicitly)."""
    try:
        flags = list(flags)
    except TypeError:
        raise TypeError(f"count_seeds needs a sequence of booleans, one per seed, got {type(flags).__name__}") from None
    if not flags:
        raise ValueError("count_seeds needs at least one seed")
    if not all(type(f).__name__ in ("bool", "bool_") for f in flags):  # Python or numpy booleans
        raise TypeError("count_seeds needs booleans (True: the seed did it), got "
                        f"{sorted({type(f).__name__ for f in flags})}; compare the values explicitly")
    return SeedCount(int(sum(bool(f) for f in flags)), len(flags))


def sign_test_p(positive: int, negative: int) -> float:
    """The exact two-sided sign test: ``positive`` of ``positive + negative`` independent signs came out ``+``, and
    the null says each is ``+`` or ``-`` with probability 1/2 (ties, exact zeros, are dropped before counting).
    Returns ``min(1, 2 P(X <= min(positive, negative)))``, correctly rounded, for ``X ~ Binomial(positive + negative, 1/2)``.

    >>> sign_test_p(16, 0) == 2 / 2**16
    True
    >>> sign_test_p(3, 3)
    1.0
    """
    for name, v in (("positive", positive), ("negative", negative)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
            raise ValueError(f"{name} must be a count (an int >= 0), got {v!r}")
    n = int(positive) + int(negative)
    if n == 0:
        raise ValueError("sign_test_p needs at least one sign that is not a tie")
    k = min(int(positive), int(negative))
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)  # exact integers, one rounding


def holm_rejections(p_values, alpha: float = 0.05) -> list[bool]:
    """Holm's step-down procedure: which of the hypotheses with these p-values are rejected so that the chance of
    rejecting any true one is at most ``alpha``, whatever their dependence. Sort the p-values, reject the ``k``-th
    smallest (``k = 0, 1, ...``) while it is at most ``alpha / (m - k)``, and stop at the first that is not.

    >>> holm_rejections([0.01, 0.02, 0.005])   # Bonferroni (each <= 0.05/3) would keep 0.02
    [True, True, True]
    >>> holm_rejections([0.03, 0.001, 0.2])
    [False, True, False]
    """
    try:
        p = [float(v) for v in p_values]
    except (TypeError, ValueError):
        raise TypeError("holm_rejections needs a sequence of p-values (numbers in [0, 1])") from None
    if not p:
        raise ValueError("holm_rejections needs at least one p-value")
    if not all(0.0 <= v <= 1.0 for v in p):  # NaN fails too
        raise ValueError(f"p-values must lie in [0, 1], got {[v for v in p if not 0.0 <= v <= 1.0][:3]}")
    if not (isinstance(alpha, numbers.Real) and 0 < alpha < 1):
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    m = len(p)
    rejected = [False] * m
    for k, i in enumerate(sorted(range(m), key=lambda j: p[j])):
        if p[i] > alpha / (m - k):
            break
        rejected[i] = True
    return rejected
