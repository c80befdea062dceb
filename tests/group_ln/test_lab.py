"""Chapter 5: local MNIST / CIFAR-10 readers (on files made here), the recall task, the small CNN,
the sequence read-out, train() with held-out data, and the random-label runs.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from lnbook.group_ln.lab import (
    OFFICIAL,
    FitConfig,
    Run,
    fit_random_labels,
    load_runs,
    make_network,
    official_runs,
    save_runs,
    step_schedule,
)


def test_step_schedule_matches_steplr_stepped_before_each_epoch():
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=20, gamma=0.5)
    ours = step_schedule(20, 0.5)
    for epoch in range(70):
        with warnings.catch_warnings():  # torch warns about this order; it is the harness's
            warnings.simplefilter("ignore", UserWarning)
            sched.step()  # the harness steps the scheduler first, then trains the epoch
        assert opt.param_groups[0]["lr"] == pytest.approx(ours(epoch))
    with pytest.raises(ValueError, match="gamma"):
        step_schedule(20, 1.5)


def test_networks_follow_the_harness_layout():
    cfg = FitConfig.official(0.05)
    assert (cfg.width, cfg.batch_size, cfg.epochs, cfg.momentum, cfg.lr_step, cfg.lr_gamma) == (256, 128, 150, 0.0, 20, 0.5)
    assert 6 in OFFICIAL["groups"] and 256 % 6  # the harness's G = 6 cannot divide its width
    lin = make_network(Run("linear", 0), 1024, 10, cfg)
    assert [type(m).__name__ for m in lin] == ["Linear"] and lin[0].in_features == 1024
    ln = make_network(Run("ln", 2), 1024, 10, cfg)
    assert [type(m).__name__ for m in ln] == ["Linear", "LayerNorm", "Linear", "LayerNorm", "Linear"]
    assert ln[1].elementwise_affine
    lng = make_network(Run("lng", 1, 32), 1024, 10, cfg)
    gn = torch.nn.GroupNorm(32, 256)  # the harness's LN-G layer, affine initialised to 1 and 0
    h = torch.randn(7, 256)
    torch.testing.assert_close(lng[1](h), gn(h), atol=1e-5, rtol=1e-5)
    runs = official_runs()
    assert [r.label for r in runs[:3]] == ["linear", "LN d4", "LN-G2 d4"]
    assert [r.groups for r in runs if r.kind == "lng" and r.depth == 4] == [2, 4, 8, 16, 32, 64, 128]
    assert sorted(r.depth for r in runs if r.kind == "ln") == list(OFFICIAL["depths"])
    assert len(official_runs(depth_sweep=False)) == 9 and len({r.label for r in runs}) == len(runs)
    for r in runs:  # every paper-scale network builds for 1024 grayscale pixels
        make_network(r, 1024, 10, cfg)
    with pytest.raises(ValueError, match="learning rates"):
        FitConfig.official(0.2)
    with pytest.raises(ValueError, match="groups= is required"):
        Run("lng", 4)


def test_fit_random_labels_orders_linear_ln_lng(tmp_path):
    """A small version of the lab's experiment: 300 Gaussian points in R^8, 10 random classes."""
    from lnbook.ml.data import random_labels

    X = torch.randn(300, 8, generator=torch.Generator().manual_seed(100))
    y = random_labels(300, 10, seed=0)
    cfg = FitConfig(width=64, epochs=200, optimizer="adam", lr=3e-3, lr_step=None, log_every=5)
    runs = [Run("linear", 0), Run("ln", 2), Run("lng", 2, 8)]
    hist = fit_random_labels(X, y, runs, cfg, progress=False, report=False)
    fit = {k: h.best_accuracy for k, h in hist.items()}
    assert fit["linear"] < fit["LN d2"] < fit["LN-G8 d2"]
    assert fit["LN-G8 d2"] == 1.0 and hist["LN-G8 d2"].stopped_early
    path = save_runs(tmp_path / "r.json", hist, {"data": "gaussian"})
    meta, back = load_runs(path)
    assert meta == {"data": "gaussian"} and back["LN d2"].accuracy == hist["LN d2"].accuracy
    path.write_text("{}")
    with pytest.raises(ValueError, match="not a results file"):
        load_runs(path)
