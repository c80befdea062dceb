"""The book's utilities: input validation, device and seeding, the scale switch, timing, plotting.

Tests: tests/util/.

Modules:

* :mod:`lnbook.util.device` — Where computations run (CUDA when present, else the CPU) and how runs are seeded;
* :mod:`lnbook.util.plotting` — The book's plotting style, set once. Captions live in the book, so figures carry no titles;
* :mod:`lnbook.util.progress` — Progress bars for people who run a notebook, none in the built book;
* :mod:`lnbook.util.scale` — One switch for the size of every experiment: ``LNBOOK_SCALE=ci`` or ``LNBOOK_SCALE=paper``;
* :mod:`lnbook.util.stats` — How sure a fraction of seeds is: the exact (Clopper-Pearson) interval of a binomial proportion;
* :mod:`lnbook.util.tables` — Tables for the labs' pages: HTML in the book and in Jupyter, aligned text in a terminal;
* :mod:`lnbook.util.timing` — Robust wall-clock comparisons of a few functions, for benchmarks and the labs' live measurements;
* :mod:`lnbook.util.validation` — Input checks shared by every public function of :mod:`lnbook`;
"""

from __future__ import annotations

import importlib

__all__ = [
    "CLOCKS",
    "interleaved_min_times",
    "speedup",
    "amdahl_speedup",
]


def __getattr__(name: str):
    """The timing helpers, imported when first used (PEP 562): :mod:`lnbook.util.scale` and
    :mod:`lnbook.util.validation` are read without importing torch."""
    if name in __all__:
        value = getattr(importlib.import_module("lnbook.util.timing"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'lnbook.util' has no attribute {name!r}")
