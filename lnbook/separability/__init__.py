"""LN is nonlinear: SSR and LSSR, linear nets and LN-Nets, the XOR counterexample, the chapter-2 figures.

Chapter: chapter 2 (book/ch02_layernorm_is_nonlinear.md).
Labs: notebooks/ch02_breaking_the_linear_bound.ipynb.
Tests: tests/separability/.

SSR and LSSR themselves live in :mod:`lnbook.core.scatter_ratio` (chapter 5 measures LN-G with them too); they
are re-exported here, so chapter 2 reads ``from lnbook.separability import ssr, lssr`` unchanged.

Modules:

* :mod:`lnbook.separability.figures` — Figures of one ``Linear(2, 3) -> LN`` layer acting on planar data (the lab of chapter 2);
* :mod:`lnbook.separability.ln_nets` — Small LN-Nets and linear nets, and the experiment that separates them: minimising SSR;
* :mod:`lnbook.separability.tables` — The tables of chapter 2's lab: SSR and LSSR through the stages of the XOR network, and the network's output;
"""

from __future__ import annotations

from lnbook.separability.figures import (
    draw_plane_layer,
)
from lnbook.separability.ln_nets import (
    linear_net,
    ln_net,
    noisy_xor,
    plane_layer_separability,
    plane_ln_layer,
    random_labelled_dataset,
    ssr_curves,
    to_plane,
    train_ssr,
    xor_dataset,
    xor_ln_net,
)
from lnbook.core.scatter_ratio import (
    default_rtol,
    layer_norm_rtol,
    lssr,
    lssr_direction,
    scatter_matrices,
    ssr,
    ssr_from_onehot,
    ssr_loss,
    symbolic_ssr,
)

__all__ = [
    "draw_plane_layer",
    "linear_net",
    "ln_net",
    "random_labelled_dataset",
    "xor_dataset",
    "xor_ln_net",
    "noisy_xor",
    "to_plane",
    "plane_ln_layer",
    "plane_layer_separability",
    "train_ssr",
    "ssr_curves",
    "symbolic_ssr",
    "scatter_matrices",
    "default_rtol",
    "layer_norm_rtol",
    "ssr",
    "lssr",
    "lssr_direction",
    "ssr_loss",
    "ssr_from_onehot",
]
