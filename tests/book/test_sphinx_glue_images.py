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


def _lab(path: Path) -> None:
    glued = new_output(
        "display_data",
        data={PREFIX + "image/png": base64.b64encode(PNG).decode(), PREFIX + "text/plain": "<Figure>"},
        metadata={"scrapbook": {"name": "planted", "mime_prefix": PREFIX}},
    )
    cell = new_code_cell("glue('planted', fig, display=False)", outputs=[glued], execution_count=1)
    nb = new_notebook(cells=[new_markdown_cell("# The lab"), cell], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nbformat.write(nb, path)


def _build(tmp_path: Path, extensions: list[str]) -> tuple[str, str]:
    from sphinx.application import Sphinx

    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    (src / "conf.py").write_text(
        f"extensions = {extensions!r}\nnumfig = True\nnb_execution_mode = 'off'\n"
        "suppress_warnings = ['mystnb.unknown_mime_type']\n"
    )
    (src / "index.md").write_text(CHAPTER)
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


def test_myst_nb_alone_refuses_doc_on_glue_figure(tmp_path):
    """Why the extension exists: myst-nb 1.x's own glue:figure has no :doc: option."""
    html, warnings = _build(tmp_path, ["myst_nb"])
    assert "'glue:figure': Unknown option" in warnings and "undefined label: 'fig-planted'" in warnings
    assert "caption-number" not in html


def test_glued_images_are_named_as_myst_nb_names_them():
    data = {"k": {"data": {"image/png": base64.b64encode(PNG).decode()}}, "t": {"data": {"text/plain": "1"}}}
    assert glued_images(data) == {hashlib.sha256(PNG).hexdigest() + ".png": PNG}
