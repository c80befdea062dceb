"""A Sphinx extension that numbers an appendix by its letter: Proposition A.1, Fig. A.2, Exercise A.1.

Jupyter Book 1.x numbers the statements, figures and exercises of a page outside a ``numbered: true`` part of
``_toc.yml`` with bare numbers (Proposition 1), which reads as if it belonged to a chapter and cannot be told from
chapter 1's Proposition 1.1 in a cross-reference. Sphinx keeps each number as a tuple (``env.toc_fignumbers``), and
every writer the book uses joins it with ``".".join(map(str, number))``: Sphinx's HTML writer and ``{numref}``,
sphinx-proof's ``{prf:...}`` nodes and ``{prf:ref}``, sphinx-exercise. So this extension, after Sphinx has assigned
the numbers, renumbers each kind of item of an appendix in its order on the page as ``(letter, 1)``,
``(letter, 2)``, ... The appendices and their letters are a ``sphinx: config:`` value of ``_config.yml``::

    lnbook_appendices:
      book/appendix_float64_constructions: A

A page named there that is not in the book, or that sits in a numbered part (where its numbers would carry the
chapter's), stops the build with the reason. Added to ``sphinx.extra_extensions`` in ``_config.yml``.
Tests: tests/book/test_sphinx_appendix_numbers.py.
"""

from __future__ import annotations

import re

__all__ = ["letter_numbers", "setup"]

_LETTER = re.compile(r"^[A-Z]$")


def letter_numbers(fignumbers: dict[str, dict[str, tuple]], letter: str) -> dict[str, dict[str, tuple]]:
    """``{kind: {id: number}}`` of one page renumbered ``(letter, 1), (letter, 2), ...`` per kind, in the order of
    the numbers Sphinx gave (the order on the page).

    >>> letter_numbers({"proposition": {"b": (2,), "a": (1,)}, "figure": {"f": (7,)}}, "A")
    {'proposition': {'a': ('A', 1), 'b': ('A', 2)}, 'figure': {'f': ('A', 1)}}
    """
    if not isinstance(letter, str) or not _LETTER.match(letter):
        raise ValueError(f"an appendix letter is one capital letter (A, B, ...), got {letter!r}")
    out = {}
    for kind, numbers in fignumbers.items():
        if any(n and isinstance(n[0], str) for n in numbers.values()):
            raise ValueError(f"the {kind} numbers are lettered already: {numbers}; renumber Sphinx's own numbers")
        order = sorted(numbers, key=numbers.__getitem__)
        out[kind] = {ident: (letter, i) for i, ident in enumerate(order, 1)}
    return out


def _check_config(app, config) -> None:
    appendices = config.lnbook_appendices
    if not isinstance(appendices, dict):
        raise ValueError(f"lnbook_appendices must map a page to its letter, got {appendices!r}")
    letters = list(appendices.values())
    for docname, letter in appendices.items():
        letter_numbers({}, letter)  # refuses anything but one capital letter
    if len(set(letters)) != len(letters):
        raise ValueError(f"each appendix needs its own letter, got {appendices}")


def _letter_the_appendices(app, env) -> list[str]:
    from sphinx.errors import ExtensionError

    rewrite = []
    for docname, letter in app.config.lnbook_appendices.items():
        if docname not in env.found_docs:
            raise ExtensionError(f"lnbook_appendices names {docname!r}, which is not a page of the book")
        if env.toc_secnumbers.get(docname):
            raise ExtensionError(
                f"{docname} is in a numbered part of _toc.yml: move it to an unnumbered part, or drop it from "
                "lnbook_appendices (its numbers would otherwise mix the chapter's number and the letter)"
            )
        if docname in env.toc_fignumbers:
            env.toc_fignumbers[docname] = letter_numbers(env.toc_fignumbers[docname], letter)
            rewrite.append(docname)
    return rewrite


def setup(app):
    app.add_config_value("lnbook_appendices", {}, "env", types=[dict])
    app.connect("config-inited", _check_config)
    # after Sphinx's TocTreeCollector (priority 500), which assigns the numbers on this event
    app.connect("env-get-updated", _letter_the_appendices, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
