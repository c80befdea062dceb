"""The book's plotting style, set once. Captions live in the book, so figures carry no titles."""

from __future__ import annotations

import math

import matplotlib as mpl
import numpy as np
from matplotlib.transforms import Bbox

PALETTE = ("#1f5fa8", "#d1495b", "#2a9d8f", "#edae49", "#6c4f9c", "#5c5c5c")
# What a caption calls each colour of PALETTE (matplotlib's "C0".."C5" are the same colours, in this order): a
# figure takes a colour a caption names from here, so that the two cannot disagree.
COLOUR_NAMES = ("blue", "red", "green", "orange", "purple", "grey")
# The book's text column is 752 CSS px; the inline backend draws at figure.dpi 110, so a figure wider than
# 752 / 110 = 6.8 in is shrunk to the column in the page, and its text with it.
COLUMN_WIDTH_IN = 6.8
# The smallest text a reader of the page can read comfortably: 9 pt after that shrinking (body text is 12 pt).
MIN_FONT_PT = 9.0


def readability_problems(fig, column_in: float = COLUMN_WIDTH_IN, min_pt: float = MIN_FONT_PT) -> list[str]:
    """What makes ``fig`` hard to read at the book's column width: each visible text (tick labels, axis labels,
    titles, legends, annotations) whose size, times the factor by which the page shrinks the figure to the column
    (``column_in`` over the width of its tight bounding box, at most 1), is below ``min_pt`` (by more than 0.05 pt,
    the size printed). Empty when readable."""
    if column_in <= 0 or min_pt <= 0:
        raise ValueError(f"column_in and min_pt must be positive, got {column_in!r} and {min_pt!r}")
    canvas = fig.canvas
    if not hasattr(canvas, "get_renderer"):  # a closed figure: the inline backend closes each cell's figures, and a
        # lab may glue one in a later cell; its canvas is then a bare FigureCanvasBase, which cannot draw
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    width = fig.get_tightbbox(renderer).width  # inches, as savefig.bbox = "tight" writes it
    shrink = min(1.0, column_in / width)
    problems = []
    from matplotlib.text import Text

    for text in fig.findobj(Text):
        if not text.get_visible() or not text.get_text().strip() or not text.get_window_extent(renderer).width:
            continue
        shown = text.get_fontsize() * shrink
        if shown < min_pt - 0.05:  # a figure a few hundredths of an inch wider than the column loses nothing visible
            problems.append(f"text {text.get_text()[:40]!r}: {text.get_fontsize():g} pt drawn, {shown:.1f} pt in the "
                            f"page (figure {width:.1f} in wide in a {column_in:g} in column), below {min_pt:g} pt")
    return problems


def palette_colour(name: str) -> str:
    """The colour of PALETTE that captions call ``name`` (one of COLOUR_NAMES)."""
    if name not in COLOUR_NAMES:
        raise ValueError(f"no colour {name!r} in the book's palette; use one of {', '.join(COLOUR_NAMES)}")
    return PALETTE[COLOUR_NAMES.index(name)]


def power_of_ten_math(x: float, digits: int = 2) -> str:
    """``x`` as mathtext for a legend, title or tick (inside ``$...$``): ``1e-5`` -> ``10^{-5}``, ``3e-4`` ->
    ``3 \\times 10^{-4}``, rounded to ``digits`` significant digits (the figure text says no more than that)."""
    import math

    if isinstance(x, bool) or not isinstance(x, (int, float, np.floating, np.integer)) or not math.isfinite(x):
        raise ValueError(f"x must be a finite number, got {x!r}")
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 1:
        raise ValueError(f"digits must be a positive integer, got {digits!r}")
    if x == 0:
        return "0"
    mantissa, exponent = f"{abs(float(x)):.{digits - 1}e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    sign = "-" if x < 0 else ""
    power = f"10^{{{int(exponent)}}}"
    return f"{sign}{power}" if mantissa == "1" else f"{sign}{mantissa} \\times {power}"


def math_text_problems(fig) -> list[str]:
    """Visible texts of ``fig`` (labels, titles, ticks, legends, annotations) that show raw math syntax: a ``_``,
    ``^``, brace or backslash outside ``$...$`` (the page would show "φ_T(x)" instead of a subscript), or a
    ``$...$`` part that matplotlib's mathtext cannot typeset. Empty when every formula is typeset."""
    from matplotlib.mathtext import MathTextParser
    from matplotlib.text import Text

    parser = MathTextParser("path")
    problems = []
    for text in fig.findobj(Text):
        s = text.get_text()
        if not text.get_visible() or not s.strip():
            continue
        parts = s.replace(r"\$", "").split("$")
        if len(parts) % 2 == 0:
            problems.append(f"text {s[:50]!r}: an unmatched $")
            continue
        outside = "".join(parts[0::2])
        if any(c in outside for c in "_^{}\\"):
            problems.append(f"text {s[:50]!r}: math syntax outside $...$")
        for math_part in parts[1::2]:
            try:
                parser.parse(f"${math_part}$")
            except ValueError as err:
                problems.append(f"text {s[:50]!r}: mathtext cannot typeset ${math_part}$ ({str(err).splitlines()[0]})")
    return problems


def _agg_renderer(fig):
    canvas = fig.canvas
    if not hasattr(canvas, "get_renderer"):
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


# where label_points tries a label, in points from its point: right or left of it, then ever further above or below
_LABEL_OFFSETS = tuple((sx * 4.0, dy) for dy in (3.0, -12.0, 12.0, -21.0, 21.0, -30.0, 30.0) for sx in (1, -1))


def label_points(ax, xy, labels, *, fontsize: float = MIN_FONT_PT, avoid=(), marker_pt: float = 3.0) -> list:
    """Write each of ``labels`` beside its point of ``xy`` (data coordinates of ``ax``) so that no two labels
    overlap, and no label covers a point or one of the ``avoid`` boxes (``(x0, y0, x1, y1)`` in data coordinates,
    e.g. an error bar ``(x, low, x, high)``) or leaves the axes. Each label takes the first free place of
    :data:`_LABEL_OFFSETS` (right, left, then further below and above); the figure is drawn first, and again after,
    so a layout engine that moves the axes is accounted for. Returns the annotations.

    Raises ``ValueError`` naming a label that finds no free place (make the axes larger or the labels shorter),
    rather than drawing labels over each other."""
    xy = [(float(x), float(y)) for x, y in xy]
    if isinstance(labels, str) or len(labels) != len(xy):
        raise ValueError(f"give one label per point: {len(xy)} points, labels {labels!r}")
    texts = [ax.annotate(str(label), p, xytext=_LABEL_OFFSETS[0], textcoords="offset points", fontsize=fontsize,
                         ha="left") for label, p in zip(labels, xy)]
    for _ in range(3):  # a layout engine may move the axes once the labels are there: place, draw, check
        renderer = _agg_renderer(ax.figure)
        pt = ax.figure.dpi / 72.0
        frame = ax.get_window_extent(renderer)
        centres = ax.transData.transform(xy)
        obstacles = [Bbox.from_extents(*(c - marker_pt * pt), *(c + marker_pt * pt)) for c in centres]
        for x0, y0, x1, y1 in avoid:
            (a, b), (c, d) = ax.transData.transform([(x0, y0), (x1, y1)])
            obstacles.append(Bbox.from_extents(min(a, c) - pt, min(b, d) - pt, max(a, c) + pt, max(b, d) + pt))
        placed = []
        for text in texts:
            for dx, dy in _LABEL_OFFSETS:
                text.set_position((dx, dy))
                text.set_ha("left" if dx > 0 else "right")
                box = text.get_window_extent(renderer)
                inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
                if inside and not any(box.overlaps(o) for o in placed + obstacles):
                    placed.append(box)
                    break
            else:
                raise ValueError(f"label_points: no free place for the label {text.get_text()!r} beside its point among "
                                 f"{len(_LABEL_OFFSETS)} positions; make the axes larger or the labels shorter")
        renderer = _agg_renderer(ax.figure)
        boxes = [t.get_window_extent(renderer) for t in texts]
        if not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:]):
            return texts
    raise ValueError("label_points: the layout kept moving the axes so that labels overlap; draw the figure with a "
                     "fixed layout (no constrained layout) or give it more room")


def label_hline(ax, y: float, text: str, *, fontsize: float = 10.0):
    """Name the horizontal line at height ``y`` of ``ax`` (an ``axhline``) by ``text`` written along it, just above or
    just below it, at the right or the left end, in the first of these places where the text lies over no data of the
    figure (:func:`text_overlap_problems`) and inside the axes: a legend for one line sat far from it, below the panel
    (Fig. 6.2, issue 33). Returns the annotation; raises ``ValueError`` when no place is free (give the axes more
    room above or below the line)."""
    import math

    if isinstance(y, bool) or not isinstance(y, (int, float, np.floating, np.integer)) or not math.isfinite(y):
        raise ValueError(f"y must be a finite number, got {y!r}")
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"text must be a non-empty string, got {text!r}")
    note = ax.annotate(text, xy=(1, y), xycoords=("axes fraction", "data"), xytext=(-3, 3), textcoords="offset points",
                       fontsize=fontsize)
    for x, dx, ha in ((1, -3, "right"), (0, 3, "left")):
        for dy, va in ((3, "bottom"), (-3, "top")):
            note.xy = (x, y)
            note.set_position((dx, dy))
            note.set_ha(ha)
            note.set_va(va)
            renderer = _drawn(ax.figure)
            box, frame = note.get_window_extent(renderer), ax.get_window_extent(renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if inside and not any(p.startswith(f"the text {text[:40]!r}") for p in text_overlap_problems(ax.figure)):
                return note
    note.remove()
    raise ValueError(f"label_hline: no free place for {text!r} above or below the line at {y!r}, at either end; give the "
                     "axes more room there")


_drawn = _agg_renderer  # a drawn figure's renderer


def _any_inside(box, points) -> bool:
    """Whether any of the display points ``points`` (n x 2) lies in ``box`` (``Bbox.contains`` takes one point: with
    an array it raised "truth value of an array is ambiguous" for a scatter of several points)."""
    pts = np.asarray(points, dtype=float).reshape(-1, 2)
    return bool(((pts[:, 0] >= box.x0) & (pts[:, 0] <= box.x1) & (pts[:, 1] >= box.y0) & (pts[:, 1] <= box.y1)).any())


def _data_under(box, fig, renderer, skip=()) -> list[tuple]:
    """``(axes, what)`` for each line, marker, collection or patch of an axes of ``fig`` whose drawn path, clipped to
    that axes, meets the display box ``box`` (see :func:`legend_overlap_problems`); artists in ``skip`` are left out."""
    from matplotlib.collections import Collection, PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.spines import Spine
    from matplotlib.transforms import Bbox

    found = []
    for ax in fig.axes:
        if getattr(ax, "name", "") == "3d":
            continue
        clip = Bbox.intersection(box, ax.get_window_extent(renderer))
        if clip is None or clip.width <= 0 or clip.height <= 0:
            continue
        for artist in ax.get_children():
            if not artist.get_visible() or any(artist is s for s in skip):
                continue
            label = artist.get_label() or ""
            if isinstance(artist, Line2D):
                xy = artist.get_xydata()
                if len(xy) == 0:
                    continue
                path = artist.get_transform().transform_path(artist.get_path())
                hit = artist.get_linestyle() not in ("None", "none", "", " ") and path.intersects_bbox(clip, filled=False)
                if not hit and artist.get_marker() not in (None, "None", "none", "", " "):
                    hit = _any_inside(clip, path.vertices)
            elif isinstance(artist, PathCollection):  # a scatter: its markers sit at its offsets
                offsets = artist.get_offsets()
                pts = artist.get_offset_transform().transform(offsets) if len(offsets) else np.empty((0, 2))
                hit = _any_inside(clip, pts)
            elif isinstance(artist, Collection):  # error bars, bands
                transform = artist.get_transform()
                hit = any(len(p.vertices) > 1 and transform.transform_path(p).intersects_bbox(clip, filled=True)
                          for p in artist.get_paths())
            elif isinstance(artist, Patch) and not isinstance(artist, Spine) and artist is not ax.patch:
                hit = artist.get_transform().transform_path(artist.get_path()).intersects_bbox(clip, filled=True)
            else:
                continue
            if hit:
                found.append((ax, label if label and not label.startswith("_") else type(artist).__name__))
    return found


def _axes_name(fig, ax) -> str:
    return ax.get_xlabel() or ax.get_title() or fig.axes.index(ax)


def legend_overlap_problems(fig) -> list[str]:
    """Legends of ``fig`` drawn over its data: for each legend (of an axes or of the figure), each line, marker,
    collection (scatter, error bars, bands) or patch (bars, boxes) of any axes whose drawn path, clipped to that
    axes, meets the legend's box. Grid lines, and spans or lines drawn in axes coordinates across the whole axes
    are not data; reference lines (``axhline``) and shaded spans are, since a legend over them hides them too.
    Empty when every legend sits in a free corner or outside the axes."""
    renderer = _drawn(fig)
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends)
    problems = []
    for legend in legends:
        texts = [t.get_text() for t in legend.get_texts()]
        for ax, what in _data_under(legend.get_window_extent(renderer), fig, renderer, skip=(legend,)):
            problems.append(f"the legend {texts[:3]!r} lies over data ({what}) of the axes {_axes_name(fig, ax)!r}")
    return problems


def text_overlap_problems(fig) -> list[str]:
    """Text placed in the axes of ``fig`` (``ax.text``, ``ax.annotate``: a panel label, a note) drawn over its data,
    by the rule of :func:`legend_overlap_problems` (Fig. 3.1's "after LN 2" sat on the circle, issue 33). Titles and
    axis labels sit outside the axes and are not checked. Empty when every such text sits in free space."""
    renderer = _drawn(fig)
    problems = []
    for owner in fig.axes:
        for text in owner.texts:
            if not text.get_visible() or not text.get_text().strip():
                continue
            for ax, what in _data_under(text.get_window_extent(renderer), fig, renderer, skip=(text,)):
                problems.append(f"the text {text.get_text()[:40]!r} lies over data ({what}) of the axes "
                                f"{_axes_name(fig, ax)!r}: move it to a free corner or into the title")
    return problems


def _axes_texts(ax, renderer) -> list:
    """``(what, box)`` for the drawn titles, axis labels and tick labels of ``ax`` (tick labels of ticks inside its
    view: matplotlib keeps labels of the ticks outside it, undrawn)."""
    found = [(f"title {t.get_text()!r}", t) for t in (ax.title, ax._left_title, ax._right_title)]
    found += [(f"axis label {a.label.get_text()!r}", a.label) for a in (ax.xaxis, ax.yaxis)]
    for axis in (ax.xaxis, ax.yaxis):
        low, high = sorted(axis.get_view_interval())
        for tick in axis.get_major_ticks():
            if low <= tick.get_loc() <= high:
                found += [(f"tick label {t.get_text()!r}", t) for t in (tick.label1, tick.label2)]
    return [(what, t.get_window_extent(renderer)) for what, t in found if t.get_visible() and t.get_text().strip()]


def crowded_text_problems(fig) -> list[str]:
    """Titles, axis labels and tick labels of one axes of ``fig`` that run into another axes: into its frame or into
    its own titles and labels (Fig. 3.3's titles of the second row sat on the bottom axis of the row above, issue 33).
    A box overlaps by more than half a pixel. Empty when each axes' text stays clear of the others; give the figure
    room (``layout="constrained"``, a taller figure) otherwise."""
    renderer = _drawn(fig)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    texts = {ax: _axes_texts(ax, renderer) for ax in axes}
    problems = []
    for ax in axes:
        for other in axes:
            if other is ax:
                continue
            frame = other.get_window_extent(renderer)
            for what, box in texts[ax]:
                inner = Bbox.from_extents(box.x0 + 0.5, box.y0 + 0.5, box.x1 - 0.5, box.y1 - 0.5)
                if inner.overlaps(frame):
                    problems.append(f"the {what} of the axes {_axes_name(fig, ax)!r} runs into the frame of the axes "
                                    f"{_axes_name(fig, other)!r}")
                hit = next((w for w, b in texts[other] if inner.overlaps(b)), None)
                if hit and fig.axes.index(ax) < fig.axes.index(other):  # each pair of texts once
                    problems.append(f"the {what} of the axes {_axes_name(fig, ax)!r} runs into the {hit} of the axes "
                                    f"{_axes_name(fig, other)!r}")
    return problems


def use_book_style() -> None:
    """Apply the book's matplotlib defaults (sizes, colours, fonts, no top/right spines)."""
    mpl.rcParams.update(
        {
            "figure.figsize": (6.4, 3.6),
            "figure.dpi": 110,
            "savefig.dpi": 150,
            "savefig.bbox": "tight",
            "axes.prop_cycle": mpl.cycler(color=PALETTE),
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.25,
            "lines.linewidth": 2.0,
            "font.size": 10,
            "axes.labelsize": 10,
            "legend.frameon": True,  # an opaque frame: a legend never shows data through it
            "legend.framealpha": 1.0,
            "legend.edgecolor": "0.8",
            "legend.fancybox": False,
            "image.cmap": "viridis",
        }
    )


def js_animation(fig, update, frames: int, interval_ms: int = 80, frame_format: str = "jpeg") -> str:
    """A matplotlib animation as self-contained HTML (``FuncAnimation.to_jshtml``).

    ``update(i)`` redraws frame ``i`` of ``frames``. The frames are embedded as images (``frame_format``,
    JPEG by default: a third of the size of PNG for scatter plots) in the returned HTML together with
    the player's JavaScript (no external files), so the page plays it without a kernel; show it with
    ``IPython.display.HTML``. The figure is closed afterwards, so it is not also drawn as a still
    image. Keep ``frames`` and the figure small: every frame is one image in the page.

    The first and the last frame are held to the rule of the book's other figures (:func:`readability_problems`:
    no text below ``MIN_FONT_PT`` once the page shrinks the frame to the column): a ValueError names each small text.
    """
    import matplotlib.pyplot as plt
    from matplotlib.animation import FuncAnimation

    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
        raise ValueError(f"frames must be a positive integer, got {frames!r}")
    problems: list[str] = []

    def drawn_and_checked(i):
        result = update(i)
        if i in (0, frames - 1):
            problems.extend(p for p in readability_problems(fig) if p not in problems)
        return result

    anim = FuncAnimation(fig, drawn_and_checked, frames=frames, interval=interval_ms, blit=False)
    try:
        with mpl.rc_context({"animation.embed_limit": 40.0, "animation.frame_format": frame_format}):
            html = anim.to_jshtml(default_mode="loop")
    finally:
        plt.close(fig)
    if problems:
        raise ValueError(
            f"the animation's frames are not readable at the book's {COLUMN_WIDTH_IN:g} in column: make the figure "
            f"at most the column's width, put legends outside the axes, or enlarge its fonts: " + "; ".join(problems)
        )
    return _without_icon_font(html)


# matplotlib's player draws its buttons with Font Awesome icons from a CDN; plain characters need no download
_BUTTON_GLYPHS = {  # characters of the basic geometric-shapes and dingbat blocks, which every font has (U+23EE,
    # U+23F8 and U+23ED drew as empty boxes in the book's Chromium screenshots)
    "fa fa-minus": "&minus;",
    "fa fa-fast-backward": "&#x2759;&#x25C0;&#x25C0;",
    "fa fa-step-backward": "&#x25C0;&#x2759;",
    "fa fa-play fa-flip-horizontal": "&#x25C0;",
    "fa fa-pause": "&#x2759;&#x2759;",
    "fa fa-play": "&#x25B6;",
    "fa fa-step-forward": "&#x2759;&#x25B6;",
    "fa fa-fast-forward": "&#x25B6;&#x25B6;&#x2759;",
    "fa fa-plus": "+",
}


def _without_icon_font(html: str) -> str:
    import re

    html = re.sub(r'<link rel="stylesheet"\s+href="https?://[^"]*font-awesome[^"]*">', "", html)
    for cls, glyph in _BUTTON_GLYPHS.items():
        html = html.replace(f'<i class="{cls}"></i>', glyph)
    return html


def draw_cloud_3d(
    ax, points, colors, *, lim: float = 1.0, size: float = 4.0, elev: float = 22.0, azim: float = -60.0, sphere: bool = True,
    zoom: float = 1.0,
) -> None:
    """Scatter an ``(n, 3)`` point cloud on a 3-D axis with fixed limits and view, no axes, and (with
    ``sphere=True``) the unit sphere drawn as a faint wire frame for reference. ``zoom`` enlarges the drawing within
    its axes (matplotlib leaves a wide margin around a 3-D box; 1.5 fills a panel of small multiples)."""
    if not (isinstance(zoom, (int, float)) and not isinstance(zoom, bool) and 0 < zoom <= 3):
        raise ValueError(f"zoom must be a number in (0, 3], got {zoom!r}")
    import numpy as np

    ax.cla()
    if sphere:
        u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 25), np.linspace(0, np.pi, 13))
        ax.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="0.85", lw=0.4)
    ax.scatter(points[:, 0], points[:, 1], points[:, 2], c=colors, s=size, depthshade=False, linewidths=0)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_zlim(-lim, lim)
    ax.set_box_aspect((1, 1, 1), zoom=zoom)
    ax.view_init(elev=elev, azim=azim)
    ax.set_axis_off()


def drawn_size_in(ax, points) -> tuple[float, float]:
    """Width and height, in inches of the figure, of the ``(n, 3)`` ``points`` as the 3-D axis ``ax`` draws them now
    (its view, limits and zoom): how large a sphere or cloud appears in the page."""
    from mpl_toolkits.mplot3d import proj3d

    points = np.asarray(points, dtype=float)
    if points.ndim != 2 or points.shape[1] != 3 or len(points) == 0:
        raise ValueError(f"points must be an (n, 3) array with n >= 1, got shape {points.shape}")
    ax.figure.canvas.draw()
    x, y, _ = proj3d.proj_transform(points[:, 0], points[:, 1], points[:, 2], ax.get_proj())
    px = ax.transData.transform(np.c_[x, y])
    dpi = ax.figure.dpi
    return float(np.ptp(px[:, 0]) / dpi), float(np.ptp(px[:, 1]) / dpi)


def point_cloud_animation(
    clouds,
    colors,
    *,
    captions=None,
    size_inches: float = 3.4,
    dpi: int = 64,
    interval_ms: int = 90,
    lim: float = 0.8,
    point_size: float = 4.0,
    spin_degrees: float = 0.0,
    zoom: float = 1.0,
) -> str:
    """An animation of 3-D point clouds (one per frame, same points in the same order) as HTML.

    ``captions[i]`` (optional) is written under frame ``i``; ``spin_degrees`` turns the camera by
    that much over the whole animation; ``zoom`` (as in :func:`draw_cloud_3d`, which refuses one outside (0, 3])
    enlarges the drawing within the frame, whose margins matplotlib leaves wide around a 3-D box. Returns
    :func:`js_animation`'s HTML.
    """
    import matplotlib.pyplot as plt

    clouds = list(clouds)
    if not clouds:
        raise ValueError("clouds must hold at least one (n, 3) array")
    n = clouds[0].shape[0]
    if any(c.shape != (n, 3) for c in clouds):
        raise ValueError("every cloud must have the same shape (n, 3)")
    if captions is not None and len(captions) != len(clouds):
        raise ValueError(f"captions must have one entry per cloud ({len(clouds)}), got {len(captions)}")
    fig = plt.figure(figsize=(size_inches, size_inches), dpi=dpi)
    ax = fig.add_subplot(projection="3d")
    fig.subplots_adjust(left=0, right=1, bottom=0, top=1)
    text = fig.text(0.5, 0.02, "", ha="center", fontsize=9)
    steps = max(1, len(clouds) - 1)

    def update(i):
        draw_cloud_3d(ax, clouds[i], colors, lim=lim, size=point_size, azim=-60.0 + spin_degrees * i / steps, zoom=zoom)
        text.set_text("" if captions is None else captions[i])
        return ()

    return js_animation(fig, update, len(clouds), interval_ms=interval_ms)


_PLAIN_STEPS = ((1, 2, 5), (1, 2, 3, 4, 5, 6, 8))  # where a short log axis is labelled, per decade: coarse, then finer


def plain_log_ticks(ax, axis: str = "y", plain_powers: bool = False) -> list[str]:
    """Label the log ``axis`` (``"x"`` or ``"y"``) of ``ax`` readably, once its data are drawn: no labels on the minor
    ticks, and where the drawn range spans less than two decades (where matplotlib labels the minor ticks, ``4×10⁰ 3×10⁰
    2×10⁰``, crowded at the column's width: Fig. 4.8 and Fig. 6.6, issue 33) ticks at 1, 2, 5 times a power of ten (1 to 8 where
    those give fewer than two) written as plain numbers, ``"2"``, ``"20"``, ``"0.05"``; the view limits are kept. A range
    of two decades or more keeps matplotlib's labels ``10⁻², 10⁻¹, 10⁰``, or, with ``plain_powers=True`` (a figure
    whose panels span short and long ranges, so that every panel is labelled in one style), its powers of ten as plain
    numbers, ``"0.01"``, ``"0.1"``, ``"1"``, ``"10"``; a power below 10⁻⁴ or above 10⁵ has no short plain form, and such
    a range is refused with a ValueError. Returns the labels shown. Refuses an axis that is not on a log scale."""
    import matplotlib.ticker as ticker

    if axis not in ("x", "y"):
        raise ValueError(f"axis must be 'x' or 'y', got {axis!r}")
    target = ax.yaxis if axis == "y" else ax.xaxis
    if target.get_scale() != "log":
        raise ValueError(f"the {axis} axis of these axes is {target.get_scale()!r}, not 'log': plain_log_ticks labels a log axis")
    low, high = sorted(ax.get_ylim() if axis == "y" else ax.get_xlim())
    target.set_minor_formatter(ticker.NullFormatter())
    if high / low >= 100 and not plain_powers:  # two decades or more: the major labels 10⁻², 10⁻¹, ... are few and readable
        return [t.get_text() for t, v in zip(target.get_ticklabels(), target.get_ticklocs()) if low <= v <= high]
    if high / low >= 100:  # two decades or more, labelled as plain numbers: one tick per power of ten
        powers = range(math.ceil(math.log10(low) - 1e-9), math.floor(math.log10(high) + 1e-9) + 1)
        if powers[0] < -4 or powers[-1] > 5:
            raise ValueError(f"the {axis} axis spans {low:.3g} to {high:.3g}: powers of ten below 10⁻⁴ or above 10⁵ have no "
                             "short plain form; call plain_log_ticks without plain_powers (labels 10ⁿ) for this figure")
        ticks = [10.0**k for k in powers]
        labels = [f"{t:.10g}" for t in ticks]
        target.set_ticks(ticks, labels)
        (ax.set_ylim if axis == "y" else ax.set_xlim)(low, high)
        return labels
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    for steps in _PLAIN_STEPS:
        ticks = [m * 10.0**k for k in decades for m in steps if low <= m * 10.0**k <= high]
        if len(ticks) >= 2:
            break
    else:  # a narrower range: three values across it, to the fewest significant digits that keep two inside it
        for digits in range(2, 8):
            ticks = [t for t in sorted({float(f"{t:.{digits}g}") for t in np.geomspace(low, high, 3)}) if low <= t <= high]
            if len(ticks) >= 2:
                break
    labels = [f"{t:.10g}" for t in ticks]
    target.set_ticks(ticks, labels)
    (ax.set_ylim if axis == "y" else ax.set_xlim)(low, high)
    return labels
