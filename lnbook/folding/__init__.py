r"""RMSNorm vs LN: zero-mean analysis of traced graphs, foldable LayerNorms and their exact conversion, hidden states vs the uniform vector, pretrained models from installed packages.

Chapter: chapter 7 (book/ch07_layernorm_vs_rmsnorm.md).
Labs: notebooks/ch07_folding_lab.ipynb, ch07_uniform_vector_lab.ipynb.
Tests: tests/folding/.

Modules:

* :mod:`lnbook.folding.abstract_claims` — Chapter 7's records of the structural claims of Guo et al.'s abstract, the ones the chapter checks;
* :mod:`lnbook.folding.call_proofs` — Folded models that serve: each call class is proved before it runs;
* :mod:`lnbook.folding.ccc_training` — Training under the column-centred constraint with RMSNorm, against LayerNorm;
* :mod:`lnbook.folding.fast_guards` — What the guards of a folded model check on every call, checked fast;
* :mod:`lnbook.folding.fold` — Foldable LayerNorms: find them in any model and replace them by RMSNorm without changing the model;
* :mod:`lnbook.folding.lab` — Figures, models and summaries of the two labs;
* :mod:`lnbook.folding.pretrained` — Two real pretrained models that installed Python packages ship (no download at run time);
* :mod:`lnbook.folding.softmax_shifts` — Centring the unembedding and folding value biases (exact, by the softmax);
* :mod:`lnbook.folding.uniform_angles` — How far hidden vectors are from the uniform vector :math:`\mathbf 1`, and what that means for LN vs RMSNorm;
* :mod:`lnbook.folding.zero_mean` — Which tensors of a traced model are zero-mean over their features, and which writers may be centred;
* :mod:`lnbook.folding.op_rules` — The rule table of the zero-mean analysis: which ATen operations move feature vectors linearly;
* :mod:`lnbook.folding.saving` — Saving and reloading folded models: the RMSNorms come back only through a new proof;
* :mod:`lnbook.folding.refusals` — Why LayerNorms were refused, in words a table cell can hold;
* :mod:`lnbook.folding.real_models` — Tiny randomly initialised real architectures (``transformers`` configs, no download) and torch's;
* :mod:`lnbook.folding.speed` — Timing helpers of chapter 7's speed benchmark (``benchmarks/fold_speed.py``);
* :mod:`lnbook.folding.speed_glue` — Chapter 7's speed section, from the recorded runs: its comparisons with the paper and the values its prose quotes;
* :mod:`lnbook.folding.tracing` — Trace a model with ``torch.export`` over dynamic shapes, and the input shapes on which the trace holds;
"""

from __future__ import annotations

from lnbook.folding.call_proofs import CallProver, ReadOnlyHook, call_state, config_state, module_attributes
from lnbook.folding.fold import (
    FoldReport,
    LayerNormVerdict,
    RMSNormWithBias,
    centre_writers,
    find_foldable_layernorms,
    fold_layernorms,
    max_output_difference,
    relative_output_difference,
)
from lnbook.folding.op_rules import (
    IDENTITY_OPS,
    NO_OP_READERS,
    RULE_OPS,
    linear_inputs,
    op_name,
    rank,
    same_size,
    size,
)
from lnbook.folding.pretrained import (
    MINILM_PACKAGE,
    SMOLLM2_PACKAGE,
    load_minilm,
    load_smollm2,
    package_dir,
    run_texts,
)
from lnbook.folding.real_models import (
    CHAPTER_TABLE,
    FAST_MODELS,
    REAL_MODELS,
    build_real_model,
    real_model_row,
    real_model_table,
)
from lnbook.folding.refusals import RefusalSummary, refusal_kind, summarise_refusals
from lnbook.folding.saving import fold_record, load_folded, swapped_norms
from lnbook.folding.softmax_shifts import (
    center_unembed,
    fold_value_biases,
    value_bias_refusals,
    value_bias_sites,
)
from lnbook.folding.speed import (
    MMAP_THRESHOLD_ENV,
    ablation_share,
    best_kernels,
    interleaved_median_times,
    without_norms,
)
from lnbook.folding.tracing import (
    CallSpec,
    ShapeDomain,
    ShapeGuard,
    draw_inputs,
    register_cache_types,
)
from lnbook.folding.uniform_angles import (
    LayerAngles,
    UniformNull,
    angle_profile,
    group_by_source,
    zero_average_rejected,
    angle_to_uniform,
    avoids,
    capture_norm_inputs,
    cosine_to_uniform,
    is_norm_module,
    ln_rms_angle,
    mean_share,
    null_profile,
    family_p_values,
    orthogonality_verdict,
    random_mean_abs_cosine,
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
    "relative_output_difference",
    "center_unembed",
    "fold_value_biases",
    "value_bias_sites",
    "value_bias_refusals",
    "RefusalSummary",
    "refusal_kind",
    "summarise_refusals",
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
    "group_by_source",
    "zero_average_rejected",
    "is_norm_module",
    "capture_norm_inputs",
    "UniformNull",
    "uniform_null",
    "null_profile",
    "stands_out",
    "avoids",
    "family_p_values",
    "orthogonality_verdict",
    "UntraceableModelError",
    "Writer",
    "ZeroMeanAnalysis",
    "trace_model",
    "describe_node",
    "linear_inputs",
    "op_name",
    "size",
    "same_size",
    "rank",
    "IDENTITY_OPS",
    "NO_OP_READERS",
    "RULE_OPS",
    "REAL_MODELS",
    "FAST_MODELS",
    "CHAPTER_TABLE",
    "build_real_model",
    "real_model_row",
    "real_model_table",
    "load_folded",
    "fold_record",
    "swapped_norms",
    "MMAP_THRESHOLD_ENV",
    "interleaved_median_times",
    "best_kernels",
    "without_norms",
    "ablation_share",
    "CallSpec",
    "ShapeDomain",
    "ShapeGuard",
    "CallProver",
    "ReadOnlyHook",
    "config_state",
    "call_state",
    "module_attributes",
    "register_cache_types",
    "draw_inputs",
]
