"""The one setup every notebook of the book starts with.

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

from lnbook.device import describe_run, get_device, seed_everything
from lnbook.plotting import use_book_style

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
