"""Tables for the labs' pages: HTML in the book and in Jupyter, aligned text in a terminal.

A lab shows a table of results with :class:`Table` instead of printing aligned text (which the book shows as a
block of monospace lines; ``lnbook.book.site_check`` reports such printed text tables). The rows are rounded by
the column's format, the columns carry readable names, and nothing beyond the standard library is needed.

On the page a cell never breaks inside a word or a number (``_static/lnbook.css``): a short cell without a space
(:data:`SHORT_CELL` characters or fewer) stays on one line, a range (``0.88–0.90``) stays whole, another cell wraps at
its spaces, and a long name
(``encoder.layer.0.attention.output.LayerNorm``, ``nn.TransformerEncoderLayer``) may also break after a separator
("/", "_", "::", or a "." before a letter), where the HTML has a ``<wbr>``, so that one long cell cannot squeeze the
other columns to a letter each (``lnbook.book.site_check`` reports a word broken across lines in a table).
"""

from __future__ import annotations

import html
import numbers
import re
from collections.abc import Mapping, Sequence

__all__ = ["Table", "Details", "Lines", "seed_range", "SHORT_CELL", "number_range", "value_and_error", "vector_text", "whole_number", "THOUSANDS", "unbroken_range", "WORD_JOINER", "number_list", "power_of_ten",
           "significant", "signed_percent"]

SHORT_CELL = 16  # characters: a cell this short, without a space, is kept on one line (class lnbook-short)
# where a long name may break: after "/", "_" or "::", and after a "." that a letter follows (not inside a number)
_BREAK_AFTER = re.compile(r"(::|[/_](?=\w)|\.(?=[A-Za-z]))")


class Details:
    """A cell that shows ``summary`` and folds ``lines`` under it (a ``<details>`` on the page, closed until the reader
    opens it; the text form shows the summary): the full messages behind a summary, e.g. every refusal of a model
    behind :func:`lnbook.folding.refusals.summarise_refusals`' cell."""

    def __init__(self, summary: str, lines: Sequence[str] = ()):
        if not isinstance(summary, str):
            raise TypeError(f"a Details cell's summary is a string, got {summary!r}")
        if isinstance(lines, str) or not all(isinstance(line, str) for line in lines):
            raise TypeError(f"a Details cell's lines are a list of strings, got {lines!r}")
        self.summary, self.lines = summary, tuple(lines)

    def __str__(self) -> str:
        return self.summary

    def __repr__(self) -> str:
        return f"Details({self.summary!r}, {len(self.lines)} lines)"

    def html(self) -> str:
        if not self.lines:
            return _td(self.summary)
        items = "".join(f"<li>{_breakable(line)}</li>" for line in self.lines)
        return f"<td><details><summary>{_breakable(self.summary)}</summary><ul>{items}</ul></details></td>"


class Lines:
    """A cell of a few short items, one per line (``<br>`` between them on the page, ``"; "`` in the text form), where
    a word with a dot, a module name such as ``encoder.layer``, is never broken (class lnbook-nobreak): a list of
    module groups that wrapped inside a name ("blocks.1.⏎mlp.2", issue 33) reads one group per line."""

    def __init__(self, items: Sequence[str]):
        if isinstance(items, str) or not all(isinstance(item, str) for item in items):
            raise TypeError(f"a Lines cell is a list of strings, got {items!r}")
        if not items:
            raise ValueError("a Lines cell needs at least one item")
        self.items = tuple(items)

    def __str__(self) -> str:
        return "; ".join(self.items)

    def __repr__(self) -> str:
        return f"Lines({list(self.items)!r})"

    def __eq__(self, other) -> bool:
        return self.items == other.items if isinstance(other, Lines) else NotImplemented

    __hash__ = None

    def html(self) -> str:
        def word(w: str) -> str:
            return f"<span class='lnbook-nobreak'>{html.escape(w)}</span>" if "." in w or RANGE_DASH in w else html.escape(w)
        return "<td>" + "<br>".join(" ".join(word(w) for w in item.split(" ")) for item in self.items) + "</td>"


class Table:
    """``Table(rows, columns, formats=None)``: ``rows`` are sequences (one value per column) or mappings (keyed by
    the column names); ``formats`` maps a column name to a format spec (``".3f"``, ``".1e"``, ``"d"``) for its numbers.
    ``None`` shows as ``—`` (:data:`NO_VALUE`, an em dash, as the other tables of the book write an empty cell); a :class:`Details` value shows its summary with its lines folded under it; a :class:`Lines` value shows one item per line. Jupyter and the book render :meth:`_repr_html_`; ``str`` and ``repr`` give aligned text.
    """

    def __init__(self, rows, columns: Sequence[str], formats: Mapping[str, str] | None = None):
        if isinstance(columns, str) or not isinstance(columns, Sequence) or not columns:
            raise TypeError(f"columns must be a non-empty list of column names, got {columns!r}")
        columns = [str(c) for c in columns]
        if len(set(columns)) != len(columns):
            raise ValueError(f"column names must be distinct, got {columns}")
        formats = dict(formats or {})
        unknown = sorted(set(formats) - set(columns))
        if unknown:
            raise ValueError(f"formats names columns the table does not have: {unknown}; the columns are {columns}")
        for name, spec in formats.items():
            if not isinstance(spec, str):
                raise TypeError(f"the format of column {name!r} must be a format spec such as '.3f', got {spec!r}")
        if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence):
            raise TypeError(f"rows must be a list of rows, got {type(rows).__name__}")
        cells, raw = [], []
        for n, row in enumerate(rows):
            if isinstance(row, Mapping):
                missing = [c for c in columns if c not in row]
                if missing:
                    raise ValueError(f"row {n} lacks the columns {missing}")
                values = [row[c] for c in columns]
            elif isinstance(row, Sequence) and not isinstance(row, (str, bytes)):
                if len(row) != len(columns):
                    raise ValueError(f"row {n} has {len(row)} values for {len(columns)} columns {columns}")
                values = list(row)
            else:
                raise TypeError(f"row {n} must be a list of values or a mapping of column names, got {row!r}")
            raw.append(values)
            cells.append([_cell(v, formats.get(c), c) for v, c in zip(values, columns)])
        self.columns, self.cells, self.formats, self._values = columns, cells, formats, raw

    def column(self, name: str) -> list:
        """The values of column ``name``, as given (not formatted)."""
        if name not in self.columns:
            raise KeyError(f"no column {name!r}; the columns are {self.columns}")
        j = self.columns.index(name)
        return [row[j] for row in self._values]

    def select(self, columns: Sequence[str]) -> "Table":
        """The same rows with only ``columns``, in that order."""
        missing = [c for c in columns if c not in self.columns]
        if missing:
            raise KeyError(f"no columns {missing}; the columns are {self.columns}")
        index = [self.columns.index(c) for c in columns]
        rows = [[row[j] for j in index] for row in self._values]
        return Table(rows, list(columns), {c: f for c, f in self.formats.items() if c in columns})

    def insert(self, position: int, name: str, values: Sequence) -> None:
        """Add column ``name`` with one value per row at ``position`` (as ``DataFrame.insert`` does), in place."""
        name = str(name)
        if name in self.columns:
            raise ValueError(f"column {name!r} exists already; the columns are {self.columns}")
        if isinstance(values, (str, bytes)) or len(values) != len(self.cells):
            raise ValueError(f"give one value per row ({len(self.cells)}) for column {name!r}")
        if not -len(self.columns) - 1 <= position <= len(self.columns):
            raise ValueError(f"position {position} is outside the {len(self.columns)} columns")
        self.columns.insert(position, name)
        for row, cells, v in zip(self._values, self.cells, values):
            row.insert(position, v)
            cells.insert(position, _cell(v, None, name))

    def __len__(self) -> int:
        return len(self.cells)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c) if len(c) <= SHORT_CELL else _breakable(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(value.html() if isinstance(value, (Details, Lines)) else _td(text)
                                        for value, text in zip(values, row)) + "</tr>"
                       for values, row in zip(self._values, self.cells))
        return f"<table class='table lnbook-table'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def __str__(self) -> str:
        widths = [max(len(c), *(len(row[j]) for row in self.cells)) for j, c in enumerate(self.columns)]
        lines = [self.columns] + self.cells
        return "\n".join("  ".join(v.rjust(w) for v, w in zip(line, widths)) for line in lines)

    __repr__ = __str__


RANGE_DASH = "\u2013"  # en dash: "0.88–0.90", the one way the labs write a range of values
MINUS = "\u2212"
NO_VALUE = "\u2014"  # an em dash: a cell without a value (a hyphen read as a minus or a typo: screenshot read, issue 33)


_SUPERSCRIPT = str.maketrans("0123456789-", "\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079\u207b")
_POWER_SPEC = re.compile(r"\.(\d+)p")


def seed_range(values, seeds, spec: str = ".3f") -> Details:
    """One cell for a value measured on several seeds: the range over the seeds (:func:`number_range`, an en dash), with
    every seed's value folded under it (``seed 0: 0.353``), instead of the values in a row ("0.353, 0.355, 0.173"
    wrapped over two lines in a narrow column: screenshot read 48, item 18). One seed gives its value alone.

    >>> cell = seed_range([0.353, 0.355, 0.173], [0, 1, 2])
    >>> cell.summary, cell.lines
    ('0.173–0.355', ('seed 0: 0.353', 'seed 1: 0.355', 'seed 2: 0.173'))
    """
    values, seeds = [float(v) for v in values], list(seeds)
    if not values or len(values) != len(seeds):
        raise ValueError(f"give one value per seed: {len(values)} values for {len(seeds)} seeds")
    return Details(number_range(min(values), max(values), spec),
                   [f"seed {s}: {_number(v, spec, 'a value')}" for s, v in zip(seeds, values)])


def power_of_ten(value, spec: str = ".1p") -> str:
    """A number as the running text writes it, not in e-notation: ``3.2×10⁻¹³`` for ``3.2e-13`` (spec ``".1p"``:
    one digit after the point, as ``".1e"``), ``10⁻⁵`` for ``1e-5`` with ``".0p"``, ``0.5`` for an exponent of 0 and
    ``0`` for zero; a minus sign (not a hyphen) for a negative value. A glued string in plain text, since a glued value
    in the text is not typeset as math. :func:`number_range` and :func:`number_list` take the same spec.
    Refuses a spec other than ``".<digits>p"``, NaN and infinities.

    >>> power_of_ten(3.2e-13), power_of_ten(1e-5, ".0p"), power_of_ten(-4.04e-1, ".0p"), power_of_ten(7.5, ".1p")
    ('3.2×10⁻¹³', '10⁻⁵', '−4×10⁻¹', '7.5')
    """
    match = _POWER_SPEC.fullmatch(spec) if isinstance(spec, str) else None
    if match is None:
        raise ValueError(f"power_of_ten needs a spec '.<digits>p' (digits after the point, as '.1e'), got {spec!r}")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"power_of_ten needs a real number, got {value!r}")
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"power_of_ten needs a finite number, got {value!r}")
    if value == 0:
        return "0"
    mantissa, exponent = format(abs(float(value)), f".{match[1]}e").split("e")
    sign, exponent = (MINUS if value < 0 else ""), int(exponent)
    if exponent == 0:
        return sign + mantissa
    power = "10" + str(exponent).translate(_SUPERSCRIPT)
    return sign + (power if mantissa == "1" else f"{mantissa}\u00d7{power}")


def _finite_real(value, who: str, hint: str = "") -> float | None:
    """``value`` as a finite ``float`` for ``who`` (a number formatter): ``None`` for a numpy or torch scalar, which
    the caller formats again through ``.item()``; ``TypeError`` for anything else that is not a real number,
    ``ValueError`` (with ``hint`` after it) for NaN and the infinities."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        if hasattr(value, "item"):  # a numpy or torch scalar
            return None
        raise TypeError(f"{who} needs a real number, got {value!r}")
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{who} needs a finite number, got {value!r}{hint}")
    return value


def significant(value, digits: int = 3) -> str:
    """A number for a table cell or a glued sentence with ``digits`` significant digits, trailing zeros kept, in
    one style for every size: plain from 10⁻³ up to 10 to the power ``digits`` (``"2.00"``, ``"0.0123"``, ``"481"``),
    as a power of ten outside it, where plain digits would claim more precision than ``digits`` (``"1.26×10⁸"``, ``"3.40×10⁻⁵"``, not ``"1.26e+08"`` or ``"126262880.860"``); a minus sign (not a
    hyphen); ``"0"`` for zero of either sign (never ``"-0.0"``). Refuses NaN, infinities and ``digits < 1``.

    >>> significant(126262880.86), significant(2.0), significant(-0.0123), significant(-0.0), significant(3.4e-5)
    ('1.26×10⁸', '2.00', '−0.0123', '0', '3.40×10⁻⁵')
    """
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 1:
        raise ValueError(f"significant needs a whole number of digits >= 1, got {digits!r}")
    number = _finite_real(value, "significant", ": say in words what an infinite or undefined value means (e.g. 'diverges')")
    if number is None:
        return significant(value.item(), digits)
    value = number
    if value == 0:
        return "0"
    text = format(abs(value), f"#.{digits}g")
    if "e" in text or float(text) < 1e-3:
        return power_of_ten(value, f".{digits - 1}p")
    return (MINUS if value < 0 else "") + text.rstrip(".")


def signed_percent(fraction, digits: int = 1) -> str:
    """A change as a signed percentage for a table cell or a glued sentence: ``"+1.4%"``, ``"−0.6%"`` (a minus sign, not
    a hyphen), and ``"0.0%"`` without a sign where the change rounds to zero at ``digits`` decimals (an A/A row read
    "+0.0%": screenshot read, issue 33). ``fraction`` is the change as a fraction (0.014 for 1.4%). Refuses NaN,
    infinities and ``digits < 0``.

    >>> signed_percent(0.0141), signed_percent(-0.006), signed_percent(0.0004), signed_percent(-0.0004), signed_percent(0.12, 0)
    ('+1.4%', '−0.6%', '0.0%', '0.0%', '+12%')
    """
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 0:
        raise ValueError(f"signed_percent needs a whole number of digits >= 0, got {digits!r}")
    number = _finite_real(fraction, "signed_percent")
    if number is None:
        return signed_percent(fraction.item(), digits)
    fraction = number
    text = f"{abs(fraction) * 100:.{digits}f}"
    if float(text) == 0:
        return text + "%"
    return ("+" if fraction > 0 else MINUS) + text + "%"


def _number(value, spec: str, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a real number, got {value!r}")
    if value != value:
        raise ValueError(f"{what} is NaN: a range of values needs numbers")
    if _POWER_SPEC.fullmatch(spec):
        return power_of_ten(value, spec)
    try:
        text = format(value, spec)
    except ValueError as err:
        raise ValueError(f"cannot format {what} {value!r} with {spec!r} ({err})") from None
    return MINUS + text[1:] if text.startswith("-") else text


def number_range(low, high, spec: str = "") -> str:
    """A range of values as the labs write it in tables and glued text: ``"0.88–0.90"`` (an en dash, a minus sign
    for a negative end), each end formatted with ``spec``; one value when both ends print the same. Refuses
    ``low > high`` and NaN.

    >>> number_range(0.8812, 0.9049, ".2f"), number_range(7, 7, "d"), number_range(-1.5, 2, ".1f")
    ('0.88–0.90', '7', '−1.5–2.0')
    """
    a, b = _number(low, spec, "the low end"), _number(high, spec, "the high end")
    if low > high:
        raise ValueError(f"the low end {low!r} is above the high end {high!r}: give number_range(low, high)")
    return a if a == b else f"{a}{RANGE_DASH}{b}"


THOUSANDS = "\u202f"  # narrow no-break space: "10 000" as the chapters' $10\,000$, never split at the line's end


def whole_number(n) -> str:
    r"""A whole number in the book's one style: digits grouped by three with a narrow no-break space from five digits on
    (``"10 000"``, ``"10 541"``, as ch03's :math:`m = 10\,000` and Fig 7.4's "20 000"), four digits ungrouped
    (``"2000"``, ``"9999"``), a minus sign. The tables wrote "10000" beside "m = 10 000" in the text (screenshot read
    46, issue 33). Refuses a number that is not whole.

    >>> whole_number(10000), whole_number(2000), whole_number(-123456), whole_number(10.0)
    ('10 000', '2000', '−123 456', '10')
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Real) or float(n) != int(n):
        raise ValueError(f"whole_number needs a whole number, got {n!r}")
    n = int(n)
    digits = str(abs(n))
    if len(digits) >= 5:
        digits = f"{abs(n):,}".replace(",", THOUSANDS)
    return (MINUS if n < 0 else "") + digits


def vector_text(values, decimals: int = 4) -> str:
    """A short vector as the text writes it, ``"(1.2247, −1.2247, 0.0000)"``: round brackets, each entry with
    ``decimals`` decimals and a minus sign (what a lab's cell built with a lambda: screenshot read, issue 33).
    Takes a sequence, a numpy array or a torch tensor of one dimension.

    >>> vector_text([1.22474, -1.22474, 0.0])
    '(1.2247, −1.2247, 0.0000)'
    """
    if hasattr(values, "tolist"):
        values = values.tolist()
    if isinstance(values, (str, bytes)) or not all(isinstance(v, numbers.Real) and not isinstance(v, bool)
                                                   for v in values):
        raise TypeError(f"vector_text needs a one-dimensional sequence of numbers, got {values!r}")
    return "(" + ", ".join(_number(float(v), f".{decimals}f", "an entry") for v in values) + ")"


def value_and_error(value, error, error_digits: int = 2) -> str:
    """A measurement and its error as ``"3.020 ± 0.057"``: the error rounded to ``error_digits`` significant digits,
    the value to the same decimal place, so that the error never carries more digits than the value (the table
    printed "3.02 ± 0.0566" and "301 ± 1.50": screenshot read, issue 33). A minus sign for a negative value. Values
    that need a power of ten (below 10⁻³ or above 10⁶) and an error of 0 fall back to :func:`significant` for each
    part. Refuses a negative or non-finite error.

    >>> value_and_error(3.0213, 0.0566), value_and_error(301.2, 1.50), value_and_error(-0.4, 0.123)
    ('3.021 ± 0.057', '301.2 ± 1.5', '−0.40 ± 0.12')
    """
    value, error = (v.item() if hasattr(v, "item") else v for v in (value, error))  # numpy or torch scalars
    for name, v in (("value", value), ("error", error)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"value_and_error needs real numbers, got {name}={v!r}")
    value, error = float(value), float(error)
    if not (error == error and abs(error) != float("inf") and value == value and abs(value) != float("inf")):
        raise ValueError(f"value_and_error needs finite numbers, got {value!r} ± {error!r}")
    if error < 0:
        raise ValueError(f"an error is not negative, got {error!r}")
    if isinstance(error_digits, bool) or not isinstance(error_digits, int) or error_digits < 1:
        raise ValueError(f"value_and_error needs a whole number of digits >= 1, got {error_digits!r}")
    if error == 0 or not 1e-3 <= max(abs(value), error) < 1e6:
        return f"{significant(value)} ± {significant(error, error_digits)}"
    exponent = int(f"{error:e}".split("e")[1])  # the error's leading digit is at 10**exponent
    decimals = error_digits - 1 - exponent
    rounded = float(f"{error:.{max(decimals, 0)}f}") if decimals >= 0 else round(error, decimals)
    if rounded and int(f"{rounded:e}".split("e")[1]) > exponent:  # 0.0996 -> 0.10: one digit fewer
        decimals -= 1
    spec = f".{max(decimals, 0)}f"
    if decimals >= 0:
        v, e = format(value, spec), format(error, spec)
    else:
        v, e = f"{round(value, decimals):.0f}", f"{round(error, decimals):.0f}"
    return f"{MINUS if v.startswith('-') else ''}{v.lstrip('-')} ± {e}"


WORD_JOINER = "\u2060"  # invisible, no width: forbids the line break a browser may make after an en dash


def unbroken_range(low, high, spec: str = "") -> str:
    """:func:`number_range` (``"0.88–0.90"``) with a word joiner (:data:`WORD_JOINER`) after the en dash, so that a
    browser never breaks the line there. For ranges in a chapter's own markdown tables, which the no-break span of a
    :class:`Table` does not reach (screenshot reads 36 and 41: Table 8.2 read "0.88–" / "0.90", Table A.1 "2108–" /
    "2119"). One value, without a dash, where both ends print the same.

    >>> unbroken_range(0.881, 0.903, ".2f") == "0.88–" + WORD_JOINER + "0.90"
    True
    """
    return number_range(low, high, spec).replace(RANGE_DASH, RANGE_DASH + WORD_JOINER)


def number_list(values, spec: str = ".2g") -> str:
    """A few numbers for a table cell, ``"0.99, 0.0084, 1.4e-06"``, each formatted with ``spec`` (not an array's
    printout, ``[9.9e-01 8.4e-03 ...]``).

    >>> number_list([0.9912, 0.00841, 1.4e-6])
    '0.99, 0.0084, 1.4e-06'
    """
    if isinstance(values, (str, bytes)):
        raise TypeError(f"number_list needs a sequence of numbers, got {values!r}")
    return ", ".join(_number(float(v) if hasattr(v, "item") and not isinstance(v, numbers.Real) else v, spec, "a value")
                     for v in values)


def _breakable(text: str) -> str:
    """``text`` escaped for HTML, with a ``<wbr>`` after each separator of a long name (:data:`_BREAK_AFTER`); a
    word with an en dash (a range, ``0.88–0.90``) is kept whole (class lnbook-nobreak: no line break at the dash)."""
    out = []
    for n, word in enumerate(re.split(r"(\s+)", text)):
        if n % 2:
            out.append(html.escape(word))
        elif RANGE_DASH in word:
            out.append(f"<span class='lnbook-nobreak'>{html.escape(word)}</span>")
        else:
            out.append("".join(html.escape(part) + ("<wbr>" if k % 2 else "")
                               for k, part in enumerate(_BREAK_AFTER.split(word))))
    return "".join(out)


def _td(text: str) -> str:
    if len(text) <= SHORT_CELL and not any(c.isspace() for c in text):
        return f"<td class='lnbook-short'>{html.escape(text)}</td>"
    return f"<td>{_breakable(text)}</td>"


def _cell(value, spec: str | None, column: str) -> str:
    if value is None:
        return NO_VALUE
    if isinstance(value, Details):
        return value.summary
    if isinstance(value, Lines):
        return str(value)
    if spec is None or isinstance(value, str):
        return str(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"column {column!r} has the format {spec!r} for numbers, got {value!r}")
    try:
        text = format(value, spec)
    except ValueError as err:
        raise ValueError(f"column {column!r}: cannot format {value!r} with {spec!r} ({err})") from None
    return MINUS + text[1:] if text.startswith("-") else text  # a minus sign, not a hyphen (the book's rule)
