r"""LayerNorm as an activation: LN-MLPs, the width-3 sector limit, phase transitions, PLN and one-variable approximation.

Chapter: chapter 6 (book/ch06_layernorm_as_activation.md).
Labs: notebooks/ch06_width3_lab.ipynb, ch06_ln_mlp_lab.ipynb, ch06_sphere_digits_lab.ipynb, ch06_parallel_ln_lab.ipynb.
Tests: tests/ln_activation/.

Modules:

* :mod:`lnbook.ln_activation.ensemble` — many seeds of one small classifier trained at once (equal to separate runs);
* :mod:`lnbook.ln_activation.lab` — LayerNorm as the only activation of a small MLP (chapter 6, after Winsor's "Re-Examining LayerNorm");
* :mod:`lnbook.ln_activation.paper_runs` — Chapter 6's paper-scale runs recorded on a CPU: run them, store them with their provenance, read what they say;
* :mod:`lnbook.ln_activation.phases` — Phase transitions in a loss curve: sudden drops that follow a plateau;
* :mod:`lnbook.ln_activation.shallow_fits` — Shallow one-variable nets and how well they fit: targets, measured errors, training;
* :mod:`lnbook.ln_activation.shallow_ln` — The shallow LN net ``Linear(1, d) -> LayerNorm(d) -> Linear(d, 1)`` and its limit;
* :mod:`lnbook.ln_activation.staircase` — Explicit one-variable approximations with a proved error: the PLN staircase and its ReLU baseline;
* :mod:`lnbook.ln_activation.width3` — The width-3 limit of LN-MLPs (chapter 6): a two-layer width-3 LN-Net with :math:`\varepsilon = 0` sees a;
"""

from __future__ import annotations

from lnbook.ln_activation.ensemble import seed_sweep_batched
from lnbook.ln_activation.lab import (
    DropSnapshot,
    SeedSweep,
    construction_errors,
    digits_comparison,
    drop_snapshot,
    drop_snapshots,
    next_folding_threshold,
    steepest_step_snapshot,
    travel_ratios,
    plot_decision_regions,
    plot_path_small_multiples,
    decision_grid,
    interpolate_path,
    layer_path,
    ln_mlp,
    norm_outputs,
    point_on_path,
    seed_sweep,
    plot_sweep_curves,
)
from lnbook.ln_activation.phases import (
    Transition,
    loss_envelope,
    phase_transitions,
)
from lnbook.ln_activation.shallow_fits import (
    TARGET_LIPSCHITZ,
    FitError,
    SeedComparison,
    compare_over_seeds,
    describe_over_eps,
    fit_error,
    lipschitz_target,
    shallow_net,
    smooth_target,
    sup_error,
    train_shallow_net,
    train_shallow_net_specs,
    train_shallow_net_widths,
    train_shallow_nets,
    trained_errors,
)
from lnbook.ln_activation.shallow_ln import (
    ShallowLNForm,
    alternation_bound,
    derivative_sign_changes,
    pln_group_forms,
    pln_group_networks,
    shallow_ln_form,
    shallow_ln_network,
)
from lnbook.ln_activation.staircase import (
    pln_pair_widths,
    pln_sigmoid_network,
    pln_step_network,
    relu_error_bound,
    relu_interpolant_network,
    staircase_neurons,
    step_error_bound,
    step_error_bound_modulus,
    step_slope_for,
)
from lnbook.ln_activation.width3 import (
    best_sector_rule_accuracy,
    search_sector_apex,
    sign_changes_on_circle,
    width3_apex,
    with_eps,
)

__all__ = [
    "smooth_target",
    "lipschitz_target",
    "TARGET_LIPSCHITZ",
    "ShallowLNForm",
    "shallow_ln_form",
    "shallow_ln_network",
    "alternation_bound",
    "pln_step_network",
    "step_error_bound",
    "step_error_bound_modulus",
    "step_slope_for",
    "relu_interpolant_network",
    "relu_error_bound",
    "sup_error",
    "shallow_net",
    "FitError",
    "SeedComparison",
    "compare_over_seeds",
    "describe_over_eps",
    "fit_error",
    "trained_errors",
    "pln_group_networks",
    "pln_group_forms",
    "derivative_sign_changes",
    "pln_sigmoid_network",
    "staircase_neurons",
    "ln_mlp",
    "SeedSweep",
    "seed_sweep",
    "plot_sweep_curves",
    "norm_outputs",
    "layer_path",
    "interpolate_path",
    "point_on_path",
    "decision_grid",
    "Transition",
    "loss_envelope",
    "phase_transitions",
    "width3_apex",
    "sign_changes_on_circle",
    "best_sector_rule_accuracy",
    "search_sector_apex",
    "with_eps",
    "seed_sweep_batched",
    "pln_pair_widths",
    "train_shallow_net",
    "train_shallow_net_specs",
    "train_shallow_net_widths",
    "train_shallow_nets",
    "DropSnapshot",
    "drop_snapshot",
    "drop_snapshots",
    "steepest_step_snapshot",
    "next_folding_threshold",
    "travel_ratios",
    "construction_errors",
    "digits_comparison",
    "plot_decision_regions",
    "plot_path_small_multiples",
]
