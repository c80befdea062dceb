"""The shared mathematics of LayerNorm: LN, RMSNorm, LN-G and PLN (functional and modules), the fused LN-G kernel, Winsor's geometric primitives, closed-form derivatives, LN as a sympy expression, the separability measures SSR and LSSR.

Chapter: chapter 1 (and every chapter that normalises; SSR and LSSR: chapters 2 and 5).
Labs: notebooks/ch01_geometry_lab.ipynb.
Tests: tests/core/.

Modules:

* :mod:`lnbook.core.derivatives` — Closed-form derivatives of LayerNorm (no affine);
* :mod:`lnbook.core.geometry` — Winsor's geometric primitives of LayerNorm: the core map, stretching and folding;
* :mod:`lnbook.core.group_norm_kernel` — A fused CPU kernel for LN-G (group LayerNorm): forward and backward in one pass each;
* :mod:`lnbook.core.norms` — Normalisation layers without affine parameters, in functional and ``nn.Module`` form;
* :mod:`lnbook.core.scatter_ratio` — How hard labelled samples are to separate: the sum of squares ratio (SSR) and its linear bound (LSSR) (chapters 2 and 5);
* :mod:`lnbook.core.symbolic` — LayerNorm as a sympy expression, for exact checks of the book's identities at small ``d``;
"""

from __future__ import annotations

from lnbook.core.derivatives import (
    distance_from_uniform_line,
    layer_norm_hessian,
    layer_norm_hessian_frobenius,
    layer_norm_hessian_norm,
    layer_norm_jacobian,
    layer_norm_jacobian_norm,
)
from lnbook.core.geometry import (
    activation_curve,
    activation_surface,
    circle_points,
    complement_basis,
    complement_coordinates,
    fold,
    fold_curve,
    plane_basis,
    spherical_normalize,
    stretch,
    stretch_curve,
)
from lnbook.core.group_norm_kernel import (
    applies,
    fused_group_layer_norm,
    kernel_library,
    kernel_status,
)
from lnbook.core.norms import (
    GroupLayerNorm,
    LayerNorm,
    ParallelLayerNorm,
    RMSNorm,
    centering_matrix,
    group_layer_norm,
    layer_norm,
    layer_norm_preimage,
    layer_norm_three_steps,
    normalize_to_unit_sphere,
    parallel_layer_norm,
    remove_uniform_component,
    rms_norm,
    scale_by_sqrt_d,
    uniform_vector,
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
from lnbook.core.symbolic import (
    symbolic_centering_matrix,
    symbolic_jacobian_formula,
    symbolic_layer_norm,
    symbols_vector,
)

__all__ = [
    "layer_norm_jacobian",
    "layer_norm_hessian",
    "distance_from_uniform_line",
    "layer_norm_jacobian_norm",
    "layer_norm_hessian_norm",
    "layer_norm_hessian_frobenius",
    "plane_basis",
    "spherical_normalize",
    "stretch",
    "fold",
    "activation_curve",
    "stretch_curve",
    "fold_curve",
    "activation_surface",
    "circle_points",
    "complement_basis",
    "complement_coordinates",
    "fused_group_layer_norm",
    "applies",
    "kernel_status",
    "kernel_library",
    "layer_norm",
    "rms_norm",
    "group_layer_norm",
    "parallel_layer_norm",
    "remove_uniform_component",
    "normalize_to_unit_sphere",
    "scale_by_sqrt_d",
    "layer_norm_three_steps",
    "layer_norm_preimage",
    "uniform_vector",
    "centering_matrix",
    "LayerNorm",
    "RMSNorm",
    "GroupLayerNorm",
    "ParallelLayerNorm",
    "symbolic_ssr",
    "scatter_matrices",
    "default_rtol",
    "layer_norm_rtol",
    "ssr",
    "lssr",
    "lssr_direction",
    "ssr_loss",
    "ssr_from_onehot",
    "symbols_vector",
    "symbolic_layer_norm",
    "symbolic_centering_matrix",
    "symbolic_jacobian_formula",
]
