r"""Group LayerNorm (LN-G): the Hessian measure of nonlinearity, random labels, and LSSR after one LN-G layer.

Chapter: chapter 5 (book/ch05_group_layernorm.md).
Labs: notebooks/ch05_hessian_lab.ipynb, ch05_random_labels_lab.ipynb, ch05_drop_in_lab.ipynb.
Tests: tests/group_ln/.

Modules:

* :mod:`lnbook.group_ln.hessian_measure` — A Hessian-based measure of nonlinearity, :math:`\mathcal H(f; x)`, and its closed form for LN-G (chapter 5);
* :mod:`lnbook.group_ln.lab` — Fitting random labels with linear nets, LN-Nets and LN-G nets (chapter 5);
* :mod:`lnbook.group_ln.paper_runs` — Chapter 5's paper-scale random-label runs (grayscale CIFAR-10, MNIST): run or read them, and what they say;
* :mod:`lnbook.group_ln.speed_sentences` — What chapter 5 says about LN-G's cost, from the committed benchmark run (``benchmarks/recorded/lng_speed_cpu.json``);
* :mod:`lnbook.group_ln.one_layer_lssr` — LN-G measured with chapter 2's LSSR: how well a linear read-out separates the outputs of one LN-G layer (chapter 5);
* :mod:`lnbook.group_ln.depth_rank` — The rank of an LN-Net's hidden features, layer by layer (chapter 5, random labels);
"""

from __future__ import annotations

from lnbook.group_ln.depth_rank import HiddenRank, depth_rank_bound, hidden_feature_rank, hidden_features, hidden_layers
from lnbook.group_ln.hessian_measure import (
    HessianMeasure,
    chi2_inverse_square_mean,
    group_ln_map,
    group_size_of,
    hessian_nonlinearity,
    hessian_sq_norms,
    input_scale,
    ln_g_hessian_sq_norms,
    pointwise_growth_bound,
    predicted_nonlinearity,
    probe_hessian_sq_norms,
    readout_hessian_sq_norms,
)
from lnbook.group_ln.lab import (
    OFFICIAL,
    FitConfig,
    Run,
    fit_random_labels,
    load_runs,
    make_network,
    official_runs,
    save_runs,
    step_schedule,
)
from lnbook.group_ln.one_layer_lssr import (
    centred_rank,
    expected_lssr_random_labels,
    lng_layer,
    lng_output_rtol,
    output_rank_bound,
    pair_signs,
    random_label_cloud,
    random_layer_lssr,
    xor_cloud,
)

__all__ = [
    "HessianMeasure",
    "group_ln_map",
    "input_scale",
    "hessian_sq_norms",
    "readout_hessian_sq_norms",
    "probe_hessian_sq_norms",
    "hessian_nonlinearity",
    "ln_g_hessian_sq_norms",
    "group_size_of",
    "chi2_inverse_square_mean",
    "predicted_nonlinearity",
    "pointwise_growth_bound",
    "OFFICIAL",
    "FitConfig",
    "Run",
    "official_runs",
    "step_schedule",
    "make_network",
    "fit_random_labels",
    "save_runs",
    "load_runs",
    "output_rank_bound",
    "expected_lssr_random_labels",
    "pair_signs",
    "lng_layer",
    "lng_output_rtol",
    "centred_rank",
    "random_layer_lssr",
    "xor_cloud",
    "random_label_cloud",
    "depth_rank_bound",
    "HiddenRank",
    "hidden_layers",
    "hidden_features",
    "hidden_feature_rank",
]
