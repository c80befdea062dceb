"""From LayerNorm to whitening: spectral transformations, IterNorm and INTL's trace loss.

The code of chapter 8, ``book/ch08_from_layernorm_to_whitening.md``, and of its lab,
``notebooks/ch08_whitening_lab.ipynb``; checked by ``tests/whitening/``.

* :mod:`~lnbook.whitening.batch_axes` — the two axes of a batch (which matrix is whitened) and the input check of a
  batch, on top of :mod:`lnbook.util.validation`;
* :mod:`~lnbook.whitening.spectral` — centring, covariances over either axis, spectral transformations,
  ZCA and Cholesky whitening, standardisation, LayerNorm through the sample Gram;
* :mod:`~lnbook.whitening.iternorm` — IterNorm (Newton's iteration) and the polynomial :math:`\\varphi_T`
  it applies to the spectrum, its stability;
* :mod:`~lnbook.whitening.trace_loss` — INTL's trace loss and objective, and their spectral forms;
* :mod:`~lnbook.whitening.rank` — effective rank and the share of the top eigenvalues;
* :mod:`~lnbook.whitening.ssl` — self-supervised training on scikit-learn's digits (ci scale) and probes, with the
  data of :mod:`lnbook.ml.data` and the loop of :func:`lnbook.ml.training.train_views`;
* :mod:`~lnbook.whitening.cifar` — the official CIFAR setting (paper scale), on data the reader provides;
* :mod:`~lnbook.whitening.lab` — figures and tables of the lab.
"""

from lnbook.whitening.iternorm import (
    INSTABILITY_RATIO, best_iterations_over_bases, coupled_inverse_sqrt_errors, coupled_newton_schulz_matrix,
    inverse_sqrt_errors, isotropic_output_eigenvalue, iter_norm, iternorm_matrix,
    iternorm_spectrum, iterations_to_whiten, linearised_error_factor, matrix_with_condition_number, newton_map,
    null_space_error_factor, singular_rounding_estimate, output_covariance_tolerance, small_eigenvalue_rounding_estimate,
    MEASURED_ABOVE_T, output_covariance_error, iter_norm_output_error,
    batch_with_one_dominant_direction,
)
from lnbook.whitening.rank import effective_rank, top_eigenvalue_share
from lnbook.whitening.spectral import (
    centre, cholesky_rotation, cholesky_whiten, covariance, layer_norm_via_gram, spectral_transform,
    standardise, zca_matrix, zca_whiten,
)
from lnbook.whitening.trace_loss import (
    alignment_loss, intl_beta, intl_loss, small_eigenvalue_weight, spectral_loss, spectral_loss_gradient,
    trace_loss, trace_loss_floor, trace_loss_gradient,
)

__all__ = [
    "zca_whiten", "iter_norm", "iternorm_spectrum", "trace_loss", "intl_loss", "effective_rank",
    "centre", "covariance", "spectral_transform", "zca_matrix", "cholesky_whiten", "cholesky_rotation",
    "standardise", "layer_norm_via_gram",
    "newton_map", "iternorm_matrix", "INSTABILITY_RATIO", "linearised_error_factor",
    "isotropic_output_eigenvalue", "iterations_to_whiten", "matrix_with_condition_number", "inverse_sqrt_errors", "best_iterations_over_bases",
    "coupled_newton_schulz_matrix", "coupled_inverse_sqrt_errors",
    "alignment_loss", "intl_beta", "spectral_loss", "spectral_loss_gradient", "small_eigenvalue_weight",
    "trace_loss_floor", "trace_loss_gradient", "top_eigenvalue_share",
    "null_space_error_factor", "singular_rounding_estimate", "output_covariance_tolerance",
    "small_eigenvalue_rounding_estimate", "MEASURED_ABOVE_T", "output_covariance_error", "iter_norm_output_error",
    "batch_with_one_dominant_direction",
]
