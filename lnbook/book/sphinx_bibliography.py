"""A Sphinx extension that gives the bibliography a ``code`` field, shown as a link: "Code: <a href=...>".

pybtex's styles link only the ``url`` field (the work itself) and print ``note``/``howpublished`` as plain text,
so a repository quoted in a note ("Code: https://github.com/...") reads as an unlinked address, and ``\\url{}`` in a
note is printed as the raw command. A ``code = {https://...}`` field of ``references.bib`` is shown by this style
after the entry's own URL as "Code: <link>". The style, ``lnbook_alpha``, is pybtex's ``alpha`` (labels such as
[HZZ+19]) with that one addition and one more: BibTeX's ``and others`` (authors not listed) reads "*et al.*", in the
bibliography ("Guo, Yue, Ni, *et al.*") and in the text (``lnbook_author_year``, sphinxcontrib-bibtex's
``author_year`` citing "Ni *et al.* (2025)", where it wrote "Ni and others"); ``_config.yml`` selects both
(``bibtex_default_style``, ``bibtex_reference_style``). A ``code`` field that is not
an http(s) address stops the build with the reason. Added to ``sphinx.extra_extensions`` in ``_config.yml``.
Tests: tests/book/test_sphinx_bibliography.py.
"""

from __future__ import annotations

import re

from pybtex.plugin import register_plugin
from pybtex.richtext import Tag, Text
from pybtex.style.formatting.alpha import Style as AlphaStyle
from pybtex.style.template import FieldIsMissing, field, href, join, node, optional, sentence, words

__all__ = ["STYLE_NAME", "REFERENCE_STYLE_NAME", "CodeLinkStyle", "check_code_field", "setup"]

STYLE_NAME = "lnbook_alpha"
_HTTP = re.compile(r"^https?://\S+$")


def check_code_field(key: str, value: str) -> str:
    """``value`` when it is one http(s) address, else ValueError naming the entry."""
    if not isinstance(value, str) or not _HTTP.match(value.strip()):
        raise ValueError(f"the code field of bibliography entry {key!r} must be one http(s) address "
                         f"(code = {{https://github.com/...}}), got {value!r}")
    return value.strip()


def _is_others(person) -> bool:
    return str(person).strip().lower() == "others"


@node
def _names_et_al(children, context, role, **kwargs):
    """The names of ``role`` as pybtex's ``names`` joins them, except that BibTeX's ``and others`` (the authors not
    listed) reads "et al." in italics: "Guo, Yue, Ni, *et al.*", "Ni *et al.*" (pybtex printed "and others")."""
    try:
        persons = context["entry"].persons[role]
    except KeyError:
        raise FieldIsMissing(role, context["entry"]) from None
    style = context["style"]
    if not persons or not _is_others(persons[-1]):
        return join(**kwargs)[[style.format_name(p, style.abbreviate_names) for p in persons]].format_data(context)
    listed = [style.format_name(p, style.abbreviate_names) for p in persons[:-1]]
    if not listed:
        raise ValueError(f"bibliography entry {context['entry'].key!r}: name at least one {role} before 'others'")
    et_al = Tag("em", "et al.")
    names = join(sep=", ")[listed].format_data(context)
    return Text(names, ", " if len(listed) > 1 else " ", et_al)


class CodeLinkStyle(AlphaStyle):
    """pybtex's ``alpha`` style, with the ``code`` field shown as "Code: <link>" after the web references, and
    ``and others`` in an author list shown as "et al."."""

    def format_names(self, role, as_sentence=True):
        formatted = _names_et_al(role, sep=", ", sep2=" and ", last_sep=", and ")
        return sentence[formatted] if as_sentence else formatted

    def format_web_refs(self, e):
        if "code" in e.fields:
            check_code_field(e.key, e.fields["code"])
        code = field("code", raw=True)
        return join(sep=" ")[
            super().format_web_refs(e),
            optional[words["Code:", href(code)[code]], "."],
        ]


@node
def _cited_names(children, data, role, person, full):
    """In-text names (``{cite:t}``) as sphinxcontrib-bibtex writes them, except that a list ending in BibTeX's
    ``others`` reads "Ni *et al.*" (the two persons "Ni" and "others" read "Ni and others"), "Guo *et al.*"."""
    try:
        persons = data["entry"].persons[role]
    except KeyError:
        raise FieldIsMissing(role, data["entry"]) from None
    if len(persons) < 2 or not _is_others(persons[-1]):
        return person.plain_names(role, full).format_data(data)
    listed = [person.style_plugin.format(p, person.abbreviate) for p in persons[:-1]]
    if full and len(listed) > 1:
        return Text(join(sep=", ")[listed].format_data(data), ", ", Tag("em", "et al."))
    return Text(listed[0].format_data(data), " ", Tag("em", "et al."))


def _reference_style():
    """sphinxcontrib-bibtex's ``author_year`` reference style with :func:`_cited_names` for the persons."""
    from dataclasses import dataclass
    from dataclasses import field as dataclass_field

    from pybtex.style.template import first_of, tag
    from sphinxcontrib.bibtex.style.referencing import PersonStyle
    from sphinxcontrib.bibtex.style.referencing.author_year import AuthorYearReferenceStyle

    @dataclass
    class EtAlPersonStyle(PersonStyle):
        def plain_names(self, role, full):
            return super().names(role, full)

        def names(self, role, full):
            return _cited_names(role=role, person=self, full=full)

        def author_or_editor_or_title(self, full):
            return first_of[optional[self.names("author", full)], optional[self.names("editor", full)],
                            tag("em")[field("title")]]

    @dataclass
    class LnbookAuthorYearReferenceStyle(AuthorYearReferenceStyle):
        person: PersonStyle = dataclass_field(default_factory=EtAlPersonStyle)

    return LnbookAuthorYearReferenceStyle


REFERENCE_STYLE_NAME = "lnbook_author_year"


def setup(app):
    register_plugin("pybtex.style.formatting", STYLE_NAME, CodeLinkStyle)
    from sphinxcontrib.bibtex.plugin import register_plugin as register_reference_style

    register_reference_style("sphinxcontrib.bibtex.style.referencing", REFERENCE_STYLE_NAME, _reference_style())
    return {"parallel_read_safe": True, "parallel_write_safe": True}
