"""``python -m lnbook``: list the experiments, run one at ci scale (a planted tiny book), exit statuses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lnbook.book.toc import book_root, experiments, find_experiment
from tests.book.planted_book import compare_cell, make_book, write_notebook

ROOT = book_root(Path(__file__).parent)


def lnbook(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LNBOOK_SCALE"}  # the CLI's --scale decides
    return subprocess.run([sys.executable, "-m", "lnbook", *args], cwd=cwd, capture_output=True, text=True, env=env)


def test_list_names_every_chapter_and_notebook_of_the_book():
    proc = lnbook("list", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    names = [line.split()[0] for line in proc.stdout.splitlines()]
    assert names == [e.name for e in experiments(ROOT)]
    for path in (ROOT / "notebooks").glob("ch*.ipynb"):
        assert path.stem in names and path.stem[:4] in names
    assert "reproduction" not in names and "theorem_index" not in names  # generated pages are not experiments


def test_run_an_experiment_at_ci_scale(tmp_path, monkeypatch):
    root = make_book(tmp_path / "book", monkeypatch)
    proc = lnbook("run", "ch09", "--scale", "ci", cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ch09_tiny" in proc.stderr and "cell" in proc.stderr  # the progress bar, cell by cell
    assert "[reproduced] a planted number" in proc.stdout  # what the cells print, echoed
    assert "1 notebook(s), 1 comparison(s): 1 reproduced, 0 consistent (reconstruction), 0 differs, 0 not checkable here" in proc.stdout
    assert list(json.loads((root / "results" / "ci" / "ch09.json").read_text())) == ["ch09-tiny"]
    assert (root / "_build" / ".jupyter_cache").is_dir()  # where `make book` finds the executed notebook


def test_run_reports_a_mismatch_and_records_it(tmp_path, monkeypatch):
    root = make_book(tmp_path / "book", monkeypatch)
    write_notebook(root / "notebooks" / "ch09_tiny.ipynb", [compare_cell("ch09-tiny", 2.0)])
    proc = lnbook("run", "ch09_tiny", "--scale", "paper", cwd=root)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "REPRODUCTION MISMATCH: ch09-tiny" in proc.stdout
    recorded = json.loads((root / "results" / "paper" / "ch09.json").read_text())
    assert recorded["ch09-tiny"]["verdict"] == "differs" and recorded["ch09-tiny"]["scale"] == "paper"
    assert (root / "_paper" / "_build" / ".jupyter_cache").is_dir()


def test_unknown_experiment_and_failing_notebook(tmp_path, monkeypatch):
    root = make_book(tmp_path / "book", monkeypatch)
    proc = lnbook("run", "ch99", cwd=root)
    assert proc.returncode == 2 and "no experiment called 'ch99'" in proc.stderr and "ch09" in proc.stderr
    write_notebook(root / "notebooks" / "ch09_tiny.ipynb", ["raise RuntimeError('planted failure')"])
    proc = lnbook("run", "ch09", cwd=root)
    assert proc.returncode == 1 and "planted failure" in proc.stderr


def test_experiment_names(tmp_path, monkeypatch):
    root = make_book(tmp_path / "book", monkeypatch)
    assert [p.name for p in find_experiment(root, "ch09").notebooks] == ["ch09_tiny.ipynb"]
    assert [p.name for p in find_experiment(root, "all").notebooks] == ["ch09_tiny.ipynb"]
