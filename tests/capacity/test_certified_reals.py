"""The theorem of chapter 3 checked by its own construction, in exact arithmetic (lnbook.capacity.build_exact).

Every net here is built by the proof's algorithm with exact (constructible) numbers, then every sample is
run through the net's exact weights, independently of the construction's books, and the claims are
certified by interval arithmetic: correct label, all samples of a label at one point, depth exactly
1 + m' - k.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lnbook.capacity.certified_reals import (
    Real,
    Undecided,
    rational_between,
    simplest_between,
)


def test_certified_signs():
    two = Real(2).sqrt()
    assert (two - Fraction(1414, 1000)).sign() == 1 and (two - Fraction(1415, 1000)).sign() == -1
    with pytest.raises(Undecided):
        (two * two - 2).sign()  # an exact zero cannot be decided from enclosures
    assert (Real(9, 4).sqrt()).is_rational  # perfect squares stay rational
    close = Real(1) + Real(1, 10**200)  # 1 + 1e-200: decided at a higher precision
    assert close.sqrt() > 1
    assert math.isclose(float(Real(3).sqrt() * Real(3).sqrt()), 3.0)
    with pytest.raises(ValueError, match="not positive"):
        (Real(2).sqrt() - 2).sqrt()


@settings(max_examples=100, deadline=None)
@given(st.fractions(-5, 5, max_denominator=50), st.fractions(Fraction(1, 500), 3, max_denominator=1000))
def test_simplest_between_is_strictly_inside_and_simplest(lo, width):
    hi = lo + width
    r = simplest_between(lo, hi)
    assert lo < r < hi
    for d in range(1, r.denominator):  # no smaller denominator fits (brute force)
        assert not Fraction(math.floor(lo * d) + 1, d) < hi


def test_rational_between_two_irrationals():
    r = rational_between(Real(2).sqrt(), Real(2).sqrt() + Fraction(1, 10**30))
    assert Real(2).sqrt() < r < Real(2).sqrt() + Fraction(1, 10**30)
    with pytest.raises(ValueError, match="a < b"):
        rational_between(Real(3).sqrt(), Real(2).sqrt())


class _BigInt:
    """An integer type that is not a Python ``int`` (as gmpy2's ``mpz``, which mpmath uses for its mantissas when
    gmpy2 is installed): ``Fraction`` refuses it, ``int()`` takes it."""

    def __init__(self, value: int):
        self.value = value

    def __index__(self) -> int:
        return self.value

    __int__ = __index__


def test_enclosure_ends_convert_with_any_integer_backend():
    """mpmath's interval ends are ``(sign, mantissa, exponent, bits)``; with gmpy2 installed the mantissa is an
    ``mpz`` and ``Fraction(mpz)`` fails (``SystemError: Object does not appear to be Fraction`` in the exact
    builder, found by installing gmpy2). ``_fraction`` converts through ``int``."""
    from lnbook.capacity.certified_reals import _fraction

    assert _fraction((0, _BigInt(3), -2, 2)) == Fraction(3, 4)
    assert _fraction((1, _BigInt(5), _BigInt(1), 3)) == -10
