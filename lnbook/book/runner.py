"""Execute the book's notebooks exactly as ``jupyter-book build`` would, and feed its cache.

One runner for the tests, ``make book`` and ``python -m lnbook run``. A notebook executed here is
stored in the book's jupyter-cache under the same key that myst-nb computes (the code cells), so
the ``jupyter-book build`` that follows finds every notebook cached and executes none. The cell
timeout is the book's own: ``execute: timeout`` in ``_config.yml``.

**Results.** While a notebook runs, ``lnbook.book.reproduction.compare`` records into a private folder
(``LNBOOK_RESULTS_DIR``); when the notebook succeeds, its comparisons are merged into
``results/<scale>/`` and kept with the cache record. A notebook taken from the cache restores them,
so ``results/`` always matches the outputs the book shows, and a failed run records nothing.

**No progress bars in the book.** The kernel runs with ``LNBOOK_PROGRESS=0`` and ``TQDM_DISABLE=1``
(:data:`KERNEL_ENV`): the stored outputs hold no progress bar; run interactively, the labs show theirs.

**Generated pages** (see :mod:`lnbook.book.toc`) run last and again whenever a file they are made from
changes: the digest of those files is kept with the cache record.

**Lost wake-ups.** The kernel client talks through :class:`WakeSafeChannel`. nbclient waits for a
cell's ``execute_reply`` in one zmq.asyncio poll as the cell timeout, and that poll could
miss the wake-up of a reply that had already arrived: it then saw the reply only when it timed
out, and the notebook passed after the full timeout (ch01, ipywidgets cell: 610 s instead of 11 s).
The cause: jupyter_client's ``Session.send`` writes on a plain (non-asyncio) shadow of the socket;
libzmq's send handles the socket's pending commands, and with them the "message arrived" signal
the waiting poll needed. nbclient sends on the shell socket while it waits for the reply there when
a cell shows an ipywidgets Output (its Output-widget mimic sends ``comm_msg`` back to the kernel).
:class:`WakeSafeChannel` re-checks the socket after each send, and waits in short polls so that
any other lost wake-up costs at most ``POLL_SLICE_S``; such a late-seen message is reported as a
warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from queue import Empty

import nbformat
import yaml
import zmq
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError
from traitlets import Type

from lnbook.book.reproduction import (
    MISMATCH_MARKER,
    RESULTS_ENV_VAR,
    Comparison,
    results_dir,
)
from lnbook.book.toc import book_root, generated_inputs, toc_notebooks
from lnbook.util.progress import ENV_VAR as PROGRESS_ENV_VAR
from lnbook.util.scale import ENV_VAR as SCALE_ENV_VAR
from lnbook.util.scale import SCALES, current_scale

__all__ = [
    "NotebookFailed",
    "Execution",
    "cell_timeout",
    "cache_dir",
    "execute_notebook",
    "ensure_executed",
    "ExperimentPool",
    "notebook_jobs",
    "JOBS_ENV_VAR",
    "text_outputs",
    "image_outputs",
    "mismatch_lines",
]

JOBS_ENV_VAR = "LNBOOK_NOTEBOOK_JOBS"  # experiment notebooks run at once (default: min(2, CPU count))
# kernels started for one notebook when one dies before its first reply (a port taken between choice and bind)
KERNEL_START_ATTEMPTS = 3
# longest single zmq poll while waiting for a kernel message (see WakeSafeChannel)
POLL_SLICE_S = 1.0
# after a cell's execute_reply, how long to wait for the rest of its output (nbclient's default is
# 4 s, after which it drops the missing output silently); here a longer wait, then a failure
IOPUB_TIMEOUT_S = 60
# set in the kernel's environment: an executed notebook is stored for the book, and a progress bar in it would be
# a frozen widget (red when a loop stopped early). lnbook's bars read LNBOOK_PROGRESS (lnbook.util.progress);
# TQDM_DISABLE is tqdm's own default for any other bar (one given disable=... explicitly keeps it).
KERNEL_ENV = {PROGRESS_ENV_VAR: "0", "TQDM_DISABLE": "1"}


class NotebookFailed(AssertionError):
    """A cell of a notebook raised or timed out; the message carries the notebook and the traceback."""


def cell_timeout(root: Path) -> int:
    """The book's one cell timeout in seconds: ``execute: timeout`` in ``root/_config.yml``."""
    config = yaml.safe_load((Path(root) / "_config.yml").read_text()) or {}
    value = (config.get("execute") or {}).get("timeout")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"_config.yml: execute.timeout must be a positive number of seconds, got {value!r}")
    return value


def cache_dir(root: Path, scale: str | None = None) -> Path:
    """The jupyter-cache that ``make book`` uses at ``scale``: ``_build/.jupyter_cache`` (ci) or
    ``_paper/_build/.jupyter_cache`` (paper; the cache key does not know the scale)."""
    scale = current_scale() if scale is None else scale
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    return Path(root) / ("_paper/_build" if scale == "paper" else "_build") / ".jupyter_cache"


class WakeSafeChannel(AsyncZMQSocketChannel):
    """A kernel channel on which a message that has arrived cannot sit unseen for long.

    ``zmq.asyncio`` wakes a waiting poll through the socket's edge-triggered file descriptor, and
    a send through a non-asyncio shadow of the socket (``Session.send`` does that) can consume the
    signal without waking the poll; the message then sits unseen until the poll times out.

    * ``send`` reads the socket's ``EVENTS`` afterwards through the asyncio socket, which
      schedules the wake-up a waiting poll missed (what zmq.asyncio does after its own sends).
    * ``get_msg`` waits in polls of at most ``POLL_SLICE_S`` seconds; each new poll looks at the
      socket first, so any other lost wake-up costs one slice. A message found only when a slice
      ran out is recorded in ``missed_wakeups``.
    """

    missed_wakeups: list[str] = []  # one line per message found only at the end of a slice

    async def get_msg(self, timeout: float | None = None) -> dict:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = POLL_SLICE_S if deadline is None else min(POLL_SLICE_S, max(0.0, deadline - time.monotonic()))
            start = time.monotonic()
            ready = await self.socket.poll(int(wait * 1000))
            at_slice_end = wait >= 0.1 and time.monotonic() - start >= wait - 0.005
            if ready:
                msg = await self._recv()
                age = _age(msg)
                if at_slice_end and (age is None or age >= 0.1):  # not just arrived as the slice ended
                    WakeSafeChannel.missed_wakeups.append(_describe(msg, age))
                return msg
            if deadline is not None and time.monotonic() >= deadline:
                raise Empty

    def send(self, msg: dict) -> None:
        super().send(msg)
        if self.socket is not None and not self.socket.closed:
            self.socket.get(zmq.EVENTS)  # asyncio socket: wakes a poll whose signal the send consumed


def _age(msg: dict) -> float | None:
    """Seconds since the kernel stamped ``msg`` (same machine, so the clocks agree)."""
    sent = msg.get("header", {}).get("date")
    return time.time() - sent.timestamp() if hasattr(sent, "timestamp") else None


def _describe(msg: dict, age: float | None) -> str:
    """``execute_reply (execution_count 9) sent 0.9 s before``: what a late-seen message was."""
    count = msg.get("content", {}).get("execution_count")
    return (
        msg.get("msg_type", "?")
        + (f" (execution_count {count})" if count is not None else "")
        + (f" sent {age:.1f} s before" if age is not None else "")
    )


class WakeSafeKernelClient(AsyncKernelClient):
    shell_channel_class = Type(WakeSafeChannel)
    iopub_channel_class = Type(WakeSafeChannel)
    stdin_channel_class = Type(WakeSafeChannel)
    control_channel_class = Type(WakeSafeChannel)


class WakeSafeKernelManager(AsyncKernelManager):
    client_factory = Type(WakeSafeKernelClient)


class _ProgressClient(NotebookClient):
    """nbclient's client with a progress bar over the code cells and the cells' printed text echoed
    as it arrives (``progress=True`` in :func:`execute_notebook`)."""

    def __init__(self, *args, bar=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._bar = bar

    def output(self, outs, msg, display_id, cell_index):
        if self._bar is not None and msg["msg_type"] == "stream":
            text = msg["content"].get("text", "").rstrip("\n")
            if text:
                self._bar.write(text)
        return super().output(outs, msg, display_id, cell_index)


@dataclass
class Execution:
    """One notebook run (or taken from the cache: ``seconds`` is then the cached run's time)."""

    path: Path
    nb: nbformat.NotebookNode
    seconds: float
    comparisons: list[Comparison] = field(default_factory=list)
    from_cache: bool = False

    @property
    def mismatches(self) -> list[str]:
        return mismatch_lines(self.nb)


def inputs_digest(root: Path, globs: list[str]) -> str:
    """sha256 over the paths and contents of the files matching ``globs`` under ``root``."""
    root = Path(root)
    digest = hashlib.sha256()
    files = sorted({p for pattern in globs for p in root.glob(pattern) if p.is_file()})
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _code_cells(nb) -> int:
    return sum(1 for c in nb.cells if c.cell_type == "code" and c.source.strip())


def _run(nb, path: Path, timeout: int, progress: bool) -> tuple[float, str | None]:
    """Execute ``nb`` in place in ``path``'s folder; ``(seconds, traceback or None)``."""
    bar = None
    kwargs = {}
    if progress:
        from tqdm.auto import tqdm

        # the runner's own bar (this process, a terminal); disable=False: TQDM_DISABLE is set for the kernel
        bar = tqdm(total=_code_cells(nb), desc=path.stem, unit="cell", dynamic_ncols=True, disable=False)

        def started(cell, cell_index):
            first = next((line for line in cell.source.splitlines() if line.strip()), "")
            bar.set_postfix_str(f"cell {cell_index}: {first[:40]}", refresh=True)

        kwargs = {"on_cell_execute": started, "on_cell_executed": lambda **_: bar.update(1)}
    start = time.perf_counter()
    try:
        for attempt in range(1, KERNEL_START_ATTEMPTS + 1):
            client = _ProgressClient(
                nb,
                bar=bar,
                resources={"metadata": {"path": str(path.parent)}},
                timeout=timeout,
                allow_errors=False,
                record_timing=False,  # timing metadata would change the cells, and with them the cache key
                kernel_manager_class=WakeSafeKernelManager,
                iopub_timeout=IOPUB_TIMEOUT_S,
                raise_on_iopub_timeout=True,
                **kwargs,
            )
            try:
                client.execute()
                error = None
                break
            except RuntimeError as err:
                # jupyter_client picks free TCP ports, then the kernel binds them: a kernel started at the same
                # moment elsewhere can take one first ("Address already in use"), and this kernel dies before
                # its first reply, before any cell ran. Start another (the cells are untouched).
                if "Kernel died before replying to kernel_info" not in str(err) or attempt == KERNEL_START_ATTEMPTS:
                    raise
                warnings.warn(f"{path.name}: the kernel died at start ({err}); starting another", RuntimeWarning)
    except (CellExecutionError, CellTimeoutError):
        error = traceback.format_exc()
    finally:
        if bar is not None:
            bar.close()
    return time.perf_counter() - start, error


def _merge(comparisons: list[Comparison]) -> None:
    """Write ``comparisons`` into ``results/<scale>/<chapter>.json``, replacing records with the same key."""
    by_file: dict[Path, list[Comparison]] = {}
    for c in comparisons:
        by_file.setdefault(results_dir(c.scale) / f"{c.chapter}.json", []).append(c)
    for path, items in by_file.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        records = json.loads(path.read_text()) if path.exists() else {}
        records.update({c.key: asdict(c) for c in items})
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
        tmp.replace(path)


def _collect(folder: Path) -> list[Comparison]:
    found = []
    for path in sorted(folder.glob("*/*.json")):
        found.extend(Comparison(**rec) for rec in json.loads(path.read_text()).values())
    return sorted(found, key=lambda c: c.key)


def execute_notebook(
    path: Path,
    cache_dir: Path | None = None,
    timeout: int | None = None,
    progress: bool = False,
    root: Path | None = None,
) -> Execution:
    """Execute ``path`` in its own folder; raise :class:`NotebookFailed` on the first failing cell.

    On success the notebook's comparisons go to ``results/<scale>/`` and the executed notebook to
    ``cache_dir`` (unless it is ``None``). ``timeout`` (seconds per cell) defaults to the book's,
    and, as in myst-nb, a notebook's ``metadata.execution.timeout`` overrides it.
    ``progress=True`` shows a bar over the cells and echoes what the cells print.
    """
    path = Path(path).resolve()
    root = book_root(path.parent) if root is None else Path(root)
    run = _execute_unrecorded(path, timeout, progress, root)
    _record(run, cache_dir, root)
    return run


def _execute_unrecorded(path: Path, timeout: int | None, progress: bool, root: Path) -> Execution:
    """Run ``path`` (its comparisons recorded privately); nothing written to ``results/`` or a cache."""
    nb = nbformat.read(path, as_version=4)
    timeout = cell_timeout(root) if timeout is None else timeout
    timeout = nb.metadata.get("execution", {}).get("timeout", timeout)
    os.environ.pop("MPLBACKEND", None)  # kernels inherit it; the inline backend must stay the default
    missed_before = len(WakeSafeChannel.missed_wakeups)
    globs = generated_inputs(path)
    saved = {name: os.environ.get(name) for name in (RESULTS_ENV_VAR, *KERNEL_ENV)}
    with tempfile.TemporaryDirectory(prefix="lnbook-results-") as private:
        if globs is None:  # an experiment records privately; a generated page reads the book's results
            os.environ[RESULTS_ENV_VAR] = private
        os.environ.update(KERNEL_ENV)  # the kernel inherits them: no progress bar in the stored outputs
        try:
            seconds, error = _run(nb, path, timeout, progress)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        comparisons = _collect(Path(private))
    missed = WakeSafeChannel.missed_wakeups[missed_before:]
    if missed:
        warnings.warn(
            f"{path.name}: {len(missed)} kernel message(s) found only when a {POLL_SLICE_S:g} s poll ran out "
            f"(lost zmq wake-up, recovered): " + "; ".join(missed),
            RuntimeWarning,
            stacklevel=3,
        )
    if error is not None:
        raise NotebookFailed(f"{path.parent.name}/{path.name} failed:\n{error}")
    return Execution(path, nb, seconds, comparisons)


def _record(run: Execution, cache_dir: Path | None, root: Path) -> None:
    """Merge a successful run's comparisons into ``results/`` and store it in ``cache_dir``."""
    _merge(run.comparisons)
    if cache_dir is not None:
        globs = generated_inputs(run.path)
        data = {"execution_seconds": run.seconds, "lnbook_comparisons": [asdict(c) for c in run.comparisons]}
        if globs is not None:
            data["lnbook_inputs_digest"] = inputs_digest(root, globs)
        get_cache(str(cache_dir)).cache_notebook_bundle(
            CacheBundleIn(run.nb, str(run.path), data=data), check_validity=False, overwrite=True
        )


def notebook_jobs() -> int:
    """How many experiment notebooks run at once: ``LNBOOK_NOTEBOOK_JOBS``, else min(2, CPU count)."""
    value = os.environ.get(JOBS_ENV_VAR, "").strip()
    if not value:
        return max(1, min(2, os.cpu_count() or 1))
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{JOBS_ENV_VAR} must be a whole number >= 1 (notebooks run at once), got {value!r}")
    return int(value)


def _execute_in_child(path: str, timeout: int | None, root: str) -> Execution:
    # runs in a spawned process: one kernel, nothing written but the notebook's own files
    return _execute_unrecorded(Path(path), timeout, False, Path(root))


class ExperimentPool:
    """Experiment notebooks executed ``jobs`` at a time, each from its own spawned process.

    Every run is recorded (``results/`` and ``cache_dir``) by this process, one at a time, when
    :meth:`result` hands it out, so no two processes write the same file. Each notebook is seeded
    and runs in its own kernel, so what it computes does not depend on ``jobs``; only its
    wall time does. With ``jobs=1`` nothing is spawned: :meth:`result` executes the notebook itself.
    Generated pages read every experiment's results and are not run here.
    """

    def __init__(self, paths, cache_dir: Path | None, root: Path, jobs: int | None = None, timeout: int | None = None):
        self.paths = [Path(p).resolve() for p in paths]
        generated = [p.name for p in self.paths if generated_inputs(p) is not None]
        if generated:
            raise ValueError(f"generated pages read every experiment's results; run them after the pool: {generated}")
        self.cache_dir, self.root, self.timeout = cache_dir, Path(root), timeout
        self.jobs = notebook_jobs() if jobs is None else jobs
        if self.jobs < 1:
            raise ValueError(f"jobs must be >= 1, got {self.jobs}")
        self._done: dict[Path, Execution] = {}
        self._executor = None
        self._futures = {}
        if self.jobs > 1 and len(self.paths) > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self._executor = ProcessPoolExecutor(self.jobs, mp_context=multiprocessing.get_context("spawn"))
            self._futures = {
                p: self._executor.submit(_execute_in_child, str(p), timeout, str(self.root)) for p in self.paths
            }

    def result(self, path, progress: bool = False) -> Execution:
        """The run of ``path`` (waiting for it), recorded; raises :class:`NotebookFailed` if it failed."""
        path = Path(path).resolve()
        if path not in self._done:
            if path in self._futures:
                run = self._futures[path].result()
            elif path in self.paths:
                run = _execute_unrecorded(path, self.timeout, progress, self.root)
            else:
                raise ValueError(f"{path.name} is not one of this pool's notebooks")
            _record(run, self.cache_dir, self.root)
            self._done[path] = run
        return self._done[path]

    def close(self) -> None:
        """Stop what has not started; wait for what runs."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def cached_execution(path: Path, cache_dir: Path, root: Path) -> Execution | None:
    """The cached run of ``path`` when it is still valid (same code; for a generated page, also the
    same inputs), else ``None``."""
    path = Path(path).resolve()
    nb = nbformat.read(path, as_version=4)
    cache = get_cache(str(cache_dir))
    try:
        record = cache.match_cache_notebook(nb)
    except KeyError:
        return None
    if "lnbook_comparisons" not in record.data:
        return None  # executed by jupyter-book itself: its results were not kept with it
    globs = generated_inputs(path)
    if globs is not None and record.data.get("lnbook_inputs_digest") != inputs_digest(root, globs):
        return None
    _, merged = cache.merge_match_into_notebook(nb)
    comparisons = [Comparison(**rec) for rec in record.data.get("lnbook_comparisons", [])]
    return Execution(path, merged, record.data.get("execution_seconds", 0.0), comparisons, from_cache=True)


def ensure_executed(
    root: Path | None = None, scale: str | None = None, progress: bool = True, jobs: int | None = None
) -> list[Execution]:
    """Make the cache of ``scale`` hold a valid run of every notebook in ``_toc.yml`` (what ``make book``
    does before ``jupyter-book build``): cached ones are kept, the other experiments run ``jobs`` at a
    time (:class:`ExperimentPool`), then the generated pages. Returns the runs in the order of ``_toc.yml``.

    Afterwards ``results/<scale>/`` holds exactly the comparisons of these runs: records of keys
    that no notebook makes any more are dropped.
    """
    root = book_root() if root is None else Path(root)
    scale = current_scale() if scale is None else scale
    os.environ[SCALE_ENV_VAR] = scale
    folder = cache_dir(root, scale)
    paths = toc_notebooks(root)
    experiments = [p for p in paths if generated_inputs(p) is None]
    runs = {p: cached_execution(p, folder, root) for p in experiments}
    todo = [p for p in experiments if runs[p] is None]
    with ExperimentPool(todo, folder, root, jobs=jobs) as pool:
        for p in todo:
            runs[p] = pool.result(p, progress=progress)
    # every experiment has run: the generated pages must read exactly their results
    _replace_results(scale, [c for p in experiments for c in runs[p].comparisons])
    for p in paths:
        if p not in runs:
            runs[p] = cached_execution(p, folder, root) or execute_notebook(p, cache_dir=folder, progress=progress, root=root)
    return [runs[p] for p in paths]


def _replace_results(scale: str, comparisons: list[Comparison]) -> None:
    """Make ``results/<scale>/`` hold exactly ``comparisons`` (one file per chapter)."""
    folder = results_dir(scale)
    if folder.is_dir():
        for path in folder.glob("*.json"):
            path.unlink()
    _merge([c for c in comparisons if c.scale == scale])


def text_outputs(nb) -> str:
    """All stream, plain-text and markdown outputs of an executed notebook, concatenated."""
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                parts.append(out.get("text", ""))
            elif "data" in out:
                for mime in ("text/plain", "text/markdown"):
                    if mime in out["data"]:
                        parts.append(out["data"][mime])
    return "\n".join(parts)


def mismatch_lines(nb) -> list[str]:
    """The lines a notebook printed that start with :data:`lnbook.book.reproduction.MISMATCH_MARKER`."""
    return [line for line in text_outputs(nb).splitlines() if line.startswith(MISMATCH_MARKER)]


def image_outputs(nb) -> int:
    """How many image outputs (PNG or SVG) an executed notebook has, glued ones included."""
    return sum(
        1
        for cell in nb.cells
        for out in cell.get("outputs", [])
        if any(k in out.get("data", {}) for k in ("image/png", "image/svg+xml"))
    )
