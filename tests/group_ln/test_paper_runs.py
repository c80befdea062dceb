"""lnbook.group_ln.paper_runs: chapter 5's paper-scale random-label runs, read from their stored files."""

from __future__ import annotations

import numpy as np
import pytest

import lnbook.group_ln.paper_runs as paper_runs

from lnbook.group_ln.lab import OFFICIAL, Run, official_runs, save_runs
from lnbook.group_ln.paper_runs import (
    CIFAR_FILE,
    MNIST_FILE,
    describe_official,
    groups_curve,
    random_label_runs,
)
from lnbook.ml.training import History


def stored(folder, name, fits: dict[str, float]):
    hist = {k: History(task="classification", epochs=[1], loss=[1.0], accuracy=[v], label=k) for k, v in fits.items()}
    return save_runs(folder / name, hist, {"data": name, "device": "cuda:0"})


def official_fits(lng_best: float) -> dict[str, float]:
    fits = {r.label: 0.5 for r in official_runs()}
    fits.update({"linear": 0.2, "LN d4": 0.4})
    fits[Run("lng", 4, 16).label] = lng_best
    return fits


def test_ci_scale_reads_what_is_stored_and_says_why_nothing_runs(tmp_path):
    status, cifar, mnist = random_label_runs(tmp_path, "ci")
    assert status.startswith("ci scale: the CIFAR-10 and MNIST runs need LNBOOK_SCALE=paper, LNBOOK_CIFAR10_DIR or "
                             "LNBOOK_MNIST_DIR")
    assert not cifar.stored and not mnist.stored and cifar.data == "grayscale CIFAR-10"
    with pytest.raises(ValueError, match="no stored grayscale CIFAR-10 run"):
        cifar.verdict()
    stored(tmp_path, CIFAR_FILE, official_fits(1.0))
    stored(tmp_path, MNIST_FILE, official_fits(0.9))
    _, cifar, mnist = random_label_runs(tmp_path, "ci")
    assert cifar.verdict() == (1.0, "consistent (reconstruction)") and cifar.meta["device"] == "cuda:0"
    assert cifar.ours() == "linear 0.200, LN-Net 0.400, best LN-G 1.000"
    assert mnist.verdict() == (0.9, "differs")  # the best LN-G does not fit every label


def test_paper_scale_without_data_says_so_and_bad_scales_are_refused(tmp_path):
    status, cifar, _ = random_label_runs(tmp_path, "paper")
    assert "LNBOOK_CIFAR10_DIR is not set" in status and "LNBOOK_MNIST_DIR is not set" in status
    assert "never downloads" in status and not cifar.stored
    with pytest.raises(ValueError, match="scale must be one of"):
        random_label_runs(tmp_path, "huge")


def _tiny_mnist(folder, n=20):
    """The two training idx files of MNIST with ``n`` random images (the reader's format, made here)."""
    rng = np.random.default_rng(0)
    for name, arr in (("train-images-idx3-ubyte", rng.integers(0, 256, size=(n, 28, 28))),
                      ("train-labels-idx1-ubyte", rng.integers(0, 10, size=n))):
        head = bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in arr.shape)
        (folder / name).write_bytes(head + arr.astype(np.uint8).tobytes())
    return folder


def test_paper_scale_trains_mnist_alone_when_only_its_folder_is_given(tmp_path, monkeypatch):
    """LNBOOK_MNIST_DIR without LNBOOK_CIFAR10_DIR trains and stores the MNIST sweep (it used to be skipped unless
    CIFAR-10 was given too); the status says what was trained and what was skipped. Three of the sweep's networks on
    20 made-up images keep it short; the sweep itself (no depth sweep for MNIST) is asked for."""
    asked = []

    def three_runs(depth_sweep=True):
        asked.append(depth_sweep)
        return [Run("linear", 0), Run("ln", 4), Run("lng", 4, 16)]

    monkeypatch.setattr(paper_runs, "official_runs", three_runs)
    (tmp_path / "mnist_files").mkdir()
    (tmp_path / "out").mkdir()
    data, out = _tiny_mnist(tmp_path / "mnist_files"), tmp_path / "out"
    status, cifar, mnist = random_label_runs(out, "paper", cifar_dir=None, mnist_dir=data)
    assert asked == [False] and mnist.stored and not cifar.stored and (out / MNIST_FILE).exists()
    assert set(mnist.fits) == {"linear", "LN d4", Run("lng", 4, 16).label}
    assert all(0.0 <= v <= 1.0 for v in mnist.fits.values())
    assert status.startswith("paper scale: the MNIST runs were trained now") and "LNBOOK_CIFAR10_DIR is not set" in status
    assert "LNBOOK_MNIST_DIR is not set" not in status


def test_the_protocol_reads_as_text_and_the_figure_takes_the_dividing_groups():
    text = describe_official()
    assert "{" not in text and "'" not in text  # no raw dict on the page
    assert f"width {OFFICIAL['width']}" in text and "groups 2, 4, 6, 8, 16, 32, 64, 128" in text
    assert "multiplied by 0.5 every 20 epochs" in text
    groups, fits = groups_curve(official_fits(1.0))
    assert groups == [2, 4, 8, 16, 32, 64, 128]  # 6 does not divide the width 256: nn.GroupNorm(6, 256) raises
    assert fits[groups.index(16)] == 1.0 and fits[0] == 0.5
    with pytest.raises(ValueError, match="fits lacks the runs"):
        groups_curve({"linear": 0.1})


def test_the_lab_stores_its_runs_where_the_reproduction_table_does_not_read_them():
    """load_comparisons reads every JSON file of results/<scale>/ as a comparison; the stored runs are not
    comparisons, so at paper scale the lab stores them in the `recorded` subfolder (it stored them in the folder itself,
    which would have broken the reproduction table at paper scale)."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    cells = json.loads((root / "notebooks" / "ch05_random_labels_lab.ipynb").read_text())["cells"]
    call = next("".join(c["source"]) for c in cells if "random_label_runs(" in "".join(c["source"]) and c["cell_type"] == "code" and "import" not in "".join(c["source"]))
    assert 'results_dir("paper") / "recorded"' in call
