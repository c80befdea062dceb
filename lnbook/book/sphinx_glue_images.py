"""A Sphinx extension for figures and tables glued into a chapter from a notebook: numbered figures and tables, and
the figures' image files.

**Numbered figures across documents.** myst-nb 1.x pastes another document's output with
``{glue:any}`` and its ``:doc:`` option, but its ``{glue:figure}`` (a numbered figure with a name and a
caption) reads only the page's own notebook. :class:`PasteFigureFromDoc` replaces ``glue:figure`` with the
same directive plus ``:doc:``: the figure holds myst-nb's pending cross-document reference, which myst-nb
resolves into the image when it writes the page, so a chapter shows a lab's figure as a numbered figure::

    ```{glue:figure} ch01-circle
    :doc: ../notebooks/ch01_geometry_lab.ipynb
    :name: fig-ch01-circle

    The caption.
    ```

**Numbered tables glued from a notebook.** :class:`PasteTableFromDoc`, ``{glue:table}`` with ``:doc:``, ``:name:``
and a caption, shows a table a lab glued (a :class:`lnbook.util.tables.Table`) as a numbered table: Sphinx counts it
with the page's ``{table}`` blocks (Table A.2) and ``{numref}`` refers to it.

**Image files.**

A chapter page shows a notebook's figure with ``{glue:any} key`` (cross-document glue). myst-nb 1.x
resolves it when writing the page and points at ``_images/<sha256 of the PNG>.png``, but writes
that file only when the notebook's own page shows the very same bytes. A figure glued with
``display=False`` and then drawn again (a 3-D plot renders differently the second time) left the
chapter with a missing image. This extension writes every glued image into ``_images/`` after the
HTML is built, under the name myst-nb uses. (Added to ``sphinx.extra_extensions`` in ``_config.yml``.)
"""

from __future__ import annotations

import hashlib
import json
from binascii import a2b_base64
from mimetypes import guess_extension
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives as spec
from myst_nb.ext.glue.directives import PasteFigureDirective
from myst_nb.ext.glue.utils import PendingGlueReferenceError, create_pending_glue_ref, glue_warning

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif")


def glued_images(glue_json: dict) -> dict[str, bytes]:
    """``{file name: bytes}`` of the images in one ``<notebook>.glue.json``, named as myst-nb names them.

    >>> import base64
    >>> data = {"k": {"data": {"image/png": base64.b64encode(b"png").decode()}}}
    >>> list(glued_images(data)) == [hashlib.sha256(b"png").hexdigest() + ".png"]
    True
    """
    found = {}
    for output in glue_json.values():
        data = output.get("data", {}) if isinstance(output, dict) else {}
        for mime in IMAGE_TYPES:
            if mime in data:
                raw = a2b_base64(data[mime])
                extension = guess_extension(mime) or "." + mime.rsplit("/")[-1]
                extension = ".jpeg" if extension == ".jpe" else extension
                found[f"{hashlib.sha256(raw).hexdigest()}{extension}"] = raw
    return found


def write_glued_images(app, exception) -> None:
    """``build-finished``: write the glued images of every notebook into the site's image folder."""
    if exception is not None or app.builder.format != "html":
        return
    source = Path(app.env.mystnb_config.output_folder)
    target = Path(app.builder.outdir) / app.builder.imagedir
    for path in sorted(source.rglob("*.glue.json")):
        for name, raw in glued_images(json.loads(path.read_text())).items():
            if not (target / name).exists():
                target.mkdir(parents=True, exist_ok=True)
                (target / name).write_bytes(raw)


class PasteFigureFromDoc(PasteFigureDirective):
    """myst-nb's ``glue:figure`` with a ``:doc:`` option (the notebook that glued the key), as ``glue:any`` has.

    Without ``:doc:`` it is myst-nb's directive unchanged. With it, the figure's content is a pending glue
    reference to that notebook (resolved by myst-nb's post-transform when the page is written), and the
    figure gets its target (``:name:``), caption and legend exactly as myst-nb builds them."""

    option_spec = {**PasteFigureDirective.option_spec, "doc": spec.unchanged_required}

    #: the node the directive makes (a figure; :class:`PasteTableFromDoc` makes a :class:`glued_table`)
    node_class = nodes.figure
    #: where the caption goes: under a figure, above a table (as Sphinx writes a table's caption)
    caption_first = False

    def run(self):
        if "doc" not in self.options:
            return super().run()
        try:
            ref = create_pending_glue_ref(
                self.document, self.source, self.line, self.options.pop("doc"), self.arguments[0]
            )
        except PendingGlueReferenceError as exc:
            return [glue_warning(str(exc), self.document, self.line)]
        figure_node = self.node_class("", ref)
        self.set_source_info(figure_node)
        if self.options.get("figwidth") is not None:
            figure_node["width"] = self.options["figwidth"]
        figure_node["classes"] += self.options.get("figclass") or []
        if self.options.get("align"):
            figure_node["align"] = self.options["align"]
        self.add_name(figure_node)
        if self.content:
            parsed = nodes.Element()  # anonymous container for parsing
            self.state.nested_parse(self.content, self.content_offset, parsed)
            first = parsed[0]
            if not isinstance(first, nodes.paragraph):
                return [figure_node, glue_warning("Figure caption must be a paragraph.", self.document, self.lineno)]
            caption = nodes.caption(first.rawsource, "", *first.children)
            caption.source, caption.line = first.source, first.line
            if self.caption_first:
                figure_node.insert(0, caption)
            else:
                figure_node += caption
            if len(parsed) > 1:
                figure_node += nodes.legend("", *parsed[1:])
        return [figure_node]


class glued_table(nodes.General, nodes.Element):  # noqa: N801 (docutils dispatches on the class name)
    """A numbered table whose body is a table a notebook glued (its HTML): Sphinx numbers it among the page's tables
    ("Table A.2", ``{numref}``), and the HTML writer writes it as a ``<div class="lnbook-glued-table">`` holding its
    caption (a paragraph, "Table A.2 ...", styled as a table's caption by ``_static/lnbook.css``) and then the table.
    Not a figure: a figure's ``<figcaption>`` would enclose everything after a caption placed first."""


class PasteTableFromDoc(PasteFigureFromDoc):
    """``{glue:table} key`` with ``:doc:``, ``:name:`` and a caption: a table a notebook glued (a
    :class:`lnbook.util.tables.Table`, glued as HTML) shown as a numbered table, referred to with ``{numref}``::

        ```{glue:table} ch03-float64-depth-table
        :doc: ../notebooks/ch03_pma_pba_lab.ipynb
        :name: tbl-app-float64-depth

        The caption.
        ```

    A ``{table}`` directive cannot hold a glued table (it needs a markdown table), and a ``{glue:any}`` gives a table
    with no number or caption (screenshot read, issue 33 item 3). Without ``:doc:``, ``:name:`` or a caption it warns
    (the strict build stops): such a table could not be numbered or referred to."""

    node_class = glued_table
    caption_first = True

    def run(self):
        missing = [what for what, there in (("a :doc: option", "doc" in self.options),
                                            ("a :name: option", "name" in self.options),
                                            ("a caption", bool(self.content))) if not there]
        if missing:
            return [glue_warning(f"glue:table needs {', '.join(missing)} (a numbered table with a caption)",
                                 self.document, self.line)]
        return super().run()


def _visit_glued_table(translator, node) -> None:
    translator.body.append(translator.starttag(node, "div", CLASS="lnbook-glued-table"))


def _depart_glued_table(translator, node) -> None:
    translator.body.append("</div>\n")


def _skip(translator, node) -> None:
    """Other writers (text, LaTeX): the caption and the glued output are written as they come."""


def setup(app):
    app.add_directive_to_domain("glue", "figure", PasteFigureFromDoc, override=True)
    app.add_directive_to_domain("glue", "table", PasteTableFromDoc)
    app.add_enumerable_node(glued_table, "table", html=(_visit_glued_table, _depart_glued_table), latex=(_skip, _skip),
                            text=(_skip, _skip))
    app.connect("build-finished", write_glued_images)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
