"""Figures of one ``Linear(2, 3) -> LN`` layer acting on planar data (the lab of chapter 2).

The layer :func:`lnbook.separability.ln_nets.plane_ln_layer` rotates the input, shifts it along the first axis of the
plane orthogonal to 1 and normalises; :func:`draw_plane_layer` shows the hidden points before LayerNorm,
the points after it on the circle of radius sqrt(3), and the best linear read-out direction.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from lnbook.separability.ln_nets import plane_ln_layer, to_plane
from lnbook.core.scatter_ratio import lssr, lssr_direction, ssr
from lnbook.util.plotting import MIN_FONT_PT, PALETTE

__all__ = ["draw_plane_layer"]


STATS = ("full", "short", None)


def draw_plane_layer(
    axes, X: torch.Tensor, y: torch.Tensor, theta_deg: float, shift: float, bound: float | None = None,
    stats: str | None = "full",
):
    """Draw ``plane_ln_layer(theta, shift)`` on ``(X, y)`` into two axes; return ``(SSR, LSSR)`` after LayerNorm.

    ``axes[0]``: the hidden points in the plane orthogonal to 1 (the cross marks the origin that LayerNorm
    projects from); ``axes[1]``: after LayerNorm, with the best linear read-out direction dashed and, above it,
    ``stats``: ``"full"`` the three numbers (``bound``, the LSSR of the input, computed when not given; SSR and LSSR
    after LN), ``"short"`` only SSR and LSSR after LN at 10 pt (for four panels in the column's width, where three
    lines at 9 pt were too small to read: the input's LSSR, the same for every panel, belongs in the text), ``None``
    no numbers.
    """
    if stats not in STATS:
        raise ValueError(f"stats must be one of {STATS}, got {stats!r}")
    bound = lssr(X, y) if bound is None else bound
    layer = plane_ln_layer(math.radians(theta_deg), shift)
    with torch.no_grad():
        hidden = to_plane(layer[0](X))
        Z = to_plane(layer(X))
    s_after, l_after = ssr(Z, y), lssr(Z, y)
    cols = np.where(y.cpu().numpy() == 0, PALETTE[0], PALETTE[1])
    ax = axes[0]
    ax.scatter(hidden[:, 0], hidden[:, 1], c=cols, s=8)
    ax.scatter([0], [0], marker="+", color="k", s=80)
    ax.set_aspect("equal")
    ax.set_xlim(-1.7, 5.9)
    ax.set_ylim(-2.1, 2.1)
    ax.set_xlabel("hidden, coord. 1")  # short: four such panels share the column's width
    ax.set_ylabel("coord. 2")
    ax = axes[1]
    t = np.linspace(0, 2 * np.pi, 200)
    ax.plot(math.sqrt(3) * np.cos(t), math.sqrt(3) * np.sin(t), color="0.85", lw=1)
    ax.scatter(Z[:, 0], Z[:, 1], c=cols, s=8)
    w = lssr_direction(Z, y)
    ax.plot([-1.9 * w[0], 1.9 * w[0]], [-1.9 * w[1], 1.9 * w[1]], color="0.4", lw=1, ls="--")
    ax.set_aspect("equal")
    ax.set_xlim(-2.1, 2.1)
    ax.set_ylim(-2.1, 2.1)
    ax.set_xlabel("after LN, coord. 1")
    # the numbers above the panel, clear of the points (four such panels share the column's width)
    if stats == "full":
        ax.set_title(f"LSSR(input) = {bound:.3f}\nSSR after LN = {s_after:.3f}\nLSSR after LN = {l_after:.3f}",
                     fontsize=MIN_FONT_PT, loc="left")
    elif stats == "short":
        ax.set_title(f"SSR {s_after:.3f}\nLSSR {l_after:.3f}", fontsize=10, loc="left")
    return s_after, l_after
