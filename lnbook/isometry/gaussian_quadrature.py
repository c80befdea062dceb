r"""One-dimensional Gaussian quadrature: :math:`\mathbb E[g(Z)]`, :math:`Z\sim N(0,1)`, that proves convergence or refuses.

Composite Gauss–Legendre on a window that widens until the tails are negligible (:data:`TAIL_STRIP`,
:data:`MAX_HALF_WIDTH`), split at the kinks it is given, and checked against panels half as wide
(:data:`REFINEMENT_RTOL`). Used by :mod:`lnbook.isometry.hermite` (which re-exports :func:`gaussian_expectation`).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

__all__ = ["gaussian_expectation", "NonFiniteIntegrandError", "REFINEMENT_RTOL", "TAIL_STRIP", "MAX_HALF_WIDTH"]


class NonFiniteIntegrandError(ValueError):
    """The integrand overflows: its values on the nodes are not finite, or its Gaussian mass is not contained in
    :data:`MAX_HALF_WIDTH` standard deviations (``exp`` at a large variance). A ``ValueError``; kept apart from the
    refusal of a quadrature that does not converge (a kink not in ``breakpoints``, a singularity), so that a caller
    iterating a map (``mean_field_grams``) can report overflow as divergence and let the other refusals through."""


@lru_cache(maxsize=64)
def _gl_nodes(m: int):
    return np.polynomial.legendre.leggauss(m)


@lru_cache(maxsize=64)
def _gaussian_nodes(breakpoints: tuple, half_width: float, panel: float, m: int, method: str, n_hermite: int):
    """Nodes and weights of a quadrature for E[g(Z)], Z ~ N(0, 1)."""
    if method == "hermite":
        x, w = np.polynomial.hermite_e.hermegauss(n_hermite)
        return x, w / math.sqrt(2 * math.pi)
    cuts = sorted({-half_width, half_width, *[b for b in breakpoints if -half_width < b < half_width]})
    t, tw = _gl_nodes(m)
    xs, ws = [], []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        pieces = max(1, int(math.ceil((hi - lo) / panel)))
        edges = np.linspace(lo, hi, pieces + 1)
        for a, b in zip(edges[:-1], edges[1:]):
            xs.append(0.5 * (b - a) * t + 0.5 * (a + b))
            ws.append(0.5 * (b - a) * tw)
    x = np.concatenate(xs)
    w = np.concatenate(ws) * np.exp(-0.5 * x**2) / math.sqrt(2 * math.pi)
    return x, w


def gaussian_expectation(
    g,
    *,
    breakpoints=(0.0,),
    half_width: float = 14.0,
    method: str = "legendre",
    n_hermite: int = 120,
):
    r""":math:`\mathbb E[g(Z)]`, :math:`Z\sim N(0,1)`, for a callable ``g`` returning an array ``(..., len(x))``.

    ``method="legendre"`` (default): composite Gauss–Legendre, panels of width <= 1 with 32 nodes on
    :math:`[-L, L]` (``L = half_width``), split at ``breakpoints`` (put the kinks of ``g`` there). The
    window is *widened* until the integrand is negligible beyond it: the Gaussian's lost mass
    :math:`2\Phi(-L)` bounds nothing for a fast-growing ``g`` (for :math:`g(x)=e^{2sx}` the mass of
    :math:`g\varphi` sits around :math:`x = 2s`). The window grows by steps of :data:`TAIL_STRIP` until
    :math:`\int|g|\varphi` over the two strips :math:`L\le|x|\le L+4` is at most ``1e-16`` times
    :math:`\int|g|\varphi` over :math:`[-L, L]`, for every component; this is sound for integrands with
    :math:`|g(x)|\varphi(x)` decreasing beyond the window (any :math:`|g|\le Ce^{c|x|}` once :math:`L > c`), and a
    ``ValueError`` is raised if no window up to :data:`MAX_HALF_WIDTH` passes. The result is then recomputed on
    panels of width 1/2, and a ``ValueError`` is raised if the two differ by more than :data:`REFINEMENT_RTOL` of
    :math:`\int|g|\varphi` (a kink not in ``breakpoints``, or an integrand that is not locally bounded, as
    :math:`|x|^{-1.2}`, whose divergence at a node-free point no single rule can see). ``method="hermite"``:
    plain Gauss–Hermite with ``n_hermite`` nodes (exact for polynomials of degree < 2 n_hermite,
    slow for kinks; no window).
    """
    if method not in ("legendre", "hermite"):
        raise ValueError(f"method must be 'legendre' or 'hermite', got {method!r}")
    bps = tuple(float(b) for b in breakpoints)
    if method == "hermite":
        x, w = _gaussian_nodes(bps, float(half_width), 1.0, 32, method, int(n_hermite))
        return np.asarray(g(x)) @ w
    L = float(half_width)
    while True:
        x, w = _gaussian_nodes(bps, L, 1.0, 32, method, int(n_hermite))
        gx = np.asarray(g(x))
        sx, sw = _tail_strip_nodes(L)
        with np.errstate(over="ignore", invalid="ignore"):
            strip = np.abs(np.asarray(g(sx))) @ sw
            inside = np.abs(gx) @ w
        if np.all(np.isfinite(strip)) and np.all(strip <= 1e-16 * inside):
            return _refined_or_refuse(g, gx @ w, inside, bps, L)
        if L + TAIL_STRIP > MAX_HALF_WIDTH:
            raise NonFiniteIntegrandError(
                f"the integrand's mass is not contained in [-{MAX_HALF_WIDTH:g}, {MAX_HALF_WIDTH:g}] standard deviations: "
                "it grows too fast (or is not finite) for this quadrature; rescale the activation's input")
        L += TAIL_STRIP


#: The largest change, relative to :math:`\int|g|\varphi`, that halving the panels may make to
#: :func:`gaussian_expectation` before it refuses (the quadrature has not converged).
REFINEMENT_RTOL = 1e-6


def _refined_or_refuse(g, value, inside, bps: tuple, L: float):
    """``value`` (panels of width 1 on [-L, L]) if panels of width 1/2 agree with it to REFINEMENT_RTOL of the
    integral of |g| phi, componentwise; else ValueError. Gauss-Legendre nodes never land on a panel's ends, so a
    singularity there (|x|^-0.6: E g = inf) or a kink inside a panel shows only as a failure to converge."""
    x, w = _gaussian_nodes(bps, L, 0.5, 32, "legendre", 0)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        fine = np.asarray(g(x)) @ w
        change = np.abs(fine - value)
    if np.all(np.isfinite(fine)) and np.all(change <= REFINEMENT_RTOL * inside):
        return value
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = float(np.nanmax(np.where(inside > 0, change / inside, np.inf)))
    raise ValueError(
        f"the quadrature does not converge: halving its panels changes E[g(Z)] by {rel:.1e} of E|g(Z)| (tolerance "
        f"{REFINEMENT_RTOL:g}). The activation has a kink or jump that is not in `breakpoints` (pass it there), or it "
        "is not locally bounded (a singularity such as |x|^-0.6, where E sigma(Z)^2 is infinite); this quadrature "
        "needs a piecewise-smooth, locally bounded activation with its kinks as breakpoints")


#: Step by which :func:`gaussian_expectation` widens its window, and the width of the strips it checks.
TAIL_STRIP = 4.0
#: The widest window :func:`gaussian_expectation` tries before it refuses.
MAX_HALF_WIDTH = 80.0


@lru_cache(maxsize=64)
def _tail_strip_nodes(L: float):
    """Nodes and Gaussian weights on the two strips L <= |x| <= L + TAIL_STRIP."""
    t, tw = _gl_nodes(32)
    xs, ws = [], []
    for a in (L, -L - TAIL_STRIP):
        for k in range(int(TAIL_STRIP)):
            xs.append(0.5 * t + a + k + 0.5)
            ws.append(0.5 * tw)
    x = np.concatenate(xs)
    return x, np.concatenate(ws) * np.exp(-0.5 * x**2) / math.sqrt(2 * math.pi)
