"""lnbook.book.reproduction (numbers against papers) and lnbook.notebook (the one setup cell).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch

from lnbook.book.reproduction import (
    MISMATCH_MARKER,
    ComparisonGroup,
    comparisons_together,
    ascii_math,
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


def test_a_yes_no_claim_is_compared_exactly_and_shown_as_yes_or_no(results, capsys):
    """paper=True/False: a claim of existence (chapter 2: at least one LN-Net ends below LSSR) is recorded as yes/no,
    never as 1 = yes; it matches only when ours is the same answer."""
    c = compare("ch02-e", "an LN-Net ends below the bound", source="p", paper=True, ours=True, reconstruction=True,
                reason="our set-up")
    assert c.verdict == "consistent (reconstruction)" and c.tolerance == "tolerance exact"
    assert "ours yes | paper yes (tolerance exact)" in capsys.readouterr().out
    stored = json.loads((results / "ci" / "ch02.json").read_text())["ch02-e"]
    assert stored["ours"] is True and stored["paper"] is True
    c = compare("ch02-e", "an LN-Net ends below the bound", source="p", paper=True, ours=False, show=False)
    assert c.verdict == "differs" and "ours no | paper yes" in c.line()
    with pytest.raises(TypeError, match="both True or False"):
        compare("ch02-e", "c", source="p", paper=True, ours=1.0, abs_tol=0)
    with pytest.raises(ValueError, match="drop abs_tol"):
        compare("ch02-e", "c", source="p", paper=True, ours=True, abs_tol=0)


def test_comparisons_together_show_as_one_and_are_each_recorded_and_checked(results, capsys):
    """Issue 33: a lab section's six "not checkable here" checks stacked as six lines; comparisons_together shows them
    as one group (counted by verdict, each inside), records each for the reproduction table and still prints a
    mismatch at once."""
    with comparisons_together() as shown:
        compare("ch05-g1", "fit", source="p", paper=1.0, ours=None, reason="not shipped", expect="not checkable here")
        compare("ch05-g2", "rate", source="p", paper=2.0, ours=2.2, rel_tol=0.05)  # differs, the book says reproduced
        compare("ch05-g3", "fit again", source="p", paper=1.0, ours=None, reason="not shipped", expect="not checkable here")
        assert capsys.readouterr().out == f"{MISMATCH_MARKER}: ch05-g2 is 'differs', the book says 'reproduced'\n"
    assert [c.key for c in shown] == ["ch05-g1", "ch05-g2", "ch05-g3"]
    group = ComparisonGroup(shown)
    assert group.summary() == "3 comparisons: 2 not checkable here, 1 differs"
    assert capsys.readouterr().out == repr(group) + "\n"  # shown once, at the end of the block
    assert repr(group).splitlines()[0].startswith("[not checkable here] fit: ours - | paper 1")
    html_text = group._repr_html_()
    assert html_text.count("<li>") == 3 and "3 comparisons: 2 not checkable here, 1 differs" in html_text
    assert [r.key for r in load_comparisons()] == ["ch05-g1", "ch05-g2", "ch05-g3"]
    with comparisons_together():
        pass
    assert capsys.readouterr().out == ""  # nothing to show
    compare("ch05-g4", "alone", source="p", paper=1.0, ours=1.0, abs_tol=0)
    assert capsys.readouterr().out.startswith("[reproduced] alone")  # outside a block: shown at once
    with pytest.raises(TypeError, match="non-empty list of Comparison"):
        ComparisonGroup([])


def test_a_group_that_cannot_be_checked_here_says_so_in_a_sentence_and_refuses_to_say_it_falsely(results, capsys):
    """Issue 33: "Checked against the paper: 6 comparisons: 6 not checkable here" read like template output; with
    not_checkable_because the group's line is a sentence with the count in words and the reason, and a group in
    which one comparison can be checked refuses the sentence instead of hiding that comparison's verdict."""
    because = "the paper's numbers are for GPUs, these runs are on a CPU"
    for n, opening in ((1, "This claim of the paper cannot"), (2, "Neither of these two claims of the paper can"),
                       (6, "None of these six claims of the paper can"), (13, "None of these 13 claims of the paper can")):
        with comparisons_together(not_checkable_because=because) as shown:
            for k in range(n):
                compare(f"ch07-n{k}", "speed", source="p", paper=1.0, ours=None, reason="GPU", expect="not checkable here")
        group = ComparisonGroup(shown, because)
        assert group.summary() == f"{opening} be checked here: {because}."
        assert f"<summary>{opening} be checked here: the paper&#x27;s" in group._repr_html_()
        assert group._repr_html_().count("<li>") == n and "comparisons:" not in group._repr_html_()
        assert capsys.readouterr().out == repr(group) + "\n"
    checked = compare("ch07-r", "rate", source="p", paper=2.0, ours=2.0, rel_tol=0.05, show=False)
    with pytest.raises(ValueError, match=r"\['ch07-r: reproduced'\] can: drop it"):
        ComparisonGroup(shown + [checked], because)
    with pytest.raises(ValueError, match="ch07-r: reproduced"):
        with comparisons_together(not_checkable_because=because):
            compare("ch07-r", "rate", source="p", paper=2.0, ours=2.0, rel_tol=0.05)
    capsys.readouterr()
    for bad in ("", "  ", 3):
        with pytest.raises(TypeError, match="reason in a few words"):
            ComparisonGroup(shown, bad)
        with pytest.raises(TypeError, match="reason in a few words"):
            with comparisons_together(not_checkable_because=bad):
                pass
    assert ComparisonGroup(shown).summary() == "13 comparisons: 13 not checkable here"  # without it: the count


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


# Issue 33: the reproduction table (MyST, typeset by MathJax) and the labs' comparison lines showed formulas as ASCII
# (sqrt(d), <=, ^2, eps, 1/(k-1)). Each piece of ASCII mathematics below is found; the same written as math or code is not.
ASCII_PIECES = ["x <= 1", "x >= 1", "x != y", "Linear -> LN", "2 +- 1", "R^8", "beta**l", "sqrt(d)", "cos(pi x)",
                "eps", "beta_0", "gamma0", "delta", "x_1", "t_LN", "1/(k-1)", "a)/(b", "1/N", "|x|", "d = 3",
                "m < 6", "T >= 4", "w ~ N", "f' on [-1, 1]"]


@pytest.mark.parametrize("piece", ASCII_PIECES)
def test_ascii_math_is_found(piece):
    assert ascii_math(f"a claim about {piece} here"), piece


def test_math_and_code_are_not_ascii_math():
    assert ascii_math("max $\\lvert\\LN(x)\\rvert$ over $d = 3$ inputs, $\\sqrt d \\le 2$, `gamma0 / beta**l`, "
                      "1024 tokens, 8x8 digits, Llama-2/3, the 50-80% of the paper, 1e-12, LN-G (our reading)") == []
    with pytest.raises(TypeError, match="must be a string"):
        ascii_math(None)


def test_compare_refuses_ascii_math_and_says_how_to_write_it(results):
    for field in ("claim", "reason"):
        kwargs = {"claim": "a constant", "reason": "ours"} | {field: "at most sqrt(d)"}
        with pytest.raises(ValueError, match=rf"the {field} writes mathematics in ASCII.*'sqrt\(': .*between \$\.\.\.\$"):
            compare("ch04-w", kwargs["claim"], source="p", paper=1.0, ours=1.0, abs_tol=0, reconstruction=True,
                    reason=kwargs["reason"])
    with pytest.raises(ValueError, match="the ours writes"):
        compare("ch04-w", "q", source="p", paper="grows", ours="H >= 3G", reason="judged by eye")
    assert load_comparisons() == []


def _texts(node, assigned, loops) -> list[str]:
    """The text pieces of an argument of compare: literals, f-strings (their values as 0), both branches of a
    conditional, names bound to such expressions in the notebook or by a loop over a tuple of tuples."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) else []
    if isinstance(node, ast.JoinedStr):
        return ["".join(v.value if isinstance(v, ast.Constant) else "0" for v in node.values)]
    if isinstance(node, ast.BinOp):
        return [a + b for a in _texts(node.left, assigned, loops) for b in _texts(node.right, assigned, loops)]
    if isinstance(node, ast.IfExp):
        return _texts(node.body, assigned, loops) + _texts(node.orelse, assigned, loops)
    if isinstance(node, ast.Name):
        return ([t for value in assigned.get(node.id, []) for t in _texts(value, assigned, loops)]
                + [t for value in loops.get(node.id, []) for t in _texts(value, assigned, loops)])
    return []


def lab_comparison_texts() -> dict[str, list[str]]:
    """Every claim, reason and textual paper or ours value that a lab passes to compare, by notebook."""
    root = Path(__file__).parents[2]
    found = {}
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        source = "\n".join("\n".join(line for line in "".join(c["source"]).splitlines()
                                     if not line.lstrip().startswith(("%", "!")))
                           for c in cells if c["cell_type"] == "code")
        tree = ast.parse(source)
        assigned, loops = {}, {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        assigned.setdefault(target.id, []).append(node.value)
            if isinstance(node, ast.For) and isinstance(node.target, ast.Tuple) and isinstance(node.iter, (ast.Tuple, ast.List)):
                for row in node.iter.elts:
                    if isinstance(row, ast.Tuple) and len(row.elts) == len(node.target.elts):
                        for name, value in zip(node.target.elts, row.elts):
                            if isinstance(name, ast.Name):
                                loops.setdefault(name.id, []).append(value)
        texts = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "compare":
                args = node.args[1:2] + [k.value for k in node.keywords if k.arg in ("claim", "reason", "paper", "ours")]
                texts += [t for arg in args for t in _texts(arg, assigned, loops)]
        if texts:
            found[path.stem] = texts
    return found


def test_every_comparison_of_the_labs_writes_its_math_as_math():
    """Every claim, reason and textual value the labs pass to compare (and every committed paper-scale record)
    writes its mathematics between $...$: the reproduction table shows them as MathJax reads them. compare refuses
    ASCII mathematics when a lab runs; this finds it without running the labs."""
    found = lab_comparison_texts()
    assert len(found) >= 13 and sum(map(len, found.values())) >= 60, found.keys()  # every lab that compares is read
    assert any("$\\beta_0$" in t for t in found["ch04_isometry_lab"])
    # the committed paper-scale records (a ci-scale record is refused by compare when it is made)
    recorded = [text for c in load_comparisons("paper")
                for text in (c.claim, c.reason, c.paper, c.ours) if isinstance(text, str)]
    bad = {name: [(t[:60], ascii_math(t)) for t in texts if ascii_math(t)]
           for name, texts in [*found.items(), ("recorded", recorded)]}
    assert not any(bad.values()), {k: v for k, v in bad.items() if v}


def test_a_comparison_view_shows_math_as_math(monkeypatch, tmp_path):
    """The lab's folded line writes $...$ as the inline math that Sphinx writes, which MathJax typesets; the rest
    stays escaped."""
    from lnbook.book.reproduction import ComparisonView

    monkeypatch.setenv("LNBOOK_RESULTS_DIR", str(tmp_path))
    c = compare("ch04-math", "$\\beta_0 < 1$ for <ReLU>", source="p", paper=1.0, ours=1.0, abs_tol=0, show=False,
                record=False)
    page = ComparisonView(c)._repr_html_()
    assert '<span class="math notranslate nohighlight">\\(\\beta_0 &lt; 1\\)</span> for &lt;ReLU&gt;' in page


def test_the_committed_paper_scale_folder_holds_only_comparisons():
    """load_comparisons reads every JSON file of results/paper/ as a comparison; the labs' recorded runs (chapter 5's
    depth sweep, chapter 6's CPU runs) live in results/paper/recorded/, so the reproduction table at paper scale
    loads (a record in the folder itself would raise TypeError there)."""
    import json
    from pathlib import Path

    from lnbook.book.reproduction import Comparison

    folder = Path(__file__).resolve().parents[2] / "results" / "paper"
    for path in folder.glob("*.json"):
        for record in json.loads(path.read_text()).values():
            Comparison(**record)
    assert (folder / "recorded").is_dir()
