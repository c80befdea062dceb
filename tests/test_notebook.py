"""The lab facade's ``glue`` refuses a figure the page would shrink below readable text (issue 33)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from lnbook.notebook import glue  # noqa: E402
from lnbook.util.plotting import COLUMN_WIDTH_IN, use_book_style  # noqa: E402


def _two_panels(width_in: float):
    use_book_style()
    fig, axes = plt.subplots(1, 2, figsize=(width_in, 3.0))
    for ax in axes:
        ax.plot([0, 1], [0, 1], label="a curve")
        ax.set_xlabel("x")
        ax.legend()
    return fig


def test_glue_refuses_a_figure_shrunk_below_9_pt_and_says_what_to_do():
    fig = _two_panels(10.0)  # 10 pt text in a ~10 in figure: about 6.8 pt in the 6.8 in column
    try:
        with pytest.raises(ValueError, match=r"not readable at the book's 6.8 in column.*text 'a curve': 10 pt drawn"):
            glue("planted-wide", fig, display=False)
    finally:
        plt.close(fig)


def test_glue_passes_a_figure_of_the_column_width(monkeypatch):
    glued = []
    monkeypatch.setattr("myst_nb.glue", lambda name, value, display=True: glued.append((name, value, display)))
    fig = _two_panels(COLUMN_WIDTH_IN)
    try:
        glue("readable", fig, display=False)
        glue("a-number", 3.5)
    finally:
        plt.close(fig)
    assert glued == [("readable", fig, False), ("a-number", 3.5, True)]



def _run_cells(sources: list[str]):
    """Execute ``sources`` as the cells of a notebook in a fresh kernel (errors kept in the outputs)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    NotebookClient(nb, timeout=300, allow_errors=True, kernel_name="python3").execute()
    return nb.cells


def _error(cell) -> str:
    return "\n".join(f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error")


def _images(cell) -> int:
    return sum("image/png" in o.get("data", {}) for o in cell.outputs)


SMALL = '''
fig, ax = plt.subplots(figsize=(10, 3))
ax.plot([0, 1], [0, 1], label="planted")
ax.legend(fontsize=8)
'''
READABLE = '''
fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 3))
ax.plot([0, 1], [0, 1], label="readable")
ax.legend()
'''


def test_a_lab_cell_showing_an_unreadable_figure_fails_however_the_figure_is_shown():
    """setup() holds every figure a lab shows to glue's rule (issue 33): a planted 8 pt legend in a 10 in figure (5.4 pt
    in the column) fails its cell with the reason, whether the cell calls plt.show(), leaves the figure for the inline
    backend, makes it in a helper and returns it as the cell's value, displays and closes it, or draws it from an
    ipywidgets callback; readable figures pass and are shown, the last expression's value is still displayed, and a
    cell after a refused one starts clean."""
    cells = _run_cells([
        "%matplotlib inline\nfrom lnbook.notebook import setup\n\ndevice = setup()",
        "import matplotlib.pyplot as plt\nfrom IPython.display import display\n"
        "from lnbook.util.plotting import COLUMN_WIDTH_IN",
        SMALL + "plt.show()",  # 2: plt.show()
        SMALL,  # 3: left open for the inline backend's flush
        "def helper():" + SMALL.replace("\n", "\n    ") + "return fig\n\nhelper()",  # 4: a helper's figure, the value
        SMALL + "display(fig)\nplt.close(fig)\n1 + 1",  # 5: displayed and closed before the cell ends
        "import ipywidgets as widgets\n\ndef draw(x=1.0):" + SMALL.replace("\n", "\n    ") + "plt.show()\n\n"
        "widgets.interact(draw, x=(0.0, 2.0));",  # 6: a live widget's callback
        READABLE + "plt.show()\n'still displayed'",  # 7
        READABLE,  # 8
        "2 + 2",  # 9
    ])
    assert not any(_error(c) for c in cells[:2]), [_error(c) for c in cells[:2]]
    for i in (2, 3, 4, 5, 6):
        assert "not readable at the book's 6.8 in column" in _error(cells[i]), (i, _error(cells[i]))
        assert "text 'planted': 8 pt drawn" in _error(cells[i]), (i, _error(cells[i]))
    for i in (7, 8, 9):
        assert _error(cells[i]) == "", (i, _error(cells[i]))
    assert _images(cells[7]) == 1 and _images(cells[8]) == 1
    assert any("still displayed" in o.get("data", {}).get("text/plain", "") for o in cells[7].outputs)
    assert any(o.get("data", {}).get("text/plain") == "4" for o in cells[9].outputs)


def test_recorded_benchmark_reads_a_committed_run_by_its_name(tmp_path):
    """Issue 33 leftovers item 13: labs showed Path("../benchmarks/recorded/....json") in their visible code."""
    import json

    from lnbook.notebook import recorded_benchmark

    assert isinstance(recorded_benchmark("lng_speed_cpu"), dict)  # the book's own run
    (tmp_path / "benchmarks" / "recorded").mkdir(parents=True)
    (tmp_path / "benchmarks" / "recorded" / "planted.json").write_text(json.dumps({"a": 1}))
    assert recorded_benchmark("planted", root=tmp_path) == {"a": 1}
    with pytest.raises(FileNotFoundError, match=r"there are \['planted'\]"):
        recorded_benchmark("missing", root=tmp_path)
    for bad in ("../x", "x.json", "", 3):
        with pytest.raises(ValueError, match="without folder or suffix"):
            recorded_benchmark(bad, root=tmp_path)
