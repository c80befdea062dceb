r"""Hermite expansions of activations under the standard Gaussian, and the nonlinearity strength.

Conventions (used everywhere in the book)
-----------------------------------------
``He_k`` are the **probabilists'** Hermite polynomials, orthogonal under the standard normal
law :math:`\gamma = N(0, 1)`:

.. math::

    \mathrm{He}_0 = 1,\quad \mathrm{He}_1(x) = x,\quad
    \mathrm{He}_{k+1}(x) = x\,\mathrm{He}_k(x) - k\,\mathrm{He}_{k-1}(x),\qquad
    \mathbb E[\mathrm{He}_j(Z)\mathrm{He}_k(Z)] = k!\,\delta_{jk}.

An activation :math:`\sigma \in L^2(\gamma)` expands as :math:`\sigma = \sum_k c_k \mathrm{He}_k` with

.. math::

    c_k = \frac{\mathbb E[\sigma(Z)\,\mathrm{He}_k(Z)]}{k!}
    \quad\text{(``hermite_coefficients(f, k)``)}, \qquad
    a_k = \sqrt{k!}\,c_k = \mathbb E\Big[\sigma(Z)\frac{\mathrm{He}_k(Z)}{\sqrt{k!}}\Big]
    \quad\text{(``normalized=True``)}.

The ``a_k`` are coordinates in an orthonormal basis, so :math:`\mathbb E\sigma(Z)^2 = \sum_k a_k^2`
and :math:`\operatorname{Var}\sigma(Z) = \sum_{k\ge1} a_k^2 = \sum_{k\ge1} k!\,c_k^2`.

The **nonlinearity strength** is

.. math::

    \beta_0(\sigma) = \frac{a_1^2}{\sum_{k\ge 1} a_k^2} = \frac{c_1^2}{\operatorname{Var}\sigma(Z)}
    = \frac{\mathbb E[Z\sigma(Z)]^2}{\operatorname{Var}\sigma(Z)} \in [0, 1]

(:math:`a_1 = c_1` because :math:`1! = 1`). ``beta_0 = 1`` means affine, ``beta_0 = 0`` means no linear
part. Beware: the official code of Joudaki, Daneshmand and Bach (``act_info`` in its validation
notebook, variable ``beta``, and ``compute_beta0`` in its ``utils.py``) returns :math:`2 - \beta_0`; this module always returns :math:`\beta_0` itself.

Quadrature
----------
:func:`gaussian_expectation` integrates :math:`\mathbb E[g(Z)]` with composite Gauss–Legendre panels on
:math:`[-L, L]`, split at the kinks of the activation (``0`` by default). This is exact to about
``1e-13`` for ReLU, ELU, SELU, steps, ... where plain Gauss–Hermite quadrature (``method="hermite"``)
converges only algebraically because of the kink. **An activation with a kink elsewhere** (``relu(x - 0.5)``,
hardtanh at ``+-1``) must pass its kinks as ``breakpoints=(...)`` (in the activation's own input) to every
function here (:func:`hermite_coefficients`, :func:`nonlinearity_strength`, :func:`mean_and_variance`,
:func:`correlation_map`, :func:`gaussian_pair_expectation`, and ``mean_field_grams``). Without them the
one-dimensional quadrature refuses (``ValueError``) where halving its panels moves the result by more than
:data:`REFINEMENT_RTOL` of :math:`\mathbb E|g(Z)|` (``relu(x - 0.5)``: by ``1.7e-4``), unless the kinks are
ends of its unit panels (integers, as hardtanh's ``+-1``), where it is exact anyway; the same check refuses an
activation that is not locally bounded (``|x|^-0.6``, whose square is not integrable: no Gauss–Legendre node lands
on the singularity, so without the check a finite number would come back). The pair quadrature
(:func:`gaussian_pair_expectation`, hence :func:`correlation_map` and ``mean_field_grams``) has no such check:
without the breakpoints it loses accuracy silently (more than ``1e-7`` for hardtanh). Exact values come from :func:`exact_hermite_coefficients`
(sympy) for polynomials and the named activations in :data:`EXACT_ACTIVATIONS`.
"""

from __future__ import annotations

import math
import numbers
from functools import lru_cache

import numpy as np
import sympy as sp
import torch

from .gaussian_quadrature import (  # noqa: F401  (re-exported: the quadrature's constants belong to this API)
    MAX_HALF_WIDTH,
    REFINEMENT_RTOL,
    NonFiniteIntegrandError,
    TAIL_STRIP,
    _gaussian_nodes,
    _gl_nodes,
    _tail_strip_nodes,
    gaussian_expectation,
)

__all__ = [
    "ACTIVATIONS",
    "EXACT_ACTIVATIONS",
    "EXACT_BETA0",
    "get_activation",
    "evaluate_activation",
    "hermite_polynomials",
    "gaussian_expectation",
    "NonFiniteIntegrandError",
    "hermite_coefficients",
    "exact_hermite_coefficients",
    "nonlinearity_strength",
    "exact_nonlinearity_strength",
    "mean_and_variance",
    "correlation_map",
    "correlation_maps",
    "correlation_map_from_coefficients",
    "gaussian_pair_expectation",
]


# ----------------------------------------------------------------------------------------------
# activations


def _he(k: int):
    def f(x):
        x = torch.as_tensor(x)
        return torch.special.hermite_polynomial_he(x, k) / math.sqrt(math.factorial(k))

    f.__name__ = f"he{k}"
    return f


#: Activations used in the chapter, as torch callables (elementwise). ``he{k}`` is the normalised
#: Hermite polynomial ``He_k / sqrt(k!)``, an activation with a single Hermite component.
ACTIVATIONS = {
    "identity": lambda x: x,
    "relu": torch.relu,
    "gelu": torch.nn.functional.gelu,
    "silu": torch.nn.functional.silu,
    "elu": torch.nn.functional.elu,
    "selu": torch.selu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "sin": torch.sin,
    "exp": torch.exp,
    "step": lambda x: (x > 0).to(x.dtype),
    "he1": _he(1),
    "he2": _he(2),
    "he3": _he(3),
}


def get_activation(activation):
    """Return ``(name, callable)`` for a name in :data:`ACTIVATIONS` or any callable."""
    if isinstance(activation, str):
        key = activation.strip().lower()
        if key not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; use one of {sorted(ACTIVATIONS)} or pass a callable")
        return key, ACTIVATIONS[key]
    if not callable(activation):
        raise TypeError(
            f"activation must be a callable (e.g. torch.tanh) or a name in {sorted(ACTIVATIONS)}, "
            f"got {type(activation).__name__}"
        )
    return getattr(activation, "__name__", type(activation).__name__), activation


def evaluate_activation(f, x: np.ndarray) -> np.ndarray:
    """Evaluate an elementwise callable on a float64 NumPy array, trying NumPy then torch input.

    Raises ``TypeError`` for a non-callable, ``ValueError`` for a wrong shape and
    :class:`NonFiniteIntegrandError` (a ``ValueError``) for non-finite output.
    """
    _, f = get_activation(f)
    x = np.asarray(x, dtype=np.float64)
    y = None
    try:
        y = f(x)
        if isinstance(y, torch.Tensor):
            y = y.detach().cpu().numpy()
        y = np.asarray(y, dtype=np.float64)
    except Exception:  # noqa: BLE001 - try again with a torch tensor
        y = None
    if y is None:
        try:
            y = f(torch.from_numpy(x))
        except Exception as err:  # noqa: BLE001
            raise TypeError(
                "the activation could not be evaluated elementwise on a NumPy array or a torch tensor; "
                f"pass a vectorised callable (e.g. np.tanh or torch.tanh): {err}"
            ) from err
        y = np.asarray(y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else y, dtype=np.float64)
    if y.shape != x.shape:
        raise ValueError(f"the activation must act elementwise: input shape {x.shape}, output shape {y.shape}")
    if not np.all(np.isfinite(y)):
        raise NonFiniteIntegrandError(
            "the activation returned non-finite values on the quadrature nodes; it is not in L^2(N(0,1))")
    return y


# ----------------------------------------------------------------------------------------------
# quadrature


def _check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"k must be an integer >= 0, got {type(k).__name__}")
    if k < 0:
        raise ValueError(f"k must be >= 0 (the highest Hermite degree wanted), got {k}")
    return int(k)


def _scaled_breakpoints(quadrature: dict, scale: float) -> dict:
    """The kinks of ``f`` (``quadrature["breakpoints"]``, default 0) as kinks of ``x -> f(scale * x)``."""
    out = dict(quadrature)
    out["breakpoints"] = tuple(float(b) / scale for b in out.get("breakpoints", (0.0,)))
    return out


def hermite_polynomials(x, k: int, normalized: bool = False) -> np.ndarray:
    r"""Values of ``He_0..He_k`` at ``x`` (shape ``(k + 1,) + x.shape``), by the three-term recurrence.

    With ``normalized=True`` return ``He_j / sqrt(j!)`` (computed by the stable normalised recurrence
    :math:`h_{j+1} = (x h_j - \sqrt j\, h_{j-1})/\sqrt{j+1}`, so nothing overflows).
    """
    k = _check_k(k)
    x = np.asarray(x, dtype=np.float64)
    out = np.empty((k + 1,) + x.shape)
    out[0] = 1.0
    if k >= 1:
        out[1] = x
    for j in range(1, k):
        out[j + 1] = (x * out[j] - math.sqrt(j) * out[j - 1]) / math.sqrt(j + 1)
    if not normalized:
        out *= np.sqrt([float(math.factorial(j)) for j in range(k + 1)]).reshape((k + 1,) + (1,) * x.ndim)
    return out



def hermite_coefficients(f, k: int, *, normalized: bool = False, scale: float = 1.0, **quadrature):
    r"""Hermite coefficients ``c_0..c_k`` of ``x -> f(scale * x)`` under N(0, 1), by quadrature.

    ``c_j = E[f(Z) He_j(Z)] / j!`` (probabilists' convention), or ``a_j = E[f(Z) He_j(Z)] / sqrt(j!)``
    with ``normalized=True``. ``f`` is any elementwise callable (NumPy or torch) or a name in
    :data:`ACTIVATIONS`; pass its kinks other than 0 as ``breakpoints=(...)`` (in ``f``'s own input; they are
    divided by ``scale`` here), else the quadrature loses accuracy at them. The half-width of the integration window grows with ``k`` so that
    ``He_k^2 phi`` is integrated in full. Returns a float64 array of length ``k + 1``.
    """
    k = _check_k(k)
    _, fn = get_activation(f)
    quadrature.setdefault("half_width", max(14.0, 2.0 * math.sqrt(k + 1) + 12.0))
    scale = float(scale)
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"scale must be a finite number > 0, got {scale}")

    def g(x):
        return hermite_polynomials(x, k, normalized=True) * evaluate_activation(fn, scale * x)

    a = gaussian_expectation(g, **_scaled_breakpoints(quadrature, scale))
    if normalized:
        return a
    return a / np.sqrt([float(math.factorial(j)) for j in range(k + 1)])


def mean_and_variance(f, *, scale: float = 1.0, **quadrature):
    r""":math:`(\mathbb E\sigma(sZ), \operatorname{Var}\sigma(sZ))` by quadrature (``s = scale``; kinks of
    :math:`\sigma` other than 0 go in ``breakpoints``). The variance is ``E sigma^2 - (E sigma)^2``: a large constant
    offset of ``sigma`` cancels there (``tanh + 1e6`` loses about 1e-3 of ``beta_0``), so subtract it before calling
    (``beta_0`` and the variance do not depend on it)."""
    _, fn = get_activation(f)
    s = float(scale)
    if not (s > 0 and math.isfinite(s)):
        raise ValueError(f"scale must be a finite number > 0, got {scale}")
    def g(x):
        y = evaluate_activation(fn, s * x)  # once: the square is taken of the same values
        return np.stack([y, y * y])

    m1, m2 = gaussian_expectation(g, **_scaled_breakpoints(quadrature, s))
    return float(m1), float(max(m2 - m1**2, 0.0))


def nonlinearity_strength(f, *, scale: float = 1.0, **quadrature) -> float:
    r"""The nonlinearity strength :math:`\beta_0 = c_1^2/\operatorname{Var}\sigma(Z)` of ``f`` (quadrature).

    With ``scale = s`` it is the strength of :math:`x\mapsto f(s x)` (pre-activations of variance
    :math:`s^2`). This is :math:`\beta_0` itself, **not** the ``2 - beta_0`` that the official code of
    Joudaki et al. calls ``beta``. Kinks of ``f`` other than 0 go in ``breakpoints`` (in ``f``'s own input).
    Raises ``ValueError`` for an (almost surely) constant ``f``.
    """
    _, fn = get_activation(f)
    s = float(scale)
    if not (s > 0 and math.isfinite(s)):
        raise ValueError(f"scale must be a finite number > 0, got {scale}")

    def g(x):
        y = evaluate_activation(fn, s * x)
        return np.stack([y, y * y, x * y])

    m1, m2, c1 = gaussian_expectation(g, **_scaled_breakpoints(quadrature, s))
    var = m2 - m1**2
    if not var > 1e-14 * max(m2, 1e-300):
        raise ValueError("the activation is constant under N(0, 1) (zero variance); beta_0 = c_1^2/Var is undefined")
    return float(min(max(c1**2 / var, 0.0), 1.0))


# ----------------------------------------------------------------------------------------------
# exact values (sympy)

_X = sp.Symbol("x", real=True)
_PHI = sp.exp(-(_X**2) / 2) / sp.sqrt(2 * sp.pi)


def _he_sym(j: int):
    return sp.expand(sp.hermite_prob(j, _X)) if hasattr(sp, "hermite_prob") else _he_rec(j)


def _he_rec(j: int):
    a, b = sp.Integer(1), _X
    if j == 0:
        return a
    for i in range(1, j):
        a, b = b, sp.expand(_X * b - i * a)
    return b


def _dfact(m: int) -> int:
    """Double factorial with (-1)!! = 1."""
    out = 1
    while m > 1:
        out *= m
        m -= 2
    return out


def _relu_coeff(j: int):
    phi0 = 1 / sp.sqrt(2 * sp.pi)
    if j == 0:
        return phi0
    if j == 1:
        return sp.Rational(1, 2)
    if j % 2 == 1:
        return sp.Integer(0)
    # E[relu(Z) He_j(Z)] = phi(0) (He_j(0) + j He_{j-2}(0)) = phi(0) (-1)^(j/2+1) (j-3)!!
    return phi0 * (-1) ** (j // 2 + 1) * _dfact(j - 3) / sp.factorial(j)


def _step_coeff(j: int):
    # step(x) = 1[x > 0]; E[He_j(Z); Z > 0] = phi(0) He_{j-1}(0) for j >= 1
    if j == 0:
        return sp.Rational(1, 2)
    m = j - 1
    he0 = 0 if m % 2 else (-1) ** (m // 2) * _dfact(m - 1)
    return he0 / sp.sqrt(2 * sp.pi) / sp.factorial(j)


#: Closed-form Hermite coefficients ``c_j`` (sympy) for these names.
EXACT_ACTIVATIONS = {
    "identity": lambda j: sp.Integer(1) if j == 1 else sp.Integer(0),
    "relu": _relu_coeff,
    "step": _step_coeff,
    # E[e^Z He_j(Z)] = e^{1/2} (shift Z -> Z + 1);  E[e^{iZ} He_j(Z)] = e^{-1/2} i^j
    "exp": lambda j: sp.exp(sp.Rational(1, 2)) / sp.factorial(j),
    "sin": lambda j: sp.exp(-sp.Rational(1, 2)) * sp.sin(sp.pi * j / 2) / sp.factorial(j),
    "cos": lambda j: sp.exp(-sp.Rational(1, 2)) * sp.cos(sp.pi * j / 2) / sp.factorial(j),
}

_S3 = sp.sqrt(3)
#: Closed forms of beta_0 (sympy). GELU: c_1 = 1/2, E GELU = 1/(2 sqrt(pi)),
#: E GELU^2 = 1/3 + 1/(2 pi sqrt 3) (Stein's lemma, see the chapter's exercises).
EXACT_BETA0 = {
    "identity": sp.Integer(1),
    "relu": sp.pi / (2 * (sp.pi - 1)),
    "step": 2 / sp.pi,
    "exp": 1 / (sp.E - 1),
    "sin": 2 * sp.E / (sp.E**2 - 1),
    "gelu": sp.Rational(1, 4) / (sp.Rational(1, 3) + 1 / (2 * sp.pi * _S3) - 1 / (4 * sp.pi)),
    "he1": sp.Integer(1),
    "he2": sp.Integer(0),
    "he3": sp.Integer(0),
}


def exact_hermite_coefficients(f, k: int) -> list:
    r"""Exact ``c_0..c_k`` as sympy numbers, for a name in :data:`EXACT_ACTIVATIONS` or a sympy
    polynomial in one variable (e.g. ``x**3 - 3*x``).

    Polynomials are expanded exactly in the ``He`` basis (:math:`c_j = \mathbb E[p(Z)\mathrm{He}_j(Z)]/j!`
    computed from the Gaussian moments :math:`\mathbb E Z^{2m} = (2m-1)!!`).
    """
    k = _check_k(k)
    if isinstance(f, str):
        key = f.strip().lower()
        if key not in EXACT_ACTIVATIONS:
            raise ValueError(f"no closed form stored for {f!r}; known: {sorted(EXACT_ACTIVATIONS)} (or pass a polynomial)")
        return [sp.simplify(EXACT_ACTIVATIONS[key](j)) for j in range(k + 1)]
    if isinstance(f, sp.Basic):
        free = f.free_symbols
        if len(free) > 1:
            raise ValueError(f"the polynomial must have one variable, got {sorted(map(str, free))}")
        sym = next(iter(free)) if free else _X
        poly = sp.Poly(f, sym)
        coeffs = []
        for j in range(k + 1):
            prod = sp.Poly(sp.expand(poly.as_expr().subs(sym, _X) * _he_rec(j)), _X)
            moment = sum(c * (_dfact(m - 1) if m % 2 == 0 else 0) for (m,), c in prod.terms())
            coeffs.append(sp.nsimplify(moment) / sp.factorial(j))
        return coeffs
    raise TypeError(f"f must be an activation name or a sympy polynomial, got {type(f).__name__}")


def exact_nonlinearity_strength(name: str):
    """Closed-form beta_0 (sympy) for a name in :data:`EXACT_BETA0`, else ``None``."""
    return EXACT_BETA0.get(str(name).strip().lower())


# ----------------------------------------------------------------------------------------------
# correlation maps


def correlation_map_from_coefficients(coefficients, rho, *, normalized: bool = True):
    r"""The centred, normalised correlation map :math:`\kappa(\rho) = \sum_{k\ge1} a_k^2\rho^k/\sum_{k\ge1} a_k^2`.

    ``coefficients`` are ``a_0..a_K`` (``normalized=True``) or ``c_0..c_K`` (then ``a_k = sqrt(k!) c_k``);
    ``a_0`` is ignored: centring removes it. The series is truncated at ``K``.
    """
    a = np.asarray(coefficients, dtype=np.float64)
    if not normalized:
        a = a * np.sqrt([float(math.factorial(j)) for j in range(len(a))])
    w = a[1:] ** 2
    if w.sum() <= 0:
        raise ValueError("all coefficients of degree >= 1 vanish: the activation is constant")
    rho = np.asarray(rho, dtype=np.float64)
    powers = rho[..., None] ** np.arange(1, len(a))
    return powers @ w / w.sum()


def _pair_nodes(m: int = 24, panels: int = 3, half_width: float = 10.0):
    t, tw = _gl_nodes(m)
    # standard nodes on [0, 1] made of `panels` equal panels
    edges = np.linspace(0.0, 1.0, panels + 1)
    u = np.concatenate([0.5 * (b - a) * t + 0.5 * (a + b) for a, b in zip(edges[:-1], edges[1:])])
    uw = np.concatenate([0.5 * (b - a) * tw for a, b in zip(edges[:-1], edges[1:])])
    return u, uw


def _split_interval_nodes(lo, hi, cuts=(0.0,), m: int = 24, panels: int = 3):
    """Nodes/weights of intervals [lo, hi] (arrays), split at every point of ``cuts`` that falls inside."""
    u, uw = _pair_nodes(m, panels)
    edges = np.stack([lo] + [np.clip(c, lo, hi) for c in sorted(cuts)] + [hi], axis=-1)  # clipping keeps the order
    a, width = edges[..., :-1, None], np.diff(edges, axis=-1)[..., None]  # one piece per row, in order
    nodes = (a + width * u).reshape(lo.shape + (-1,))  # the same a + (b - a) u, piece after piece, as one array
    return nodes, (width * uw).reshape(lo.shape + (-1,))


#: Relative width (conditional sd of V over |slope|, in units of sd U) below which the outer panels of
#: :func:`gaussian_pair_expectation` are graded towards the point where V's conditional mean crosses a breakpoint.
GRADING_THRESHOLD = 0.5
#: Graded edges sit at ``u* +- w * 2**j`` for ``j = -1 .. GRADING_LEVELS - 1`` (``w`` the width of the transition).
GRADING_LEVELS = 4


def _jump_breakpoints(g, cuts) -> tuple:
    """The breakpoints at which ``g`` jumps (a step), not merely kinks: ``|g(c + d) - g(c - d)|`` above ``1e-4`` of
    the values' scale for ``d = 1e-7 (1 + |c|)`` (a kink of slope up to about 500 stays below). Only there does
    E[g(V) | U] turn into an almost-jump as |rho| -> 1, so only there are the outer panels graded."""
    if not cuts:
        return ()
    c = np.asarray(cuts, dtype=np.float64)
    d = 1e-7 * (1.0 + np.abs(c))
    left, right = evaluate_activation(g, c - d), evaluate_activation(g, c + d)
    scale = 1.0 + np.abs(left) + np.abs(right)
    return tuple(float(x) for x, jump in zip(c, np.abs(right - left) > 1e-4 * scale) if jump)


def _graded_outer_nodes(lo, hi, cuts, sd, slope, cs, m: int, panels: int, grade_at=None):
    """Outer nodes/weights on [lo, hi] (arrays): the usual panels (split at ``cuts``, ``panels`` pieces each), plus,
    where the conditional law of V given U is narrow, edges graded geometrically towards each ``u* = c / slope``.

    There E[g(V) | U = u] changes over a width ``w = cs / |slope|`` in u (for a step g it is Phi((slope u - c) / cs),
    almost a jump as |rho| -> 1), which equal panels cannot resolve. Edges at ``u* +- w 2^j`` (j = -1..3, so out to
    8 w, beyond which Phi is within Phi(-8) ~ 6e-16 of 0 or 1) give each Gauss-Legendre panel a smooth piece of bounded
    relative width. Each segment between consecutive edges gets one ``m``-node panel."""
    base = [lo] + [np.clip(c, lo, hi) for c in sorted(cuts)] + [hi]
    edges = []
    for a, b in zip(base[:-1], base[1:]):
        edges += [a + (b - a) * k / panels for k in range(panels)]
    edges.append(hi)
    safe_slope = np.where(slope != 0, slope, 1.0)
    with np.errstate(over="ignore"):  # |slope| below 1e-308 * cs: no transition inside the window (w = inf)
        w = np.where(slope != 0, cs / np.abs(safe_slope), np.inf)
    narrow = (w > 0) & (w < GRADING_THRESHOLD * sd)
    grade_at = cuts if grade_at is None else grade_at
    if grade_at and np.any(narrow):
        steps = np.where(narrow, w, 0.0)[..., None] * 2.0 ** np.arange(-1, GRADING_LEVELS)
        for c in grade_at:
            with np.errstate(over="ignore"):
                centre = np.where(narrow, c / safe_slope, 0.0)
            for piece in (centre[..., None], centre[..., None] - steps, centre[..., None] + steps):
                for k in range(piece.shape[-1]):
                    edges.append(np.where(narrow, np.clip(piece[..., k], lo, hi), lo))
    e = np.sort(np.stack(edges, axis=-1), axis=-1)
    t, tw = _gl_nodes(m)
    a, b = e[..., :-1, None], e[..., 1:, None]
    nodes = 0.5 * (b - a) * (t + 1.0) + a
    weights = 0.5 * (b - a) * tw
    return nodes.reshape(nodes.shape[:-2] + (-1,)), weights.reshape(weights.shape[:-2] + (-1,))


def _narrow_members(cov):
    """Members of a batch of 2 x 2 covariances whose conditional law of V given U is narrow enough for grading."""
    q1 = np.maximum(cov[..., 0, 0], 0.0)
    safe_q1 = np.where(q1 > 0, q1, 1.0)
    slope = np.where(q1 > 0, cov[..., 0, 1] / safe_q1, 0.0)
    cvar = np.maximum(np.maximum(cov[..., 1, 1], 0.0) - slope * cov[..., 0, 1], 0.0)
    cvar = np.where(cvar < 1e-14 * np.maximum(cov[..., 1, 1], 1e-300), 0.0, cvar)
    with np.errstate(over="ignore", divide="ignore"):
        w = np.where(slope != 0, np.sqrt(cvar) / np.abs(np.where(slope != 0, slope, 1.0)), np.inf)
    return (w > 0) & (w < GRADING_THRESHOLD * np.sqrt(q1))


def _check_breakpoints(breakpoints) -> tuple:
    try:
        cuts = tuple(float(b) for b in breakpoints)
    except TypeError as err:
        raise TypeError(f"breakpoints must be a sequence of numbers (the kinks of the activation), got {breakpoints!r}") from err
    if not all(math.isfinite(b) for b in cuts):
        raise ValueError(f"breakpoints must be finite, got {cuts}")
    return cuts


def _marginal_window(f, sd: float, half_width: float) -> float:
    """The smallest L = half_width + k * TAIL_STRIP whose strips L <= |z| <= L + TAIL_STRIP carry at most 1e-18 of
    E f(sd Z)^2 (ValueError beyond MAX_HALF_WIDTH)."""
    if sd <= 0:
        return float(half_width)
    L = float(half_width)
    while L <= MAX_HALF_WIDTH:
        x, w = _gaussian_nodes((0.0,), L, 1.0, 32, "legendre", 0)
        sx, sw = _tail_strip_nodes(L)
        inside = evaluate_activation(f, sd * x) ** 2 @ w
        strip = evaluate_activation(f, sd * sx) ** 2 @ sw
        if np.isfinite(strip) and strip <= 1e-18 * inside:
            return L
        L += TAIL_STRIP
    raise NonFiniteIntegrandError(f"the activation grows too fast at standard deviation {sd:g}: the mass of f^2 under the Gaussian is "
                     f"not contained in {MAX_HALF_WIDTH:g} standard deviations; rescale its input")


def gaussian_pair_expectation(f, g, cov, *, half_width: float = 10.0, m: int = 24, panels: int = 3,
                              breakpoints=(0.0,)):
    r""":math:`\mathbb E[f(U)\,g(V)]` for :math:`(U, V)\sim N(0, \Sigma)`, ``cov`` of shape ``(..., 2, 2)``.

    Nested quadrature: over :math:`U\sim N(0,\Sigma_{11})`, then over
    :math:`V\mid U \sim N(\Sigma_{12}U/\Sigma_{11}, \Sigma_{22} - \Sigma_{12}^2/\Sigma_{11})`, both split at
    ``breakpoints`` (the kinks of ``f`` and ``g``, default 0; pass others, e.g. ``(-1, 1)`` for hardtanh),
    composite Gauss–Legendre on ``mean +- half_width * sd``, the window widened (by steps of :data:`TAIL_STRIP`,
    with proportionally more panels) until the strips beyond it carry at most ``1e-18`` of :math:`\mathbb E f(U)^2`
    and of :math:`\mathbb E g(V)^2` (so ``exp`` at a large variance, whose mass sits far out, is integrated in full;
    ``ValueError`` if no window up to :data:`MAX_HALF_WIDTH` does). For ReLU against the arc-cosine kernel the error is
    below 1e-11 for ``|rho| <= 0.99`` and below 5e-8 up to ``|rho| = 1`` (the conditional law narrows there);
    with ``m=16, panels=2`` below 2e-6 (tests/isometry/test_hermite.py). Where the conditional law is narrow
    (conditional sd below :data:`GRADING_THRESHOLD` times ``|slope| sd(U)``) the outer panels are graded towards the
    points where V's conditional mean crosses a breakpoint at which ``g`` jumps (:func:`_jump_breakpoints`; a kink such
    as ReLU's needs no grading), so a step activation, whose
    :math:`\mathbb E[g(V)\mid U]` is then almost a jump, keeps :math:`(2/\pi)\arcsin\rho` to 1e-12 and
    :math:`1-\kappa` to a relative 1e-9 up to :math:`|\rho| = 1-10^{-6}`. For :math:`1-|\rho|` below about
    5e-15 the conditional variance is within rounding of 0 and taken as 0 (:math:`V` = slope times :math:`U`). Degenerate cases (zero variance,
    ``|correlation| = 1``) are handled exactly (for :math:`\Sigma_{11} = 0` the one-dimensional integral over
    :math:`V` splits at the breakpoints too).
    """
    cuts = _check_breakpoints(breakpoints)
    cov = np.asarray(cov, dtype=np.float64)
    jumps = _jump_breakpoints(g, cuts)  # graded panels only where g jumps (a kink such as ReLU's does not need them)
    if cov.ndim >= 3 and jumps:  # grade only the members that need it (graded panels cost about 3x)
        narrow = _narrow_members(cov)
        if narrow.any() and not narrow.all():
            out = np.empty(cov.shape[:-2])
            for part in (narrow, ~narrow):
                out[part] = gaussian_pair_expectation(f, g, cov[part], half_width=half_width, m=m, panels=panels,
                                                      breakpoints=cuts)
            return out
    q1 = np.maximum(cov[..., 0, 0], 0.0)
    q2 = np.maximum(cov[..., 1, 1], 0.0)
    # widen the window (and its panels, keeping their width) where f or g grows fast enough to carry mass beyond it
    wide = max(_marginal_window(f, float(np.sqrt(q1.max(initial=0.0))), half_width),
               _marginal_window(g, float(np.sqrt(q2.max(initial=0.0))), half_width))
    if wide > half_width:
        panels = int(math.ceil(panels * wide / half_width))
        half_width = wide
    c12 = cov[..., 0, 1]
    s1 = np.sqrt(q1)
    lo = -half_width * np.maximum(s1, 1e-300)
    safe_q1 = np.where(q1 > 0, q1, 1.0)
    slope = np.where(q1 > 0, c12 / safe_q1, 0.0)
    cvar = np.maximum(q2 - slope * c12, 0.0)
    cvar = np.where(cvar < 1e-14 * np.maximum(q2, 1e-300), 0.0, cvar)
    cs = np.sqrt(cvar)
    # outer nodes in U, graded where E[g(V) | U] turns over a width cs / |slope| much narrower than sd(U)
    un, uw = _graded_outer_nodes(lo, -lo, cuts, s1, slope, cs, m, panels, grade_at=jumps)
    dens = np.exp(-0.5 * un**2 / safe_q1[..., None]) / np.sqrt(2 * np.pi * safe_q1[..., None])
    uw = uw * dens
    mu = slope[..., None] * un  # (..., N)
    fu = evaluate_activation(f, un)
    # conditional variance zero: V = slope * U exactly; the inner quadrature is formed only where it is not
    # (a Gram's diagonal pairs have it zero: a sixth of the pairs of n = 10 samples)
    inner = np.array(evaluate_activation(g, mu))  # a copy: written below (an identity g returns its input)
    spread = np.broadcast_to(cvar > 0, mu.shape[:-1])
    if spread.any():
        mu_s, cs_s, cv_s = mu[spread], cs[spread][:, None], cvar[spread][:, None, None]
        vn, vw = _split_interval_nodes(mu_s - half_width * np.maximum(cs_s, 1e-300),
                                       mu_s + half_width * np.maximum(cs_s, 1e-300), cuts, m, panels)
        vdens = np.exp(-0.5 * (vn - mu_s[..., None]) ** 2 / cv_s) / np.sqrt(2 * np.pi * cv_s)
        vw = vw * vdens
        gv = evaluate_activation(g, vn)
        inner[spread] = np.sum(gv * vw, axis=-1)
    outer = np.sum(fu * inner * uw, axis=-1)
    # U degenerate (q1 = 0): U = 0, V ~ N(0, q2)
    if np.any(q1 <= 0):
        f0 = evaluate_activation(f, np.zeros(1))[0]
        sd = np.atleast_1d(np.sqrt(q2))
        gz = np.zeros(sd.shape)
        for i in np.flatnonzero(np.atleast_1d(q1 <= 0)):  # V = sd Z: the kinks of g sit at cuts / sd in Z
            s_i = float(sd.flat[i])
            z, zw = _gaussian_nodes(tuple(c / s_i for c in cuts) if s_i > 0 else (0.0,), 14.0, 1.0, 32, "legendre", 0)
            gz.flat[i] = evaluate_activation(g, s_i * z) @ zw
        outer = np.where(q1 > 0, outer, f0 * gz.reshape(np.shape(q2)))
    return outer


def correlation_map(f, rho, *, centered: bool = True, scale: float = 1.0, breakpoints=(0.0,)):
    r"""Mean-field correlation map of one layer ``x -> N(sigma(W x))`` at unit-variance pre-activations.

    ``centered=True`` (LayerNorm): :math:`\kappa(\rho)=\operatorname{Cov}(\sigma(U),\sigma(V))/\operatorname{Var}\sigma(Z)
    = \sum_{k\ge1}a_k^2\rho^k/\sum_{k\ge1}a_k^2`. ``centered=False`` (scaling only):
    :math:`\tilde\kappa(\rho) = \mathbb E[\sigma(U)\sigma(V)]/\mathbb E\sigma(Z)^2 = \sum_{k\ge0}a_k^2\rho^k/\sum_{k\ge0}a_k^2`.
    Here :math:`(U, V)` is a standard bivariate normal pair with correlation ``rho`` (times ``scale``).
    Computed by nested quadrature (:func:`gaussian_pair_expectation`), not by a truncated series; kinks of
    ``f`` other than 0 go in ``breakpoints`` (in ``f``'s own input).
    """
    kappa, kappa_tilde = correlation_maps(f, rho, scale=scale, breakpoints=breakpoints)
    return kappa if centered else kappa_tilde


def correlation_maps(f, rho, *, scale: float = 1.0, breakpoints=(0.0,)):
    r"""Both maps of :func:`correlation_map`, :math:`(\kappa(\rho), \tilde\kappa(\rho))`, from one quadrature of
    :math:`\mathbb E[\sigma(U)\sigma(V)]` (the two differ only in what they subtract and divide by), at half the cost
    of two calls and with the same values."""
    _, fn = get_activation(f)
    rho = np.asarray(rho, dtype=np.float64)
    if not np.all(np.isfinite(rho)):
        raise ValueError(f"rho must be finite (a correlation in [-1, 1]), got {rho}")
    if np.any(np.abs(rho) > 1 + 1e-12):
        raise ValueError("rho must lie in [-1, 1]")
    rho = np.clip(rho, -1.0, 1.0)
    s2 = float(scale) ** 2
    cov = np.empty(rho.shape + (2, 2))
    cov[..., 0, 0] = s2
    cov[..., 1, 1] = s2
    cov[..., 0, 1] = cov[..., 1, 0] = s2 * rho
    e_uv = gaussian_pair_expectation(fn, fn, cov, breakpoints=breakpoints)
    mean, var = mean_and_variance(fn, scale=scale, breakpoints=_check_breakpoints(breakpoints))
    return (e_uv - mean**2) / var, e_uv / (var + mean**2)
