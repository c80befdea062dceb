"""Isometry at initialisation: the isometry of a Gram matrix, Hermite expansions and beta_0, MLPs at initialisation.

Chapter: chapter 4 (book/ch04_isometry_at_initialisation.md).
Labs: notebooks/ch04_isometry_lab.ipynb.
Tests: tests/isometry/.

Modules:

* :mod:`lnbook.isometry.gram` — Isometry of a Gram matrix and the isometry gap (Joudaki, Daneshmand and Bach, 2023);
* :mod:`lnbook.isometry.hermite` — Hermite expansions of activations under the standard Gaussian, and the nonlinearity strength;
* :mod:`lnbook.isometry.lab` — The experiments of chapter 4: the official configurations, gap curves with their predictions, training;
* :mod:`lnbook.isometry.mlp_at_init` — Deep MLPs at initialisation: how the Gram matrix of a batch evolves with depth;
"""

from __future__ import annotations

from lnbook.isometry.gram import (
    centered_isometry,
    centring_defect,
    check_gram,
    gram_matrix,
    isometry,
    isometry_gap,
    log_isometry,
)
from lnbook.isometry.hermite import (
    ACTIVATIONS,
    EXACT_ACTIVATIONS,
    EXACT_BETA0,
    correlation_map,
    correlation_map_from_coefficients,
    correlation_maps,
    evaluate_activation,
    exact_hermite_coefficients,
    exact_nonlinearity_strength,
    gaussian_expectation,
    gaussian_pair_expectation,
    get_activation,
    hermite_coefficients,
    hermite_polynomials,
    mean_and_variance,
    nonlinearity_strength,
)
from lnbook.isometry.lab import (
    OFFICIAL,
    GapCurve,
    batch_inputs,
    correlation_iterates,
    finite_gaps,
    gap_curve,
    plot_gap_curve,
    train_activations,
)
from lnbook.isometry.mlp_at_init import (
    NORMALIZATIONS,
    ORDERS,
    InitRun,
    centred_measure,
    correlation_potential,
    correlations,
    finite_width_gap_floor,
    leaky_relu,
    make_inputs,
    make_teacher_task,
    mean_field_grams,
    normalize,
    resolve_normalization,
    simulate,
    train_deep_mlp,
)

__all__ = [
    "isometry",
    "isometry_gap",
    "log_isometry",
    "gram_matrix",
    "check_gram",
    "centered_isometry",
    "centring_defect",
    "centred_measure",
    "ACTIVATIONS",
    "EXACT_ACTIVATIONS",
    "EXACT_BETA0",
    "get_activation",
    "evaluate_activation",
    "hermite_polynomials",
    "gaussian_expectation",
    "hermite_coefficients",
    "exact_hermite_coefficients",
    "nonlinearity_strength",
    "exact_nonlinearity_strength",
    "mean_and_variance",
    "correlation_map",
    "correlation_maps",
    "correlation_map_from_coefficients",
    "gaussian_pair_expectation",
    "OFFICIAL",
    "batch_inputs",
    "GapCurve",
    "gap_curve",
    "finite_gaps",
    "plot_gap_curve",
    "train_activations",
    "correlation_iterates",
    "NORMALIZATIONS",
    "ORDERS",
    "InitRun",
    "resolve_normalization",
    "make_inputs",
    "normalize",
    "simulate",
    "mean_field_grams",
    "correlations",
    "finite_width_gap_floor",
    "correlation_potential",
    "leaky_relu",
    "make_teacher_task",
    "train_deep_mlp",
]
