"""lnbook.util.plotting: the embedded JavaScript animation (chapter 6's layer-to-layer movie) and the readability
of a figure at the book's column width.
"""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from lnbook.util.plotting import COLUMN_WIDTH_IN, MIN_FONT_PT, point_cloud_animation, readability_problems

matplotlib.use("Agg")


def test_point_cloud_animation_is_self_contained_html():
    g = np.random.default_rng(0)
    clouds = [g.normal(size=(30, 3)) * s for s in (0.2, 0.5, 1.0)]
    html = point_cloud_animation(clouds, ["#1f5fa8"] * 30, captions=["a", "b", "c"], size_inches=2.0, dpi=40)
    assert "<script" in html and "Animation" in html
    # every frame is embedded as an image in the page (no external file)
    assert html.count("data:image/jpeg;base64") == 3
    assert "http://" not in html and "https://" not in html and len(html) < 200_000  # nothing to download
    assert '<i class="fa' not in html and "&#x25B6;" in html  # the player's buttons as plain characters


def test_point_cloud_animation_refuses_bad_clouds():
    with pytest.raises(ValueError, match="at least one"):
        point_cloud_animation([], [])
    with pytest.raises(ValueError, match="same shape"):
        point_cloud_animation([np.zeros((3, 3)), np.zeros((4, 3))], ["k"] * 3)
    with pytest.raises(ValueError, match="one entry per cloud"):
        point_cloud_animation([np.zeros((3, 3))], ["k"] * 3, captions=["a", "b"])


def test_readability_counts_the_shrinking_to_the_column():
    """10 pt text in a figure the column's width is readable; the same figure 11 in wide (8.8 in once savefig's tight
    bounding box crops its margins) is shrunk to 6.8/8.8 of its size in the page (10 pt -> 7.7 pt); a 7 pt legend is
    too small even unshrunk."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN - 0.6, 3))
    ax.plot([0, 1], [0, 1], label="a line")
    ax.set_xlabel("x label", fontsize=10)
    ax.legend(fontsize=MIN_FONT_PT)
    assert readability_problems(fig) == []
    fig.set_size_inches(11, 3)
    problems = readability_problems(fig)
    shown = 10 * COLUMN_WIDTH_IN / fig.get_tightbbox().width
    assert 7 < shown < 8.5
    assert f"text 'x label': 10 pt drawn, {shown:.1f} pt in the page" in "\n".join(problems), problems
    fig.set_size_inches(COLUMN_WIDTH_IN - 0.6, 3)
    ax.legend(fontsize=7)
    assert [p for p in readability_problems(fig)] == [
        f"text 'a line': 7 pt drawn, 7.0 pt in the page (figure {fig.get_tightbbox().width:.1f} in wide in a "
        f"{COLUMN_WIDTH_IN:g} in column), below 9 pt"
    ]
    # a figure 0.3% wider than the column (a legend reaching past the axes) keeps its 9 pt text: 8.97 pt is 9.0
    ax.legend(fontsize=MIN_FONT_PT)
    assert readability_problems(fig, column_in=fig.get_tightbbox().width / 1.003) == []
    assert readability_problems(fig, column_in=fig.get_tightbbox().width / 1.01) != []  # 8.9 pt is not
    with pytest.raises(ValueError, match="positive"):
        readability_problems(fig, column_in=0)
    plt.close(fig)


def test_readability_of_a_figure_closed_before_it_is_checked():
    """The inline backend closes each cell's figures; a lab that glues a figure in a later cell hands glue a figure
    whose canvas is a bare FigureCanvasBase (found running ch07_uniform_vector_lab): it is checked all the same."""
    import matplotlib.pyplot as plt
    from matplotlib.backend_bases import FigureCanvasBase

    fig, ax = plt.subplots(figsize=(11, 3))
    ax.set_xlabel("x label", fontsize=10)
    expected = readability_problems(fig)
    plt.close(fig)
    FigureCanvasBase(fig)  # what the figure's canvas is once the inline backend has shown and closed it
    assert not hasattr(fig.canvas, "get_renderer")
    assert readability_problems(fig) == expected != []
