r"""Isometry of a Gram matrix and the isometry gap (Joudaki, Daneshmand and Bach, 2023).

For a positive semi-definite :math:`n\times n` matrix :math:`G` with eigenvalues
:math:`\lambda_1,\dots,\lambda_n \ge 0`,

.. math::

    \mathcal I(G) = \frac{\det(G)^{1/n}}{\operatorname{tr}(G)/n}
    = \frac{(\prod_i \lambda_i)^{1/n}}{\frac1n\sum_i\lambda_i} \in [0, 1],
    \qquad \text{gap}(G) = -\log\mathcal I(G) \in [0, \infty],

the ratio of the geometric to the arithmetic mean of the spectrum. By AM-GM,
:math:`\mathcal I(G) = 1` iff all eigenvalues are equal, i.e. iff :math:`G = c I` (:math:`c > 0`),
and :math:`\mathcal I(G) = 0` iff :math:`G` is singular. It is invariant under :math:`G\mapsto cG`
and :math:`G\mapsto Q G Q^\top` (orthogonal :math:`Q`).

Numerics: float64 eigenvalues (``torch.linalg.eigvalsh``), ``log I = mean(log lambda) - log mean(lambda)``,
so no determinant over- or underflows. The answer depends on the input's precision:

* float64 (and integer) input: an eigenvalue in ``[-tol * lambda_max, FLOAT64_RESOLUTION_FACTOR * n * eps64 *
  lambda_max]`` is rounding noise of a singular matrix and gives ``I = 0`` (gap ``inf``), never NaN. The factor
  10 (ten times ``numpy.linalg.matrix_rank``'s ``n eps``): a float64 ``X.T @ X`` of a rank-deficient ``X`` has
  rounding eigenvalues up to ``4.5 n eps64 lambda_max`` at ``d = 20000`` and ``8.0`` at ``d = 100000`` (n = 4,
  40 seeds), so a singular Gram formed from up to ``d = 100000`` features reads ``I = 0``; beyond that the
  cutoff is not measured.
* float32 input is computed in float64, but a float32 Gram cannot tell an eigenvalue within rounding of zero
  from zero: a float32 ``X.T @ X`` of a singular ``X`` has rounding eigenvalues that grow with the inner
  dimension ``d`` (measured: up to ``0.31 n eps32 lambda_max`` at ``d = 500``, ``0.64`` at ``d = 5000``,
  ``1.97`` at ``d = 20000``). If ``lambda_min > FLOAT32_RESOLUTION_FACTOR * n * eps32 * lambda_max``
  (factor 10, five times the largest measured rounding) the value is returned as for float64; otherwise the
  isometry is not determined by the input and ``ValueError`` says to form the Gram in float64
  (:func:`gram_matrix`). It never returns 0 or a rounding-dominated value for float32 input, except for the
  exactly zero matrix (``I = 0``). For inner dimensions far beyond ``d = 20000`` form the Gram in float64.
* float16 and bfloat16 input is refused (``TypeError``): their rounding (``eps = 1e-3``, ``8e-3``) exceeds most
  eigenvalue ratios of interest; form the Gram in float64 or convert with ``.double()``.

An eigenvalue below ``-tol * lambda_max`` (default ``tol = 1e-6``) means ``G`` is not a Gram matrix and raises
``ValueError``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["isometry", "isometry_gap", "log_isometry", "gram_matrix", "check_gram", "centered_isometry", "symmetry_tolerance",
           "rank_cutoff", "FLOAT32_RESOLUTION_FACTOR", "FLOAT64_RESOLUTION_FACTOR", "float32_undetermined", "centring_defect", "centring_tolerance"]

SYMMETRY_TOL = 1e-8
NEGATIVE_TOL = 1e-6
#: Multiples of the input dtype's machine epsilon tolerated as rounding asymmetry (a float32 ``X.T @ X`` is
#: asymmetric at about 1e-7, well below 100 eps = 1.2e-5).
SYMMETRY_EPS_FACTOR = 100
#: Multiple of ``n * eps32 * lambda_max`` at or below which the smallest eigenvalue of a float32 Gram matrix is
#: within rounding of zero, so that its isometry is not determined (refused). Five times the largest measured
#: rounding eigenvalue of a float32 ``X.T @ X`` of a singular ``X`` (``1.97 n eps32`` at ``d = 20000``).
FLOAT32_RESOLUTION_FACTOR = 10
#: Multiple of ``n * eps64 * lambda_max`` at or below which the smallest eigenvalue of a float64 Gram matrix is
#: rounding of zero (``I = 0``): above the largest measured rounding eigenvalue of a float64 ``X.T @ X`` of a
#: rank-deficient ``X`` (``4.5 n eps64`` at ``d = 20000``, ``8.0`` at ``d = 100000``; n = 4, 40 seeds).
FLOAT64_RESOLUTION_FACTOR = 10
#: Multiple of ``n * eps(dtype)`` up to which :func:`centring_defect` counts as rounding of a batch-centred Gram.
#: Measured on batch-normalised ReLU, exp, sigmoid and tanh networks (n = 4 to 100, d = 50 to 2000, float32 and
#: float64): at most ``0.25 n eps``, so 100 leaves a margin of 400.
CENTRING_FACTOR = 100


def _input_dtype(G):
    """The dtype of ``G`` (torch or NumPy); ``TypeError`` for float16 / bfloat16 (see the module docstring)."""
    dtype = G.dtype if isinstance(G, torch.Tensor) else getattr(G, "dtype", None)
    if dtype is None:
        try:
            dtype = np.asarray(G).dtype
        except Exception:  # noqa: BLE001  (check_gram gives the message)
            return np.dtype(np.float64)
    half = (torch.float16, torch.bfloat16) if isinstance(dtype, torch.dtype) else (np.float16,)
    if any(dtype == h for h in half):
        raise TypeError(
            f"G has dtype {dtype}: its rounding hides small eigenvalues, so the isometry is not determined; "
            "form the Gram matrix in float64 (lnbook.isometry.gram_matrix(X)) or convert it with G.double()")
    return dtype


def _is_float32(dtype) -> bool:
    return dtype == torch.float32 if isinstance(dtype, torch.dtype) else np.dtype(dtype) == np.float32


def rank_cutoff(dtype, n: int) -> float:
    """Relative threshold ``c * n * eps(dtype)`` on ``lambda_min / lambda_max``.

    float64 and integers: ``FLOAT64_RESOLUTION_FACTOR * n * eps64``; at or below it the Gram is singular
    (``I = 0``). float32: ``FLOAT32_RESOLUTION_FACTOR * n * eps32``; at or below it the isometry is not determined
    and is refused. float16 / bfloat16: ``TypeError``."""
    if isinstance(dtype, (type, np.dtype)) or isinstance(dtype, str):
        dtype = np.dtype(dtype)
    _input_dtype(np.empty(0, dtype=dtype) if isinstance(dtype, np.dtype) else torch.empty(0, dtype=dtype))
    if _is_float32(dtype):
        return FLOAT32_RESOLUTION_FACTOR * n * float(np.finfo(np.float32).eps)
    return FLOAT64_RESOLUTION_FACTOR * n * float(np.finfo(np.float64).eps)


def symmetry_tolerance(dtype) -> float:
    """Relative asymmetry accepted for a Gram matrix of this dtype (torch or NumPy):
    ``max(SYMMETRY_TOL, SYMMETRY_EPS_FACTOR * eps(dtype))``; integers get ``SYMMETRY_TOL``."""
    if isinstance(dtype, torch.dtype):
        eps = torch.finfo(dtype).eps if dtype.is_floating_point else 0.0
    else:
        dtype = np.dtype(dtype)
        eps = float(np.finfo(dtype).eps) if np.issubdtype(dtype, np.floating) else 0.0
    return max(SYMMETRY_TOL, SYMMETRY_EPS_FACTOR * eps)


def check_gram(G, *, tol: float = NEGATIVE_TOL, name: str = "G") -> torch.Tensor:
    """Return ``G`` as a float64 torch tensor ``(..., n, n)`` after checking it is a finite symmetric square batch.

    A torch input is detached (no gradient flows through the isometry functions) and stays on its device.

    Raises ``TypeError`` (not array-like / not real) and ``ValueError`` (fewer than 2 dims, not square,
    not symmetric to the relative tolerance :func:`symmetry_tolerance` of the input's dtype, i.e. ``1e-8`` for
    float64 and ``100 eps`` for float32 and lower precisions, non-finite entries, empty).
    """
    if isinstance(G, torch.Tensor):
        if G.is_complex() or G.dtype == torch.bool:
            raise TypeError(f"{name} must be real, got dtype {G.dtype}")
        sym_tol = symmetry_tolerance(G.dtype)
        T = G.detach().to(torch.float64)
    else:
        try:
            arr = np.asarray(G)
        except Exception as err:  # noqa: BLE001
            raise TypeError(f"{name} must be a square matrix (NumPy array or torch tensor): {err}") from err
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
            raise TypeError(f"{name} must be a real numeric array, got dtype {arr.dtype}")
        sym_tol = symmetry_tolerance(arr.dtype)
        T = torch.as_tensor(arr.astype(np.float64))
    if T.dim() < 2:
        raise ValueError(f"{name} must be a square matrix (n, n) or a batch (..., n, n), got shape {tuple(T.shape)}")
    if T.shape[-1] != T.shape[-2]:
        raise ValueError(f"{name} must be square on its last two dimensions, got shape {tuple(T.shape)}")
    if T.shape[-1] == 0:
        raise ValueError(f"{name} is empty (n = 0)")
    if not bool(torch.isfinite(T).all()):
        raise ValueError(f"{name} contains non-finite entries (NaN or inf)")
    scale = T.abs().amax(dim=(-1, -2), keepdim=True).clamp_min(1e-300)
    asym = ((T - T.transpose(-1, -2)).abs() / scale).max()
    if float(asym) > sym_tol:
        raise ValueError(
            f"{name} is not symmetric (relative asymmetry {float(asym):.2e} > {sym_tol:.1e}); "
            f"a Gram matrix X^T X is symmetric: symmetrise with ({name} + {name}.T) / 2 if this is rounding"
        )
    return 0.5 * T + 0.5 * T.transpose(-1, -2)  # halves first: T + T^T overflows near the float64 maximum


def log_isometry(G, *, tol: float = NEGATIVE_TOL, computed_in=None) -> torch.Tensor:
    r""":math:`\log\mathcal I(G) = \frac1n\sum\log\lambda_i - \log\frac1n\sum\lambda_i` (``-inf`` if singular).

    ``computed_in``: the dtype the entries of ``G`` were computed in, when that is lower than ``G``'s own
    (a float64 Gram of float32 representations); the precision rule follows it."""
    in_dtype = _input_dtype(G) if computed_in is None else _input_dtype(torch.empty(0, dtype=computed_in))
    return _log_isometry(check_gram(G, tol=_check_tol(tol)), in_dtype, tol)


def _check_tol(tol):
    if not (isinstance(tol, (int, float)) and tol >= 0):
        raise ValueError(f"tol must be a number >= 0, got {tol!r}")
    return tol


def _within_cutoff(lam: torch.Tensor, cutoff: float) -> torch.Tensor:
    """``lambda_min <= cutoff * |lambda_max|`` for ascending eigenvalues ``lam`` (the rule of :func:`rank_cutoff`)."""
    return lam[..., 0] <= cutoff * lam[..., -1].abs()


def _log_isometry(T: torch.Tensor, in_dtype, tol: float) -> torch.Tensor:
    """``log I`` of a checked float64 batch ``T`` whose entries came from a matrix of dtype ``in_dtype``.
    ``T`` is divided by its largest absolute entry first (``I`` is scale invariant): near the float64 maximum the
    eigenvalue solver and the mean of the eigenvalues would overflow (``1e308 * I`` gave NaN or a solver error)."""
    peak = T.abs().amax(dim=(-1, -2), keepdim=True)
    T = T / torch.where(peak > 0, peak, torch.ones_like(peak))
    lam = torch.linalg.eigvalsh(T)
    lam_max = lam[..., -1]
    bad = lam[..., 0] < -tol * lam_max.abs()
    if bool(bad.any()):
        worst = float((lam[..., 0] / lam_max.abs().clamp_min(1e-300)).min())
        raise ValueError(
            f"G has a negative eigenvalue (lambda_min / lambda_max = {worst:.3e} < -{tol:g}); "
            "it is not positive semi-definite, so it is not a Gram matrix"
        )
    zero = lam_max <= 0  # the zero matrix: no direction at all
    cutoff = rank_cutoff(in_dtype, T.shape[-1])
    below = _within_cutoff(lam, cutoff)
    if _is_float32(in_dtype) and bool((below & ~zero).any()):
        worst = float((lam[..., 0] / lam_max.abs().clamp_min(1e-300))[below & ~zero].max())
        raise ValueError(
            f"the isometry of this float32 Gram is not determined: its smallest eigenvalue is within float32 "
            f"rounding of zero (lambda_min / lambda_max = {worst:.2e} <= {cutoff:.2e} = "
            f"{FLOAT32_RESOLUTION_FACTOR} n eps32); form the Gram in float64 (lnbook.isometry.gram_matrix(X)) "
            "to tell a small eigenvalue from a singular matrix")
    singular = below | zero  # float64: eigenvalues <= 10 n eps64 lambda_max are rounding noise of zero
    safe = torch.where(singular[..., None], torch.ones_like(lam), lam)
    out = torch.log(safe).mean(-1) - torch.log(safe.mean(-1))
    out = torch.clamp(out, max=0.0)
    return torch.where(singular, torch.full_like(out, -math.inf), out)


def isometry(G, *, tol: float = NEGATIVE_TOL, computed_in=None) -> torch.Tensor:
    r"""The isometry :math:`\mathcal I(G) = \det(G)^{1/n}/(\operatorname{tr}G/n)`, float64, in [0, 1].

    ``G`` is ``(n, n)`` or a batch ``(..., n, n)`` (NumPy or torch); returns a float64 torch tensor of the
    batch shape (0-dim for one matrix; ``float(...)`` gives a number), on ``G``'s device. A float64 singular ``G``
    (and the zero matrix) gives 0; a float32 ``G`` whose smallest eigenvalue is within float32 rounding of zero
    raises ``ValueError``; float16 / bfloat16 raise ``TypeError``. See the module docstring for the tolerances.

    A measurement, not a loss: the input is detached (``check_gram``), so the result carries no gradient
    (``requires_grad`` is False) even for a ``G`` that requires one. ``computed_in``: see :func:`log_isometry`.

    Not for ``torch.func.vmap`` or ``torch.compile``: its validation branches on the data (symmetry, the sign
    of the smallest eigenvalue against the tolerances), which ``vmap`` refuses with a ``RuntimeError``
    (data-dependent control flow). It is batched already: pass the stack ``(..., n, n)`` instead.
    """
    return torch.exp(log_isometry(G, tol=tol, computed_in=computed_in))


def isometry_gap(G, *, tol: float = NEGATIVE_TOL) -> torch.Tensor:
    r"""The isometry gap :math:`-\log\mathcal I(G) \in [0, \infty]` (``inf`` for singular ``G``)."""
    return -log_isometry(G, tol=tol)


def gram_matrix(X) -> torch.Tensor:
    r"""Gram matrix :math:`X^\top X` (float64) of representations ``X`` of shape ``(..., d, n)``:
    features on dimension ``-2``, the ``n`` samples on the last dimension."""
    if not isinstance(X, torch.Tensor):
        X = torch.as_tensor(np.asarray(X, dtype=np.float64))
    if X.dim() < 2:
        raise ValueError(f"X must have shape (..., d, n), got {tuple(X.shape)}")
    X = X.to(torch.float64)
    return X.transpose(-1, -2) @ X


def float32_undetermined(G: torch.Tensor, dtype, centered_from: int | None = None) -> torch.Tensor:
    """Boolean mask over the batch of float64 Grams ``G`` (``(..., L, n, n)``): True where entries computed in
    ``dtype`` cannot determine the isometry, i.e. ``dtype`` is float32 and ``lambda_min`` is within float32
    rounding of zero (the rule of :func:`isometry`; the zero matrix excepted). From index ``centered_from`` on
    (along ``-3``) the rule applies to the centred Gram, as :func:`centered_isometry` measures it."""
    T = torch.as_tensor(G, dtype=torch.float64)
    if not _is_float32(dtype):
        return torch.zeros(T.shape[:-2], dtype=torch.bool)
    n = T.shape[-1]
    if centered_from is not None:
        Q = torch.linalg.qr(torch.eye(n, dtype=torch.float64, device=T.device) - 1.0 / n)[0][:, : n - 1]
        head = torch.linalg.eigvalsh(T[..., :centered_from, :, :])
        tail = torch.linalg.eigvalsh(Q.T @ T[..., centered_from:, :, :] @ Q)
        masks = [_within_cutoff(lam, rank_cutoff(torch.float32, lam.shape[-1])) & (lam[..., -1] > 0) for lam in (head, tail)]
        return torch.cat(masks, dim=-1)
    lam = torch.linalg.eigvalsh(T)
    return _within_cutoff(lam, rank_cutoff(torch.float32, n)) & (lam[..., -1] > 0)


def centring_defect(G) -> torch.Tensor:
    r"""How far ``G`` is from batch-centred: :math:`\|G\mathbf 1\|_2 / (\sqrt n\,\|G\|_F) \in [0, 1]`.

    0 iff :math:`G\mathbf 1 = 0` (every feature sums to 0 over the batch); at most 1 because
    :math:`\|G\mathbf 1\| \le \|G\|_2\sqrt n \le \|G\|_F\sqrt n`. The zero matrix has defect 0. Batched over
    leading dimensions; float64 torch result."""
    T = check_gram(G)
    n = T.shape[-1]
    G1 = T.sum(dim=-1)
    return G1.norm(dim=-1) / (math.sqrt(n) * T.norm(dim=(-1, -2)).clamp_min(1e-300))


def centring_tolerance(dtype, n: int) -> float:
    """``CENTRING_FACTOR * n * eps(dtype)`` (float64's eps for integer dtypes): the largest :func:`centring_defect`
    that rounding of a batch centring in ``dtype`` explains."""
    if isinstance(dtype, torch.dtype):
        eps = torch.finfo(dtype).eps if dtype.is_floating_point else float(np.finfo(np.float64).eps)
    else:
        dtype = np.dtype(dtype)
        eps = float(np.finfo(dtype).eps) if np.issubdtype(dtype, np.floating) else float(np.finfo(np.float64).eps)
    return CENTRING_FACTOR * n * eps


def centered_isometry(G, *, tol: float = NEGATIVE_TOL, computed_in=None, centred_in=None) -> torch.Tensor:
    r"""Isometry of a batch-centred Gram :math:`G` (:math:`G\mathbf 1 = 0`) restricted to
    :math:`\mathbf 1^\perp\subset\mathbb R^n`, i.e. of :math:`Q^\top G Q` with :math:`Q` an orthonormal basis of
    the vectors summing to zero.

    Batch normalisation centres every feature over the batch, so :math:`X\mathbf 1 = 0` and
    :math:`G\mathbf 1 = 0`: its Gram matrix is always singular and :func:`isometry` is 0. This is the
    isometry on the ``n - 1`` directions that remain. The precision rule of :func:`isometry` follows the input's
    dtype (or ``computed_in``, see :func:`log_isometry`): a float32 ``G`` whose centred part is within float32
    rounding of singular is refused.

    ``G`` must be centred: where :func:`centring_defect` exceeds :func:`centring_tolerance` of ``centred_in``
    (default: ``computed_in``, else ``G``'s dtype), ``ValueError``. On a Gram that is not centred the restriction
    to :math:`\mathbf 1^\perp` hides the part along :math:`\mathbf 1` (``J + 1e-3 I`` has centred isometry 1 and
    isometry 0.004): measure such a Gram with :func:`isometry`.
    """
    in_dtype = _input_dtype(G) if computed_in is None else _input_dtype(torch.empty(0, dtype=computed_in))
    T = check_gram(G, tol=_check_tol(tol))
    n = T.shape[-1]
    if n < 2:
        raise ValueError("centered_isometry needs n >= 2 samples")
    centring_dtype = in_dtype if centred_in is None else centred_in
    limit = centring_tolerance(centring_dtype, n)
    defect = centring_defect(T)
    if bool((defect > limit).any()):
        raise ValueError(
            f"G is not batch-centred: ||G 1|| / (sqrt(n) ||G||_F) = {float(defect.max()):.2e} > {limit:.1e} "
            f"({CENTRING_FACTOR} n eps of {centring_dtype}); the centred isometry would ignore the direction of 1, "
            "so measure this Gram with isometry(G) or centre every feature over the batch first (features centred in a "
            "lower precision than G's: pass centred_in=that dtype)")
    # Helmert-type orthonormal basis of 1^perp
    Q = torch.linalg.qr(torch.eye(n, dtype=torch.float64, device=T.device) - 1.0 / n)[0][:, : n - 1]
    return torch.exp(_log_isometry(Q.T @ T @ Q, in_dtype, tol))
