"""Execute the book's notebooks exactly as ``jupyter-book build`` would, and feed its cache.

A notebook executed here is stored in the book's jupyter-cache (``_build/.jupyter_cache``) under
the same key that myst-nb computes, so the strict book build that follows finds every notebook
cached and executes nothing a second time.

The kernel client talks through :class:`WakeSafeChannel`. nbclient waits for a cell's
``execute_reply`` in one zmq.asyncio poll as long as the cell timeout (600 s), and that poll could
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

import os
import time
import warnings
from pathlib import Path
from queue import Empty

import nbformat
import yaml
import zmq
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn
from jupyter_cache.executors.utils import single_nb_execution
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.manager import AsyncKernelManager
from traitlets import Type

ROOT = Path(__file__).resolve().parents[1]
CACHE_DIR = ROOT / "_build" / ".jupyter_cache"
# per cell; at ci scale no cell needs a minute, so a hung kernel fails the test instead of CI
CELL_TIMEOUT_S = 600 if os.environ.get("LNBOOK_SCALE", "ci") == "ci" else 3600
# longest single zmq poll while waiting for a kernel message (see WakeSafeChannel)
POLL_SLICE_S = 1.0
# after a cell's execute_reply, how long to wait for the rest of its output (nbclient's default is
# 4 s, after which it drops the missing output silently); here a longer wait, then a failure
IOPUB_TIMEOUT_S = 60


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


class NotebookFailed(AssertionError):
    """A cell of a notebook raised; the message carries the notebook path and the traceback."""


def toc_files(toc_path: Path = ROOT / "_toc.yml") -> list[str]:
    """Every ``file:`` entry of the table of contents, in reading order."""
    toc = yaml.safe_load(toc_path.read_text())
    found: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            for key in ("root", "file"):
                if key in node and isinstance(node[key], str):
                    found.append(node[key])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(toc)
    return found


def toc_notebooks(root: Path = ROOT) -> list[Path]:
    """The ``.ipynb`` files that the table of contents names."""
    return [root / f"{name}.ipynb" for name in toc_files(root / "_toc.yml") if (root / f"{name}.ipynb").exists()]


def image_outputs(nb) -> int:
    """How many image outputs (PNG or SVG) an executed notebook has, glued ones included."""
    return sum(
        1
        for cell in nb.cells
        for out in cell.get("outputs", [])
        if any(k in out.get("data", {}) for k in ("image/png", "image/svg+xml"))
    )


def execute_notebook(path: Path, cache_dir: Path | None = CACHE_DIR, timeout: int = CELL_TIMEOUT_S):
    """Execute ``path`` in its own folder; raise :class:`NotebookFailed` on the first failing cell.

    On success the executed notebook is stored in ``cache_dir`` (unless it is ``None``) and
    ``(notebook, seconds)`` is returned.
    """
    path = Path(path).resolve()
    nb = nbformat.read(path, as_version=4)
    os.environ.pop("MPLBACKEND", None)  # kernels inherit it; the inline backend must stay the default
    missed_before = len(WakeSafeChannel.missed_wakeups)
    result = single_nb_execution(
        nb,
        cwd=str(path.parent),
        allow_errors=False,
        timeout=timeout,
        meta_override=True,
        kernel_manager_class=WakeSafeKernelManager,
        iopub_timeout=IOPUB_TIMEOUT_S,
        raise_on_iopub_timeout=True,
    )
    missed = WakeSafeChannel.missed_wakeups[missed_before:]
    if missed:
        warnings.warn(
            f"{path.name}: {len(missed)} kernel message(s) found only when a {POLL_SLICE_S:g} s poll ran out "
            f"(lost zmq wake-up, recovered): " + "; ".join(missed),
            RuntimeWarning,
            stacklevel=2,
        )
    if result.err is not None:
        raise NotebookFailed(f"{path.relative_to(path.parents[1])} failed:\n{result.exc_string}")
    if cache_dir is not None:
        cache = get_cache(str(cache_dir))
        cache.cache_notebook_bundle(
            CacheBundleIn(nb, str(path), data={"execution_seconds": result.time}),
            check_validity=False,
            overwrite=True,
        )
    return nb, result.time


def text_outputs(nb) -> str:
    """All stream and plain-text outputs of an executed notebook, concatenated."""
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                parts.append(out.get("text", ""))
            elif "data" in out and "text/plain" in out["data"]:
                parts.append(out["data"]["text/plain"])
    return "\n".join(parts)
