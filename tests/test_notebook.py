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

