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
    ordering_verdict,
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
    """The networks that make_network builds from the official setting have the harness's layout, read off
    the built modules (not restated from OFFICIAL): Linear(1024, 256) -> norm, (depth - 1) times
    Linear(256, 256) -> norm, Linear(256, 10); the LN-G layer equals nn.GroupNorm(G, 256) with the same
    (random) affine parameters, in values and gradients; a G that does not divide 256 is refused."""
    cfg = FitConfig.official(0.05)
    lin = make_network(Run("linear", 0), 1024, 10, cfg)
    assert [type(m).__name__ for m in lin] == ["Linear"] and (lin[0].in_features, lin[0].out_features) == (1024, 10)
    ln = make_network(Run("ln", 2), 1024, 10, cfg)
    assert [type(m).__name__ for m in ln] == ["Linear", "LayerNorm", "Linear", "LayerNorm", "Linear"]
    assert [(m.in_features, m.out_features) for m in ln if isinstance(m, torch.nn.Linear)] == [(1024, 256), (256, 256), (256, 10)]
    assert ln[1].elementwise_affine and ln[1].normalized_shape == (256,)
    lng = make_network(Run("lng", 3, 32), 1024, 10, cfg)
    assert [(m.in_features, m.out_features) for m in lng if isinstance(m, torch.nn.Linear)] == [(1024, 256), (256, 256), (256, 256), (256, 10)]
    gn = torch.nn.GroupNorm(32, 256)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in (gn.weight, gn.bias):
            p.copy_(torch.randn(256, generator=g))
        lng[1].load_state_dict({k: v for k, v in gn.state_dict().items()}, strict=False)
    h = torch.randn(7, 256, generator=g, requires_grad=True)
    ours, theirs = lng[1](h), gn(h)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    up = torch.randn(7, 256, generator=g)
    torch.testing.assert_close(torch.autograd.grad(ours, h, up)[0], torch.autograd.grad(theirs, h, up)[0], atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError):  # the harness's G = 6 cannot divide its width
        make_network(Run("lng", 1, 6), 1024, 10, cfg)
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


def test_ordering_verdict_is_never_reproduced():
    """The paper-scale verdict: only the ordering linear < LN < best LN-G = 1 is judged, and a match is
    'consistent (reconstruction)' (the paper's numbers are not available), never 'reproduced'."""
    fits = {"linear": 0.21, "LN d4": 0.43, "LN-G2 d4": 0.6, "LN-G32 d4": 1.0, "LN-G32 d8": 0.3}
    assert ordering_verdict(fits) == (1.0, "consistent (reconstruction)")
    assert ordering_verdict({**fits, "LN-G32 d4": 0.99}) == (0.99, "differs")  # no full fit
    assert ordering_verdict({**fits, "LN d4": 0.1})[1] == "differs"  # LN below linear
    assert ordering_verdict({**fits, "LN d4": 1.0})[1] == "differs"  # LN fits too
    assert ordering_verdict({**fits, "LN-G32 d8": 1.0, "LN-G32 d4": 0.9})[1] == "differs"  # other depth ignored
    with pytest.raises(ValueError, match="lacks the runs"):
        ordering_verdict({"linear": 0.2, "LN d4": 0.4})


def test_deeper_linear_networks_are_the_same_function_class():
    """The linear baseline is one linear map; a linear network of depth 4 and width 128 computes an affine
    map (its weights collapse to one W, b), and every affine map R^16 -> R^10 is one such network
    (embed, pass through, read out): the same function class."""
    from lnbook.ml.models import mlp

    torch.manual_seed(0)
    x = torch.randn(50, 16, dtype=torch.float64)
    deep = mlp(16, 128, 4, 10, norm="none").double()
    W, b = torch.eye(16, dtype=torch.float64), torch.zeros(16, dtype=torch.float64)
    for layer in deep:
        if isinstance(layer, torch.nn.Linear):
            W, b = layer.weight @ W, layer.weight @ b + layer.bias
    torch.testing.assert_close(deep(x), x @ W.T + b, rtol=1e-12, atol=1e-12)
    one = make_network(Run("linear", 0), 16, 10, FitConfig(width=128)).double()
    assert [type(m).__name__ for m in one] == ["Linear"]
    deep2 = mlp(16, 128, 4, 10, norm="none").double()
    lins = [m for m in deep2 if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for m in lins:
            m.weight.copy_(torch.eye(*m.weight.shape, dtype=torch.float64))
            m.bias.zero_()
        lins[-1].weight.zero_()
        lins[-1].weight[:, :16] = one[0].weight
        lins[-1].bias.copy_(one[0].bias)
    torch.testing.assert_close(deep2(x), one(x), rtol=1e-12, atol=1e-12)


# Bounds asserted over seeds 0, 1, 2 in the slow test below (quoted in chapter 5).
TWO_GROUPS_FIT = (0.8, 0.95)  # LN-G2: most of the labels, not all
PAIRS_FIT_AT_1E5 = 0.35  # LN-G64 (groups of two) at eps = 1e-5: below this
PAIRS_FIT_AT_1E3 = (0.8, 0.95)  # and at eps = 1e-3


@pytest.mark.slow
def test_group_and_eps_sweeps_hold_in_every_seed():
    """The random-label lab's group and eps claims over three initialisations, in the lab's ci setting
    (500 Gaussian points in R^16, 10 random classes, width 128, depth 4, Adam 1e-3, 100 epochs): two
    groups fit most labels but not all, 64 groups of two fit few at eps = 1e-5, and their fit increases
    with eps up to a full fit at 0.1, in every seed. About 25 s of CPU."""
    from lnbook.group_ln.lab import best_fits_over_seeds
    from lnbook.ml.data import random_labels

    X = torch.randn(500, 16, generator=torch.Generator().manual_seed(100))
    y = random_labels(500, 10, seed=0)
    cfg = FitConfig(width=128, batch_size=128, epochs=100, optimizer="adam", lr=1e-3, lr_step=None, log_every=5)
    two, pairs = Run("lng", 4, 2), Run("lng", 4, 64)
    eps = [1e-5, 1e-3, 1e-1]
    fits = best_fits_over_seeds(X, y, [(two, 1e-5)] + [(pairs, e) for e in eps], cfg, [0, 1, 2])
    lo, hi = TWO_GROUPS_FIT
    assert all(lo < a < hi for a in fits[(two.label, 1e-5)]), fits
    curve = list(zip(*(fits[(pairs.label, e)] for e in eps)))  # one (fit at 1e-5, 1e-3, 1e-1) per seed
    lo, hi = PAIRS_FIT_AT_1E3
    for a, b, c in curve:
        assert a < PAIRS_FIT_AT_1E5 and lo < b < hi and c == 1.0 and a < b < c, curve
    with pytest.raises(ValueError, match="non-empty"):
        best_fits_over_seeds(X, y, [], cfg, [0])


LONGER_TRAINING_GAIN = 0.05  # the LN-Net's best fit rises by more than this from 100 to 400 epochs, every seed


@pytest.mark.slow
def test_ln_net_fit_still_rises_with_longer_training():
    """Chapter 5: the LN-Net (depth 4, width 128) had not reached its best in the lab's 100 epochs. In the
    lab's ci setting (500 Gaussian points in R^16, 10 random classes, Adam 1e-3) its best fit over 400
    epochs exceeds that over 100 epochs by more than 0.05 in each of seeds 0, 1, 2 and stays below a full fit.
    (A former clause, "a ten times larger learning rate does not raise it in every seed", rested on gains of one
    sample in 500 and failed on another machine: removed from the test and the chapter.) About 20 s of CPU."""
    from dataclasses import replace

    from lnbook.group_ln.lab import best_fits_over_seeds
    from lnbook.ml.data import random_labels

    X = torch.randn(500, 16, generator=torch.Generator().manual_seed(100))
    y = random_labels(500, 10, seed=0)
    cfg = FitConfig(width=128, batch_size=128, epochs=100, optimizer="adam", lr=1e-3, lr_step=None, log_every=5)
    ln, seeds = Run("ln", 4), [0, 1, 2]
    base, longer = (
        best_fits_over_seeds(X, y, [(ln, 1e-5)], c, seeds)[(ln.label, 1e-5)]
        for c in (cfg, replace(cfg, epochs=400))
    )
    assert all(b - a > LONGER_TRAINING_GAIN and b < 1.0 for a, b in zip(base, longer)), (base, longer)


@pytest.mark.slow
def test_ln_net_fits_every_label_when_the_inputs_are_wider_than_the_network():
    """Referee 10 of chapter 5, finding 6: the LN-Net's shortfall in the lab depends on its inputs' dimension (16) being
    far below the width (128), which caps the rank of its last hidden features at 20 (cor-ch5-depth-rank). With 500
    Gaussian points in R^160 instead (the cap is then the room, 127, above LN-G16's 112) and otherwise the lab's ci
    setting, the LN-Net of depth 4 fits every label within the lab's 100 epochs in seeds 0 and 1 (the referee's
    run; seed 2 fitted every label at epoch 60 in ours). About four minutes on a loaded 2-core machine."""
    from lnbook.group_ln.depth_rank import rank_caps
    from lnbook.group_ln.lab import best_fits_over_seeds
    from lnbook.ml.data import random_labels

    assert not rank_caps(500, 160, 128, 4, 16).input_limits_ln
    X = torch.randn(500, 160, generator=torch.Generator().manual_seed(100))
    y = random_labels(500, 10, seed=0)
    cfg = FitConfig(width=128, batch_size=128, epochs=100, optimizer="adam", lr=1e-3, lr_step=None, log_every=5)
    ln = Run("ln", 4)
    fits = best_fits_over_seeds(X, y, [(ln, 1e-5)], cfg, [0, 1])[(ln.label, 1e-5)]
    assert all(f == 1.0 for f in fits), fits


def _records(scale="ci"):
    """Synthetic records shaped like the random-label lab's at either scale (paper: depth 14 and group 128 too, and
    LN-G16 short of a full fit at depths 2, 8 and 14, as in the paper-scale runs)."""
    from lnbook.group_ln.lab import Run

    groups = [2, 4, 8, 16, 32, 64] + ([128] if scale == "paper" else [])
    depths = [1, 2, 4, 8] + ([14] if scale == "paper" else [])
    fits = {"linear": 0.31, "LN d4": 0.52, **{Run("lng", 4, g).label: (1.0 if 4 <= g <= 32 else 0.6) for g in groups}}
    seed_fits = {"linear": [0.31, 0.30, 0.32], "ln": [0.52, 0.55, 0.50], "lng": [1.0, 1.0, 1.0]}
    eps_fits = {1e-5: 0.25, 1e-3: 0.85, 1e-1: 1.0}
    # LN-G16 in the recorded paper-scale CPU run (results/paper/, seed 0): 0.971 at depth 2, 1.0 at depth 4, 0.608 at depth 8 and 0.110 at depth
    # 14 in 150 epochs (depth 1 not run there: any value below 1); at ci every depth from 2 on fits
    paper = {1: 0.9, 2: 0.971, 4: 1.0, 8: 0.608, 14: 0.110}
    lng = {d: (paper[d] if scale == "paper" else 0.9 if d == 1 else 1.0) for d in depths}
    depth_fits = {"ln": {d: 0.4 + 0.02 * d for d in depths}, "lng": lng}
    return fits, seed_fits, eps_fits, depth_fits


@pytest.mark.parametrize("scale", ["ci", "paper"])
def test_random_label_decisions_on_synthetic_records(scale):
    """Each claim of the chapter decided on records of either scale's shape, and each flips when its record is
    changed the one way that breaks it; the seed claim is a count with its interval (2 of 3 is 'some', not 'all')."""
    from lnbook.group_ln.lab import random_label_decisions

    fits, seed_fits, eps_fits, depth_fits = _records(scale)
    ok = random_label_decisions(fits, seed_fits, eps_fits, depth_fits)
    assert ok["ordering"] and ok["eps_increases"] and ok["pairs_few"] and ok["lng_fits_at_depth"] and ok["ln_never_fits"]
    assert (ok["ordering_seeds"].successes, ok["ordering_seeds"].trials) == (3, 3)
    broken = {
        "ordering": ({**fits, "LN d4": 0.2}, seed_fits, eps_fits, depth_fits),
        "eps_increases": (fits, seed_fits, {**eps_fits, 1e-1: 0.85}, depth_fits),
        "pairs_few": (fits, seed_fits, {**eps_fits, 1e-5: 0.35}, depth_fits),
        "lng_fits_at_depth": (fits, seed_fits, eps_fits, {**depth_fits, "lng": {**depth_fits["lng"], 4: 0.99}}),
        "ln_never_fits": (fits, seed_fits, eps_fits, {**depth_fits, "ln": {**depth_fits["ln"], 2: 1.0}}),
    }
    for key, args in broken.items():
        assert not random_label_decisions(*args)[key.strip()], key
    one_seed_off = random_label_decisions(fits, {**seed_fits, "lng": [1.0, 0.99, 1.0]}, eps_fits, depth_fits)
    assert one_seed_off["ordering_seeds"].successes == 2 and one_seed_off["ordering_seeds"].some
    assert one_seed_off["ordering_seeds"].not_all
    # LN-G short of a full fit at other depths does not count against the claim at the main depth (the paper-scale
    # runs' depths 2 and 8 fell short), and the depths that fit are listed for the prose, those short of it left out
    assert ok["lng_fit_depths"] == {"ci": [2, 4, 8], "paper": [4]}[scale]
    others_short = {d: (1.0 if d == 4 else 0.5) for d in depth_fits["lng"]}
    decided = random_label_decisions(fits, seed_fits, eps_fits, {**depth_fits, "lng": others_short})
    assert decided["lng_fits_at_depth"] and decided["lng_fit_depths"] == [4]
    with pytest.raises(ValueError, match="LN-G fit at depth=4"):
        random_label_decisions(fits, seed_fits, eps_fits, {**depth_fits, "lng": {2: 1.0, 8: 1.0}})
    with pytest.raises(ValueError, match="same seeds"):
        random_label_decisions(fits, {**seed_fits, "ln": [0.5]}, eps_fits, depth_fits)
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        random_label_decisions(fits, {**seed_fits, "ln": [0.5, 1.5, 0.5]}, eps_fits, depth_fits)
    with pytest.raises(ValueError, match="at least two eps"):
        random_label_decisions(fits, seed_fits, {1e-5: 0.2}, depth_fits)


def test_drop_in_decisions_count_seeds_and_refuse_mismatched_records():
    """The drop-in lab's claims: the one mean claim (the CNN without a norm is last), and counts of seeds with
    their intervals (LN-G ahead on the CNN, behind on the Transformer), on records of 3 (ci) and 10 (paper) seeds."""
    from lnbook.group_ln.lab import drop_in_decisions

    for n in (3, 10):
        cnn = {"none": [0.80] * n, "LN": [0.90] * n, "LN-G, 4 groups": [0.89] * n,
               "LN-G, 16 groups": [0.92] * (n - 1) + [0.88]}
        tf = {"LN": [0.95] * n, "LN-G, 4 groups": [0.5] * 2 + [0.97] * (n - 2)}
        d = drop_in_decisions(cnn, tf)
        assert d["norm_helps"]
        assert (d["lng16_ahead"].successes, d["lng16_ahead"].trials) == (n - 1, n)
        assert d["lng4_ahead"].successes == 0 and not d["lng4_ahead"].some
        assert d["tf_lng_behind"].successes == 2 and d["tf_ln_solved"].successes == n
        assert d["tf_lng_solved"].successes == n - 2
        assert d["lng16_gap"] == pytest.approx(((n - 1) * 0.02 - 0.02) / n)
        assert not drop_in_decisions({**cnn, "none": [0.95] * n}, tf)["norm_helps"]
        assert not drop_in_decisions({**cnn, "none": [0.895] * n}, tf)["norm_helps"]  # not last: between the others
    # ties (referee 8 of ch5, finding 5: accuracies of 1.0, or on a few hundred items, tie) count neither way
    tied_cnn = {**cnn, "LN-G, 16 groups": [0.90] * n, "LN-G, 4 groups": [0.90] * n}
    tied = drop_in_decisions(tied_cnn, {"LN": [1.0] * n, "LN-G, 4 groups": [1.0] * n})
    assert tied["lng16_ahead"].successes == tied["lng4_ahead"].successes == tied["tf_lng_behind"].successes == 0
    with pytest.raises(ValueError, match="same seeds"):
        drop_in_decisions({**cnn, "none": [0.8]}, tf)
    with pytest.raises(ValueError, match="exactly"):
        drop_in_decisions({k: v for k, v in cnn.items() if k != "none"}, tf)


def test_recall_transformer_runs_are_seeded_and_refuse_bad_sizes():
    """recall_transformer_runs (the drop-in lab's recall Transformers): one history per norm and seed, the same
    numbers on a second call, the two norms different models; empty or repeated seeds and sizes that are not
    positive integers are refused with the reason."""
    from lnbook.group_ln.lab import RECALL_VARIANTS, recall_transformer_runs

    a = recall_transformer_runs([0, 2], n_train=64, epochs=2)
    b = recall_transformer_runs([0, 2], n_train=64, epochs=2)
    assert set(a) == {(name, s) for name in RECALL_VARIANTS for s in (0, 2)}
    for key in a:
        assert a[key].epochs == [1, 2] and a[key].val_accuracy == b[key].val_accuracy and a[key].loss == b[key].loss
    assert a["LN", 0].loss != a["LN-G, 4 groups", 0].loss
    for seeds in ([], [1, 1]):
        with pytest.raises(ValueError, match="each once"):
            recall_transformer_runs(seeds, n_train=64, epochs=1)
    with pytest.raises(ValueError, match="n_train"):
        recall_transformer_runs([0], n_train=0, epochs=1)
    with pytest.raises((ValueError, TypeError), match="epochs"):
        recall_transformer_runs([0], n_train=64, epochs=1.5)
