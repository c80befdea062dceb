"""lnbook.book.runner on a planted tiny book: the cell timeout, results kept with the cache, generated pages.

(The lost-wake-up tests and the runs of the book's own notebooks are in test_notebooks.py.)
"""

from __future__ import annotations

import json

import pytest

from lnbook.book.runner import (
    JOBS_ENV_VAR,
    ExperimentPool,
    NotebookFailed,
    cache_dir,
    cached_execution,
    cell_timeout,
    ensure_executed,
    execute_notebook,
    notebook_jobs,
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


def test_a_pool_of_notebooks_records_every_run_of_a_chapter_once_and_reports_a_failure(tmp_path, monkeypatch):
    """Two notebooks of one chapter and a failing one, two at a time: the parent records each run, so no
    record of the shared chapter file is lost to a concurrent write; a failing one raises when its run is
    asked for. (With jobs=1 the pool calls the same execute-then-record steps in this process.)"""
    jobs = 2
    root = make_book(tmp_path / "book", monkeypatch)
    folder = root / "notebooks"
    paths = [
        write_notebook(folder / f"ch09_{name}.ipynb", ["print('lnbook scale=ci')", compare_cell(f"ch09-{name}", 1.0)])
        for name in ("a", "b")
    ]
    bad = write_notebook(folder / "ch09_bad.ipynb", [compare_cell("ch09-bad", 1.0), "1 / 0"])
    with ExperimentPool([paths[0], bad, *paths[1:]], cache_dir(root, "ci"), root, jobs=jobs) as pool:
        runs = [pool.result(p) for p in paths]
        with pytest.raises(NotebookFailed, match="ZeroDivisionError"):
            pool.result(bad)
        with pytest.raises(ValueError, match="not one of this pool's notebooks"):
            pool.result(root / "book" / "table.ipynb")
        assert pool.result(paths[0]) is runs[0]  # handed out and recorded once
    recorded = json.loads((root / "results" / "ci" / "ch09.json").read_text())
    assert sorted(recorded) == ["ch09-a", "ch09-b"], "a record was lost, or a failed run recorded"
    assert [r.comparisons[0].key for r in runs] == ["ch09-a", "ch09-b"]
    # the pool filled the cache the build reads
    assert all(cached_execution(p, cache_dir(root, "ci"), root) is not None for p in paths)


def test_a_pool_refuses_generated_pages_and_bad_job_counts(tmp_path, monkeypatch):
    root = make_book(tmp_path / "book", monkeypatch)
    with pytest.raises(ValueError, match="generated pages read every experiment's results"):
        ExperimentPool([root / "book" / "table.ipynb"], None, root)
    with pytest.raises(ValueError, match="jobs must be >= 1"):
        ExperimentPool([root / "notebooks" / "ch09_tiny.ipynb"], None, root, jobs=0)
    monkeypatch.setenv(JOBS_ENV_VAR, "two")
    with pytest.raises(ValueError, match="LNBOOK_NOTEBOOK_JOBS must be a whole number >= 1"):
        notebook_jobs()
    monkeypatch.setenv(JOBS_ENV_VAR, "3")
    assert notebook_jobs() == 3
