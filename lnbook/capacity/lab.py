"""What the chapter-3 lab draws and tabulates: circle panels of a construction, and a float64 survey.

* :func:`draw_circle_layer`: one panel of the construction on the unit circle (samples, the pole of the
  next block, the ray through the sample that moves);
* :func:`float64_survey`: build and check float64 nets (:func:`~lnbook.capacity.build_float64.build_ln_net`) on
  random labels of Gaussian points, one row per problem; :func:`survey_ranges` groups the rows by size
  and number of labels, :func:`survey_html` prints them as the HTML table the float64 appendix shows.
"""

from __future__ import annotations

import html
import math
import time

import numpy as np
import torch

from lnbook.capacity.build_float64 import ConstructionError, build_ln_net, verify_ln_net

__all__ = ["draw_circle_layer", "float64_survey", "survey_ranges", "survey_html"]


def draw_circle_layer(ax, theta, labels, palette, *, pole=None, moved=None, text="") -> None:
    """Draw the unit circle with samples at angles ``theta`` (one colour and marker per label).

    ``pole`` (a point of the plane) is drawn as a cross and ``moved`` (an angle) as the dashed ray from
    the pole through that sample; ``text`` goes in the upper left corner.
    """
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
    ax.text(0.02, 0.98, text, transform=ax.transAxes, fontsize=7, va="top")
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_xlim(-1.3, 1.3)
    ax.set_ylim(-1.3, 1.3)


def float64_survey(sizes, label_counts, seeds, n_features: int = 3, progress=None) -> list[dict]:
    """Build a float64 net for random labels of ``m`` Gaussian points of ``R^n_features``, for every size,
    number of labels and seed (``seeds``: an int, or a dict from ``(m, k)`` to an int).

    One dict per problem: ``m``, ``k``, ``seed``, ``ok`` (built and 100% correct in float64), ``layers``,
    ``bound`` (:func:`~lnbook.capacity.nets.layer_bound`, the theorem's), ``straighten``, ``separation``
    (smallest, radians), ``relocated`` (companions), ``float32_errors``, ``margin`` and ``seconds`` (build and
    check). ``progress`` wraps the list of problems (e.g. ``tqdm``).
    """
    from lnbook.capacity.nets import layer_bound

    problems = []
    for m in sizes:
        for k in label_counts:
            count = seeds.get((m, k), 0) if isinstance(seeds, dict) else seeds
            problems += [(m, k, seed) for seed in range(count)]
    rows = []
    for m, k, seed in progress(problems) if progress else problems:
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


def _span(pair, fmt="{}") -> str:
    if pair is None:
        return "-"
    lo, hi = (fmt.format(v) for v in pair)
    return lo if lo == hi else f"{lo} to {hi}"


def survey_html(ranges) -> str:
    """The grouped survey as an HTML table (plain text cells)."""
    head = ["m", "labels", "LN layers", "1 + m' - k", "straightening", "correct nets", "smallest separation (rad)",
            "companions", "float32: wrong of m"]
    lines = ["<table class='table' style='font-size: 0.8em'>", "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr></thead>",
             "<tbody>"]
    for r in ranges:
        cells = [str(r["m"]), str(r["k"]), _span(r["layers"]), _span(r["bound"]), _span(r["straighten"]),
                 f"{r['built']} of {r['tried']}", _span(r["separation"], "{:.0e}"), _span(r["relocated"]),
                 _span(r["float32_errors"])]
        lines.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    lines += ["</tbody>", "</table>"]
    return "\n".join(lines)
