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


def test_point_cloud_animation_draws_every_frame_at_its_zoom(monkeypatch):
    """The zoom reaches every frame's drawing (a player whose sphere filled 70% of its frame left a blank band
    above it); a bad zoom is refused by draw_cloud_3d before any frame is made."""
    import lnbook.util.plotting as plotting

    zooms = []
    real = plotting.draw_cloud_3d
    monkeypatch.setattr(plotting, "draw_cloud_3d", lambda *a, **k: (zooms.append(k.get("zoom")), real(*a, **k)))
    clouds = [np.random.default_rng(0).normal(size=(20, 3)) * s for s in (0.5, 1.0)]
    point_cloud_animation(clouds, ["k"] * 20, size_inches=1.5, dpi=30, zoom=1.25)
    assert zooms and set(zooms) == {1.25}
    with pytest.raises(ValueError, match="zoom must be a number"):
        point_cloud_animation(clouds, ["k"] * 20, size_inches=1.5, dpi=30, zoom=0)


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


def _two_lines(legend_loc):
    import matplotlib.pyplot as plt

    from lnbook.util.plotting import use_book_style

    use_book_style()
    fig, ax = plt.subplots(figsize=(4, 3))
    x = np.linspace(0, 1, 50)
    ax.plot(x, x, label="rising")  # from the lower left to the upper right corner
    ax.scatter([0.9], [0.1], label="a point")  # the lower right corner
    ax.set(xlim=(0, 1), ylim=(0, 1))
    if legend_loc == "outside":
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1))
    else:
        ax.legend(loc=legend_loc)
    return fig


@pytest.mark.parametrize("loc, over", [("upper left", []), ("outside", []), ("lower right", ["a point"]),
                                       ("center", ["rising"])])
def test_a_legend_over_data_is_found(loc, over):
    import matplotlib.pyplot as plt

    from lnbook.util.plotting import legend_overlap_problems

    fig = _two_lines(loc)
    problems = legend_overlap_problems(fig)
    plt.close(fig)
    assert [p for p in problems if not any(name in p for name in over)] == []  # only the data it covers
    assert all(any(name in p for p in problems) for name in over), problems


def test_a_legend_over_a_reference_line_or_a_band_is_found():
    import matplotlib.pyplot as plt

    from lnbook.util.plotting import legend_overlap_problems, use_book_style

    use_book_style()
    for draw in (lambda ax: ax.axhline(0.95, color="0.4", label="reference"),
                 lambda ax: ax.fill_between([0, 1], [0.9, 0.9], [1, 1], label="band"),
                 lambda ax: ax.bar([0.1], [0.97], width=0.1, label="bar")):
        fig, ax = plt.subplots(figsize=(4, 3))
        draw(ax)
        ax.set(xlim=(0, 1), ylim=(0, 1))
        ax.legend(loc="upper left")
        problems = legend_overlap_problems(fig)
        plt.close(fig)
        assert len(problems) == 1, problems


def test_book_legends_have_an_opaque_frame():
    import matplotlib

    from lnbook.util.plotting import use_book_style

    use_book_style()
    assert matplotlib.rcParams["legend.frameon"] and matplotlib.rcParams["legend.framealpha"] == 1.0


def test_palette_colours_are_named_as_they_look():
    from matplotlib.colors import to_rgb

    from lnbook.util.plotting import COLOUR_NAMES, PALETTE, palette_colour

    assert len(COLOUR_NAMES) == len(PALETTE)
    r, g, b = to_rgb(palette_colour("red"))
    assert r > 0.6 and g < 0.4 and b < 0.5  # red: the red channel dominates
    r, g, b = to_rgb(palette_colour("orange"))
    assert r > 0.8 and 0.5 < g < 0.8 and b < 0.4
    r, g, b = to_rgb(palette_colour("blue"))
    assert b > r and b > g
    r, g, b = to_rgb(palette_colour("green"))
    assert g > r and g > 0.5
    assert max(to_rgb(palette_colour("grey"))) - min(to_rgb(palette_colour("grey"))) < 0.05
    with pytest.raises(ValueError, match="use one of"):
        palette_colour("crimson")


@pytest.mark.parametrize("x, text", [(1e-5, "10^{-5}"), (0.1, "10^{-1}"), (3e-4, r"3 \times 10^{-4}"),
                                     (2.5e-12, r"2.5 \times 10^{-12}"), (-1e3, "-10^{3}"), (0.0, "0")])
def test_power_of_ten_math(x, text):
    from matplotlib.mathtext import MathTextParser

    from lnbook.util.plotting import power_of_ten_math

    assert power_of_ten_math(x) == text
    MathTextParser("path").parse(f"${text}$")  # typesets


def test_power_of_ten_math_refuses_what_is_not_a_number():
    from lnbook.util.plotting import power_of_ten_math

    for bad in (float("nan"), float("inf"), "1e-5", True):
        with pytest.raises(ValueError, match="finite number"):
            power_of_ten_math(bad)


@pytest.mark.parametrize("label, raw", [("output eigenvalue φ_T(x)", True), ("λ_i / Σλ", True), ("||H||_F^2", True),
                                        (r"$\varphi_T(x)$", False), (r"$\lambda_i / \sum_j \lambda_j$", False),
                                        ("plain words, 3 seeds", False), (r"$\frac{1}{$", True), ("$x", True)])
def test_raw_math_in_a_label_is_found(label, raw):
    import matplotlib.pyplot as plt

    from lnbook.util.plotting import math_text_problems

    fig, ax = plt.subplots()
    ax.set_ylabel(label)
    problems = math_text_problems(fig)
    plt.close(fig)
    assert bool(problems) == raw, problems


def test_a_zoomed_sphere_is_drawn_larger_and_bad_zooms_are_refused():
    import matplotlib.pyplot as plt

    from lnbook.util.plotting import draw_cloud_3d, drawn_size_in

    sphere = np.random.default_rng(0).normal(size=(500, 3))
    sphere /= np.linalg.norm(sphere, axis=1, keepdims=True)
    widths = []
    for zoom in (1.0, 1.4):
        fig = plt.figure(figsize=(3, 3))
        ax = fig.add_subplot(projection="3d")
        draw_cloud_3d(ax, sphere, ["k"] * len(sphere), zoom=zoom)
        widths.append(drawn_size_in(ax, sphere)[0])
        plt.close(fig)
    assert widths[1] == pytest.approx(1.4 * widths[0], rel=0.02)  # the drawing scales with the zoom
    fig = plt.figure()
    ax = fig.add_subplot(projection="3d")
    for bad in (0, -1.0, 5.0, True):
        with pytest.raises(ValueError, match="zoom must be"):
            draw_cloud_3d(ax, sphere, ["k"] * len(sphere), zoom=bad)
    with pytest.raises(ValueError, match=r"\(n, 3\)"):
        drawn_size_in(ax, np.zeros((4, 2)))
    plt.close(fig)


def test_js_animation_refuses_frames_with_text_below_the_rule():
    """The players' frames are held to glue's rule (issue 33): a planted 7 pt legend drawn by the update function (so
    absent until a frame is drawn) is refused with its size; the same animation with 9 pt text passes."""
    import matplotlib.pyplot as plt

    from lnbook.util.plotting import js_animation

    def animation(legend_pt):
        fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN - 1, 3), dpi=40)

        def update(i):
            ax.cla()
            ax.plot([0, 1], [0, i], label=f"frame {i}")
            ax.legend(fontsize=legend_pt)

        return js_animation(fig, update, 2)

    before = set(plt.get_fignums())  # figures other tests in this process left open are not ours
    with pytest.raises(ValueError, match=r"frames are not readable.*text 'frame 0': 7 pt drawn, 7.0 pt in the page"):
        animation(7)
    assert "Animation" in animation(MIN_FONT_PT)
    assert set(plt.get_fignums()) <= before  # closed either way


def test_label_points_keeps_labels_of_near_points_apart():
    """Fig. 4.10 (issue 33, the reader's page): the labels "leaky_relu(0.5)" and "selu", of two points with nearly the
    same beta_0 and loss, were drawn over each other. label_points places each label where it meets no other label,
    no point and no error bar, inside the axes."""
    import matplotlib.pyplot as plt

    from lnbook.util.plotting import label_points

    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 3.0))
    xy = [(0.10, 0.50), (0.12, 0.52), (0.14, 0.49), (0.60, 0.30), (0.95, 0.90)]
    bars = [(x, y - 0.05, x, y + 0.05) for x, y in xy]
    ax.errorbar([p[0] for p in xy], [p[1] for p in xy], yerr=0.05, fmt="o")
    ax.set(xlim=(0, 1), ylim=(0, 1))
    try:
        texts = label_points(ax, xy, ["leaky_relu(0.5)", "selu", "gelu", "tanh", "exp"], avoid=bars)
        renderer = fig.canvas.get_renderer()
        boxes = [t.get_window_extent(renderer) for t in texts]
        assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
        frame = ax.get_window_extent(renderer)
        assert all(frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1 for b in boxes)
        centres = ax.transData.transform(xy)
        assert not any(b.contains(*c) for b in boxes for c in centres)  # no label over a point
    finally:
        plt.close(fig)


def test_label_points_refuses_when_there_is_no_room():
    import matplotlib.pyplot as plt

    from lnbook.util.plotting import label_points

    fig, ax = plt.subplots(figsize=(1.5, 1.0))
    ax.set(xlim=(0, 1), ylim=(0, 1))
    try:
        with pytest.raises(ValueError, match="no free place"):
            label_points(ax, [(0.5, 0.5)] * 12, [f"a long label {i}" for i in range(12)])
        with pytest.raises(ValueError, match="one label per point"):
            label_points(ax, [(0.5, 0.5)], "ab")
    finally:
        plt.close(fig)


def test_text_over_data_is_found_and_text_in_free_space_is_not():
    """Issue 33, Fig. 3.1: a panel's corner text "after LN 2" drawn over the circle."""
    import matplotlib.pyplot as plt

    from lnbook.util.plotting import text_overlap_problems, use_book_style

    use_book_style()
    fig, ax = plt.subplots(figsize=(2, 2))
    t = np.linspace(0, 2 * np.pi, 400)
    ax.plot(np.cos(t), np.sin(t), color="0.8", label="circle")
    ax.set(xlim=(-1.3, 1.3), ylim=(-1.3, 1.3), aspect="equal")
    ax.text(0.02, 0.98, "after LN 2\n5 points", transform=ax.transAxes, va="top")  # on the arc, as it was
    ax.text(0.5, 0.5, "centre", transform=ax.transAxes, ha="center", va="center")  # inside the circle: free
    ax.set_title("a title is outside the axes")
    problems = text_overlap_problems(fig)
    plt.close(fig)
    assert len(problems) == 1 and "after LN 2" in problems[0] and "circle" in problems[0], problems


def test_titles_that_run_into_the_row_above_are_found_and_a_constrained_layout_passes():
    """Issue 33, Fig. 3.3: a grid of square panels with two-line titles, laid out by tight_layout in too little height,
    put the titles of the second and third rows on the bottom axis of the row above; with constrained layout and room
    for the titles nothing runs into another axes."""
    import matplotlib.pyplot as plt

    from lnbook.util.plotting import COLUMN_WIDTH_IN, crowded_text_problems, use_book_style

    use_book_style()

    def grid(height, **kw):
        fig, axes = plt.subplots(3, 4, figsize=(COLUMN_WIDTH_IN, height), **kw)
        for n, ax in enumerate(axes.ravel()):
            ax.plot([-1, 1], [-1, 1])
            ax.set(aspect="equal", xticks=[], yticks=[], xlim=(-1.3, 1.3), ylim=(-1.3, 1.3))
            ax.set_title(f"after LN {n + 1}\n{12 - n} points", fontsize=9, pad=2)
        return fig

    crowded = grid(1.8 * 3 + 0.4)
    crowded.tight_layout(rect=(0, 0.4 / 5.8, 1, 1))
    problems = crowded_text_problems(crowded)
    plt.close(crowded)
    assert problems and all("runs into the frame of the axes" in p for p in problems), problems
    assert any("'after LN 5\\n8 points'" in p and "'after LN 1\\n12 points'" in p for p in problems), problems
    roomy = grid(2.1 * 3 + 0.4, layout="constrained")
    assert crowded_text_problems(roomy) == []
    plt.close(roomy)


def test_tick_labels_of_neighbouring_axes_that_collide_are_found():
    """Two panels side by side with no gap: the right one's y tick labels lie on the left one's frame and labels."""
    import matplotlib.pyplot as plt

    from lnbook.util.plotting import crowded_text_problems, use_book_style

    use_book_style()
    fig, (a, b) = plt.subplots(1, 2, figsize=(4, 2))
    fig.subplots_adjust(wspace=0)
    a.set_xlabel("left"); b.set_xlabel("right")
    problems = crowded_text_problems(fig)
    plt.close(fig)
    assert any("tick label" in p and "runs into the frame of the axes 'left'" in p for p in problems), problems
    fig, (a, b) = plt.subplots(1, 2, figsize=(4, 2), layout="constrained")
    assert crowded_text_problems(fig) == []
    plt.close(fig)


def test_label_hline_names_the_line_beside_it_in_free_space():
    """Fig. 6.2 (issue 33): the dashed line's legend floated below the panel, far from it. label_hline writes the name
    along the line, above it at the right end when that is free, else below it or at the left end, over no data."""
    import matplotlib.pyplot as plt

    from lnbook.util.plotting import label_hline, text_overlap_problems, use_book_style

    use_book_style()
    fig, ax = plt.subplots(figsize=(3.4, 3))
    ax.set(xlim=(-0.5, 2.5), ylim=(0.7, 1.0))
    ax.axhline(0.9, color="k", ls="--", lw=1)
    note = label_hline(ax, 0.9, "best sector rule found")
    assert (note.get_ha(), note.get_va(), note.xy) == ("right", "bottom", (1, 0.9))  # free: above, at the right
    note.remove()
    ax.scatter([1.6, 1.9, 2.2], [0.91, 0.91, 0.91], s=18)  # dots just above the right end of the line
    note = label_hline(ax, 0.9, "best sector rule found")
    assert (note.get_ha(), note.get_va()) == ("right", "top") and text_overlap_problems(fig) == []
    box, line_y = note.get_window_extent(), ax.transData.transform((0, 0.9))[1]
    assert line_y - 12 <= box.y1 <= line_y  # just below the line, within a few points
    plt.close(fig)


def test_label_hline_refuses_when_there_is_no_free_place_and_bad_input():
    import matplotlib.pyplot as plt

    from lnbook.util.plotting import label_hline, use_book_style

    use_book_style()
    fig, ax = plt.subplots(figsize=(3.4, 3))
    ax.set(xlim=(0, 1), ylim=(0, 1))
    xs, ys = np.meshgrid(np.linspace(0, 1, 40), np.linspace(0.3, 0.7, 20))
    ax.scatter(xs.ravel(), ys.ravel(), s=4)  # dots everywhere around the line
    with pytest.raises(ValueError, match="no free place"):
        label_hline(ax, 0.5, "a name")
    assert len(ax.texts) == 0  # nothing left behind
    for y, text in ((float("nan"), "a name"), (True, "a name"), (0.5, " ")):
        with pytest.raises(ValueError):
            label_hline(ax, y, text)
    plt.close(fig)


def test_plain_log_ticks_writes_powers_of_ten_as_plain_numbers_on_request_and_refuses_a_range_too_wide_for_them():
    """Issue 33 (Fig. 4.8): a figure whose short panels read "1, 2, 5" and whose long panels read "10⁻², 10⁻¹, 10⁰"
    mixes two styles; with plain_powers=True a long range is labelled at its powers of ten as plain numbers (no 10ⁿ, no
    e-notation), the view limits kept, and a range reaching below 10⁻⁴ is refused rather than labelled "1e-05"."""
    import matplotlib.pyplot as plt

    from lnbook.util.plotting import plain_log_ticks

    fig, (long, short, wide) = plt.subplots(1, 3)
    try:
        long.semilogy([0, 30], [5.0, 0.01])
        long.set_ylim(0.005, 20.0)
        assert plain_log_ticks(long, plain_powers=True) == ["0.01", "0.1", "1", "10"]
        assert long.get_ylim() == pytest.approx((0.005, 20.0))
        fig.canvas.draw()
        assert [t.get_text() for t in long.get_yticklabels(minor=True) if t.get_text()] == []
        short.semilogy([0, 30], [4.2, 23.0])
        short.set_ylim(4.0, 25.0)
        assert plain_log_ticks(short, plain_powers=True) == ["5", "10", "20"]  # a short range: as without the flag
        wide.semilogy([0, 30], [1e-6, 1.0])
        wide.set_ylim(1e-6, 2.0)
        with pytest.raises(ValueError, match="no short plain form"):
            plain_log_ticks(wide, plain_powers=True)
        assert all("10" in t or t == "" for t in plain_log_ticks(wide))  # without the flag: matplotlib's 10ⁿ labels
    finally:
        plt.close(fig)
