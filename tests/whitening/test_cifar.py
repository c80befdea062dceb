"""The paper-scale CIFAR path on tiny arrays made here: the loader, the views, the networks, one run."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from lnbook.whitening.cifar import (
    OFFICIAL_CIFAR, README_RESULTS, augment_cifar, load_cifar, official_projector, resnet18_cifar, run_cifar,
)


def write_cifar10(folder, n=40, seed=0):
    rng = np.random.default_rng(seed)
    sub = folder / "cifar-10-batches-py"
    sub.mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"labels": list(rng.integers(0, 10, n))}
        (sub / name).write_bytes(pickle.dumps(batch))
    return sub


def test_load_cifar10_and_cifar100(tmp_path):
    sub = write_cifar10(tmp_path)
    X, y = load_cifar(tmp_path, "cifar10", train=True)
    assert X.shape == (200, 3, 32, 32) and X.dtype == torch.uint8 and y.shape == (200,)
    raw = pickle.loads((sub / "data_batch_1").read_bytes())[b"data"][0]
    assert torch.equal(X[0].reshape(-1), torch.as_tensor(raw))  # channel-major rows, as the files store them
    assert load_cifar(sub, "cifar10", train=False)[0].shape == (40, 3, 32, 32)
    c100 = tmp_path / "c100"
    c100.mkdir()
    for name in ("train", "test"):
        (c100 / name).write_bytes(pickle.dumps({b"data": np.zeros((6, 3072), np.uint8), b"fine_labels": [99] * 6}))
    assert int(load_cifar(c100, "cifar100")[1].max()) == 99


def test_load_cifar_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="never downloads"):
        load_cifar(tmp_path, "cifar10")
    (tmp_path / "test_batch").write_bytes(pickle.dumps({b"data": np.zeros((3, 10), np.uint8), b"labels": [0] * 3}))
    with pytest.raises(ValueError, match="3072"):
        load_cifar(tmp_path, "cifar10", train=False)
    with pytest.raises(ValueError, match="cifar10"):
        load_cifar(tmp_path, "svhn")


def test_views_and_networks():
    x = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8)
    g = torch.Generator().manual_seed(0)
    v0, v1 = augment_cifar(x, g, 0), augment_cifar(x, g, 1)
    assert v0.shape == (6, 3, 32, 32) and torch.isfinite(v1).all() and not torch.equal(v0, v1)
    assert resnet18_cifar()(v0).shape == (6, 512)
    head = official_projector()
    assert head(torch.randn(4, 512)).shape == (4, OFFICIAL_CIFAR["emb"])
    assert sum(isinstance(m, torch.nn.BatchNorm1d) for m in head) == OFFICIAL_CIFAR["projection_layers"]


def test_official_values_and_readme_numbers():
    cfg = OFFICIAL_CIFAR
    assert (cfg["batch"], cfg["epochs"], cfg["lr"], cfg["weight_decay"], cfg["emb"], cfg["axis"], cfg["T"]) == (
        256, 1000, 0.3, 1e-4, 2048, 0, 4)
    assert README_RESULTS["cifar10"] == {"top1": 92.60, "knn5": 90.03}
    assert README_RESULTS["cifar100"] == {"top1": 70.88, "knn5": 61.90}


def test_run_cifar_end_to_end_on_tiny_files(tmp_path):
    write_cifar10(tmp_path, n=16)
    out = run_cifar(tmp_path, epochs=1, device="cpu", progress=False, batch=32, probe_epochs=2, emb=64,
                    projection_size=64)
    assert 0 <= out["top1"] <= 100 and 0 <= out["knn5"] <= 100 and out["epochs"] == 1
    with pytest.raises(ValueError, match="unknown settings"):
        run_cifar(tmp_path, epochs=1, bacth=32)
