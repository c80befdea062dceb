"""Chapter 7: training under the column-centred constraint with RMSNorm (lnbook.folding.ccc_training)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lnbook.folding.ccc_training import (
    bake,
    ccc_experiment,
    constrain_writers,
    stream_mean,
    stream_writers,
    train_variant,
)
from lnbook.ml.models import TinyTransformer


def _data(seed=0, n=64, vocab=12, seq=8):
    g = torch.Generator().manual_seed(seed)
    X = torch.randint(0, vocab, (n, seq), generator=g)
    return X, (X + 1) % vocab  # next token = this token + 1: learnable in a few steps


def _ln_twin(rms_model: TinyTransformer) -> TinyTransformer:
    """The same weights in a LayerNorm model (LN gain = RMSNorm gain, LN bias 0)."""
    twin = TinyTransformer(12, 16, 4, 2, max_len=8, norm="ln")
    state = {k: v for k, v in rms_model.state_dict().items()}
    for k, v in twin.state_dict().items():
        if k not in state:  # the LN biases
            state[k] = torch.zeros_like(v)
    twin.load_state_dict(state)
    return twin.eval()


def test_the_constraint_keeps_the_stream_centred_during_training_so_rmsnorm_is_layernorm():
    data, held = _data(0), _data(1, n=16)
    result, model = train_variant("ccc-rms", data, held, vocab=12, d_model=16, n_layers=2, steps=30, batch_size=8)
    assert result.stream_mean < 1e-5 and result.losses[-1] < result.losses[0]
    assert float(model.embed.weight.mean(1).abs().max()) < 1e-6
    assert float(model.blocks[0].mlp[2].weight.mean(0).abs().max()) < 1e-6
    twin = _ln_twin(model)
    with torch.no_grad():
        assert torch.allclose(model(held[0]), twin(held[0]), atol=1e-4, rtol=0)  # float32: the same function
    free, free_model = train_variant("rms", data, held, vocab=12, d_model=16, n_layers=2, steps=30, batch_size=8)
    assert free.stream_mean > 1e-2  # without the constraint the stream leaves 1-perp ...
    with torch.no_grad():  # ... and RMSNorm is not LayerNorm there
        assert float((free_model(held[0]) - _ln_twin(free_model)(held[0])).abs().max()) > 1e-2


def test_constrain_and_bake_keep_the_function():
    torch.manual_seed(0)
    model = TinyTransformer(12, 16, 4, 2, max_len=8, norm="rms").eval()
    x = _data()[0][:4]
    constrain_writers(model)
    with torch.no_grad():
        before = model(x)
    assert stream_mean(model, x) < 1e-6
    bake(model)
    assert not any(hasattr(m, "parametrizations") for m in model.modules())
    with torch.no_grad():
        assert torch.equal(before, model(x))
    assert len(stream_writers(model)) == 2 + 2 * 2 * 2


def test_bad_input_and_determinism():
    data, held = _data(0), _data(1, n=16)
    with pytest.raises(ValueError, match="variant"):
        train_variant("bn", data, held, vocab=12)
    with pytest.raises(TypeError, match="pre-LN"):
        stream_writers(TinyTransformer(12, 16, 4, 1, max_len=8, norm_first=False))
    with pytest.raises(TypeError, match="pre-LN"):
        stream_writers(nn.Linear(2, 2))
    a = train_variant("ln", data, held, vocab=12, d_model=16, steps=5, batch_size=8, seed=3)[0]
    b = train_variant("ln", data, held, vocab=12, d_model=16, steps=5, batch_size=8, seed=3)[0]
    assert a.losses == b.losses and a.held_out_loss == b.held_out_loss


def test_ccc_experiment_returns_every_run_and_a_time_per_variant():
    runs, times = ccc_experiment(_data(0), _data(1, n=16), vocab=12, seeds=(0, 1), variants=("ln", "ccc-rms"),
                                 d_model=16, steps=4, batch_size=8, timing_repeats=2, progress=False)
    assert [(r.variant, r.seed) for r in runs] == [("ln", 0), ("ccc-rms", 0), ("ln", 1), ("ccc-rms", 1)]
    assert set(times) == {"ln", "ccc-rms"} and all(t > 0 for t in times.values())
