"""lnbook.book.runner on a planted tiny book: the cell timeout, results kept with the cache, generated pages.

(The lost-wake-up tests and the runs of the book's own notebooks are in test_notebooks.py.)
"""

from __future__ import annotations

import json

import pytest

from lnbook.book.runner import (
    NotebookFailed,
    cache_dir,
    cell_timeout,
    ensure_executed,
    execute_notebook,
    text_outputs,
)
from lnbook.book.toc import book_root
from tests.book.planted_book import compare_cell, make_book, write_notebook


def test_cell_timeout_comes_from_the_config(tmp_path):
    (tmp_path / "_config.yml").write_text("execute:\n  timeout: 42\n")
    assert cell_timeout(tmp_path) == 42
    (tmp_path / "_config.yml").write_text("execute:\n  timeout: -1\n")
    with pytest.raises(ValueError, match="execute.timeout must be a positive number of seconds"):
        cell_timeout(tmp_path)
    assert cell_timeout(book_root()) > 0  # the book's own config has one


def test_cache_folder_depends_on_the_scale(tmp_path):
    assert cache_dir(tmp_path, "ci") == tmp_path / "_build" / ".jupyter_cache"
    assert cache_dir(tmp_path, "paper") == tmp_path / "_paper" / "_build" / ".jupyter_cache"
    with pytest.raises(ValueError, match="scale must be one of"):
        cache_dir(tmp_path, "huge")


def test_results_are_recorded_only_when_the_notebook_succeeds(tmp_path, monkeypatch):
    root = make_book(tmp_path / "book", monkeypatch)
    bad = write_notebook(root / "notebooks" / "ch09_bad.ipynb", [compare_cell("ch09-bad", 1.0), "1 / 0"])
    with pytest.raises(NotebookFailed, match="ZeroDivisionError"):
        execute_notebook(bad, cache_dir=cache_dir(root, "ci"), root=root)
    assert not (root / "results").exists(), "a failed notebook recorded its comparisons"


def test_ensure_executed_caches_restores_and_reruns_generated_pages(tmp_path, monkeypatch):
    root = make_book(tmp_path / "book", monkeypatch)
    stale = root / "results" / "ci" / "ch08.json"
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"ch08-gone": {}}))  # a key no notebook makes any more

    first = ensure_executed(root, "ci", progress=False)
    assert [(r.path.stem, r.from_cache) for r in first] == [("ch09_tiny", False), ("table", False)]
    assert not stale.exists(), "results of keys no notebook makes were kept"
    recorded = json.loads((root / "results" / "ci" / "ch09.json").read_text())
    assert list(recorded) == ["ch09-tiny"] and recorded["ch09-tiny"]["verdict"] == "reproduced"
    assert "keys: ['ch09-tiny']" in text_outputs(first[1].nb), "the generated page ran before the experiment"

    # nothing changed: everything comes from the cache, and the results come back from it
    (root / "results" / "ci" / "ch09.json").unlink()
    second = ensure_executed(root, "ci", progress=False)
    assert [r.from_cache for r in second] == [True, True]
    assert list(json.loads((root / "results" / "ci" / "ch09.json").read_text())) == ["ch09-tiny"]

    # an experiment's code changes: it runs again, and so does the page made from its results
    write_notebook(root / "notebooks" / "ch09_tiny.ipynb", ["print('lnbook scale=ci')", compare_cell("ch09-other", 1.0)])
    third = ensure_executed(root, "ci", progress=False)
    assert [r.from_cache for r in third] == [False, False]
    assert list(json.loads((root / "results" / "ci" / "ch09.json").read_text())) == ["ch09-other"]
    assert "keys: ['ch09-other']" in text_outputs(third[1].nb)
