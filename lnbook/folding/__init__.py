r"""RMSNorm vs LN: zero-mean analysis of traced graphs, foldable LayerNorms and their exact conversion, hidden states vs the uniform vector, pretrained models from installed packages.

Chapter: chapter 7 (book/ch07_layernorm_vs_rmsnorm.md).
Labs: notebooks/ch07_folding_lab.ipynb, ch07_uniform_vector_lab.ipynb.
Tests: tests/folding/.

Modules:

* :mod:`lnbook.folding.ccc_training` — Training under the column-centred constraint with RMSNorm, against LayerNorm;
* :mod:`lnbook.folding.fold` — Foldable LayerNorms: find them in any model and replace them by RMSNorm without changing the model;
* :mod:`lnbook.folding.lab` — Figures, models and summaries of the two labs;
* :mod:`lnbook.folding.pretrained` — Two real pretrained models that installed Python packages ship (no download at run time);
* :mod:`lnbook.folding.softmax_shifts` — Centring the unembedding and folding value biases (exact, by the softmax);
* :mod:`lnbook.folding.uniform_angles` — How far hidden vectors are from the uniform vector :math:`\mathbf 1`, and what that means for LN vs RMSNorm;
* :mod:`lnbook.folding.zero_mean` — Which tensors of a traced model are zero-mean over their features, and which writers may be centred;
"""

from __future__ import annotations

from lnbook.folding.fold import (
    FoldReport,
    LayerNormVerdict,
    RMSNormWithBias,
    centre_writers,
    find_foldable_layernorms,
    fold_layernorms,
    max_output_difference,
)
from lnbook.folding.softmax_shifts import center_unembed, fold_value_biases, value_bias_sites
from lnbook.folding.pretrained import (
    MINILM_PACKAGE,
    SMOLLM2_PACKAGE,
    load_minilm,
    load_smollm2,
    package_dir,
    run_texts,
)
from lnbook.folding.uniform_angles import (
    LayerAngles,
    angle_profile,
    angle_to_uniform,
    capture_norm_inputs,
    cosine_to_uniform,
    is_norm_module,
    ln_rms_angle,
    mean_share,
    random_mean_abs_cosine,
    UniformNull,
    avoids,
    null_profile,
    orthogonality_verdict,
    stands_out,
    uniform_null,
)
from lnbook.folding.zero_mean import (
    UntraceableModelError,
    Writer,
    ZeroMeanAnalysis,
    describe_node,
    trace_model,
)

__all__ = [
    "LayerNormVerdict",
    "FoldReport",
    "RMSNormWithBias",
    "find_foldable_layernorms",
    "fold_layernorms",
    "centre_writers",
    "max_output_difference",
    "center_unembed",
    "fold_value_biases",
    "value_bias_sites",
    "MINILM_PACKAGE",
    "SMOLLM2_PACKAGE",
    "package_dir",
    "load_minilm",
    "load_smollm2",
    "run_texts",
    "cosine_to_uniform",
    "angle_to_uniform",
    "mean_share",
    "ln_rms_angle",
    "random_mean_abs_cosine",
    "LayerAngles",
    "angle_profile",
    "is_norm_module",
    "capture_norm_inputs",
    "UniformNull",
    "uniform_null",
    "null_profile",
    "stands_out",
    "avoids",
    "orthogonality_verdict",
    "UntraceableModelError",
    "Writer",
    "ZeroMeanAnalysis",
    "trace_model",
    "describe_node",
]
