"""lnbook.book.reproduction (numbers against papers) and lnbook.notebook (the one setup cell).
"""

from __future__ import annotations

import json

import pytest
import torch

from lnbook.book.reproduction import (
    MISMATCH_MARKER,
    compare,
    load_comparisons,
    results_dir,
)
from lnbook.notebook import cpu_threads, setup


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setenv("LNBOOK_RESULTS_DIR", str(tmp_path))
    monkeypatch.setenv("LNBOOK_SCALE", "ci")
    return tmp_path


def test_number_within_tolerance_is_reproduced_and_recorded(results, capsys):
    c = compare("ch04-x", "some constant", source="paper", paper=1.0, ours=1.0 + 4e-3, abs_tol=5e-3)
    assert c.verdict == "reproduced" and c.as_expected
    out = capsys.readouterr().out
    assert "[reproduced] some constant: ours 1.004 | paper 1" in out and MISMATCH_MARKER not in out
    stored = json.loads((results / "ci" / "ch04.json").read_text())
    assert stored["ch04-x"]["ours"] == pytest.approx(1.004) and stored["ch04-x"]["verdict"] == "reproduced"
    assert [r.key for r in load_comparisons()] == ["ch04-x"]


def test_number_outside_tolerance_differs_and_prints_the_marker(results, capsys):
    c = compare("ch04-y", "a rate", source="paper", paper=2.0, ours=2.2, rel_tol=0.05)
    assert c.verdict == "differs" and not c.as_expected
    assert f"{MISMATCH_MARKER}: ch04-y" in capsys.readouterr().out
    # a result the book says differs is as expected
    c = compare("ch04-y", "a rate", source="paper", paper=2.0, ours=2.2, rel_tol=0.05, expect="differs")
    assert c.as_expected and MISMATCH_MARKER not in capsys.readouterr().out
    assert len(load_comparisons()) == 1  # re-recording a key replaces it


def test_ranges_and_not_checkable(results):
    assert compare("ch05-a", "fit", source="p", paper=(0.9, 1.0), ours=0.95, abs_tol=0).verdict == "reproduced"
    assert compare("ch05-b", "fit", source="p", paper=(0.9, 1.0), ours=0.85, abs_tol=0.01, show=False).verdict == "differs"
    c = compare("ch05-c", "cifar fit", source="p", paper=1.0, ours=None, reason="CIFAR-10 is not shipped",
                expect="not checkable here")
    assert c.verdict == "not checkable here" and c.as_expected
    assert [r.key for r in load_comparisons()] == ["ch05-a", "ch05-b", "ch05-c"]


def test_bad_input_is_refused(results):
    with pytest.raises(ValueError, match="state a tolerance"):
        compare("ch04-z", "c", source="p", paper=1.0, ours=1.0)
    with pytest.raises(ValueError, match="key must look like"):
        compare("Fig 3", "c", source="p", paper=1.0, ours=1.0, abs_tol=1)
    with pytest.raises(ValueError, match="NaN result is a failed run"):
        compare("ch04-z", "c", source="p", paper=1.0, ours=float("nan"), abs_tol=1)
    with pytest.raises(ValueError, match="say why"):
        compare("ch04-z", "c", source="p", paper=1.0, ours=None)
    with pytest.raises(ValueError, match="low <= high"):
        compare("ch04-z", "c", source="p", paper=(2, 1), ours=1.5, abs_tol=0)
    with pytest.raises(TypeError, match="real number"):
        compare("ch04-z", "c", source="p", paper=1.0, ours="1.0", abs_tol=1)
    assert load_comparisons() == []


def test_results_dir_defaults_to_the_book_root(monkeypatch, tmp_path):
    monkeypatch.delenv("LNBOOK_RESULTS_DIR", raising=False)
    root = tmp_path / "book"
    (root / "lnbook").mkdir(parents=True)
    (root / "_toc.yml").write_text("root: index\n")
    (root / "notebooks").mkdir()
    monkeypatch.chdir(root / "notebooks")
    assert results_dir("paper") == root / "results" / "paper"
    with pytest.raises(ValueError, match="scale must be one of"):
        results_dir("huge")


def test_setup_seeds_threads_and_describes(monkeypatch, capsys):
    monkeypatch.setenv("LNBOOK_THREADS", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    device = setup(seed=3)
    a = torch.randn(4)
    setup(seed=3)
    assert torch.equal(a, torch.randn(4)) and device.type == "cpu" and torch.get_num_threads() == 1
    assert "scale=" in capsys.readouterr().out
    monkeypatch.setenv("LNBOOK_THREADS", "zero")
    with pytest.raises(ValueError, match="LNBOOK_THREADS must be a positive integer"):
        cpu_threads()


def test_in_a_notebook_a_comparison_is_one_folded_line(monkeypatch, tmp_path):
    """In a kernel, compare displays a ComparisonView: HTML with the verdict and the claim in the summary of a
    <details> element, the numbers and the reason (escaped) folded below; its text form is the printed line.
    Outside a kernel it prints the line."""
    from lnbook.book import reproduction

    monkeypatch.setenv("LNBOOK_RESULTS_DIR", str(tmp_path))
    shown = []

    class Kernel:
        kernel = object()

    monkeypatch.setattr("IPython.get_ipython", lambda: Kernel())
    monkeypatch.setattr("IPython.display.display", lambda *objs, **kw: shown.extend(o for o in objs if isinstance(o, reproduction.ComparisonView)))
    c = compare("ch04-view", "a claim <x>", source="joudaki2023isometry", paper=1.0, ours=1.004, abs_tol=1e-2,
                reconstruction=True, reason="ours & theirs", record=False)
    (view,) = shown
    assert isinstance(view, reproduction.ComparisonView) and repr(view) == c.line()
    page = view._repr_html_()
    assert page.startswith("<details") and "<summary>Checked against the paper: <em>consistent (reconstruction)</em>" in page
    assert "</em> \N{EM DASH} a claim &lt;x&gt;</summary>" in page and "ours &amp; theirs" in page and "ours 1.004, paper 1 (tolerance abs 0.01)" in page
