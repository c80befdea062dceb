"""lnbook.book.reproduction_table: every recorded comparison appears, grouped by chapter, with counts and verdicts.
"""

from __future__ import annotations

import re
from pathlib import Path

from lnbook.book.reproduction import compare, load_comparisons
from lnbook.book.reproduction_table import (
    reading,
    render_book_table,
    render_table,
    verdict_counts,
)
from lnbook.book.toc import book_root, chapter_docs

ROOT = book_root(Path(__file__).parent)


def record_some(monkeypatch, tmp_path, scale="ci"):
    monkeypatch.setenv("LNBOOK_RESULTS_DIR", str(tmp_path))
    monkeypatch.setenv("LNBOOK_SCALE", scale)
    compare("ch04-beta", "$\\beta_0$ of ReLU", source="joudaki2023isometry", paper=0.8466, ours=0.8466, abs_tol=1e-3,
            show=False)
    compare("ch04-rate", "a rate | with a pipe", source="joudaki2023isometry", paper=2.0, ours=2.5, rel_tol=0.1,
            expect="differs", reason="finite width", show=False)
    compare("ch05-fit", "CIFAR fit", source="ni2024nonlinearity", paper=1.0, ours=None, expect="not checkable here",
            reason="CIFAR-10 is not shipped", show=False)
    compare("ch99-orphan", "a chapter without a page", source="p", paper=(1.0, 2.0), ours=1.5, abs_tol=0, show=False)
    return load_comparisons(scale)


def rows(table: str) -> list[str]:
    return [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| result")]


def test_table_lists_every_recorded_key_once_under_its_chapter(monkeypatch, tmp_path):
    ci = record_some(monkeypatch, tmp_path)
    table = render_table(ci, [], {"ch04": "book/ch04_x", "ch05": "book/ch05_y"}, {"book/ch04_x": "Isometry"})
    for c in ci:
        assert sum(f'<span title="record {c.key}">' in row for row in rows(table)) == 1, c.key
        assert f"`{c.key}`" not in table, c.key  # the key is a tooltip, not text (issue 33)
    # grouped by chapter, each group linked to its page (a chapter with no page is named plainly)
    heads = re.findall(r"^\*\*(.*)\*\*$", table, re.MULTILINE)
    assert heads == ["{doc}`Isometry </book/ch04_x>`", "{doc}`ch05 </book/ch05_y>`", "ch99"]
    assert ("At the small scale: 4 results; 2 reproduced, 0 consistent (reconstruction), 1 differs, 1 not "
            "checkable here.") in table
    assert "ci scale" not in table and "ci-scale" not in table and "ours (ci)" not in table  # issue 33: words, not the switch
    assert "No paper-scale run is recorded yet" in table and "ours, paper scale" not in table
    beta = next(r for r in rows(table) if "ch04-beta" in r)
    assert "{cite:p}`joudaki2023isometry`" in beta and "| abs 0.001 |" in beta and beta.endswith("| 0.8466<br>reproduced |")
    rate = next(r for r in rows(table) if "ch04-rate" in r)
    assert "a rate \\| with a pipe" in rate and "| 2.5<br>**differs**<br>note 1 |" in rate and "rel 0.1" in rate
    fit = next(r for r in rows(table) if "ch05-fit" in r)
    assert fit.endswith("| not checkable here: CIFAR-10 is not shipped |")  # the reason in short; whole, so no note
    # the reasons are numbered notes under their chapter's table, in the order of the rows
    assert re.findall(r"^(\d+)\. (.*)$", table, re.MULTILINE) == [("1", "Finite width.")]  # a sentence: capital, stop
    assert all(r.count(" | ") == 4 for r in rows(table)), "a cell broke the table"


def test_tolerances_do_not_break_inside_a_number_and_yes_no_claims_read_yes_or_no(monkeypatch, tmp_path):
    """Issue 33: the tolerance column broke "abs 1e-" / "12", and a yes/no claim printed 1 for yes. A tolerance is
    written without e-notation (10⁻¹², 2.5×10⁻⁶: nothing to break at inside a number); a yes/no comparison shows yes/no
    in the paper and ours columns."""
    monkeypatch.setenv("LNBOOK_RESULTS_DIR", str(tmp_path))
    monkeypatch.setenv("LNBOOK_SCALE", "ci")
    compare("ch01-tiny", "an identity", source="p", paper=0.0, ours=1e-13, abs_tol=1e-12, rel_tol=2.5e-6, show=False)
    compare("ch02-below", "an LN-Net ends below the bound", source="p", paper=True, ours=True, show=False)
    table = render_table(load_comparisons(), [], {})
    tiny = next(r for r in rows(table) if "ch01-tiny" in r)
    assert "| abs 10\N{SUPERSCRIPT MINUS}\u00b9\u00b2 + rel 2.5\N{MULTIPLICATION SIGN}10\N{SUPERSCRIPT MINUS}\u2076 |" in tiny
    cells = tiny.split(" | ")
    assert not any(re.search(r"\de[+-]?\d", cell) for cell in cells[2:]), tiny  # no e-notation in any number
    assert tiny.endswith(f"| 10\N{SUPERSCRIPT MINUS}\u00b9\u00b3<br>reproduced |"), tiny
    below = next(r for r in rows(table) if "ch02-below" in r)
    assert below.endswith("| yes | exact | yes<br>reproduced |"), below


def test_paper_scale_columns_appear_beside_ci(monkeypatch, tmp_path):
    ci = record_some(monkeypatch, tmp_path / "a")
    paper = [c for c in record_some(monkeypatch, tmp_path / "b", scale="paper") if c.key != "ch05-fit"]
    table = render_table(ci, paper, chapter_docs(ROOT))
    assert "| ours, small scale | ours, paper scale |" in table and "At paper scale: 3 results;" in table
    fit = next(r for r in rows(table) if "ch05-fit" in r)
    assert fit.endswith("| \N{EM DASH} |")  # no paper-scale run of this one: a dash, as in every table of the book
    assert all(r.count(" | ") == 5 for r in rows(table))


def test_book_table_reads_the_recorded_results(monkeypatch, tmp_path):
    ci = record_some(monkeypatch, tmp_path)
    table = render_book_table(ROOT)
    assert all(f'<span title="record {c.key}">' in table for c in ci)
    assert verdict_counts(ci) == {"reproduced": 2, "consistent (reconstruction)": 0, "differs": 1, "not checkable here": 1}


def test_empty_table_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("LNBOOK_RESULTS_DIR", str(tmp_path))
    assert "No notebook has recorded a comparison yet." in render_book_table(ROOT)


def test_the_headline_says_what_to_conclude():
    """Issue 33: "0 reproduced" with no reason. The counts come with their reading: how many checkable results agree,
    why none is reproduced (every agreement is a reconstruction), and what is not checkable here."""
    book = {"reproduced": 0, "consistent (reconstruction)": 25, "differs": 6, "not checkable here": 13}
    text = reading(book)
    assert text.startswith("Of the 31 results this build can check, 25 agree with the papers and 6 differ")
    assert "None is *reproduced*: 25 agreements rest on a definition, constant or set-up that we reconstructed" in text
    assert "13 results need data or compute that this build does not have" in text
    mixed = reading({"reproduced": 2, "consistent (reconstruction)": 1, "differs": 0, "not checkable here": 0})
    assert mixed.startswith("Of the 3 results this build can check, 3 agree with the papers and 0 differ.")
    assert "Only 2 are *reproduced*: 1 agreement rests" in mixed and "not checkable" not in mixed and "need" not in mixed
    plain = reading({"reproduced": 2, "consistent (reconstruction)": 0, "differs": 1, "not checkable here": 1})
    assert "reconstructed" not in plain and "1 result needs" in plain and "and 1 differs" in plain
    assert reading({"reproduced": 0, "consistent (reconstruction)": 0, "differs": 0, "not checkable here": 2}) == (
        "2 results need data or compute that this build does not have (see the notes); a paper-scale run on a GPU "
        "can check some of them."
    )


def test_chapter_seven_rows_follow_its_sections():
    """Screenshot read 51, item 14: the ch07 block read exactness, a CCC speed claim, CCC, uniform vector, the ViT
    exactness row among the uniform-vector rows, then speed. Rows now go folding/exactness, CCC, uniform vector, speed;
    other chapters keep the order of their keys."""
    from lnbook.book.reproduction import Comparison

    def row(key):
        return Comparison(key=key, claim=key, source="x2024", paper=None, ours=None, tolerance="",
                          verdict="not checkable here", expected="not checkable here", reason="r", scale="ci")

    keys = ["ch07-ccc-competitive", "ch07-ccc-faster", "ch07-ccc-gap", "ch07-ccc-rms-gap", "ch07-exact-conversion-float32",
            "ch07-exact-conversion-float64", "ch07-foldable-layernorms", "ch07-gupta-llms-orthogonal", "ch07-minilm-avoids",
            "ch07-predictions-unchanged", "ch07-small-ln-orthogonal", "ch07-smollm2-avoids", "ch07-speedup-end-to-end-cuda",
            "ch07-speedup-end-to-end-eager", "ch06-b", "ch06-a"]
    table = render_table([row(k) for k in keys], [], {})
    order = re.findall(r'title="record ([a-z0-9-]+)"', table)
    assert order == ["ch06-a", "ch06-b", "ch07-foldable-layernorms", "ch07-exact-conversion-float32",
                     "ch07-exact-conversion-float64", "ch07-predictions-unchanged", "ch07-ccc-competitive", "ch07-ccc-gap",
                     "ch07-ccc-rms-gap", "ch07-gupta-llms-orthogonal", "ch07-minilm-avoids", "ch07-small-ln-orthogonal",
                     "ch07-smollm2-avoids", "ch07-speedup-end-to-end-cuda", "ch07-speedup-end-to-end-eager", "ch07-ccc-faster"]


def test_rows_with_the_same_reason_share_one_note():
    """The screenshot read found four identical notes under one chapter's table: a reason is written once, and
    every row that has it points to that note."""
    from lnbook.book.reproduction import Comparison

    def row(key, reason):
        return Comparison(key=key, claim=key, source="x2024", paper=None, ours=None, tolerance="",
                          verdict="not checkable here", expected="not checkable here", reason=reason, scale="ci")

    cifar, gpu = "needs the CIFAR files; about 1000 GPU-epochs", "needs a GPU; the book's run had none"
    table = render_table([row("ch08-a", cifar), row("ch08-b", gpu), row("ch08-c", cifar)], [], {})
    assert re.findall(r"^(\d+)\. (.*)$", table, re.MULTILINE) == [("1", "N" + cifar[1:] + "."), ("2", "N" + gpu[1:] + ".")]
    assert [r.endswith(f"<br>note {n} |") for r, n in zip(rows(table), (1, 2, 1))] == [True, True, True]


def test_a_sentence_that_several_notes_repeat_is_one_note_and_a_not_checkable_cell_says_why_in_short():
    """Issue 33: five notes under chapter 7's table repeated the same two sentences word for word, and rows without
    a value of ours read only "(not checkable here, note 9)". A sentence that two reasons share is a note of its own,
    which each row refers to (its numbers in order); a cell with no value of ours gives the reason's short form (its
    first clause, cut at a comma when long), and a reason the short form says whole gets no note."""
    from lnbook.book.reproduction import Comparison

    def row(key, reason, ours=None, verdict="not checkable here"):
        return Comparison(key=key, claim=key, source="x2024", paper=None, ours=ours, tolerance="", verdict=verdict,
                          expected=verdict, reason=reason, scale="ci")

    same = "Not a test of the paper's figure: another kernel."
    table = render_table([
        row("ch07-a", f"ours, on a CPU: +0.6% (A/A noise 1.4%); the norms take 4.9% of the time. {same}"),
        row("ch07-b", "no GPU was available"),
        row("ch07-c", f"ours, on a CPU: -10%, with each norm at its faster kernel, eager or compiled, chosen per width "
                      f"(eager at 6 of 6); 1024 tokens. {same} The 50-80% is the reviewers' reading"),
        row("ch07-d", f"a value of ours, measured. {same}", ours=0.5, verdict="consistent (reconstruction)"),
    ], [], {})
    notes = dict(re.findall(r"^(\d+)\. (.*)$", table, re.MULTILINE))
    assert list(notes.values()).count(same) == 1 and not any(same in n for n in notes.values() if n != same), notes
    # every note a sentence (issue 33: notes 3, 5 and 8 began with a capital, the others not; some had no stop)
    assert all(n[0].isupper() and n.endswith(".") for n in notes.values()), notes
    a, b, c, d = rows(table)
    assert a.endswith("| not checkable here: on a CPU: +0.6% (A/A noise 1.4%)<br>notes 1, 2 |"), a
    assert notes["1"] == "Ours, on a CPU: +0.6% (A/A noise 1.4%); the norms take 4.9% of the time." and notes["2"] == same
    assert b.endswith("| not checkable here: no GPU was available |"), b
    assert c.endswith("| not checkable here: on a CPU: -10%, with each norm at its faster kernel, eager or compiled"
                      "<br>notes 2, 3 |"), c
    assert d.endswith("| 0.5<br>consistent (reconstruction)<br>notes 2, 4 |"), d  # the notes in one form in every row
    assert "The 50-80% is the reviewers' reading." in notes["3"]  # said once, in c's own note


def test_short_reason_refuses_a_missing_reason_and_keeps_brackets_and_math_whole():
    import pytest

    from lnbook.book.reproduction_table import short_reason

    with pytest.raises(ValueError, match="needs its reason"):
        short_reason("")
    assert short_reason("needs $a; b$ and more; the rest") == "needs $a; b$ and more"
    long = "needs the data (a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s, t, u, v, w, x, y, z, and more)"
    assert short_reason(long) == long  # no comma outside the brackets: the whole clause


def test_the_recorded_cpu_runs_say_how_and_where_they_ran_and_the_commands_are_folded():
    """Chapter 6's sentences name a recorded run's sizes only; the torch build, machine and date, read from the
    record's provenance, are on the reproduction page, and the commands that made them in a dropdown."""
    from lnbook.book.reproduction_table import render_recorded_runs
    from lnbook.ln_activation.paper_runs import PART_TITLES, read_record

    assert render_recorded_runs(Path("/nonexistent-results")) == ""
    paper = ROOT / "results" / "paper"
    text, record = render_recorded_runs(paper), read_record(paper)
    body, _, folded = text.partition(":::{dropdown}")
    for part in PART_TITLES:
        assert f"{record.setting(part)}, {record.machine(part)}." in body, part
        assert record.provenance(part)["torch"].split("+")[0] in body and record.provenance(part)["date"][:4] in body
        assert "+cpu" not in body and "(x86_64)" not in body  # words, not a log line (shots35, item 2)
        assert f"`{record.provenance(part)['command']}`" in folded and record.provenance(part)["command"] not in body
    assert folded.rstrip().endswith(":::") and text in render_book_table(ROOT)
    # chapter 5's depth record, which Table 5.1 quotes, is listed too, its seeds per depth read from the record
    # (screenshot read 41: the list named chapter 6's runs only)
    from lnbook.group_ln.paper_runs import read_depth_runs

    depth = read_depth_runs(paper / "recorded")
    item = next(line for line in body.splitlines() if line.startswith("- LN-G with 16 groups"))
    counts = {d: len(depth.seeds_at(d)) for d in depth.meta["depths"]}
    groups: dict[int, list[int]] = {}  # the depths with the same number of seeds, said together
    for d in sorted(counts):
        groups.setdefault(counts[d], []).append(d)

    def at(ds):
        return f"depth {ds[0]}" if len(ds) == 1 else "depths " + ", ".join(map(str, ds[:-1])) + f" and {ds[-1]}"

    for i, (n, ds) in enumerate(sorted(groups.items(), reverse=True)):  # the most seeds first, as the item says them
        assert (f"{n} seeds at {at(ds)}" if i == 0 else f"{n} at {at(ds)}") in item, item
    assert "tbl-ch05-paper-depth" in item and "torch 2.13.0 (CPU build)" in item and "one thread" in item, item
    # chapter 5's drop-in recall record, which the chapter glues, is listed with its sizes and its command
    from lnbook.group_ln.paper_runs import read_drop_in_recall

    drop_in = read_drop_in_recall(paper / "recorded")
    recall = next(line for line in body.splitlines() if line.startswith("- LN against LN-G with 4 groups in the recall"))
    assert (f"{len(drop_in['result']['seeds'])} seeds, {drop_in['sizes']['n_train']} training sequences, "
            f"{drop_in['sizes']['epochs']} epochs each" in recall and "one thread" in recall), recall
    assert f"`{drop_in['provenance']['command']}`" in folded
    from lnbook.book.reproduction_table import SCRATCH, _scratch_folder

    assert all(f"`{_scratch_folder(p['command'])}`" in folded for p in depth.meta["provenance"].values())
    assert "/work" not in text and f"--folder {SCRATCH}" in folded  # a scratch folder's path is no machine path
    assert "Chapter 5" in body and "chapters 5 and 6 quote" in render_book_table(ROOT)
    chapter = (ROOT / "book" / "ch06_layernorm_as_activation.md").read_text()
    assert "torch 2" not in chapter and "CPU run" not in chapter  # build details are not in the prose


def test_math_in_a_cell_and_in_a_note_reaches_mathjax_whole():
    """A claim's $|x|$ sits in a table cell, whose "|" must be escaped from the table (markdown-it unescapes it
    inside the cell); a note is a paragraph, where an escaped "\\|" would reach MathJax as the norm bars."""
    from lnbook.book.reproduction import Comparison

    c = Comparison(key="ch01-abs", claim="max $|x|$", source="x2024", paper=None, ours=None, tolerance="",
                   verdict="not checkable here", expected="not checkable here", reason="needs $|y|$; and more", scale="ci")
    table = render_table([c], [], {})
    assert '| <span title="record ch01-abs">max $\\|x\\|$</span> |' in table
    assert "| not checkable here: needs $\\|y\\|$<br>note 1 |" in table  # the short form, escaped in its cell
    assert re.findall(r"^1\. (.*)$", table, re.MULTILINE) == ["Needs $|y|$; and more."]


def test_the_counts_agree_in_number():
    """32b's read found "2 differs" in the headline: one result differs, two differ."""
    from lnbook.book.reproduction import Comparison

    def row(key):
        return Comparison(key=key, claim=key, source="x2024", paper=1.0, ours=2.0, tolerance="tolerance abs 0",
                          verdict="differs", expected="differs", reason="", scale="ci")

    assert "; 0 reproduced, 0 consistent (reconstruction), 2 differ, 0 not checkable here." in render_table(
        [row("ch01-a"), row("ch01-b")], [], {})
    assert ", 1 differs, " in render_table([row("ch01-a")], [], {})


def test_empty_cells_are_dashes_negative_numbers_have_minus_signs_and_no_verdict_nests_in_a_values_brackets():
    """shots35, item 2: empty paper and tolerance cells were "-" hyphens (every other table uses "—"); an interval's
    end printed "[-2, 2]" with a hyphen; "(exact arithmetic) (consistent (reconstruction), note 1)" nested brackets."""
    from lnbook.book.reproduction import Comparison

    def row(key, paper, ours, tolerance=""):
        return Comparison(key=key, claim=key, source="x2024", paper=paper, ours=ours, tolerance=tolerance,
                          verdict="consistent (reconstruction)", expected="consistent (reconstruction)",
                          reason="our reading", scale="ci")

    table = render_table([row("ch03-count", None, "$m - 1$ (exact arithmetic)"), row("ch06-range", (-2.0, 2.0), -0.5,
                                                                                       "tolerance abs 0")], [], {})
    count, interval = rows(table)
    assert count.endswith("| \N{EM DASH} | \N{EM DASH} | $m - 1$ (exact arithmetic)<br>consistent (reconstruction)"
                          "<br>note 1 |"), count
    # a range with a zero tolerance: the range is the whole criterion ("abs 0" beside [50, 100] read as "must be 0")
    assert "| \N{MINUS SIGN}2\N{EN DASH}\N{WORD JOINER}2 | none beyond the range | \N{MINUS SIGN}0.5<br>consistent (reconstruction)<br>note 1 |" in (
        interval), interval
    assert not any(re.search(r"\| -? ?\|", r) for r in rows(table))
    # a zero tolerance beside a single value reads "exact" (the page showed "abs 0": screenshot read, issue 33), and a
    # tolerance beyond a range stays as it is
    table = render_table([row("ch06-zero", 0.0, 0.0, "tolerance abs 0"), row("ch06-wide", (0.0, 1.0), 1.005,
                                                                           "tolerance abs 0.01")], [], {})
    wide, zero = rows(table)  # sorted by key
    assert "| 0 | exact |" in zero and "| 0\N{EN DASH}\N{WORD JOINER}1 | abs 0.01 |" in wide, (zero, wide)
    assert "abs 0 " not in table and "abs 0 |" not in table
    # a range of the papers reads as every other range of the book (screenshot read 41: "[0.015, 0.02]" beside "2–12%")
    table = render_table([row("ch04-range", [0.015, 0.02], 0.017, "tolerance abs 0")], [], {})
    # both ends with the same decimals, as Table 4.2 writes the range (screenshot read 46: "0.015–0.02" there)
    assert "| 0.015\N{EN DASH}\N{WORD JOINER}0.020 |" in table and "[0.015" not in table, table


def test_the_missing_paper_scale_column_is_explained_in_agreement_with_the_recorded_cpu_runs(monkeypatch, tmp_path):
    """shots35, item 2: the intro said "No paper-scale run is recorded yet" above the list of runs recorded at paper
    scale on a CPU. With such runs the sentence says they exist and where they are listed; without, it says none is."""
    ci = record_some(monkeypatch, tmp_path)
    assert "No paper-scale run is recorded yet" in render_table(ci, [], {})
    with_runs = render_table(ci, [], {}, recorded_runs=True)
    assert "No paper-scale run is recorded yet" not in with_runs and "were made on a CPU: they are listed after" in with_runs
    book = render_book_table(ROOT)  # the book ships chapter 6's CPU runs
    assert "No paper-scale run is recorded yet" not in book and "**Runs recorded at paper scale on a CPU.**" in book


def test_a_torch_name_in_a_cell_and_in_a_note_is_set_as_code():
    """A reason that names ``torch.compile`` shows it as code on the page, in the cell and in the note (issue 33),
    while a name already in backticks or inside math is left as it is."""
    from lnbook.book.reproduction import Comparison

    c = Comparison(key="ch07-x", claim="speed-up", source="x2024", paper=None, ours=None, tolerance="",
                   verdict="not checkable here", expected="not checkable here",
                   reason="compiled with torch.compile; then `torch.compile` again and $torch.y$", scale="ci")
    table = render_table([c], [], {})
    assert "| not checkable here: compiled with `torch.compile`<br>note 1 |" in table
    assert re.findall(r"^1\. (.*)$", table, re.MULTILINE) == [
        "Compiled with `torch.compile`; then `torch.compile` again and $torch.y$."]


def test_a_reason_repeated_in_cells_is_one_note_and_a_sentence_with_or_without_its_full_stop_is_one_note():
    """Screenshot read (issue 33): chapter 8's table said "needs the CIFAR files and about 1000 GPU-epochs" in four
    cells; chapter 7's notes 7 and 12 were one sentence, once with a full stop and a second sentence, once without."""
    from lnbook.book.reproduction import Comparison

    def unchecked(key, reason):
        return Comparison(key=key, claim=key, source="x2024", paper=1.0, ours=None, tolerance="",
                          verdict="not checkable here", expected="not checkable here", reason=reason, scale="ci")

    def zero(key, reason):
        return Comparison(key=key, claim=key, source="x2024", paper=0.0, ours=0.0, tolerance="tolerance abs 0",
                          verdict="consistent (reconstruction)", expected="consistent (reconstruction)", reason=reason,
                          scale="ci")

    table = render_table([unchecked("ch08-a", "needs the CIFAR files"), unchecked("ch08-b", "needs the CIFAR files"),
                          unchecked("ch08-c", "needs COCO")], [], {})
    a, b, c = rows(table)
    assert a.endswith("| not checkable here<br>note 1 |") and b.endswith("| not checkable here<br>note 1 |"), (a, b)
    assert c.endswith("| not checkable here: needs COCO |"), c
    assert table.count("CIFAR") == 1 and re.findall(r"^1\. (.*)$", table, re.MULTILINE) == ["Needs the CIFAR files."]
    table = render_table([zero("ch07-a", "paper: qualitative (a reading). MiniLM is an encoder"),
                          zero("ch07-b", "paper: qualitative (a reading)")], [], {})
    assert re.findall(r"^\d+\. (.*)$", table, re.MULTILINE) == ["MiniLM is an encoder.", "Paper: qualitative (a reading)."]
    assert [r.rsplit("<br>", 1)[1] for r in rows(table)] == ["notes 1, 2 |", "note 2 |"]


def test_ours_digits_prints_our_number_as_the_chapter_quotes_it(monkeypatch, tmp_path):
    """Screenshot read 48, item 14: the page printed 0.7335, 0.01466 and 0.4881 where the chapter quotes 0.733, 0.0147
    and 0.49. compare(ours_digits=...) prints ours with that many significant digits on the page (a minus sign, a power
    of ten for small numbers), kept through the record; the verdict uses the full value; other rows are unchanged."""
    import pytest

    monkeypatch.setenv("LNBOOK_RESULTS_DIR", str(tmp_path))
    monkeypatch.setenv("LNBOOK_SCALE", "ci")
    compare("ch04-beta-short", "the strength of ReLU", source="joudaki2023isometry", paper=0.7335, ours=0.73353, abs_tol=1e-3,
            ours_digits=3, show=False)
    compare("ch04-gap-short", "gap", source="joudaki2023isometry", paper=None, ours=-0.014662, ours_digits=3,
            reason="no number", expect="not checkable here", show=False)
    compare("ch01-tiny", "tiny", source="gupta2024reintroducing", paper=0.0, ours=9.215e-15, abs_tol=1e-12,
            ours_digits=2, show=False)
    compare("ch04-plain", "plain", source="joudaki2023isometry", paper=0.8466, ours=0.84661, abs_tol=1e-3, show=False)
    ci = load_comparisons("ci")
    assert {c.key: c.ours_digits for c in ci} == {"ch04-beta-short": 3, "ch04-gap-short": 3, "ch01-tiny": 2,
                                                  "ch04-plain": None}
    table = render_table(ci, [], {})
    cells = {c.key: next(r for r in rows(table) if f"record {c.key}" in r) for c in ci}
    assert "| 0.734<br>reproduced |" in cells["ch04-beta-short"]
    assert "| \u22120.0147<br>not checkable here" in cells["ch04-gap-short"]
    assert "| 9.2\u00d710\u207b\u00b9\u2075<br>" in cells["ch01-tiny"]
    assert "| 0.8466<br>reproduced |" in cells["ch04-plain"]
    with pytest.raises(ValueError, match="ours_digits"):
        compare("ch04-bad", "bad", source="joudaki2023isometry", paper=1.0, ours=1.0, abs_tol=0.1, ours_digits=0,
                show=False)
