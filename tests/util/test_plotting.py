"""lnbook.util.plotting: the embedded JavaScript animation (chapter 6's layer-to-layer movie).
"""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from lnbook.util.plotting import point_cloud_animation

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
