r"""The book's datasets: made here or shipped by an installed package, never downloaded.

* :func:`digits` — scikit-learn's 1797 handwritten digits (8x8, shipped with scikit-learn);
* :func:`random_labels` / :func:`with_random_labels` — labels drawn once, uniformly, from a seed
  (the random-label experiments of chapter 5);
* :func:`spiral` — two interleaved spiral arms in the plane (chapter 6);
* :func:`sphere_octants` — points on the unit sphere, labelled by the parity of their octant, so
  that any two octants sharing a face have opposite classes (chapter 6).

Every function returns ``(X, y)`` with ``X`` a float tensor of shape ``(n, features)`` and ``y`` a
``torch.long`` tensor of labels ``0..C-1``; sizes and seeds are arguments, and bad ones raise a
``ValueError`` that says what is allowed.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from lnbook.validation import check_positive_int

__all__ = ["digits", "random_labels", "with_random_labels", "spiral", "sphere_octants"]


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    return int(seed)


def _check_noise(noise) -> float:
    if isinstance(noise, bool) or not isinstance(noise, numbers.Real) or not (0 <= noise < math.inf):
        raise ValueError(f"noise must be a finite number >= 0, got {noise!r}")
    return float(noise)


def digits(dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's handwritten digits: ``X`` of shape (1797, 64) scaled to [0, 1], labels 0..9."""
    from sklearn.datasets import load_digits

    data = load_digits()
    X = torch.as_tensor(data.data / 16.0, dtype=dtype)
    return X, torch.as_tensor(data.target, dtype=torch.long)


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
