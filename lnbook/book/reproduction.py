r"""Numbers against papers: every reported result is compared, printed, glued and recorded.

A notebook that reproduces a number from a paper calls :func:`compare` once per number::

    compare(
        "ch04-relu-beta0",
        "nonlinearity strength beta_0 of ReLU",
        source="joudaki2023isometry",
        paper=math.pi / (2 * (math.pi - 1)),
        ours=nonlinearity_strength("relu"),
        abs_tol=1e-10,
    )

:func:`compare` decides the verdict (``reproduced``, ``consistent (reconstruction)`` when the
number is our reconstruction or an identity, ``differs`` or ``not checkable here``),
shows our value beside the paper's (:class:`ComparisonView`: in a notebook one line with the verdict and the
claim, the numbers folded below it; elsewhere one printed line), glues our value under ``key`` (so prose can
quote it with ``{glue:text}``) and records the comparison in
``results/<scale>/<chapter>.json`` (the chapter is the part of ``key`` before the first ``-``).
The reproduction table of the book is built from these files.

``expect`` is the verdict the book claims. When the verdict differs, :func:`compare` prints a
line starting with :data:`MISMATCH_MARKER`; the notebook tests fail on that line, so a number
that drifts out of its tolerance fails CI, while a paper-scale run on a GPU still completes and
records what it found.
"""

from __future__ import annotations

import contextlib
import contextvars
import html

import json
import math
import numbers
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from lnbook.util.scale import SCALES, current_scale

__all__ = [
    "VERDICTS",
    "MISMATCH_MARKER",
    "Comparison",
    "ComparisonView",
    "ComparisonGroup",
    "comparisons_together",
    "compare",
    "results_dir",
    "load_comparisons",
    "ascii_math",
]

VERDICTS = ("reproduced", "consistent (reconstruction)", "differs", "not checkable here")
MISMATCH_MARKER = "REPRODUCTION MISMATCH"
RESULTS_ENV_VAR = "LNBOOK_RESULTS_DIR"
_KEY = re.compile(r"^(ch\d\d|app[a-z0-9]*)-[a-z0-9][a-z0-9-]*$")

# Mathematics written as ASCII in the text a reader sees (the reproduction table, a lab's comparison line): each
# pattern with what it is. Text inside $...$ (MyST math, typeset by MathJax) and `...` (code) is not searched.
_ASCII_MATH = tuple((re.compile(pattern), what) for pattern, what in (
    (r"<=|>=|!=|=<|=>", "a comparison (write $\\le$, $\\ge$, $\\ne$)"),
    (r"->|<-", "an arrow (write $\\to$)"),
    (r"\+-|\+/-", "a plus-minus (write $\\pm$)"),
    (r"\*\*|\^", "a power (write $x^2$)"),
    (r"\b(?:sqrt|exp|log|cos|sin|tanh|ceil|floor)\s*\(", "a function in ASCII (write $\\sqrt{d}$, $\\cos(\\pi x)$)"),
    (r"\b(?:eps|epsilon|alpha|beta|gamma|delta|sigma|rho|kappa|lambda|psi|phi|theta|pi)(?:_?\d|_[a-z])?\b",
     "a Greek letter spelt out (write $\\varepsilon$, $\\beta_0$)"),
    (r"\b[A-Za-z]_\{?\w", "a subscript (write $x_1$)"),
    (r"[\w)]\s*/\s*\(", "a fraction (write $1/(k-1)$)"),
    (r"(?<![\w.])\d+\s*/\s*[A-Za-z]\b", "a fraction (write $1/N$)"),
    (r"\|[^|\n]+\|", "an absolute value or norm (write $|x|$, $\\|x\\|$)"),
    (r"(?<![\w.'])[A-Za-z]\s*[=<>]\s*[\w(.-]", "a relation (write $d = 3$, $m < 6$)"),
    (r"\s~\s", "a distribution (write $\\sim$)"),
    (r"(?<![\w'])[A-Za-z]'+(?![\w'])", "a prime (write $f'$)"),
))
_MATH_OR_CODE = re.compile(r"\$[^$\n]+\$|`[^`\n]*`")


def ascii_math(text: str) -> list[str]:
    """The pieces of ``text`` that write mathematics in ASCII (``sqrt(d)``, ``<=``, ``^2``, ``eps``, ``1/(k-1)``),
    each with what it is, outside ``$...$`` (MyST math) and backticks (code).

    >>> [found.split(": ")[0] for found in ascii_math("max |x| over d = 3 inputs, sqrt(d) <= 2")]
    ["'<='", "'sqrt('", "'|x|'", "'d = 3'"]
    >>> ascii_math("max $|x|$ over $d = 3$ inputs, $\\sqrt{d} \\le 2$, `eps=0`")
    []
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    plain = _MATH_OR_CODE.sub(" ", text)
    found = []
    for pattern, what in _ASCII_MATH:
        found += [f"{m.group(0).strip()!r}: {what}" for m in pattern.finditer(plain)]
    return found


def _refuse_ascii_math(key: str, **texts) -> None:
    for name, text in texts.items():
        if isinstance(text, str) and ascii_math(text):
            raise ValueError(
                f"{key}: the {name} writes mathematics in ASCII, which the reproduction table shows as it is: "
                + "; ".join(ascii_math(text)) + ". Write it as MyST math between $...$ (or name code in backticks)"
            )


@dataclass(frozen=True)
class Comparison:
    """One result of a paper beside ours, with the tolerance and the verdict."""

    key: str
    claim: str
    source: str
    paper: float | list[float] | str | bool | None
    ours: float | str | bool | None
    tolerance: str
    verdict: str
    expected: str
    reason: str
    scale: str
    ours_digits: int | None = None  # significant digits of ours on the reproduction page (None: the page's default)

    @property
    def chapter(self) -> str:
        return self.key.split("-", 1)[0]

    @property
    def as_expected(self) -> bool:
        return self.verdict == self.expected

    def line(self) -> str:
        """``[reproduced] claim: ours 0.8466 | paper 0.8466 (tolerance 1e-10)``."""
        text = f"[{self.verdict}] {self.claim}: ours {_fmt(self.ours)} | paper {_fmt(self.paper)}"
        if self.tolerance:
            text += f" ({self.tolerance})"
        if self.reason:
            text += f" - {self.reason}"
        return text


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):  # a yes/no claim (compare with paper=True): never 1 or True on the page
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _number(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}; a NaN result is a failed run, not a number")
    return value


def _tolerance(abs_tol, rel_tol) -> tuple[float, float, str]:
    if abs_tol is None and rel_tol is None:
        raise ValueError("state a tolerance: pass abs_tol=..., rel_tol=... or both")
    a = 0.0 if abs_tol is None else _number(abs_tol, "abs_tol")
    r = 0.0 if rel_tol is None else _number(rel_tol, "rel_tol")
    if a < 0 or r < 0:
        raise ValueError(f"tolerances must be >= 0, got abs_tol={abs_tol}, rel_tol={rel_tol}")
    parts = ([f"abs {a:.3g}"] if abs_tol is not None else []) + ([f"rel {r:.3g}"] if rel_tol is not None else [])
    return a, r, "tolerance " + " + ".join(parts)


def compare(
    key: str,
    claim: str,
    *,
    source: str,
    paper,
    ours,
    abs_tol: float | None = None,
    rel_tol: float | None = None,
    expect: str | None = None,
    reason: str = "",
    reconstruction: bool = False,
    record: bool = True,
    show: bool = True,
    ours_digits: int | None = None,
) -> Comparison:
    """Compare ``ours`` with the paper's value; print, glue and record the comparison.

    ``paper`` is a number, a ``(low, high)`` range the paper reports, ``True``/``False`` for a yes/no claim
    (``ours`` a bool too; they match when equal, with no tolerance; shown as yes/no), or ``None`` when the paper
    gives no number we can compare with. ``ours`` is a number, or ``None`` when the result cannot be
    computed here (then ``reason`` must say why). A number matches when
    ``|ours - paper| <= abs_tol + rel_tol * |paper|``; a range when
    ``low - abs_tol - rel_tol*|low| <= ours <= high + abs_tol + rel_tol*|high|``.
    A non-numeric ``paper`` (a qualitative claim) needs ``ours`` to be a string too and is judged by
    the caller: pass the verdict through ``expect`` and explain it in ``reason``.

    ``reconstruction=True`` says that the number compared with the paper's is a mathematical
    identity or our own reconstruction (of a definition, a constant or a configuration the paper's
    text does not give us): a match is then ``consistent (reconstruction)``, never ``reproduced``,
    and ``reason`` must say what is reconstructed. ``expect`` defaults to the verdict of a match.
    ``ours_digits`` prints a number of ours on the reproduction page with that many significant digits, as the chapter
    quotes it (0.733 where the page's default printed 0.7335 beside the chapter's Table 4.1: screenshot read 48, item
    14); it changes nothing else.
    """
    if ours_digits is not None and (isinstance(ours_digits, bool) or not isinstance(ours_digits, int) or ours_digits < 1):
        raise ValueError(f"{key}: ours_digits must be a whole number of significant digits >= 1, got {ours_digits!r}")
    if not isinstance(reconstruction, bool):
        raise TypeError(f"reconstruction must be True or False, got {reconstruction!r}")
    if reconstruction and not reason:
        raise ValueError(f"{key}: say what is reconstructed (reason=...) when reconstruction=True")
    if expect is None:
        expect = "consistent (reconstruction)" if reconstruction else "reproduced"
    if not isinstance(key, str) or not _KEY.match(key):
        raise ValueError(
            f"key must look like 'ch05-random-label-fit' (chapter prefix chNN or appX, then lower-case "
            f"words joined by '-'), got {key!r}"
        )
    if expect not in VERDICTS:
        raise ValueError(f"expect must be one of {VERDICTS}, got {expect!r}")
    if not isinstance(source, str) or not source:
        raise ValueError("source must name the paper (its key in references.bib)")
    _refuse_ascii_math(key, claim=claim, reason=reason, paper=paper, ours=ours)

    tolerance = ""
    if paper is None or ours is None:
        if not reason:
            raise ValueError(f"{key}: say why the result is not checkable here (reason=...)")
        verdict = "not checkable here"
        paper_rec = paper if isinstance(paper, (str, bool, type(None))) else _paper_value(paper)
        ours_rec = ours if isinstance(ours, (str, bool, type(None))) else _number(ours, "ours")
    elif isinstance(paper, str):
        if not isinstance(ours, str) or not reason:
            raise ValueError(
                f"{key}: a qualitative claim (paper={paper!r}) needs ours as a string and a reason "
                "that says how it was judged"
            )
        verdict, paper_rec, ours_rec = expect, paper, ours
    elif isinstance(paper, bool) or isinstance(ours, bool):
        if not (isinstance(paper, bool) and isinstance(ours, bool)):
            raise TypeError(f"{key}: a yes/no claim needs paper and ours both True or False, got {paper!r} and {ours!r}")
        if abs_tol is not None or rel_tol is not None:
            raise ValueError(f"{key}: a yes/no claim matches only when equal: drop abs_tol and rel_tol")
        paper_rec, ours_rec, tolerance = paper, ours, "tolerance exact"
        verdict = ("consistent (reconstruction)" if reconstruction else "reproduced") if ours == paper else "differs"
    else:
        a, r, tolerance = _tolerance(abs_tol, rel_tol)
        ours_rec = _number(ours, "ours")
        paper_rec = _paper_value(paper)
        if isinstance(paper_rec, list):
            lo, hi = paper_rec
            ok = lo - a - r * abs(lo) <= ours_rec <= hi + a + r * abs(hi)
        else:
            ok = abs(ours_rec - paper_rec) <= a + r * abs(paper_rec)
        verdict = ("consistent (reconstruction)" if reconstruction else "reproduced") if ok else "differs"

    result = Comparison(
        key=key,
        claim=claim,
        source=source,
        paper=paper_rec,
        ours=ours_rec,
        tolerance=tolerance,
        verdict=verdict,
        expected=expect,
        reason=reason,
        scale=current_scale(),
        ours_digits=ours_digits,
    )
    if show:
        if _GROUPED.get() is not None:  # inside comparisons_together(): shown with the others when the block ends
            _GROUPED.get().append(result)
        else:
            _show(result)
        if not result.as_expected:
            print(f"{MISMATCH_MARKER}: {key} is {result.verdict!r}, the book says {result.expected!r}")
    _glue(result)
    if record:
        _record(result)
    return result


class ComparisonView:
    """How :func:`compare` shows a comparison in a notebook: in HTML (the book, Jupyter) one line with the verdict
    and the claim, the numbers and the reason folded below it (a ``<details>`` element, so a lab page reads as text
    with its checks at hand, not as a log); as text, :meth:`Comparison.line`."""

    def __init__(self, comparison: Comparison):
        self.comparison = comparison

    def __repr__(self) -> str:
        return self.comparison.line()

    def _repr_html_(self) -> str:
        c = self.comparison
        numbers = f"ours {_fmt(c.ours)}, paper {_fmt(c.paper)}" + (f" ({c.tolerance})" if c.tolerance else "")
        reason = f"<br>{_html_with_math(c.reason)}" if c.reason else ""
        return (f"<details class='lnbook-comparison'><summary>Checked against the paper: <em>{html.escape(c.verdict)}"
                f"</em> \N{EM DASH} {_html_with_math(c.claim)}</summary><p>{_html_with_math(numbers)}{reason}</p></details>")


class ComparisonGroup:
    """Several comparisons shown as one: in HTML one ``<details>`` whose line counts them by verdict, each comparison
    inside it as :class:`ComparisonView` shows it (its line, its numbers and reason folded below); as text, their
    lines. What :func:`comparisons_together` displays, so that a lab's six checks of one section are one line on the
    page, not six. Every comparison is still recorded by :func:`compare` for the reproduction table."""

    def __init__(self, comparisons, not_checkable_because: str | None = None):
        self.comparisons = list(comparisons)
        if not self.comparisons or not all(isinstance(c, Comparison) for c in self.comparisons):
            raise TypeError(f"ComparisonGroup needs a non-empty list of Comparison, got {comparisons!r}")
        if not_checkable_because is not None:
            if not isinstance(not_checkable_because, str) or not not_checkable_because.strip():
                raise TypeError("not_checkable_because is the reason in a few words (a string), got "
                                f"{not_checkable_because!r}")
            others = [f"{c.key}: {c.verdict}" for c in self.comparisons if c.verdict != "not checkable here"]
            if others:
                raise ValueError(f"not_checkable_because says that none of these comparisons can be checked here, but "
                                 f"{others} can: drop it, and the line counts the comparisons by verdict")
        self.not_checkable_because = not_checkable_because

    def summary(self) -> str:
        """``"6 comparisons: 5 not checkable here, 1 consistent (reconstruction)"``, verdicts in order of first use;
        with ``not_checkable_because`` (every comparison not checkable here), a sentence: ``"None of these six claims
        of the paper can be checked here: <because>."`` (``"Neither of these two claims ..."``, ``"This claim ...
        cannot ..."``)."""
        n = len(self.comparisons)
        if self.not_checkable_because is not None:
            because = self.not_checkable_because.strip().rstrip(".")
            if n == 1:
                return f"This claim of the paper cannot be checked here: {because}."
            if n == 2:
                return f"Neither of these two claims of the paper can be checked here: {because}."
            return f"None of these {_NUMBER_WORDS.get(n, str(n))} claims of the paper can be checked here: {because}."
        counts: dict[str, int] = {}
        for c in self.comparisons:
            counts[c.verdict] = counts.get(c.verdict, 0) + 1
        return f"{n} comparison{'' if n == 1 else 's'}: " + ", ".join(f"{k} {v}" for v, k in counts.items())

    def __repr__(self) -> str:
        return "\n".join(c.line() for c in self.comparisons)

    def _repr_html_(self) -> str:
        items = "".join(f"<li>{ComparisonView(c)._repr_html_()}</li>" for c in self.comparisons)
        line = html.escape(self.summary() if self.not_checkable_because is not None
                           else f"Checked against the paper: {self.summary()}")
        return (f"<details class='lnbook-comparison lnbook-comparison-group'><summary>{line}</summary>"
                f"<ul>{items}</ul></details>")


_GROUPED: contextvars.ContextVar[list | None] = contextvars.ContextVar("lnbook_grouped_comparisons", default=None)


_NUMBER_WORDS = {3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten",
                 11: "eleven", 12: "twelve"}


@contextlib.contextmanager
def comparisons_together(not_checkable_because: str | None = None):
    """Inside this block, :func:`compare` (with ``show=True``) records and checks each comparison as always, prints a
    mismatch at once, and keeps its view; at the end of the block the comparisons are shown as one
    :class:`ComparisonGroup` (nothing when there were none). Nested blocks show at their own end.
    ``not_checkable_because``: when no comparison of the block can be checked here, the reason in a few words, and
    the group's line is a sentence ("None of these six claims of the paper can be checked here: ..."); the group
    refuses it (``ValueError``) when a comparison has another verdict."""
    if not_checkable_because is not None and (not isinstance(not_checkable_because, str) or not not_checkable_because.strip()):
        raise TypeError(f"not_checkable_because is the reason in a few words (a string), got {not_checkable_because!r}")
    collected: list = []
    token = _GROUPED.set(collected)
    try:
        yield collected
    finally:
        _GROUPED.reset(token)
    if collected:
        _display_or_print(ComparisonGroup(collected, not_checkable_because))


def _html_with_math(text: str) -> str:
    """``text`` escaped for HTML, its ``$...$`` as the inline math that Sphinx writes (``\\(...\\)`` in a span of class
    ``math``), which MathJax typesets in the book and in Jupyter."""
    out, end = [], 0
    for m in re.finditer(r"\$([^$\n]+)\$", text):
        out += [html.escape(text[end:m.start()]),
                f'<span class="math notranslate nohighlight">\\({html.escape(m.group(1))}\\)</span>']
        end = m.end()
    return "".join(out) + html.escape(text[end:])


def _show(result: Comparison) -> None:
    """In a notebook kernel, display :class:`ComparisonView`; elsewhere (a script, a test) print the line."""
    _display_or_print(ComparisonView(result))


def _display_or_print(view) -> None:
    """In a notebook kernel, display ``view``; elsewhere (a script, a test) print its text form."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency of the book
        get_ipython = None
    shell = get_ipython() if get_ipython is not None else None
    if shell is not None and getattr(shell, "kernel", None) is not None:
        from IPython.display import display

        display(view)
    else:
        print(repr(view))


def _paper_value(paper):
    if isinstance(paper, (list, tuple)):
        if len(paper) != 2:
            raise ValueError(f"a reported range must be (low, high), got {paper!r}")
        lo, hi = (_number(v, "paper") for v in paper)
        if lo > hi:
            raise ValueError(f"a reported range must have low <= high, got {paper!r}")
        return [lo, hi]
    return _number(paper, "paper")


def _glue(result: Comparison) -> None:
    """Glue our value under the key when running inside a notebook kernel."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with the book extras
        return
    if get_ipython() is None:
        return
    from myst_nb import glue

    glue(result.key, _fmt(result.ours), display=False)


def _repo_root(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        if (folder / "_toc.yml").exists() and (folder / "lnbook").is_dir():
            return folder
    return None


def results_dir(scale: str | None = None) -> Path:
    """Where comparisons are recorded: ``$LNBOOK_RESULTS_DIR/<scale>`` when set, else ``results/<scale>``
    under the book's root (found from the working directory, else from the package)."""
    scale = current_scale() if scale is None else scale
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    base = os.environ.get(RESULTS_ENV_VAR)
    if base:
        return Path(base) / scale
    root = _repo_root(Path.cwd().resolve()) or _repo_root(Path(__file__).resolve().parent) or Path.cwd()
    return root / "results" / scale


def _record(result: Comparison) -> None:
    folder = results_dir(result.scale)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{result.chapter}.json"
    records = json.loads(path.read_text()) if path.exists() else {}
    records[result.key] = asdict(result)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def load_comparisons(scale: str | None = None) -> list[Comparison]:
    """Every comparison recorded at ``scale`` (default: the current one), sorted by key."""
    folder = results_dir(scale)
    found: list[Comparison] = []
    for path in sorted(folder.glob("*.json")):
        try:
            records = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} is not valid JSON ({err}); delete it and re-run its notebook") from None
        found.extend(Comparison(**rec) for rec in records.values())
    return sorted(found, key=lambda c: c.key)
