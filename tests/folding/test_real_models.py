"""Chapter 7's real-model table: tiny randomly initialised architectures (transformers configs, no download)
and torch's Transformer layers (lnbook.folding.real_models).

Each row: the number of LayerNorm calls, how many are foldable, how many modules are swapped (after the
float64 check at two shapes), and a phrase that every refusal's reason contains. Post-LN models are
built with random gains and biases (at initialisation they would fold by value).
"""

from __future__ import annotations

import importlib.util

from pathlib import Path

import pytest
import torch
from torch import nn

from lnbook.folding.fold import find_foldable_layernorms
from lnbook.folding.real_models import CHAPTER_TABLE, MODEL_TITLES, REAL_MODELS, build_real_model, real_model_row
from lnbook.folding.real_models import _layer_norms_for_llama_rms_norms
from lnbook.util.tables import WORD_JOINER

needs_transformers = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers not installed")

# model: (LayerNorm calls, foldable, swapped, phrases found in the refusals)
EXPECTED = {
    "gpt2": (5, 5, 5, ()),
    "gpt2_lm_head": (5, 0, 0, ("embedding 'transformer.wte'", "'lm_head.weight' is also read by aten.linear")),
    "opt": (5, 5, 5, ()),
    "gpt_neox": (5, 5, 5, ()),
    "llama": (5, 5, 5, ()),
    "bloom": (6, 1, 1, ("word_embeddings_layernorm has a per-feature gain",)),
    "falcon": (3, 3, 3, ()),
    "gptj": (3, 3, 3, ()),
    "codegen": (3, 3, 3, ()),
    "biogpt": (5, 5, 5, ()),
    "bert": (5, 1, 1, ("has a per-feature gain",)),
    "vit": (5, 5, 5, ()),
    "clip_vision": (6, 1, 1, ("pre_layrnorm has a per-feature gain",)),
    "convnext": (5, 1, 0, ("not exactly nn.LayerNorm", "a grouped convolution (groups=8)", "(groups=16)")),
    "torch_encoder_pre_ln": (5, 5, 5, ()),
    "torch_encoder_post_ln": (4, 0, 0, ("has a per-feature gain", "does not carry a shift")),
    "torch_transformer_pre_ln": (7, 7, 7, ()),
    "torch_transformer_post_ln": (7, 0, 0, ("has a per-feature gain", "cannot be centred")),
}
CHAPTER = Path(__file__).resolve().parents[2] / "book" / "ch07_layernorm_vs_rmsnorm.md"
ROWS = {"GPT-2, OPT, GPT-NeoX (pre-LN, no language-model head)": ("gpt2", "opt", "gpt_neox"),
        "GPT-2 with its language-model head": ("gpt2_lm_head",),
        "Llama with LayerNorms swapped in (untied head)": ("llama",), "ViT": ("vit",), "BLOOM": ("bloom",),
        "Falcon, GPT-J, CodeGen (parallel attention and MLP)": ("falcon", "gptj", "codegen"),
        "BioGPT (pre-LN)": ("biogpt",),
        "BERT (post-LN)": ("bert",), "CLIP vision": ("clip_vision",), "ConvNeXt": ("convnext",),
        "torch encoder behind a Linear, pre-LN": ("torch_encoder_pre_ln",),
        "torch encoder behind a Linear, post-LN": ("torch_encoder_post_ln",),
        "torch Transformer, pre-LN": ("torch_transformer_pre_ln",), "torch Transformer, post-LN": ("torch_transformer_post_ln",)}


def test_every_model_has_an_expected_row():
    assert set(EXPECTED) == set(REAL_MODELS) == set(CHAPTER_TABLE)
    assert all(EXPECTED[m][:3] == CHAPTER_TABLE[m] for m in REAL_MODELS)


def test_the_chapter_prints_this_table():
    """The hand-written table of the chapter is the table the tests assert, row by row, and its model column names
    every model in one style, plainly (issue 33: code spans for some classes beside plain names for others)."""
    text = CHAPTER.read_text()
    start = text.index("| model | LN calls | fold | swap | why the others are not |")
    table = [line for line in text[start:text.index("\n\n", start)].splitlines()[2:] if line.startswith("|")]  # not the fence
    models = [line.strip().strip("|").split("|")[0].strip() for line in table]
    assert not [m for m in models if "`" in m], "name the models plainly (GPT-2, not `GPT2Model`)"
    # no line break inside a name: a word joiner after each hyphen ("language-" / "model head" in the screenshot read,
    # issue 33)
    assert all(m.count("-") == m.count("-" + WORD_JOINER) for m in models), [m for m in models if "-" in m]
    models = [m.replace(WORD_JOINER, "") for m in models]
    printed = {}
    for line in text.splitlines():
        cells = [c.strip().replace(WORD_JOINER, "") for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] in ROWS:
            printed[cells[0]] = tuple(int(c) for c in cells[1:4])
    assert set(printed) == set(ROWS) == set(models)
    for label, models in ROWS.items():
        assert all(CHAPTER_TABLE[m] == printed[label] for m in models), label



def test_every_row_has_a_title_for_the_lab_and_each_title_names_its_chapter_row():
    """The lab's table names each row as the chapter's table does (MODEL_TITLES), one title per model."""
    assert set(MODEL_TITLES) == set(REAL_MODELS) and len(set(MODEL_TITLES.values())) == len(MODEL_TITLES)
    for label, models in ROWS.items():
        for m in models:
            assert MODEL_TITLES[m].split(" (")[0] in label.replace("`", ""), (m, label)

@needs_transformers
@pytest.mark.parametrize("name", REAL_MODELS)  # every row, in the default run: the lab computes only FAST_MODELS at ci
def test_real_model_row(name):
    row = real_model_row(name)
    calls, foldable, swapped, phrases = EXPECTED[name]
    assert (row["layer_norms"], row["foldable"], row["swapped"]) == (calls, foldable, swapped), row
    assert sum(row["refusals"].values()) == calls - swapped, row
    text = " ".join(row["refusals"])
    assert all(p in text for p in phrases), row
    if swapped:
        assert row["check"] == "passed"


@needs_transformers
def test_the_gpt2_lm_head_row_really_ties_its_unembedding():
    """The 5 / 0 / 0 row is GPT-2 as a language model: lm_head.weight is the token embedding itself."""
    model, _, _ = build_real_model("gpt2_lm_head")
    assert type(model).__name__ == "GPT2LMHeadModel" and model.lm_head.weight is model.transformer.wte.weight
    body, _, _ = build_real_model("gpt2")
    assert type(body).__name__ == "GPT2Model" and not hasattr(body, "lm_head")


@needs_transformers
def test_the_llama_row_is_llama_with_layernorms_swapped_in():
    """The Llama row: every LlamaRMSNorm became an nn.LayerNorm of the same width and eps, with random gain and
    bias; no bias in o_proj/down_proj; rotary embeddings; an lm_head that is not the token embedding."""
    model, _, _ = build_real_model("llama")
    assert type(model).__name__ == "LlamaForCausalLM"
    assert not any(type(m).__name__ == "LlamaRMSNorm" for m in model.modules())
    norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    assert len(norms) == 5 and all(m.normalized_shape == (32,) and m.eps == model.config.rms_norm_eps for m in norms)
    assert all(m.weight.dtype == torch.float64 and m.bias.abs().min() > 0 for m in norms)
    layer = model.model.layers[0]
    assert layer.self_attn.o_proj.bias is None and layer.mlp.down_proj.bias is None
    assert hasattr(model.model, "rotary_emb")
    assert model.lm_head.weight is not model.model.embed_tokens.weight


@needs_transformers
def test_llama_with_a_tied_head_refuses_every_layernorm_like_gpt2():
    """The contrast to the Llama row: tie lm_head to the token embedding and no LayerNorm folds, each refusal
    naming the tied parameter (the embedding cannot be centred without changing the unembedding)."""
    import transformers as tf

    from lnbook.folding.real_models import _TEXT, _randomise_norms, _tokens

    torch.manual_seed(0)
    cfg = tf.LlamaConfig(**_TEXT, max_position_embeddings=16, tie_word_embeddings=True)
    model = _randomise_norms(_layer_norms_for_llama_rms_norms(tf.LlamaForCausalLM(cfg)).double().eval())
    assert model.lm_head.weight is model.model.embed_tokens.weight
    report = find_foldable_layernorms(model, (), {"input_ids": _tokens(), "use_cache": False})
    assert len(report.layer_norms) == 5 and not report.foldable
    assert all("'lm_head.weight' is also read by aten.linear" in v.reason for v in report.layer_norms)


@needs_transformers
def test_the_falcon_row_folds_through_its_in_place_residual_add_and_transposed_weights():
    """Falcon's block adds attention into the MLP output in place (aten.add_.Tensor) and its FalconLinear computes
    x @ w.T (aten.numpy_T); both are read by their rules (op_rules.INPLACE_OPS, a transposed stored weight as a
    writer), so all three LayerNorms fold, and the fold's float64 check passes."""
    from lnbook.folding.op_rules import op_name

    model, args, kwargs = build_real_model("falcon")
    report = find_foldable_layernorms(model, args, kwargs)
    ops = {op_name(n) for n in report._analysis.graph.nodes}
    assert {"aten.add_.Tensor", "aten.numpy_T.default"} <= ops
    assert len(report.layer_norms) == 3 and len(report.foldable) == 3, report.table()
    dense = [w for w in report.writers.values() if w.module.endswith("dense_4h_to_h")]
    assert dense and all(w.centrable and w.params[0][1] == 0 for w in dense)


def test_the_llama_swap_refuses_a_model_without_llama_rms_norms():
    with pytest.raises(ValueError, match="no LlamaRMSNorm"):
        _layer_norms_for_llama_rms_norms(nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2)))


@needs_transformers
def test_language_models_that_tie_their_head_by_default_fold_none_of_their_layernorms():
    """The chapter's "Which architectures fold" (referee 15 of chapter 7, finding 1): GPT-2, OPT, Falcon, BioGPT and
    BLOOM tie the unembedding to the token embedding by default in ``transformers`` (the table's rows are bodies),
    and a tied language model folds none of its LayerNorms: the token embedding feeds the unembedding, and cannot be
    centred."""
    import transformers as tf

    for config in (tf.GPT2Config, tf.OPTConfig, tf.FalconConfig, tf.BioGptConfig, tf.BloomConfig):
        assert config().tie_word_embeddings is True, config.__name__
    torch.manual_seed(0)
    cfg = tf.OPTConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64,
                       max_position_embeddings=16, word_embed_proj_dim=32)
    lm = tf.OPTForCausalLM(cfg).double().eval()
    assert lm.get_output_embeddings().weight is lm.get_input_embeddings().weight
    report = find_foldable_layernorms(lm, (torch.randint(2, 50, (2, 6)),))
    assert len(report.layer_norms) == 5 and not any(v.foldable for v in report.layer_norms)
    assert all("embedding" in v.reason for v in report.layer_norms)


@needs_transformers
def test_per_head_query_key_norms_and_a_non_persistent_position_table_are_the_converters_limits():
    """The chapter's two limits of "pre-LN transformers fold completely" that are the converter's, not the theorems'
    (referee 37 of chapter 7, finding 1): Persimmon with ``qk_layernorm`` (pre-LN, the stream written by embeddings
    and projections) folds its stream's LayerNorms but refuses every per-head query/key norm, which normalises a
    part of a projection's output (it would need head-wise centring); XGLM keeps its sinusoidal position table in a
    non-persistent buffer, and the converter refuses that writer, naming the buffer."""
    import transformers as tf

    torch.manual_seed(0)
    persimmon = tf.PersimmonForCausalLM(tf.PersimmonConfig(
        vocab_size=50, hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64,
        max_position_embeddings=32, qk_layernorm=True, tie_word_embeddings=False)).double().eval()
    ids = torch.randint(0, 50, (2, 6), generator=torch.Generator().manual_seed(0))
    report = find_foldable_layernorms(persimmon, (), {"input_ids": ids, "use_cache": False})
    per_head = [v for v in report.layer_norms if "q_layernorm" in v.module or "k_layernorm" in v.module]
    stream = [v for v in report.layer_norms if v not in per_head]
    assert len(per_head) == 4 and len(stream) == 5
    assert all(not v.foldable and "splits or merges the axis" in v.reason for v in per_head)
    assert all(v.foldable for v in stream)
    xglm = tf.XGLMForCausalLM(tf.XGLMConfig(vocab_size=50, d_model=32, num_layers=2, attention_heads=4, ffn_dim=64,
                                            max_position_embeddings=32, tie_word_embeddings=False)).double().eval()
    report = find_foldable_layernorms(xglm, (), {"input_ids": ids, "use_cache": False})
    assert report.layer_norms and not any(v.foldable for v in report.layer_norms)
    assert any("'model.embed_positions.weights' is not persistent" in v.reason for v in report.layer_norms)
