"""The tables written in a chapter's prose are numbered tables with a caption, referred to with {numref}.

A markdown table in ``book/*.md`` goes inside a ``{table}`` directive whose argument is its caption and whose
``:name:`` is ``tbl-<page>-...`` (``<page>``: ``ch04``, or ``app`` for the appendix), and the page's text refers to it
with ``{numref}`` (Jupyter Book numbers it: "Table 4.1", in the appendix "Table A.1"). The pages in
:data:`CAPTIONED_PAGES` hold no markdown table outside such a directive (a lab's glued tables are the lab's).
"""

from __future__ import annotations

import re
from pathlib import Path

from lnbook.book.toc import book_root

ROOT = book_root(Path(__file__).parent)
# the pages whose every prose table is numbered and captioned (issue 33, read 32a item 12); add a page when its tables are
CAPTIONED_PAGES = (
    "ch01_what_layernorm_computes.md",
    "ch02_layernorm_is_nonlinear.md",
    "ch03_representation_capacity.md",
    "ch04_isometry_at_initialisation.md",
    "ch05_group_layernorm.md",
    "ch06_layernorm_as_activation.md",
    "ch07_layernorm_vs_rmsnorm.md",
    "ch08_from_layernorm_to_whitening.md",
    "appendix_float64_constructions.md",
)
TABLE = re.compile(r"^([ \t]*)(`{3,}|:{3,})\{table\}[ \t]*([^\n]*)\n((?:[ \t]*:\w+:[^\n]*\n)*)(.*?)^\1\2[ \t]*$", re.M | re.S)
SEPARATOR = re.compile(r"^[ \t]*\|(?:[ \t]*:?-{3,}:?[ \t]*\|)+[ \t]*$", re.M)
# a table a lab glued, shown as a numbered table (lnbook.book.sphinx_glue_images.PasteTableFromDoc): a name and a
# caption (the block's content) like a {table}, and no markdown table
GLUE_TABLE = re.compile(r"^([ \t]*)(`{3,}|:{3,})\{glue:table\}[^\n]*\n((?:[ \t]*:\w+:[^\n]*\n)*)(.*?)^\1\2[ \t]*$",
                        re.M | re.S)
NUMREF = re.compile(r"\{numref\}`(?:[^`<]*<)?(tbl-[\w-]+)>?`")


def page_id(file_name: str) -> str:
    return "app" if file_name.startswith("appendix") else file_name.split("_", 1)[0]


def table_defects(pages: dict[str, str], captioned: tuple[str, ...] = CAPTIONED_PAGES) -> list[str]:
    """What is wrong with the prose tables of ``pages`` (``{file name: text}``); empty when all is well."""
    defects, names, referred = [], {}, {}
    for page, text in pages.items():
        for name in NUMREF.findall(text):
            referred.setdefault(name, page)
        for match in TABLE.finditer(text):
            caption, options, body = match.group(3).strip(), match.group(4), match.group(5)
            line = text.count("\n", 0, match.start()) + 1
            name = next(iter(re.findall(r":name:[ \t]*(\S+)", options)), "")
            where = f"{page}:{line}"
            if match.group(2).startswith("`") and "`" in caption:  # CommonMark: no backtick in a ``` fence's info
                defects.append(f"{where}: a backtick in the caption of a ``` fence leaves the fence unopened (the rest of "
                               "the page becomes a code block): write the caption without code, or use a ::: fence")
            if len(caption) < 20:
                defects.append(f"{where}: a table without a caption (a sentence saying what it shows)")
            if not name.startswith(f"tbl-{page_id(page)}-"):
                defects.append(f"{where}: :name: should be tbl-{page_id(page)}-... (got {name!r})")
            if not SEPARATOR.search(body):
                defects.append(f"{where}: a {{table}} directive holding no markdown table")
            names[name] = (page, where)
        for match in GLUE_TABLE.finditer(text):
            options, caption = match.group(3), " ".join(match.group(4).split())
            where = f"{page}:{text.count(chr(10), 0, match.start()) + 1}"
            name = next(iter(re.findall(r":name:[ \t]*(\S+)", options)), "")
            if len(caption) < 20:
                defects.append(f"{where}: a glued table without a caption (a sentence saying what it shows)")
            if not name.startswith(f"tbl-{page_id(page)}-"):
                defects.append(f"{where}: :name: should be tbl-{page_id(page)}-... (got {name!r})")
            names[name] = (page, where)
        if page in captioned:
            bare = SEPARATOR.findall(TABLE.sub("", text))
            defects += [f"{page}: a markdown table outside a {{table}} directive: {row.strip()!r}" for row in bare]
    defects += [f"{where}: table {name} is never referred to with {{numref}} on its page" for name, (page, where)
                in names.items() if name not in NUMREF.findall(pages[page])]
    defects += [f"{{numref}}`{name}` ({page}) refers to no table of the book" for name, page in referred.items()
                if name not in names]
    return defects


def test_every_prose_table_is_numbered_captioned_and_referred_to():
    pages = {p.name: p.read_text() for p in sorted((ROOT / "book").glob("*.md"))}
    defects = table_defects(pages)
    assert not defects, "\n".join(defects)
    found = sum(len(TABLE.findall(pages[name])) for name in CAPTIONED_PAGES)
    assert found >= 10, found  # the parser found them
    assert len(GLUE_TABLE.findall(pages["appendix_float64_constructions.md"])) == 2  # the float64 survey (issue 33)


PLANTED = """{numref}`tbl-ch09-a` shows it.

```{table} A table with a caption long enough.
:name: tbl-ch09-a

| a | b |
|---|---|
| 1 | 2 |
```

   ```{table} Short
   :name: tbl-b

   | a | b |
   |---|---|
   ```

| bare | table |
|---|---|
| 1 | 2 |

{numref}`tbl-ch09-missing` is not there.
"""


def test_table_defects_are_found_in_a_planted_page():
    defects = table_defects({"ch09_x.md": PLANTED}, ("ch09_x.md",))
    assert defects == [
        "ch09_x.md:11: a table without a caption (a sentence saying what it shows)",
        "ch09_x.md:11: :name: should be tbl-ch09-... (got 'tbl-b')",
        "ch09_x.md: a markdown table outside a {table} directive: '|---|---|'",
        "ch09_x.md:11: table tbl-b is never referred to with {numref} on its page",
        "{numref}`tbl-ch09-missing` (ch09_x.md) refers to no table of the book",
    ], defects
    good = PLANTED.split("   ```{table} Short")[0]
    assert table_defects({"ch09_x.md": good}, ("ch09_x.md",)) == []
    code = good.replace("A table with a caption", "A table built with `verify=False`")  # the appendix's, in ci35
    assert table_defects({"ch09_x.md": code}, ("ch09_x.md",)) == [
        "ch09_x.md:3: a backtick in the caption of a ``` fence leaves the fence unopened (the rest of the page becomes "
        "a code block): write the caption without code, or use a ::: fence"]
    assert table_defects({"ch09_x.md": code.replace("```", ":::")}, ("ch09_x.md",)) == []
    assert table_defects({"ch09_x.md": good.replace("{numref}`tbl-ch09-a`", "It")}, ("ch09_x.md",)) == [
        "ch09_x.md:3: table tbl-ch09-a is never referred to with {numref} on its page"
    ]


def test_glued_tables_are_named_captioned_and_referred_to():
    glued = "{numref}`tbl-ch09-g` shows it.\n\n```{glue:table} key\n:doc: lab.ipynb\n:name: tbl-ch09-g\n\nA caption long enough.\n```\n"
    assert table_defects({"ch09_x.md": glued}, ("ch09_x.md",)) == []
    bare = glued.replace(":name: tbl-ch09-g\n\nA caption long enough.\n", "")
    assert table_defects({"ch09_x.md": bare}, ("ch09_x.md",)) == [
        "ch09_x.md:3: a glued table without a caption (a sentence saying what it shows)",
        "ch09_x.md:3: :name: should be tbl-ch09-... (got '')",
        "ch09_x.md:3: table  is never referred to with {numref} on its page",
        "{numref}`tbl-ch09-g` (ch09_x.md) refers to no table of the book",
    ]
