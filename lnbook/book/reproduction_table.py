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

import datetime
import re
from collections import Counter
from pathlib import Path

from lnbook.book.reproduction import VERDICTS, Comparison, _fmt, load_comparisons
from lnbook.book.theorem_index import page_title
from lnbook.book.toc import chapter_docs
from lnbook.util.tables import RANGE_DASH, WORD_JOINER, power_of_ten, significant

__all__ = ["SECTION_ORDER", "row_order", "verdict_counts", "reading", "render_table", "render_book_table", "render_recorded_runs", "recorded_chapters", "short_reason",
           "shared_sentences", "repeated_reasons"]

_MARK = {"reproduced": "reproduced", "consistent (reconstruction)": "consistent (reconstruction)", "differs": "**differs**", "not checkable here": "not checkable here"}


def verdict_counts(comparisons: list[Comparison]) -> dict[str, int]:
    """How many comparisons have each verdict, in the order of :data:`lnbook.book.reproduction.VERDICTS`.

    >>> verdict_counts([])
    {'reproduced': 0, 'consistent (reconstruction)': 0, 'differs': 0, 'not checkable here': 0}
    """
    counts = Counter(c.verdict for c in comparisons)
    return {v: counts.get(v, 0) for v in VERDICTS}


#: an empty cell (no paper value, no tolerance, no run at that scale): an em dash, as every other table of the book
MISSING = "—"

#: the scales as the page names them for a reader (issue 33: "small scale", "paper scale"; the switch's value once)
SCALE_WORDS = {"ci": "At the small scale", "paper": "At paper scale"}


def _summary(comparisons: list[Comparison], scale: str) -> str:
    counts = verdict_counts(comparisons)
    parts = ", ".join(f"{n} {'differ' if v == 'differs' and n != 1 else v}" for v, n in counts.items())
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
    return _code_names(str(text)).replace("|", "\\|").replace("\n", " ")


# a dotted name of PyTorch's API (torch.compile, torch.nn.functional.layer_norm) in a reason or note: set as code
_CODE_NAME = re.compile(r"(?<![`\w.$\\])torch(?:\.[A-Za-z_]\w*)+(?![`\w])")


def _code_names(text: str) -> str:
    """``text`` with each dotted ``torch.`` name outside math and outside backticks set as inline code, so the
    reproduction page shows ``torch.compile`` as code, not as plain words (issue 33). The records keep plain text
    (the labs print them, where a backtick would show as itself).

    >>> _code_names("compiled with torch.compile, fused"), _code_names("`torch.compile` and $torch.x$")
    ('compiled with `torch.compile`, fused', '`torch.compile` and $torch.x$')
    """
    out, start = [], 0
    for match in _CODE_NAME.finditer(text):
        before = text[:match.start()]
        if before.count("$") % 2 or before.count("`") % 2:  # inside math or code already
            continue
        out += [text[start:match.start()], f"`{match.group(0)}`"]
        start = match.end()
    return "".join(out) + text[start:]


# a sentence ends at ".", "!" or "?" followed by a space and a capital (inside $...$ nothing is split: see _sentences)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
SHORT_REASON_CHARS = 80  # a reason's short form in a cell: its first clause, cut at a comma when longer than this


def _sentences(reason: str) -> list[str]:
    """The sentences of a reason, in order, each ending with its full stop (a reason is one line or a few sentences;
    math is never split).

    >>> _sentences("paper: qualitative ($x. Y$). MiniLM here is an encoder")
    ['paper: qualitative ($x. Y$).', 'MiniLM here is an encoder.']
    """
    text = str(reason).replace("\n", " ").strip()
    pieces, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        if text.count("$", 0, match.start()) % 2 == 0:  # not inside $...$
            pieces.append(text[start:match.start()].strip())
            start = match.end()
    pieces.append(text[start:].strip())
    # every sentence ends with its full stop, the last one too: a reason's last sentence, written without one, is then
    # word for word the same sentence as in a reason that goes on (notes 7 and 12 of chapter 7 repeated it: issue 33)
    return [p if p.endswith((".", "!", "?")) else p + "." for p in pieces if p]


def short_reason(reason: str, limit: int = SHORT_REASON_CHARS) -> str:
    """The short form of a reason, for the cell of a result that is not checkable here: its first clause (up to the
    first ";" or the end of its first sentence), without a leading "ours, " (the column is ours already), and when
    that is longer than ``limit`` characters, cut at its last comma before the limit that is outside brackets and math
    (none: the whole clause). The reason itself stays in the chapter's notes.

    >>> short_reason("needs the CIFAR files and about 1000 GPU-epochs")
    'needs the CIFAR files and about 1000 GPU-epochs'
    >>> short_reason("ours, on a CPU: +0.6% (A/A noise 1.4%); the norms take about 4.9% of the time. Not a test.")
    'on a CPU: +0.6% (A/A noise 1.4%)'
    >>> short_reason("ours, on a CPU: -10%, with each norm at its faster kernel, eager or compiled, chosen per width (a, b)")
    'on a CPU: -10%, with each norm at its faster kernel, eager or compiled'
    """
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError(f"a result that is not checkable here needs its reason; got {reason!r}")
    first = _sentences(reason)[0]
    semicolons = _top_level(first, ";")
    if semicolons:
        first = first[:semicolons[0]]
    first = re.sub(r"^ours,\s*", "", first.strip()).rstrip(".").strip()
    if len(first) <= limit:
        return first
    commas = _top_level(first[:limit], ",")
    return first[:commas[-1]] if commas and commas[-1] else first


def _top_level(text: str, mark: str) -> list[int]:
    """The places of ``mark`` in ``text`` outside brackets and outside ``$...$`` math."""
    places, depth, in_math = [], 0, False
    for i, ch in enumerate(text):
        if ch == "$":
            in_math = not in_math
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == mark and depth == 0 and not in_math:
            places.append(i)
    return places


def shared_sentences(reasons) -> set[str]:
    """The sentences that two or more different reasons of one table have word for word: each becomes a note of its
    own, which every row that has it refers to (the page repeated two sentences in five notes, issue 33)."""
    counts = Counter(s for reason in dict.fromkeys(r for r in reasons if r) for s in dict.fromkeys(_sentences(reason)))
    return {s for s, n in counts.items() if n > 1}


def repeated_reasons(comparisons) -> set[str]:
    """The short reasons (:func:`short_reason`) that two or more results of one table without a value of ours would
    show in their cells: each such result's cell says only "not checkable here" and refers to one note that gives the
    reason (chapter 8's table said "needs the CIFAR files and about 1000 GPU-epochs" in four cells, issue 33)."""
    counts = Counter(short_reason(c.reason) for c in comparisons
                     if c is not None and c.ours is None and c.verdict == "not checkable here")
    return {reason for reason, n in counts.items() if n > 1}


def _note_refs(refs: list[int]) -> str:
    refs = sorted(set(refs))
    return f"note {refs[0]}" if len(refs) == 1 else "notes " + ", ".join(map(str, refs))


def _ours(c: Comparison | None, notes: list[str], shared: frozenset[str] | set[str] = frozenset(),
          repeated: frozenset[str] | set[str] = frozenset()) -> str:
    """Our value and under it its verdict, in one cell: ``0.8466<br>reproduced``, ``2.5<br>**differs**<br>note 2`` (the
    verdict on a line of its own, never in brackets after the value: "(exact arithmetic) (consistent (reconstruction),
    note 1)" nested three deep, issue 33), and for a result with no value of ours ``not checkable here: needs the CIFAR
    files`` (the reason's :func:`short_reason`). The notes a row refers to are its cell's last line, ``note 2`` or
    ``notes 2, 3``, in every row alike (the page mixed "…, note 1" and "… (note 1)", issue 33).

    The reason, when there is one, goes to ``notes`` (printed under the chapter's table), so that the
    columns stay narrow enough to read on the page: each distinct note once, rows with the same note refer to it;
    a sentence in ``shared`` (:func:`shared_sentences`) is a note of its own; a reason that its short form in the cell
    says whole gets no note; a short reason in ``repeated`` (:func:`repeated_reasons`) is not in the cell but in a note,
    once for every row that has it.
    """
    if c is None:
        return MISSING
    verdict = _MARK[c.verdict]
    short = short_reason(c.reason) if c.ours is None and c.verdict == "not checkable here" else None
    if short in repeated:
        short = None  # the reason is a note, which every row with the same reason refers to
    refs = []
    if c.reason:
        sentences = _sentences(c.reason)
        own = " ".join(s for s in sentences if s not in shared)
        if short is not None and re.sub(r"^ours,\s*", "", own).rstrip(".").strip() == short:
            own = ""  # the cell says it all
        for note in ([own] if own else []) + [s for s in sentences if s in shared]:
            if note not in notes:
                notes.append(note)
            refs.append(notes.index(note) + 1)
    if c.ours is None:
        lines = []
    elif c.ours_digits is not None and isinstance(c.ours, float):  # as the chapter quotes it
        lines = [_cell(significant(c.ours, c.ours_digits))]
    else:
        lines = [_value(c.ours)]
    lines.append(verdict if short is None else f"{verdict}: {short}")
    if refs:  # the notes on a line of their own, in one form for every row ("note 2", "notes 2, 3")
        lines.append(_note_refs(refs))
    return _cell("<br>".join(lines))


_E_NUMBER = re.compile(r"(\d+)(?:\.(\d+))?e[+-]?\d+")


def _power_of_ten(m: re.Match) -> str:
    """``1e-12`` as ``10⁻¹²``, ``2.5e-06`` as ``2.5×10⁻⁶`` (:func:`lnbook.util.tables.power_of_ten`, with the digits the
    number had): nothing a line may break at."""
    return power_of_ten(float(m.group(0)), f".{len(m.group(2) or '')}p")


def _value(value) -> str:
    """A value as :func:`lnbook.book.reproduction._fmt` writes it, its e-notation as a power of ten (``7.772×10⁻¹⁶``),
    which the column cannot break inside; no value is an em dash; a range of two numbers is written with an en dash
    (``0.015–0.02``, ``−2–2``) and a negative number or range end gets a minus sign, not a hyphen."""
    if value is None:
        return MISSING
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        # a range the paper reports, as every other range of the book: "0.015–0.02", not "[0.015, 0.02]" (screenshot
        # read 41 found both forms in the column), a word joiner after the dash so the narrow column cannot break there;
        # both ends with the same decimals, "0.015–0.020" as Table 4.2 writes it, not "0.015–0.02" (screenshot read 46)
        ends = [_value(v) for v in value]
        if all(isinstance(v, float) for v in value) and not any("×" in e or "e" in e for e in ends):
            decimals = max(len(e.partition(".")[2]) for e in ends)
            ends = [re.sub(r"(?<![\w.])-(?=\d)", "−", f"{v:.{decimals}f}") for v in value]
        return (RANGE_DASH + WORD_JOINER).join(ends)
    text = _E_NUMBER.sub(_power_of_ten, _fmt(value))
    return re.sub(r"(?<![\w.])-(?=\d)", "−", text) if isinstance(value, (int, float, list, tuple)) else text


def _tolerance(c: Comparison) -> str:
    """``abs 10⁻¹² + rel 0.001``: each number without e-notation, so that the narrow column breaks only at a space,
    never inside a number (the page showed ``abs 1e-`` / ``12``, issue 33: a browser may break after the hyphen).
    The spaces stay breakable: "abs 0.0025" held together by a no-break space ran 2 px past the 10% column."""
    text = c.tolerance.removeprefix("tolerance ")
    if not text:
        return MISSING
    if all(float(v) == 0 for v in re.findall(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?", text)):
        if isinstance(c.paper, (list, tuple)):
            return RANGE_ONLY  # "abs 0" beside a range read as "must equal 0" (issue 33): the range is the whole criterion
        return EXACT  # "abs 0" is the page's jargon for "no tolerance" (screenshot read, issue 33)
    return _E_NUMBER.sub(_power_of_ten, text)


#: the tolerance cell of a row whose paper value is a range and whose tolerance is zero: ours must lie in the range
RANGE_ONLY = "none beyond the range"
#: the tolerance cell of a row whose tolerance is zero and whose paper value is one value: ours must equal it
EXACT = "exact"


def _note_sentence(note: str) -> str:
    """A note as a sentence, in one form under every table: a capital first letter where the note starts with a
    plain lower-case word ("ours, on a CPU" → "Ours, on a CPU"; a name such as ``torch.compile`` or math is left as it
    is) and a full stop at its end (issue 33: some notes began in capitals, others not).

    >>> _note_sentence("ours, on a CPU: +0.6%"), _note_sentence("torch.compile fuses it."), _note_sentence("$m$ samples")
    ('Ours, on a CPU: +0.6%.', 'torch.compile fuses it.', '$m$ samples.')
    """
    text = str(note).replace("\n", " ").strip()
    if re.match(r"[a-z][a-z'’-]*(?=[\s,:;]|$)", text):
        text = text[0].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


# Within a chapter the rows follow the chapter's sections: the keys (after "chNN-") that start with each prefix, in
# this order, "*" standing for every key no prefix names (in the order of their keys). A chapter not listed is in the
# order of its keys. Chapter 7 interleaved its rows (screenshot read 51, item 14: a speed claim second, the ViT
# exactness row among the uniform-vector rows): folding and exactness, then CCC training, then the uniform vector
# (the rest), then speed, the CCC speed claim with it.
SECTION_ORDER: dict[str, tuple[str, ...]] = {
    "ch07": ("foldable-", "exact-conversion-", "predictions-", "ccc-competitive", "ccc-gap", "ccc-rms-gap", "*",
             "speedup-", "ccc-faster"),
}


def row_order(keys) -> list[str]:
    """``keys`` (of one or several chapters) in the page's order: by chapter, then within a chapter by
    :data:`SECTION_ORDER`, then by key.

    >>> row_order(["ch07-speedup-x", "ch07-minilm-avoids", "ch07-ccc-faster", "ch07-predictions-unchanged", "ch01-b"])
    ['ch01-b', 'ch07-predictions-unchanged', 'ch07-minilm-avoids', 'ch07-speedup-x', 'ch07-ccc-faster']
    """
    def rank(key: str) -> tuple:
        chapter, _, rest = key.partition("-")
        prefixes = SECTION_ORDER.get(chapter, ("*",))
        place = next((n for n, p in enumerate(prefixes) if p != "*" and rest.startswith(p)), prefixes.index("*"))
        return chapter, place, key
    return sorted(set(keys), key=rank)


def render_table(
    ci: list[Comparison],
    paper: list[Comparison],
    chapters: dict[str, str],
    titles: dict[str, str] | None = None,
    recorded_runs: bool | str = False,
) -> str:
    """The table as MyST markdown.

    ``ci`` and ``paper`` are the comparisons recorded at each scale; ``chapters`` maps a chapter id
    (``ch04``) to its page's docname, ``titles`` a docname to its title. The paper-scale columns
    appear only when a paper-scale run was recorded. ``recorded_runs``: the page lists, after the table, runs at the
    papers' sizes made on a CPU (:func:`render_recorded_runs`), so that the sentence on the missing paper-scale column
    says they exist (issue 33: "No paper-scale run is recorded yet" stood above that list); a string names the chapters
    that quote them (``"chapters 5 and 6"``, :func:`recorded_chapters`).
    """
    titles = titles or {}
    by_key_ci = {c.key: c for c in ci}
    by_key_paper = {c.key: c for c in paper}
    keys = row_order(set(by_key_ci) | set(by_key_paper))
    out = [_summary(ci, "ci")]
    if paper:
        out += ["", _summary(paper, "paper")]
    elif recorded_runs:
        which = recorded_runs if isinstance(recorded_runs, str) else "the chapters"
        out += [
            "",
            "No run of every lab at the papers' sizes on a GPU is recorded yet, so the table has no paper-scale column "
            f"(the {{doc}}`preface </book/preface>` says how to make one). Some runs at paper scale, which {which} "
            f"{'quotes' if which.startswith('chapter ') else 'quote'}, were made on a CPU: they are listed after the table.",
        ]
    else:
        out += [
            "",
            "No paper-scale run is recorded yet. A run of every lab at the papers' sizes on a GPU (the "
            "{doc}`preface </book/preface>` says how to make one) would show beside the small-scale values.",
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
        shared = shared_sentences(x.reason for k in keys if chapter_of[k] == chapter
                                  for x in (by_key_ci.get(k), by_key_paper.get(k)) if x is not None)
        repeated = repeated_reasons(x for k in keys if chapter_of[k] == chapter
                                    for x in (by_key_ci.get(k), by_key_paper.get(k)))
        for key in (k for k in keys if chapter_of[k] == chapter):
            c, p = by_key_ci.get(key), by_key_paper.get(key)
            first = c or p
            row = [
                f'<span title="record {key}">{_cell(first.claim)}</span>',
                f"{{cite:p}}`{first.source}`",
                _cell(_value(first.paper)),
                _cell(_tolerance(first)),
                _ours(c, notes, shared, repeated),
            ]
            if paper:
                row.append(_ours(p, notes, shared, repeated))
            out.append("| " + " | ".join(row) + " |")
        if notes:
            # a note is a paragraph, not a cell: its "|" (of $|x|$) stays as it is
            out += [""] + [f"{i}. {_code_names(_note_sentence(note))}" for i, note in enumerate(notes, 1)]
    return "\n".join(out) + "\n"


def _day(date: str) -> str:
    day = datetime.date.fromisoformat(str(date)[:10])
    return f"{day.day} {day:%B} {day.year}"


def _torch_words(version: str) -> str:
    number, _, build = str(version).partition("+")
    return f"torch {number}" + ("" if not build else " (CPU build)" if build == "cpu" else f" (build {build})")


def _depth_run_item(record) -> str:
    """The item of the list for chapter 5's recorded depth sweep (:func:`lnbook.group_ln.paper_runs.read_depth_runs`):
    its network, the seeds stored at each depth (read from the record, ``32 seeds at depths 2 and 4, 2 at depth 8 and 1
    at depth 14``), the epochs, and how and where it ran (threads, torch build, dates, wall time over every run)."""
    from lnbook.group_ln.paper_runs import LAB_PAPER

    by_count: dict[int, list[int]] = {}
    for depth in record.meta["depths"]:
        by_count.setdefault(len(record.seeds_at(depth)), []).append(depth)
    parts = []
    for n, (count, depths) in enumerate(sorted(by_count.items(), reverse=True)):
        where = f"depth{'s' if len(depths) > 1 else ''} {_and(depths)}"
        unit = ("seed" if count == 1 else "seeds") if n == 0 else ""
        parts.append(f"{count} {unit} at {where}".replace("  ", " "))
    provenance = record.meta["provenance"].values()
    threads = {p.get("threads") for p in provenance}
    on = ("one thread of a CPU" if threads == {1} else f"{_and(sorted(threads))} threads of a CPU"
          if None not in threads else "a CPU")
    days = sorted({_day(p["date"]) for p in provenance}, key=lambda d: datetime.datetime.strptime(d, "%d %B %Y"))
    when = days[0] if len(days) == 1 else f"between {days[0]} and {days[-1]}"
    minutes = sum(float(p.get("wall_seconds") or 0) for p in provenance) / 60
    return (f"LN-G with {LAB_PAPER['groups']} groups fitting random labels at depths {_and(record.meta['depths'])} "
            f"({{doc}}`its lab </notebooks/ch05_random_labels_lab>`, {{numref}}`tbl-ch05-paper-depth`): "
            f"{_and(parts)}, {record.meta['config']['epochs']} epochs each, run on {on} with "
            f"{_torch_words(record.meta['torch'])} on {when}, in {minutes:.0f} minutes in all.")


def _drop_in_item(record: dict) -> str:
    """The item of the list for chapter 5's recorded drop-in recall run (:func:`lnbook.group_ln.paper_runs.read_drop_in_recall`):
    what it compares, its sizes, and how and where it ran."""
    sizes, p = record["sizes"], record["provenance"]
    on = "one thread of a CPU" if p.get("threads") == 1 else f"{p.get('threads')} threads of a CPU"
    minutes = float(p.get("wall_seconds") or 0) / 60
    return (f"LN against LN-G with 4 groups in the recall Transformer ({{doc}}`its lab </notebooks/ch05_drop_in_lab>`): "
            f"{len(record['result']['seeds'])} seeds, {sizes['n_train']} training sequences, {sizes['epochs']} epochs "
            f"each, run on {on} with {_torch_words(p['torch'])} on {_day(p['date'])}, in {minutes:.0f} minutes.")


def _and(items) -> str:
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


#: how the commands list a ``--folder`` that named a scratch folder of the machine that ran them (not a path of the book)
SCRATCH = "FOLDER"


def _scratch_folder(command: str) -> str:
    """``command`` with the folder after ``--folder`` written :data:`SCRATCH`: a path of the machine that ran it
    means nothing to a reader (and the page may show no machine path)."""
    return re.sub(r"(--folder[ =])\S+", rf"\g<1>{SCRATCH}", str(command))


def recorded_chapters(paper_folder: Path) -> str:
    """The chapters whose runs at paper scale were recorded on a CPU, as words (``"chapters 5 and 6"``, ``"chapter
    6"``); empty when ``paper_folder`` holds none."""
    from lnbook.group_ln.paper_runs import DEPTH_FILE
    from lnbook.ln_activation.paper_runs import RECORD_NAME

    folder = Path(paper_folder)
    chapters = [n for n, there in ((5, (folder / "recorded" / DEPTH_FILE).exists()), (6, (folder / RECORD_NAME).exists()))
                if there]
    if not chapters:
        return ""
    return ("chapter " if len(chapters) == 1 else "chapters ") + _and(chapters)


def render_recorded_runs(paper_folder: Path) -> str:
    """How and where the runs at paper scale that chapters 5 and 6 quote were made, one item per run: chapter 5's depth
    sweep (:func:`_depth_run_item`), its drop-in recall run (:func:`_drop_in_item`) and chapter 6's runs (torch build, threads, machine, date, wall time:
    :meth:`lnbook.ln_activation.paper_runs.CpuRuns.machine`), and the commands that made them in a dropdown; the
    chapters' sentences name only each run's sizes. Empty when ``paper_folder`` holds no record."""
    from lnbook.group_ln.paper_runs import DEPTH_FILE, DROP_IN_FILE, read_depth_runs, read_drop_in_recall
    from lnbook.ln_activation.paper_runs import PART_TITLES, RECORD_NAME, read_record

    folder = Path(paper_folder)
    which = recorded_chapters(folder)
    if not which:
        return ""
    pages = {5: "{doc}`chapter 5 </book/ch05_group_layernorm>`", 6: "{doc}`chapter 6 </book/ch06_layernorm_as_activation>`"}
    shown = [pages[n] for n in (5, 6) if str(n) in which.split()]
    named = _and(shown).replace("{doc}`chapter", "{doc}`Chapter", 1)  # the sentence's first word
    out = [
        f"**Runs recorded at paper scale on a CPU.** {named} {'quotes' if which.startswith('chapter ') else 'quote'} "
        "runs at paper scale (the labs' `LNBOOK_SCALE=paper` settings, which follow a paper's configuration where it "
        "is known and are our own choices otherwise) that take too long for the book's build: they were made once and "
        "recorded, and the labs read the records at every scale. What each run is, its sizes, and how and where it ran:",
        "",
    ]
    commands = []
    if (folder / "recorded" / DEPTH_FILE).exists():
        depth = read_depth_runs(folder / "recorded")
        out.append(f"- {_depth_run_item(depth)}")
        commands += list(dict.fromkeys(_scratch_folder(p["command"]) for p in depth.meta["provenance"].values()
                                       if p.get("command")))
    if (folder / "recorded" / DROP_IN_FILE).exists():
        drop_in = read_drop_in_recall(folder / "recorded")
        out.append(f"- {_drop_in_item(drop_in)}")
        commands.append(drop_in["provenance"]["command"])
    if (folder / RECORD_NAME).exists():
        record = read_record(folder)
        parts = [part for part in PART_TITLES if part in record.parts]
        for part in parts:
            what, lab = PART_TITLES[part]
            out.append(f"- {what[:1].upper()}{what[1:]} ({{doc}}`its lab </notebooks/{lab}>`): {record.setting(part)}, "
                       f"{record.machine(part)}.")
        commands += [record.provenance(part)["command"] for part in parts]
    out += ["", ":::{dropdown} The commands that made them", ""]
    out += [f"- `{command}`" for command in commands]
    if any(SCRATCH in command for command in commands):
        out += ["", f"A command with `--folder {SCRATCH}` wrote its runs to a folder of its own, whose runs were then added "
                "to the record the lab reads."]
    out += ["", ":::"]
    return "\n".join(out) + "\n"


def render_book_table(root: Path) -> str:
    """The table of the book at ``root`` from its recorded results (what the book's page prints), and after it how
    the recorded CPU runs were made (:func:`render_recorded_runs`)."""
    docs = chapter_docs(root)
    titles = {doc: page_title(root, doc) for doc in docs.values()}
    runs = render_recorded_runs(Path(root) / "results" / "paper")
    table = render_table(load_comparisons("ci"), load_comparisons("paper"), docs, titles,
                         recorded_runs=recorded_chapters(Path(root) / "results" / "paper") if runs else False)
    return table + ("\n" + runs if runs else "")
