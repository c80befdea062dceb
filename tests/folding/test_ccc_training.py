"""Chapter 7: training under the column-centred constraint with RMSNorm (lnbook.folding.ccc_training)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from lnbook.folding.ccc_training import (
    bake,
    ccc_experiment,
    constrain_writers,
    make_variant,
    stream_mean,
    stream_writers,
    train_variant,
    training_steps,
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


def _by_name(model: nn.Module) -> dict[str, torch.Tensor]:
    """Trained parameters by the name they have without the CCC reparametrisation (``embed.weight``, not
    ``embed.parametrizations.weight.original``)."""
    return {k.replace(".parametrizations.", ".").replace(".original", ""): v.detach()  # shares the storage
            for k, v in model.named_parameters() if v.requires_grad}


# Tolerance from float64 rounding (prop-ch7-ccc-training holds in exact arithmetic). The two runs evaluate the same
# exact loss and gradient in different orders (the CCC stream's mean is rounding, not 0; LayerNorm subtracts a mean
# that RMSNorm does not), so a gradient entry differs by about N * U times the gradient's scale (at most 1 here),
# N = 4 * d = 64 the longest sum of the model (the MLP's hidden width), U = 2**-53. AdamW divides by
# sqrt(v_hat) + EPS_ADAM, which magnifies an absolute gradient difference by at most 1 / EPS_ADAM, so each step
# adds at most LR * N * U / EPS_ADAM to a parameter; over STEPS steps (growth through the dynamics over so few
# steps is not bounded here, and the observed differences are about 1e-12, far inside):
STEPS, LR, N, U, EPS_ADAM = 30, 3e-3, 64, 2.0**-53, 1e-8
TOL = STEPS * LR * N * U / EPS_ADAM  # about 6e-8; with the LN biases trained instead of fixed: above 1e-3


def _lockstep(a: nn.Module, b: nn.Module, seed: int, optimizer=None):
    """Train ``a`` and ``b`` on the same batches, step by step; the largest loss difference over the steps."""
    data = _data(seed)
    pairs = zip(training_steps(a, data, steps=STEPS, batch_size=8, lr=LR, seed=seed, optimizer=optimizer),
                training_steps(b, data, steps=STEPS, batch_size=8, lr=LR, seed=seed, optimizer=optimizer))
    return max(abs(la - lb) for la, lb in pairs)


@pytest.mark.parametrize("seed", [0, 1])
def test_training_under_the_constraint_is_layernorm_training_with_its_biases_fixed_at_zero(seed):
    """prop-ch7-ccc-training (2): from the same initial weights, CCC + RMSNorm and LayerNorm with its biases fixed
    at 0 take the same AdamW steps (weight decay included): equal losses and stored weights at every step."""
    shape = dict(vocab=12, d_model=16, n_layers=2, seq=8, seed=seed, dtype=torch.float64)
    ccc, ln0 = make_variant("ccc-rms", **shape), make_variant("ln-bias0", **shape)
    pc, p0 = _by_name(ccc), _by_name(ln0)
    assert set(p0) == set(pc) and all(torch.equal(pc[k], v) for k, v in p0.items())  # same start
    biases = {k: v for k, v in ln0.named_parameters() if not v.requires_grad}
    assert sorted(biases) == ["blocks.0.norm1.bias", "blocks.0.norm2.bias", "blocks.1.norm1.bias",
                              "blocks.1.norm2.bias", "final_norm.bias"]  # the LN biases: frozen, not parameters
    data = _data(seed)
    steps = zip(training_steps(ccc, data, steps=STEPS, batch_size=8, lr=LR, seed=seed),
                training_steps(ln0, data, steps=STEPS, batch_size=8, lr=LR, seed=seed))
    for la, lb in steps:  # step by step: the losses and every stored weight
        assert abs(la - lb) <= TOL
        assert max(float((pc[k] - v).abs().max()) for k, v in p0.items()) <= TOL
    assert all(float(b.abs().max()) == 0 for b in biases.values())
    held = _data(seed + 7, n=16)[0]
    with torch.no_grad():  # the same function at the end (the CCC model's weights baked in)
        assert float((bake(ccc).eval()(held) - ln0.eval()(held)).abs().max()) <= TOL
    # negative control: LayerNorm with trained biases (the lab's "ln") leaves the CCC run by far more
    ln = make_variant("ln", **shape)
    assert _lockstep(make_variant("ccc-rms", **shape), ln, seed) > 1e4 * TOL


APART_SHAPE = dict(vocab=12, d_model=16, n_layers=2, seq=8, seed=0, dtype=torch.float64)


def _started_apart_by_the_writers_means():
    """The CCC model from W_0 and the LayerNorm model (biases at zero) from the centred writers P W_0: both models,
    their parameters by name (sharing storage, so they follow training) and the names of the writer tensors."""
    ccc, ln0 = make_variant("ccc-rms", **APART_SHAPE), make_variant("ln-bias0", **APART_SHAPE)
    with torch.no_grad():
        for module, name, dim in stream_writers(ln0):
            p = getattr(module, name)
            p.sub_(p.mean(dim, keepdim=True))
    pc, p0 = _by_name(ccc), _by_name(ln0)
    writers = {k for k in p0 if k.split(".")[0] in ("embed", "pos") or ".attn.out." in k or ".mlp.2." in k}
    return ccc, ln0, pc, p0, writers


def test_writers_initialised_apart_by_their_means_give_the_same_function_and_stay_apart():
    """prop-ch7-ccc-training (3): the LayerNorm model starts from the centred writers P W_0, the CCC model from W_0.
    Under AdamW (coordinate-wise, decoupled weight decay lam) the losses agree at every step and the stored writers
    differ by (1 - lr * lam)^t (W_0 - P W_0); under Adam with L2 weight decay in the gradient they part."""
    ccc, ln0, pc, p0, writers = _started_apart_by_the_writers_means()
    assert len(writers) == 2 + 2 * 2 * 2
    start = {k: (pc[k] - p0[k]).detach().clone() for k in writers}
    assert min(float(d.abs().max()) for d in start.values()) > 1e3 * TOL  # every writer starts apart, by its means
    data = _data(0)
    opt = []
    adamw = lambda params: opt.append(torch.optim.AdamW(params, lr=LR)) or opt[-1]  # noqa: E731
    for t, (la, lb) in enumerate(zip(training_steps(ccc, data, steps=STEPS, batch_size=8, seed=0, optimizer=adamw),
                                     training_steps(ln0, data, steps=STEPS, batch_size=8, seed=0, optimizer=adamw)), 1):
        assert abs(la - lb) <= TOL
        shrink = (1 - LR * opt[0].param_groups[0]["weight_decay"]) ** t
        assert max(float((pc[k] - p0[k] - (shrink * start[k] if k in writers else 0)).abs().max()) for k in p0) <= TOL
    # negative control: L2 decay added to the gradient reads the different means, and Adam's division mixes it in
    l2 = lambda params: torch.optim.Adam(params, lr=LR, weight_decay=0.1)  # noqa: E731
    ccc2, ln2 = make_variant("ccc-rms", **APART_SHAPE), make_variant("ln-bias0", **APART_SHAPE)
    with torch.no_grad():
        for module, name, dim in stream_writers(ln2):
            getattr(module, name).sub_(getattr(module, name).mean(dim, keepdim=True))
    assert _lockstep(ccc2, ln2, 0, optimizer=l2) > 1e4 * TOL


def test_writers_apart_by_their_means_under_momentum_with_l2_keep_the_function_but_not_the_rate():
    """The remark after prop-ch7-ccc-training (3) (referee 18 of chapter 7, finding 6): with momentum (SGD, not
    coordinate-wise), L2 decay in the gradient reads the different means, but the gradients of the loss agree, so the
    difference of the stored writers stays a multiple c_t of the starting mean component (the functions still agree:
    equal losses at every step), with c_t from the scalar recursion buf = mu buf + lam c, c -= lr buf, which is not
    part 3's rate (1 - lr lam)^t."""
    ccc, ln0, pc, p0, writers = _started_apart_by_the_writers_means()
    start = {k: (pc[k] - p0[k]).detach().clone() for k in writers}
    lr, mu, lam = 0.05, 0.9, 0.1
    sgd = lambda params: torch.optim.SGD(params, lr=lr, momentum=mu, weight_decay=lam)  # noqa: E731
    c, buf = 1.0, None
    runs = zip(training_steps(ccc, _data(0), steps=STEPS, batch_size=8, seed=0, optimizer=sgd),
               training_steps(ln0, _data(0), steps=STEPS, batch_size=8, seed=0, optimizer=sgd))
    for t, (la, lb) in enumerate(runs, 1):
        assert abs(la - lb) <= TOL, t
        buf = lam * c if buf is None else mu * buf + lam * c
        c -= lr * buf
        for k in p0:
            expected = c * start[k] if k in writers else 0
            assert float((pc[k] - p0[k] - expected).abs().max()) <= TOL, (t, k)
    assert abs(c - (1 - lr * lam) ** STEPS) > 1e-2  # not part 3's rate


def test_writers_apart_by_their_means_under_a_schedule_and_decay_per_tensor():
    """prop-ch7-ccc-training (3) with a learning-rate schedule and biases exempt from decay (referee 13 of chapter 7,
    finding 6): the losses still agree at every step, and each writer tensor p differs by
    prod_{s<t} (1 - lr_s * lam_p) (p_0 - p_0'), with lam_p = 0 for the one-dimensional tensors (biases and gains) and
    0.1 for the others, while the learning rate falls by 0.8 a step (the constant-step factor (1 - lr lam)^t is off by
    far more than the tolerance)."""
    ccc, ln0, pc, p0, writers = _started_apart_by_the_writers_means()
    start = {k: (pc[k] - p0[k]).detach().clone() for k in writers}
    assert any(k.endswith("bias") and float(start[k].abs().max()) > 1e3 * TOL for k in start)  # a bias starts apart
    lam = {k: 0.1 if p0[k].dim() > 1 else 0.0 for k in p0}
    lrs = []

    def scheduled(params):
        params = list(params)
        opt = torch.optim.AdamW([{"params": [q for q in params if q.dim() > 1], "weight_decay": 0.1},
                                 {"params": [q for q in params if q.dim() <= 1], "weight_decay": 0.0}], lr=LR)
        opt.register_step_pre_hook(lambda o, a, k: lrs.append(o.param_groups[0]["lr"]) if o is opts[0] else None)
        opt.register_step_post_hook(lambda o, a, k: [g.__setitem__("lr", 0.8 * g["lr"]) for g in o.param_groups])
        opts.append(opt)
        return opt

    opts = []
    runs = zip(training_steps(ccc, _data(0), steps=STEPS, batch_size=8, seed=0, optimizer=scheduled),
               training_steps(ln0, _data(0), steps=STEPS, batch_size=8, seed=0, optimizer=scheduled))
    for t, (la, lb) in enumerate(runs, 1):
        assert abs(la - lb) <= TOL
        for k in p0:
            shrink = math.prod(1 - lr * lam[k] for lr in lrs[:t])
            expected = shrink * start[k] if k in writers else 0
            assert float((pc[k] - p0[k] - expected).abs().max()) <= TOL, (t, k)
    constant = (1 - LR * 0.1) ** STEPS  # the constant-step factor of the statement before: visibly another number
    weight = next(k for k in writers if lam[k] > 0)
    assert float((pc[weight] - p0[weight] - constant * start[weight]).abs().max()) > 1e3 * TOL


def test_layernorm_biases_add_no_function_to_the_book_transformer():
    """Every LayerNorm of the pre-LN TinyTransformer is read only by linear layers with biases (the attention's qkv,
    the MLP's first layer, the unembedding): W (g * z + beta) + b = W (g * z) + (W beta + b), so moving W beta into
    b and setting beta = 0 keeps the function. (What the LN biases change is the parametrisation, so the path.)"""
    torch.manual_seed(0)
    model = TinyTransformer(12, 16, 4, 2, max_len=8, norm="ln").double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))  # every bias away from 0
    moved = TinyTransformer(12, 16, 4, 2, max_len=8, norm="ln").double().eval()
    moved.load_state_dict(model.state_dict())
    pairs = [(b.norm1, b.attn.qkv) for b in moved.blocks] + [(b.norm2, b.mlp[0]) for b in moved.blocks]
    pairs.append((moved.final_norm, moved.unembed))
    with torch.no_grad():
        for norm, reader in pairs:
            reader.bias.add_(reader.weight @ norm.bias)
            norm.bias.zero_()
    x = _data()[0][:4]
    with torch.no_grad():
        a, b = model(x), moved(x)
    # float64: each moved bias W beta is a d = 16-term sum (error at most d u |W| |beta|), the rest is computed the
    # same way in both; 64 d u times the logits' scale leaves room for its passage through two blocks
    assert float((a - b).abs().max()) <= 64 * 16 * 2.0**-53 * float(a.abs().max())
    assert float(model.final_norm.bias.abs().max()) > 0.1 and all(float(n.bias.abs().max()) == 0 for n, _ in pairs)
    partial = TinyTransformer(12, 16, 4, 2, max_len=8, norm="ln").double().eval()  # negative control: the
    partial.load_state_dict(moved.state_dict())  # final norm's bias dropped without moving it into the unembedding
    with torch.no_grad():
        partial.unembed.bias.copy_(model.unembed.bias)
        assert float((partial(x) - a).abs().max()) > 1e-2


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


def test_the_book_transformer_computes_the_same_in_training_and_in_evaluation_mode():
    """prop-ch7-ccc-training asks that the LayerNorms fold in the function the network computes while training
    (referee 13 of chapter 7, finding 2: dropout between a writer and a norm breaks (1) in training mode): the lab's
    TinyTransformer has no dropout or other training-only operation, so its training-mode function is its
    evaluation-mode one, the graph whose foldability the detector judges."""
    torch.manual_seed(0)
    model = make_variant("ln", vocab=12, d_model=16, n_layers=2, seq=8, seed=0, dtype=torch.float64)
    assert not any(isinstance(m, (nn.Dropout, nn.modules.batchnorm._BatchNorm)) for m in model.modules())
    x = _data(0)[0][:4]
    with torch.no_grad():
        assert torch.equal(model.train()(x), model.eval()(x))


def test_a_post_ln_block_foldable_only_at_initialisation_is_outside_the_hypothesis():
    """prop-ch7-ccc-training asks the LayerNorms to fold through S at every value of the trained parameters. A post-LN
    block (h = LN1(x) with gain g, then LN2(h + P W h)) folds at initialisation (g = 1: LN1's output is zero-mean) but
    not once g is trained: at g = 1 the CCC + RMSNorm model and LayerNorm with its biases at 0 have the same loss, and
    already their gradients with respect to g differ, so their trajectories part (referee 27 of chapter 7,
    finding 1). Float64; the gaps are compared with 1e-6, far above rounding (1e-15)."""
    g = torch.Generator().manual_seed(0)
    d, n = 6, 10
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    W = torch.randn(d, d, generator=g, dtype=torch.float64)
    target = torch.randn(n, d, generator=g, dtype=torch.float64)
    P = torch.eye(d, dtype=torch.float64) - 1.0 / d

    def loss(gain, norm, centred):
        Wc = P @ W if centred else W
        xin = P @ x.T if centred else x.T  # the embedding is a writer of S too
        h = gain * norm(xin.T)
        return ((norm(h + h @ Wc.T) - target) ** 2).mean()

    ln = lambda v: torch.nn.functional.layer_norm(v, (d,), eps=1e-5)
    rms = lambda v: torch.nn.functional.rms_norm(v, (d,), eps=1e-5)
    gain = torch.ones(d, dtype=torch.float64, requires_grad=True)
    l_ln, l_rms = loss(gain, ln, False), loss(gain, rms, True)
    assert abs(float(l_ln - l_rms)) < 1e-12  # at initialisation the fold holds ...
    (g_ln,), (g_rms,) = torch.autograd.grad(l_ln, gain), torch.autograd.grad(l_rms, gain)
    assert float((g_ln - g_rms).abs().max()) > 1e-6  # ... but the gradient in the gain already differs
    moved = torch.linspace(0.5, 1.5, d, dtype=torch.float64)
    assert abs(float(loss(moved, ln, False) - loss(moved, rms, True))) > 1e-6  # and so do the functions once g moves
