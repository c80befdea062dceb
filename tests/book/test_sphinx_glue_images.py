"""lnbook.book.sphinx_glue_images: a chapter shows a lab's glued figure as a numbered figure (``{glue:figure}``
with ``:doc:``), referred to with ``{numref}``, in a real Sphinx build of a two-page planted book."""

from __future__ import annotations

import base64
import hashlib
import io
import re
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from lnbook.book.sphinx_glue_images import glued_images

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
PREFIX = "application/papermill.record/"  # myst-nb's glue(..., display=False)

CHAPTER = """# A chapter

```{toctree}
lab
```

{numref}`fig-planted` shows the planted figure.

```{glue:figure} planted
:doc: lab.ipynb
:name: fig-planted

A caption that says what the figure shows.
```
"""


TABLE_HTML = "<table class='table lnbook-table'><thead><tr><th>m</th></tr></thead><tbody><tr><td>7</td></tr></tbody></table>"

CHAPTER_WITH_TABLES = """# A chapter

```{toctree}
lab
```

{numref}`tbl-glued` shows the glued table, {numref}`tbl-written` the written one.

```{glue:table} planted-table
:doc: lab.ipynb
:name: tbl-glued

A caption that says what the glued table shows.
```

```{table} A written table.
:name: tbl-written

| a |
|---|
| 1 |
```
"""


def _lab(path: Path) -> None:
    glued = new_output(
        "display_data",
        data={PREFIX + "image/png": base64.b64encode(PNG).decode(), PREFIX + "text/plain": "<Figure>"},
        metadata={"scrapbook": {"name": "planted", "mime_prefix": PREFIX}},
    )
    table = new_output(
        "display_data",
        data={PREFIX + "text/html": TABLE_HTML, PREFIX + "text/plain": "m\n7"},
        metadata={"scrapbook": {"name": "planted-table", "mime_prefix": PREFIX}},
    )
    cell = new_code_cell("glue('planted', fig, display=False)", outputs=[glued, table], execution_count=1)
    nb = new_notebook(cells=[new_markdown_cell("# The lab"), cell], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nbformat.write(nb, path)


def _build(tmp_path: Path, extensions: list[str], chapter: str = CHAPTER) -> tuple[str, str]:
    from sphinx.application import Sphinx

    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    (src / "conf.py").write_text(
        f"extensions = {extensions!r}\nnumfig = True\nnb_execution_mode = 'off'\n"
        "suppress_warnings = ['mystnb.unknown_mime_type']\n"
    )
    (src / "index.md").write_text(chapter)
    _lab(src / "lab.ipynb")
    warnings = io.StringIO()
    app = Sphinx(str(src), str(src), str(out), str(tmp_path / "doctrees"), "html", status=None,
                 warning=warnings, freshenv=True)
    app.build()
    # a second Sphinx app in one process re-registers Sphinx's own nodes: not a warning of the book
    lines = re.sub(r"\x1b\[[0-9;]*m", "", warnings.getvalue()).splitlines()
    return (out / "index.html").read_text(), "\n".join(x for x in lines if "is already registered" not in x)


def test_glue_figure_from_another_document_is_a_numbered_referable_figure(tmp_path):
    html, warnings = _build(tmp_path, ["myst_nb", "lnbook.book.sphinx_glue_images"])
    assert warnings == ""
    figure = html[html.index('<figure'):html.index('</figure>')]
    assert 'id="fig-planted"' in figure and '<span class="caption-number">Fig. 1 </span>' in figure, figure
    assert "A caption that says what the figure shows." in figure
    image = hashlib.sha256(PNG).hexdigest() + ".png"
    assert f'src="_images/{image}"' in figure and (tmp_path / "out" / "_images" / image).read_bytes() == PNG
    assert '<a class="reference internal" href="#fig-planted"><span class="std std-numref">Fig. 1</span></a>' in html


def test_glue_table_from_another_document_is_a_numbered_referable_table(tmp_path):
    """Issue 33 item 3: the appendix's glued survey tables were unnumbered; {glue:table} numbers a glued table among
    the page's tables, with its caption above it, and {numref} names it."""
    html, warnings = _build(tmp_path, ["myst_nb", "lnbook.book.sphinx_glue_images"], CHAPTER_WITH_TABLES)
    assert warnings == ""
    start = html.index('<div class="lnbook-glued-table" id="tbl-glued">')
    glued = html[start:html.index('<table class="docutils')]
    assert '<span class="caption-number">Table 1 </span>' in glued and "<figcaption" not in glued, glued
    # the caption (a paragraph) above the table, and the table after the paragraph, not inside it
    caption_end = glued.index("</p>")
    assert glued.index("A caption that says what the glued table shows.") < caption_end < glued.index(TABLE_HTML)
    assert '<span class="caption-number">Table 2 </span>' in html[start + len(glued):]
    for name, number in (("tbl-glued", 1), ("tbl-written", 2)):
        assert (f'<a class="reference internal" href="#{name}"><span class="std std-numref">Table {number}</span></a>'
                in html)


def test_glue_table_without_a_name_or_caption_warns(tmp_path):
    chapter = CHAPTER_WITH_TABLES.replace(":name: tbl-glued\n\nA caption that says what the glued table shows.\n", "")
    html, warnings = _build(tmp_path, ["myst_nb", "lnbook.book.sphinx_glue_images"], chapter)
    assert "glue:table needs a :name: option, a caption" in warnings


def test_myst_nb_alone_refuses_doc_on_glue_figure(tmp_path):
    """Why the extension exists: myst-nb 1.x's own glue:figure has no :doc: option."""
    html, warnings = _build(tmp_path, ["myst_nb"])
    assert "'glue:figure': Unknown option" in warnings and "undefined label: 'fig-planted'" in warnings
    assert "caption-number" not in html


def test_glued_images_are_named_as_myst_nb_names_them():
    data = {"k": {"data": {"image/png": base64.b64encode(PNG).decode()}}, "t": {"data": {"text/plain": "1"}}}
    assert glued_images(data) == {hashlib.sha256(PNG).hexdigest() + ".png": PNG}
