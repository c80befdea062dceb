"""Checks of lnbook.capacity.build_float64: the width-3 LN-Net that classifies any labelling (chapter 3).

Every net is checked by running the real torch module on the samples in float64.
"""

from __future__ import annotations

from lnbook.capacity.build_float64 import (
    pole_for_move,
)


def test_landing_margin_law_matches_the_geometry():
    """landing_margin_estimate(N, w) = w^2 / (4 kappa eps N^3) against the margin computed from the actual
    pole of an end move on N evenly spaced clusters (tangent point half way into the gap, sink in the middle):
    within 4% for N >= 300. The law w^2 / (2 eps N^3) (a lever of g^2/Delta instead of g^2/(4 Delta)) is
    four times too optimistic and fails."""
    from lnbook.capacity.landing import MACHINE_EPS, landing_margin_estimate

    for n, w in ((300, 0.25), (1000, 0.25), (1000, 0.03), (10_000, 0.25)):
        gap = w / (n - 1)
        _, s = pole_for_move(-w / 2, 0.0, -w / 2 + gap / 2)
        margin = 0.5 * gap / (2.0 * MACHINE_EPS / s)  # room / (2 x landing error), kappa = 2
        assert abs(landing_margin_estimate(n, w) / margin - 1) < 0.04, (n, w)
        assert abs(w**2 / (2 * MACHINE_EPS * n**3) / margin - 1) > 1
