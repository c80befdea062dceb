r"""Robust wall-clock comparisons of a few functions, for benchmarks and the labs' live measurements.

:func:`interleaved_min_times` runs the candidates in turn, ``repeats`` rounds of ``inner`` calls
each, and keeps each candidate's **minimum** over the rounds: noise from other processes only ever
adds time, so the minimum is the most stable estimate, and interleaving exposes every candidate to
the same drift of the machine. Ratios of two minima measured in one call are what the book reports;
absolute times depend on the machine. Timings are never asserted by tests.

>>> times = interleaved_min_times({"a": lambda: None, "b": lambda: None}, repeats=3, inner=2)
>>> sorted(times)
['a', 'b']
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from lnbook.validation import check_positive_int

__all__ = ["interleaved_min_times", "speedup"]


def _sync(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_min_times(
    candidates: dict[str, Callable[[], object]],
    *,
    repeats: int = 10,
    inner: int = 1,
    warmup: int = 2,
    device: torch.device | None = None,
) -> dict[str, float]:
    """Seconds per call of each candidate: the minimum over ``repeats`` interleaved rounds of ``inner`` calls."""
    if not candidates:
        raise ValueError("candidates is empty")
    repeats, inner = check_positive_int(repeats, "repeats"), check_positive_int(inner, "inner")
    warmup = check_positive_int(warmup, "warmup", minimum=0)
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    best = {name: float("inf") for name in candidates}
    for _ in range(repeats):
        for name, fn in candidates.items():
            _sync(device)
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            _sync(device)
            best[name] = min(best[name], (time.perf_counter() - start) / inner)
    return best


def speedup(baseline_seconds: float, new_seconds: float) -> float:
    """``baseline / new - 1``: 0.1 means 10% faster, negative means slower."""
    if not (baseline_seconds > 0 and new_seconds > 0):
        raise ValueError(f"times must be positive, got {baseline_seconds} and {new_seconds}")
    return baseline_seconds / new_seconds - 1.0
