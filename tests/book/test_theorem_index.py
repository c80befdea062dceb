"""lnbook.book.theorem_index: statements, their labels and machine checks, read from the chapters' MyST.
"""

from __future__ import annotations

from pathlib import Path

from lnbook.book.theorem_index import book_statements, parse_statements, render_index
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
    assert all(line.count(" | ") == 1 for line in index.splitlines() if line.startswith("| {prf:ref}"))
