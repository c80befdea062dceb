r"""The index of theorems: every labelled ``{prf:...}`` statement of the chapters, with its machine check.

The index page of the book (``book/theorem_index.ipynb``) prints :func:`render_index` as MyST
markdown, so every entry is a ``{prf:ref}`` link that the strict build checks. Statements are read
from the chapters named in ``_toc.yml``, in reading order, so a new chapter appears with no edit here.

A statement is a directive such as::

    :::{prf:theorem} Jacobian of LayerNorm
    :label: thm-ln-jacobian
    ...
    :::

and its **machine check** is the paragraph starting with ``*Machine check.*`` (or
``**Machine check.**``), or the ``Machine check`` dropdown (``Code`` after a definition), that follows it, before the next statement or heading;
the index lists the code it names after ``Code:`` (```lnbook.capacity.build_exact.build_exact_ln_net```) and the
number of test functions it names in backquotes (```test_...```), their names folded in a ``<details>`` per row, so
that a row reads as an index entry, not as a wall of test names (issue 33). A one-line legend says what an empty
cell and a ``-`` mean.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from lnbook.book.toc import chapter_id, toc_files

__all__ = ["Statement", "parse_statements", "book_statements", "page_title", "render_index", "rows_without_code"]

_OPEN = re.compile(r"^(?P<fence>:{3,}|`{3,})\{prf:(?P<kind>[a-z]+)\}[ \t]*(?P<title>.*?)\s*$")
_OPTION = re.compile(r"^:(?P<name>[a-z_-]+):[ \t]*(?P<value>.*?)\s*$")
_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>.*?)\s*$")
_HEADING = re.compile(r"^#{1,6} ")
_CHECK = re.compile(r"^\*{1,2}Machine checks?\.\*{1,2}", re.IGNORECASE)
# "Machine check", "Machine check and records", or "Code" (after a definition, which claims nothing to check)
_CHECK_DROPDOWN = re.compile(r"^(?P<fence>:{3,})\{dropdown\}[ \t]+(?:Machine checks?(?: and records)?|Code)\s*$",
                             re.IGNORECASE)
_TEST_NAME = re.compile(r"`(?:tests/[\w/]+\.py::)?(test_\w+)`")
_CODE = re.compile(r"\bCode:\s*(?P<names>.*)")
_CODE_NAME = re.compile(r"`(lnbook(?:\.\w+)+)`")
NOT_STATEMENTS = ("proof",)  # directives of sphinx-proof that state nothing of their own
NOT_RESULTS = ("definition", "remark", "example", "algorithm")  # statements that claim nothing to check


@dataclass(frozen=True)
class Statement:
    """One labelled statement of a chapter."""

    kind: str  # theorem, lemma, proposition, corollary, definition, remark, ...
    title: str
    label: str | None
    docname: str
    line: int  # 1-based line of the directive in its file
    check: str | None  # the machine-check paragraph, when there is one
    tests: tuple[str, ...]  # the test functions that paragraph names
    code: tuple[str, ...] = ()  # the functions and classes it names after "Code:" (lnbook.capacity.build_exact.x)


def parse_statements(text: str, docname: str) -> list[Statement]:
    """The ``{prf:...}`` statements of one MyST file, with their machine-check paragraphs.

    >>> text = ":::{prf:lemma} Small\\n:label: lem-small\\nBody.\\n:::\\n\\n**Machine check.** `test_small`.\\n"
    >>> [(s.kind, s.title, s.label, s.tests) for s in parse_statements(text, "book/ch09_x")]
    [('lemma', 'Small', 'lem-small', ('test_small',))]
    """
    lines = text.splitlines()
    opened: list[tuple[int, str, str, str | None]] = []  # (index, kind, title, label)
    code: str | None = None  # the fence of the code block we are in: directives there are examples
    directives: list[str] = []  # fences of the open backtick directives
    for i, line in enumerate(lines):
        fence = _FENCE.match(line)
        if code is not None:
            if fence and fence["fence"] == code and not fence["info"]:
                code = None
            continue
        if fence and not fence["info"] and directives and directives[-1] == fence["fence"]:
            directives.pop()
            continue
        if fence and not fence["info"].startswith("{"):
            code = fence["fence"]
            continue
        if fence:
            directives.append(fence["fence"])
        match = _OPEN.match(line)
        if match is None:
            continue
        if match["kind"] in NOT_STATEMENTS:
            continue
        label = None
        for option in lines[i + 1 :]:
            opt = _OPTION.match(option)
            if opt is None:
                break
            if opt["name"] == "label":
                label = opt["value"]
        opened.append((i, match["kind"], match["title"], label))

    statements = []
    for n, (i, kind, title, label) in enumerate(opened):
        end = opened[n + 1][0] if n + 1 < len(opened) else len(lines)
        check = _check_paragraph(lines[i + 1 : end])
        tests = tuple(dict.fromkeys(_TEST_NAME.findall(check))) if check else ()
        named = _CODE.search(check) if check else None  # the names after "Code:", else every lnbook name it gives
        code = tuple(dict.fromkeys(_CODE_NAME.findall(named["names"] if named else check or "")))
        statements.append(Statement(kind, title, label, docname, i + 1, check, tests, code))
    return statements


def _check_paragraph(lines: list[str]) -> str | None:
    """The first machine-check paragraph in ``lines`` (stopping at a heading), joined into one line."""
    for i, line in enumerate(lines):
        if _HEADING.match(line):
            return None
        dropdown = _CHECK_DROPDOWN.match(line.strip())
        if dropdown:  # :::{dropdown} Machine check ... ::: (collapsed on the page)
            paragraph = []
            for more in lines[i + 1:]:
                if more.strip() == dropdown["fence"]:
                    break
                if more.strip() and not more.strip().startswith(":"):
                    paragraph.append(more.strip())
            return " ".join(paragraph)
        if _CHECK.match(line.strip()):
            paragraph = []
            for more in lines[i:]:
                if not more.strip() or _HEADING.match(more):
                    break
                paragraph.append(more.strip())
            return " ".join(paragraph)
    return None


def page_title(root: Path, docname: str) -> str:
    """The first ``# `` heading of a MyST page (the docname when it has none)."""
    path = Path(root) / f"{docname}.md"
    for line in path.read_text().splitlines() if path.exists() else []:
        if line.startswith("# "):
            return line[2:].strip()
    return docname


def book_statements(root: Path) -> list[Statement]:
    """Every statement of every chapter page (``book/chNN_*.md`` in ``_toc.yml``), in reading order."""
    found = []
    for name in toc_files(root):
        path = Path(root) / f"{name}.md"
        if name.startswith("book/") and chapter_id(name) and path.exists():
            found.extend(parse_statements(path.read_text(), name))
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


NO_CHECK = "with a later statement"  # the tests cell of a result with no machine check of its own (was "-")
LEGEND = (
    "*Code* is what computes or constructs the statement; *tests* opens the list of pytest functions that check it. "
    "An empty tests cell: a definition or remark, which claims nothing to check; *in the text*: the chapter describes "
    "the check without naming a test; *with a later statement*: checked together with a later statement."
)


def _pages_phrase(docnames: list[str]) -> str:
    """``8 chapters and an appendix``: the pages counted as a reader sees them (an appendix, ``book/appendix*``, is
    not a chapter: the index said "9 chapters" of a book of 8 and an appendix, issue 33)."""
    appendices = sum(1 for d in docnames if d.rsplit("/", 1)[-1].startswith("appendix"))
    chapters = len(docnames) - appendices
    parts = [f"{chapters} chapter{'' if chapters == 1 else 's'}"] if chapters else []
    if appendices:
        parts.append("an appendix" if appendices == 1 else f"{appendices} appendices")
    return " and ".join(parts) or "no chapter"


def _tests_cell(tests: tuple[str, ...]) -> str:
    """``<details><summary>3 tests</summary>`test_a`, ...</details>``: the count, the names folded under it."""
    names = ", ".join(f"`{t}`" for t in tests)
    return f"<details><summary>{len(tests)} test{'' if len(tests) == 1 else 's'}</summary>{names}</details>"


def render_index(root: Path) -> str:
    """The index as MyST markdown: one table per chapter, each statement a ``{prf:ref}`` link, then the code that
    computes it and its tests (their number; the names folded in a ``<details>``); a legend says what empty cells mean."""
    statements = book_statements(root)
    by_doc: dict[str, list[Statement]] = {}
    for s in statements:
        by_doc.setdefault(s.docname, []).append(s)
    labelled = [s for s in statements if s.label]
    results = [s for s in labelled if s.kind not in NOT_RESULTS]
    named = [s for s in results if s.tests]
    out = [
        f"{len(labelled)} labelled statements in {_pages_phrase(list(by_doc))}, {len(results)} of them results (all but "
        f"definitions and remarks). For {len(named)} results the chapter names the tests that check it in the "
        "machine-check paragraph right after the statement, and they are listed here"
        + ("." if len(named) == len(results) else "; the others are checked together with a later statement, or as "
           "their chapter describes."),
        "",
        LEGEND,
        "",
    ]
    for docname, items in by_doc.items():
        out += [f"**{{doc}}`{_cell(page_title(root, docname))} </{docname}>`**", ""]
        out += ["| statement | code | tests |", "|---|---|---|"]
        for s in items:
            if not s.label:
                continue
            statement = f"{{prf:ref}}`{s.label}`" + (f": {_cell(s.title)}" if s.title else "")
            code = ", ".join(f"`{c}`" for c in s.code)
            if s.kind in NOT_RESULTS:
                tests = ""
            elif s.tests:
                tests = _tests_cell(s.tests)
            else:
                tests = "in the text" if s.check else NO_CHECK
            out.append(f"| {statement} | {code} | {tests} |")
        out.append("")
    return "\n".join(out)


def rows_without_code(index: str) -> list[str]:
    """The labels of the rows of a rendered index (:func:`render_index`) whose code cell is empty: a statement whose
    machine check names no ``Code:`` (issue 33: "one hop" from every statement to its code).

    >>> rows_without_code("| {prf:ref}`thm-a`: A | `lnbook.core.norms.layer_norm` | 1 test |\\n| {prf:ref}`def-b`: B |  |  |")
    ['def-b']
    """
    missing = []
    for line in index.splitlines():
        if line.startswith("| {prf:ref}`"):
            cells = re.split(r"(?<!\\)\|", line)[1:-1]  # | statement | code | tests |, not an escaped \| in a title
            if not cells[1].strip():
                missing.append(line.split("`")[1])
    return missing
