"""Every figure a chapter shows is a numbered figure with a caption, referred to in the text.

A chapter shows a lab's figure by cross-document glue. The labs glue every figure the same way,
``glue("<key>", fig, display=False)``; a chapter must paste such a key with ``{glue:figure}``, a
``:name:`` (``fig-<key>``) and a caption, and its text must refer to it with ``{numref}``. The browser
check finds the same defect in the built pages (``lnbook.book.site_check``: an image of a chapter page
outside a numbered figure).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from lnbook.book.toc import book_root

ROOT = book_root(Path(__file__).parent)
# a figure glued by a lab: glue("ch01-circle", fig, display=False) (any variable whose name says fig)
FIGURE_GLUE = re.compile(r"""\bglue\(\s*["']([\w-]+)["']\s*,\s*(\w*fig\w*)\b""")
# a glue directive of a chapter: its kind, key, options and body up to the closing fence
DIRECTIVE = re.compile(r"^```\{(glue(?::\w+)?)\} *([\w-]+)\n(.*?)^```$", re.M | re.S)
NUMREF = re.compile(r"\{numref\}`(?:[^`<]*<)?([\w-]+)>?`")
# a lab's own numbered figure: a cell's metadata ``"mystnb": {"figure": {"name": "fig-lab-ch04-width", ...}}``, or the
# ``:name:`` of a ``{glue:figure}`` in its markdown (a player); a chapter may refer to it with {numref} too
LAB_FIGURE_NAME_OPTION = re.compile(r"^:name:[ \t]*(fig-lab-[\w-]+)[ \t]*$", re.M)


def lab_figure_keys() -> dict[str, set[str]]:
    """``{notebook file name: keys it glues a figure under}``."""
    keys = {}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        source = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
        keys[path.name] = {m.group(1) for m in FIGURE_GLUE.finditer(source)}
    return keys


def lab_figure_names() -> set[str]:
    """The names of the labs' own numbered figures (``fig-lab-...``), which a chapter's {numref} may name."""
    names = set()
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            figure = cell.get("metadata", {}).get("mystnb", {}).get("figure", {})
            if figure.get("name"):
                names.add(figure["name"])
            if cell["cell_type"] == "markdown":
                names |= set(LAB_FIGURE_NAME_OPTION.findall("".join(cell["source"])))
    return names


def glue_directives(text: str) -> list[dict]:
    """The glue directives of a chapter's text: kind, key, options (``{name: value}``) and caption."""
    found = []
    for match in DIRECTIVE.finditer(text):
        kind, key, body = match.groups()
        lines = body.split("\n")
        options = {}
        while lines and lines[0].startswith(":"):
            name, _, value = lines.pop(0)[1:].partition(":")
            options[name.strip()] = value.strip()
        caption = "\n".join(lines).strip()
        line = text.count("\n", 0, match.start()) + 1
        found.append({"kind": kind, "key": key, "options": options, "caption": caption, "line": line})
    return found


def figure_defects(chapters: dict[str, str], figure_keys: dict[str, set[str]], lab_figures: set[str] = frozenset()) -> list[str]:
    """What is wrong with the figures of ``chapters`` (``{file name: text}``); empty when all is well. ``lab_figures``:
    the names of the labs' own figures (:func:`lab_figure_names`), which a chapter may refer to as well."""
    defects, names, referred = [], {}, set()
    for chapter, text in chapters.items():
        referred |= set(NUMREF.findall(text))
        for d in glue_directives(text):
            where = f"{chapter}:{d['line']} ({d['key']})"
            notebook = Path(d["options"].get("doc", "")).name
            is_figure = d["key"] in figure_keys.get(notebook, set())
            if d["kind"] != "glue:figure":
                if is_figure:
                    defects.append(f"{where}: a figure shown with {{{d['kind']}}}; use {{glue:figure}} with :name: and a caption")
                continue
            if not is_figure:
                defects.append(f"{where}: {{glue:figure}} of a key that {notebook or 'no :doc:'} does not glue as a figure")
            name = d["options"].get("name", "")
            if name != f"fig-{d['key']}":
                defects.append(f"{where}: :name: should be fig-{d['key']} (got {name!r})")
            if len(d["caption"]) < 20:
                defects.append(f"{where}: no caption (a sentence saying what the figure shows)")
            names[name] = where
    defects += [f"{where}: figure {name} is never referred to with {{numref}}" for name, where in names.items()
                if name not in referred]
    defects += [f"{{numref}}`{name}` refers to no figure of the book" for name in sorted(referred)
                if name.startswith("fig-") and name not in names and name not in lab_figures]
    return defects


def book_chapters() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((ROOT / "book").glob("*.md"))}


def test_every_figure_of_a_chapter_is_numbered_captioned_and_referred_to():
    chapters, keys = book_chapters(), lab_figure_keys()
    figures = [d for text in chapters.values() for d in glue_directives(text) if d["kind"] == "glue:figure"]
    defects = figure_defects(chapters, keys, lab_figure_names())
    assert not defects, "\n".join(defects)
    assert len(figures) >= 46 and sum(len(k) for k in keys.values()) >= 44, (len(figures), keys)  # the parsers found them


PLANTED_KEYS = {"lab.ipynb": {"ch09-a", "ch09-b"}}
PLANTED = """{numref}`fig-ch09-a` shows it.

```{glue:figure} ch09-a
:doc: ../notebooks/lab.ipynb
:name: fig-ch09-a

A numbered figure with a caption long enough.
```

```{glue:any} ch09-b
:doc: ../notebooks/lab.ipynb
```

```{glue:figure} ch09-b
:doc: ../notebooks/lab.ipynb
:name: fig-b

```
"""


def test_figure_defects_are_found_in_a_planted_chapter():
    defects = figure_defects({"ch09.md": PLANTED}, PLANTED_KEYS)
    assert defects == [
        "ch09.md:10 (ch09-b): a figure shown with {glue:any}; use {glue:figure} with :name: and a caption",
        "ch09.md:14 (ch09-b): :name: should be fig-ch09-b (got 'fig-b')",
        "ch09.md:14 (ch09-b): no caption (a sentence saying what the figure shows)",
        "ch09.md:14 (ch09-b): figure fig-b is never referred to with {numref}",
    ], defects
    good = PLANTED.split("```{glue:any}")[0]
    assert figure_defects({"ch09.md": good}, PLANTED_KEYS) == []
    assert figure_defects({"ch09.md": good.replace("{numref}`fig-ch09-a`", "It")}, PLANTED_KEYS) == [
        "ch09.md:3 (ch09-a): figure fig-ch09-a is never referred to with {numref}"
    ]


def test_a_chapter_may_refer_to_a_lab_figure_that_exists_and_not_to_one_that_does_not():
    good = PLANTED.split("```{glue:any}")[0] + "\n{numref}`fig-lab-ch09-width` in the lab shows it.\n"
    assert figure_defects({"ch09.md": good}, PLANTED_KEYS, {"fig-lab-ch09-width"}) == []
    assert figure_defects({"ch09.md": good}, PLANTED_KEYS, {"fig-lab-ch09-gain"}) == [
        "{numref}`fig-lab-ch09-width` refers to no figure of the book"
    ]
    names = lab_figure_names()
    assert {"fig-lab-ch04-width", "fig-lab-ch04-gain"} <= names, sorted(names)
    assert any(n.endswith("-player") for n in names), sorted(names)  # a player's :name: in a lab's markdown
