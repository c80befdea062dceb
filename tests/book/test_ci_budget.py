"""The wall time of each phase of `make test` (lnbook.book.ci_budget)."""

from __future__ import annotations

import pytest

from lnbook.book.ci_budget import PhaseClock, format_budget, phase_of, report

NB = "tests/whole_book/test_notebooks.py"


def test_phase_of_sorts_the_notebook_file_and_the_rest():
    assert phase_of(f"{NB}::test_notebook_runs[ch04_isometry_lab]") == "notebooks"
    assert phase_of(f"{NB}::test_strict_book_build_reuses_executed_notebooks") == "strict build"
    assert phase_of(f"{NB}::test_built_book_reads_offline_in_chromium") == "browser check"
    assert phase_of(f"{NB}::test_runner_recovers_a_lost_zmq_wakeup") == "unit tests"
    assert phase_of("tests/core/test_norms.py::test_x[1]") == "unit tests"


def test_a_phase_spans_from_its_first_start_to_its_last_stop(tmp_path):
    clock = PhaseClock()
    clock.add(f"{NB}::test_notebook_runs[a]", "setup", 100.0, 101.0)
    clock.add(f"{NB}::test_notebook_runs[a]", "call", 101.0, 150.0)
    clock.add(f"{NB}::test_notebook_runs[b]", "call", 150.0, 170.0)
    clock.add("tests/core/test_norms.py::t", "call", 100.5, 130.0)
    clock.add(f"{NB}::test_built_book_reads_offline_in_chromium", "call", 200.0, 260.0)
    assert clock.walls() == {"unit tests": 29.5, "notebooks": 70.0, "browser check": 60.0}
    assert clock.counts == {"notebooks": 2, "unit tests": 1, "browser check": 1}
    assert clock.total() == 160.0
    assert clock.starts() == {"unit tests": 0.5, "notebooks": 0.0, "browser check": 100.0}
    assert "from +100 s" in format_budget(clock.walls(), clock.total(), starts=clock.starts())
    clock.save(tmp_path / "b.json")
    text = report(tmp_path / "b.json", {"install": 90.0})
    assert "install" in text and "notebooks" in text and "total" in text and "250.0 s" in text
    with pytest.raises(ValueError, match="start <= stop"):
        clock.add("t", "call", 5.0, 4.0)


def test_format_and_a_missing_record(tmp_path):
    text = format_budget({"notebooks": 61.0}, 61.0)
    assert "notebooks" in text and "61.0 s" in text and "total" not in text
    assert "no record" in report(tmp_path / "none.json", {"install": 1.0})
