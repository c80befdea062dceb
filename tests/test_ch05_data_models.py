"""Chapter 5: local MNIST / CIFAR-10 readers (on files made here), the recall task, the small CNN,
the sequence read-out, train() with held-out data, and the random-label runs."""

from __future__ import annotations

import gzip
import pickle
import warnings

import numpy as np
import pytest
import torch

from lnbook.data import CIFAR10_FILES, associative_recall, cifar10_grayscale, dataset_folder, mnist
from lnbook.models import LastPosition, TinyTransformer, small_cnn
from lnbook.norms import group_layer_norm
from lnbook.random_label_fit import (
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
from lnbook.training import History, train


# --- MNIST idx files ------------------------------------------------------------------------------


def _idx(array: np.ndarray) -> bytes:
    head = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in array.shape)
    return head + array.astype(np.uint8).tobytes()


def _write_mnist(folder, n=5, compress=False, train=True, labels=None):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(n, 28, 28))
    labels = rng.integers(0, 10, size=n) if labels is None else np.asarray(labels)
    prefix = "train" if train else "t10k"
    for name, arr in ((f"{prefix}-images-idx3-ubyte", images), (f"{prefix}-labels-idx1-ubyte", labels)):
        data = _idx(arr)
        if compress:
            (folder / f"{name}.gz").write_bytes(gzip.compress(data))
        else:
            (folder / name).write_bytes(data)
    return images, labels


@pytest.mark.parametrize("compress", [False, True])
def test_mnist_reader(tmp_path, compress):
    images, labels = _write_mnist(tmp_path, compress=compress)
    X, y = mnist(tmp_path)
    assert X.shape == (5, 784) and X.dtype == torch.float32
    np.testing.assert_allclose(X.numpy(), images.reshape(5, -1) / 255 * 2 - 1, rtol=1e-6)
    assert y.tolist() == labels.tolist()
    _write_mnist(tmp_path, n=3, train=False)
    assert mnist(tmp_path, train=False)[0].shape == (3, 784)


def test_mnist_reader_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        mnist(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"train-images-idx3-ubyte.*train-labels-idx1-ubyte.*\.gz"):
        mnist(tmp_path)
    _write_mnist(tmp_path)
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x01" + b"\x00" * 8)
    with pytest.raises(ValueError, match="magic number"):
        mnist(tmp_path)
    (tmp_path / "train-images-idx3-ubyte").write_bytes(_idx(np.zeros((5, 28, 28)))[:-10])
    with pytest.raises(ValueError, match="truncated"):
        mnist(tmp_path)
    _write_mnist(tmp_path, labels=[1, 2, 3, 11, 4])
    with pytest.raises(ValueError, match="labels must lie in 0..9"):
        mnist(tmp_path)
    with pytest.raises(TypeError, match="must be a path"):
        mnist(3)


# --- CIFAR-10 pickles -----------------------------------------------------------------------------


def _write_cifar(folder, n=4):
    rng = np.random.default_rng(1)
    batches = {}
    for name in CIFAR10_FILES[True] + CIFAR10_FILES[False]:
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n).tolist()
        with open(folder / name, "wb") as fh:
            pickle.dump({b"data": data, b"labels": labels, b"batch_label": b"x"}, fh)
        batches[name] = (data, labels)
    return batches


def test_cifar_reader_grayscale_formula(tmp_path):
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    batches = _write_cifar(root)
    X, y = cifar10_grayscale(tmp_path)  # the parent folder is accepted too
    assert X.shape == (20, 1024) and y.shape == (20,)
    data, labels = batches["data_batch_2"]
    # by hand for one pixel: channels mapped to 2c/255 - 1, then ITU-R 601 weights
    r, g, b = (data[1, c * 1024 + 37] / 255 * 2 - 1 for c in range(3))
    assert float(X[4 + 1, 37]) == pytest.approx(0.2989 * r + 0.587 * g + 0.114 * b, abs=1e-6)
    assert y[4:8].tolist() == labels


def test_cifar_reader_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"data_batch_1.*test_batch"):
        cifar10_grayscale(tmp_path)
    _write_cifar(tmp_path)
    (tmp_path / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="is not a CIFAR-10 batch"):
        cifar10_grayscale(tmp_path)
    with open(tmp_path / "data_batch_3", "wb") as fh:
        pickle.dump({b"data": np.zeros((4, 100), dtype=np.uint8), b"labels": [0] * 4}, fh)
    with pytest.raises(ValueError, match=r"shape \(n, 3072\)"):
        cifar10_grayscale(tmp_path)
    assert cifar10_grayscale(tmp_path, train=False)[0].shape == (4, 1024)


def test_dataset_folder_from_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("LNBOOK_TEST_DIR", raising=False)
    assert dataset_folder("LNBOOK_TEST_DIR") is None
    monkeypatch.setenv("LNBOOK_TEST_DIR", str(tmp_path))
    assert dataset_folder("LNBOOK_TEST_DIR") == tmp_path
    monkeypatch.setenv("LNBOOK_TEST_DIR", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="LNBOOK_TEST_DIR"):
        dataset_folder("LNBOOK_TEST_DIR")


# --- the recall task, the CNN, the sequence read-out ---------------------------------------------------


def test_associative_recall():
    X, y = associative_recall(500, pairs=3, keys=5, values=4, seed=2)
    assert X.shape == (500, 7) and X.dtype == torch.long and y.shape == (500,)
    keys, vals, query = X[:, 0:6:2], X[:, 1:6:2], X[:, 6]
    assert bool((keys < 5).all()) and bool((vals >= 5).all()) and bool((vals < 9).all())
    assert all(len(set(row.tolist())) == 3 for row in keys)  # distinct keys in a sequence
    hit = keys == query[:, None]
    assert bool((hit.sum(1) == 1).all())
    assert torch.equal(vals[hit], y)
    assert torch.equal(associative_recall(50, seed=3)[0], associative_recall(50, seed=3)[0])
    with pytest.raises(ValueError, match="keys must be >= 4"):
        associative_recall(10, pairs=4, keys=3)


def test_small_cnn_norms():
    torch.manual_seed(0)
    x = torch.randn(6, 64)
    for norm, kw in (("none", {}), ("ln", {}), ("lng", {"groups": 4})):
        assert small_cnn((1, 8, 8), 10, norm=norm, **kw)(x).shape == (6, 10)
    net = small_cnn((1, 8, 8), 10, norm="lng", groups=4, affine=False)
    feats = net[1](net[0](x))  # (6, 16, 8, 8) after the first convolution
    out = net[2](feats)
    # LN-G over channel groups of a feature map = LN of each group's (C/G) x H x W values
    ref = group_layer_norm(feats.reshape(6, 4, -1), 1).reshape(feats.shape)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="does not divide the 16 channels"):
        small_cnn((1, 8, 8), 10, norm="lng", groups=3)
    with pytest.raises(ValueError, match="needs groups"):
        small_cnn((1, 8, 8), 10, norm="lng")
    with pytest.raises(ValueError, match="image_shape"):
        small_cnn((8, 8), 10)


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


# --- the random-label runs ---------------------------------------------------------------------


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
    from lnbook.data import random_labels

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
