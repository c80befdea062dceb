r"""Robust wall-clock comparisons of a few functions, for benchmarks and the labs' live measurements.

:func:`interleaved_min_times` runs the candidates in turn, ``repeats`` rounds of ``inner`` calls
each, and keeps each candidate's **minimum** over the rounds: noise from other processes only ever
adds time, so the minimum is the most stable estimate, and interleaving exposes every candidate to
the same drift of the machine. Each round runs the candidates in a new order (a permutation drawn
from a fixed seed), so that no candidate always follows the same other one, and each timed block is
preceded by one untimed call of the same candidate. On a CPU, what ran before matters: fresh memory
pages, cold caches and where the allocator places the output relative to the input changed the time
of a 1024 x 768 LayerNorm by up to 40% on the book's machine, depending only on which candidate ran
before it. The minimum over rounds with varied predecessors removes that cost of the switch. Ratios of two minima measured in one call are what the book reports;
absolute times depend on the machine. Timings are never asserted by tests.

``clock="thread"`` measures the CPU time of the calling thread (``time.thread_time``) instead of
wall-clock time: on a shared machine it leaves out the time the process waited for a core. It is
meant for single-threaded CPU work (``torch.set_num_threads(1)``: torch then computes in the
calling thread); with more threads or on CUDA use the default ``clock="wall"``.

>>> times = interleaved_min_times({"a": lambda: None, "b": lambda: None}, repeats=3, inner=2)
>>> sorted(times)
['a', 'b']
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from lnbook.util.validation import check_positive_int

__all__ = ["CLOCKS", "synchronize", "interleaved_min_times", "speedup", "amdahl_speedup"]

CLOCKS = {"wall": time.perf_counter, "thread": time.thread_time}


def synchronize(device: torch.device | None) -> None:
    """Wait for the kernels queued on ``device`` when it is a CUDA device (they run asynchronously), so that a clock
    read next counts them; nothing on the CPU or for ``None``."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_min_times(
    candidates: dict[str, Callable[[], object]],
    *,
    repeats: int = 10,
    inner: int = 1,
    warmup: int = 2,
    device: torch.device | None = None,
    clock: str = "wall",
) -> dict[str, float]:
    """Seconds per call of each candidate: the minimum over ``repeats`` interleaved rounds of ``inner`` calls."""
    if not candidates:
        raise ValueError("candidates is empty")
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {tuple(CLOCKS)}, got {clock!r}")
    if clock == "thread" and device is not None and device.type == "cuda":
        raise ValueError("clock='thread' measures CPU work; time CUDA with clock='wall'")
    now = CLOCKS[clock]
    repeats, inner = check_positive_int(repeats, "repeats"), check_positive_int(inner, "inner")
    warmup = check_positive_int(warmup, "warmup", minimum=0)
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    best = {name: float("inf") for name in candidates}
    names = list(candidates)
    order = torch.Generator().manual_seed(0)
    for _ in range(repeats):
        for i in torch.randperm(len(names), generator=order).tolist():
            name = names[i]
            fn = candidates[name]
            fn()  # untimed: the switch from the previous candidate is not this candidate's cost
            synchronize(device)
            start = now()
            for _ in range(inner):
                fn()
            synchronize(device)
            best[name] = min(best[name], (now() - start) / inner)
    return best


def speedup(baseline_seconds: float, new_seconds: float) -> float:
    """``baseline / new - 1``: 0.1 means 10% faster, negative means slower."""
    if not (baseline_seconds > 0 and new_seconds > 0):
        raise ValueError(f"times must be positive, got {baseline_seconds} and {new_seconds}")
    return baseline_seconds / new_seconds - 1.0


def amdahl_speedup(share: float, part_speedup: float) -> float:
    """End-to-end speed-up when a ``share`` of the time gets ``part_speedup`` faster (Amdahl's law):
    ``1 / (1 - share + share / (1 + part_speedup)) - 1``.

    >>> round(amdahl_speedup(0.01, 0.8), 4)
    0.0045
    """
    if not 0 <= share <= 1:
        raise ValueError(f"share must lie in [0, 1], got {share}")
    if not part_speedup > -1:
        raise ValueError(f"part_speedup must be > -1 (a time ratio above 0), got {part_speedup}")
    return 1.0 / (1.0 - share + share / (1.0 + part_speedup)) - 1.0
