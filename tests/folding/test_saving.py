"""Chapter 7: a folded model round-trips (lnbook.folding.saving, fold.refuse_training_mode).

torch.save of the module keeps it bit for bit; its state_dict and save_pretrained keep its weights, which load into
the original architecture as a LayerNorm model computing the same function, and load_folded proves the fold again
to bring the RMSNorms back (checked against the fold recorded in a Hugging Face config); .to(dtype) keeps it equal to
the original within the new dtype's rounding and .to(device) within the float64 tolerance; training mode is refused, because dropout between
a centred writer and an RMSNorm breaks the equality (shown here with the refusal lifted).
"""

from __future__ import annotations

import copy
import importlib.util
import io
import json
import warnings

import pytest
import torch
from torch import nn

from lnbook.folding.call_proofs import RefuseChangesSinceFolding
from lnbook.folding.fold import check_tolerance, fold_layernorms, refuse_training_mode, relative_output_difference
from lnbook.folding.saving import fold_record, load_folded, swapped_norms
from tests.folding.random_nets import UncentredRMSNorm, randomise_norms

needs_transformers = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers not installed")


class Block(nn.Module):
    """``out(ln2(h + mlp(ln1(h))))`` with ``h = drop(inp(x))``: a pre-LN residual block with a dropout after the writer."""

    def __init__(self):
        super().__init__()
        self.inp, self.drop = nn.Linear(4, 8), nn.Dropout(0.5)
        self.ln1, self.mlp, self.ln2, self.out = nn.LayerNorm(8), nn.Linear(8, 8), nn.LayerNorm(8), nn.Linear(8, 3)

    def forward(self, x):
        h = self.drop(self.inp(x))
        h = h + self.mlp(self.ln1(h))
        return self.out(self.ln2(h))


def _block():
    torch.manual_seed(0)
    return randomise_norms(Block()).double().eval()


def _x(batch=2, tokens=5, dtype=torch.float64, seed=0):
    return torch.randn(batch, tokens, 4, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_torch_save_of_the_module_keeps_it_bit_for_bit_with_its_guards():
    """The whole module pickles with its hooks: the call prover (a call of another rank is proved on the saved
    copy of the original, then runs and equals it; with prove_calls=False it is refused, naming the rank) and the
    training-mode refusal."""
    model = _block()
    for prove_calls in (True, False):
        folded = fold_layernorms(model, _x(), prove_calls=prove_calls)
        buf = io.BytesIO()
        torch.save(folded, buf)
        buf.seek(0)
        loaded = torch.load(buf, weights_only=False)
        assert swapped_norms(loaded, model) == ["ln1", "ln2"]
        assert torch.equal(loaded(_x(3, 4)), folded(_x(3, 4)))
        if prove_calls:
            torch.testing.assert_close(loaded(_x()[0]), model(_x()[0]), rtol=1e-12, atol=1e-12)
        else:
            with pytest.raises(ValueError, match="2 dimensions, the traced call 3"):
                loaded(_x()[0])
        with pytest.raises(ValueError, match="training mode"):
            loaded.train()(_x())


def test_a_state_dict_loads_into_the_original_architecture_and_load_folded_brings_the_rmsnorms_back():
    """The saved weights (torch.save, loaded with weights_only=True) have the original's keys: loaded into a fresh
    model they give LayerNorms with centred writers, equal to the original; load_folded proves the fold again and
    returns RMSNorms at the same modules with the very same weights."""
    model = _block()
    folded = fold_layernorms(model, _x())
    buf = io.BytesIO()
    torch.save(folded.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    fresh = Block().double().eval()
    plain = copy.deepcopy(fresh)
    plain.load_state_dict(state)
    assert swapped_norms(plain, model) == [] and type(plain.ln1) is nn.LayerNorm
    tol = check_tolerance(torch.float64)
    assert relative_output_difference(model, plain, _x(3, 4)) <= tol
    again = load_folded(fresh, _x(), state_dict=state)
    assert swapped_norms(again, model) == ["ln1", "ln2"] and type(fresh.ln1) is nn.LayerNorm
    for (key, a), b in zip(again.state_dict().items(), folded.state_dict().values()):  # centred again: rounding only
        assert float((a - b).abs().max()) <= 8 * torch.finfo(a.dtype).eps * float(b.abs().max()), key
    assert relative_output_difference(model, again, _x(3, 4)) <= tol
    with pytest.raises(TypeError, match="directory or an nn.Module"):
        load_folded(state, _x())


def test_a_state_dict_of_an_affine_fold_reloads_with_its_gains_in_the_next_layers():
    """affine="fold" leaves RMSNorms without parameters: the state dict lacks the LayerNorms' gains and biases. load_folded
    sets them to 1 and 0 (the gains already sit in the next layers), folds with affine="fold" again, and equals the
    original; a state dict missing any other key is refused with the reason."""
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 3))
    torch.manual_seed(0)
    model = randomise_norms(model).double().eval()
    folded = fold_layernorms(model, _x(), affine="fold")
    state = folded.state_dict()
    assert "1.weight" not in state
    fresh = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 3)).double().eval()
    again = load_folded(fresh, _x(), state_dict=state)
    assert swapped_norms(again, model) == ["1"] and not list(again[1].parameters())
    assert relative_output_difference(model, again, _x(3, 4)) <= check_tolerance(torch.float64)
    broken = {k: v for k, v in state.items() if k != "2.bias"}
    with pytest.raises(ValueError, match=r"does not fit this architecture: missing \['2.bias'\]"):
        load_folded(fresh, _x(), state_dict=broken)


def _cast_difference(model, other, dtype, x64):
    """``(max |model.to(dtype)(x) - other.to(dtype)(x)|, max |model.to(dtype)(x) - model(x64)|, max |model(x64)|)``
    with ``x`` the rounding of ``x64`` to ``dtype``: the cast models' difference, the cast original's own rounding
    (against its float64 self on the same inputs) and the output's scale."""
    low, other_low = copy.deepcopy(model).to(dtype), copy.deepcopy(other).to(dtype)
    x = x64.to(dtype)
    with torch.no_grad():
        exact, a, b = model(x64), low(x).double(), other_low(x).double()
    return float((a - b).abs().max()), float((a - exact).abs().max()), float(exact.abs().max())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_to_dtype_keeps_the_fold_within_the_dtype_tolerance(dtype):
    """Folded in float64, then both models cast: in float32 they agree within check_tolerance(float32) = 2^-11
    (relative to the output's largest entry); in bfloat16 and float16, where 2^12 machine epsilons are 32 and 4 (no
    bound at all, so check_tolerance refuses them), within four times the cast original's own rounding, measured
    against its float64 self on the same inputs. The factor: by the triangle inequality the cast models differ by at
    most the original's rounding + the folded model's rounding + the float64 fold's difference (at most
    check_tolerance(float64), added); the folded model runs the same linear layers on centred writers and an RMSNorm
    (one reduction fewer than the LayerNorm), so its rounding has the same worst-case bound, and four lets it be up
    to three times the original's measured rounding. Negative control on the same inputs: LayerNorm swapped for
    RMSNorm without centring (a wrong fold) fails the same bound in every dtype. The guard and the training refusal
    survive the cast."""
    model = _block()
    folded = fold_layernorms(model, _x())
    wrong = copy.deepcopy(model)
    wrong.ln1, wrong.ln2 = UncentredRMSNorm(model.ln1), UncentredRMSNorm(model.ln2)
    for seed in range(4):
        x64 = _x(3, 4, seed=seed)
        diff, rounding, scale = _cast_difference(model, folded, dtype, x64)
        bound = (check_tolerance(dtype) if dtype == torch.float32 else 4 * rounding / scale) + check_tolerance(torch.float64)
        assert diff / scale <= bound, (seed, diff / scale, bound)
        wrong_diff, _, _ = _cast_difference(model, wrong, dtype, x64)
        assert wrong_diff / scale > bound, (seed, wrong_diff / scale, bound)
    if dtype != torch.float32:
        with pytest.raises(ValueError, match="no fold check tolerance"):
            check_tolerance(dtype)
    cast = copy.deepcopy(folded).to(dtype)
    assert cast.ln1.weight.dtype == dtype
    with pytest.raises(ValueError, match="training mode"):
        cast.train()(_x(dtype=dtype))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_to_cuda_keeps_the_fold_within_the_float64_tolerance():
    model = _block()
    folded = fold_layernorms(model, _x()).to("cuda")
    x = _x(3, 4).to("cuda")
    assert folded.ln1.weight.is_cuda
    assert relative_output_difference(copy.deepcopy(model).to("cuda"), folded, x) <= check_tolerance(torch.float64)


def test_training_mode_is_refused_because_dropout_breaks_the_equality():
    """Why refuse rather than warn: with the refusal lifted, the folded model in training mode differs from the
    original under the same dropout mask (same seed) by far more than rounding, because the dropout after the
    centred writer un-centres the RMSNorm's input; back in eval mode the two agree again."""
    model = _block()
    folded = fold_layernorms(model, _x())
    with pytest.raises(ValueError, match="training mode.*dropout between the centred writers and the RMSNorms"):
        folded.train()(_x())
    lifted = copy.deepcopy(folded)
    for key, hook in list(lifted._forward_pre_hooks.items()):
        if hook is refuse_training_mode or isinstance(hook, RefuseChangesSinceFolding):
            del lifted._forward_pre_hooks[key]
    lifted.train(), model.train()
    with torch.no_grad():
        torch.manual_seed(1)
        a = model(_x())
        torch.manual_seed(1)
        b = lifted(_x())
    model.eval()
    assert float((a - b).abs().max()) > 1e-3 * float(a.abs().max())
    assert relative_output_difference(model, folded.eval(), _x(3, 4)) <= check_tolerance(torch.float64)


@needs_transformers
def test_save_pretrained_then_load_folded_rebuilds_the_recorded_fold(tmp_path):
    """GPT-2 (tiny, float64): save_pretrained stores the weights and the fold record; a plain from_pretrained gives
    the LayerNorm model (equal to the original), load_folded gives the RMSNorms at the recorded modules (equal to
    the original); a record naming another module is refused."""
    import transformers as tf

    from lnbook.folding.real_models import build_real_model

    model, args, kwargs = build_real_model("gpt2")
    folded = fold_layernorms(model, args, kwargs)
    record = fold_record(folded)
    assert record == {"layer_norms": swapped_norms(folded, model), "affine": "keep"} and len(record["layer_norms"]) == 5
    assert fold_record(model) is None  # the original's config is not touched
    folded.save_pretrained(tmp_path)
    call = dict(kwargs, input_ids=kwargs["input_ids"].flip(0))
    tol = check_tolerance(torch.float64)
    plain = tf.GPT2Model.from_pretrained(tmp_path, dtype=torch.float64).eval()
    assert swapped_norms(plain, model) == [] and relative_output_difference(model, plain, (), call) <= tol
    again = load_folded(tmp_path, args, kwargs)
    assert swapped_norms(again, model) == record["layer_norms"]
    assert next(again.parameters()).dtype == torch.float64
    assert relative_output_difference(model, again, (), call) <= tol
    config = json.loads((tmp_path / "config.json").read_text())
    config["lnbook_fold"]["layer_norms"] = record["layer_norms"][1:]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"fold differently from the saved fold: swapped now but not then \['h.0.ln_1'\]"):
        load_folded(tmp_path, args, kwargs)


@needs_transformers
def test_save_pretrained_of_a_fold_that_added_a_parameter_is_refused_by_load_folded(tmp_path):
    """Referee 14, finding 3: an untied GPT-2 language model folded with affine="fold" gets ln_f's bias as a new
    lm_head.bias, which the architecture lacks. save_pretrained writes it, from_pretrained drops it (unexpected), and
    load_folded used to fold what arrived and return a model 62% off the original, silently. Both routes now refuse it
    with the key and what to do; the LayerNorm gains and biases that affine="fold" removed are the only keys allowed
    to be missing."""
    import transformers as tf

    cfg = tf.GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2, n_positions=16, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = randomise_norms(tf.GPT2LMHeadModel(cfg)).double().eval()
    ids = torch.randint(0, 50, (2, 6), generator=torch.Generator().manual_seed(0))
    with pytest.warns(UserWarning, match=r"added 1 bias that the architecture lacks.*\(lm_head.bias\).*torch.save"):
        folded = fold_layernorms(model, (), {"input_ids": ids}, affine="fold")  # referee 33: said at fold time
    assert model.lm_head.bias is None and folded.lm_head.bias is not None
    assert relative_output_difference(model, folded, (), {"input_ids": ids.flip(0)}) <= check_tolerance(torch.float64)
    folded.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"does not fit this architecture: missing \[\], unexpected \['lm_head.bias'\].*torch.save"):
        load_folded(tmp_path, (), {"input_ids": ids})
    with pytest.raises(ValueError, match=r"unexpected \['lm_head.bias'\]"):
        load_folded(tf.GPT2LMHeadModel(cfg).double().eval(), (), {"input_ids": ids}, state_dict=folded.state_dict())
    with pytest.raises(TypeError, match="output_loading_info"):
        load_folded(tmp_path, (), {"input_ids": ids}, output_loading_info=False)


def test_load_state_dict_of_uncentred_weights_is_refused_and_the_folded_model_is_left_as_it_was():
    """``folded.load_state_dict(original.state_dict())`` puts the original's un-centred writers under the RMSNorms:
    without the check (hook removed) it loads and the folded model is far from the original; with it, ValueError
    saying what to do, and nothing is loaded. The folded model's own state dict (also through torch.save, and after
    a torch.save of the whole module) loads; a partial state dict with one un-centred writer is refused too."""
    model = _block()
    folded = fold_layernorms(model, _x())
    before = copy.deepcopy(folded.state_dict())
    with pytest.raises(ValueError, match=r"centred writers centred.*inp\.(weight|bias).*Nothing was loaded.*load_folded"):
        folded.load_state_dict(model.state_dict())
    assert all(torch.equal(before[k], v) for k, v in folded.state_dict().items())
    assert relative_output_difference(model, folded, _x(3, 4)) <= check_tolerance(torch.float64)
    unguarded = copy.deepcopy(folded)
    unguarded._load_state_dict_pre_hooks.clear()
    unguarded.load_state_dict(model.state_dict())
    assert relative_output_difference(model, unguarded, _x(3, 4)) > 1e-2  # what the check prevents
    with pytest.raises(ValueError, match="inp.bias"):
        folded.load_state_dict({"inp.bias": model.inp.bias.detach().clone()}, strict=False)
    buf = io.BytesIO()
    torch.save(folded.state_dict(), buf)
    buf.seek(0)
    folded.load_state_dict(torch.load(buf, weights_only=True))
    assert relative_output_difference(model, folded, _x(3, 4)) <= check_tolerance(torch.float64)
    buf = io.BytesIO()
    torch.save(folded, buf)
    buf.seek(0)
    whole = torch.load(buf, weights_only=False)
    whole.load_state_dict(folded.state_dict())
    with pytest.raises(ValueError, match="Nothing was loaded"):
        whole.load_state_dict(model.state_dict())


class _PostLNBlock(nn.Module):
    """A post-LN block at initialisation (referee ch7): ln1's constant gain and zero bias make its output
    zero-mean, which the fold of ln2 relies on."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.inp, self.ln1, self.f = nn.Linear(4, d), nn.LayerNorm(d), nn.Linear(d, d)
        self.ln2, self.out = nn.LayerNorm(d), nn.Linear(d, 2)

    def forward(self, x):
        h = self.ln1(self.inp(x))
        return self.out(self.ln2(h + self.f(h)))


class _AlreadyCentred(nn.Module):
    """A writer read by a norm and by a linear layer (so it cannot be centred) that is centred already."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.inp, self.ln, self.side, self.out = nn.Linear(4, d), nn.LayerNorm(d), nn.Linear(d, 2), nn.Linear(d, 2)

    def forward(self, x):
        h = self.inp(x)
        return self.out(self.ln(h)) + self.side(h)


@pytest.mark.parametrize("case", ["upstream LayerNorm gain and bias", "writer centred already"])
def test_load_state_dict_that_changes_any_weight_the_proof_relied_on_is_refused(case):
    """The referee's two loads that the centred-writer check let through: the gain and bias of a LayerNorm whose
    zero-mean output the fold relied on, and a writer the fold found centred already (not one it centred). Without
    the hook each loads and the folded model is off the original architecture (by far more than rounding) with the same weights;
    with it, ValueError naming the changed tensors, nothing loaded; the model's own state dict still loads."""
    torch.manual_seed(0)
    x = torch.randn(2, 5, 4, dtype=torch.float64)
    if case == "upstream LayerNorm gain and bias":
        model = _PostLNBlock().double().eval()
        changes = {"ln1.bias": torch.randn(8, dtype=torch.float64), "ln1.weight": 1 + 0.3 * torch.randn(8, dtype=torch.float64)}
    else:
        model = _AlreadyCentred().double().eval()
        with torch.no_grad():
            model.inp.weight.sub_(model.inp.weight.mean(0, keepdim=True))
            model.inp.bias.sub_(model.inp.bias.mean())
        changes = {"inp.weight": model.inp.weight.detach() + 0.5 * torch.randn(8, 4, dtype=torch.float64)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folded = fold_layernorms(model, (x,))
    state = copy.deepcopy(folded.state_dict())
    state.update(changes)
    same_weights = copy.deepcopy(model)
    same_weights.load_state_dict(state)
    unguarded = copy.deepcopy(folded)
    unguarded._load_state_dict_pre_hooks.clear()
    unguarded.load_state_dict(state)
    assert relative_output_difference(same_weights, unguarded, (x,)) > 1e-3  # what the refusal prevents (float64)
    before = copy.deepcopy(folded.state_dict())
    with pytest.raises(ValueError, match=r"proved equal to the original for its own weights.*" + sorted(changes)[0]):
        folded.load_state_dict(state)
    assert all(torch.equal(before[k], v) for k, v in folded.state_dict().items())
    folded.load_state_dict(before)
    assert relative_output_difference(model, folded, (x,)) <= check_tolerance(torch.float64)


def test_an_untied_and_folded_lm_reloaded_with_from_pretrained_is_not_tied_again():
    """Referee 17 of chapter 7, finding 6: center_unembed(untie=True) gave the head its own weight but left
    config.tie_word_embeddings True; after save_pretrained and a plain from_pretrained, resize_token_embeddings (which
    calls tie_weights) tied the unembedding to the centred embedding again, and the log-probabilities moved by 11.6,
    silently. The copy's configuration now says the head is untied (and so does a fold of a head untied by hand)."""
    import tempfile

    tf = pytest.importorskip("transformers")
    from lnbook.folding.softmax_shifts import center_unembed

    torch.manual_seed(0)
    model = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln" in name:
                p.add_(0.3 * torch.randn_like(p))
        model.transformer.wte.weight.add_(torch.randn(64, 1))  # embedding rows with non-zero means
    ids = torch.randint(0, 64, (2, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        untied = center_unembed(model, "lm_head", (ids,), untie=True)
        folded = fold_layernorms(untied, (ids,))
    assert model.config.tie_word_embeddings and not untied.config.tie_word_embeddings
    with torch.no_grad():
        want = model(ids).logits.log_softmax(-1)
    with tempfile.TemporaryDirectory() as folder:
        folded.save_pretrained(folder)
        reloaded = tf.GPT2LMHeadModel.from_pretrained(folder).eval()
    reloaded.resize_token_embeddings(64)
    assert reloaded.lm_head.weight is not reloaded.transformer.wte.weight
    with torch.no_grad():
        assert float((reloaded(ids).logits.log_softmax(-1) - want).abs().max()) < 1e-3
    by_hand = copy.deepcopy(model)  # untied by hand, the flag left stale: the fold declares it
    by_hand.lm_head.weight = torch.nn.Parameter(by_hand.lm_head.weight.detach().clone())
    assert not fold_layernorms(by_hand, (ids,)).config.tie_word_embeddings


def test_weights_that_lack_only_some_norm_parameters_or_the_wrong_norms_are_refused():
    """Referee 23 of chapter 7, finding 2: load_folded set any missing LayerNorm key to 1 or 0 and loaded, so a damaged
    file (one gain dropped from a fold with affine='keep') gave a model 0.21 away from the original, silently. Missing
    norm parameters are accepted only as an affine='fold' fold leaves them: every gain and bias of exactly the norms
    the redone fold swaps."""
    model = _block()
    keep = fold_layernorms(model, _x()).state_dict()
    fresh = Block().double().eval()
    with pytest.raises(ValueError, match=r"lacks some affine parameters of LayerNorm\(s\) \['ln2'\] but has \['ln2.bias'\]"):
        load_folded(fresh, _x(), state_dict={k: v for k, v in keep.items() if k != "ln2.weight"})
    # both parameters of a norm that a 'keep' fold swapped: not what any fold leaves (an affine='fold' fold of this
    # block leaves out ln1's and ln2's; without ln1's the redone fold still swaps both)
    with pytest.raises(ValueError, match=r"lack the gains and biases of LayerNorm\(s\) \['ln2'\].*redone at this example swaps \['ln1', 'ln2'\]"):
        load_folded(fresh, _x(), state_dict={k: v for k, v in keep.items() if k not in ("ln2.weight", "ln2.bias")})
    folded = fold_layernorms(model, _x(), affine="fold")
    again = load_folded(fresh, _x(), state_dict=folded.state_dict())  # the saved affine fold itself still loads
    assert swapped_norms(again, model) == ["ln1", "ln2"]
    assert relative_output_difference(model, again, _x(3, 4)) <= check_tolerance(torch.float64)


@needs_transformers
def test_a_save_pretrained_directory_missing_a_norm_gain_of_a_keep_fold_is_refused(tmp_path):
    """Referee 23 of chapter 7, finding 2, the Hugging Face route: a folded GPT-2 (affine='keep', recorded in its config)
    saved with save_pretrained, one LayerNorm gain removed from the safetensors file: load_folded loaded it, the logits
    off by 0.11 of 0.62. Now refused: the record says 'keep', so no norm parameter may be missing."""
    from safetensors.torch import load_file, save_file

    from lnbook.folding.real_models import build_real_model

    model, args, kwargs = build_real_model("gpt2")
    fold_layernorms(model, args, kwargs).save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    key = next(k for k in weights if k.endswith("ln_2.weight"))
    save_file({k: v for k, v in weights.items() if k != key}, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="lacks some affine parameters"):
        load_folded(tmp_path, args, kwargs)


def test_affine_fold_warns_only_when_it_adds_a_parameter_and_a_plain_reload_then_drops_it():
    """Referee 33 of chapter 7, finding 4: with affine="fold", a bias-less linear layer reading a swapped norm gets a
    new bias; a plain load_state_dict(strict=False) into the original architecture (what from_pretrained does) drops
    it and computes another function, and nothing said so. fold_layernorms now warns, naming the new parameters; a
    fold that adds none (affine="keep", or readers with biases) does not warn."""
    torch.manual_seed(0)
    model = randomise_norms(nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 3, bias=False))).double().eval()
    with pytest.warns(UserWarning, match=r"added 1 bias that the architecture lacks.*\(2.bias\)"):
        folded = fold_layernorms(model, _x(), affine="fold")
    plain = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 3, bias=False)).double().eval()
    _, unexpected = plain.load_state_dict(folded.state_dict(), strict=False)
    assert unexpected == ["2.bias"] and relative_output_difference(model, plain, _x(3, 4)) > 0.01  # what the warning prevents
    for affine, bias in (("keep", False), ("fold", True)):
        torch.manual_seed(0)
        other = randomise_norms(nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 3, bias=bias))).double().eval()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fold_layernorms(other, _x(), affine=affine)
