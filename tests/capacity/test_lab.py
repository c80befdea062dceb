"""Checks of lnbook.capacity.lab: the chapter-3 lab's circle panels and float64 survey table.
"""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from lnbook.capacity.lab import (  # noqa: E402
    draw_circle_layer,
    float64_survey,
    survey_html,
    survey_ranges,
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
    assert table.startswith("<table") and table.count("<tr>") == 4 and "3 of 3" in table


def test_draw_circle_layer_draws_samples_pole_and_ray():
    fig, ax = plt.subplots()
    draw_circle_layer(ax, np.array([0.1, 0.2, -0.3]), np.array([0, 1, 0]), ["r", "b"], pole=[1.2, 0.1], moved=0.1,
                      text="after LN 1")
    assert len(ax.collections) == 3  # two labels and the pole
    assert len(ax.lines) == 2  # the circle and the ray
    plt.close(fig)
