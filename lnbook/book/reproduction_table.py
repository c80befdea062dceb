"""The reproduction table: every number of the papers the book reconstructs, ours beside it, with a verdict.

The book's page ``book/reproduction.ipynb`` prints :func:`render_table` as MyST markdown. It reads
what the notebooks recorded through :func:`lnbook.book.reproduction.compare`: ``results/ci/`` (made by
the build's own run) and ``results/paper/`` (committed after a paper-scale run on a GPU), so a new
chapter's comparisons appear with no edit here. Rows are grouped by chapter, each group linked to
its chapter page; the source is a citation; the counts of each verdict come first. A row says what was compared, in
words (the claim); its record key (``ch04-relu-beta0``, an internal name) is only its tooltip (a ``title``), so the
browser check holds this page to the rule that no record key is in the text (issue 33).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from lnbook.book.reproduction import VERDICTS, Comparison, _fmt, load_comparisons
from lnbook.book.theorem_index import page_title
from lnbook.book.toc import chapter_docs
from lnbook.util.tables import power_of_ten

__all__ = ["verdict_counts", "reading", "render_table", "render_book_table", "render_recorded_runs"]

_MARK = {"reproduced": "reproduced", "consistent (reconstruction)": "consistent (reconstruction)", "differs": "**differs**", "not checkable here": "not checkable here"}


def verdict_counts(comparisons: list[Comparison]) -> dict[str, int]:
    """How many comparisons have each verdict, in the order of :data:`lnbook.book.reproduction.VERDICTS`.

    >>> verdict_counts([])
    {'reproduced': 0, 'consistent (reconstruction)': 0, 'differs': 0, 'not checkable here': 0}
    """
    counts = Counter(c.verdict for c in comparisons)
    return {v: counts.get(v, 0) for v in VERDICTS}


#: the scales as the page names them for a reader (issue 33: "small scale", "paper scale"; the switch's value once)
SCALE_WORDS = {"ci": "At the small scale (`ci`)", "paper": "At paper scale"}


def _summary(comparisons: list[Comparison], scale: str) -> str:
    counts = verdict_counts(comparisons)
    parts = ", ".join(f"{n} {v}" for v, n in counts.items())
    line = f"{SCALE_WORDS[scale]}: {len(comparisons)} results; {parts}."
    return line + (" " + reading(counts) if comparisons else "")


def _n(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def reading(counts: dict[str, int]) -> str:
    """What a reader should conclude from the verdict counts (:func:`verdict_counts`), in words.

    >>> reading({"reproduced": 0, "consistent (reconstruction)": 3, "differs": 1, "not checkable here": 2})[:62]
    'Of the 4 results this build can check, 3 agree with the papers'
    """
    rep, cons = counts["reproduced"], counts["consistent (reconstruction)"]
    differs, unchecked = counts["differs"], counts["not checkable here"]
    checkable = rep + cons + differs
    out = []
    if checkable:
        agree = f"{rep + cons} agree with the papers" if rep + cons != 1 else "1 agrees with its paper"
        out.append(
            f"Of the {_n(checkable, 'result', 'results')} this build can check, {agree} and "
            f"{differs} {'differs' if differs == 1 else 'differ'}"
            + (" (the rows marked **differs**, with their notes)." if differs else ".")
        )
    if cons:
        none = "None is *reproduced*: " if rep == 0 else f"Only {rep} {'is' if rep == 1 else 'are'} *reproduced*: "
        out.append(
            none + f"{_n(cons, 'agreement rests', 'agreements rest')} on a definition, constant or set-up that we "
            "reconstructed because the paper's is not available to us (or on an identity), so "
            f"{'it is' if cons == 1 else 'they are'} *consistent (reconstruction)*: evidence that our reading of "
            "the paper holds, not a reproduction of its exact numbers."
        )
    if unchecked:
        out.append(
            f"{_n(unchecked, 'result needs', 'results need')} data or compute that this build does not have "
            "(see the notes); a paper-scale run on a GPU can check some of them."
        )
    return " ".join(out)


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _ours(c: Comparison | None, notes: list[str]) -> str:
    """Our value and its verdict in one cell: ``0.8466 (reproduced)``, ``2.5 (**differs**, note 2)``.

    The reason, when there is one, goes to ``notes`` (printed under the chapter's table), so that the
    columns stay narrow enough to read on the page; rows with the same reason share its note.
    """
    if c is None:
        return "-"
    verdict = _MARK[c.verdict]
    if c.reason:
        if c.reason not in notes:
            notes.append(c.reason)
        verdict += f", note {notes.index(c.reason) + 1}"
    value = "" if c.ours is None else f"{_value(c.ours)} "
    return _cell(f"{value}({verdict})")


_E_NUMBER = re.compile(r"(\d+)(?:\.(\d+))?e[+-]?\d+")


def _power_of_ten(m: re.Match) -> str:
    """``1e-12`` as ``10⁻¹²``, ``2.5e-06`` as ``2.5×10⁻⁶`` (:func:`lnbook.util.tables.power_of_ten`, with the digits the
    number had): nothing a line may break at."""
    return power_of_ten(float(m.group(0)), f".{len(m.group(2) or '')}p")


def _value(value) -> str:
    """A value as :func:`lnbook.book.reproduction._fmt` writes it, its e-notation as a power of ten (``7.772×10⁻¹⁶``),
    which the column cannot break inside."""
    return _E_NUMBER.sub(_power_of_ten, _fmt(value))


def _tolerance(c: Comparison) -> str:
    """``abs 10⁻¹² + rel 0.001``: each number without e-notation, so that the narrow column breaks only at a space,
    never inside a number (the page showed ``abs 1e-`` / ``12``, issue 33: a browser may break after the hyphen).
    The spaces stay breakable: "abs 0.0025" held together by a no-break space ran 2 px past the 10% column."""
    text = c.tolerance.removeprefix("tolerance ")
    if not text:
        return "-"
    return _E_NUMBER.sub(_power_of_ten, text)


def render_table(
    ci: list[Comparison],
    paper: list[Comparison],
    chapters: dict[str, str],
    titles: dict[str, str] | None = None,
) -> str:
    """The table as MyST markdown.

    ``ci`` and ``paper`` are the comparisons recorded at each scale; ``chapters`` maps a chapter id
    (``ch04``) to its page's docname, ``titles`` a docname to its title. The paper-scale columns
    appear only when a paper-scale run was recorded.
    """
    titles = titles or {}
    by_key_ci = {c.key: c for c in ci}
    by_key_paper = {c.key: c for c in paper}
    keys = sorted(set(by_key_ci) | set(by_key_paper))
    out = [_summary(ci, "ci")]
    if paper:
        out += ["", _summary(paper, "paper")]
    else:
        out += [
            "",
            "No paper-scale run is recorded yet: `python -m lnbook run all --scale paper` (on a GPU) records "
            "one in `results/paper/`, and the next build shows it beside the small-scale values.",
        ]
    if not keys:
        out += ["", "No notebook has recorded a comparison yet."]
        return "\n".join(out) + "\n"

    header = ["result", "source", "paper", "tolerance", "ours, small scale"]
    if paper:
        header += ["ours, paper scale"]
    chapter_of = {k: (by_key_ci.get(k) or by_key_paper[k]).chapter for k in keys}
    for chapter in sorted(set(chapter_of.values())):
        doc = chapters.get(chapter)
        title = f"{{doc}}`{_cell(titles.get(doc, chapter))} </{doc}>`" if doc else chapter
        out += ["", f"**{title}**", ""]
        out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        notes: list[str] = []
        for key in (k for k in keys if chapter_of[k] == chapter):
            c, p = by_key_ci.get(key), by_key_paper.get(key)
            first = c or p
            row = [
                f'<span title="record {key}">{_cell(first.claim)}</span>',
                f"{{cite:p}}`{first.source}`",
                _cell(_value(first.paper)),
                _cell(_tolerance(first)),
                _ours(c, notes),
            ]
            if paper:
                row.append(_ours(p, notes))
            out.append("| " + " | ".join(row) + " |")
        if notes:
            # a note is a paragraph, not a cell: its "|" (of $|x|$) stays as it is
            out += [""] + [f"{i}. {str(note).replace(chr(10), ' ')}" for i, note in enumerate(notes, 1)]
    return "\n".join(out) + "\n"


def render_recorded_runs(paper_folder: Path) -> str:
    """How and where the runs at paper scale that chapter 6 quotes were made (torch build, threads, machine, date, wall
    time: :meth:`lnbook.ln_activation.paper_runs.CpuRuns.machine`), one item per run, and the commands that made them
    in a dropdown; the chapter's sentences name only each run's sizes. Empty when ``paper_folder`` holds no record."""
    from lnbook.ln_activation.paper_runs import PART_TITLES, RECORD_NAME, read_record

    if not (Path(paper_folder) / RECORD_NAME).exists():
        return ""
    record = read_record(paper_folder)
    parts = [part for part in PART_TITLES if part in record.parts]
    out = [
        "**Runs recorded at paper scale on a CPU.** {doc}`Chapter 6 </book/ch06_layernorm_as_activation>` quotes "
        "runs at the papers' sizes that take too long for the book's build: they were made once and recorded, and "
        "its labs read the record at every scale. What each run is, its sizes, and how and where it ran:",
        "",
    ]
    for part in parts:
        what, lab = PART_TITLES[part]
        out.append(f"- {what} ({{doc}}`its lab </notebooks/{lab}>`): {record.setting(part)}; {record.machine(part)}.")
    out += ["", ":::{dropdown} The commands that made them", ""]
    out += [f"- `{record.provenance(part)['command']}`" for part in parts]
    out += ["", ":::"]
    return "\n".join(out) + "\n"


def render_book_table(root: Path) -> str:
    """The table of the book at ``root`` from its recorded results (what the book's page prints), and after it how
    the recorded CPU runs were made (:func:`render_recorded_runs`)."""
    docs = chapter_docs(root)
    titles = {doc: page_title(root, doc) for doc in docs.values()}
    table = render_table(load_comparisons("ci"), load_comparisons("paper"), docs, titles)
    runs = render_recorded_runs(Path(root) / "results" / "paper")
    return table + ("\n" + runs if runs else "")
