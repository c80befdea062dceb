r"""Exact constructible numbers with certified signs: the arithmetic of the exact construction (chapter 3).

A :class:`Real` is a real number given **exactly** by a formula over the rationals: a rational constant,
or ``+``, ``-``, ``*``, ``/`` or ``sqrt`` of other :class:`Real` s (numbers built with ruler and compass).
Nothing is rounded: the formula *is* the number. What can be computed from it, at any precision, is a
rigorous **enclosure**, an interval that contains the number (interval arithmetic of ``mpmath.iv``, which
rounds every endpoint outwards).

The **sign** of a number is decided from enclosures of increasing precision: as an enclosure
excludes 0 the sign is certain. A non-zero number is decided at a finite precision; an exact zero never
is, so :meth:`Real.sign` gives up at ``MAX_PREC`` bits with :class:`Undecided` (rational numbers, whose
sign is read off exactly, are the exception). Exact equalities are therefore never *tested* here; the
construction of chapter 3 needs none beyond those that hold by algebra (a moved cluster lands on its
sink because the pole lies on the line through both, lemma ``lem-merge``).

Rational operands are folded into exact ``fractions.Fraction`` results, so a formula only grows where
square roots enter. Enclosures are memoised per node; evaluation is iterative (deep formulas are fine).

>>> x = Real(2).sqrt()
>>> (x * x - 2).sign()  # an exact zero: undecidable from enclosures, as it should be
Traceback (most recent call last):
...
lnbook.capacity.certified_reals.Undecided: ...
>>> (x - Real(1414, 1000)).sign()
1
"""

from __future__ import annotations

import math
from fractions import Fraction
from numbers import Rational

from mpmath import iv

__all__ = ["Real", "as_real", "Undecided", "START_PREC", "MAX_PREC", "simplest_between", "rational_between"]

START_PREC = 96  # bits of the first enclosure tried
MAX_PREC = 1 << 14  # bits after which a sign is declared undecidable (the number is 0 or closer than 2^-16384)


class Undecided(ArithmeticError):
    """The sign of a :class:`Real` could not be decided below ``MAX_PREC`` bits (it is 0, or extremely close)."""


def as_real(value) -> Real:
    """``value`` itself if it is a :class:`Real`, else the exact rational it is (int, ``Fraction``, float)."""
    if isinstance(value, Real):
        return value
    if isinstance(value, (int, Rational)) and not isinstance(value, bool):
        return Real(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot make an exact number of {value!r}")
        return Real(Fraction(value))  # the float's exact binary value
    raise TypeError(f"cannot combine a Real with {type(value).__name__}")


class Real:
    """An exact real number: a rational, or ``+ - * /`` or ``sqrt`` of other :class:`Real` s.

    ``Real(p)`` or ``Real(p, q)`` is the rational :math:`p/q` (ints, ``Fraction`` s or floats, taken
    exactly). Arithmetic with ints, ``Fraction`` s and floats works on either side. ``bool``, ``==`` and
    ``hash`` are those of the object (equality of formulas is not decidable from enclosures); compare with
    ``<``, ``>`` (certified, may raise :class:`Undecided`) or :meth:`sign`.
    """

    __slots__ = ("op", "args", "q", "_prec", "_iv")

    def __init__(self, value=0, denominator=None, *, _op: str = "q", _args: tuple = ()):
        self.op, self.args = _op, _args
        self.q = None
        if _op == "q":
            if isinstance(value, float):
                if not math.isfinite(value):
                    raise ValueError(f"cannot make an exact number of {value!r}")
                value = Fraction(value)
            self.q = Fraction(value) if denominator is None else Fraction(value) / Fraction(denominator)
        self._prec, self._iv = -1, None

    # -- construction ------------------------------------------------------------------------------

    @property
    def is_rational(self) -> bool:
        return self.op == "q"

    def _binary(self, other, op: str, swap: bool = False) -> Real:
        other = as_real(other)
        a, b = (other, self) if swap else (self, other)
        if a.op == "q" and b.op == "q":
            if op == "+":
                return Real(a.q + b.q)
            if op == "-":
                return Real(a.q - b.q)
            if op == "*":
                return Real(a.q * b.q)
            if b.q == 0:
                raise ZeroDivisionError("division of an exact number by the rational 0")
            return Real(a.q / b.q)
        if op == "*" and ((a.op == "q" and a.q == 1) or (b.op == "q" and b.q == 1)):
            return b if a.op == "q" else a
        return Real(_op=op, _args=(a, b))

    def __add__(self, other):
        return self._binary(other, "+")

    def __radd__(self, other):
        return self._binary(other, "+", swap=True)

    def __sub__(self, other):
        return self._binary(other, "-")

    def __rsub__(self, other):
        return self._binary(other, "-", swap=True)

    def __mul__(self, other):
        return self._binary(other, "*")

    def __rmul__(self, other):
        return self._binary(other, "*", swap=True)

    def __truediv__(self, other):
        return self._binary(other, "/")

    def __rtruediv__(self, other):
        return self._binary(other, "/", swap=True)

    def __neg__(self):
        return Real(-self.q) if self.op == "q" else Real(0) - self

    def sqrt(self) -> Real:
        """The exact square root; the argument must be certified positive (or a rational >= 0)."""
        if self.op == "q":
            if self.q < 0:
                raise ValueError(f"square root of the negative rational {self.q}")
            num, den = self.q.numerator, self.q.denominator
            rn, rd = math.isqrt(num), math.isqrt(den)
            if rn * rn == num and rd * rd == den:
                return Real(Fraction(rn, rd))
        elif self.sign() <= 0:
            raise ValueError("square root of a number that is not positive")
        return Real(_op="sqrt", _args=(self,))

    # -- enclosures --------------------------------------------------------------------------------

    def enclosure(self, prec: int = START_PREC):
        """A rigorous interval (``mpmath.iv.mpf``) that contains the number, computed at ``prec`` bits."""
        if self._prec >= prec:
            return self._iv
        old = iv.prec
        iv.prec = prec
        try:
            stack = [self]
            while stack:
                node = stack[-1]
                if node._prec >= prec:
                    stack.pop()
                    continue
                todo = [a for a in node.args if a._prec < prec]
                if todo:
                    stack.extend(todo)
                    continue
                stack.pop()
                node._iv = node._evaluate()
                node._prec = prec
        finally:
            iv.prec = old
        return self._iv

    def _evaluate(self):
        op = self.op
        if op == "q":
            return iv.mpf(self.q.numerator) / iv.mpf(self.q.denominator)
        if op == "sqrt":
            x = self.args[0]._iv
            return iv.sqrt(iv.mpf([max(x.a, 0), x.b]))  # the argument is certified positive
        a, b = self.args[0]._iv, self.args[1]._iv
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        return a / b  # an enclosure of the divisor that still contains 0 gives [-inf, inf]: no information yet

    def sign(self) -> int:
        """-1, 0 or +1, certified. Raises :class:`Undecided` for a non-rational that is 0 (or within 2^-MAX_PREC)."""
        if self.op == "q":
            return (self.q > 0) - (self.q < 0)
        prec = max([START_PREC, self._prec] + [a._prec for a in self.args])
        while prec <= MAX_PREC:
            box = self.enclosure(prec)
            if box.a > 0:
                return 1
            if box.b < 0:
                return -1
            prec *= 2
        raise Undecided(f"the sign of this number is not decided at {MAX_PREC} bits: it is 0 or closer to 0 than that")

    def __lt__(self, other):
        return (self - other).sign() < 0

    def __gt__(self, other):
        return (self - other).sign() > 0

    def __le__(self, other):
        return (self - other).sign() <= 0

    def __ge__(self, other):
        return (self - other).sign() >= 0

    def __float__(self) -> float:
        """The nearest float, from an enclosure narrower than a float's rounding (precision raised as needed)."""
        if self.op == "q":
            return float(self.q)
        prec = max(START_PREC, self._prec)
        while prec <= MAX_PREC:
            try:
                lo, hi = self.bounds(prec)
            except OverflowError:
                lo, hi = Fraction(-1), Fraction(1)  # unbounded: look closer
            if hi - lo <= Fraction(1, 1 << 60) * max(abs(lo), abs(hi)) or (lo == hi):
                return float((lo + hi) / 2)
            if lo <= 0 <= hi and hi - lo < Fraction(1, 1 << 1000):
                return 0.0  # indistinguishable from 0 at this precision
            prec *= 2
        raise Undecided("no float approximation found below MAX_PREC bits")

    def __repr__(self) -> str:
        if self.op == "q":
            return f"Real({self.q})"
        return f"Real(~{float(self):.17g}, {self.op})"

    def bounds(self, prec: int | None = None) -> tuple[Fraction, Fraction]:
        """The enclosure at ``prec`` bits (default: the best one computed so far) as two exact ``Fraction`` s."""
        if self.op == "q":
            return self.q, self.q
        box = self.enclosure(max(START_PREC, self._prec) if prec is None else prec)
        return _fraction(box._mpi_[0]), _fraction(box._mpi_[1])


def _fraction(value) -> Fraction:
    """An ``mpmath`` binary float (its ``(sign, mantissa, exponent, bits)`` tuple) as the exact ``Fraction`` it is."""
    sign, man, exp, bits = value
    if man == 0:
        if bits != 0 or exp != 0:  # mpmath's infinities and nan have a zero mantissa too
            raise OverflowError("the enclosure is unbounded: decide the number at a higher precision")
        return Fraction(0)
    q = Fraction(int(man)) * (Fraction(2) ** int(exp))  # int(): with gmpy2, mpmath's mantissa is an mpz
    return -q if sign else q


def simplest_between(lo: Fraction, hi: Fraction) -> Fraction:
    """The rational with the smallest denominator strictly between ``lo < hi`` (Stern-Brocot descent).

    >>> simplest_between(Fraction(1, 3), Fraction(1, 2))
    Fraction(2, 5)
    """
    lo, hi = Fraction(lo), Fraction(hi)
    if not lo < hi:
        raise ValueError(f"need lo < hi, got {lo} and {hi}")
    if lo < 0 < hi:
        return Fraction(0)
    if hi <= 0:
        return -simplest_between(-hi, -lo)
    fl = math.floor(lo)
    if fl + 1 < hi:
        return Fraction(fl + 1)
    # lo and hi share the integer part fl (lo may equal fl): recurse on the reciprocals of the fractional parts
    if lo == fl:
        return fl + Fraction(1, math.floor(1 / (hi - fl)) + 1)
    return fl + 1 / simplest_between(1 / (hi - fl), 1 / (lo - fl))


def rational_between(a: Real, b: Real) -> Fraction:
    """A simple rational strictly between two exact numbers ``a < b`` (certified; raises ``ValueError`` if ``a >= b``).

    >>> rational_between(Real(2).sqrt(), Real(3).sqrt())
    Fraction(3, 2)
    """
    a, b = as_real(a), as_real(b)
    if not (b - a).sign() > 0:
        raise ValueError("rational_between needs a < b")
    prec = max(START_PREC, a._prec, b._prec)
    while prec <= 2 * MAX_PREC:  # a < b is certified, so the enclosures separate at some precision
        try:
            a_hi, b_lo = a.bounds(prec)[1], b.bounds(prec)[0]
        except OverflowError:  # an unbounded enclosure: more precision
            a_hi, b_lo = 1, 0
        if a_hi < b_lo:
            return simplest_between(a_hi, b_lo)
        prec *= 2
    raise Undecided("no rational found between two numbers that differ by less than 2^-MAX_PREC")
