"""Chapter 7: the speed benchmark's helpers (lnbook.folding.speed)."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from lnbook.folding.fold import fold_layernorms, refuse_training_mode
from lnbook.folding.speed import (ablation_share, best_kernels, guard_seconds, interleaved_median_times, without_norms,
                                 without_shape_guards)
from lnbook.ml.models import TinyTransformer


def test_interleaved_median_times_is_a_median_not_a_minimum():
    calls = {"a": 0}

    def a():  # every third timed block is slow: the minimum would hide it, the median does not
        calls["a"] += 1
        time.sleep(0.004 if calls["a"] % 3 == 0 else 0.001)

    t = interleaved_median_times({"a": a, "b": lambda: time.sleep(0.002)}, repeats=9, inner=1, warmup=0)
    assert 0.0015 <= t["b"] < 0.01
    assert t["a"] >= 0.0009 and set(t) == {"a", "b"}
    with pytest.raises(ValueError, match="empty"):
        interleaved_median_times({})
    with pytest.raises(ValueError, match="clock"):
        interleaved_median_times({"a": a}, clock="sundial")


def test_best_kernels_takes_the_faster_of_eager_and_compiled():
    best = best_kernels({"ln": 2.0, "rms": 1.0}, {"ln": 1.5, "rms": 3.0})
    assert best == {"ln": (1.5, "compiled"), "rms": (1.0, "eager")}
    with pytest.raises(ValueError, match="different kernels"):
        best_kernels({"ln": 1.0}, {"rms": 1.0})


def test_without_norms_replaces_every_norm_and_keeps_the_original():
    torch.manual_seed(0)
    model = TinyTransformer(10, 16, 2, 2, max_len=8).eval()
    bare = without_norms(model)
    assert not any(isinstance(m, (nn.LayerNorm, nn.RMSNorm)) for m in bare.modules())
    assert sum(isinstance(m, nn.LayerNorm) for m in model.modules()) == 5
    tokens = torch.randint(0, 10, (2, 8))
    with torch.no_grad():
        assert bare(tokens).shape == (2, 8, 10) and not torch.allclose(bare(tokens), model(tokens))
    with pytest.raises(ValueError, match="no LayerNorm"):
        without_norms(nn.Linear(2, 2))


def test_ablation_share():
    assert ablation_share(10.0, 9.0) == pytest.approx(0.1)
    assert ablation_share(10.0, 10.5) == pytest.approx(-0.05)  # noise can make it negative: reported as is
    with pytest.raises(ValueError, match="positive"):
        ablation_share(0.0, 1.0)


def test_without_shape_guards_removes_only_the_guard_and_keeps_the_folded_model():
    """The folded model refuses a sequence of length 1, outside its trace; the copy without the guard runs it, computes
    the same on the traced shape, and the folded model itself keeps its guard (the trace covers lengths >= 2)."""
    import warnings

    torch.manual_seed(0)
    model = TinyTransformer(10, 16, 2, 2, max_len=8).eval()
    tokens = torch.randint(0, 10, (2, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folded = fold_layernorms(model, tokens, affine="fold", prove_calls=False).eval()
    bare, guards = without_shape_guards(folded)
    assert sorted(type(g).__name__ for g in guards) == ["CallProver", "RefuseChangesSinceFolding"]
    assert refuse_training_mode in folded._forward_pre_hooks.values()  # the timed copy has no pre-hook of the fold
    assert refuse_training_mode not in bare._forward_pre_hooks.values()
    # no Python hook of the fold is left anywhere (the submodule-call guard's hooks on the path to each norm included)
    assert any(m._forward_pre_hooks or m._forward_hooks for m in folded.modules())
    assert not any(m._forward_pre_hooks or m._forward_hooks or m._forward_hooks_always_called for m in bare.modules())
    with pytest.raises(ValueError, match="part of"):
        folded.blocks[0](torch.randn(2, 8, 16))  # the returned model refuses a part called on its own
    assert bare.blocks[0](torch.randn(2, 8, 16)).shape == (2, 8, 16)  # the timed copy runs it: no guard is left
    with torch.no_grad():
        assert torch.equal(bare(tokens), folded(tokens))
        with pytest.raises(ValueError, match="input shapes and types of its trace"):
            folded(tokens[:, :1])
        assert bare(tokens[:, :1]).shape == (2, 1, 10)  # no guard: runs (for timing only)
    assert 0 < guard_seconds(folded, tokens, repeats=3, inner=2) < 0.1
    with pytest.raises(ValueError, match="no ShapeGuard"):
        without_shape_guards(model)


def test_new_call_class_seconds_times_a_proof_and_refuses_a_call_already_proved():
    """The first call of a new class proves it (one more proof made, none at the second call); a call
    of a class proved already, and a model without a call prover, are refused with the reason."""
    import warnings

    from lnbook.folding.speed import new_call_class_seconds

    torch.manual_seed(0)
    model = TinyTransformer(10, 16, 2, 2, max_len=8).eval()
    tokens = torch.randint(0, 10, (2, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folded = fold_layernorms(model, tokens)
    from lnbook.folding.call_proofs import CallProver

    prover = next(h for h in folded._forward_pre_hooks.values() if isinstance(h, CallProver))
    made = prover.proofs_made
    first, again = new_call_class_seconds(folded, tokens[:1, :5])  # batch 1 and length 5: not the traced class
    assert prover.proofs_made == made + 1 and first > 0 and again > 0  # one proof, at the first call only (no timing)
    with pytest.raises(ValueError, match="proved already"):
        new_call_class_seconds(folded, tokens[:1, :5])
    with pytest.raises(ValueError, match="no call prover"):
        new_call_class_seconds(model, tokens)
