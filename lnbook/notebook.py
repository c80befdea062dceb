"""The lab facade: what every notebook of the book imports besides its own topic package.

* :func:`setup` — the one setup cell (style, seeds, device, threads);
* :func:`at_scale`, :func:`current_scale` — sizes by ``LNBOOK_SCALE`` (``ci`` or ``paper``);
* :func:`compare`, :func:`results_dir` — our numbers beside the papers', recorded for the reproduction table
  (:func:`comparisons_together`: several shown as one line);
* :func:`glue` — a value the chapter's prose quotes with ``{glue:text}``;
* :func:`recorded_benchmark` — a committed benchmark run (``benchmarks/recorded/<name>.json``), read without a file
  path in the lab's visible code.

Every lab opens with the same lines, followed in the same collapsed cell (``hide-cell``) by the lab's imports::

    %matplotlib inline
    from lnbook.notebook import setup

    device = setup()

which applies the book's figure style, seeds Python, NumPy and torch, picks the device (CUDA when
present, else the CPU), fixes the number of CPU threads, holds every figure the lab shows to the book's
readability rule (:func:`check_shown_figures`) and prints :func:`lnbook.describe_run`.
Sizes come next, in the notebook's own cell, through :func:`lnbook.at_scale`.
"""

from __future__ import annotations

import os
import re

import torch

from lnbook.book.reproduction import compare, comparisons_together, results_dir
from lnbook.util.device import describe_run, get_device, seed_everything
from lnbook.util.plotting import use_book_style
from lnbook.util.scale import at_scale, current_scale

__all__ = ["setup", "at_scale", "current_scale", "compare", "comparisons_together", "results_dir", "glue", "cpu_threads", "check_shown_figures",
           "recorded_benchmark"]

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


RECORDED_BENCHMARKS = "benchmarks/recorded"  # under the book's root: the committed runs of benchmarks/*.py


def recorded_benchmark(name: str, root=None) -> dict:
    """The committed benchmark run ``name`` (``"fold_speed_cpu"``: ``benchmarks/recorded/fold_speed_cpu.json`` under the
    book's root, :func:`lnbook.book.toc.book_root`), as the dict its JSON holds. A lab reads its recorded runs through
    this, so that its visible code shows which run it reads and no file path (screenshot read, issue 33). Refuses a
    name with a folder or a suffix, and says which runs exist when there is none by that name."""
    import json
    from pathlib import Path

    from lnbook.book.toc import book_root

    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise ValueError(f"give a recorded run's name without folder or suffix ('fold_speed_cpu'), got {name!r}")
    folder = (book_root() if root is None else Path(root)) / RECORDED_BENCHMARKS
    path = folder / f"{name}.json"
    if not path.is_file():
        known = sorted(p.stem for p in folder.glob("*.json"))
        raise FileNotFoundError(f"no recorded benchmark run {name!r} in {RECORDED_BENCHMARKS}; there are {known}")
    return json.loads(path.read_text())


def setup(seed: int = 0) -> torch.device:
    """Style, seeds, device and threads for a notebook; prints :func:`describe_run`; returns the device."""
    use_book_style()
    seed_everything(seed)
    device = get_device()
    if device.type == "cpu":
        torch.set_num_threads(cpu_threads())
    torch.set_printoptions(precision=4, sci_mode=False)
    check_shown_figures()
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


# -- every figure a lab shows is readable at the column --------------------------------------------------------------
# A figure reaches a lab's output by IPython's display formatters: plt.show() and the inline backend's flush at the end
# of a cell display each open figure, glue formats its value, display(fig) and a cell's last expression likewise; an
# ipywidgets callback displays into its output widget the same way. An exception raised there does not fail the cell
# (IPython prints it and goes on: formatters and post_execute callbacks are guarded), so the check is in two parts:
# a formatter that records each unreadable figure as it is shown, and a call appended to every cell (an AST
# transformer) that raises once the cell's own code has run, for what was recorded and for the figures still open,
# which the inline backend shows right after. js_animation's frames are checked by js_animation itself.

FIGURE_CHECK_MIME = "application/x.lnbook.figure-readability"  # a format no frontend shows; its formatter returns None


class _ShownFigures:
    """The readability problems of the figures shown since the current cell started (cleared by ``pre_run_cell``)."""

    def __init__(self):
        self.problems: list[str] = []

    def clear(self, *_info) -> None:
        self.problems = []

    def record(self, fig) -> None:
        problems = _figure_problems(fig)
        if problems and problems not in self.problems:
            self.problems.append(problems)


_shown = _ShownFigures()


def _figure_problems(fig) -> str:
    """'' when ``fig`` is readable at the column, else one line naming the figure and each small text."""
    from lnbook.util.plotting import readability_problems

    problems = readability_problems(fig)
    if not problems:
        return ""
    # the smallest texts first, three of them named (the tick labels of a shrunk figure repeat one size)
    problems = sorted(problems, key=lambda p: float(re.search(r"([\d.]+) pt in the page", p).group(1)))
    label = getattr(fig, "number", None)
    more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
    return f"figure {label if label is not None else id(fig)}: " + "; ".join(problems[:3]) + more


def check_cell_figures(value=None):
    """Appended to every cell by :func:`check_shown_figures`: raise a ValueError for each figure shown in this cell,
    or still open at its end (the inline backend shows those next), whose text is below ``MIN_FONT_PT`` once the page
    shrinks it to the column; returns ``value`` (the cell's last expression, displayed after this check)."""
    from matplotlib._pylab_helpers import Gcf
    from matplotlib.figure import Figure

    from lnbook.util.plotting import COLUMN_WIDTH_IN, MIN_FONT_PT

    found = list(_shown.problems)
    _shown.clear()
    # the figures pyplot holds open (without making one of them current, as plt.figure(n) would)
    candidates = [manager.canvas.figure for manager in Gcf.get_all_fig_managers()]
    if isinstance(value, Figure) and value not in candidates:
        candidates.append(value)
    for fig in candidates:
        problems = _figure_problems(fig)
        if problems and problems not in found:
            found.append(problems)
    if found:
        for manager in Gcf.get_all_fig_managers():  # refused: not also drawn by the inline backend after the error
            Gcf.destroy(manager)
        raise ValueError(
            f"a figure this cell shows is not readable at the book's {COLUMN_WIDTH_IN:g} in column (text below "
            f"{MIN_FONT_PT:g} pt once the page shrinks it): make it the column's width (figsize=(COLUMN_WIDTH_IN, "
            f"...)), put long rows of panels in two rows and legends outside the axes, or enlarge its fonts. "
            + " | ".join(found)
        )
    return value


def check_shown_figures(shell=None) -> bool:
    """Hold every figure the running notebook shows to :func:`lnbook.util.plotting.readability_problems`, as
    :func:`glue` holds the chapters' figures: a cell that shows (or leaves open for the inline backend) a figure whose
    text the page would shrink below ``MIN_FONT_PT`` fails with a ValueError naming each small text. Called by
    :func:`setup`; does nothing outside IPython (returns False), and installs itself once per shell (True)."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:  # pragma: no cover - IPython comes with the book's dependencies
            return False
        shell = get_ipython()
    if shell is None:
        return False
    formatters = shell.display_formatter.formatters
    if FIGURE_CHECK_MIME not in formatters:
        formatters[FIGURE_CHECK_MIME] = _recording_formatter(shell.display_formatter)
    callbacks = shell.events.callbacks.get("pre_run_cell", [])
    if _shown.clear not in callbacks:
        shell.events.register("pre_run_cell", _shown.clear)
    if not any(isinstance(t, _CheckFiguresAtCellEnd) for t in shell.ast_transformers):
        shell.ast_transformers.append(_CheckFiguresAtCellEnd())
    return True


def _recording_formatter(parent):
    from IPython.core.formatters import BaseFormatter
    from matplotlib.figure import Figure

    class _ReadabilityRecorder(BaseFormatter):
        """Records the problems of each figure displayed; formats nothing (returns None)."""

        format_type = FIGURE_CHECK_MIME

        def __call__(self, obj):
            if isinstance(obj, Figure):
                _shown.record(obj)
            return None

    return _ReadabilityRecorder(parent=parent)


class _CheckFiguresAtCellEnd:
    """An IPython AST transformer: the cell's last expression ``x`` becomes ``check_cell_figures(x)`` (still displayed),
    else ``check_cell_figures()`` is appended."""

    def visit(self, module):
        import ast

        if not isinstance(module, ast.Module) or not module.body:
            return module
        check = ast.Attribute(
            value=ast.Call(
                func=ast.Name(id="__import__", ctx=ast.Load()),
                args=[ast.Constant("lnbook.notebook")],
                keywords=[ast.keyword(arg="fromlist", value=ast.List(elts=[ast.Constant("check_cell_figures")],
                                                                       ctx=ast.Load()))],
            ),
            attr="check_cell_figures",
            ctx=ast.Load(),
        )
        last = module.body[-1]
        if isinstance(last, ast.Expr):
            last.value = ast.Call(func=check, args=[last.value], keywords=[])
        else:
            module.body.append(ast.Expr(value=ast.Call(func=check, args=[], keywords=[])))
        return ast.fix_missing_locations(module)
