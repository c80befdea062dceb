"""Checks of lnbook.capacity.lab: the chapter-3 lab's exact sweeps, circle panels, float64 survey and appendix numbers.
"""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import math  # noqa: E402

import pytest  # noqa: E402

from lnbook.capacity import landing, schwarzian  # noqa: E402
from lnbook.capacity.lab import (  # noqa: E402
    builder_constants,
    draw_circle_layer,
    exact_labelling_sweep,
    exact_random_table,
    float64_survey,
    landing_margin_limit,
    peel_curves,
    straightening_demo,
    survey_html,
    survey_ranges,
    survey_seeds,
    survey_summary,
    survey_tables,
    SEPARATION_HEADERS,
)

matplotlib.use("Agg")


def test_survey_rows_ranges_and_table():
    rows = float64_survey([10, 20], (2, 3), {(10, 2): 3, (20, 2): 2, (20, 3): 1})
    assert [(r["m"], r["k"], r["seed"]) for r in rows] == [(10, 2, 0), (10, 2, 1), (10, 2, 2), (20, 2, 0), (20, 2, 1),
                                                          (20, 3, 0)]
    assert all(r["ok"] and r["layers"] <= r["bound"] and r["straighten"] == 0 for r in rows)
    ranges = survey_ranges(rows)
    assert [(r["m"], r["k"], r["tried"], r["built"]) for r in ranges] == [(10, 2, 3, 3), (20, 2, 2, 2), (20, 3, 1, 1)]
    first = ranges[0]
    layers = [r["layers"] for r in rows if (r["m"], r["k"]) == (10, 2)]
    assert first["layers"] == (min(layers), max(layers))
    table = survey_html(ranges)
    assert table.startswith("<table") and table.count("<tr>") == 8 and "3 of 3" in table  # two tables, 3 rows each


def test_survey_html_keeps_every_range_of_numbers_whole():
    """Issue 33: the appendix's survey broke "1e-02 to 3e-02" and "293 to 297" across lines; each range is now one
    en-dash token in an unbreakable span (lnbook.util.tables), a single value when both ends print the same. And it
    reads like the book's other tables: at the text size (it was at 0.8), headers in the text's notation (not
    "1 + m' - k", which wrapped to three lines), separations without e-notation, and a key for its dashes."""
    ranges = [{"m": 300, "k": 2, "tried": 3, "built": 3, "layers": (293, 297), "bound": (299, 299), "straighten": (0, 0),
               "separation": (0.0123, 0.031), "relocated": None, "float32_errors": (10541, 10541), "margin": (1.0, 2.0)},
              {"m": 300, "k": 3, "tried": 2, "built": 2, "layers": (296, 296), "bound": (298, 298), "straighten": (0, 0),
               "separation": (1.2e-5, 2.3e-4), "relocated": (3, 3), "float32_errors": (0, 1), "margin": (1.0, 2.0)},
              {"m": 300, "k": 5, "tried": 2, "built": 0, "layers": None, "bound": None, "straighten": None,
               "separation": None, "relocated": None, "float32_errors": None, "margin": None}]
    table = survey_html(ranges)
    assert " to " not in table and "e-0" not in table and "font-size" not in table
    assert "<td><span class='lnbook-nobreak'>293\u2013297</span> (299)</td>" in table  # the bound beside the depth
    # one format for every separation, whether the ends share a power of ten or not (issue 33 item 3: "(1–3)×10⁻²"
    # beside "10⁻⁵–2×10⁻⁴" mixed two), the lowest and the highest in two cells (screenshot read 48, item 12)
    assert "<td class='lnbook-short'>10\u207b\u00b2</td><td class='lnbook-short'>3\u00d710\u207b\u00b2</td>" in table
    assert "<td class='lnbook-short'>10\u207b\u2075</td><td class='lnbook-short'>2\u00d710\u207b\u2074</td>" in table
    assert ")\u00d710" not in table and "10\u207b\u2075\u2013" not in table
    assert ">10\u202f541</td>" in table and "<td>296 (298)</td>" in table  # 10 541 grouped as the text's 10 000
    assert "<th>1\u00a0+\u00a0\U0001d45a\u2032\u00a0\u2212\u00a0\U0001d458" not in table  # inside the depth's header
    assert "(1\u00a0+\u00a0\U0001d45a\u2032\u00a0\u2212\u00a0\U0001d458)" in table and "m' - k" not in table
    assert table.count("<td class='lnbook-short'>\u2014</td>") == 7  # the row that was not built
    # shots35 item 5: eight columns in one table broke "straight-ening" and "compan-ions"; two tables of five columns,
    # no soft hyphen, the key under the second, with a typographic apostrophe
    first, second = table.split("</table>")[:2]
    assert first.count("<th>") == 5 and second.count("<th>") == 6 and "\u00ad" not in table
    assert "straightening blocks" in first and "companions" in second and "<caption" not in first
    assert second.startswith("<table class='table lnbook-table'><caption style='caption-side: bottom'>")
    assert "\u2014 where no net of the row was built" in table and "in brackets the theorem\u2019s count" in table
    assert "theorem's" not in table


def test_survey_tables_are_the_two_tables_of_the_html_with_one_format_per_column():
    """The appendix glues the two tables one by one (each a numbered table there, issue 33 item 3); the lab's HTML is
    the same two tables with the key under the second."""
    import re

    ranges = [{"m": m, "k": 2, "tried": 2, "built": 2, "layers": (m - 3, m - 1), "bound": (m - 1, m - 1),
               "straighten": (0, 0), "separation": separation, "relocated": (0, 2), "float32_errors": (0, 0),
               "margin": (1.0, 2.0)} for m, separation in ((10, (0.02, 0.07)), (20, (1.2e-5, 2.3e-4)), (50, (3e-3, 3e-3)))]
    depth, margins = survey_tables(ranges)
    html = survey_html(ranges)
    assert depth._repr_html_() in html and margins._repr_html_().split("<thead>")[1] in html
    lowest, highest = (margins.column(header) for header in SEPARATION_HEADERS)
    assert lowest == ["2\u00d710\u207b\u00b2", "10\u207b\u2075", "3\u00d710\u207b\u00b3"]
    assert highest == ["7\u00d710\u207b\u00b2", "2\u00d710\u207b\u2074", "3\u00d710\u207b\u00b3"]
    # one power of ten per cell: no en dash between two of them, which reads as a minus (screenshot read 48, item 12)
    power = "(?:[1-9]\u00d7)?10\u207b?[\u2070\u00b9\u00b2\u00b3\u2074-\u2079]+"
    assert all(re.fullmatch(power, cell) for cell in lowest + highest)


def test_draw_circle_layer_draws_samples_pole_and_ray():
    fig, ax = plt.subplots(figsize=(1.7, 1.7))  # one panel of fig-ch03-layers (four to the column)
    draw_circle_layer(ax, np.array([0.1, 0.2, -0.3]), np.array([0, 1, 0]), ["r", "b"], pole=[1.2, 0.1], moved=0.1,
                      text="after LN 1\n3 points")
    assert len(ax.collections) == 3  # two labels and the pole
    assert len(ax.lines) == 2  # the circle and the ray
    from lnbook.util.plotting import readability_problems, text_overlap_problems

    assert readability_problems(fig) == []  # its corner text at 9 pt (Fig. of ch03-layers; it was 7 pt)
    assert text_overlap_problems(fig) == []  # the panel's text clear of the circle (issue 33: it sat on the arc)
    assert ax.get_title() == "after LN 1\n3 points"
    # the pole and every sample inside the view with room for a marker, and the whole frame drawn, so the ray ends at a
    # visible edge (issue 33: points and rays seemed to run past the panel's right edge)
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    for x, y in [(1.2, 0.1)] + [(np.cos(a), np.sin(a)) for a in (0.1, 0.2, -0.3)]:
        assert x0 + 0.2 <= x <= x1 - 0.2 and y0 + 0.2 <= y <= y1 - 0.2, ((x, y), ax.get_xlim(), ax.get_ylim())
    assert all(ax.spines[side].get_visible() for side in ("left", "right", "top", "bottom"))
    plt.close(fig)


def test_exact_labelling_sweep_certifies_every_labelling():
    assert exact_labelling_sweep(4, labels=3) == {"m": 4, "labellings": 81, "exact": 81}
    assert exact_labelling_sweep(3, labels=2, progress=list)["exact"] == 8
    with pytest.raises(ValueError, match="m must be an integer >= 2"):
        exact_labelling_sweep(1)


def test_exact_random_table_rows():
    rows = exact_random_table([8], label_counts=(2, 3))
    assert [(r["m"], r["k"]) for r in rows] == [(8, 2), (8, 3)]
    assert all(r["ok"] and r["depth"] == r["bound"] and r["margin"] > 0 and r["float64_errors"] == 0 for r in rows)


def test_survey_seeds_and_summary():
    seeds = survey_seeds([10, 100, 1000], 5, 2, 3)
    assert seeds[(10, 2)] == 5 and seeds[(1000, 2)] == 2 and seeds[(100, 3)] == 3 and seeds[(10, 5)] == 0
    rows = [{"m": m, "k": 2, "seed": s, "ok": True, "seconds": 0.01 * m**2 * (1 + s), "margin": 0.1 + s,
             "float32_errors": int(m >= 1000)} for m in (10, 100, 1000) for s in range(2)]
    ranges = [{"m": m, "k": 2, "margin": (0.1, 1.1), "float32_errors": (0, int(m >= 1000))} for m in (10, 100, 1000)]
    out = survey_summary(rows, ranges)
    assert out["largest_m"] == 1000 and out["first_float32_m"] == 1000 and out["margin_binary"] == (0.1, 1.1)
    assert out["largest_built_m"] == 1000 and out["refused"] == 0
    assert out["cost_largest"] == pytest.approx(0.015 * 1000**2)
    assert out["cost_exponent"] == pytest.approx(2.0)  # the times grow like m^2 by construction
    # a refused problem at m = 1000: every problem is built up to 100 only; the cost is quoted at 1000, from the
    # net that was built there, and the exponent still fits 100 and 1000
    refused = rows[:-1] + [{"m": 1000, "k": 2, "seed": 1, "ok": False, "seconds": 1.0}]
    out = survey_summary(refused, ranges)
    assert out["largest_built_m"] == 100 and out["refused"] == 1 and out["cost_m"] == 1000
    assert out["cost_largest"] == pytest.approx(0.01 * 1000**2) and out["cost_exponent"] is not None
    # every problem refused from 100 on: one timed size, no exponent
    only_small = [r for r in rows if r["m"] < 100] + [{"m": 100, "k": 2, "seed": 0, "ok": False, "seconds": 1.0}]
    out = survey_summary(only_small, ranges)
    assert out["cost_m"] == 10 and out["cost_exponent"] is None


def test_peel_curves_and_straightening_demo():
    curves = peel_curves(200, 60)
    assert set(curves) == {"w = 0.25", "w = 0.1", "w(N) = min(0.25, 3/√N)"}
    assert all(r["measured"] > 0 and r["predicted"] > 0 for rows in curves.values() for r in rows)
    demo = straightening_demo(300, 0.25, 20)
    assert len(demo["straightened"]) == len(demo["peeled"]) and bool((np.diff(demo["straightened"]) > 0).all())
    assert max(abs(r - 1) for r in demo["after"]) < max(abs(r - 1) for r in demo["before"])  # it evens the gaps out


def test_builder_constants_and_landing_margin_limit():
    constants = builder_constants()
    assert constants["safe"] == landing.SAFE and constants["straighten-from"] == schwarzian.STRAIGHTEN_FROM
    n = landing_margin_limit()
    assert landing.landing_margin_estimate(n, 3 / math.sqrt(n)) < landing.SAFE
    assert landing.landing_margin_estimate(n - 1, 3 / math.sqrt(n - 1)) >= landing.SAFE


def test_builder_constant_rows_name_and_explain_every_constant():
    """The lab's table of the float64 builder's constants (issue 33, the reader's page: it showed the glue keys,
    "arc-cap", "book-sink", with no word on what they are): each row a name in words, the constant's value and a line
    saying what it sets; one row per constant, in the order of builder_constants, and no bare key."""
    from lnbook.capacity.lab import BUILDER_CONSTANT_MEANINGS, builder_constant_rows

    constants = builder_constants()
    rows = builder_constant_rows()
    assert [r[1] for r in rows] == list(constants.values())
    assert [r[0] for r in rows] == [BUILDER_CONSTANT_MEANINGS[k][0] for k in constants]
    for name, _, meaning in rows:
        assert name not in constants and "-" not in name and name.upper() != name, name  # words, not keys or SAFE
        assert len(meaning.split()) >= 5, meaning
    assert rows[[r[0] for r in rows].index("safety factor")][1] == landing.SAFE


def test_the_constants_table_writes_whole_numbers_without_a_decimal_point():
    """Screenshot read 46: "arc scale 3.0", "comfort factor 10.0" beside "2000"."""
    from lnbook.capacity.lab import builder_constants_table, constant_text

    assert [constant_text(v) for v in (3.0, 10.0, 2000, 1e-11, 0.25)] == ["3", "10", "2000", "10⁻¹¹", "0.25"]
    values = builder_constants_table().column("value")
    assert len(values) == len(builder_constants()) and not any(v.endswith(".0") or "e-" in v for v in values), values
    with pytest.raises(TypeError):
        constant_text("3")


def test_builder_constant_rows_refuse_a_constant_without_a_meaning(monkeypatch):
    from lnbook.capacity import lab

    monkeypatch.setitem(lab.BUILDER_CONSTANT_MEANINGS, "retired", ("a retired constant", "sets nothing any more"))
    with pytest.raises(ValueError, match=r"meanings without a constant: \['retired'\]"):
        lab.builder_constant_rows()
    monkeypatch.delitem(lab.BUILDER_CONSTANT_MEANINGS, "safe")
    with pytest.raises(ValueError, match=r"builder constants without a meaning: \['safe'\]"):
        lab.builder_constant_rows()


@pytest.mark.parametrize("pole, p_angle", [([1.9, 0.6], 0.75), ([-0.3, -1.4], -1.6), ([3.0, 0.0], 0.2)])
def test_central_projection_figure_lands_p_on_q_through_a_real_block(pole, p_angle):
    """The picture of chapter 3's central projection (Fig. 3.1, shots46 item 1) shows what a real block does: p and q,
    on the ray from the pole, go to one point under the float64 Linear -> LayerNorm that block_weights builds for that
    pole; T and T' are the tangent points, the near arc is the one the pole sees."""
    import torch

    from lnbook.capacity.circle import SQRT3, block_weights, linear_module, ln_module, to_plane
    from lnbook.capacity.lab import central_projection_scene
    from lnbook.core.geometry import plane_basis

    scene = central_projection_scene(pole, p_angle)
    o, p, q = scene["pole"], scene["p"], scene["q"]
    for T in scene["tangents"]:
        assert abs(T @ T - 1) < 1e-12 and abs(T @ o - 1) < 1e-12  # on the circle and on the polar line <v, o> = 1
    assert abs(q @ q - 1) < 1e-12 and p @ o > 1 > q @ o  # p on the near arc, q on the far arc
    assert np.linalg.norm(q - p) > 0.1
    cross = (p - o)[0] * (q - o)[1] - (p - o)[1] * (q - o)[0]
    assert abs(cross) < 1e-12 and (p - o) @ (q - o) > 0  # o on the line pq, outside the segment [p, q] (Lemma 3.2 a)
    for start, stop in (scene["near_arc"], scene["far_arc"]):
        middle = (start + stop) / 2
        assert (np.array([np.cos(middle), np.sin(middle)]) @ o > 1) == ((start, stop) == scene["near_arc"])
    A = np.random.default_rng(0).standard_normal((2, 2)) + 2 * np.eye(2)
    weight, bias = block_weights(A, o)
    block = torch.nn.Sequential(linear_module(weight, bias), ln_module())
    E = plane_basis().cpu().numpy()
    out = block(torch.from_numpy(SQRT3 * np.stack([E @ p, E @ q]))).detach().numpy()
    assert np.abs(out[0] - out[1]).max() < 1e-12  # one image
    image = A @ scene["image"]
    assert np.abs(to_plane(out[0]) / SQRT3 - image / np.linalg.norm(image)).max() < 1e-12  # the direction of p - o, then A


def test_draw_central_projection_names_every_point_clear_of_the_lines():
    from lnbook.capacity.lab import central_projection_scene, draw_central_projection
    from lnbook.util.plotting import PALETTE, readability_problems, text_overlap_problems

    scene = central_projection_scene([1.9, 0.6], 0.75)  # the chapter's figure
    fig, ax = plt.subplots(figsize=(4.6, 3.4))
    draw_central_projection(ax, scene, PALETTE)
    assert sorted(t.get_text() for t in ax.texts) == ["$T$", "$T'$", "$o$", "$p$", "$q$"]
    assert len(ax.lines) == 6  # two arcs, two tangents, the polar line, the ray
    assert [line.get_label() for line in ax.lines if not line.get_label().startswith("_")] == [
        "far arc", "near arc (visible from $o$)", "ray from $o$ through $p$ and $q$"]
    assert readability_problems(fig) == [] and text_overlap_problems(fig) == []
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    assert x0 < -1 and x1 > scene["pole"][0] and y0 < -1 and y1 > 1  # the circle and the pole in the view
    plt.close(fig)


def test_central_projection_scene_refuses_a_pole_inside_and_p_on_the_far_arc():
    from lnbook.capacity.lab import central_projection_scene

    with pytest.raises(ValueError, match="outside the unit circle"):
        central_projection_scene([0.5, 0.2], 0.0)
    with pytest.raises(ValueError, match="near arc"):
        central_projection_scene([1.9, 0.6], 3.0)


def test_the_sweeps_take_progress_true_for_the_books_bar(monkeypatch):
    """A lab passes progress=True, not a lambda around progress_bar (screenshot read 46, item 7)."""
    from lnbook.capacity.lab import exact_labelling_sweep

    monkeypatch.setenv("LNBOOK_PROGRESS", "0")
    assert exact_labelling_sweep(3, labels=2, progress=True) == exact_labelling_sweep(3, labels=2)
    seen = []
    exact_labelling_sweep(3, labels=2, progress=lambda items: seen.append(len(items)) or items)
    assert seen == [8]
    with pytest.raises(TypeError, match="progress"):
        exact_labelling_sweep(3, labels=2, progress="yes")


def test_the_sweeps_draw_the_books_bar_by_default_and_none_under_the_builds_setting(monkeypatch, capsys):
    """A lab cell passes no progress argument (screenshot read 48, item 5): the default draws the book's bar for a
    person running the notebook and nothing under LNBOOK_PROGRESS=0, as the book's runner executes it."""
    from lnbook.capacity.lab import exact_labelling_sweep, float64_survey

    monkeypatch.delenv("LNBOOK_PROGRESS", raising=False)
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    exact_labelling_sweep(3, labels=2)
    float64_survey([10], (2,), 0)
    err = capsys.readouterr().err
    assert "labellings" in err and "float64 nets" in err
    monkeypatch.setenv("LNBOOK_PROGRESS", "0")
    exact_labelling_sweep(3, labels=2)
    float64_survey([10], (2,), 0)
    assert capsys.readouterr().err == ""
    exact_labelling_sweep(3, labels=2, progress=False)
