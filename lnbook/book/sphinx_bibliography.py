"""A Sphinx extension that gives the bibliography a ``code`` field, shown as a link: "Code: <a href=...>".

pybtex's styles link only the ``url`` field (the work itself) and print ``note``/``howpublished`` as plain text,
so a repository quoted in a note ("Code: https://github.com/...") reads as an unlinked address, and ``\\url{}`` in a
note is printed as the raw command. A ``code = {https://...}`` field of ``references.bib`` is shown by this style
after the entry's own URL as "Code: <link>". The style, ``lnbook_alpha``, is pybtex's ``alpha`` (labels such as
[HZZ+19]) with that one addition; ``_config.yml`` selects it (``bibtex_default_style``). A ``code`` field that is not
an http(s) address stops the build with the reason. Added to ``sphinx.extra_extensions`` in ``_config.yml``.
Tests: tests/book/test_sphinx_bibliography.py.
"""

from __future__ import annotations

import re

from pybtex.plugin import register_plugin
from pybtex.style.formatting.alpha import Style as AlphaStyle
from pybtex.style.template import field, href, join, optional, words

__all__ = ["STYLE_NAME", "CodeLinkStyle", "check_code_field", "setup"]

STYLE_NAME = "lnbook_alpha"
_HTTP = re.compile(r"^https?://\S+$")


def check_code_field(key: str, value: str) -> str:
    """``value`` when it is one http(s) address, else ValueError naming the entry."""
    if not isinstance(value, str) or not _HTTP.match(value.strip()):
        raise ValueError(f"the code field of bibliography entry {key!r} must be one http(s) address "
                         f"(code = {{https://github.com/...}}), got {value!r}")
    return value.strip()


class CodeLinkStyle(AlphaStyle):
    """pybtex's ``alpha`` style, with the ``code`` field shown as "Code: <link>" after the web references."""

    def format_web_refs(self, e):
        if "code" in e.fields:
            check_code_field(e.key, e.fields["code"])
        code = field("code", raw=True)
        return join(sep=" ")[
            super().format_web_refs(e),
            optional[words["Code:", href(code)[code]], "."],
        ]


def setup(app):
    register_plugin("pybtex.style.formatting", STYLE_NAME, CodeLinkStyle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
