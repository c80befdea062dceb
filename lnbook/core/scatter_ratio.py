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

and is attained by the rank-one map :math:`x \mapsto w^\top x` (the book proves both).

**Resolution (float64).** Samples that are equal in exact arithmetic often arrive from a float64 computation
differing by its rounding, and the ratio of two rounding errors is not their SSR. Each feature ``j`` therefore has
a resolution ``rtol * max_i |x_ij|``, relative to its *own* largest entry (the rounding of an entry is relative to
the entry): a feature whose root-mean-square spread about its mean is at most its resolution is constant to
rounding and is set to its mean (``ssr``, ``lssr``, ``ssr_from_onehot`` alike); if no feature is left, all samples
are equal and the conventions below give 1. ``rtol`` defaults to ``2**8`` units of rounding of the input's dtype
(:func:`default_rtol`: about ``5.7e-14`` for float64, ``3.1e-5`` for float32), so a common shift ``b`` changes
nothing as long as ``|b|`` stays below about ``1e13`` times the spread in float64 (beyond that, the shifted
samples themselves have lost the spread to rounding). **LSSR** is computed in units of resolution per feature
(column ``j`` divided by ``rtol * max_i |x_ij|``): its range of :math:`S_t` is spanned by the right singular
vectors of the centred data in those units whose singular values exceed both ``sqrt(m)`` (a direction whose
root-mean-square spread is below one unit of resolution is rounding, as in ``ssr``) and ``max(m, d) * eps_mach``
times the largest. So ``lssr`` is invariant, to rounding, under every shift (as above), every rescaling of single
features and every permutation of them; for a general invertible map it is invariant as long as the map does not
push a direction of the data below the resolution. Data whose rounding is amplified by an ill-conditioned
computation need a coarser resolution: pass its error bound as ``rtol`` (no rule that sees only the data can tell
such rounding from a genuine small spread); ``rtol=0`` keeps every non-zero spread.

A class with a single sample is fine (its within-class scatter is zero).

>>> import numpy as np
>>> round(ssr(np.array([[0.0], [2.0], [10.0]]), [0, 0, 1]), 6)  # within 2, total 56
0.035714
>>> xor = np.array([[1.0, 1.0], [-1.0, -1.0], [1.0, -1.0], [-1.0, 1.0]])
>>> round(lssr(xor, [0, 0, 1, 1]), 12)  # both class means at 0: no linear map helps
1.0
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from lnbook.core.norms import layer_norm

__all__ = [
    "default_rtol",
    "layer_norm_rtol",
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
    return _samples_and_default_rtol(X, name)[0]


def _samples_and_default_rtol(X, name: str = "X") -> tuple[np.ndarray, float]:
    if isinstance(X, torch.Tensor):
        if not (torch.is_floating_point(X) or X.dtype in (torch.int8, torch.int16, torch.int32, torch.int64)):
            raise TypeError(f"{name} must hold real numbers, got dtype {X.dtype}")
        rtol = default_rtol(X.dtype)
        arr = X.detach().to("cpu", torch.float64).numpy()
    else:
        try:
            arr = np.asarray(X)
        except Exception as exc:  # ragged lists and the like
            raise TypeError(f"{name} must be a numpy array or torch tensor of shape (m, d): {exc}") from None
        if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
            raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
        rtol = default_rtol(arr.dtype)
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
    return arr, rtol


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


def _prepare(X, y, num_classes=None, rtol=None):
    """Samples as float64, label codes, number of classes, and the checked resolution (the dtype's default when None)."""
    Xa, default = _samples_and_default_rtol(X)
    codes, k = _as_labels(y, Xa.shape[0], num_classes)
    return Xa, codes, k, default if rtol is None else _check_rtol(rtol)


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
    Xa, codes, k, _ = _prepare(X, y, num_classes)
    means, counts = _class_means(Xa, codes, k)
    mu = Xa.mean(axis=0)
    within = Xa - means[codes]
    centred = Xa - mu
    S_w = within.T @ within
    S_t = centred.T @ centred
    dm = means - mu
    S_b = (dm * counts[:, None]).T @ dm
    return S_w, S_b, S_t


RESOLUTION_ULPS = 2**8  # the default resolution, in units of rounding of the input's dtype


def default_rtol(dtype) -> float:
    """The default resolution ``rtol`` for samples of ``dtype`` (numpy or torch): ``2**8`` units of its rounding.

    ``2**8 * eps``: about ``5.7e-14`` for float64 (and integers, which are converted to float64), ``3.1e-5`` for
    float32. Rounding of a few units, as left by a short float computation, is below it; a genuine spread of
    ``1e-12`` times the size of the data (a shift by ``1e12`` times the spread) is far above it.
    """
    if isinstance(dtype, torch.dtype):
        eps = torch.finfo(dtype).eps if dtype.is_floating_point else float(np.finfo(np.float64).eps)
    else:
        dt = np.dtype(dtype)
        eps = float(np.finfo(dt).eps) if np.issubdtype(dt, np.floating) else float(np.finfo(np.float64).eps)
    return RESOLUTION_ULPS * float(eps)


def layer_norm_rtol(H, eps: float = 0.0) -> float:
    r"""The resolution ``rtol`` for :func:`ssr` / :func:`lssr` of the float64 outputs ``LN_eps(H)`` of the rows ``H``.

    Chapter 1's float64 paragraph: the computed :math:`\mathrm{LN}_\varepsilon(h)` differs from the exact one by up to
    about :math:`d\,\epsilon_{\mathrm{mach}} \max_i|h_i| / r` per entry, :math:`r^2 = \|Ph\|^2 + d\varepsilon` (worst
    factor in front measured between 1/4 and 2). This returns ``16 d eps_mach max_rows(max|h| / r)`` divided by the
    smallest largest-entry of a feature of ``LN_eps(H)`` (``rtol`` is relative to each feature's largest entry), and
    at least :func:`default_rtol`. Samples equal in exact arithmetic then count as equal even where the rows are
    well conditioned only in name (``max|h| / r`` of a few thousand already exceeds the default). Raises
    ``ValueError`` where a feature of the outputs is itself below that error (no resolution separates it from rounding).
    """
    H = torch.as_tensor(np.asarray(H, dtype=np.float64) if not isinstance(H, torch.Tensor) else H).to(torch.float64)
    if H.dim() != 2 or H.shape[-1] < 2:
        raise ValueError(f"layer_norm_rtol: H must be a (m, d) matrix of LayerNorm inputs with d >= 2, got {tuple(H.shape)}")
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not (0.0 <= float(eps) < math.inf):
        raise ValueError(f"layer_norm_rtol: eps must be a finite number >= 0, got {eps!r}")
    eps = float(eps)
    d, u = H.shape[-1], float(np.finfo(np.float64).eps)
    scale = H.abs().amax(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    Hs = H / scale  # in units of max|h| (as layer_norm computes), so nothing overflows
    r = ((Hs - Hs.mean(dim=-1, keepdim=True)).pow(2).sum(dim=-1) + d * eps / scale[:, 0].pow(2)).sqrt()
    if bool((r == 0).any()):
        raise ValueError("layer_norm_rtol: a row of H is constant and eps = 0, where LayerNorm is undefined")
    bound = 16 * d * u * float((1 / r).max())
    largest = float(layer_norm(H, eps).abs().amax(dim=0).min())
    if largest <= bound:
        raise ValueError(f"layer_norm_rtol: a feature of LN(H) has no entry above its rounding error {bound:.1e}; drop it")
    return max(default_rtol(torch.float64), bound / largest)


def _check_rtol(rtol) -> float:
    if isinstance(rtol, bool) or not isinstance(rtol, numbers.Real) or not (
        float(rtol) == 0.0 or 1e-300 <= float(rtol) < 1.0
    ):
        raise ValueError(
            f"rtol must be 0 or a number in [1e-300, 1) (the relative resolution of each feature), or None for the "
            f"dtype's default, got {rtol!r}"
        )
    return float(rtol)


def _resolved_features(Xa: np.ndarray, rtol: float):
    """Per-feature exact rescaling, centring and resolution.

    Returns ``(C, e, mag, rms, kept)``: column ``j`` of ``X`` is ``2**e_j`` times a column of largest modulus
    ``mag_j`` in ``[1/2, 1)`` (the division by a power of two is exact, so no square over- or underflows and no
    feature is small beside another); ``C`` holds these columns centred, with the columns that are constant to
    the resolution (root-mean-square spread ``rms_j <= rtol * mag_j``) set to 0; ``kept`` marks the others.
    """
    big = np.max(np.abs(Xa), axis=0)
    e = np.frexp(big)[1].astype(np.int64)  # big = mantissa * 2**e with mantissa in [1/2, 1); e = 0 for a zero column
    Xs = np.ldexp(Xa, -e)
    C = Xs - Xs.mean(axis=0)
    # a second pass removes the rounding of the first mean (about eps * |shift|): after a large common shift the
    # differences x - mean are exact (Sterbenz) and their own mean is small, so C is accurate to eps * spread
    C = C - C.mean(axis=0)
    mag = np.max(np.abs(Xs), axis=0)
    rms = np.sqrt(np.mean(C * C, axis=0))
    kept = rms > rtol * mag
    C[:, ~kept] = 0.0
    return C, e, mag, rms, kept


def ssr(X, y, num_classes: int | None = None, rtol: float | None = None) -> float:
    r"""Sum of squares ratio :math:`\operatorname{tr} S_w / \operatorname{tr} S_t` of the samples ``X`` (rows) with labels ``y``.

    ``X``: numpy array or torch tensor of shape ``(m, d)`` (or ``(m,)``); ``y``: ``m`` integer labels.
    With ``num_classes`` the labels must be ``0..num_classes-1`` and every class must occur.
    Returns a float in ``[0, 1]``; 1 by convention when all samples are equal.

    **Float64.** Each feature is divided by a power of two near its largest entry (exact) and centred in two
    passes (a large common shift costs no digits of the spread) before anything is squared, so ``ssr(c X + b) = ssr(X)`` at every scale ``c`` and for every shift ``b`` that leaves the
    samples resolved. Features constant to the resolution ``rtol`` (relative to the feature's largest entry;
    default :func:`default_rtol` of ``X``'s dtype) count as constant, and if every feature is, the samples are
    equal and get the convention's 1 (see the module docstring). ``rtol=0`` computes the raw ratio.
    """
    Xa, codes, k, rtol = _prepare(X, y, num_classes, rtol)
    C, e, _, _, kept = _resolved_features(Xa, rtol)
    if not kept.any():
        return 1.0
    # back to one common unit: column j carries 2**(e_j - E); a column 2**1000 times smaller than the largest
    # underflows towards 0, where its squares are negligible anyway
    C = np.ldexp(C, np.where(kept, e - int(e[kept].max()), 0))
    means, _ = _class_means(C, codes, k)
    within = float(np.sum((C - means[codes]) ** 2))
    total = float(np.sum(C**2))
    return min(within / total, 1.0)


def _lssr_solve(Xa: np.ndarray, codes: np.ndarray, k: int, rtol: float) -> tuple[float, np.ndarray]:
    m, d = Xa.shape
    C, e, mag, rms, kept = _resolved_features(Xa, rtol)
    e1 = np.zeros(d)
    e1[0] = 1.0
    if not kept.any():
        return 1.0, e1
    # units of resolution per feature (rtol > 0) or of the feature's own spread (rtol = 0)
    unit = rtol * mag[kept] if rtol > 0 else rms[kept]
    H = C[:, kept] / unit
    U, s, Vt = np.linalg.svd(H, full_matrices=False)
    tol = max(math.sqrt(m) if rtol > 0 else 0.0, max(m, d) * np.finfo(np.float64).eps * s[0])
    r = int(np.sum(s > tol))
    if r == 0:
        return 1.0, e1
    # Whitened coordinates: Z = H V_r diag(1/s_r) = U_r, so that S_t becomes the identity there.
    Z = U[:, :r]
    means, _ = _class_means(Z, codes, k)
    within = Z - means[codes]
    Sw = within.T @ within
    Sw = 0.5 * (Sw + Sw.T)
    evals, evecs = np.linalg.eigh(Sw)
    lam = float(np.clip(evals[0], 0.0, 1.0))
    # back to the coordinates of X: x_j = 2**e_j (unit_j H_j + mean), so w_j = 2**-e_j w_H_j / unit_j, computed
    # with the exponents shifted by their largest value (no overflow) before normalising
    t = (Vt[:r].T @ (evecs[:, 0] / s[:r])) / unit
    shift = -e[kept]
    w = np.zeros(d)
    w[kept] = np.ldexp(t, shift - int(shift.max()))
    w = w / np.linalg.norm(w)
    # fix the sign for reproducibility: largest-magnitude entry positive
    if w[np.argmax(np.abs(w))] < 0:
        w = -w
    return lam, w


def lssr(X, y, num_classes: int | None = None, rtol: float | None = None) -> float:
    r"""Linear SSR: the smallest SSR that any linear or affine map of the samples can reach.

    Computed as the smallest eigenvalue of :math:`S_w` in coordinates where :math:`S_t = I` on its
    range (resolution and numerical rank in the module docstring, ``rtol`` as in :func:`ssr`). In ``[0, 1]``.
    """
    Xa, codes, k, rtol = _prepare(X, y, num_classes, rtol)
    return _lssr_solve(Xa, codes, k, rtol)[0]


def lssr_direction(X, y, num_classes: int | None = None, rtol: float | None = None):
    r"""A unit vector :math:`w` with :math:`\mathrm{SSR}(Xw) = \mathrm{LSSR}(X)`: the optimal rank-one map.

    It solves :math:`S_w w = \lambda_{\min} S_t w` with :math:`w` in the range of :math:`S_t`. For two
    classes it is parallel to Fisher's direction :math:`S_t^{+}(\mu_1 - \mu_0)`. Returned as a float64
    numpy array of shape ``(d,)``, or a float64 torch tensor on ``X``'s device when ``X`` is a tensor.
    """
    Xa, codes, k, rtol = _prepare(X, y, num_classes, rtol)
    w = _lssr_solve(Xa, codes, k, rtol)[1]
    if isinstance(X, torch.Tensor):
        return torch.as_tensor(w, dtype=torch.float64, device=X.device)
    return w


def ssr_loss(Z: torch.Tensor, y: torch.Tensor, num_classes: int | None = None, rtol: float | None = None) -> torch.Tensor:
    r"""Differentiable SSR of a batch of network outputs ``Z`` ``(m, p)`` with labels ``y``: a 0-d tensor.

    The same quantity as :func:`ssr` (the same per-feature resolution ``rtol``, default :func:`default_rtol` of
    ``Z``'s dtype), computed in ``Z``'s dtype and on its device so that it can be minimised by gradient descent.
    Scale-invariant at every scale: ``ssr_loss(c * Z, y) == ssr_loss(Z, y)`` for every ``c > 0`` up to rounding,
    with no spurious minimum as the outputs shrink, and unchanged by a common shift of the outputs (see
    :func:`ssr_from_onehot`). ``y`` must be an integer tensor with labels ``0..num_classes-1`` (``num_classes``
    defaults to ``y.max() + 1``).
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
    return ssr_from_onehot(Z, onehot, None if rtol is None else _check_rtol(rtol))


def ssr_from_onehot(Z: torch.Tensor, onehot: torch.Tensor, rtol: float | None = None) -> torch.Tensor:
    r"""The computation behind :func:`ssr_loss`, without checks, for a precomputed ``(m, k)`` one-hot label matrix.

    Meant for training loops and ``torch.func`` (no host-device synchronisation, no data-dependent control
    flow); ``Z`` must be ``(m, p)``. ``Z`` is divided by a power of two near its largest entry (exact, detached) before anything is
    squared: SSR is homogeneous of degree 0, so the value is unchanged and so is the gradient
    (:math:`\nabla_Z\, \mathrm{SSR}(Z/s) \cdot (1/s) = \nabla \mathrm{SSR}(Z)` for a constant ``s``), while the
    division no longer needs a floor on :math:`\operatorname{tr} S_t` (a floor makes the loss fall to 0 as
    ``Z`` shrinks, a spurious global minimum). Each output feature has the resolution of :func:`ssr`, relative to
    its own largest entry (``rtol``, default :func:`default_rtol` of ``Z``'s dtype): a feature constant to it is
    left out (zero gradient), so a large common offset of the outputs changes nothing; if every feature is
    constant, the loss is 1 with zero gradient.
    """
    rtol = default_rtol(Z.dtype) if rtol is None else rtol
    # divide by the power of two 2**E next above the largest entry: exact, so a common offset keeps its digits;
    # in two factors so that neither overflows (for a subnormal largest entry)
    _, E = torch.frexp(Z.detach().abs().amax())
    half = torch.div(E, 2, rounding_mode="floor")
    Z = Z * torch.exp2(-half.to(Z.dtype)) * torch.exp2((half - E).to(Z.dtype))
    centred = Z - Z.mean(dim=0)
    centred = centred - centred.mean(dim=0)  # two passes, as in ssr: accurate after a large common offset
    rms = centred.detach().pow(2).mean(dim=0).sqrt()
    kept = rms > rtol * Z.detach().abs().amax(dim=0)
    mask = kept.to(Z.dtype)
    counts = onehot.sum(dim=0).clamp_min(1.0)
    means = (onehot.T @ centred) / counts[:, None]
    within = ((centred - onehot @ means) * mask).pow(2).sum()
    total = (centred * mask).pow(2).sum()
    resolved = kept.any()
    ratio = within / torch.where(resolved, total, torch.ones_like(total))
    return torch.where(resolved, ratio.clamp_max(1.0), torch.ones_like(ratio))


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
