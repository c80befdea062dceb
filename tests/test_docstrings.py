"""Every example in an lnbook docstring (lines starting with >>>) runs and prints what it says."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import lnbook

MODULES = sorted(m.name for m in pkgutil.iter_modules(lnbook.__path__, "lnbook."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} failing docstring example(s) in {name}"


def test_some_examples_exist():
    total = sum(doctest.testmod(importlib.import_module(n)).attempted for n in MODULES)
    assert total >= 1
