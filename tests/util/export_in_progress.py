"""A non-strict ``torch.export`` held in the middle of its trace in another thread, for the tests that check that
another thread's export does not switch this thread's checks off (``torch.export`` sets torch's process-wide
``torch.compiler.is_compiling()`` flag while it traces)."""

from __future__ import annotations

import contextlib
import threading

import torch
from torch import nn


class _Paused(nn.Module):
    """A module whose forward, while traced, signals that the trace is running and waits to be released."""

    def __init__(self, started: threading.Event, release: threading.Event):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.started, self.release = started, release

    def forward(self, x):
        self.started.set()
        self.release.wait(60)
        return self.lin(x)


@contextlib.contextmanager
def export_in_another_thread():
    """Inside the block another thread is in the middle of ``torch.export.export(..., strict=False)`` of an
    unrelated module; the export finishes when the block is left."""
    started, release = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    def export():
        try:
            torch.export.export(_Paused(started, release), (torch.randn(2, 3),), strict=False)
        except BaseException as err:  # noqa: BLE001 - reported in the main thread
            failed.append(err)
            started.set()

    thread = threading.Thread(target=export)
    thread.start()
    try:
        assert started.wait(60), "the other thread's export did not start"
        assert not failed, failed
        assert torch.compiler.is_compiling(), "torch.export no longer sets the process-wide flag: the scenario is gone"
        yield
    finally:
        release.set()
        thread.join(60)
    assert not failed, failed
