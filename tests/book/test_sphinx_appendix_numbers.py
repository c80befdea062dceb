"""lnbook.book.sphinx_appendix_numbers: an appendix's statements, figures and exercises are numbered A.1, A.2, ...,
apart from chapter 1's 1.1, 1.2, in a real Sphinx build of a planted book (a numbered chapter, an appendix in an
unnumbered toctree, as in _toc.yml)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from lnbook.book.sphinx_appendix_numbers import letter_numbers

INDEX = """# Book

```{toctree}
:numbered:
ch01
```

```{toctree}
appendix
```
"""

STATEMENTS = """
:::{{prf:proposition}} First of {where}
:label: prop-{key}-first

One.
:::

:::{{prf:proposition}} Second of {where}
:label: prop-{key}-second

Two.
:::

```{{figure}} dot.png
:name: fig-{key}

A figure of {where}.
```
"""

CHAPTER = "# Chapter one\n" + STATEMENTS.format(where="the chapter", key="ch") + (
    "\nSee {prf:ref}`prop-app-second` and {numref}`fig-app`.\n"
)
APPENDIX = "# Appendix: planted\n" + STATEMENTS.format(where="the appendix", key="app")
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000100ffff03000006000557bfabd40000000049454e44ae426082"
)


def _build(tmp_path: Path, appendices: dict) -> tuple[dict[str, str], str]:
    from sphinx.application import Sphinx

    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    (src / "conf.py").write_text(
        "extensions = ['myst_nb', 'sphinx_proof', 'lnbook.book.sphinx_appendix_numbers']\n"
        "myst_enable_extensions = ['colon_fence']\nnumfig = True\n"
        f"lnbook_appendices = {appendices!r}\n"
    )
    (src / "index.md").write_text(INDEX)
    (src / "ch01.md").write_text(CHAPTER)
    (src / "appendix.md").write_text(APPENDIX)
    (src / "dot.png").write_bytes(PNG)
    warnings = io.StringIO()
    app = Sphinx(str(src), str(src), str(out), str(tmp_path / "doctrees"), "html", status=None,
                 warning=warnings, freshenv=True)
    app.build()
    lines = re.sub(r"\x1b\[[0-9;]*m", "", warnings.getvalue()).splitlines()
    pages = {name: (out / f"{name}.html").read_text() for name in ("ch01", "appendix")}
    return pages, "\n".join(x for x in lines if "is already registered" not in x)


def _numbers(html: str) -> list[str]:
    return re.findall(r'class="caption-number">([^<]*?)\s*<', html)


def test_the_appendix_is_numbered_by_its_letter_and_the_chapter_by_its_number(tmp_path):
    pages, warnings = _build(tmp_path, {"appendix": "A"})
    assert warnings == ""
    assert _numbers(pages["appendix"]) == ["Proposition A.1", "Proposition A.2", "Fig. A.1"]
    assert _numbers(pages["ch01"]) == ["Proposition 1.1", "Proposition 1.2", "Fig. 1.1"]
    # the chapter's references to the appendix carry the letter too
    assert '<a class="reference internal" href="appendix.html#prop-app-second">Proposition A.2</a>' in pages["ch01"]
    assert '<span class="std std-numref">Fig. A.1</span>' in pages["ch01"]


def test_without_the_extension_the_appendix_reads_like_a_chapter(tmp_path):
    """Why the extension exists: an unnumbered page's items get bare numbers."""
    pages, _ = _build(tmp_path, {})
    assert _numbers(pages["appendix"]) == ["Proposition 1", "Proposition 2", "Fig. 1"]


def test_a_page_that_is_not_in_the_book_stops_the_build(tmp_path):
    from sphinx.errors import ExtensionError

    with pytest.raises(ExtensionError, match="'appendix-b', which is not a page of the book"):
        _build(tmp_path, {"appendix-b": "B"})


def test_letters_are_one_capital_letter_each():
    assert letter_numbers({"figure": {"x": (3,), "y": (1,)}}, "B") == {"figure": {"y": ("B", 1), "x": ("B", 2)}}
    for bad in ("a", "AB", "", 1):
        with pytest.raises(ValueError, match="one capital letter"):
            letter_numbers({}, bad)
    with pytest.raises(ValueError, match="lettered already"):
        letter_numbers({"figure": {"x": ("A", 1)}}, "A")
