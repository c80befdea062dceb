r"""Tiny randomly initialised real architectures (``transformers`` configs, no download; Llama with every
``LlamaRMSNorm`` replaced by an ``nn.LayerNorm``) and torch's Transformer layers, each with an example input:
the models of chapter 7's real-model table.

:func:`real_model_table` runs :func:`lnbook.folding.fold.find_foldable_layernorms` on each and
:func:`lnbook.folding.fold.fold_layernorms` where something folds (its float64 check at two shapes on),
and returns one row per model: how many LayerNorms there are, how many fold, and the reason for each
refusal (grouped by reason).
"""

from __future__ import annotations

import warnings
from collections import Counter

import torch
from torch import nn

__all__ = ["REAL_MODELS", "FAST_MODELS", "CHAPTER_TABLE", "MODEL_TITLES", "build_real_model", "real_model_row", "real_model_table"]

REAL_MODELS = ("gpt2", "gpt2_lm_head", "opt", "gpt_neox", "llama", "bloom", "falcon", "gptj", "codegen", "biogpt", "bert",
               "vit", "clip_vision", "convnext", "torch_encoder_pre_ln", "torch_encoder_post_ln", "torch_transformer_pre_ln",
               "torch_transformer_post_ln")

# the rows of chapter 7's table: model -> (LayerNorm calls, foldable, swapped); the chapter prints them and
# tests/folding/test_real_models.py checks the chapter's table, and every row, against this
CHAPTER_TABLE = {
    "gpt2": (5, 5, 5), "gpt2_lm_head": (5, 0, 0), "opt": (5, 5, 5), "gpt_neox": (5, 5, 5), "llama": (5, 5, 5), "bloom": (6, 1, 1),
    "falcon": (3, 3, 3), "gptj": (3, 3, 3), "codegen": (3, 3, 3), "biogpt": (5, 5, 5), "bert": (5, 1, 1), "vit": (5, 5, 5),
    "clip_vision": (6, 1, 1), "convnext": (5, 1, 0), "torch_encoder_pre_ln": (5, 5, 5), "torch_encoder_post_ln": (4, 0, 0),
    "torch_transformer_pre_ln": (7, 7, 7), "torch_transformer_post_ln": (7, 0, 0),
}
FAST_MODELS = ("opt", "bert", "torch_encoder_pre_ln", "torch_encoder_post_ln")  # the rows the lab computes at ci scale
# each row's name in the chapter's table, for the lab's table: plain model names (the
# chapter's table mixed class names in code with plain names)
MODEL_TITLES = {
    "gpt2": "GPT-2 (pre-LN, no language-model head)", "gpt2_lm_head": "GPT-2 with its language-model head", "opt": "OPT",
    "gpt_neox": "GPT-NeoX", "llama": "Llama with LayerNorms swapped in (untied head)", "bloom": "BLOOM",
    "falcon": "Falcon", "gptj": "GPT-J", "codegen": "CodeGen", "biogpt": "BioGPT (pre-LN)",
    "bert": "BERT (post-LN)", "vit": "ViT", "clip_vision": "CLIP vision", "convnext": "ConvNeXt",
    "torch_encoder_pre_ln": "torch encoder behind a Linear, pre-LN",
    "torch_encoder_post_ln": "torch encoder behind a Linear, post-LN",
    "torch_transformer_pre_ln": "torch Transformer, pre-LN", "torch_transformer_post_ln": "torch Transformer, post-LN",
}

_TEXT = dict(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


def _tokens(seed=0):
    return torch.randint(0, 50, (2, 6), generator=torch.Generator().manual_seed(seed))


def _with_input_proj(inner: nn.Module, d: int) -> nn.Module:
    return nn.Sequential(nn.Linear(8, d), inner)


def _randomise_norms(model: nn.Module) -> nn.Module:
    """Give every norm's gain and bias random values, as after training (at initialisation they are 1 and 0,
    which would make post-LN blocks fold by value)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            w, b = getattr(m, "weight", None), getattr(m, "bias", None)
            if "Norm" in type(m).__name__ and isinstance(w, torch.Tensor) and w.dim() == 1:
                w.copy_(1 + 0.3 * torch.randn(w.shape, generator=g, dtype=w.dtype))
                if isinstance(b, torch.Tensor):
                    b.copy_(0.3 * torch.randn(b.shape, generator=g, dtype=b.dtype))
    return model


def _layer_norms_for_llama_rms_norms(model: nn.Module) -> nn.Module:
    """Replace every ``LlamaRMSNorm`` by an ``nn.LayerNorm`` of the same width and eps (gain 1, bias 0;
    :func:`_randomise_norms` then draws both), so that the question "does this LayerNorm fold?" can be asked
    of the Llama layout. Refuses a model without any ``LlamaRMSNorm``."""
    swaps = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
             if type(child).__name__ == "LlamaRMSNorm"]
    if not swaps:
        raise ValueError("no LlamaRMSNorm to replace: pass a transformers Llama model")
    for parent, name, child in swaps:
        setattr(parent, name, nn.LayerNorm(child.weight.shape[0], eps=child.variance_epsilon,
                                           dtype=child.weight.dtype))
    return model


def build_real_model(name: str):
    """``(model, example_inputs, example_kwargs)`` for one of :data:`REAL_MODELS`: eval mode, float64,
    norms with random gains and biases."""
    model, args, kwargs = _build(name)
    return _randomise_norms(model), args, kwargs


def _build(name: str):
    torch.manual_seed(0)
    if name.startswith("torch_"):
        pre = name.endswith("pre_ln")
        if name.startswith("torch_encoder"):
            layer = nn.TransformerEncoderLayer(32, 4, 64, norm_first=pre, batch_first=True)
            inner = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(32) if pre else None, enable_nested_tensor=False)
            model = _with_input_proj(inner, 32)
        else:
            model = _Seq2Seq(pre)
        return model.double().eval(), (torch.randn(2, 6, 8, dtype=torch.float64),), None
    import transformers as tf

    text = {"input_ids": _tokens()}
    decoder = {"input_ids": _tokens(), "use_cache": False}
    if name == "gpt2":
        cfg = tf.GPT2Config(vocab_size=50, n_embd=32, n_layer=2, n_head=4, n_positions=16)
        return tf.GPT2Model(cfg).double().eval(), (), decoder
    if name == "gpt2_lm_head":  # the language model: its unembedding is the (tied) token embedding
        cfg = tf.GPT2Config(vocab_size=50, n_embd=32, n_layer=2, n_head=4, n_positions=16, tie_word_embeddings=True)
        return tf.GPT2LMHeadModel(cfg).double().eval(), (), decoder
    if name == "opt":
        cfg = tf.OPTConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64,
                           max_position_embeddings=16, word_embed_proj_dim=32)
        return tf.OPTModel(cfg).double().eval(), (), decoder
    if name == "gpt_neox":
        cfg = tf.GPTNeoXConfig(**_TEXT, max_position_embeddings=16)
        return tf.GPTNeoXModel(cfg).double().eval(), (), decoder
    if name == "llama":  # untied lm_head (LlamaConfig's default); rotary embeddings act on queries and keys only
        cfg = tf.LlamaConfig(**_TEXT, max_position_embeddings=16)
        return _layer_norms_for_llama_rms_norms(tf.LlamaForCausalLM(cfg)).double().eval(), (), decoder
    if name == "bloom":
        cfg = tf.BloomConfig(vocab_size=50, hidden_size=32, n_layer=2, n_head=4)
        return tf.BloomModel(cfg).double().eval(), (), decoder
    if name == "falcon":  # parallel attention and MLP, one LayerNorm per block; the residual add is in place
        cfg = tf.FalconConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              bos_token_id=0, eos_token_id=0)
        return tf.FalconModel(cfg).double().eval(), (), decoder
    if name == "gptj":  # parallel attention and MLP, one LayerNorm per block, rotary embeddings
        cfg = tf.GPTJConfig(vocab_size=50, n_embd=32, n_layer=2, n_head=4, n_positions=16, rotary_dim=4,
                            bos_token_id=0, eos_token_id=0)
        return tf.GPTJModel(cfg).double().eval(), (), decoder
    if name == "codegen":  # GPT-J's layout with a fused qkv projection
        cfg = tf.CodeGenConfig(vocab_size=50, n_embd=32, n_layer=2, n_head=4, n_positions=16, n_ctx=16, rotary_dim=4,
                               bos_token_id=0, eos_token_id=0)
        return tf.CodeGenModel(cfg).double().eval(), (), decoder
    if name == "biogpt":  # pre-LN, scaled token embedding, learned positions
        cfg = tf.BioGptConfig(**_TEXT, max_position_embeddings=16, bos_token_id=0, eos_token_id=0, pad_token_id=1)
        return tf.BioGptModel(cfg).double().eval(), (), decoder
    if name == "bert":
        cfg = tf.BertConfig(**_TEXT, max_position_embeddings=16)
        return tf.BertModel(cfg, add_pooling_layer=False).double().eval(), (), text
    images = {"pixel_values": torch.randn(2, 3, 16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))}
    if name == "vit":
        cfg = tf.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                           image_size=16, patch_size=8)
        return tf.ViTModel(cfg, add_pooling_layer=False).double().eval(), (), images
    if name == "clip_vision":
        cfg = tf.CLIPVisionConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                  image_size=16, patch_size=8)
        return tf.CLIPVisionModel(cfg).double().eval(), (), images
    if name == "convnext":
        cfg = tf.ConvNextConfig(num_channels=3, num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], image_size=16, patch_size=4)
        return tf.ConvNextModel(cfg).double().eval(), (), images
    raise ValueError(f"unknown model {name!r}; choose one of {REAL_MODELS}")


class _Seq2Seq(nn.Module):
    def __init__(self, pre: bool):
        super().__init__()
        self.src, self.tgt = nn.Linear(8, 32), nn.Linear(8, 32)
        self.transformer = nn.Transformer(32, 4, 1, 1, 64, norm_first=pre, batch_first=True)

    def forward(self, x):
        return self.transformer(self.src(x), self.tgt(x.flip(1)))


def real_model_row(name: str) -> dict:
    """One row of the table: ``layer_norms``, ``foldable``, ``swapped``, ``refusals`` (each whole reason -> count; a
    foldable LayerNorm that is not swapped as ``"foldable, not swapped: " + its swap refusal``), ``check``.
    :func:`lnbook.folding.refusals.summarise_refusals` says the refusals in a table cell."""
    from lnbook.folding.fold import find_foldable_layernorms, fold_layernorms

    model, args, kwargs = build_real_model(name)
    report = find_foldable_layernorms(model, args, kwargs)
    refusals = Counter(v.reason if not v.foldable else "foldable, not swapped: " + v.swap
                       for v in report.layer_norms if not v.foldable or v.swap)
    swapped, check = 0, None
    if any(v.foldable and not v.swap for v in report.layer_norms):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            folded = fold_layernorms(model, args, kwargs, report=report)
        swapped = sum(type(m) is not nn.LayerNorm and isinstance(m, nn.RMSNorm) for m in folded.modules())
        check = "passed"
    return {"model": name, "layer_norms": len(report.layer_norms), "foldable": len(report.foldable),
            "swapped": swapped, "refusals": dict(refusals), "check": check}


def real_model_table(names=REAL_MODELS) -> list[dict]:
    return [real_model_row(n) for n in names]
