"""One switch for the size of every experiment: ``LNBOOK_SCALE=ci`` or ``LNBOOK_SCALE=paper``.

CI and the default book build run at ``ci`` scale (small, minutes on 2 CPU cores).
``paper`` reproduces the sources' configurations and is meant for a GPU.
"""

from __future__ import annotations

import os

SCALES = ("ci", "paper")
ENV_VAR = "LNBOOK_SCALE"


def current_scale() -> str:
    """The active scale, read from the environment variable ``LNBOOK_SCALE`` (default ``ci``)."""
    value = os.environ.get(ENV_VAR, "ci").strip().lower() or "ci"
    if value not in SCALES:
        raise ValueError(f"{ENV_VAR} must be one of {SCALES}, got {value!r}")
    return value


def at_scale(ci, paper):
    """Return ``ci`` or ``paper`` according to :func:`current_scale`."""
    return paper if current_scale() == "paper" else ci


def is_paper_scale() -> bool:
    return current_scale() == "paper"
