"""Every notebook of the book runs as a test (at the scale CI sets), then the strict build runs.

`make test` distributes tests by file (``--dist loadfile``), so everything here runs in this order
on one worker: each notebook once, then the strict build, which finds every notebook in the cache
and executes none again (asserted).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from notebook_runner import ROOT, execute_notebook, image_outputs, text_outputs, toc_notebooks

from lnbook.scale import current_scale

NOTEBOOKS = toc_notebooks()
EXECUTED: dict[str, float] = {}

pytestmark = pytest.mark.notebook


def test_toc_has_notebooks():
    assert NOTEBOOKS, "the table of contents names no notebook"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path):
    nb, seconds = execute_notebook(path)
    EXECUTED[path.name] = seconds
    # every notebook announces the scale it ran at (lnbook.device.describe_run) in its output
    assert f"scale={current_scale()}" in text_outputs(nb), f"{path.name} does not print describe_run()"
    # a notebook that draws must show its figures (a non-inline matplotlib backend silently drops them)
    draws = any("plt.show()" in c.source or "plt.subplots" in c.source for c in nb.cells if c.cell_type == "code")
    if draws:
        assert image_outputs(nb) > 0, f"{path.name} draws figures but produced no image output"
    print(f"{path.name}: {seconds:.1f} s")


def test_strict_book_build_reuses_executed_notebooks():
    jb = Path(sys.executable).with_name("jupyter-book")
    start = time.perf_counter()
    proc = subprocess.run(
        [str(jb), "build", str(ROOT), "-W", "-n", "--keep-going"],
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
