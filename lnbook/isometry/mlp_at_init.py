r"""Deep MLPs at initialisation: how the Gram matrix of a batch evolves with depth.

One layer maps representations :math:`X_\ell \in \mathbb R^{d\times n}` (features x samples) to

.. math::

    \text{act\_norm:}\quad X_{\ell+1} = N\big(\sigma(W_\ell X_\ell)\big), \qquad
    \text{norm\_act:}\quad X_{\ell+1} = \sigma\big(N(W_\ell X_\ell)\big),

with :math:`W_\ell` i.i.d. :math:`N(0, s^2/d)` entries (``gain = s``), fresh at every layer. The
normalisation :math:`N` is a pair (centering, scaling), each of ``none``, ``layer`` (over the ``d``
features of one sample, as in LayerNorm), ``batch`` (over the ``n`` samples of one feature, as in
BatchNorm without affine parameters) or ``meanfield`` (the constants :math:`c_0 = \mathbb E\sigma(sZ)` and
:math:`\sqrt{\operatorname{Var}\sigma(sZ)}` that layer statistics converge to as :math:`d\to\infty`).
Presets: ``none``, ``center`` (centering only), ``scale`` (scaling only, i.e. RMSNorm), ``layer`` (LN),
``batch`` (BN) and ``meanfield``.

Two samplers with **the same law** (proved in the chapter):

* ``method="reference"``: draw the :math:`d\times d` matrix :math:`W_\ell`, loop over repeats in Python
  (:math:`d^2` Gaussians per layer and repeat, like the official code);
* ``method="fast"``: the rows of :math:`W X` are i.i.d. :math:`N(0, \tfrac{s^2}{d}X^\top X)`, so
  :math:`W X \overset{d}{=} Z L^\top` with :math:`Z\in\mathbb R^{d\times n}` standard normal and
  :math:`L L^\top = \tfrac{s^2}{d}X^\top X` (eigen-factor, valid for rank-deficient Grams): :math:`dn`
  Gaussians per layer, batched over repeats and activations.

:func:`mean_field_grams` iterates the infinite-width limit of the same maps (the predictions).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from lnbook.isometry.gram import centered_isometry, float32_undetermined, isometry
from lnbook.isometry.hermite import (
    NonFiniteIntegrandError,
    gaussian_pair_expectation,
    get_activation,
    mean_and_variance,
)
from lnbook.util.device import resolve_device, tf32
from lnbook.util.validation import check_positive_int

__all__ = [
    "NORMALIZATIONS",
    "ORDERS",
    "InitRun",
    "resolve_normalization",
    "make_inputs",
    "normalize",
    "exact_sign_classes",
    "simulate",
    "centred_measure",
    "mean_field_grams",
    "correlations",
    "finite_width_gap_floor",
    "correlation_potential",
    "leaky_relu",
    "make_teacher_task",
    "train_deep_mlp",
]

ORDERS = ("act_norm", "norm_act")
_PARTS = ("none", "layer", "batch", "meanfield")
NORMALIZATIONS = {
    "none": ("none", "none"),
    "center": ("layer", "none"),
    "scale": ("none", "layer"),
    "layer": ("layer", "layer"),
    "batch": ("batch", "batch"),
    "meanfield": ("meanfield", "meanfield"),
}


def resolve_normalization(norm) -> tuple[str, str]:
    """A preset name of :data:`NORMALIZATIONS` or a pair ``(centering, scaling)`` -> the pair."""
    if isinstance(norm, str):
        if norm not in NORMALIZATIONS:
            raise ValueError(f"unknown normalisation {norm!r}; use one of {sorted(NORMALIZATIONS)} or a pair (centering, scaling)")
        return NORMALIZATIONS[norm]
    if isinstance(norm, (tuple, list)) and len(norm) == 2 and all(p in _PARTS for p in norm):
        return tuple(norm)
    raise ValueError(f"norm must be a preset in {sorted(NORMALIZATIONS)} or a pair with parts in {_PARTS}, got {norm!r}")


def _check_order(order: str) -> str:
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    return order


def _check_gain(gain) -> float:
    gain = float(gain)
    if not (gain > 0 and math.isfinite(gain)):
        raise ValueError(f"gain must be a finite number > 0, got {gain}")
    return gain


def make_inputs(n: int, d: int, *, repeats: int = 1, degeneracy: float = 10.0, generator=None,
                dtype=torch.float64, device=None) -> torch.Tensor:
    r"""Ill-conditioned input batches of shape ``(repeats, d, n)``.

    Each batch: a :math:`d\times n` standard Gaussian matrix whose largest singular value is multiplied by
    ``degeneracy`` (so the samples share one strong common direction and the input Gram matrix is far from
    isometric), then every sample (column) rescaled to :math:`\|x\|^2 = d`.
    """
    n = check_positive_int(n, "n", 2)
    d = check_positive_int(d, "d", 2)
    repeats = check_positive_int(repeats, "repeats")
    degeneracy = float(degeneracy)
    if not (degeneracy > 0 and math.isfinite(degeneracy)):
        raise ValueError(f"degeneracy must be a finite number > 0, got {degeneracy}")
    X = torch.randn(repeats, d, n, generator=generator, dtype=torch.float64)
    U, S, Vh = torch.linalg.svd(X, full_matrices=False)
    S[:, 0] *= degeneracy
    X = U @ torch.diag_embed(S) @ Vh
    X = X * math.sqrt(d) / X.norm(dim=-2, keepdim=True)
    return X.to(dtype=dtype, device=device)


def normalize(Y: torch.Tensor, centering: str, scaling: str, mf_mean=None, mf_std=None, eps: float = 0.0):
    """Normalise representations ``Y`` of shape ``(..., d, n)`` (features on -2, samples on -1).

    A constant feature (batch scaling) or sample (layer scaling) is 0 after centring and stays 0 (its scale is
    clamped at the dtype's smallest normal number, so 0 / 0 never gives NaN, in float32 as in float64)."""
    tiny = torch.finfo(Y.dtype).tiny
    if centering == "layer":
        Y = Y - Y.mean(dim=-2, keepdim=True)
    elif centering == "batch":
        Y = Y - Y.mean(dim=-1, keepdim=True)
    elif centering == "meanfield":
        Y = Y - mf_mean
    if scaling == "layer":
        Y = Y / torch.sqrt((Y * Y).mean(dim=-2, keepdim=True) + eps).clamp_min(tiny)
    elif scaling == "batch":
        Y = Y / torch.sqrt((Y * Y).mean(dim=-1, keepdim=True) + eps).clamp_min(tiny)
    elif scaling == "meanfield":
        Y = Y / mf_std
    return Y


@dataclass
class InitRun:
    """Result of :func:`simulate`.

    ``grams``: float64 ``(..., depth + 1, n, n)`` Gram matrices :math:`X_\\ell^\\top X_\\ell / d` of the
    layer outputs (index 0 is the input); ``isometry``: ``(..., depth + 1)`` (``nan`` where the
    representations overflowed, see ``diverged``, and where a float32 run's Gram is within float32 rounding of
    singular, see ``undetermined``); ``measure``: ``"centred from layer 1"`` where layers 1, 2, ... are measured
    with :func:`~lnbook.isometry.gram.centered_isometry` (:func:`centred_measure`), else ``"plain"``; leading dims ``(activations, repeats)`` or ``(repeats,)`` for a single
    activation.
    """

    grams: torch.Tensor
    isometry: torch.Tensor
    diverged: torch.Tensor
    activations: list = field(default_factory=list)
    order: str = "act_norm"
    norm: tuple = ("layer", "layer")
    gain: float = 1.0
    undetermined: torch.Tensor | None = None  # float32 runs: True where the isometry is not determined (nan)
    measure: str = "plain"  # "centred from layer 1" where layers >= 1 use centered_isometry (see centred_measure)

    @property
    def isometry_gap(self) -> torch.Tensor:
        return -torch.log(self.isometry)


def _activation_list(activation):
    if isinstance(activation, (list, tuple)):
        if not activation:
            raise ValueError("activation list is empty")
        return [get_activation(a) for a in activation], True
    return [get_activation(activation)], False


def _eigen_factor(Xs, gain):
    """L with L L^T = gain^2 Xs^T Xs / d (eigen-factor; valid for rank-deficient Grams), always in float64: in
    float32 the rounding of the eigenvalues swamps the small eigenvalue that carries the distance of two nearly
    equal samples (a pair at 1 - rho = 5e-9 came out identical), which the reference sampler resolves."""
    X64 = Xs.to(torch.float64)
    lam, U = torch.linalg.eigh(X64.transpose(-1, -2) @ X64)
    return U * torch.sqrt(lam.clamp_min(0.0)).unsqueeze(-2) * (gain / math.sqrt(Xs.shape[-2]))


@functools.lru_cache(maxsize=16)
def _projection(d, dtype, device):
    """A fixed (seeded) random vector of length d: the candidate filter of :func:`exact_sign_classes`."""
    return torch.randn(d, generator=torch.Generator().manual_seed(0), dtype=torch.float64).to(dtype=dtype, device=device)


def exact_sign_classes(X, negations: bool = True, gram=None):
    r"""Columns of ``X`` (shape ``(..., d, n)``) that are bit for bit equal (or, with ``negations``, negated).

    Returns ``(rep, sign)`` of shape ``(..., n)``: column ``j`` equals ``sign[j] * X[..., rep[j]]`` exactly,
    ``rep[j]`` the first column of its class (``rep[j] = j``, ``sign[j] = 1`` for a column without an exact copy).
    Zero columns are left alone (each its own class). Candidates come from one fixed random projection
    :math:`p = r^\top x` (cost ``d n``): two computations of the same value differ by at most
    :math:`2d\epsilon\sum_i|r_i x_i|`, so every exact pair is a candidate; candidates are then compared entry by entry.
    ``gram``: the float64 Gram :math:`X^\top X` (any positive multiple), if at hand: candidates are then the pairs
    with :math:`|G_{jk}|\ge(1-10^{-8})\sqrt{G_{jj}G_{kk}}` (exact pairs have cosine 1 to float64 rounding)."""
    d, n = X.shape[-2], X.shape[-1]
    flat = X.reshape(-1, d, n)
    B = flat.shape[0]
    rep = torch.arange(n, device=X.device).expand(B, n).clone()
    sign = torch.ones(B, n, dtype=X.dtype, device=X.device)
    if gram is not None:  # candidates from a float64 Gram of X: |G_jk| within 1e-8 of sqrt(G_jj G_kk) (no pass over d)
        G = gram.reshape(B, n, n)
        diag = torch.diagonal(G, dim1=-2, dim2=-1)
        size = torch.sqrt(diag[:, :, None] * diag[:, None, :])
        near = G.abs() >= (1 - 1e-8) * size
        near = near if negations else near & (G > 0)
    else:
        r = _projection(d, X.dtype, X.device)
        p = flat.transpose(-1, -2) @ r
        colsize = flat.abs().transpose(-1, -2) @ r.abs()
        tol = 4 * d * torch.finfo(X.dtype).eps * torch.maximum(colsize[:, :, None], colsize[:, None, :])
        near = (p[:, :, None] - p[:, None, :]).abs() <= tol
        if negations:
            near = near | ((p[:, :, None] + p[:, None, :]).abs() <= tol)
        size = colsize[:, :, None] * colsize[:, None, :]
    near = torch.triu(near & (size > 0), diagonal=1)
    b, j, k = torch.nonzero(near, as_tuple=True)
    if b.numel():
        same = (flat[b, :, j] == flat[b, :, k]).all(dim=-1)
        opposite = (flat[b, :, j] == -flat[b, :, k]).all(dim=-1) if negations else torch.zeros_like(same)
        exact = same | opposite
        # a class's first column is exactly paired with every member: write pairs by decreasing j so that the
        # smallest j (the class's first column) is written last
        order = torch.argsort(j[exact], descending=True, stable=True)
        for bb, jj, kk, ss in zip(b[exact][order].tolist(), j[exact][order].tolist(), k[exact][order].tolist(),
                                  same[exact][order].tolist()):
            rep[bb, kk] = jj
            sign[bb, kk] = 1.0 if ss else -1.0
    return rep.reshape(X.shape[:-2] + (n,)), sign.reshape(X.shape[:-2] + (n,))


def impose_ties(T, rep, sign):
    """``T[..., :, j] = sign[j] * T[..., :, rep[j]]``: re-impose ties (from :func:`exact_sign_classes` of the input
    of a map that sends equal/negated columns to equal/negated columns) that the map's rounding may have broken."""
    if bool((rep == torch.arange(rep.shape[-1], device=rep.device)).all()):
        return T
    return torch.gather(T, -1, rep.unsqueeze(-2).expand(T.shape)) * sign.unsqueeze(-2).to(T.dtype)


def _fast_preactivations(X, gain, generator, ties=None):
    """Z L^T with L L^T = gain^2 X^T X / d_in, Z standard normal of shape (..., d, n).

    Columns of X that are bit for bit equal or negated (:func:`exact_sign_classes`) get pre-activations that are
    exactly equal or negated: such a batch element is sampled on its distinct columns only (same law: W x is
    drawn once per class). Factoring the full Gram would give copies that differ by rounding, which LayerNorm
    after the activation amplifies layer after layer (rho = 1 is a repelling fixed point)."""
    d = X.shape[-2]
    # W X is linear in X: factor the Gram of X / max|X| so that X^T X cannot overflow, rescale after
    m = X.abs().amax(dim=(-1, -2), keepdim=True)
    m = torch.where(m > 0, m, torch.ones_like(m))
    Xs = X / m
    L = _eigen_factor(Xs, gain)
    Z = torch.randn(X.shape, generator=generator, dtype=X.dtype, device=X.device)
    H = (Z.to(torch.float64) @ L.transpose(-1, -2)).to(X.dtype) * m  # the product in float64 too, rounded once
    rep, sign = exact_sign_classes(X) if ties is None else ties
    n = X.shape[-1]
    tied = (rep != torch.arange(n, device=X.device)).any(dim=-1)
    if bool(tied.any()):  # rare: sample those batch elements again on their distinct columns
        Hf, Xf, mf = H.reshape(-1, d, n), Xs.reshape(-1, d, n), m.reshape(-1, 1, 1)
        repf, signf = rep.reshape(-1, n), sign.reshape(-1, n)
        for i in torch.nonzero(tied.reshape(-1)).flatten().tolist():
            distinct = torch.nonzero(repf[i] == torch.arange(n, device=X.device)).flatten()
            Lu = _eigen_factor(Xf[i][:, distinct], gain)
            Zu = torch.randn(d, distinct.numel(), generator=generator, dtype=X.dtype, device=X.device)
            Hu = (Zu.to(torch.float64) @ Lu.T).to(X.dtype) * mf[i]
            position = torch.searchsorted(distinct, repf[i])
            Hf[i] = Hu[:, position] * signf[i]
        H = Hf.reshape(X.shape)
    return H


def _reference_preactivations(X, gain, generator, ties=None):
    """Draw a fresh d x d matrix W with N(0, gain^2/d) entries for every batch element (Python loop)."""
    d = X.shape[-2]
    flat = X.reshape(-1, d, X.shape[-1])
    out = torch.empty_like(flat)
    for i in range(flat.shape[0]):
        W = torch.randn(d, d, generator=generator, dtype=X.dtype, device=X.device) * (gain / math.sqrt(d))
        out[i] = W @ flat[i]
    out = out.reshape(X.shape)
    return out if ties is None else impose_ties(out, *ties)


@tf32(False)  # float32 Gram matrices are compared with float64 ones: never in TF32 (lnbook/util/device.py)
def simulate(activation, X0, depth: int, *, order: str = "act_norm", norm="layer", gain: float = 1.0,
             method: str = "fast", generator=None, eps: float = 0.0) -> InitRun:
    r"""Run a random MLP at initialisation on the batch ``X0`` and record Gram matrices and isometry.

    ``activation``: a name of :data:`lnbook.isometry.hermite.ACTIVATIONS`, an elementwise torch callable, or a list of
    them (simulated side by side; the first result dimension indexes them). ``X0``: ``(d, n)`` or
    ``(repeats, d, n)``; every repeat gets its own weights. ``method``: ``"fast"`` or ``"reference"``
    (same law, see the module docstring). Gram matrices are computed in float64; for a float32 ``X0`` the
    precision rule of :func:`lnbook.isometry.gram.isometry` follows float32: where a Gram is within float32
    rounding of singular the isometry is ``nan`` and ``undetermined`` is True (simulate in float64 to measure it).
    """
    acts, many = _activation_list(activation)
    depth = check_positive_int(depth, "depth")
    order = _check_order(order)
    centering, scaling = resolve_normalization(norm)
    gain = _check_gain(gain)
    if method not in ("fast", "reference"):
        raise ValueError(f"method must be 'fast' or 'reference', got {method!r}")
    if not isinstance(X0, torch.Tensor) or not torch.is_floating_point(X0):
        raise TypeError("X0 must be a floating-point torch tensor of shape (d, n) or (repeats, d, n)")
    if X0.dim() == 2:
        X0 = X0.unsqueeze(0)
    if X0.dim() != 3:
        raise ValueError(f"X0 must have shape (d, n) or (repeats, d, n), got {tuple(X0.shape)}")
    if X0.shape[-1] < 2 or X0.shape[-2] < 2:
        raise ValueError(f"X0 needs d >= 2 features and n >= 2 samples, got shape {tuple(X0.shape)}")
    if not bool(torch.isfinite(X0).all()):
        raise ValueError("X0 contains non-finite values")
    if "meanfield" in (centering, scaling) and order != "act_norm":
        raise ValueError("mean-field normalisation uses the statistics of sigma(sZ): it is defined for order='act_norm' only")
    A = len(acts)
    d = X0.shape[-2]
    X = X0.unsqueeze(0).expand(A, *X0.shape).clone()
    mf_mean = mf_std = None
    if "meanfield" in (centering, scaling):
        stats = [mean_and_variance(fn, scale=gain) for _, fn in acts]
        shape = (A,) + (1,) * (X.dim() - 1)
        mf_mean = torch.tensor([m for m, _ in stats], dtype=X.dtype, device=X.device).reshape(shape)
        mf_std = torch.tensor([math.sqrt(v) for _, v in stats], dtype=X.dtype, device=X.device).reshape(shape)
    sample = _fast_preactivations if method == "fast" else _reference_preactivations
    odd = centering in ("none", "layer")  # the normalisation maps -y to minus its image (not batch/mean-field centring)
    grams = [X.to(torch.float64).transpose(-1, -2) @ X.to(torch.float64) / d]
    bad = torch.zeros(X.shape[:-2], dtype=torch.bool, device=X.device)
    with torch.no_grad():
        for _ in range(depth):
            # an overflowed batch element stays NaN from here on; sample the others normally
            bad = bad | ~torch.isfinite(X).all(dim=-1).all(dim=-1)
            # exact ties (a repeated sample; x and -x) stay bit for bit: the samplers keep the ties of their input,
            # and every later step re-imposes the ties it preserves in exact arithmetic, which its rounding (a
            # reduction's summation order) could break; LN after the activation would amplify that rounding
            Xin = torch.where(bad[..., None, None], torch.zeros_like(X), X)
            ties = exact_sign_classes(Xin, gram=torch.where(bad[..., None, None], 0.0, grams[-1]))
            H = sample(Xin, gain, generator, ties)
            if bool((ties[0] == torch.arange(ties[0].shape[-1])).all()):  # no ties to keep (the usual case)
                if order == "act_norm":
                    X = normalize(torch.stack([fn(H[a]) for a, (_, fn) in enumerate(acts)]), centering, scaling, mf_mean, mf_std, eps)
                else:
                    Hn = normalize(H, centering, scaling, None, None, eps)
                    X = torch.stack([fn(Hn[a]) for a, (_, fn) in enumerate(acts)])
            elif order == "act_norm":
                Y = torch.stack([fn(H[a]) for a, (_, fn) in enumerate(acts)])
                Y = impose_ties(Y, *exact_sign_classes(H, negations=False))
                X = impose_ties(normalize(Y, centering, scaling, mf_mean, mf_std, eps), *exact_sign_classes(Y, odd))
            else:
                Hn = impose_ties(normalize(H, centering, scaling, None, None, eps), *exact_sign_classes(H, odd))
                X = torch.stack([fn(Hn[a]) for a, (_, fn) in enumerate(acts)])
                X = impose_ties(X, *exact_sign_classes(Hn, negations=False))
            X = torch.where(bad[..., None, None], torch.full_like(X, math.nan), X)
            X64 = X.to(torch.float64)
            grams.append(X64.transpose(-1, -2) @ X64 / d)
    grams = torch.stack(grams, dim=-3)  # (A, R, L+1, n, n)
    finite = torch.isfinite(grams).all(dim=-1).all(dim=-1)
    safe = torch.where(finite[..., None, None], grams, torch.eye(grams.shape[-1], dtype=grams.dtype, device=grams.device))
    tol = 1e-6 if X.dtype == torch.float64 else 1e-4
    iso = isometry(safe.cpu(), tol=tol)
    centred = centred_measure(order, (centering, scaling))
    if centred:  # from layer 1 on the features are centred over the batch (G 1 = 0); layer 0 is the raw input,
        # measured as for LN. centered_isometry refuses a Gram that is not centred (beyond float rounding).
        # (an overflowed Gram, reported as nan below, is measured on the centred placeholder I - J / n)
        n = grams.shape[-1]
        placeholder = torch.eye(n, dtype=grams.dtype, device=grams.device) - 1.0 / n
        centred_safe = torch.where(finite[..., 1:, None, None], grams[..., 1:, :, :], placeholder)
        iso[..., 1:] = centered_isometry(centred_safe.cpu(), tol=tol, centred_in=X.dtype)
    # the Grams are float64, but their entries come from X's dtype: where a float32 run's Gram is within float32
    # rounding of singular the isometry is not determined (the rule of lnbook.isometry.gram): nan, flagged
    undetermined = float32_undetermined(safe.cpu(), X.dtype, centered_from=1 if centred else None)
    iso = torch.where(undetermined, torch.full_like(iso, math.nan), iso)
    iso = torch.where(finite.cpu(), iso, torch.full_like(iso, math.nan))
    grams = grams.cpu()
    diverged = ~finite.cpu()
    undetermined = undetermined & finite.cpu()
    if not many:
        grams, iso, diverged, undetermined = grams[0], iso[0], diverged[0], undetermined[0]
    return InitRun(grams, iso, diverged, [name for name, _ in acts], order, (centering, scaling), gain, undetermined,
                   "centred from layer 1" if centred else "plain")


def centred_measure(order: str, norm) -> bool:
    r"""True where :func:`simulate` measures layers 1, 2, ... with :func:`~lnbook.isometry.gram.centered_isometry`:
    the layer output is centred over the batch (``G 1 = 0``), i.e. order ``act_norm``, centring ``batch`` and a
    scaling that keeps ``X 1 = 0``: ``batch`` (one factor per feature), ``meanfield`` (one constant) or ``none``.
    Not for scaling ``layer`` (one factor per sample breaks ``X 1 = 0``) nor for ``norm_act``
    (:math:`\sigma(\mathrm{BN}(h))` is not centred): those are measured with the plain isometry."""
    centering, scaling = resolve_normalization(norm)
    return _check_order(order) == "act_norm" and centering == "batch" and scaling in ("batch", "meanfield", "none")


def correlations(G) -> np.ndarray:
    """Correlation matrices ``G_ab / sqrt(G_aa G_bb)`` of a (batch of) Gram matrices (NumPy float64)."""
    G = np.asarray(G, dtype=np.float64)
    s = np.sqrt(np.clip(np.diagonal(G, axis1=-2, axis2=-1), 1e-300, None))
    return G / s[..., :, None] / s[..., None, :]


def correlation_potential(G) -> np.ndarray:
    r"""The potential :math:`\gamma(G) = \max_{a\ne b} |\rho_{ab}|/(1-|\rho_{ab}|)` of the correlations of ``G``
    (batch ``(..., n, n)``), the quantity that contracts by at least :math:`1/(2-\beta_0)` per layer."""
    C = np.abs(correlations(G))
    n = C.shape[-1]
    off = C[..., ~np.eye(n, dtype=bool)].reshape(C.shape[:-2] + (n * (n - 1),))
    r = off.max(axis=-1)
    with np.errstate(divide="ignore"):
        return np.where(r < 1, r / np.where(r < 1, 1 - r, 1.0), np.inf)


def _pair_moments(fn, C, breakpoints=(0.0,), means=None):
    """m_a = E sigma(h_a) and M_ab = E sigma(h_a) sigma(h_b) for h ~ N(0, C) (C: n x n).

    ``means``: a dict from a variance ``q`` (the float itself) to ``E sigma(sqrt(q) Z)``, filled here and read back:
    the diagonal of a normalised Gram repeats the same few values (1 and its neighbours in rounding) from sample to
    sample and layer to layer, and one quadrature per distinct value gives the same numbers as one per entry."""
    n = C.shape[-1]
    cov = np.empty((n, n, 2, 2))
    cov[..., 0, 0] = np.diag(C)[:, None]
    cov[..., 1, 1] = np.diag(C)[None, :]
    cov[..., 0, 1] = cov[..., 1, 0] = C
    iu = np.triu_indices(n)
    vals = gaussian_pair_expectation(fn, fn, cov[iu], m=16, panels=2, breakpoints=breakpoints)  # error < 2e-6 (ReLU, test_hermite), 8x faster
    M = np.zeros((n, n))
    M[iu] = vals
    M = M + np.triu(M, 1).T
    means = {} if means is None else means
    for q in set(np.diag(C).tolist()) - means.keys():
        means[q] = mean_and_variance(fn, scale=math.sqrt(max(q, 1e-300)), breakpoints=breakpoints)[0]
    m = np.array([means[q] for q in np.diag(C).tolist()])
    return m, M


def mean_field_grams(activation, G0, depth: int, *, order: str = "act_norm", norm="layer", gain: float = 1.0,
                     breakpoints=(0.0,)) -> np.ndarray:
    r"""Infinite-width (mean-field) iteration of the per-feature Gram matrix :math:`S_\ell = X_\ell^\top X_\ell/d`.

    As :math:`d\to\infty` the pre-activations of a layer are i.i.d. over features with covariance
    :math:`s^2 S_\ell`, and feature averages become expectations, so for ``act_norm``

    .. math::

        S_{\ell+1,ab} = \frac{\mathbb E[(\sigma(h_a)-\mu_a)(\sigma(h_b)-\mu_b)]}{t_a t_b}, \qquad h\sim N(0, s^2 S_\ell),

    with :math:`\mu_a = \mathbb E\sigma(h_a)` (layer centering), :math:`c_0` (mean-field) or 0, and
    :math:`t_a` the matching scale. For ``norm_act`` the pre-activations are normalised (their mean is 0)
    and :math:`S_{\ell+1} = \mathbb E[\sigma(h')\sigma(h')^\top]`. Batch normalisation couples all samples
    and has no pairwise formula: ``ValueError``. ``breakpoints``: the kinks of the activation (default 0; the
    quadrature splits there, and loses accuracy at a kink it is not told about). A layer whose activation overflows
    on the quadrature nodes (:class:`~lnbook.isometry.hermite.NonFiniteIntegrandError`: ``exp`` without normalisation)
    has diverged and comes out ``nan``; the quadrature's other refusals (a kink not in ``breakpoints``, a singularity
    such as ``|x|^-0.6``) raise their ``ValueError``. Returns ``(depth + 1, n, n)``.
    """
    _, fn = get_activation(activation)
    depth = check_positive_int(depth, "depth")
    order = _check_order(order)
    centering, scaling = resolve_normalization(norm)
    gain = _check_gain(gain)
    if "batch" in (centering, scaling):
        raise ValueError("batch normalisation couples all n samples: there is no pairwise mean-field map")
    if "meanfield" in (centering, scaling) and order != "act_norm":
        raise ValueError("mean-field normalisation is defined for order='act_norm' only")
    S = np.asarray(G0.cpu().numpy() if isinstance(G0, torch.Tensor) else G0, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise ValueError(f"G0 must be a square matrix, got shape {S.shape}")
    if "meanfield" in (centering, scaling):
        c0, var = mean_and_variance(fn, scale=gain, breakpoints=breakpoints)
    out = [S]
    means = {}  # E sigma(sqrt(q) Z) by variance q, shared by the layers (see _pair_moments)
    for _ in range(depth):
        if not np.all(np.isfinite(S)) or np.abs(S).max() > 1e150:
            out.append(np.full_like(S, np.nan))  # diverged (e.g. exp without normalisation)
            S = out[-1]
            continue
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                C = gain**2 * S
                if order == "act_norm":
                    m, M = _pair_moments(fn, C, breakpoints, means)
                    mu = {"none": np.zeros_like(m), "layer": m, "meanfield": np.full_like(m, c0 if centering == "meanfield" else 0.0)}[centering]
                    S = M - np.outer(mu, m) - np.outer(m, mu) + np.outer(mu, mu)
                    if scaling == "layer":
                        t = np.sqrt(np.clip(np.diag(S), 1e-300, None))
                        S = S / np.outer(t, t)
                    elif scaling == "meanfield":
                        S = S / var
                else:
                    if scaling == "layer":
                        t = np.sqrt(np.clip(np.diag(C), 1e-300, None))
                        C = C / np.outer(t, t)
                    _, S = _pair_moments(fn, C, breakpoints, means)
        except NonFiniteIntegrandError:  # the activation overflowed on the quadrature nodes: diverged (the
            S = np.full_like(S, np.nan)  # quadrature's other refusals, a kink not in `breakpoints`, propagate)
        out.append(0.5 * (S + S.T))
    return np.stack(out)


def finite_width_gap_floor(beta0: float, n: int, d: int, depth=None):
    r"""Heuristic finite-width floor of the isometry gap for LN after the activation.

    Linearising the correlation map at 0 (:math:`\rho\mapsto\beta_0\rho`) and adding the sampling noise of a
    width-:math:`d` layer (variance :math:`1/d` for uncorrelated samples) gives an AR(1) recursion
    :math:`v_{\ell+1} = \beta_0^2 v_\ell + 1/d`, :math:`v_0 = 0`; with :math:`\text{gap}\approx\frac1{2n}\sum_{a\ne b}\rho_{ab}^2`
    the floor is :math:`\frac{n-1}{2}v_\ell \to \frac{n-1}{2d(1-\beta_0^2)}`. ``depth=None``: the limit;
    else the array ``v_0..v_depth`` scaled by ``(n - 1)/2``.
    """
    b2 = float(beta0) ** 2
    if depth is None:
        return (n - 1) / (2 * d * (1 - b2)) if b2 < 1 else math.inf
    ell = np.arange(depth + 1)
    v = ell / d if b2 == 1 else (1 - b2**ell) / (d * (1 - b2))
    return (n - 1) / 2 * v


# ----------------------------------------------------------------------------------------------
# experiment 7: does the nonlinearity strength at initialisation predict training speed?


def leaky_relu(alpha: float):
    r"""The activation :math:`x\mapsto\max(x, \alpha x)` (``alpha`` in [0, 1]); its strength
    :math:`\beta_0 = \frac{(1+\alpha)^2/4}{(1+\alpha^2)/2 - (1-\alpha)^2/(2\pi)}` runs from ReLU's
    :math:`\pi/(2(\pi-1))` (``alpha = 0``) to 1 (``alpha = 1``, linear)."""
    alpha = float(alpha)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")

    def f(x):
        x = torch.as_tensor(x)
        return torch.maximum(x, alpha * x)

    f.__name__ = f"leaky_relu({alpha:g})"
    return f


def make_teacher_task(n: int, d_in: int = 32, classes: int = 10, *, degeneracy: float = 4.0, generator=None):
    r"""A synthetic classification task generated locally (no download).

    Inputs: Gaussian vectors sharing a strong common direction (the top singular direction of the data
    matrix is multiplied by ``degeneracy``, as in :func:`make_inputs`), rescaled to :math:`\|x\|^2 = d_{in}`.
    Labels: argmax of a random two-layer tanh teacher. Returns ``(X, y)``, ``X`` float32 ``(n, d_in)``.
    """
    n = check_positive_int(n, "n", 2)
    d_in = check_positive_int(d_in, "d_in", 2)
    classes = check_positive_int(classes, "classes", 2)
    X = make_inputs(n, d_in, repeats=1, degeneracy=degeneracy, generator=generator)[0].T  # (n, d_in) rows
    X = X * math.sqrt(d_in) / X.norm(dim=1, keepdim=True)
    W1 = torch.randn(d_in, 64, generator=generator, dtype=torch.float64) / math.sqrt(d_in)
    W2 = torch.randn(64, classes, generator=generator, dtype=torch.float64) / 8.0
    y = (torch.tanh(2 * X @ W1) @ W2).argmax(dim=1)
    return X.float(), y


def train_deep_mlp(activation, X, y, *, depth: int = 8, width: int = 128, steps: int = 200, lr: float = 0.01,
                   batch: int = 128, generator=None, device=None):
    r"""Train ``[Linear -> activation -> LayerNorm] x depth -> Linear`` with plain SGD; return the loss curve.

    Weights :math:`N(0, 1/\text{fan-in})` (no bias), LayerNorm without affine parameters, cross-entropy,
    mini-batches drawn with ``generator``. Returns a float64 NumPy array of the ``steps`` training losses.
    """
    _, fn = get_activation(activation)
    depth = check_positive_int(depth, "depth")
    width = check_positive_int(width, "width", 2)
    steps = check_positive_int(steps, "steps")
    device = resolve_device(device)
    X, y = X.to(device), y.to(device)
    classes = int(y.max()) + 1
    dims = [X.shape[1]] + [width] * depth
    Ws = [(torch.randn(a, b, generator=generator) / math.sqrt(a)).to(device).requires_grad_() for a, b in zip(dims[:-1], dims[1:])]
    head = (torch.randn(width, classes, generator=generator) / math.sqrt(width)).to(device).requires_grad_()
    params = Ws + [head]
    opt = torch.optim.SGD(params, lr=lr)
    losses = np.empty(steps)
    for t in range(steps):
        idx = torch.randint(0, X.shape[0], (batch,), generator=generator).to(device)
        h = X[idx]
        for W in Ws:
            h = torch.nn.functional.layer_norm(fn(h @ W), (width,))
        loss = torch.nn.functional.cross_entropy(h @ head, y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses[t] = float(loss.detach())
    return losses

