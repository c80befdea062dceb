"""Capacity of LN-Nets: the LN circle of width 3, the constructions (float64 and exact), their distortion budget, the VC lower bound.

Chapter: chapter 3 (book/ch03_representation_capacity.md) and its appendix.
Labs: notebooks/ch03_pma_pba_lab.ipynb.
Tests: tests/capacity/.

Modules:

* :mod:`lnbook.capacity.build_exact` — The construction of chapter 3's theorem in exact arithmetic: the theorem checked by its own algorithm;
* :mod:`lnbook.capacity.build_float64` — Width-3 LN-Nets that classify any labelling, built in float64: the builder of chapter 3;
* :mod:`lnbook.capacity.certified_reals` — Exact constructible numbers with certified signs: the arithmetic of the exact construction (chapter 3);
* :mod:`lnbook.capacity.circle` — The LN circle of width 3 and the blocks that act on it (chapter 3);
* :mod:`lnbook.capacity.lab` — What the chapter-3 lab runs, draws and tabulates: the exact construction's checks, circle panels, a float64 survey;
* :mod:`lnbook.capacity.landing` — The float64 landing planner of the width-3 LN-Net builder (chapter 3 and its float64 appendix);
* :mod:`lnbook.capacity.nets` — Width-3 LN-Nets as the constructions of chapter 3 return them: the net, its record, its bounds, its check;
* :mod:`lnbook.capacity.schwarzian` — The distortion budget of width-3 LN-Nets: Schwarzian derivatives of the block maps (chapter 3);
* :mod:`lnbook.capacity.vc` — VC-dimension lower bound for width-3 LN-Nets, and shattering checks;
* :mod:`lnbook.capacity.rounding_bound` — A certificate that a float64 LN-Net classifies its samples under *every* admissible float64 forward;
"""

from __future__ import annotations

from lnbook.capacity.build_exact import (
    ARC_SLOPE,
    ExactBlock,
    ExactLNNet,
    build_exact_ln_net,
    exact_pole,
    to_float64_net,
    verify_exact_ln_net,
)
from lnbook.capacity.build_float64 import (
    build_ln_net,
)
from lnbook.capacity.certified_reals import (
    MAX_PREC,
    START_PREC,
    Real,
    Undecided,
    as_real,
    rational_between,
    simplest_between,
)
from lnbook.capacity.circle import (
    SQRT3,
    block_image,
    block_weights,
    circle_angles,
    identity_block,
    line_meet,
    linear_module,
    ln_module,
    pole_for_move,
    poles_for_move,
    sample_separation,
    second_hits,
    to_plane,
    unit,
)
from lnbook.capacity.lab import (
    draw_circle_layer,
    float64_survey,
    survey_html,
    survey_ranges,
    survey_tables,
)
from lnbook.capacity.landing import (
    LANDING_EPS,
    MACHINE_EPS,
    SAFE,
    Candidate,
    LandingPlanner,
    Snapshot,
    choose_sinks,
    is_clean,
    landing_margin_estimate,
)
from lnbook.capacity.nets import (
    ConstructionError,
    LNNet,
    MoveRecord,
    float64_layer_bound,
    layer_bound,
    verify_ln_net,
)
from lnbook.capacity.rounding_bound import (
    C_LN,
    U,
    certify_ln_net,
    ln_rounding,
    propagate_layer,
)
from lnbook.capacity.schwarzian import (
    arc_width_for,
    block_angle,
    block_schwarzian,
    direction_map_identity,
    end_ratios,
    linear_direction_identity,
    peel_distortion,
    peel_move,
    peeled_arc,
    predicted_block_schwarzian,
    predicted_end_ratio,
    schwarzian_budget,
    schwarzian_expr,
    straightening_allowance,
    straightening_pole,
    sturm_width_limit,
)
from lnbook.capacity.vc import (
    count_ln_layers,
    depth_d_net,
    linear_shatters,
    linear_vc_dimension,
    linearly_separable,
    ln_net_from_linear,
    ln_net_vc_lower_bound,
    pad_ln_net,
    shatter_check,
)

__all__ = [
    "ARC_SLOPE",
    "ExactBlock",
    "ExactLNNet",
    "build_exact_ln_net",
    "verify_exact_ln_net",
    "exact_pole",
    "to_float64_net",
    "build_ln_net",
    "Real",
    "as_real",
    "Undecided",
    "START_PREC",
    "MAX_PREC",
    "simplest_between",
    "rational_between",
    "SQRT3",
    "unit",
    "to_plane",
    "circle_angles",
    "block_weights",
    "linear_module",
    "ln_module",
    "identity_block",
    "poles_for_move",
    "pole_for_move",
    "second_hits",
    "line_meet",
    "block_image",
    "sample_separation",
    "draw_circle_layer",
    "float64_survey",
    "survey_ranges",
    "survey_html",
    "survey_tables",
    "MACHINE_EPS",
    "LANDING_EPS",
    "SAFE",
    "Snapshot",
    "Candidate",
    "choose_sinks",
    "is_clean",
    "LandingPlanner",
    "landing_margin_estimate",
    "ConstructionError",
    "layer_bound",
    "float64_layer_bound",
    "MoveRecord",
    "LNNet",
    "verify_ln_net",
    "schwarzian_expr",
    "direction_map_identity",
    "linear_direction_identity",
    "block_angle",
    "block_schwarzian",
    "predicted_block_schwarzian",
    "sturm_width_limit",
    "peel_distortion",
    "peel_move",
    "peeled_arc",
    "predicted_end_ratio",
    "schwarzian_budget",
    "arc_width_for",
    "end_ratios",
    "straightening_pole",
    "straightening_allowance",
    "linear_vc_dimension",
    "ln_net_vc_lower_bound",
    "pad_ln_net",
    "count_ln_layers",
    "ln_net_from_linear",
    "depth_d_net",
    "linearly_separable",
    "linear_shatters",
    "shatter_check",
    "U",
    "C_LN",
    "ln_rounding",
    "propagate_layer",
    "certify_ln_net",
]
