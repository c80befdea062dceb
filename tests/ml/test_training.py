"""Tests of :mod:`lnbook.ml.training`.

Chapter 5: local MNIST / CIFAR-10 readers (on files made here), the recall task, the small CNN,
the sequence read-out, train() with held-out data, and the random-label runs.

Chapter 7 helpers: shipped text (lnbook.ml.text), timing (lnbook.util.timing), next-token training, TinyViT.

lnbook.ml.training (the one loop), lnbook.ml.models (norm switch) and lnbook.ml.data (made or shipped datasets).
"""

from __future__ import annotations

import math

import pytest
import torch

from lnbook.ml.data import (
    associative_recall,
    with_random_labels,
)
from lnbook.ml.models import (
    LastPosition,
    TinyTransformer,
    mlp,
)
from lnbook.ml.text import (
    next_token_windows,
)
from lnbook.ml.training import History, TrainingDiverged, evaluate, model_device, predict, train, train_for_epochs
from tests.strategies import devices


def test_last_position_and_train_with_tokens_and_validation():
    X, y = associative_recall(256, pairs=2, keys=4, values=4, seed=0)
    Xv, yv = associative_recall(64, pairs=2, keys=4, values=4, seed=1)
    torch.manual_seed(0)
    model = LastPosition(TinyTransformer(8, d_model=16, n_heads=2, n_layers=1, max_len=5, norm="lng", groups=2))
    assert model(X[:3]).shape == (3, 8)
    h = train(model, X, y, epochs=3, batch_size=64, optimizer="adam", lr=3e-3, stop_at_fit=False,
              progress=False, report=False, validation=(Xv, yv))
    assert len(h.val_accuracy) == len(h.accuracy) == 3 and len(h.val_loss) == 3
    assert all(0 <= a <= 1 for a in h.val_accuracy)
    assert History.from_dict(h.to_dict()).val_accuracy == h.val_accuracy
    with pytest.raises(ValueError, match="labels must lie in 0..7"):
        train(model, X, y, epochs=1, progress=False, report=False, validation=(Xv, yv + 8))
    with pytest.raises(TypeError, match="validation must be a pair"):
        train(model, X, y, epochs=1, progress=False, report=False, validation=Xv)
    with pytest.raises(TypeError, match="token ids"):
        train(model, X.int(), y, epochs=1, progress=False, report=False)


def test_fit_last_trains_bit_for_bit_as_fit_every():
    """fit="last" skips the pass over the training set at every log but the last: the parameters, the
    training losses and the held-out curve are bit for bit those of fit="every" (a Transformer with LN-G
    and a CNN, Adam and SGD with momentum), and the one fit it measures equals fit="every"'s last."""
    from lnbook.ml.models import small_cnn

    X, y = associative_recall(192, pairs=2, keys=4, values=4, seed=0)
    Xv, yv = associative_recall(64, pairs=2, keys=4, values=4, seed=1)
    img = torch.rand(160, 64, generator=torch.Generator().manual_seed(2)) * 2 - 1
    lab = torch.randint(0, 10, (160,), generator=torch.Generator().manual_seed(3))
    cases = [
        (lambda: LastPosition(TinyTransformer(8, d_model=16, n_heads=2, n_layers=1, max_len=5, norm="lng", groups=2)),
         X, y, (Xv, yv), dict(optimizer="adam", lr=3e-3)),
        (lambda: small_cnn((1, 8, 8), 10, channels=(4, 8), norm="lng", groups=2),
         img[:120], lab[:120], (img[120:], lab[120:]), dict(optimizer="sgd", lr=0.05, momentum=0.9)),
    ]
    for build, Xt, yt, val, kw in cases:
        runs = {}
        for fit in ("every", "last"):
            torch.manual_seed(0)
            model = build()
            h = train(model, Xt, yt, epochs=4, batch_size=32, seed=5, stop_at_fit=False, fit=fit, progress=False,
                      report=False, validation=val, **kw)
            runs[fit] = model.state_dict(), h
        (every, h_every), (last, h_last) = runs["every"], runs["last"]
        assert every.keys() == last.keys() and all(torch.equal(every[k], last[k]) for k in every)
        assert h_last.loss == h_every.loss and h_last.val_loss == h_every.val_loss
        assert h_last.val_accuracy == h_every.val_accuracy and h_last.epochs == h_every.epochs
        assert all(a != a for a in h_last.accuracy[:-1]) and h_last.accuracy[-1] == h_every.accuracy[-1]
        assert h_last.best_accuracy == h_last.final_accuracy == h_every.final_accuracy
        assert "train accuracy" in h_last.summary()
    with pytest.raises(ValueError, match="stop_at_fit=False"):
        train(build(), Xt, yt, epochs=1, fit="last", progress=False, report=False)
    # train_for_epochs is train with those four keywords fixed (the labs' comparisons): the same run, bit for bit
    torch.manual_seed(0)
    model = build()
    h_quiet = train_for_epochs(model, Xt, yt, epochs=4, batch_size=32, seed=5, validation=val, **kw)
    assert all(torch.equal(model.state_dict()[k], last[k]) for k in last) and h_quiet.loss == h_last.loss
    with pytest.raises(TypeError, match="fixes"):
        train_for_epochs(build(), Xt, yt, epochs=1, progress=True)
    with pytest.raises(ValueError, match="fit must be one of"):
        train(build(), Xt, yt, epochs=1, fit="never", stop_at_fit=False, progress=False, report=False)


def test_next_token_training_learns_a_periodic_text():
    ids = torch.arange(5).repeat(40)  # 0 1 2 3 4 0 1 2 ...: the next token is determined
    X, y = next_token_windows(ids, 8, 64, seed=0)
    torch.manual_seed(0)
    model = TinyTransformer(5, 16, 2, 1, max_len=8, norm="rms")
    history = train(model, X, y, epochs=30, task="next_token", batch_size=16, optimizer="adam", lr=1e-2,
                    progress=False, report=False, device="cpu")
    loss, acc = evaluate(model, X, y, "next_token")
    assert history.loss[-1] < history.loss[0] / 3 and acc == 1.0 and history.stopped_early


def test_next_token_training_refuses_bad_input():
    model = TinyTransformer(5, 16, 2, 1, max_len=8)
    X = torch.zeros(4, 8, dtype=torch.long)
    with pytest.raises(TypeError, match="torch.long tensor of token ids"):
        train(model, X.float(), X, epochs=1, task="next_token", progress=False)
    with pytest.raises(ValueError, match="same non-empty shape"):
        train(model, X, X[:, :5], epochs=1, task="next_token", progress=False)
    with pytest.raises(ValueError, match="labels must lie in"):
        train(model, X, X + 7, epochs=1, task="next_token", progress=False)


def test_train_fits_random_labels_and_stops_at_full_fit(capsys):
    torch.manual_seed(0)
    X = torch.randn(64, 16, generator=torch.Generator().manual_seed(0))
    X, y = with_random_labels(X, num_classes=4, seed=0)
    model = mlp(16, 64, 1, 4, norm="none", activation="relu")
    h = train(model, X, y, epochs=300, batch_size=None, optimizer="adam", lr=1e-2, progress=False, label="relu")
    assert h.final_accuracy == 1.0 and h.stopped_early and h.epochs_run < 300
    assert h.epochs_to_fit() == h.epochs_run and h.throughput > 0
    assert evaluate(model, X, y)[1] == 1.0
    assert "relu" in capsys.readouterr().out  # the summary line with the throughput is printed
    assert History.from_dict(h.to_dict()) == h


@pytest.mark.parametrize("device", devices)
def test_a_trained_model_is_evaluated_on_its_device_whatever_the_inputs(device):
    """train leaves the model on ``device``; evaluate and predict take CPU inputs and give CPU results (on CUDA,
    evaluate with CPU tensors crashed with "mat1 is on cpu", issue 29)."""
    X, y = with_random_labels(torch.randn(32, 4, generator=torch.Generator().manual_seed(0)), num_classes=2, seed=0)
    torch.manual_seed(0)
    model = mlp(4, 8, 1, 2)
    train(model, X, y, epochs=3, batch_size=None, progress=False, report=False, device=device)
    assert model_device(model).type == torch.device(device).type
    loss, acc = evaluate(model, X, y)
    assert isinstance(loss, float) and 0 <= acc <= 1
    out = predict(model, X)
    assert out.device.type == "cpu" and out.shape == (32, 2)
    assert evaluate(model, X.to(device), y.to(device)) == (loss, acc)


def test_train_refuses_bad_input_and_reports_divergence():
    model = mlp(3, 4, 1, 2)
    X = torch.randn(10, 3)
    with pytest.raises(ValueError, match=r"labels must lie in 0..1"):
        train(model, X, torch.full((10,), 2), epochs=1, progress=False)
    with pytest.raises(ValueError, match="X has 10 samples but y has 9"):
        train(model, X, torch.zeros(9, dtype=torch.long), epochs=1, progress=False)
    with pytest.raises(TypeError, match="1-D torch.long"):
        train(model, X, torch.zeros(10), epochs=1, progress=False)
    bad = X.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        train(model, bad, torch.zeros(10, dtype=torch.long), epochs=1, progress=False)
    with pytest.raises(ValueError, match="task must be one of"):
        train(model, X, torch.zeros(10, dtype=torch.long), epochs=1, task="ranking")
    with pytest.raises(TrainingDiverged, match="lower the learning rate"):
        train(mlp(3, 4, 1, 1, norm="none"), X * 1e3, torch.randn(10) * 1e3, task="regression", epochs=50,
              batch_size=None, lr=10.0, momentum=0.0, progress=False, report=False)


def test_warmup_cosine_lr_rises_linearly_then_falls_along_a_half_cosine_to_the_final_ratio():
    from lnbook.ml.training import warmup_cosine_lr

    base, total, warmup = 0.3, 110, 10
    lrs = [warmup_cosine_lr(s, total, warmup, base) for s in range(total)]
    assert lrs[:warmup] == pytest.approx([base * (s + 1) / warmup for s in range(warmup)], rel=1e-15)
    assert lrs[warmup] == pytest.approx(base, rel=1e-15)  # the cosine starts at the base rate
    t = (60 - warmup) / (total - warmup)
    assert lrs[60] == pytest.approx(0.001 * base + (base - 0.001 * base) * 0.5 * (1 + math.cos(math.pi * t)), rel=1e-15)
    assert all(a >= b for a, b in zip(lrs[warmup:], lrs[warmup + 1:]))  # non-increasing after the warm-up
    assert lrs[-1] > 0.001 * base and lrs[-1] < 0.001 * base + 1e-3 * base  # approaches the final ratio
    assert warmup_cosine_lr(0, 5, 0, 1.0, final_ratio=0.0) == 1.0
    with pytest.raises(ValueError, match="step"):
        warmup_cosine_lr(total, total, warmup, base)


def test_train_views_is_seeded_draws_views_from_its_generator_and_follows_the_schedule():
    """Two views per batch drawn from one seeded CPU generator; the learning rate of each step is
    warmup_cosine_lr's; the same seed gives the same losses, another seed other ones; a NaN loss raises."""
    from lnbook.ml.training import train_views, warmup_cosine_lr

    X = torch.randn(40, 6, generator=torch.Generator().manual_seed(0))
    seen, rates = [], []

    def augment(x, generator, view):
        seen.append((view, len(x)))
        return x + 0.1 * torch.randn(x.shape, generator=generator)

    def run(seed, momentum=0.9):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 4))
        weight = model[0].weight
        previous = [weight.detach().clone()]

        def record(step, total, m):  # with momentum 0 and no weight decay a step moves the weight by -lr * grad
            rates.append(float(((previous[0] - weight.detach()) * weight.grad).sum() / (weight.grad ** 2).sum()))
            previous[0] = weight.detach().clone()

        return train_views(model, X, lambda a, b: ((a - b) ** 2).mean() - 0.01 * a.var(0).mean(), augment,
                           epochs=3, batch_size=16, lr=0.1, momentum=momentum, warmup_epochs=1, seed=seed,
                           device="cpu", on_step=record)

    losses = run(0)
    assert len(losses) == 3 * (40 // 16)  # full batches only
    assert seen[:2] == [(0, 16), (1, 16)] and len(seen) == 2 * len(losses)
    assert losses == run(0) and losses != run(1)
    rates.clear()
    run(0, momentum=0.0)
    total, warm = len(losses), 40 // 16
    assert rates == pytest.approx([warmup_cosine_lr(s, total, warm, 0.1) for s in range(total)], rel=1e-4)
    model = torch.nn.Linear(6, 2)
    with pytest.raises(TrainingDiverged, match="step 0"):
        train_views(model, X, lambda a, b: a.sum() * float("nan"), augment, epochs=1, batch_size=8, lr=0.1,
                    device="cpu")
    with pytest.raises(ValueError, match="smaller batch_size"):
        train_views(model, X[:4], lambda a, b: a.sum(), augment, epochs=1, batch_size=8, lr=0.1, device="cpu")
