"""Progress bars for people who run a notebook, none in the built book.

Every progress bar of :mod:`lnbook` and of the labs is made by :func:`progress_bar` (tqdm). The book's
runner (:mod:`lnbook.book.runner`) executes notebooks with ``LNBOOK_PROGRESS=0`` in the kernel's
environment: a bar then draws nothing, so no frozen bar (red when a loop stopped early) is stored in an
executed notebook. Interactively (Jupyter, a script) the variable is unset and the bars show.
"""

from __future__ import annotations

import os

ENV_VAR = "LNBOOK_PROGRESS"
_ON, _OFF = ("1", "on", "true", "yes"), ("0", "off", "false", "no")

__all__ = ["ENV_VAR", "progress_enabled", "progress_bar"]


def progress_enabled() -> bool:
    """Whether progress bars draw: ``LNBOOK_PROGRESS`` unset or ``1``/``on``; ``0``/``off`` turns them off."""
    raw = os.environ.get(ENV_VAR, "").strip().lower()
    if raw == "" or raw in _ON:
        return True
    if raw in _OFF:
        return False
    raise ValueError(f"{ENV_VAR} must be 1 (bars on) or 0 (bars off, as in the book's build), got {raw!r}")


def progress_bar(iterable=None, *, enabled: bool = True, **kwargs):
    """A tqdm bar over ``iterable`` (``tqdm.auto``: a widget in Jupyter, text elsewhere).

    It draws only when ``enabled`` and :func:`progress_enabled`; otherwise the same tqdm object is returned
    with ``disable=True`` (it iterates ``iterable`` unchanged and prints nothing). ``kwargs`` go to tqdm
    (``desc``, ``total``, ``leave``...); ``disable`` is not one of them: use ``enabled``.
    """
    if "disable" in kwargs:
        raise TypeError("progress_bar takes enabled=..., not disable=... (LNBOOK_PROGRESS=0 also turns it off)")
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be True or False, got {enabled!r}")
    from tqdm.auto import tqdm

    return tqdm(iterable, disable=not (enabled and progress_enabled()), **kwargs)
