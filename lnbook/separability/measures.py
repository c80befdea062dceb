r"""How hard labelled samples are to separate: the sum of squares ratio (SSR) and its linear bound (LSSR).

Samples are the rows :math:`x_1, \dots, x_m \in \mathbb R^d` of ``X``; ``y`` holds an integer label
per row. With class :math:`c` holding :math:`n_c` samples of mean :math:`\mu_c`, and :math:`\mu` the
mean of all samples, the **within-class**, **between-class** and **total scatter** matrices are

.. math::

    S_w = \sum_c \sum_{i:\,y_i = c} (x_i - \mu_c)(x_i - \mu_c)^\top, \quad
    S_b = \sum_c n_c (\mu_c - \mu)(\mu_c - \mu)^\top, \quad
    S_t = \sum_i (x_i - \mu)(x_i - \mu)^\top = S_w + S_b .

**SSR** (our reconstruction of the measure of Ni et al., ICML 2024, whose exact definition is not
available to us) is the share of the total sum of squares that stays inside the classes,

.. math:: \mathrm{SSR}(X, y) = \frac{\operatorname{tr} S_w}{\operatorname{tr} S_t} \in [0, 1],

small meaning easy (0: every class is a single point), 1 meaning that all class means coincide.
*Convention:* when :math:`\operatorname{tr} S_t = 0` (all samples equal) nothing is separated and
:math:`\mathrm{SSR} := 1`.

**LSSR** is the infimum of :math:`\mathrm{SSR}(AX + b)` over all linear and affine maps. It equals
the smallest generalised eigenvalue of :math:`S_w w = \lambda S_t w` on the range of :math:`S_t`,

.. math:: \mathrm{LSSR}(X, y) = \min_{w:\ S_t w \ne 0} \frac{w^\top S_w w}{w^\top S_t w},

and is attained by the rank-one map :math:`x \mapsto w^\top x` (the book proves both). *Numerical
rank convention:* the range of :math:`S_t` is spanned by the right singular vectors of the centred
data whose singular values exceed ``max(m, d) * machine_eps * largest``; directions with less
spread than that are treated as absent. If no direction is left (all samples equal),
:math:`\mathrm{LSSR} := 1` and :func:`lssr_direction` returns the first basis vector.

A class with a single sample is fine (its within-class scatter is zero).

>>> import numpy as np
>>> round(ssr(np.array([[0.0], [2.0], [10.0]]), [0, 0, 1]), 6)  # within 2, total 56
0.035714
>>> xor = np.array([[1.0, 1.0], [-1.0, -1.0], [1.0, -1.0], [-1.0, 1.0]])
>>> round(lssr(xor, [0, 0, 1, 1]), 12)  # both class means at 0: no linear map helps
1.0
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

__all__ = [
    "symbolic_ssr",
    "scatter_matrices",
    "ssr",
    "lssr",
    "lssr_direction",
    "ssr_loss",
    "ssr_from_onehot",
]


# --------------------------------------------------------------------------- input checks


def _as_float64_samples(X, name: str = "X") -> np.ndarray:
    if isinstance(X, torch.Tensor):
        if not (torch.is_floating_point(X) or X.dtype in (torch.int8, torch.int16, torch.int32, torch.int64)):
            raise TypeError(f"{name} must hold real numbers, got dtype {X.dtype}")
        arr = X.detach().to("cpu", torch.float64).numpy()
    else:
        try:
            arr = np.asarray(X)
        except Exception as exc:  # ragged lists and the like
            raise TypeError(f"{name} must be a numpy array or torch tensor of shape (m, d): {exc}") from None
        if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
            raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
        arr = arr.astype(np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"{name} must have shape (m, d) with samples in rows (or (m,) for scalars), got {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} has no samples (shape {arr.shape})")
    if arr.shape[1] == 0:
        raise ValueError(f"{name} has no features (shape {arr.shape})")
    if not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).sum())
        raise ValueError(f"{name} contains {bad} non-finite value(s) (NaN or inf); clean the samples first")
    return arr


def _as_labels(y, m: int, num_classes) -> tuple[np.ndarray, int]:
    """Integer class codes 0..k-1 per sample, and k."""
    if isinstance(y, torch.Tensor):
        if torch.is_floating_point(y) or torch.is_complex(y) or y.dtype == torch.bool:
            raise ValueError(
                f"labels y must be integers, got dtype {y.dtype}; if they are whole numbers, pass y.long()"
            )
        arr = y.detach().cpu().numpy()
    else:
        arr = np.asarray(y)
        if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(
                f"labels y must be integers, got dtype {arr.dtype}; if they are whole numbers, pass y.astype(int)"
            )
    if arr.ndim != 1:
        raise ValueError(f"labels y must be one-dimensional (one label per sample), got shape {arr.shape}")
    if arr.shape[0] != m:
        raise ValueError(f"X has {m} samples but y has {arr.shape[0]} labels; they must have the same length")
    arr = arr.astype(np.int64)
    if num_classes is None:
        classes, codes = np.unique(arr, return_inverse=True)
        k = len(classes)
        if k < 2:
            raise ValueError(
                f"y has only one class ({classes.tolist()}); SSR compares classes, so at least 2 are needed"
            )
        return codes.reshape(-1), k
    if isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral):
        raise TypeError(f"num_classes must be an integer or None, got {type(num_classes).__name__}")
    k = int(num_classes)
    if k < 2:
        raise ValueError(f"num_classes must be >= 2 (SSR compares classes), got {k}")
    if arr.min() < 0 or arr.max() >= k:
        raise ValueError(f"with num_classes={k} the labels must lie in 0..{k - 1}, got {arr.min()}..{arr.max()}")
    counts = np.bincount(arr, minlength=k)
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        raise ValueError(
            f"class(es) {empty.tolist()} have no samples; every one of the num_classes={k} classes needs "
            "at least one sample (drop num_classes to use only the labels present)"
        )
    return arr, k


def _prepare(X, y, num_classes=None):
    Xa = _as_float64_samples(X)
    codes, k = _as_labels(y, Xa.shape[0], num_classes)
    return Xa, codes, k


def _class_means(Xa: np.ndarray, codes: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    counts = np.bincount(codes, minlength=k).astype(np.float64)
    sums = np.zeros((k, Xa.shape[1]))
    np.add.at(sums, codes, Xa)
    return sums / counts[:, None], counts


# --------------------------------------------------------------------------- public functions


def scatter_matrices(X, y, num_classes: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""The within-class, between-class and total scatter matrices :math:`(S_w, S_b, S_t)` (float64, ``(d, d)``).

    :math:`S_t = S_w + S_b` up to rounding. See the module docstring for the formulas.
    """
    Xa, codes, k = _prepare(X, y, num_classes)
    means, counts = _class_means(Xa, codes, k)
    mu = Xa.mean(axis=0)
    within = Xa - means[codes]
    centred = Xa - mu
    S_w = within.T @ within
    S_t = centred.T @ centred
    dm = means - mu
    S_b = (dm * counts[:, None]).T @ dm
    return S_w, S_b, S_t


def ssr(X, y, num_classes: int | None = None) -> float:
    r"""Sum of squares ratio :math:`\operatorname{tr} S_w / \operatorname{tr} S_t` of the samples ``X`` (rows) with labels ``y``.

    ``X``: numpy array or torch tensor of shape ``(m, d)`` (or ``(m,)``); ``y``: ``m`` integer labels.
    With ``num_classes`` the labels must be ``0..num_classes-1`` and every class must occur.
    Returns a float in ``[0, 1]``; 1 by convention when all samples are equal.
    """
    Xa, codes, k = _prepare(X, y, num_classes)
    means, _ = _class_means(Xa, codes, k)
    within = float(np.sum((Xa - means[codes]) ** 2))
    total = float(np.sum((Xa - Xa.mean(axis=0)) ** 2))
    if total == 0.0:
        return 1.0
    return min(within / total, 1.0)


def _lssr_solve(Xa: np.ndarray, codes: np.ndarray, k: int) -> tuple[float, np.ndarray]:
    m, d = Xa.shape
    centred = Xa - Xa.mean(axis=0)
    U, s, Vt = np.linalg.svd(centred, full_matrices=False)
    if s.size == 0 or s[0] == 0.0:
        e1 = np.zeros(d)
        e1[0] = 1.0
        return 1.0, e1
    tol = s[0] * max(m, d) * np.finfo(np.float64).eps
    r = int(np.sum(s > tol))
    # Whitened coordinates: Z = centred V_r diag(1/s_r) = U_r, so that S_t becomes the identity there.
    Z = U[:, :r]
    means, _ = _class_means(Z, codes, k)
    within = Z - means[codes]
    Sw = within.T @ within
    Sw = 0.5 * (Sw + Sw.T)
    evals, evecs = np.linalg.eigh(Sw)
    lam = float(np.clip(evals[0], 0.0, 1.0))
    w = Vt[:r].T @ (evecs[:, 0] / s[:r])
    w = w / np.linalg.norm(w)
    # fix the sign for reproducibility: largest-magnitude entry positive
    if w[np.argmax(np.abs(w))] < 0:
        w = -w
    return lam, w


def lssr(X, y, num_classes: int | None = None) -> float:
    r"""Linear SSR: the smallest SSR that any linear or affine map of the samples can reach.

    Computed as the smallest eigenvalue of :math:`S_w` in coordinates where :math:`S_t = I` on its
    range (numerical-rank convention in the module docstring). In ``[0, 1]``.
    """
    Xa, codes, k = _prepare(X, y, num_classes)
    return _lssr_solve(Xa, codes, k)[0]


def lssr_direction(X, y, num_classes: int | None = None):
    r"""A unit vector :math:`w` with :math:`\mathrm{SSR}(Xw) = \mathrm{LSSR}(X)`: the optimal rank-one map.

    It solves :math:`S_w w = \lambda_{\min} S_t w` with :math:`w` in the range of :math:`S_t`. For two
    classes it is parallel to Fisher's direction :math:`S_t^{+}(\mu_1 - \mu_0)`. Returned as a float64
    numpy array of shape ``(d,)``, or a float64 torch tensor on ``X``'s device when ``X`` is a tensor.
    """
    Xa, codes, k = _prepare(X, y, num_classes)
    w = _lssr_solve(Xa, codes, k)[1]
    if isinstance(X, torch.Tensor):
        return torch.as_tensor(w, dtype=torch.float64, device=X.device)
    return w


def ssr_loss(Z: torch.Tensor, y: torch.Tensor, num_classes: int | None = None, tiny: float = 1e-12) -> torch.Tensor:
    r"""Differentiable SSR of a batch of network outputs ``Z`` ``(m, p)`` with labels ``y``: a 0-d tensor.

    The same quantity as :func:`ssr`, computed in ``Z``'s dtype and on its device so that it can be
    minimised by gradient descent; the denominator is ``max(tr S_t, tiny)``. ``y`` must be an
    integer tensor with labels ``0..num_classes-1`` (``num_classes`` defaults to ``y.max() + 1``).
    """
    if not isinstance(Z, torch.Tensor) or not torch.is_floating_point(Z):
        raise TypeError("Z must be a floating-point torch tensor of network outputs, shape (m, p)")
    if not isinstance(y, torch.Tensor) or torch.is_floating_point(y) or y.dtype == torch.bool:
        raise ValueError("labels y must be an integer torch tensor; pass y.long()")
    if Z.dim() == 1:
        Z = Z[:, None]
    if Z.dim() != 2 or y.dim() != 1 or y.shape[0] != Z.shape[0]:
        raise ValueError(f"need Z of shape (m, p) and y of shape (m,), got {tuple(Z.shape)} and {tuple(y.shape)}")
    k = int(y.max()) + 1 if num_classes is None else int(num_classes)
    if int(y.min()) < 0 or int(y.max()) >= k:
        raise ValueError(f"labels must lie in 0..{k - 1}")
    onehot = torch.nn.functional.one_hot(y.to(Z.device), k).to(Z.dtype)
    return ssr_from_onehot(Z, onehot, tiny)


def ssr_from_onehot(Z: torch.Tensor, onehot: torch.Tensor, tiny: float = 1e-12) -> torch.Tensor:
    """The computation behind :func:`ssr_loss`, without checks, for a precomputed ``(m, k)`` one-hot label matrix.

    Meant for training loops (no host-device synchronisation); ``Z`` must be ``(m, p)``.
    """
    counts = onehot.sum(dim=0).clamp_min(1.0)
    means = (onehot.T @ Z) / counts[:, None]
    within = (Z - onehot @ means).pow(2).sum()
    total = (Z - Z.mean(dim=0)).pow(2).sum()
    return within / total.clamp_min(tiny)


def symbolic_ssr(points, labels):
    """Exact SSR of a list of sympy column vectors (for the book's symbolic checks), simplified.

    >>> import sympy as sp
    >>> symbolic_ssr([sp.Matrix([0]), sp.Matrix([1]), sp.Matrix([3])], [0, 0, 1])
    3/28
    """
    import sympy as sp

    if len(points) != len(labels):
        raise ValueError(f"points and labels differ in length ({len(points)} != {len(labels)})")
    mu = sum(points, sp.zeros(*points[0].shape)) / len(points)
    within = 0
    for c in sorted(set(labels)):
        pts = [p for p, lab in zip(points, labels) if lab == c]
        mc = sum(pts, sp.zeros(*points[0].shape)) / len(pts)
        within += sum(((p - mc).T * (p - mc))[0] for p in pts)
    total = sum(((p - mu).T * (p - mu))[0] for p in points)
    return sp.simplify(within / total)
