"""lnbook.book.sphinx_bibliography: a bibliography entry's ``code`` field is shown as a link, and no address in
references.bib is left where the bibliography prints it as plain text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pybtex.database import parse_file, parse_string

from lnbook.book.sphinx_bibliography import CodeLinkStyle, check_code_field

ROOT = Path(__file__).resolve().parents[2]
PLAIN_TEXT_FIELDS = ("note", "howpublished", "annote", "addendum")


def render(bib: str) -> list[str]:
    entries = parse_string(bib, "bibtex").entries.values()
    return [e.text.render_as("html") for e in CodeLinkStyle().format_entries(entries)]


def test_the_code_field_is_a_link_after_the_url():
    html, = render("@misc{k, title={T}, author={Winsor, Eric}, year={2022}, url={https://example.org/post},"
                   " code={https://github.com/owner/repo}}")
    assert 'URL: <a href="https://example.org/post">' in html
    assert 'Code: <a href="https://github.com/owner/repo">https://github.com/owner/repo</a>' in html
    assert html.index("URL:") < html.index("Code:")


def test_an_entry_without_code_is_alpha_unchanged():
    bib = "@misc{k, title={T}, author={Winsor, Eric}, year={2022}, howpublished={LessWrong post}}"
    from pybtex.style.formatting.alpha import Style
    entries = parse_string(bib, "bibtex").entries.values()
    alpha = [e.text.render_as("html") for e in Style().format_entries(entries)]
    assert render(bib) == alpha and "Code" not in alpha[0]


@pytest.mark.parametrize("bad", ["github.com/owner/repo", "see https://github.com/a/b", "", 3])
def test_a_code_field_that_is_not_an_address_is_refused(bad):
    with pytest.raises(ValueError, match="code field of bibliography entry 'k'"):
        check_code_field("k", bad)


def test_no_address_of_references_bib_is_printed_as_plain_text():
    """pybtex prints note and howpublished as text (``\\url{}`` there shows as the raw command): an address belongs in
    ``url`` (the work) or ``code`` (its repository), which are links."""
    plain = []
    for key, entry in parse_file(str(ROOT / "references.bib"), "bibtex").entries.items():
        for name in PLAIN_TEXT_FIELDS:
            value = entry.fields.get(name, "")
            if re.search(r"https?://|www\.|\\url|github\.com", value):
                plain.append(f"{key}.{name} = {value!r}")
        if "code" in entry.fields:
            check_code_field(key, entry.fields["code"])
    assert not plain, "move these addresses to a url or code field: " + "; ".join(plain)


def test_a_sphinx_build_with_the_style_links_the_code_field(tmp_path):
    """The style as _config.yml selects it: sphinxcontrib-bibtex finds ``lnbook_alpha`` and shows the link."""
    import io

    from sphinx.application import Sphinx

    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    (src / "conf.py").write_text(
        "extensions = ['sphinxcontrib.bibtex', 'lnbook.book.sphinx_bibliography']\n"
        "bibtex_bibfiles = ['refs.bib']\nbibtex_default_style = 'lnbook_alpha'\n")
    (src / "refs.bib").write_text("@inproceedings{huang2019iternorm, title={Iterative Normalization},"
                                  " author={Huang, Lei and Zhou, Yi and Zhu, Fan}, booktitle={CVPR}, year={2019},"
                                  " code={https://github.com/huangleiBuaa/IterNorm}}\n")
    (src / "index.rst").write_text("Book\n====\n\n.. bibliography::\n   :all:\n")
    warnings = io.StringIO()
    Sphinx(str(src), str(src), str(out), str(tmp_path / "doctrees"), "html", status=None, warning=warnings,
           freshenv=True).build()
    html = (out / "index.html").read_text()
    assert "HZZ19" in html  # the alpha label
    assert 'Code: <a class="reference external" href="https://github.com/huangleiBuaa/IterNorm">' in html, html


def test_and_others_reads_et_al_in_the_bibliography_and_in_the_text(tmp_path):
    """Issue 33: "[GYN+26] Guo, Yue, Ni, and others" and "[Nieal25] Ni et al." (the bib's author was the one name
    {Ni et al.}). With ``author = {Ni and others}`` the label is alpha's [N+25], the entry reads "Ni *et al.*", and a
    textual citation "Ni *et al.* (2025)", not "Ni and others"; a list of named authors is unchanged."""
    import io

    from sphinx.application import Sphinx

    guo, ni = render("@misc{g, title={T}, author={Guo and Yue and Ni and others}, year={2026}}\n"
                     "@misc{n, title={P}, author={Ni and others}, year={2025}}")
    assert guo.startswith("Guo, Yue, Ni, <em>et al.</em>") and "others" not in guo, guo
    assert ni.startswith("Ni <em>et al.</em>") and "others" not in ni, ni
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    (src / "conf.py").write_text(
        "extensions = ['sphinxcontrib.bibtex', 'lnbook.book.sphinx_bibliography']\n"
        "bibtex_bibfiles = ['refs.bib']\nbibtex_default_style = 'lnbook_alpha'\n"
        "bibtex_reference_style = 'lnbook_author_year'\n")
    (src / "refs.bib").write_text("@misc{ni2025pln, title={Parallel}, author={Ni and others}, year={2025}}\n"
                                  "@misc{ba2016, title={LN}, author={Ba, Jimmy and Kiros, Jamie}, year={2016}}\n")
    (src / "index.rst").write_text("Book\n====\n\nAs :cite:t:`ni2025pln` and :cite:t:`ba2016` show.\n\n"
                                   ".. bibliography::\n")
    warnings = io.StringIO()
    Sphinx(str(src), str(src), str(out), str(tmp_path / "doctrees"), "html", status=None, warning=warnings,
           freshenv=True).build()
    html = re.sub(r"\s+", " ", (out / "index.html").read_text())
    text = re.sub(r"<[^>]+>", "", html)
    assert "Ni et al. [2025]" in text or "Ni et al. (2025)" in text, text[:600]
    assert "Ni and others" not in text and "Ba and Kiros" in text
    assert "N+25" in text and "Nieal" not in text
    # (a second Sphinx app in one process re-registers every role: those warnings are the test's, not the style's)
    assert not [w for w in warnings.getvalue().splitlines() if "already registered" not in w], warnings.getvalue()


def test_references_bib_names_no_author_as_a_phrase():
    """An author list ends in "and others" when it is incomplete: an author written as one braced phrase ({Ni et al.})
    becomes the label [Nieal25]."""
    for key, entry in parse_file(str(ROOT / "references.bib"), "bibtex").entries.items():
        for person in entry.persons.get("author", []):
            assert "et al" not in str(person), f"{key}: write the known authors and 'and others', not {person}"
