"""The digits SSL harness: data split, views, losses, a short training run, probes."""

from __future__ import annotations

import pytest
import torch

from lnbook.ml.data import digits_split
from lnbook.whitening.ssl import (
    DIGITS_EMB, DIGITS_SETTING, augment_digits, evaluate_run, few_shot_accuracy, knn_accuracy, ssl_loss, train_ssl,
)
from tests.strategies import devices


def test_digits_split_and_views():
    Xtr, ytr, Xte, yte = digits_split()
    assert Xtr.shape == (1347, 64) and Xte.shape == (450, 64) and float(Xtr.max()) <= 1.0
    assert torch.bincount(yte).min() >= 43  # stratified (450 / 10 classes)
    g = torch.Generator().manual_seed(0)
    v1, v2 = augment_digits(Xtr[:32], g), augment_digits(Xtr[:32], g)
    assert v1.shape == (32, 64) and not torch.equal(v1, v2)
    assert float((v1 - Xtr[:32]).abs().mean()) < 0.5  # a view, not noise


def test_ssl_losses():
    z = torch.randn(16, 40)
    assert float(ssl_loss(z, z, "mse")) == pytest.approx(0.0, abs=1e-6)
    assert float(ssl_loss(z, z, "iternorm")) == pytest.approx(0.0, abs=1e-5)
    assert float(ssl_loss(z, z, "intl")) > 0  # the trace loss
    with pytest.raises(ValueError, match="method"):
        ssl_loss(z, z, "barlow")


@pytest.mark.parametrize("device", devices)
def test_short_training_run_and_probes(device):
    """On CUDA the spectra were read with .numpy() on the device (the ch08 crash, issue 29): here the run trains on
    ``device`` from CPU data and every result (spectra, probes) comes back on the CPU."""
    Xtr, ytr, Xte, yte = digits_split()
    run = train_ssl(Xtr, "intl", 4, 0, seed=0, batch=64, epochs=1, hidden=32, feature_dim=16, projector_dim=32,
                    emb=96, record_every=5, device=device)
    assert next(run.encoder.parameters()).device.type == torch.device(device).type
    assert len(run.losses) == len(Xtr) // 64 and all(torch.isfinite(torch.tensor(run.losses)))
    assert len(run.spectra) >= 2 and abs(run.spectra[-1][1].sum() - 1) < 1e-9
    result = evaluate_run(run, Xtr, ytr, Xte, yte)
    assert 1 <= result["erank"] <= 96 and 0.1 < result["knn"] <= 1 and 0.1 < result["few_shot"] <= 1


@pytest.mark.parametrize("device", devices)
def test_probes_on_separable_features(device):
    g = torch.Generator().manual_seed(0)
    y = torch.arange(200) % 4
    F = torch.nn.functional.one_hot(y, 4).float() * 5 + 0.1 * torch.randn(200, 4, generator=g)
    F, y = F.to(device), y.to(device)  # features on the device, labels on the CPU: the probes move them
    assert knn_accuracy(F[:100], y[:100].cpu(), F[100:], y[100:], device=device) == 1.0
    assert knn_accuracy(F[:100], y[:100], F[100:], y[100:].cpu(), metric="euclidean") == 1.0
    assert few_shot_accuracy(F[:100], y[:100], F[100:], y[100:], shots=3) == 1.0


def test_every_axis_one_run_of_the_lab_whitens_a_singular_covariance():
    """The lab's axis-1 setting: a batch of DIGITS_SETTING['batch'] samples of DIGITS_EMB[1] features. Its feature
    covariance has rank at most N - 1 < d, so it is singular in every run; IterNorm at the lab's T = 4 accepts it and
    gives phi_4 on the range and 0 on the null direction (float32, tolerance from the dtype), ZCA with eps = 0
    refuses it."""
    from lnbook.whitening import covariance, iter_norm, iternorm_spectrum, zca_whiten

    N, d = DIGITS_SETTING["batch"], DIGITS_EMB[1]
    assert N - 1 < d  # rank <= N - 1 < d: singular
    Z = torch.randn(N, d, generator=torch.Generator().manual_seed(0))
    lam = torch.linalg.eigvalsh(covariance(Z.double(), axis=1))
    assert float(lam[0]) < 1e-12 * float(lam[-1])  # the null direction
    out = torch.linalg.eigvalsh(covariance(iter_norm(Z, 4, axis=1).double(), axis=1))
    expected = iternorm_spectrum(lam.clamp_min(0) / lam.sum(), 4)
    assert float((out - expected).abs().max()) < 1e-4  # float32 output: many units of roundoff, far below 1
    assert float(out[0]) < 1e-4
    with pytest.raises(ValueError, match="N >= d\\+1"):
        zca_whiten(Z, axis=1)


@pytest.mark.slow
def test_iternorm_t8_without_trace_loss_collapses_in_float64_too():
    """The float64 control of the lab's row "IterNorm, no trace loss, T = 8, axis 0" (chapter 8; referee finding 2).
    In float32 that row's IterNorm is off phi_8 on the collapsed spectra it meets; trained in float64 (the lab's
    ci setting, 15 epochs, seeds 0, 1, 2, check=False as in the lab) the iteration does apply phi_8 (output
    covariance within sqrt(u_64) of V phi_8 V^T on a batch of the trained embedding, in every seed) and the test
    embedding still collapses: effective rank below the lab's threshold 10 in 3 of 3 seeds."""
    from lnbook.whitening import effective_rank, iter_norm_output_error, output_covariance_tolerance
    from lnbook.whitening.ssl import features

    Xtr, _, Xte, _ = digits_split()
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        ranks, errors = [], []
        for seed in (0, 1, 2):
            run = train_ssl(Xtr.double(), "iternorm", 8, 0, seed, **{**DIGITS_SETTING, "epochs": 15, "emb": DIGITS_EMB[0]},
                            device="cpu", check=False)
            model = torch.nn.Sequential(run.encoder, run.projector)
            errors.append(float(iter_norm_output_error(features(model, Xtr[:64].double()), 8, 0)))
            ranks.append(float(effective_rank(features(model, Xte.double()))))
    finally:
        torch.set_default_dtype(before)
    assert all(e <= output_covariance_tolerance(torch.float64) for e in errors), errors
    assert sum(r < 10.0 for r in ranks) == 3, ranks
