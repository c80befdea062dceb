"""The lab facade: what every notebook of the book imports besides its own topic package.

* :func:`setup` — the one setup cell (style, seeds, device, threads);
* :func:`at_scale`, :func:`current_scale` — sizes by ``LNBOOK_SCALE`` (``ci`` or ``paper``);
* :func:`compare`, :func:`results_dir` — our numbers beside the papers', recorded for the reproduction table;
* :func:`glue` — a value the chapter's prose quotes with ``{glue:text}``.

Every lab opens with the same code cell::

    %matplotlib inline
    from lnbook.notebook import setup

    device = setup()

which applies the book's figure style, seeds Python, NumPy and torch, picks the device (CUDA when
present, else the CPU), fixes the number of CPU threads and prints :func:`lnbook.describe_run`.
Sizes come next, in the notebook's own cell, through :func:`lnbook.at_scale`.
"""

from __future__ import annotations

import os

import torch

from lnbook.book.reproduction import compare, results_dir
from lnbook.util.device import describe_run, get_device, seed_everything
from lnbook.util.plotting import use_book_style
from lnbook.util.scale import at_scale, current_scale

__all__ = ["setup", "at_scale", "current_scale", "compare", "results_dir", "glue", "cpu_threads"]

THREADS_ENV_VAR = "LNBOOK_THREADS"


def cpu_threads() -> int:
    """CPU threads for torch: ``LNBOOK_THREADS`` when set, else 1.

    One thread is the default because CI runs two notebooks at once on two cores, and the book's
    tensors are small (one thread is then also the fastest).
    """
    raw = os.environ.get(THREADS_ENV_VAR, "1").strip() or "1"
    try:
        threads = int(raw)
    except ValueError:
        raise ValueError(f"{THREADS_ENV_VAR} must be a positive integer, got {raw!r}") from None
    if threads < 1:
        raise ValueError(f"{THREADS_ENV_VAR} must be a positive integer, got {raw!r}")
    return threads


def setup(seed: int = 0) -> torch.device:
    """Style, seeds, device and threads for a notebook; prints :func:`describe_run`; returns the device."""
    use_book_style()
    seed_everything(seed)
    device = get_device()
    if device.type == "cpu":
        torch.set_num_threads(cpu_threads())
    torch.set_printoptions(precision=4, sci_mode=False)
    print(describe_run())
    return device


def glue(name: str, value, display: bool = True):
    """Glue ``value`` under ``name`` for the book's prose (``{glue:text}`name```): MyST-NB's ``glue``.

    A matplotlib figure is glued only when it is readable at the book's column width
    (:func:`lnbook.util.plotting.readability_problems` finds no text below 9 pt once the page shrinks it);
    otherwise this raises a ValueError listing each small text, so a lab that glues an unreadable figure fails."""
    from matplotlib.figure import Figure
    from myst_nb import glue as _glue

    if isinstance(value, Figure):
        from lnbook.util.plotting import COLUMN_WIDTH_IN, readability_problems

        problems = readability_problems(value)
        if problems:
            raise ValueError(
                f"figure {name!r} is not readable at the book's {COLUMN_WIDTH_IN:g} in column; make it the column's "
                f"width (figsize=(COLUMN_WIDTH_IN, ...)), put long rows of panels in two rows or legends below, or "
                f"enlarge its fonts: " + "; ".join(problems)
            )
    return _glue(name, value, display=display)
