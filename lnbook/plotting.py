"""The book's plotting style, set once. Captions live in the book, so figures carry no titles."""

from __future__ import annotations

import matplotlib as mpl

PALETTE = ("#1f5fa8", "#d1495b", "#2a9d8f", "#edae49", "#6c4f9c", "#5c5c5c")


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
            "legend.frameon": False,
            "image.cmap": "viridis",
        }
    )
