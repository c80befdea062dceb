r"""The distortion budget of width-3 LN-Nets: Schwarzian derivatives of the block maps (chapter 3).

A block ``Linear(3,3) -> LN`` of the construction acts on the LN circle as
:math:`\theta \mapsto F(\theta) = \arg S\,(v(\theta) - o)` (pole :math:`o`, linear part :math:`S`,
:math:`v(\theta) = (\cos\theta, \sin\theta)`). Its **Schwarzian derivative**

.. math:: \mathcal S F = \frac{F'''}{F'} - \frac32 \Big(\frac{F''}{F'}\Big)^2

vanishes exactly for projective maps and measures how far a map is from one. Chapter 3 proves

.. math:: \mathcal S F(\theta) = \tfrac12 - 2F'(\theta)^2 - \tfrac32\,\frac{R^2 - 1}{(1 - R\cos(\theta - \omega))^2},

:math:`R = \|o\|`, :math:`o = R(\cos\omega, \sin\omega)`: two pieces, the direction map seen from
the pole (:func:`direction_map_identity`, checked with sympy) and the linear map on directions
(:func:`linear_direction_identity`). A block whose pole lies on or outside the circle and which
keeps the width of an arc (:math:`F' \approx 1`) therefore has :math:`\mathcal S F \le -3/2`. These
add up along the net, and Sturm's comparison theorem (:func:`sturm_width_limit`) bounds the width
of an arc on which the inverse of a composite map with Schwarzian :math:`\ge \sigma` can stay smooth.

Numerical Schwarzians (:func:`block_schwarzian`) use exact derivatives from ``torch.func`` in float64.

**Peeling.** :func:`peel_distortion` runs the construction's moves on evenly spaced points (each
block removes an end point, alternating ends, and re-spreads the rest onto an arc of width
:math:`w`) and measures how the gaps near the ends shrink against those in the middle.
:func:`predicted_end_ratio` predicts it from the budget: in current coordinates the inverse map
to the start has Schwarzian :math:`\sigma_L \approx \tfrac32 \sum_{j<L} (w_j n_L / (w_L n_j))^2`
(each block adds :math:`3/2` in its own coordinates; :math:`n_j` points on an arc of width
:math:`w_j` at step :math:`j`), so :math:`(\Psi')^{-1/2} \propto \cos(\sqrt{\sigma_L/2}\,x)` and the gap
ratio end/middle is :math:`\cos^2(\sqrt{\sigma_L/2}\; x_{\rm end})`. It is a model, not a theorem: it
assumes the Schwarzian is spread evenly along the arc.

**The arc and its straightening** (the float64 builder of :mod:`lnbook.capacity.build_float64`).
:func:`arc_width_for` is the width :math:`w(N) = \min(0.25, 3/\sqrt N)` on which the builder keeps
:math:`N` clusters below 2000 distinct samples: it keeps the budget :math:`\sigma_L w_L^2` below
:math:`27/4` whatever the number of samples (:func:`schwarzian_budget`). From 2000 distinct samples on
the builder keeps the widest arc and pays the budget back with **straightening blocks**: a block whose
pole lies *inside* the circle is a bijection (nothing merges) with positive Schwarzian;
:func:`straightening_pole` picks its pole, :func:`straightening_allowance` bounds how many the builder
may add (one per ``STRAIGHTEN_EVERY`` merges).
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp
import torch

from lnbook.capacity.circle import block_image, pole_for_move, unit

__all__ = [
    "schwarzian_expr",
    "direction_map_identity",
    "linear_direction_identity",
    "block_angle",
    "block_schwarzian",
    "predicted_block_schwarzian",
    "sturm_width_limit",
    "peel_distortion",
    "peel_move",
    "peeled_arc",
    "predicted_end_ratio",
    "schwarzian_budget",
    "arc_width_for",
    "end_ratios",
    "straightening_pole",
    "straightening_allowance",
]

ARC_CAP = 0.25  # widest arc the float64 builder keeps between moves
ARC_SCALE = 3.0  # below STRAIGHTEN_FROM: arc width w(N) = min(ARC_CAP, ARC_SCALE / sqrt(N)) for N clusters
STRAIGHTEN_FROM = 2000  # from this many distinct samples on, the builder keeps the wide arc and straightens it
STRAIGHTEN_EVERY = 8  # ... with at most one straightening block per this many merging blocks
STRAIGHTEN_BELOW = 0.8  # ... when the mean end gap falls below this share of the mean middle gap
STRAIGHTEN_R = np.linspace(0.3, 0.97, 68)  # distances of the interior pole from the centre, scanned
STRAIGHTEN_W = np.linspace(-0.4, 0.4, 9)  # its direction, in units of the arc width, scanned


def schwarzian_expr(f: sp.Expr, t: sp.Symbol) -> sp.Expr:
    r"""The Schwarzian derivative :math:`f'''/f' - \tfrac32 (f''/f')^2` of a sympy expression in ``t``."""
    d1 = sp.diff(f, t)
    d2 = sp.diff(d1, t)
    d3 = sp.diff(d2, t)
    return d3 / d1 - sp.Rational(3, 2) * (d2 / d1) ** 2


def direction_map_identity() -> sp.Expr:
    r"""``2 g'^2 + S g - 1/2 + (3/2)(R^2-1)/(1 - R cos t)^2``, simplified: zero.

    :math:`g(t) = \arg\big((\cos t, \sin t) - (R, 0)\big)` is the direction in which the pole
    :math:`o = (R, 0)` sees the circle point at angle :math:`t` (any pole, by rotation).
    """
    t, R = sp.symbols("t R", real=True)
    g = sp.atan2(sp.sin(t), sp.cos(t) - R)
    g1 = sp.simplify(sp.diff(g, t))
    expr = 2 * g1**2 + schwarzian_expr(g, t) - sp.Rational(1, 2) + sp.Rational(3, 2) * (R**2 - 1) / (1 - R * sp.cos(t)) ** 2
    return sp.simplify(sp.factor(sp.simplify(expr)))


def linear_direction_identity() -> sp.Expr:
    r"""``S h - (2 - 2 h'^2)``, simplified: zero, for :math:`h(\psi) = \arg A(\cos\psi, \sin\psi)`, any 2x2 ``A``.

    The action of a linear map on directions has Schwarzian :math:`2 - 2h'^2`; with the chain rule
    :math:`\mathcal S(h\circ g) = (\mathcal S h\circ g)\,g'^2 + \mathcal S g` and :math:`F' = h'g'`
    this gives the block formula of the module docstring.
    """
    p, a, b, c, d = sp.symbols("psi a b c d", real=True)
    h = sp.atan2(c * sp.cos(p) + d * sp.sin(p), a * sp.cos(p) + b * sp.sin(p))
    h1 = sp.simplify(sp.diff(h, p))
    return sp.simplify(schwarzian_expr(h, p) - (2 - 2 * h1**2))


def block_angle(theta: torch.Tensor, pole, S) -> torch.Tensor:
    """The block map on the circle: the angle of ``S (v(theta) - pole)`` (float64 torch, differentiable)."""
    pole = torch.as_tensor(np.asarray(pole, dtype=np.float64))
    S = torch.as_tensor(np.asarray(S, dtype=np.float64))
    w = S @ (torch.stack([torch.cos(theta), torch.sin(theta)]) - pole)
    return torch.atan2(w[1], w[0])


def block_schwarzian(theta, pole, S) -> tuple[np.ndarray, np.ndarray]:
    """``(F', S F)`` of the block map at the angles ``theta``, from exact derivatives (``torch.func``)."""
    from torch.func import grad, vmap

    S_ = np.asarray(S, dtype=np.float64)
    if S_.shape != (2, 2) or not abs(np.linalg.det(S_)) > 0:
        raise ValueError(f"S must be an invertible 2x2 matrix, got {S_.tolist()}")
    f = lambda t: block_angle(t, pole, S)  # noqa: E731
    f1, f2, f3 = grad(f), grad(grad(f)), grad(grad(grad(f)))
    th = torch.as_tensor(np.atleast_1d(np.asarray(theta, dtype=np.float64)))
    d1, d2, d3 = (vmap(g)(th).cpu().numpy() for g in (f1, f2, f3))
    return d1, d3 / d1 - 1.5 * (d2 / d1) ** 2


def predicted_block_schwarzian(theta, pole, derivative) -> np.ndarray:
    r""":math:`\tfrac12 - 2D^2 - \tfrac32 (R^2-1)/(1 - R\cos(\theta - \omega))^2` (chapter 3's proposition)."""
    pole = np.asarray(pole, dtype=np.float64)
    R, omega = float(np.linalg.norm(pole)), math.atan2(pole[1], pole[0])
    theta = np.asarray(theta, dtype=np.float64)
    return 0.5 - 2.0 * np.asarray(derivative) ** 2 - 1.5 * (R**2 - 1.0) / (1.0 - R * np.cos(theta - omega)) ** 2


def sturm_width_limit(sigma: float) -> float:
    r"""Sturm: if the Schwarzian of a diffeomorphism :math:`\Psi` is :math:`\ge \sigma > 0` on an interval,
    the interval is shorter than :math:`\pi\sqrt{2/\sigma}`.

    (:math:`u = (\Psi')^{-1/2} > 0` solves :math:`u'' = -\tfrac12 \mathcal S\Psi\, u`, and a positive
    solution of :math:`u'' + \tfrac\sigma2 u \le 0` cannot live on an interval as a half
    period of :math:`\sin(\sqrt{\sigma/2}\,x)`.)
    """
    if not sigma > 0:
        raise ValueError(f"sigma must be positive (a lower bound on the Schwarzian), got {sigma!r}")
    return math.pi * math.sqrt(2.0 / sigma)


def _arc(width, n: int) -> float:
    return float(width(n)) if callable(width) else float(width)


def peel_move(theta: np.ndarray, front: bool, width: float) -> np.ndarray | None:
    """One single end move of the construction on the sorted angles ``theta``: the point at the front
    (or the back) is sent to the middle of the arc, its tangent point half way to its neighbour, and the
    rest is re-spread onto an arc of ``width``. Returns the new sorted angles, or ``None`` once the end
    gap has collapsed to rounding (no move can be placed)."""
    p = theta[0] if front else theta[-1]
    gap = theta[1] - theta[0] if front else theta[-1] - theta[-2]
    tangent = p + (0.5 * gap if front else -0.5 * gap)
    if tangent == p or not abs(gap) < abs(p):
        return None
    pole, _ = pole_for_move(p, 0.0, tangent)
    new, _ = block_image(theta[1:] if front else theta[:-1], pole, width)
    return np.sort(new)


def peeled_arc(n: int, width: float, moves: int) -> np.ndarray:
    """``n`` evenly spaced angles on an arc of ``width`` after ``moves`` :func:`peel_move` s, alternately
    from the front and the back (the arc keeps its width). Raises ``ValueError`` if the ends collapse."""
    if not (isinstance(n, int) and isinstance(moves, int) and 0 <= moves < n - 2):
        raise ValueError(f"need integers n and 0 <= moves < n - 2, got n={n!r}, moves={moves!r}")
    theta = np.linspace(-width / 2, width / 2, n)
    for i in range(moves):
        theta = peel_move(theta, i % 2 == 0, width)
        if theta is None:
            raise ValueError(f"the end gaps collapsed to rounding after {i} moves (past Sturm's limit)")
    return theta


def peel_distortion(n: int, width, layers: int, every: int = 100, end_share: float = 0.05) -> list[dict]:
    r"""Peel ``layers`` end points off ``n`` evenly spaced points on an arc, re-spreading after each move.

    ``width`` is the arc width (radians), or a function of the number of points left (the builder's
    :func:`arc_width_for`). Each block sends the end point (alternately the front
    and the back) to the middle of the arc, with its tangent point half way to its neighbour, exactly
    as the builder's single move. Every ``every`` layers it records the mean gap over the outer
    ``end_share`` of the points at each end divided by the mean gap over the middle ``end_share``
    (``measured``; 1 means no distortion) and :func:`predicted_end_ratio` (``predicted``). Once the
    gaps at an end have collapsed to rounding both are recorded as 0.
    Returns a list of dicts ``{"layer", "points", "width", "measured", "predicted"}``.
    """
    if not (isinstance(n, int) and n >= 20 and isinstance(layers, int) and 0 < layers < n - 10):
        raise ValueError(f"need an integer n >= 20 and 0 < layers < n - 10, got n={n!r}, layers={layers!r}")
    w = _arc(width, n)
    theta = np.linspace(-w / 2, w / 2, n)
    widths, counts, out = [w], [n], []
    collapsed = False
    for layer in range(1, layers + 1):
        w = _arc(width, n - layer)
        new = None if collapsed else peel_move(theta, layer % 2 == 1, w)
        if new is None:  # the end gaps have collapsed to rounding
            collapsed = True
            if layer % every == 0:
                out.append({"layer": layer, "points": n - layer, "width": w, "measured": 0.0,
                            "predicted": 0.0})
            continue
        theta = new
        widths.append(w)
        counts.append(len(theta))
        if layer % every == 0:
            predicted = predicted_end_ratio(widths, counts, end_share)
            if out and out[-1]["predicted"] == 0.0:
                predicted = 0.0  # past Sturm's limit the model has collapsed for good
            gaps = np.diff(theta)
            k = max(1, int(end_share * len(gaps)))
            ends = np.r_[gaps[:k], gaps[-k:]].mean()
            mid = gaps[len(gaps) // 2 - k // 2 : len(gaps) // 2 - k // 2 + k].mean()
            out.append({"layer": layer, "points": len(theta), "width": w, "measured": float(ends / mid),
                        "predicted": predicted})
    return out


def schwarzian_budget(widths, counts) -> float:
    r"""The accumulated Schwarzian of the map back to the start, in units of the current arc: :math:`\sigma_L w_L^2`.

    ``widths[j]`` and ``counts[j]`` are the arc width and the number of points after block ``j``
    (``j = 0``: the start); each width-keeping block adds :math:`3/2` in its own coordinates, rescaled to
    the current arc: :math:`\sigma_L w_L^2 = \tfrac32\sum_{j<L} w_j^2 (n_L/n_j)^2`.
    """
    widths = np.asarray(widths, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    if widths.shape != counts.shape or widths.ndim != 1 or len(widths) < 2:
        raise ValueError("widths and counts must be two histories of the same length (at least 2)")
    return 1.5 * float(np.sum(widths[:-1] ** 2 * (counts[-1] / counts[:-1]) ** 2))


def predicted_end_ratio(widths, counts, end_share: float = 0.05) -> float:
    r"""The gap ratio end/middle predicted from the Schwarzian budget after a history of arcs.

    ``widths[j]`` and ``counts[j]`` are the arc width and the number of points after block ``j``
    (``j = 0``: the start); the budget is :func:`schwarzian_budget`, and the ends are taken at
    :math:`x = \pm(1 - \text{end\_share})\,w_L/2`. Returns 0 past Sturm's limit (collapse).
    """
    budget = schwarzian_budget(widths, counts)  # sigma_L * w_L^2
    phase = math.sqrt(budget / 2.0) * (1.0 - end_share) / 2.0  # sqrt(sigma/2) * x_end, x_end in units of w_L
    return math.cos(phase) ** 2 if phase < math.pi / 2 else 0.0


# ---------------------------------------------------------------------------------- the builder's arc


def arc_width_for(n_clusters: int) -> float:
    r"""Width of the arc on which the float64 builder keeps :math:`N` clusters: :math:`\min(0.25, 3/\sqrt N)` radians.

    Short enough that the budget :math:`\sigma_L w_L^2` of the re-spreads stays below :math:`27/4`
    (:func:`schwarzian_budget`), wide enough for float64 levers. (From ``STRAIGHTEN_FROM`` distinct
    samples on, the builder keeps the cap, 0.25, and straightens instead.)
    """
    return min(ARC_CAP, ARC_SCALE / math.sqrt(max(int(n_clusters), 1)))


def straightening_allowance(n_distinct: int, n_classes: int, straighten: bool | None = None) -> int:
    r"""Extra blocks the float64 builder may add to straighten a wide arc: :math:`\lfloor (m' - k)/8 \rfloor`
    when it straightens (``straighten=None``: from ``STRAIGHTEN_FROM`` = 2000 distinct samples on, as
    :func:`~lnbook.capacity.build_float64.build_ln_net` decides), else 0.

    They merge nothing (their pole is inside the circle); the theorem's count :math:`1 + m' - k` is
    about the merging blocks and holds exactly.
    """
    if straighten is None:
        straighten = n_distinct >= STRAIGHTEN_FROM
    if n_classes <= 1 or not straighten:
        return 0
    return (n_distinct - n_classes) // STRAIGHTEN_EVERY


def end_ratios(pos: np.ndarray) -> tuple[float, float]:
    """Mean gap over the outer twentieth of the sorted angles ``pos`` at the front and at the back, each
    divided by the mean gap over the middle twentieth (1: evenly spread; small: squeezed ends)."""
    gaps = np.diff(pos)
    k = max(1, len(gaps) // 20)
    mid = gaps[len(gaps) // 2 - k // 2 : len(gaps) // 2 - k // 2 + k].mean()
    return float(gaps[:k].mean() / mid), float(gaps[-k:].mean() / mid)


def _part_ratios(part: np.ndarray, k: int) -> tuple[float, float]:
    """:func:`end_ratios` from the ``3(k+1)`` points it uses: the first, middle and last ``k + 1``."""
    g = np.diff(part)
    front, mid, back = g[:k], g[k + 1 : 2 * k + 1], g[2 * k + 2 :]
    return float(front.mean() / mid.mean()), float(back.mean() / mid.mean())


def straightening_pole(pos, arc: float):
    r"""The interior pole of a straightening block for clusters at sorted angles ``pos`` on an arc of width ``arc``.

    Scans the pole's distance from the centre (``STRAIGHTEN_R``) and its direction (``STRAIGHTEN_W``
    times the arc width) and keeps the one after which the mean end gaps, front and back, are
    closest to the mean middle gap (:func:`~lnbook.capacity.circle.block_image` with that pole and the same
    width). Returns ``(pole or None if no scanned pole improves, end ratios before, end ratios after)``.
    """
    pos = np.sort(np.asarray(pos, dtype=np.float64))
    if pos.ndim != 1 or len(pos) < 3 or not np.all(np.isfinite(pos)):
        raise ValueError("pos must be a 1-d array of at least 3 finite angles")
    if not np.all(np.diff(pos) > 0):
        raise ValueError("pos must hold distinct angles (merge coinciding clusters first)")
    before = end_ratios(pos)
    best = (max(abs(math.log(r)) for r in before), None, before)
    n = len(pos)
    k = max(1, (n - 1) // 20)
    m0 = (n - 1) // 2 - k // 2
    part = pos[np.r_[0 : k + 1, m0 : m0 + k + 1, n - 1 - k : n]]  # the points that the ratios use (and the two ends)
    for om in STRAIGHTEN_W * arc:
        for R in STRAIGHTEN_R:
            pole = R * unit(float(om))
            new, _ = block_image(part, pole, arc)
            ratios = _part_ratios(new, k)
            bad = max(abs(math.log(r)) for r in ratios)
            if bad < best[0]:
                best = (bad, pole, ratios)
    return best[1], before, best[2]
