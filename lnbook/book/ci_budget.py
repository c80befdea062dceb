"""Where the time of ``make test`` goes: the wall time of each phase, printed at the end of every run.

CI must fit its budget (README: about ten minutes on two cores, install included). ``make test``
runs one pytest with two workers: one runs every notebook, then the strict build, then the browser
check (``tests/whole_book/test_notebooks.py``, in that order); the other runs the unit tests beside
them. :class:`PhaseClock` takes pytest's test reports (on the controller, so with xdist too), keeps
for each phase the first start and the last stop of its tests, and :func:`format_budget` prints the
phases' wall times. ``.ci/run`` adds the install time it measured itself (:func:`format_budget`'s
``extra``) and prints the table once more at its end.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["PHASES", "phase_of", "PhaseClock", "format_budget", "report", "BUDGET_FILE"]

# the order the phases are printed in
PHASES = ("unit tests", "notebooks", "strict build", "browser check")
BUDGET_FILE = "ci_budget.json"  # written into the book's _build folder by tests/conftest.py
_NOTEBOOK_FILE = "tests/whole_book/test_notebooks.py"


def phase_of(nodeid: str) -> str:
    """The phase a test belongs to, from its pytest node id."""
    if not nodeid.startswith(_NOTEBOOK_FILE + "::"):
        return "unit tests"
    name = nodeid.split("::", 1)[1]
    if name.startswith("test_notebook_runs"):
        return "notebooks"
    if name.startswith("test_strict_book_build"):
        return "strict build"
    if name.startswith("test_built_book_reads_offline"):
        return "browser check"
    return "unit tests"  # the runner's own tests in that file


@dataclass
class PhaseClock:
    """First start and last stop (seconds since the epoch) of the tests of each phase, and their count."""

    spans: dict[str, list[float]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, nodeid: str, when: str, start: float, stop: float) -> None:
        if not (start and stop) or stop < start:
            raise ValueError(f"a test report needs start <= stop (seconds since the epoch), got {start}, {stop}")
        phase = phase_of(nodeid)
        span = self.spans.setdefault(phase, [start, stop])
        span[0], span[1] = min(span[0], start), max(span[1], stop)
        if when == "call":
            self.counts[phase] = self.counts.get(phase, 0) + 1

    def starts(self) -> dict[str, float]:
        """Seconds from the first test's start to the start of each phase, in the order of :data:`PHASES`."""
        first = min((s[0] for s in self.spans.values()), default=0.0)
        return {p: self.spans[p][0] - first for p in PHASES if p in self.spans}

    def walls(self) -> dict[str, float]:
        """Wall seconds of each phase that ran, in the order of :data:`PHASES`."""
        return {p: self.spans[p][1] - self.spans[p][0] for p in PHASES if p in self.spans}

    def total(self) -> float:
        """Wall seconds from the first test's start to the last test's stop."""
        if not self.spans:
            return 0.0
        return max(s[1] for s in self.spans.values()) - min(s[0] for s in self.spans.values())

    def save(self, path: Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"walls": self.walls(), "starts": self.starts(), "counts": self.counts, "pytest": self.total()}
        path.write_text(json.dumps(record, indent=1))


def format_budget(
    walls: dict[str, float],
    pytest_total: float,
    extra: dict[str, float] | None = None,
    starts: dict[str, float] | None = None,
) -> str:
    """The phases' wall times as lines of text; ``extra`` (such as the install) comes first, and ``starts``
    (seconds from pytest's first test) say when each pytest phase began.

    The unit tests run beside the notebooks, the build and the browser check (two workers), so the
    phases overlap and their sum exceeds the total."""
    starts = starts or {}
    rows = [(name, s, "") for name, s in (extra or {}).items()]
    rows += [
        (f"{name} (beside the others)" if name == "unit tests" else name, s,
         f"  from +{starts[name]:.0f} s" if name in starts else "")
        for name, s in walls.items()
    ]
    rows.append(("pytest in all", pytest_total, ""))
    if extra:
        rows.append(("total", pytest_total + sum(extra.values()), ""))
    width = max(len(name) for name, _, _ in rows)
    lines = ["wall time by phase:"] + [
        f"  {name:<{width}}  {s:7.1f} s ({s / 60:4.1f} min){when}" for name, s, when in rows
    ]
    return "\n".join(lines)


def report(path: Path, extra: dict[str, float]) -> str:
    """The table of ``make test``'s last run (its :data:`BUDGET_FILE`) with ``extra`` phases before it."""
    path = Path(path)
    if not path.is_file():
        return f"wall time by phase: no record at {path} (make test did not reach its end)\n" + "\n".join(
            f"  {name}: {s:.1f} s" for name, s in extra.items()
        )
    data = json.loads(path.read_text())
    return format_budget(data["walls"], data["pytest"], extra, data.get("starts"))
