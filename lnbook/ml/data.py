r"""The book's datasets: made here or shipped by an installed package, never downloaded.

* :func:`digits` — scikit-learn's 1797 handwritten digits (8x8, shipped with scikit-learn);
  :func:`digits_split` — the same, split into a stratified training and test set (chapter 8);
* :func:`random_labels` / :func:`with_random_labels` — labels drawn once, uniformly, from a seed
  (the random-label experiments of chapter 5);
* :func:`spiral` — two interleaved spiral arms in the plane (chapter 6);
* :func:`sphere_octants` — points on the unit sphere, labelled by the parity of their octant, so
  that any two octants sharing a face have opposite classes (chapter 6);
* :func:`associative_recall` — token sequences of key-value pairs and a query (chapter 5's
  Transformer task);
* :func:`mnist` and :func:`cifar10_grayscale` — readers for the standard files of MNIST and
  CIFAR-10 in a local folder that the reader downloaded (the book never downloads them); CIFAR-10
  is turned into grayscale 32x32 images as in the harness of Ni et al. (chapter 5);
  :func:`cifar_images` reads the colour images of CIFAR-10 or CIFAR-100 as stored (uint8, chapter 8's
  paper scale); :func:`dataset_folder` reads such a folder from an environment variable.

Every function returns ``(X, y)`` with ``X`` a float tensor of shape ``(n, features)`` and ``y`` a
``torch.long`` tensor of labels ``0..C-1``; sizes and seeds are arguments, and bad ones raise a
``ValueError`` that says what is allowed.
"""

from __future__ import annotations

import gzip
import math
import numbers
import os
import pickle
from pathlib import Path

import numpy as np
import torch

from lnbook.util.validation import check_positive_int

__all__ = [
    "digits",
    "digits_split",
    "random_labels",
    "with_random_labels",
    "spiral",
    "sphere_octants",
    "associative_recall",
    "MNIST_FILES",
    "CIFAR10_FILES",
    "CIFAR100_FILES",
    "mnist",
    "cifar10_grayscale",
    "cifar_images",
    "dataset_folder",
]


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    return int(seed)


def _check_noise(noise) -> float:
    if isinstance(noise, bool) or not isinstance(noise, numbers.Real) or not (0 <= noise < math.inf):
        raise ValueError(f"noise must be a finite number >= 0, got {noise!r}")
    return float(noise)


def digits(dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's handwritten digits: ``X`` of shape (1797, 64) scaled to [0, 1], labels 0..9.

    Read from the file scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``, what ``load_digits`` reads)
    without importing scikit-learn, whose import takes about as long as a small lab's training."""
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz" if spec else None
    if path is None or not path.is_file():
        raise ModuleNotFoundError("the digits come with scikit-learn: pip install scikit-learn (make setup installs it)")
    data = np.loadtxt(path, delimiter=",")
    X = torch.as_tensor(data[:, :-1] / 16.0, dtype=dtype)
    return X, torch.as_tensor(data[:, -1].astype(np.int64), dtype=torch.long)


def digits_split(test_size: int = 450, seed: int = 0, dtype=torch.float32):
    """:func:`digits` split into ``(X_train, y_train, X_test, y_test)``: ``test_size`` images in the test set,
    stratified by label, drawn by scikit-learn's ``train_test_split`` with ``random_state=seed`` (the default
    gives 1347 / 450)."""
    from sklearn.model_selection import train_test_split

    X, y = digits(dtype)
    test_size = check_positive_int(test_size, "test_size", minimum=10)
    if test_size > len(X) - 10:
        raise ValueError(f"test_size must leave at least one image per class for training, got {test_size} of {len(X)}")
    train_idx, test_idx = train_test_split(np.arange(len(X)), test_size=test_size, stratify=y.cpu().numpy(),
                                           random_state=_check_seed(seed))
    train_idx, test_idx = torch.as_tensor(train_idx), torch.as_tensor(test_idx)
    return X[train_idx], y[train_idx], X[test_idx], y[test_idx]


def random_labels(n: int, num_classes: int, seed: int = 0) -> torch.Tensor:
    """``n`` labels drawn independently and uniformly from ``0..num_classes-1`` with ``seed``."""
    n = check_positive_int(n, "n")
    num_classes = check_positive_int(num_classes, "num_classes", minimum=2)
    g = torch.Generator().manual_seed(_check_seed(seed))
    return torch.randint(num_classes, (n,), generator=g)


def with_random_labels(X: torch.Tensor, num_classes: int = 10, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``X`` unchanged with labels drawn once by :func:`random_labels` (the inputs carry no information about them)."""
    if not isinstance(X, torch.Tensor) or X.dim() < 2:
        raise ValueError("X must be a tensor of shape (n_samples, features...)")
    return X, random_labels(len(X), num_classes, seed)


def spiral(
    n: int = 1000, turns: float = 1.5, noise: float = 0.05, seed: int = 0, dtype=torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Two spiral arms of ``n // 2`` points each (``n`` even), classes 0 and 1.

    Arm ``c`` is :math:`r(t)\,(\cos(2\pi\,\text{turns}\,t + c\pi), \sin(2\pi\,\text{turns}\,t + c\pi))`
    with :math:`r(t) = t`, :math:`t` uniform in :math:`[0.05, 1]`, plus Gaussian noise of standard
    deviation ``noise`` on each coordinate: the second arm is the first turned by half a turn.
    """
    n = check_positive_int(n, "n", minimum=2)
    if n % 2:
        raise ValueError(f"n must be even (two arms of n // 2 points), got {n}")
    if isinstance(turns, bool) or not isinstance(turns, numbers.Real) or not (0 < turns < math.inf):
        raise ValueError(f"turns must be a finite number > 0, got {turns!r}")
    noise = _check_noise(noise)
    rng = np.random.default_rng(_check_seed(seed))
    half = n // 2
    t = rng.uniform(0.05, 1.0, size=(2, half))
    angle = 2 * np.pi * turns * t + np.pi * np.arange(2)[:, None]
    pts = np.stack([t * np.cos(angle), t * np.sin(angle)], axis=-1).reshape(n, 2)
    pts += noise * rng.standard_normal(pts.shape)
    labels = np.repeat(np.arange(2), half)
    return torch.as_tensor(pts, dtype=dtype), torch.as_tensor(labels, dtype=torch.long)


def sphere_octants(n: int = 2000, seed: int = 0, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` points uniform on the unit sphere of R^3, labelled by the parity of their octant.

    The label is ``[x > 0] + [y > 0] + [z > 0] mod 2``: crossing any coordinate plane flips it, so
    the eight octants alternate like the squares of a chessboard.
    """
    n = check_positive_int(n, "n", minimum=8)
    rng = np.random.default_rng(_check_seed(seed))
    pts = rng.standard_normal((n, 3))
    pts /= np.linalg.norm(pts, axis=1, keepdims=True)
    labels = (pts > 0).sum(axis=1) % 2
    return torch.as_tensor(pts, dtype=dtype), torch.as_tensor(labels, dtype=torch.long)


def associative_recall(
    n: int, pairs: int = 4, keys: int = 8, values: int = 8, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences ``k1 v1 k2 v2 ... k_p v_p q`` and the value stored under the query key ``q``.

    Keys are tokens ``0..keys-1`` (distinct within a sequence), values are tokens
    ``keys..keys+values-1``, and ``q`` is one of the sequence's keys, uniformly. Returns token ids
    ``X`` of shape ``(n, 2 * pairs + 1)`` (``torch.long``) and labels ``y`` (the value's token id), so
    a model that reads the whole vocabulary of ``keys + values`` tokens is a ``keys + values``-class
    classifier at the last position.
    """
    n = check_positive_int(n, "n")
    pairs = check_positive_int(pairs, "pairs")
    keys = check_positive_int(keys, "keys", minimum=pairs)
    values = check_positive_int(values, "values", minimum=2)
    g = torch.Generator().manual_seed(_check_seed(seed))
    k = torch.argsort(torch.rand(n, keys, generator=g), dim=1)[:, :pairs]
    v = keys + torch.randint(values, (n, pairs), generator=g)
    which = torch.randint(pairs, (n,), generator=g)
    rows = torch.arange(n)
    X = torch.cat([torch.stack([k, v], dim=2).reshape(n, 2 * pairs), k[rows, which].unsqueeze(1)], dim=1)
    return X, v[rows, which]


# --- local MNIST and CIFAR-10 (never downloaded here) ---------------------------------------------

MNIST_FILES = {
    True: ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    False: ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
CIFAR10_FILES = {True: tuple(f"data_batch_{i}" for i in range(1, 6)), False: ("test_batch",)}
CIFAR100_FILES = {True: ("train",), False: ("test",)}
# name -> (sub-folder of the official archive, files, label key, number of classes)
_CIFAR = {
    "cifar10": ("cifar-10-batches-py", CIFAR10_FILES, b"labels", 10, "CIFAR-10", "cifar-10-python.tar.gz"),
    "cifar100": ("cifar-100-python", CIFAR100_FILES, b"fine_labels", 100, "CIFAR-100", "cifar-100-python.tar.gz"),
}
# ITU-R 601 luma weights, as torchvision's rgb_to_grayscale (used by the harness's transforms.Grayscale)
GRAY_WEIGHTS = (0.2989, 0.587, 0.114)


def _folder(folder, what: str) -> Path:
    if not isinstance(folder, (str, os.PathLike)):
        raise TypeError(f"{what}: folder must be a path (str or pathlib.Path), got {type(folder).__name__}")
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"{what}: the folder {path} does not exist; download the dataset there first")
    return path


def _read_idx(path: Path, ndim: int) -> np.ndarray:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        raw = fh.read()
    if len(raw) < 4 + 4 * ndim or raw[0:2] != b"\x00\x00" or raw[2] != 0x08 or raw[3] != ndim:
        raise ValueError(
            f"{path} is not an idx file of unsigned bytes with {ndim} dimension(s) "
            "(its magic number is wrong); re-download it"
        )
    dims = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    body = raw[4 + 4 * ndim :]
    if len(body) != int(np.prod(dims)):
        raise ValueError(f"{path} announces shape {dims} but holds {len(body)} bytes; the file is truncated")
    return np.frombuffer(body, dtype=np.uint8).reshape(dims)


def _find(folder: Path, name: str) -> Path | None:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def mnist(folder, train: bool = True, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """MNIST from the four standard idx files (optionally ``.gz``) in ``folder``.

    ``X`` has shape ``(n, 784)``: pixels ``p`` in ``0..255`` mapped to ``2 p / 255 - 1`` in ``[-1, 1]``
    (``ToTensor`` then ``Normalize((0.5,), (0.5,))``, the harness's transform); ``y`` holds the labels
    0..9. Raises ``FileNotFoundError`` naming the files expected, ``ValueError`` for malformed files.
    """
    path = _folder(folder, "mnist")
    names = MNIST_FILES[bool(train)]
    found = [_find(path, name) for name in names]
    if any(f is None for f in found):
        raise FileNotFoundError(
            f"mnist: {path} lacks {[n for n, f in zip(names, found) if f is None]}; expected the files "
            f"{list(names)} (each optionally ending in .gz)"
        )
    images, labels = _read_idx(found[0], 3), _read_idx(found[1], 1)
    if len(images) != len(labels):
        raise ValueError(f"mnist: {len(images)} images but {len(labels)} labels in {path}")
    if labels.size and labels.max() > 9:
        raise ValueError(f"mnist: labels must lie in 0..9, found {int(labels.max())} in {found[1]}")
    X = torch.as_tensor(images.reshape(len(images), -1).astype(np.float64) / 255.0 * 2.0 - 1.0, dtype=dtype)
    return X, torch.as_tensor(labels.astype(np.int64))


def cifar10_grayscale(folder, train: bool = True, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """CIFAR-10 from its python pickles, as grayscale 32x32 images flattened to 1024 features.

    ``folder`` holds ``data_batch_1`` .. ``data_batch_5`` and ``test_batch`` (or is the parent of
    ``cifar-10-batches-py/`` holding them). Each channel value ``c`` in ``0..255`` is mapped to
    ``2 c / 255 - 1`` and the pixel to ``0.2989 R + 0.587 G + 0.114 B`` of the mapped channels: the
    harness's ``ToTensor -> Normalize((0.5,), (0.5,)) -> Grayscale()``, so values lie in
    ``[-0.9999, 0.9999]``. Labels 0..9. Raises ``FileNotFoundError`` naming the files expected and
    ``ValueError`` for malformed batches. The pickles are trusted files: only read ones you downloaded.
    """
    data, y = _cifar_pickles(folder, "cifar10", train, "cifar10_grayscale")
    rgb = data.astype(np.float64).reshape(-1, 3, 1024) / 255.0 * 2.0 - 1.0
    gray = sum(w * rgb[:, c] for c, w in enumerate(GRAY_WEIGHTS))
    return torch.as_tensor(gray, dtype=dtype), torch.as_tensor(y)


def cifar_images(folder, name: str = "cifar10", train: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """CIFAR-10 or CIFAR-100 (``name``) from its python pickles, as stored: images ``(n, 3, 32, 32)`` in uint8
    (channel-major, as the files hold them) and labels (long; CIFAR-100's 100 fine labels).

    ``folder`` holds the batches (``data_batch_1`` .. ``data_batch_5`` and ``test_batch`` for CIFAR-10, ``train``
    and ``test`` for CIFAR-100) or is the parent of ``cifar-10-batches-py/`` / ``cifar-100-python/``. Raises
    ``FileNotFoundError`` naming the files expected and ``ValueError`` for malformed batches. The pickles are
    trusted files: only read ones you downloaded.
    """
    data, y = _cifar_pickles(folder, name, train, "cifar_images")
    return torch.as_tensor(data.reshape(-1, 3, 32, 32)), torch.as_tensor(y)


def _cifar_pickles(folder, name: str, train: bool, what: str) -> tuple[np.ndarray, np.ndarray]:
    """The rows ``(n, 3072)`` (uint8) and labels (int64) of the CIFAR ``name`` batches in ``folder``, checked."""
    if name not in _CIFAR:
        raise ValueError(f"{what}: name must be 'cifar10' or 'cifar100', got {name!r}")
    sub, files, label_key, classes, title, archive = _CIFAR[name]
    path = _folder(folder, what)
    if (path / sub).is_dir():
        path = path / sub
    names = files[bool(train)]
    missing = [n for n in names if not (path / n).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{what}: {path} lacks {missing}; expected the {title} python batches "
            f"{list(files[True]) + list(files[False])} (from {archive}; the book never downloads data)"
        )
    images, labels = [], []
    for n in names:
        with open(path / n, "rb") as fh:
            try:
                batch = pickle.load(fh, encoding="bytes")
            except Exception as err:  # noqa: BLE001 - any unpickling failure means a bad file
                raise ValueError(f"{what}: {path / n} is not a {title} batch ({err})") from None
        data = batch.get(b"data") if isinstance(batch, dict) else None
        lab = batch.get(label_key) if isinstance(batch, dict) else None
        data = None if data is None else np.asarray(data)
        if data is None or lab is None or data.ndim != 2 or data.shape[1] != 3072 or len(lab) != len(data):
            raise ValueError(f"{what}: {path / n} must hold b'data' of shape (n, 3072) and n {label_key!r}")
        images.append(data.astype(np.uint8))
        labels.append(np.asarray(lab, dtype=np.int64))
    y = np.concatenate(labels)
    if y.size and (y.min() < 0 or y.max() >= classes):
        raise ValueError(f"{what}: labels must lie in 0..{classes - 1}, found {int(y.min())}..{int(y.max())}")
    return np.concatenate(images), y


def dataset_folder(env_var: str) -> Path | None:
    """The folder named by the environment variable ``env_var`` (e.g. ``LNBOOK_CIFAR10_DIR``), or None if unset.

    A variable that is set to a folder that does not exist raises ``FileNotFoundError``.
    """
    value = os.environ.get(env_var, "").strip()
    if not value:
        return None
    return _folder(value, env_var)
