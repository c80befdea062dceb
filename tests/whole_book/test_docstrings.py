"""Every example in an lnbook docstring (lines starting with >>>) runs and prints what it says."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import lnbook

#: every module of the package, subpackages included (``lnbook.__main__`` would run the CLI)
MODULES = sorted(
    m.name for m in pkgutil.walk_packages(lnbook.__path__, "lnbook.") if not m.name.endswith("__main__")
)

#: the number of docstring examples when the package moved into subpackages (issue 20): a walk that
#: silently skips modules would find fewer
EXAMPLES_AT_THE_MOVE = 52


def _examples(name: str) -> int:
    finder = doctest.DocTestFinder()
    return sum(len(t.examples) for t in finder.find(importlib.import_module(name)))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} failing docstring example(s) in {name}"


def test_the_walk_reaches_every_module_and_no_example_is_lost():
    files = {p for p in pkgutil.walk_packages(lnbook.__path__, "lnbook.")}
    assert len(files) >= 60 and "lnbook.capacity.build_exact" in MODULES and "lnbook.book.cli" in MODULES
    total = sum(_examples(n) for n in MODULES)
    assert total >= EXAMPLES_AT_THE_MOVE, f"{total} docstring examples, {EXAMPLES_AT_THE_MOVE} when the package moved"


def test_no_source_file_has_an_invalid_escape_sequence():
    """Referee 20 of chapter 7, finding 3: a non-raw docstring holding ``\\mathbf`` gave ``DeprecationWarning:
    invalid escape sequence '\\m'`` at import (a ``SyntaxWarning`` from Python 3.12, an error later). Every source
    file of the package compiles with such warnings turned into errors."""
    import warnings
    from pathlib import Path

    bad = []
    for path in sorted(Path(lnbook.__file__).parent.rglob("*.py")):
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            warnings.simplefilter("error", SyntaxWarning)
            try:
                compile(path.read_text(encoding="utf-8"), str(path), "exec")
            except (SyntaxError, DeprecationWarning, SyntaxWarning) as error:
                bad.append(f"{path.name}: {error}")
    assert not bad, "use a raw string (r\"\"\"...\"\"\") for docstrings with backslashes: " + "; ".join(bad)
