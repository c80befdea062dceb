"""lnbook.book.runner on a planted tiny book: the cell timeout, results kept with the cache, generated pages.

Also the lost wake-ups of the kernel client (``WakeSafeChannel``). The runs of the book's own notebooks are in
tests/whole_book/test_notebooks.py.
"""

from __future__ import annotations

import json
import os
import time
import warnings

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
from tests.book.planted_book import KERNELSPEC, compare_cell, make_book, write_notebook


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


def test_runner_recovers_a_lost_zmq_wakeup(tmp_path, monkeypatch):
    """A lost wake-up on the shell socket costs one poll slice, not the whole cell timeout.

    Planted here: the first readiness event of the shell socket after the cell is sent is consumed
    without being dispatched, so the ``execute_reply`` sits unseen in the socket (what happened,
    unplanted, in the ipywidgets cells: nbclient then waited the full 600 s and passed).
    """
    import nbformat
    import zmq
    from jupyter_client.asynchronous import AsyncKernelClient
    from nbformat.v4 import new_code_cell, new_notebook
    from zmq import _future

    nb = new_notebook(
        cells=[new_code_cell("import time\ntime.sleep(0.5)\nprint('done')")],
        metadata={"kernelspec": KERNELSPEC},
    )
    path = tmp_path / "nb" / "lost_wakeup.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)

    armed: dict = {}
    dropped: list[int] = []
    execute, handle_events = AsyncKernelClient.execute, _future._AsyncSocket._handle_events

    def arming_execute(self, *args, **kwargs):
        armed["socket"] = self.shell_channel.socket
        return execute(self, *args, **kwargs)

    def lossy_handle_events(self, fd=0, events=0):
        if armed.get("socket") is self and not self.closed and self._shadow_sock.get(zmq.EVENTS) & zmq.POLLIN:
            armed.clear()  # the signal is drained and dropped: nobody is told the reply is there
            dropped.append(1)
            return None
        return handle_events(self, fd, events)

    monkeypatch.setattr(AsyncKernelClient, "execute", arming_execute)
    monkeypatch.setattr(_future._AsyncSocket, "_handle_events", lossy_handle_events)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = execute_notebook(path, cache_dir=None, timeout=30)
    elapsed = time.perf_counter() - start
    assert dropped, "the planted lost wake-up never happened"
    assert "done" in text_outputs(run.nb)
    assert elapsed < 15, f"a lost wake-up cost {elapsed:.0f} s (the cell timeout is 30 s)"
    assert any("lost zmq wake-up" in str(w.message) for w in caught), "the recovered wake-up was not reported"


def test_a_send_does_not_swallow_the_wakeup_of_a_waiting_poll(monkeypatch):
    """The cause of the 600 s waits: a send on the shell socket while nbclient awaits a reply on it.

    ``Session.send`` writes through a plain shadow of the asyncio socket, and that send handles
    the "reply arrived" signal the waiting poll needed. Planted here: the event loop is blocked
    (so the arrival is not yet handled) while the reply comes in, then a request is sent. With the
    slices switched off, only the re-check after the send can wake the poll.
    """
    import asyncio

    from jupyter_core.utils import run_sync

    from lnbook.book import runner as notebook_runner

    monkeypatch.setattr(notebook_runner, "POLL_SLICE_S", 60.0)

    async def scenario():
        km = notebook_runner.WakeSafeKernelManager(kernel_name="python3")
        await km.start_kernel()
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=60)
            while await kc.shell_channel.msg_ready():  # spare kernel_info replies
                await kc.shell_channel.get_msg()
            msg_id = kc.execute("import time; time.sleep(0.2)")
            waiter = asyncio.ensure_future(kc.shell_channel.get_msg(timeout=20))
            await asyncio.sleep(0.05)  # the poll is waiting
            time.sleep(2.0)  # loop blocked: the reply arrives, its wake-up not yet handled
            kc.kernel_info()  # a send on the shell socket, as nbclient's Output-widget mimic does
            start = time.perf_counter()
            reply = await waiter
            return reply, msg_id, time.perf_counter() - start
        finally:
            kc.stop_channels()
            await km.shutdown_kernel(now=True)

    reply, msg_id, waited = run_sync(scenario)()
    assert reply["parent_header"]["msg_id"] == msg_id and reply["msg_type"] == "execute_reply"
    assert waited < 5, f"the reply had arrived, yet the poll slept {waited:.0f} s (its timeout is 20 s)"


def test_a_kernel_that_dies_at_start_is_replaced(tmp_path, monkeypatch):
    """A kernel that dies before its first reply (its port taken by another kernel started at the same moment,
    seen once in CI) is replaced; the notebook runs once, and a kernel that keeps dying fails with the reason."""
    from lnbook.book import runner as notebook_runner

    path = write_notebook(tmp_path / "nb" / "tiny.ipynb", ["print('ran')"])
    calls = {"n": 0}
    execute = notebook_runner._ProgressClient.execute

    def dies_first(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("Kernel died before replying to kernel_info")
        return execute(self, *args, **kwargs)

    monkeypatch.setattr(notebook_runner._ProgressClient, "execute", dies_first)
    with pytest.warns(RuntimeWarning, match="the kernel died at start"):
        run = execute_notebook(path, cache_dir=None, timeout=60)
    assert calls["n"] == 2 and text_outputs(run.nb).count("ran") == 1

    def always_dies(self, *args, **kwargs):
        raise RuntimeError("Kernel died before replying to kernel_info")

    monkeypatch.setattr(notebook_runner._ProgressClient, "execute", always_dies)
    with pytest.warns(RuntimeWarning), pytest.raises(RuntimeError, match="Kernel died"):
        execute_notebook(path, cache_dir=None, timeout=60)


def test_notebooks_run_for_the_book_store_no_progress_bar(tmp_path, monkeypatch):
    """The kernel runs with LNBOOK_PROGRESS=0 and TQDM_DISABLE=1: neither lnbook's bar nor a lab's own tqdm is
    stored (a frozen bar in the page); the runner's environment is as before afterwards."""
    monkeypatch.delenv("LNBOOK_PROGRESS", raising=False)
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    cell = (
        "import os, sys\n"
        "from tqdm import tqdm\n"
        "from lnbook.util.progress import progress_bar\n"
        "assert sum(progress_bar(range(3), desc='lnbook-bar', file=sys.stdout, mininterval=0)) == 3\n"
        "assert sum(tqdm(range(3), desc='lab-bar', file=sys.stdout, mininterval=0)) == 3\n"
        "print('env', os.environ.get('LNBOOK_PROGRESS'), os.environ.get('TQDM_DISABLE'))"
    )
    path = write_notebook(tmp_path / "nb" / "bars.ipynb", [cell])
    run = execute_notebook(path, cache_dir=None, timeout=60)
    text = text_outputs(run.nb)
    assert "env 0 1" in text
    assert "lnbook-bar" not in text and "lab-bar" not in text and "3/3" not in text, text
    assert "LNBOOK_PROGRESS" not in os.environ and "TQDM_DISABLE" not in os.environ
