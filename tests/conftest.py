"""Shared test set-up: the one hypothesis profile of the book.

The profile ``lnbook`` is registered and loaded here, once: no deadline (CI machines are shared and
slow), and ``derandomize=True`` so that the same command runs the same examples (the book's rule:
the same command prints the same numbers). Tests set only ``max_examples`` where they need another
number than hypothesis' default. The strategies the test files share live in ``tests/strategies.py``.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import settings

settings.register_profile("lnbook", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("lnbook")


# --- the wall time of each phase of `make test` (lnbook.book.ci_budget), printed at the end of the run ---
_CLOCK = None


def pytest_configure(config):
    global _CLOCK
    from lnbook.book.ci_budget import PhaseClock

    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) keeps the clock
        _CLOCK = PhaseClock()


NOTEBOOK_FILE = "tests/whole_book/test_notebooks.py"


def pytest_collection_modifyitems(session, config, items):
    """The notebooks first: with ``-n 2 --dist loadfile --no-loadscope-reorder`` (``make test``) one worker
    starts them at once (they, the strict build and the browser check are the longest path), while the other
    takes the unit tests; the order of the tests within each file is kept."""
    items.sort(key=lambda item: 0 if item.nodeid.startswith(NOTEBOOK_FILE + "::") else 1)


def pytest_runtest_logreport(report):
    if _CLOCK is not None and getattr(report, "start", 0) and getattr(report, "stop", 0):
        _CLOCK.add(report.nodeid, report.when, report.start, report.stop)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    from lnbook.book.ci_budget import BUDGET_FILE, format_budget

    if _CLOCK is None or "notebooks" not in _CLOCK.spans:  # only a run with the notebooks is worth a budget
        return
    _CLOCK.save(Path(config.rootpath) / "_build" / BUDGET_FILE)
    terminalreporter.write_line(format_budget(_CLOCK.walls(), _CLOCK.total(), starts=_CLOCK.starts()))
