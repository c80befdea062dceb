"""lnbook.book.theorem_index: statements, their labels and machine checks, read from the chapters' MyST.
"""

from __future__ import annotations

from pathlib import Path

from lnbook.book.theorem_index import book_statements, parse_statements, render_index, rows_without_code
from lnbook.book.toc import book_root

ROOT = book_root(Path(__file__).parent)


TEXT = """# A chapter

:::{prf:definition} Thing
:label: def-thing
A thing.
:::

:::{prf:theorem} Big | result
:label: thm-big
:nonumber:

$$
x = 1
$$
:::

:::{prf:proof}
Obvious.
:::

*Machine check.* `tests/test_x.py::test_big` and `test_big_too`, but not test_plain.

```markdown
:::{prf:theorem} An example inside a code block
:label: thm-example
:::
```

````{exercise}
:label: ex-one
```{glue:any} key
```
:::{prf:lemma} Inside an exercise
:label: lem-inside
:::
````

## Next section

**Machine check.** `test_orphan` (after a heading: belongs to no statement above).
"""


def test_statements_labels_and_checks():
    found = parse_statements(TEXT, "book/ch09_x")
    assert [(s.kind, s.title, s.label) for s in found] == [
        ("definition", "Thing", "def-thing"),
        ("theorem", "Big | result", "thm-big"),
        ("lemma", "Inside an exercise", "lem-inside"),
    ]
    assert found[0].tests == () and found[1].tests == ("test_big", "test_big_too") and found[2].tests == ()
    assert found[1].line == 8 and found[2].check is None


def test_index_links_every_labelled_statement_of_the_book():
    statements = book_statements(ROOT)
    index = render_index(ROOT)
    assert statements, "no statement found in the chapters"
    for s in statements:
        assert f"{{prf:ref}}`{s.label}`" in index, s.label
    chapters = {s.docname for s in statements}
    assert all(f"</{doc}>`**" in index for doc in chapters)
    assert all(line.count(" | ") == 2 for line in index.splitlines() if line.startswith("| {prf:ref}"))


def test_a_row_reads_as_an_index_entry_code_and_a_count_of_folded_tests(tmp_path):
    """Issue 33: the machine-check column was a wall of up to 25 test names per row. A row now gives the code named after
    "Code:" and the number of tests, their names folded in a <details>; a legend says what empty cells and "-" mean."""
    from lnbook.book.theorem_index import LEGEND

    chapter = TEXT.replace("*Machine check.* `tests/test_x.py::test_big` and `test_big_too`, but not test_plain.",
                           ":::{dropdown} Machine check\n`tests/test_x.py::test_big` and `test_big_too`, against "
                           "`lnbook.core.symbolic.symbolic_layer_norm` (a reference, not the code).\n"
                           "Code: `lnbook.core.norms.layer_norm`, `lnbook.core.norms.rms_norm`.\n:::")
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "ch09_x.md").write_text(chapter)
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/index\nchapters:\n  - file: book/ch09_x\n")
    big = next(s for s in book_statements(tmp_path) if s.label == "thm-big")
    assert big.code == ("lnbook.core.norms.layer_norm", "lnbook.core.norms.rms_norm")
    index = render_index(tmp_path)
    rows = {line.split("`")[1]: line for line in index.splitlines() if line.startswith("| {prf:ref}")}
    assert rows["thm-big"] == ("| {prf:ref}`thm-big`: Big \\| result | `lnbook.core.norms.layer_norm`, `lnbook.core.norms.rms_norm` "
                               "| <details><summary>2 tests</summary>`test_big`, `test_big_too`</details> |")
    assert rows["def-thing"].endswith("|  |  |") and rows["lem-inside"].endswith("|  | with a later statement |")
    assert LEGEND in index and "empty tests cell" in LEGEND and "*with a later statement*:" in LEGEND
    assert "| statement | code | tests |" in index


def test_the_headline_counts_chapters_and_the_appendix_apart(tmp_path):
    """Issue 33: the index said "103 labelled statements in 9 chapters" of a book of 8 chapters and an appendix."""
    from lnbook.book.theorem_index import _pages_phrase

    assert _pages_phrase(["book/ch01_a", "book/ch02_b", "book/appendix_c"]) == "2 chapters and an appendix"
    assert _pages_phrase(["book/ch01_a"]) == "1 chapter"
    assert _pages_phrase(["book/ch01_a", "book/appendix_b", "book/appendix_c"]) == "1 chapter and 2 appendices"
    (tmp_path / "book").mkdir()
    for name in ("ch01_x", "ch02_y", "appendix_z"):
        (tmp_path / "book" / f"{name}.md").write_text(TEXT)
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/index\nchapters:\n  - file: book/ch01_x\n"
                                       "  - file: book/ch02_y\n  - file: book/appendix_z\n")
    index = render_index(tmp_path)
    assert " labelled statements in 2 chapters and an appendix, " in index.splitlines()[0], index.splitlines()[0]
    assert "3 chapters" not in index
    # the book itself: as many chapters as its toc has chapter pages (book/chNN_*), and its appendix
    chapters = sum(1 for doc in {s.docname for s in book_statements(ROOT)} if doc.startswith("book/ch"))
    assert f" in {chapters} chapters and an appendix, " in render_index(ROOT).splitlines()[0]


def test_every_statement_of_the_book_names_its_code():
    """Issue 33, "one hop from a theorem to its code" (screenshot read 46, item 2): the index's code column had empty
    cells for statements checked with a later one and for definitions. Every labelled statement now names, after
    "Code:" in its own Machine check (a "Code" dropdown after a definition), the function that computes it."""
    assert rows_without_code(render_index(ROOT)) == []
    statements = [s for s in book_statements(ROOT) if s.label]
    assert all(s.code for s in statements), [s.label for s in statements if not s.code]


def test_an_empty_code_cell_is_found(tmp_path):
    """The check above fails on a statement that names no code: the planted chapter's three statements name none."""
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "ch09_x.md").write_text(TEXT)
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/index\nchapters:\n  - file: book/ch09_x\n")
    assert rows_without_code(render_index(tmp_path)) == ["def-thing", "thm-big", "lem-inside"]
    with_code = TEXT.replace("but not test_plain.", "but not test_plain. Code: `lnbook.core.norms.layer_norm`.")
    (tmp_path / "book" / "ch09_x.md").write_text(with_code)
    assert rows_without_code(render_index(tmp_path)) == ["def-thing", "lem-inside"]
