"""lnbook.training (the one loop), lnbook.models (norm switch) and lnbook.data (made or shipped datasets)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from lnbook.data import digits, random_labels, sphere_octants, spiral, with_random_labels
from lnbook.models import NORMS, TinyTransformer, make_norm, mlp
from lnbook.norms import group_layer_norm, parallel_layer_norm
from lnbook.training import History, TrainingDiverged, evaluate, train


# --- models ---------------------------------------------------------------------------------


def _probe(width: int) -> torch.Tensor:
    return torch.randn(5, width, generator=torch.Generator().manual_seed(1)) * 3 + 2


def test_make_norm_computes_what_its_name_says():
    x = _probe(12)
    centred = x - x.mean(-1, keepdim=True)
    ln = centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + 1e-5)
    rms = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(make_norm("ln", 12)(x), ln)
    torch.testing.assert_close(make_norm("rms", 12)(x), rms)
    torch.testing.assert_close(make_norm("none", 12)(x), x)
    torch.testing.assert_close(make_norm("lng", 12, groups=3)(x), group_layer_norm(x, 3))
    torch.testing.assert_close(make_norm("pln", 12, group_size=4, p=1.5)(x), parallel_layer_norm(x, 4, p=1.5))
    # LN-G with one group is LN; the affine form starts as the plain norm and learns a gain
    torch.testing.assert_close(make_norm("lng", 12, groups=1)(x), ln)
    aff = make_norm("lng", 12, groups=3, affine=True)
    torch.testing.assert_close(aff(x), group_layer_norm(x, 3))
    assert sum(p.numel() for p in aff.parameters()) == 24
    # eps is passed through to RMSNorm (torch's default would be the dtype's machine epsilon)
    assert make_norm("rms", 12, eps=1e-3).eps == 1e-3


def test_make_norm_refuses_bad_configurations():
    with pytest.raises(ValueError, match="norm must be one of"):
        make_norm("batch", 8)
    with pytest.raises(ValueError, match="does not divide the width"):
        make_norm("lng", 10, groups=3)
    with pytest.raises(ValueError, match="needs groups="):
        make_norm("lng", 10)
    with pytest.raises(ValueError, match="does not divide the width"):
        make_norm("pln", 10, group_size=4)
    with pytest.raises(ValueError, match="only used by norm='lng'"):
        make_norm("ln", 10, groups=2)
    with pytest.raises(ValueError, match="width >= 2"):
        make_norm("ln", 1)


def test_mlp_layouts():
    net = mlp(2, 3, 2, 2, norm="ln")
    kinds = [type(m).__name__ for m in net]
    assert kinds == ["Linear", "LayerNorm", "Linear", "LayerNorm", "Linear"]
    relu = mlp(4, 8, 1, 3, norm="none", activation="relu")
    assert [type(m).__name__ for m in relu] == ["Linear", "Identity", "ReLU", "Linear"]
    # a linear net is an affine map: f(a x + (1-a) z) = a f(x) + (1-a) f(z); an LN-Net is not
    lin, lnnet = mlp(4, 8, 3, 2, norm="none"), mlp(4, 8, 3, 2, norm="ln")
    x, z = _probe(4), _probe(4).flip(0)
    for net, affine in ((lin, True), (lnnet, False)):
        with torch.no_grad():
            mix = net(0.3 * x + 0.7 * z) - (0.3 * net(x) + 0.7 * net(z))
        assert bool(mix.abs().max() < 1e-5) is affine
    with pytest.raises(ValueError, match="activation must be one of"):
        mlp(2, 3, 1, 2, activation="swishy")


@pytest.mark.parametrize("norm,kw", [("ln", {}), ("rms", {}), ("lng", {"groups": 4}), ("pln", {"group_size": 8})])
def test_tiny_transformer_runs_and_is_causal(norm, kw):
    torch.manual_seed(0)
    model = TinyTransformer(vocab_size=11, d_model=32, n_heads=4, n_layers=2, max_len=16, norm=norm, **kw)
    tokens = torch.randint(11, (3, 10), generator=torch.Generator().manual_seed(0))
    logits = model(tokens)
    assert logits.shape == (3, 10, 11)
    # causality: changing the last token changes no earlier position's logits
    changed = tokens.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 11
    torch.testing.assert_close(model(changed)[:, :-1], logits[:, :-1])
    assert not torch.allclose(model(changed)[:, -1], logits[:, -1])
    states = model.hidden_states(tokens)
    assert len(states) == 3 and all(s.shape == (3, 10, 32) for s in states)


def test_tiny_transformer_post_norm_and_bad_input():
    model = TinyTransformer(vocab_size=7, d_model=16, n_heads=2, n_layers=1, max_len=8, norm_first=False)
    assert isinstance(model.final_norm, nn.Identity)
    tokens = torch.zeros(2, 8, dtype=torch.long)
    # post-norm: the last residual state is the output of a LayerNorm (mean 0, variance 1 before the affine)
    last = model.hidden_states(tokens)[-1]
    torch.testing.assert_close(last.mean(-1), torch.zeros(2, 8), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="exceeds max_len"):
        model.hidden_states(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(TypeError, match="torch.long"):
        model.hidden_states(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="does not divide d_model"):
        TinyTransformer(vocab_size=7, d_model=10, n_heads=3)


# --- data -----------------------------------------------------------------------------------


def test_digits_are_shipped():
    X, y = digits()
    assert X.shape == (1797, 64) and y.shape == (1797,) and float(X.min()) == 0 and float(X.max()) == 1
    assert sorted(y.unique().tolist()) == list(range(10))


def test_random_labels_are_seeded_and_uniform():
    a, b, c = random_labels(20_000, 10, seed=3), random_labels(20_000, 10, seed=3), random_labels(20_000, 10, seed=4)
    assert torch.equal(a, b) and not torch.equal(a, c)
    counts = torch.bincount(a, minlength=10).double() / 20_000
    assert counts.sub(0.1).abs().max() < 0.01  # 5 standard errors of a uniform draw
    X, y = with_random_labels(torch.zeros(7, 3), num_classes=4, seed=0)
    assert y.shape == (7,) and int(y.max()) < 4
    with pytest.raises(ValueError, match="num_classes must be >= 2"):
        random_labels(10, 1)


def test_spiral_arms_are_half_a_turn_apart():
    X, y = spiral(400, noise=0.0, seed=1)
    assert X.shape == (400, 2) and torch.equal(torch.bincount(y), torch.tensor([200, 200]))
    r = X.double().norm(dim=1)
    assert 0.05 - 1e-6 <= float(r.min()) and float(r.max()) <= 1 + 1e-6
    # without noise, every point of arm 1 turned by pi lies on arm 0's curve: radius t, angle 2 pi turns t
    turned = -X[y == 1].double()
    t = turned.norm(dim=1)
    angle = torch.atan2(turned[:, 1], turned[:, 0])
    resid = torch.remainder(angle - 2 * math.pi * 1.5 * t + math.pi, 2 * math.pi) - math.pi
    assert float(resid.abs().max()) < 1e-5
    assert torch.equal(spiral(10, seed=2)[0], spiral(10, seed=2)[0])
    with pytest.raises(ValueError, match="n must be even"):
        spiral(11)
    with pytest.raises(ValueError, match="noise must be"):
        spiral(10, noise=float("nan"))


def test_sphere_octants_alternate():
    X, y = sphere_octants(4000, seed=0)
    torch.testing.assert_close(X.double().norm(dim=1), torch.ones(4000, dtype=torch.float64))
    # flipping the sign of one coordinate moves a point into a face-neighbour octant: label flips
    for axis in range(3):
        flipped = X.clone()
        flipped[:, axis] *= -1
        assert torch.equal((flipped > 0).sum(1) % 2, 1 - y)
    assert abs(float(y.double().mean()) - 0.5) < 0.05
    with pytest.raises(ValueError, match="seed must be"):
        sphere_octants(100, seed=-1)


# --- training -------------------------------------------------------------------------------


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


def test_train_is_deterministic_and_mini_batches_cover_the_data():
    def run():
        torch.manual_seed(1)
        X, y = spiral(64, seed=0)
        model = mlp(2, 8, 2, 2, norm="ln")
        return train(model, X, y, epochs=5, batch_size=10, lr=0.05, progress=False, report=False)

    a, b = run(), run()
    assert a.loss == b.loss and a.accuracy == b.accuracy
    assert a.samples_seen == 5 * 64  # every epoch visits every sample once (last batch partial)


def test_train_regression_reaches_target_loss():
    torch.manual_seed(0)
    x = torch.linspace(-1, 1, 64).unsqueeze(1)
    y = 3 * x.squeeze(1) - 1
    model = mlp(1, 4, 0, 1)  # a single linear layer fits a line
    h = train(model, x, y, task="regression", epochs=2000, batch_size=None, optimizer="adam", lr=0.05,
              target_loss=1e-6, progress=False, report=False)
    assert h.final_loss <= 1e-6 and h.stopped_early and math.isnan(h.final_accuracy)


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
