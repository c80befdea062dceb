"""What the chapter-3 lab runs, draws and tabulates: the exact construction's checks, circle panels, a float64 survey.

* :func:`exact_labelling_sweep`: every labelling of a few points, built and certified exactly;
  :func:`exact_random_table`: random labellings of larger sets, exact and rounded to float64;

* :func:`draw_circle_layer`: one panel of the construction on the unit circle (samples, the pole of the
  next block, the ray through the sample that moves);
* :func:`central_projection_scene`, :func:`draw_central_projection`: one block as a central projection (the pole,
  its tangents, near and far arc, two points the block merges), the chapter's picture of its two lemmas;
* :func:`float64_survey`: build and check float64 nets (:func:`~lnbook.capacity.build_float64.build_ln_net`) on
  random labels of Gaussian points, one row per problem; :func:`survey_ranges` groups the rows by size
  and number of labels, :func:`survey_tables` makes them the two numbered tables of the float64 appendix and
  :func:`survey_html` the lab's HTML of both;
  :func:`survey_seeds` says how many seeds each problem gets, :func:`survey_summary` the numbers the appendix quotes;
* :func:`peel_curves`, :func:`straightening_demo`: the distortion budget and a straightening block (appendix);
* :func:`builder_constants`, :func:`landing_margin_limit`: the float64 builder's constants the appendix quotes;
  :func:`builder_constant_rows`: the same constants as a reader's table (a name in words, the value, what it sets).
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import torch

from lnbook.capacity import build_float64, landing, schwarzian
from lnbook.capacity.build_exact import build_exact_ln_net, to_float64_net, verify_exact_ln_net
from lnbook.capacity.build_float64 import ConstructionError, build_ln_net, verify_ln_net
from lnbook.capacity.circle import block_image
from lnbook.capacity.nets import layer_bound
from lnbook.util.tables import RANGE_DASH, Table, number_range, power_of_ten, whole_number

__all__ = [
    "draw_circle_layer", "central_projection_scene", "SEPARATION_HEADERS", "draw_central_projection", "float64_survey", "survey_ranges", "survey_tables", "survey_html", "exact_labelling_sweep", "exact_random_table",
    "survey_seeds", "survey_summary", "peel_curves", "straightening_demo", "builder_constants", "landing_margin_limit",
    "BUILDER_CONSTANT_MEANINGS", "builder_constant_rows", "constant_text", "builder_constants_table",
]


def draw_circle_layer(ax, theta, labels, palette, *, pole=None, moved=None, text="") -> None:
    """Draw the unit circle with samples at angles ``theta`` (one colour and marker per label).

    ``pole`` (a point of the plane) is drawn as a cross and ``moved`` (an angle) as the dashed ray from
    the pole through that sample, both inside the panel's framed view; ``text`` is the panel's title (above it, clear
    of the circle).
    """
    from lnbook.util.plotting import MIN_FONT_PT

    t = np.linspace(0, 2 * np.pi, 400)
    ax.plot(np.cos(t), np.sin(t), color="0.8", lw=1)
    theta, labels = np.asarray(theta), np.asarray(labels)
    markers = "os^Dv<>p"
    for lab in sorted(set(labels.tolist())):
        sel = labels == lab
        ax.scatter(np.cos(theta[sel]), np.sin(theta[sel]), s=30, marker=markers[lab % len(markers)],
                   color=palette[lab % len(palette)], zorder=3, label=f"label {lab}")
    if pole is not None:
        o = np.asarray(pole, dtype=np.float64)
        ax.scatter([o[0]], [o[1]], marker="x", color="k", zorder=4)
        if moved is not None:
            p = np.array([math.cos(moved), math.sin(moved)])
            far = o + 2.2 * (p - o) / np.linalg.norm(p - o)
            ax.plot([o[0], far[0]], [o[1], far[1]], color="k", lw=0.7, ls="--")
    if text:  # above the panel, not over the circle (in the corner it sat on the arc: issue 33); readable in the page
        ax.set_title(text, fontsize=MIN_FONT_PT, pad=2)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    # the view holds the circle and the pole with room for their markers; the panel's full frame is drawn, so the ray,
    # clipped there, ends at a visible edge (with only the left and bottom spines, points and rays seemed to run past
    # the panel's right edge: issue 33)
    lim = 1.3 if pole is None else max(1.3, float(np.abs(np.asarray(pole, dtype=np.float64)).max()) + 0.25)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    for side in ("top", "right"):
        ax.spines[side].set_visible(True)


def central_projection_scene(pole, p_angle: float) -> dict:
    r"""The geometry of the central projection from ``pole`` (:math:`\|o\| > 1`) on the unit circle, for a picture
    of chapter 3's lemmas ``lem-block-projection`` and ``lem-merge`` (the chapter's fig-ch03-central-projection).

    Returns a dict of plane points and angles: ``pole`` :math:`o`; ``tangents`` :math:`T, T'` (the two points where
    the tangents from :math:`o` touch the circle, :math:`\langle T, o\rangle = 1`); ``near_arc`` and ``far_arc``
    (start and end angles, counter-clockwise: the arc :math:`\langle v, o\rangle > 1` seen from :math:`o`, and the
    rest); ``p`` (the circle point at ``p_angle``, which must lie on the near arc) and ``q`` (the second point where the
    line from :math:`o` through :math:`p` meets the circle, on the far arc): the projection sends both to the same
    direction ``image`` :math:`(p - o)/\|p - o\|`.
    """
    o = np.asarray(pole, dtype=np.float64)
    r2 = float(o @ o)
    if not r2 > 1.0:
        raise ValueError(f"the pole must lie outside the unit circle (|o| = {math.sqrt(max(r2, 0.0)):.3g})")
    p = np.array([math.cos(p_angle), math.sin(p_angle)])
    if not float(p @ o) > 1.0:
        raise ValueError("p must lie on the near arc, <p, o> > 1 (seen from the pole)")
    base, half = math.atan2(o[1], o[0]), math.acos(1.0 / math.sqrt(r2))  # the tangent points at base -+ half
    tangents = (np.array([math.cos(base - half), math.sin(base - half)]),
                np.array([math.cos(base + half), math.sin(base + half)]))
    direction = (p - o) / np.linalg.norm(p - o)
    # o + t d meets the circle where t^2 + 2<o,d> t + |o|^2 - 1 = 0: the two roots sum to -2<o,d>, p is the nearer one
    t_p = float(np.linalg.norm(p - o))
    q = o + (float(-2.0 * (o @ direction)) - t_p) * direction
    return {"pole": o, "tangents": tangents, "near_arc": (base - half, base + half),
            "far_arc": (base + half, base - half + 2 * math.pi), "p": p, "q": q, "image": direction}


def draw_central_projection(ax, scene: dict, palette) -> None:
    r"""Draw :func:`central_projection_scene`: the unit circle with its near arc (``palette[1]``) and far arc
    (``palette[0]``), the pole :math:`o`, the two tangents through :math:`T, T'`, the polar line :math:`TT'` (dotted),
    and the ray from :math:`o` through :math:`p` and :math:`q`, which the projection sends to one direction."""
    from lnbook.util.plotting import MIN_FONT_PT

    o, (T1, T2), p, q = scene["pole"], scene["tangents"], scene["p"], scene["q"]
    for (start, stop), colour, width, name in ((scene["far_arc"], palette[0], 1.6, "far arc"),
                                                (scene["near_arc"], palette[1], 3.2, "near arc (visible from $o$)")):
        t = np.linspace(start, stop, 200)
        ax.plot(np.cos(t), np.sin(t), color=colour, lw=width, label=name, solid_capstyle="butt")
    for T in (T1, T2):  # the tangents, from the pole a little past their tangent points
        end = o + 1.25 * (T - o)
        ax.plot([o[0], end[0]], [o[1], end[1]], color="0.45", lw=0.9)
    ax.plot([T1[0], T2[0]], [T1[1], T2[1]], color="0.45", lw=0.8, ls=":")  # the polar line <v, o> = 1
    ray_end = o + 1.15 * (q - o)
    ax.plot([o[0], ray_end[0]], [o[1], ray_end[1]], color="k", lw=0.9, ls="--", label="ray from $o$ through $p$ and $q$")
    ax.scatter([o[0]], [o[1]], marker="x", color="k", s=40, zorder=4)
    ax.scatter([p[0], q[0]], [p[1], q[1]], color="k", s=22, zorder=4)
    # labels just outside the circle (or beside the pole), pushed away from the centre; p's and q's across the ray
    # from o, off the line they sit on, to the side away from the centre
    normal = np.array([-scene["image"][1], scene["image"][0]])
    across = normal if float(normal @ p) > 0 else -normal
    for point, text, away in ((o, "$o$", o / np.linalg.norm(o)), (T1, "$T$", T1), (T2, "$T'$", T2),
                              (p, "$p$", -across), (q, "$q$", across)):
        ax.annotate(text, point, xytext=(11 * away[0], 11 * away[1]), textcoords="offset points", ha="center",
                    va="center", fontsize=MIN_FONT_PT + 1)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    xs = [-1.0, 1.0, float(o[0]), float(ray_end[0])]
    ys = [-1.0, 1.0, float(o[1]), float(ray_end[1])]
    ax.set_xlim(min(xs) - 0.3, max(xs) + 0.3)
    ax.set_ylim(min(ys) - 0.3, max(ys) + 0.3)
    for side in ax.spines.values():
        side.set_visible(False)


def _wrapped(items, progress, desc: str):
    """``items`` under the progress wrapper a caller asked for: none (``None``/``False``), the book's bar named ``desc``
    (``True``, the default of the functions of this module, so that a lab cell shows no progress argument: the bar
    draws for a person running the notebook and nothing under ``LNBOOK_PROGRESS=0``, as the book's build runs it;
    screenshot reads, issue 33), or the caller's own wrapper."""
    if progress is None or progress is False:
        return items
    if progress is True:
        from lnbook.util.progress import progress_bar

        return progress_bar(items, desc=desc)
    if not callable(progress):
        raise TypeError(f"progress must be True, False, None or a wrapper such as tqdm, got {progress!r}")
    return progress(items)


def float64_survey(sizes, label_counts, seeds, n_features: int = 3, progress=True) -> list[dict]:
    """Build a float64 net for random labels of ``m`` Gaussian points of ``R^n_features``, for every size,
    number of labels and seed (``seeds``: an int, or a dict from ``(m, k)`` to an int).

    One dict per problem: ``m``, ``k``, ``seed``, ``ok`` (built and 100% correct in float64), ``layers``,
    ``bound`` (:func:`~lnbook.capacity.nets.layer_bound`, the theorem's), ``straighten``, ``separation``
    (smallest, radians), ``relocated`` (companions), ``float32_errors``, ``margin`` and ``seconds`` (build and
    check). ``progress`` wraps the list of problems: ``True`` (default) for the book's progress bar ("float64 nets",
    :func:`lnbook.util.progress.progress_bar`, silent under ``LNBOOK_PROGRESS=0``), ``False`` for none, or any
    wrapper such as ``tqdm``.
    """
    from lnbook.capacity.nets import layer_bound

    problems = []
    for m in sizes:
        for k in label_counts:
            count = seeds.get((m, k), 0) if isinstance(seeds, dict) else seeds
            problems += [(m, k, seed) for seed in range(count)]
    rows = []
    for m, k, seed in _wrapped(problems, progress, "float64 nets"):
        rng = np.random.default_rng(seed)
        X, y = rng.standard_normal((m, n_features)), rng.integers(0, k, m)
        start = time.perf_counter()
        try:
            net = build_ln_net(X, y)
        except ConstructionError:
            rows.append({"m": m, "k": k, "seed": seed, "ok": False, "seconds": time.perf_counter() - start})
            continue
        seconds = time.perf_counter() - start
        rows.append({
            "m": m, "k": k, "seed": seed, "ok": True, "layers": net.n_ln_layers,
            "bound": layer_bound(net.n_distinct, net.n_classes), "straighten": net.n_straighten,
            "separation": net.min_separation, "relocated": sum(len(r.relocated) for r in net.trace),
            "float32_errors": verify_ln_net(net, X, y, dtype=torch.float32)["errors"], "margin": net.margin,
            "seconds": seconds,
        })
    return rows


def survey_ranges(rows) -> list[dict]:
    """Group :func:`float64_survey` rows by ``(m, k)``: ``(min, max)`` of each quantity over the nets built."""
    groups = {}
    for r in rows:
        groups.setdefault((r["m"], r["k"]), []).append(r)
    out = []
    for (m, k), rs in sorted(groups.items()):
        built = [r for r in rs if r["ok"]]
        row = {"m": m, "k": k, "tried": len(rs), "built": len(built)}
        for key in ("layers", "bound", "straighten", "separation", "relocated", "float32_errors", "margin"):
            values = [r[key] for r in built]
            row[key] = (min(values), max(values)) if values else None
        out.append(row)
    return out


def _span(pair, spec: str = "d") -> str:
    """A (min, max) pair as a table cell: an em dash for none (no net built), else
    :func:`~lnbook.util.tables.number_range` (one value when both ends print the same, an en-dash range that the book's
    table never breaks, "10⁻²–3×10⁻²" with the spec ``".0p"``)."""
    if pair is None:
        return "\u2014"
    if spec == "d":  # counts: "10 541", grouped as the text's 10 000 (lnbook.util.tables.whole_number)
        low, high = whole_number(pair[0]), whole_number(pair[1])
        return low if low == high else f"{low}{RANGE_DASH}{high}"
    return number_range(pair[0], pair[1], spec)


def _ends(pair, spec: str) -> tuple[str, str]:
    """A (min, max) pair as two table cells, each one number (``power_of_ten`` with ``spec``); em dashes for none."""
    if pair is None:
        return "\u2014", "\u2014"
    return power_of_ten(pair[0], spec), power_of_ten(pair[1], spec)


#: the two columns of the smallest separation of a row's nets: its lowest and its highest over the seeds
SEPARATION_HEADERS = ("smallest separation (rad), lowest", "highest")

#: the exact net's count of LN layers as a table header: math italics, a prime and a minus sign, and no-break spaces,
#: so that it reads as the text's $1 + m' - k$ and stays on one line (as "1 + m' - k" it wrapped to three: issue 33)
BOUND_HEADER = "1\u00a0+\u00a0𝑚′\u00a0−\u00a0𝑘"
#: the key printed under the survey's table: its letters, the bracket and the dash
SURVEY_KEY = ("𝑚 samples with 𝑘 labels; in brackets the theorem’s count "
              + f"<span style='font-family: serif'>{BOUND_HEADER}</span>"
              + "; — where no net of the row was built (the builder refused every seed)")


def survey_tables(ranges) -> tuple[Table, Table]:
    """The grouped survey as two :class:`~lnbook.util.tables.Table` objects, each row named by its ``𝑚`` and ``𝑘``: the
    depth and how the nets did (LN layers beside the theorem's count, straightening blocks, correct nets), then the
    margins of the float64 build (smallest separation, lowest and highest over the seeds, companions, float32 errors). The appendix glues each one and
    shows it as a numbered table (``{glue:table}``, :mod:`lnbook.book.sphinx_glue_images`), its caption saying what the
    letters, the bracket and the dashes mean; the lab shows both with :func:`survey_html`.

    Headers are in the text's notation (``𝑚``, ``𝑘``, :data:`BOUND_HEADER`); each range is one unbreakable cell, so no
    number is split across lines; a row where no net was built shows dashes. One number format per column: the
    separations always as powers of ten with one significant digit, ``2×10⁻³`` (not ``2e-03``: screenshot read, issue
    33 item 3), their lowest and highest in two columns (an en dash between two powers of ten, ``10⁻⁴–2×10⁻⁴``,
    reads as a minus sign: screenshot read 48, item 12). (Eight columns in one table broke "straight-ening" and
    "compan-ions" at the column's width, shots35 item 5.)"""
    # the bound shares the cell of the depth it bounds ("293–297 (299)", which may wrap before the bracket)
    rows = [[whole_number(r["m"]), str(r["k"]),
             "—" if r["layers"] is None else f"{_span(r['layers'])} ({_span(r['bound'])})",
             _span(r["straighten"]), f"{r['built']} of {r['tried']}"] for r in ranges]
    margins = [[whole_number(r["m"]), str(r["k"]), *_ends(r["separation"], ".0p"), _span(r["relocated"]),
                _span(r["float32_errors"])] for r in ranges]
    depth = Table(rows, ["𝑚", "𝑘", f"LN layers ({BOUND_HEADER})", "straightening blocks", "correct nets"])
    margin = Table(margins, ["𝑚", "𝑘", SEPARATION_HEADERS[0], SEPARATION_HEADERS[1], "companions",
                             "float32 errors (of 𝑚)"])
    return depth, margin


def survey_html(ranges) -> str:
    """:func:`survey_tables` as HTML for the lab: the two tables one under the other, at the text size like every
    other table, with a key under the second (:data:`SURVEY_KEY`, its count in a serif face like the letters beside
    it) that says what the letters, the bracket and the dashes mean."""
    opening = "<table class='table lnbook-table'>"
    depth, margin = (table._repr_html_() for table in survey_tables(ranges))
    if not (depth.startswith(opening) and margin.startswith(opening)):
        raise RuntimeError(f"lnbook.util.tables.Table's HTML no longer starts with {opening!r}: update survey_html")
    return depth + opening + f"<caption style='caption-side: bottom'>{SURVEY_KEY}</caption>" + margin[len(opening):]


def exact_labelling_sweep(m: int, labels: int = 3, seed: int = 0, progress=True) -> dict:
    """Every labelling of ``m`` Gaussian points of ``R^2`` with labels in ``range(labels)``, built by the exact
    construction and certified by :func:`~lnbook.capacity.build_exact.verify_exact_ln_net` through the circle formula
    (``through="circle"``, half the cost; ``tests/capacity/test_build_exact.py`` runs the real weights and LayerNorm).

    Returns ``labellings`` (``labels ** m``) and ``exact``: how many nets classify every sample, put all samples of
    a label at one point and have depth exactly ``1 + m' - k``. ``progress`` wraps the list of labellings: ``True``
    (default) for the book's progress bar ("labellings", silent under ``LNBOOK_PROGRESS=0``), ``False`` for none, or
    any wrapper such as ``tqdm``.
    """
    if isinstance(m, bool) or not isinstance(m, int) or m < 2:
        raise ValueError(f"m must be an integer >= 2, got {m!r}")
    X = np.random.default_rng(seed).standard_normal((m, 2))
    items = list(itertools.product(range(labels), repeat=m))
    exact = 0
    for bits in _wrapped(items, progress, "labellings"):
        y = np.array(bits)
        net = build_exact_ln_net(X, y)
        rep = verify_exact_ln_net(net, X, y, through="circle")
        exact += rep["errors"] == 0 and rep["coincide"] and net.depth == layer_bound(m, len(set(bits)))
    return {"m": m, "labellings": len(items), "exact": exact}


def exact_random_table(sizes, label_counts=(2, 3, 5), n_features: int = 3) -> list[dict]:
    """Random labels of ``m`` Gaussian points of ``R^n_features`` (seed ``m + k``) for every size and number of labels:
    the exact net's depth beside ``1 + m' - k``, its certified margin (through the circle formula,
    ``through="circle"``), whether it is certified correct (``ok``), and the errors of the same weights rounded to
    float64 (``float64_errors``)."""
    rows = []
    for m in sizes:
        for k in label_counts:
            rng = np.random.default_rng(m + k)
            X, y = rng.standard_normal((m, n_features)), rng.integers(0, k, m)
            net = build_exact_ln_net(X, y)
            rep = verify_exact_ln_net(net, X, y, through="circle")
            rows.append({"m": m, "k": k, "depth": net.depth, "bound": rep["bound"], "margin": rep["margin"],
                         "ok": rep["errors"] == 0 and rep["coincide"] and net.depth == rep["bound"],
                         "float64_errors": verify_ln_net(to_float64_net(net), X, y)["errors"]})
    return rows


def survey_seeds(sizes, seeds: int, seeds_large: int, seeds_multi: int) -> dict:
    """Seeds per problem of the float64 survey: two labels get ``seeds`` (``seeds_large`` from ``m = 1000`` on),
    three and five labels ``seeds_multi`` at ``m = 100`` and ``300`` and none elsewhere."""
    return {(m, k): ((seeds if m < 1000 else seeds_large) if k == 2 else (seeds_multi if m in (100, 300) else 0))
            for m in sizes for k in (2, 3, 5)}


def survey_summary(rows, ranges) -> dict:
    """The numbers the appendix quotes from a survey: the largest ``m`` tried, the largest ``m`` up to which every
    problem was built (``largest_built_m``) and the number of problems refused, the first ``m`` with a float32 error,
    the range of the logit margins of binary nets, and the median build-and-check time of the binary nets that were
    built at the largest ``m`` where any was (``cost_m``, ``cost_largest``), with the exponent of a power law fitted
    to the medians of every such ``m`` from ``100`` on (``None`` where the survey has no data: fewer than two sizes)."""
    sizes = sorted({r["m"] for r in rows})
    built_upto = [m for m in sizes if all(r["ok"] for r in rows if r["m"] <= m)]
    largest_built = max(built_upto) if built_upto else None
    binary = [r for r in ranges if r["k"] == 2 and r["margin"] is not None]
    f32 = [r["m"] for r in ranges if r["float32_errors"] is not None and r["float32_errors"][1] > 0]
    times = {m: [r["seconds"] for r in rows if r["m"] == m and r["k"] == 2 and r["ok"]] for m in sizes}
    timed = [m for m in sizes if times[m]]
    cost_m = max(timed) if timed else None
    fit = [m for m in timed if m >= 100]
    exponent = float(np.polyfit(np.log(fit), np.log([np.median(times[m]) for m in fit]), 1)[0]) if len(fit) >= 2 else None
    return {
        "largest_m": max(sizes),
        "largest_built_m": largest_built,
        "refused": sum(not r["ok"] for r in rows),
        "first_float32_m": min(f32) if f32 else None,
        "margin_binary": (min(r["margin"][0] for r in binary), max(r["margin"][1] for r in binary)) if binary else None,
        "cost_m": cost_m,
        "cost_largest": float(np.median(times[cost_m])) if cost_m else None,
        "cost_exponent": exponent,
    }


def peel_curves(n_points: int, layers: int, every: int | None = None) -> dict:
    """End gap over middle gap while peeling ``n_points`` evenly spaced points, measured and predicted
    (:func:`~lnbook.capacity.schwarzian.peel_distortion`), on arcs of 0.25 and 0.1 rad and on the builder's arc."""
    every = every or max(1, layers // 30)
    widths = {"w = 0.25": 0.25, "w = 0.1": 0.1, "w(N) = min(0.25, 3/√N)": schwarzian.arc_width_for}
    return {name: schwarzian.peel_distortion(n_points, width, layers, every=every) for name, width in widths.items()}


def straightening_demo(n_points: int = 1000, width: float = 0.25, moves: int = 50) -> dict:
    """Peel ``moves`` end points from ``n_points`` evenly spaced on an arc of ``width`` rad, then apply one
    straightening block: the angles before (``peeled``) and after (``straightened``), the ``pole``, and the end gap
    over middle gap (front, back) ``before`` and ``after``."""
    peeled = schwarzian.peeled_arc(n_points, width, moves)
    pole, before, after = schwarzian.straightening_pole(peeled, width)
    straightened, _ = block_image(peeled, pole, width)
    return {"peeled": peeled, "straightened": straightened, "pole": pole, "before": before, "after": after}


def builder_constants() -> dict:
    """The float64 builder's constants that the appendix quotes, by the names of their glue keys."""
    return {
        "arc-cap": schwarzian.ARC_CAP, "arc-scale": schwarzian.ARC_SCALE, "straighten-from": schwarzian.STRAIGHTEN_FROM,
        "straighten-every": schwarzian.STRAIGHTEN_EVERY, "straighten-below": schwarzian.STRAIGHTEN_BELOW,
        "near-max": landing.NEAR_MAX, "tangents": landing.TANGENTS, "safe": landing.SAFE, "comfort": landing.COMFORT,
        "crowd": landing.CROWD, "deep": landing.DEEP, "tries": build_float64.LANDING_TRIES,
        "first-layer-tries": build_float64.FIRST_LAYER_TRIES, "book-merge": build_float64.BOOK_MERGE,
        "book-sink": build_float64.BOOK_SINK,
    }


# For each key of builder_constants: the constant's name in words and the one line that says what it sets.
BUILDER_CONSTANT_MEANINGS = {
    "arc-cap": ("widest arc", "the widest arc (radians) the builder keeps between moves"),
    "arc-scale": ("arc scale", "below the straightening threshold, N clusters keep an arc of min(widest arc, arc scale / √N)"),
    "straighten-from": ("straightening threshold", "from this many distinct samples on, the builder keeps the widest arc "
                        "and straightens it"),
    "straighten-every": ("straightening rate", "at most one straightening block per this many merging blocks"),
    "straighten-below": ("straightening trigger", "a straightening block runs when the mean gap at the arc's ends falls "
                         "below this share of the mean gap in its middle"),
    "near-max": ("clusters near the pole", "at most this many clusters (the moved end and its companions) are seen by "
                 "a block's pole"),
    "tangents": ("tangent points", "tangent points scanned for each set of clusters near the pole"),
    "safe": ("safety factor", "a landing counts as precise when its estimated error is below 1 / (2 × this) of the room "
             "around its target"),
    "comfort": ("comfort factor", "the same ratio above which a landing counts as comfortably precise"),
    "crowd": ("crowding limit", "a move may create no gap below this share of the median gap between clusters"),
    "deep": ("landing depth", "companions land preferably beyond this many clusters from the moved end"),
    "tries": ("landing tries", "candidate blocks built and checked, best first, until one lands where predicted"),
    "first-layer-tries": ("tries for the first layer", "random directions scored for the first projection"),
    "book-merge": ("merge tolerance", "clusters of one label closer than this (relative to the arc) are counted as one"),
    "book-sink": ("sink share", "a cluster closer to its label's sink than this share of the sink's room is counted with "
                  "the sink"),
}


def builder_constant_rows() -> list[list]:
    """The rows of the lab's table of :func:`builder_constants`: the name in words, the value, what it sets.

    Raises ``ValueError`` naming any constant without a meaning in :data:`BUILDER_CONSTANT_MEANINGS` (or a meaning
    without a constant): add its line there, so that the table never shows a bare key."""
    constants = builder_constants()
    missing, stale = sorted(set(constants) - set(BUILDER_CONSTANT_MEANINGS)), sorted(set(BUILDER_CONSTANT_MEANINGS) - set(constants))
    if missing or stale:
        raise ValueError(f"builder constants without a meaning: {missing}; meanings without a constant: {stale}; "
                         "keep BUILDER_CONSTANT_MEANINGS in step with builder_constants()")
    return [[BUILDER_CONSTANT_MEANINGS[key][0], value, BUILDER_CONSTANT_MEANINGS[key][1]] for key, value in constants.items()]


def constant_text(value) -> str:
    """A builder constant as the table writes it: a whole number without a decimal point (``"3"``, ``"10"``, not
    ``"3.0"``, ``"10.0"`` beside ``"2000"``: screenshot read, issue 33), a small one as a power of ten
    (``"10⁻¹¹"``), any other as Python's shortest form (``"0.25"``).

    >>> constant_text(3.0), constant_text(2000), constant_text(1e-11), constant_text(0.25)
    ('3', '2000', '10⁻¹¹', '0.25')
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"a builder constant is a number, got {value!r}")
    if isinstance(value, float) and 0 < abs(value) < 1e-3:
        return power_of_ten(value, ".0p")
    if float(value).is_integer():
        return f"{int(value)}"
    return f"{value:g}"


def builder_constants_table() -> Table:
    """The lab's table of the float64 builder's constants: one row per :func:`builder_constant_rows` row, the value
    written by :func:`constant_text`."""
    return Table([[name, constant_text(value), what] for name, value, what in builder_constant_rows()],
                 ["quantity", "value", "what it sets"])


def landing_margin_limit(start: int = 100, stop: int = 10**6) -> int:
    """The first ``N`` at which the single-move landing margin on the arc ``3/sqrt(N)`` falls below ``landing.SAFE``."""
    for n in range(start, stop):
        if landing.landing_margin_estimate(n, 3 / math.sqrt(n)) < landing.SAFE:
            return n
    raise ValueError(f"the landing margin stays above SAFE = {landing.SAFE} for N < {stop}")
