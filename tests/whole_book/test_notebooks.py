"""Every notebook of the book runs as a test (at the scale CI sets), then the strict build, then the browser.

`make test` distributes tests by file (``--dist loadfile``), so everything here runs in this order
on one worker: each notebook once (the experiments two at a time, each in its own process; the
generated pages, which read the others' results, last), then
the strict build, which finds every notebook in the cache and executes none again (asserted), then
headless Chromium opens every page of the built HTML with no network. ``tests/conftest.py`` puts this
file first in the collection, so that one worker starts the notebooks at once while the other runs the unit
tests (the runner's own tests, the lost wake-ups among them, are in ``tests/book/test_runner.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lnbook.book.assets import ensure_assets
from lnbook.book.reproduction import load_comparisons
from lnbook.book.runner import (
    ExperimentPool,
    cache_dir,
    execute_notebook,
    image_outputs,
    mismatch_lines,
    text_outputs,
)
from lnbook.book.site_check import browser_status, check_site, site_dir
from lnbook.book.toc import book_root, generated_inputs, toc_notebooks
from lnbook.util.scale import current_scale

ROOT = book_root(Path(__file__).parent)
NOTEBOOKS = toc_notebooks(ROOT)
EXECUTED: dict[str, float] = {}

pytestmark = pytest.mark.notebook

KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}


def check_executed(name: str, nb) -> None:
    """What every executed notebook of the book must show; raises AssertionError otherwise."""
    text = text_outputs(nb)
    # every notebook announces the scale it ran at (lnbook.util.device.describe_run) in its output
    assert f"scale={current_scale()}" in text, f"{name} does not print describe_run()"
    # a number against a paper whose verdict is not the one the book claims
    mismatches = mismatch_lines(nb)
    assert not mismatches, f"{name}: verdicts differ from the book's claims:\n" + "\n".join(mismatches)
    # a notebook that draws must show its figures (a non-inline matplotlib backend silently drops them)
    draws = any("plt.show()" in c.source or "plt.subplots" in c.source for c in nb.cells if c.cell_type == "code")
    if draws:
        assert image_outputs(nb) > 0, f"{name} draws figures but produced no image output"


def test_toc_has_notebooks():
    assert [p for p in NOTEBOOKS if generated_inputs(p) is None], "the table of contents names no experiment"


def test_a_mismatch_fails_the_notebook_check(tmp_path, monkeypatch):
    """A notebook whose number no longer matches the book's verdict fails its test (planted)."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    monkeypatch.setenv("LNBOOK_RESULTS_DIR", str(tmp_path / "results"))
    nb = new_notebook(
        cells=[
            new_code_cell("from lnbook.util.device import describe_run\nprint(describe_run())"),
            new_code_cell(
                "from lnbook.book.reproduction import compare\n"
                "compare('ch09-planted', 'a planted number', source='p', paper=1.0, ours=1.5, abs_tol=0.1)"
            ),
        ],
        metadata={"kernelspec": KERNELSPEC},
    )
    path = tmp_path / "nb" / "ch09_planted.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)
    run = execute_notebook(path, cache_dir=None, timeout=60)
    assert [c.verdict for c in run.comparisons] == ["differs"]
    with pytest.raises(AssertionError, match="REPRODUCTION MISMATCH: ch09-planted"):
        check_executed(path.name, run.nb)


@pytest.fixture(scope="module")
def experiments(request):
    """The experiment notebooks selected in this session, started at once, ``notebook_jobs()`` at a time."""
    selected = [
        item.callspec.params["path"]
        for item in request.session.items
        if item.originalname == "test_notebook_runs" and generated_inputs(item.callspec.params["path"]) is None
    ]
    pool = ExperimentPool(selected, cache_dir(ROOT, current_scale()), ROOT)
    yield pool
    pool.close()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, experiments):
    if generated_inputs(path) is None:
        # an experiment runs through the code of `python -m lnbook run all --scale ci` (the pool of
        # lnbook.book.runner, min(2, CPU count) notebooks at a time, each in its own process): CI runs
        # every experiment by the paper-scale command's own path, at ci scale
        run = experiments.result(path)
    else:  # a generated page (reproduction table, theorem index) is no experiment
        run = execute_notebook(path, cache_dir=cache_dir(ROOT, current_scale()), root=ROOT)
    EXECUTED[path.name] = run.seconds
    check_executed(path.name, run.nb)
    if path.stem == "reproduction":
        # the table is made after every experiment: it lists every comparison they recorded
        shown = text_outputs(run.nb)
        missing = [c.key for c in load_comparisons(current_scale())  # a row names its record in a tooltip
                   if f"`{c.key}`" not in shown and f'title="record {c.key}"' not in shown]
        assert not missing, f"the reproduction table lacks recorded results: {missing}"
    print(f"{path.name}: {run.seconds:.1f} s")


def test_strict_book_build_reuses_executed_notebooks():
    ensure_assets(ROOT, quiet=True)
    jb = Path(sys.executable).with_name("jupyter-book")
    start = time.perf_counter()
    proc = subprocess.run(
        [str(jb), "build", str(ROOT), "-W", "-n", "--keep-going", "--all"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "LNBOOK_SCALE": current_scale()},
    )
    log = proc.stdout + proc.stderr
    print(f"strict build: {time.perf_counter() - start:.1f} s")
    assert proc.returncode == 0, f"strict build failed (exit {proc.returncode}):\n{log[-8000:]}"
    assert (ROOT / "_build" / "html" / "index.html").exists()
    if len(EXECUTED) == len(NOTEBOOKS):
        # all notebooks ran above in this session: the build must take them from the cache
        assert "Executing notebook" not in log, "the build executed a notebook a second time:\n" + log[-4000:]


def test_built_book_reads_offline_in_chromium():
    """Every page of the built book in headless Chromium, served from localhost with every other host
    blocked: math typeset, figures loaded, widgets rendered, internal links resolve, nothing fetched
    from outside. Screenshots of every page go to _build/screenshots/ (kept by CI)."""
    reason = browser_status()  # fails with how to install Chromium when it is missing
    if reason:
        pytest.skip(reason)
    site = site_dir(ROOT, current_scale())
    assert (site / "index.html").is_file(), "no built book: run the strict build test first (make test)"
    start = time.perf_counter()
    report = check_site(site, toc_root=ROOT)
    print(f"browser check: {time.perf_counter() - start:.1f} s; {report.summary()}")
    assert report.ok, report.summary()
    # the checks had something to check: pages with math, figures and widgets
    assert report.total("math") > 0 and report.total("images") > 0 and report.total("links") > 0
    expected_views = sum(
        (site / p.page).read_text().count('type="application/vnd.jupyter.widget-view+json"') for p in report.pages
    )
    assert report.total("widgets") == expected_views
