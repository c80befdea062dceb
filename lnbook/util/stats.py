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

__all__ = ["binomial_interval"]


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
