"""Tests of :mod:`lnbook.ml.data`.

Chapter 5: local MNIST / CIFAR-10 readers (on files made here), the recall task, the small CNN,
the sequence read-out, train() with held-out data, and the random-label runs.

lnbook.ml.training (the one loop), lnbook.ml.models (norm switch) and lnbook.ml.data (made or shipped datasets).
"""

from __future__ import annotations

import gzip
import math
import pickle

import numpy as np
import pytest
import torch

from lnbook.ml.data import (
    CIFAR10_FILES,
    associative_recall,
    cifar10_grayscale,
    cifar_images,
    dataset_folder,
    digits,
    digits_split,
    mnist,
    random_labels,
    sphere_octants,
    spiral,
    with_random_labels,
)
from lnbook.ml.models import (
    mlp,
)
from lnbook.ml.training import train


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


def test_cifar_images_reads_cifar10_and_cifar100_as_stored(tmp_path):
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    batches = _write_cifar(root)
    X, y = cifar_images(tmp_path, "cifar10", train=True)  # the parent folder is accepted too
    assert X.shape == (20, 3, 32, 32) and X.dtype == torch.uint8 and y.dtype == torch.long
    data, labels = batches["data_batch_2"]
    assert torch.equal(X[4 + 1].reshape(-1), torch.as_tensor(data[1]))  # channel-major rows, as the files hold them
    assert y[4:8].tolist() == labels
    assert cifar_images(root, "cifar10", train=False)[0].shape == (4, 3, 32, 32)
    # the grayscale reader sees the same pixels
    gray = cifar10_grayscale(root)[0]
    rgb = X[5].double().reshape(3, 1024) / 255 * 2 - 1
    assert torch.allclose(gray[5].double(), 0.2989 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2], atol=1e-6)
    c100 = tmp_path / "cifar-100-python"
    c100.mkdir()
    for name in ("train", "test"):
        with open(c100 / name, "wb") as fh:
            pickle.dump({b"data": np.full((6, 3072), 7, np.uint8), b"fine_labels": [99] * 6, b"coarse_labels": [1] * 6}, fh)
    X100, y100 = cifar_images(tmp_path, "cifar100")
    assert X100.shape == (6, 3, 32, 32) and int(y100.max()) == 99 and int(X100.max()) == 7


def test_cifar_images_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="never downloads"):
        cifar_images(tmp_path, "cifar100")
    with pytest.raises(ValueError, match="'cifar10' or 'cifar100'"):
        cifar_images(tmp_path, "svhn")
    with open(tmp_path / "test", "wb") as fh:
        pickle.dump({b"data": np.zeros((3, 3072), np.uint8), b"fine_labels": [100] * 3}, fh)
    with pytest.raises(ValueError, match=r"labels must lie in 0\.\.99"):
        cifar_images(tmp_path, "cifar100", train=False)
    with open(tmp_path / "test", "wb") as fh:
        pickle.dump({b"data": np.zeros((3, 10), np.uint8), b"fine_labels": [0] * 3}, fh)
    with pytest.raises(ValueError, match="3072"):
        cifar_images(tmp_path, "cifar100", train=False)


def test_digits_split_is_the_stratified_split_of_sklearn():
    """The split chapter 8's lab trains on: the same rows and values as scikit-learn's train_test_split of the
    digits / 16 with random_state=seed (the split the lab used before it moved here), stratified, disjoint."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    Xtr, ytr, Xte, yte = digits_split()
    assert Xtr.shape == (1347, 64) and Xte.shape == (450, 64) and Xtr.dtype == torch.float32
    data = load_digits()
    ref = train_test_split(data.data / 16.0, data.target, test_size=450, stratify=data.target, random_state=0)
    assert torch.equal(Xtr, torch.as_tensor(ref[0], dtype=torch.float32))
    assert torch.equal(Xte, torch.as_tensor(ref[1], dtype=torch.float32))
    assert ytr.tolist() == ref[2].tolist() and yte.tolist() == ref[3].tolist()
    assert torch.bincount(yte).min() >= 43 and torch.bincount(yte).max() <= 47  # stratified: 450 over 10 classes
    other = digits_split(seed=1, dtype=torch.float64)
    assert other[0].dtype == torch.float64 and not torch.equal(other[0].float(), Xtr)
    with pytest.raises(ValueError, match="test_size"):
        digits_split(test_size=1790)


def test_dataset_folder_from_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("LNBOOK_TEST_DIR", raising=False)
    assert dataset_folder("LNBOOK_TEST_DIR") is None
    monkeypatch.setenv("LNBOOK_TEST_DIR", str(tmp_path))
    assert dataset_folder("LNBOOK_TEST_DIR") == tmp_path
    monkeypatch.setenv("LNBOOK_TEST_DIR", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="LNBOOK_TEST_DIR"):
        dataset_folder("LNBOOK_TEST_DIR")


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


def test_digits_are_shipped():
    X, y = digits()
    assert X.shape == (1797, 64) and y.shape == (1797,) and float(X.min()) == 0 and float(X.max()) == 1
    assert sorted(y.unique().tolist()) == list(range(10))


def test_digits_are_scikit_learns_load_digits_exactly():
    """digits() reads scikit-learn's file without importing scikit-learn: the same images / 16 and labels, bit for
    bit, as load_digits, in float32 and float64."""
    from sklearn.datasets import load_digits

    data = load_digits()
    for dtype in (torch.float32, torch.float64):
        X, y = digits(dtype)
        assert X.dtype == dtype and torch.equal(X, torch.as_tensor(data.data / 16.0, dtype=dtype))
        assert y.dtype == torch.long and y.tolist() == data.target.tolist()


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


def test_train_is_deterministic_and_mini_batches_cover_the_data():
    def run():
        torch.manual_seed(1)
        X, y = spiral(64, seed=0)
        model = mlp(2, 8, 2, 2, norm="ln")
        return train(model, X, y, epochs=5, batch_size=10, lr=0.05, progress=False, report=False)

    a, b = run(), run()
    assert a.loss == b.loss and a.accuracy == b.accuracy
    assert a.samples_seen == 5 * 64  # every epoch visits every sample once (last batch partial)
