r"""The construction of chapter 3's theorem in exact arithmetic: the theorem checked by its own algorithm.

:func:`build_exact_ln_net` runs the algorithm of the proof of ``thm-capacity`` exactly as stated there:
the first layer puts the distinct samples at distinct points of an arc; one **sink** per label; then,
while more clusters than labels are left, one block moves one cluster (an end of the arc that is not a
sink, else the first non-sink from the front, the arc being cut open there) onto the sink of its label,
with a near set of that one cluster, followed by the re-spread. Nothing else: no booking, no companions,
no binary finish. Its depth is therefore exactly :math:`1 + m' - k` (:func:`~lnbook.capacity.nets.layer_bound`).

**Which numbers.** LayerNorm divides by a norm, a square root, and no choice of poles keeps every sample
at a rational point of the circle (a block sends :math:`v` to :math:`A(v - o)/\|A(v-o)\|`, rational only
when that norm is). The construction therefore works in the field of **constructible numbers**: every
coordinate, pole and weight is a :class:`~lnbook.capacity.certified_reals.Real`, an exact formula over the
rationals with square roots, and every decision it takes (which cluster is where, whether the pole sees
only the moved cluster, whether the images keep their order) is a sign certified by interval arithmetic.
Rational numbers are used wherever the proof leaves a choice:

* the first layer's direction is :math:`a = (1, t, t^2, \dots, t^{n-1})` for the smallest integer
  :math:`t \ge 1` that separates the distinct (rational) samples: a point of the moment curve, generic
  because :math:`\langle a, x_i - x_j\rangle` is a non-zero polynomial in :math:`t`;
* the arc is the one between the rational points :math:`(4/5, \mp 3/5)` (slopes :math:`\mp 3/4`, width
  :math:`2\arctan(3/4) \approx 1.287 < \pi/2`): the first layer puts sample :math:`i` at the slope
  :math:`\lambda\langle a, x_i\rangle + \nu \in [-3/4, 3/4]`, and every re-spread maps the two extreme
  image directions onto these two points;
* the tangent point :math:`T` of every move is a rational point of the circle, :math:`T = ((1 - r^2), 2r)/(1 + r^2)`
  with :math:`r` the simplest rational strictly inside an interval of the half-angle parameter given in
  closed form (:func:`_tangent_parameter`, the *choice of T* in the proof of ``thm-capacity``): its width is
  :math:`\min(1, \min_c \beta_c D/2)`, computed once per move; there is no search.

The pole is then :math:`o = p + \beta(p - q)` with :math:`\beta = (1 - \langle p, T\rangle)/\langle p - q, T\rangle`:
on the tangent at :math:`T` and on the line :math:`pq`, so the moved cluster lands on its sink *exactly*
(lemma ``lem-merge``; the landing is an algebraic identity, not a rounding). :func:`verify_exact_ln_net`
then runs every sample through the net's real weights (every ``Linear``'s matrix and bias, :meth:`ExactLNNet.weights`)
and LayerNorm's mean, variance and square root, all exact, without the circle formulas of the construction,
and certifies that it is classified correctly and that all samples of a label end at one point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import torch

from contextlib import contextmanager

from lnbook.capacity.certified_reals import MAX_PREC, START_PREC, Real, Undecided, as_real, rational_between
from lnbook.capacity.circle import SQRT3, block_weights, linear_module, ln_module
from lnbook.capacity.nets import ConstructionError, LNNet, layer_bound
from lnbook.core.geometry import plane_basis
from lnbook.util.validation import check_labelled_samples

__all__ = [
    "ABSENT_SCORE",
    "ARC_SLOPE",
    "ExactBlock",
    "ExactLNNet",
    "build_exact_ln_net",
    "verify_exact_ln_net",
    "exact_pole",
    "to_float64_net",
]

ARC_SLOPE = Fraction(3, 4)  # the arc's ends are the rational points (4/5, -3/5) and (4/5, 3/5)
_LO = (Fraction(4, 5), Fraction(-3, 5))
_HI = (Fraction(4, 5), Fraction(3, 5))
ABSENT_SCORE = Fraction(-4, 3)  # the unit-circle score of a label that does not occur (below every -1 <= <zeta, v>)
COINCIDE_PREC = 512  # bits at which "all samples of a label end at one point" is checked


@dataclass(frozen=True)
class ExactBlock:
    r"""One block ``Linear(3,3) -> LN`` of the exact net, on the unit circle: :math:`v \mapsto A(v - o)/\|A(v - o)\|`.

    ``pole`` is :math:`o` and ``linear`` the rows of :math:`A` (exact numbers); ``tangent`` the rational
    half-angle parameter :math:`r` of the tangent point; ``moved`` the cluster that lands on its sink
    ``onto``; ``end`` is ``"front"``, ``"back"`` or ``"inner"``. Clusters are named by their smallest
    sample index.
    """

    pole: tuple
    linear: tuple
    tangent: Fraction
    moved: int
    onto: int
    end: str


@dataclass
class ExactLNNet:
    """The exact width-3 LN-Net: first layer, blocks and read-out, all in exact numbers.

    The first layer sends :math:`x` to the plane point :math:`(1, \\lambda\\langle a, x\\rangle + \\nu)`
    (``direction`` :math:`a`, ``scale`` :math:`\\lambda`, ``offset`` :math:`\\nu`, rationals); LN puts it on
    the circle. The read-out scores label ``j`` by :math:`\\langle \\zeta_j, v\\rangle` (``class_points``;
    labels that do not occur score ``ABSENT_SCORE`` = -4/3, below every :math:`\\langle \\zeta_j, v\\rangle \\ge -1`;
    the real read-out of :meth:`weights` gives 3 times these scores).
    """

    direction: tuple
    scale: Fraction
    offset: Fraction
    blocks: list
    class_points: dict
    sinks: dict
    n_distinct: int
    n_classes: int
    n_logits: int
    members: dict = field(default_factory=dict)

    @property
    def depth(self) -> int:
        """Number of LN layers: the first one and one per block."""
        return 1 + len(self.blocks)

    @property
    def bound(self) -> int:
        """The theorem's :math:`1 + m' - k`."""
        return layer_bound(self.n_distinct, self.n_classes)

    def first_point(self, x) -> tuple:
        """The exact circle point of a sample after the first LN layer."""
        z = sum((a * xi for a, xi in zip(self.direction, _exact_row(x))), Fraction(0))
        return _slope_point(self.scale * z + self.offset)

    def forward(self, x) -> tuple:
        """The exact circle point of a sample after the last LN layer, computed from the weights alone."""
        v = self.first_point(x)
        for block in self.blocks:
            v = _apply(block, v)
        return v

    def weights(self) -> list:
        r"""The net's real weights, exactly: ``[(W_1, b_1), ..., (W_D, b_D), (W_out, b_out)]`` as nested tuples of
        :class:`~lnbook.capacity.certified_reals.Real` (what :func:`to_float64_net` rounds to float64).

        :math:`W_1 = \lambda\, E_{:,2} a^\top`, :math:`b_1 = E_{:,1} + \nu E_{:,2}`; each block
        :math:`W = E (A/\sqrt3) E^\top`, :math:`b = -E A o` (lemma ``lem-block-projection``); the read-out has the
        row :math:`\sqrt3\, E\zeta_j` and bias 0 for a label that occurs, a zero row and bias :math:`3\cdot` ``ABSENT_SCORE`` = -4
        otherwise (its logits are 3 times those of :meth:`logits`, the LN output having norm :math:`\sqrt3`).
        """
        E = _exact_basis()
        layers = [(tuple(tuple(E[i][1] * (self.scale * a) for a in self.direction) for i in range(3)),
                   tuple(E[i][0] + E[i][1] * self.offset for i in range(3)))]
        s3 = Real(3).sqrt()
        for block in self.blocks:
            A, o = block.linear, block.pole
            EA = [[E[i][0] * A[0][l] + E[i][1] * A[1][l] for l in range(2)] for i in range(3)]
            W = tuple(tuple((EA[i][0] * E[j][0] + EA[i][1] * E[j][1]) / s3 for j in range(3)) for i in range(3))
            b = tuple(-(EA[i][0] * o[0] + EA[i][1] * o[1]) for i in range(3))
            layers.append((W, b))
        zero = (Real(0), Real(0), Real(0))
        rows = tuple(tuple(s3 * (E[i][0] * self.class_points[j][0] + E[i][1] * self.class_points[j][1]) for i in range(3))
                     if j in self.class_points else zero for j in range(self.n_logits))
        layers.append((rows, tuple(Real(0) if j in self.class_points else Real(3 * ABSENT_SCORE) for j in range(self.n_logits))))
        return layers

    def forward_through_weights(self, x, weights: list | None = None) -> tuple:
        r"""The exact output of the last LN layer in :math:`\R^3` and the exact logits, computed by the real
        ``Linear`` and ``LayerNorm`` (:math:`\varepsilon = 0`: mean, variance, square root) from :meth:`weights`,
        without the circle formulas of the construction (``weights``: :meth:`weights`, computed once by the caller)."""
        z = tuple(as_real(v) for v in _exact_row(x))
        *layers, (W_out, b_out) = self.weights() if weights is None else weights
        for W, b in layers:
            z = _layer_norm(_affine(W, b, z))
        return z, _affine(W_out, b_out, z)

    def layer_angles(self, X) -> np.ndarray:
        """Every sample's angle (float, radians) after each LN layer: shape ``(depth, m)`` (for pictures)."""
        rows = [_exact_row(x) for x in (np.asarray(X, dtype=object).reshape(len(X), -1))]
        out = np.empty((self.depth, len(rows)))
        for i, x in enumerate(rows):
            v = self.first_point(x)
            for layer in range(self.depth):
                if layer:
                    v = _apply(self.blocks[layer - 1], v)
                out[layer, i] = math.atan2(float(v[1]), float(v[0]))
        return out

    def logits(self, x) -> list:
        """The ``n_logits`` exact logits of a sample on the unit circle (a third of the real read-out's)."""
        v = self.forward(x)
        return [_dot(self.class_points[j], v) if j in self.class_points else Real(ABSENT_SCORE) for j in range(self.n_logits)]


def _exact_row(x) -> tuple:
    return tuple(Fraction(v) if isinstance(v, (int, Fraction)) else Fraction(float(v)) for v in np.ravel(np.asarray(x, dtype=object)))


def _exact_basis() -> tuple:
    r"""The rows of :math:`E` (``lnbook.core.geometry.plane_basis``) as exact numbers: :math:`(1,-1,0)/\sqrt2`, :math:`(1,1,-2)/\sqrt6` as columns."""
    r2, r6 = 1 / Real(2).sqrt(), 1 / Real(6).sqrt()
    return ((r2, r6), (-r2, r6), (Real(0), -2 * r6))


def _affine(W, b, z) -> tuple:
    return tuple(sum((w * zj for w, zj in zip(row, z)), bi) for row, bi in zip(W, b))


def _layer_norm(z) -> tuple:
    r"""PyTorch's ``LayerNorm`` with :math:`\varepsilon = 0` and no affine part, exactly: :math:`(z - \mu)/\sigma`,
    :math:`\sigma^2` the biased variance."""
    mu = (z[0] + z[1] + z[2]) / 3
    c = tuple(zi - mu for zi in z)
    # the square root node is made without certifying var > 0 first (that costs a sign per layer): a variance
    # of 0 would give unbounded enclosures downstream, so every later sign would stay Undecided, never wrong
    sd = Real(_op="sqrt", _args=((c[0] * c[0] + c[1] * c[1] + c[2] * c[2]) / 3,))
    return tuple(ci / sd for ci in c)


def _dot(u, v) -> Real:
    return as_real(u[0]) * v[0] + as_real(u[1]) * v[1]


def _slope_point(s: Fraction) -> tuple:
    """The unit vector of slope ``s`` in the right half-plane, :math:`(1, s)/\\sqrt{1 + s^2}`, exactly."""
    r = Real(1 + s * s).sqrt()
    return (1 / r, Real(s) / r)


def _normalise(w) -> tuple:
    n = (w[0] * w[0] + w[1] * w[1]).sqrt()
    return (w[0] / n, w[1] / n)


def _apply(block: ExactBlock, v) -> tuple:
    (a, b), (c, d) = block.linear
    dx, dy = v[0] - block.pole[0], v[1] - block.pole[1]
    return _normalise((a * dx + b * dy, c * dx + d * dy))


def _half_angle(v) -> Real:
    """The half-angle (stereographic) parameter :math:`y/(1 + x)` of a unit vector: increasing with the angle."""
    return v[1] / (1 + v[0])


def _generic_direction(rows: list) -> tuple:
    """:math:`(1, t, \\dots, t^{n-1})` for the smallest integer :math:`t \\ge 1` giving distinct projections."""
    n = len(rows[0])
    for t in range(1, 10 * len(rows) ** 2 * n + 2):  # at most (m' choose 2)(n - 1) values of t fail
        a = tuple(Fraction(t) ** k for k in range(n))
        z = sorted(sum((ak * xk for ak, xk in zip(a, r)), Fraction(0)) for r in rows)
        if all(z0 != z1 for z0, z1 in zip(z, z[1:])):
            return a
    raise AssertionError("no separating direction on the moment curve (impossible for distinct samples)")


def _exact_samples(X, y):
    """Check ``X`` and ``y`` (as :func:`~lnbook.util.validation.check_labelled_samples` does) and keep ``X`` exact."""
    _, y = check_labelled_samples(np.asarray(X, dtype=np.float64), y, what="build_exact_ln_net")
    X_obj = np.asarray(X, dtype=object)
    X_obj = X_obj.reshape(len(y), -1) if X_obj.ndim == 1 else X_obj
    return [_exact_row(row) for row in X_obj], y


def build_exact_ln_net(X, y) -> ExactLNNet:
    r"""Run the proof's algorithm of ``thm-capacity`` in exact arithmetic; returns an :class:`ExactLNNet`.

    ``X``: ``(m, n)`` samples, ints, ``Fraction`` s or floats (taken at their exact binary value);
    ``y``: integer labels. Raises ``ValueError`` like :func:`~lnbook.capacity.build_float64.build_ln_net` for bad
    input and for identical samples with different labels. The depth is :math:`1 + m' - k` exactly; a
    :class:`~lnbook.capacity.nets.ConstructionError` would mean that a step of the proof failed (every step
    is certified, and none has been seen to fail). **Precision limit:** every sign is decided from enclosures of
    at most ``MAX_PREC`` (16384) bits; samples much closer together than their spread (relative gaps of the
    first projection below about :math:`2^{-2300}`; one-dimensional float64 samples have relative gaps of at least
    about :math:`2^{-2100}`) can need more, and then this (or :func:`verify_exact_ln_net`) raises
    :class:`~lnbook.capacity.certified_reals.Undecided` with a message that says so; it never returns a net it has
    not certified.
    """
    rows, y = _exact_samples(X, y)
    with _precision_limit(rows):
        return _build(rows, y)


def _relative_gap_log2(rows: list) -> float:
    """:math:`\\log_2` of the smallest gap of the first projection divided by its range (0 for one cluster)."""
    distinct = list(dict.fromkeys(rows))
    if len(distinct) < 2:
        return 0.0
    a = _generic_direction(distinct)
    z = sorted(sum((ak * xk for ak, xk in zip(a, r)), Fraction(0)) for r in distinct)
    gap = min(z1 - z0 for z0, z1 in zip(z, z[1:])) / (z[-1] - z[0])
    return math.log2(gap.numerator) - math.log2(gap.denominator)


@contextmanager
def _precision_limit(rows: list):
    """Turn an :class:`Undecided` sign into one that names the cause: samples too close for ``MAX_PREC`` bits."""
    try:
        yield
    except Undecided as err:
        raise Undecided(
            f"the exact construction decides signs to {MAX_PREC} bits, and this input needs more: its samples' smallest "
            f"relative gap (first projection) is 2^{_relative_gap_log2(rows):.0f}; gaps below about 2^-2300 can exceed "
            "the limit (relative gaps do not change under rescaling): merge samples that close, or move them apart"
        ) from err


def _build(rows: list, y) -> ExactLNNet:
    leader, members = {}, {}
    for i, r in enumerate(rows):
        c = leader.setdefault(r, i)
        if y[c] != y[i]:
            raise ValueError(
                f"samples {c} and {i} are identical but have different labels ({int(y[c])} and {int(y[i])}); "
                "no function, hence no network, can separate them: remove or relabel one of them"
            )
        members.setdefault(c, []).append(i)
    clusters = list(members)
    classes = sorted({int(v) for v in y})
    k, K = len(classes), max(2, int(y.max()) + 1)
    a = _generic_direction([rows[c] for c in clusters])
    z = {c: sum((ak * xk for ak, xk in zip(a, rows[c])), Fraction(0)) for c in clusters}
    lo, hi = min(z.values()), max(z.values())
    scale = 2 * ARC_SLOPE / (hi - lo) if hi > lo else Fraction(1)
    offset = -ARC_SLOPE - scale * lo if hi > lo else Fraction(0)
    slope = {c: scale * z[c] + offset for c in clusters}
    point = {c: _slope_point(slope[c]) for c in clusters}
    order = sorted(clusters, key=lambda c: slope[c])  # the angular order, exact (rational slopes)
    net = ExactLNNet(a, scale, offset, [], {}, {}, len(clusters), k, K, {c: list(v) for c, v in members.items()})
    if k == 1:
        net.class_points = {classes[0]: (Fraction(0), Fraction(0))}  # a constant read-out
        return net
    for c in order:  # one sink per label: its cluster nearest to the middle of the arc
        lab = int(y[c])
        if lab not in net.sinks or (abs(slope[c]), slope[c]) < (abs(slope[net.sinks[lab]]), slope[net.sinks[lab]]):
            net.sinks[lab] = c
    sinks = set(net.sinks.values())
    while len(order) > k:
        if order[0] not in sinks:
            i, end = 0, "front"
        elif order[-1] not in sinks:
            i, end = len(order) - 1, "back"
        else:
            i, end = next(j for j, c in enumerate(order) if c not in sinks), "inner"
        p = order[i]
        block, point = _move(order, point, i, net.sinks[int(y[p])], end, len(net.blocks) + 2)
        net.blocks.append(block)
        net.members[block.onto] += net.members.pop(p)
        order = order[i + 1 :] + order[:i]  # the arc cut open at p (for an end move: the rest, in order)
    net.class_points = {lab: point[c] for lab, c in net.sinks.items()}
    return net


def exact_pole(p, q, t) -> tuple:
    r"""The pole :math:`o = p + \beta(p - q)`, :math:`\beta = (1 - \langle p, t\rangle)/\langle p - q, t\rangle`.

    For unit vectors :math:`p \ne q` and :math:`t` it lies on the tangent at :math:`t` (:math:`\langle o,
    t\rangle = 1`) and on the line :math:`pq`, beyond :math:`p` when :math:`\beta > 0` (then :math:`p - o` and
    :math:`q - o` are positive multiples of :math:`q - p`: the block sends :math:`p` onto :math:`q`). Pure
    arithmetic: works on exact numbers, floats and sympy expressions alike.
    """
    beta = (1 - (t[0] * p[0] + t[1] * p[1])) / (t[0] * (p[0] - q[0]) + t[1] * (p[1] - q[1]))
    return (p[0] + beta * (p[0] - q[0]), p[1] + beta * (p[1] - q[1]))


def _positive_lower_bound(x: Real) -> Fraction:
    """A rational ``0 < l <= x`` for a number ``x`` certified positive (enclosures refined until they exclude 0)."""
    if not x.sign() > 0:
        raise ValueError("_positive_lower_bound needs a positive number")
    if x.is_rational:
        return x.q
    prec = max(START_PREC, x._prec)
    while True:  # x > 0 is certified, so some finite precision gives a positive lower end
        try:
            lo = x.bounds(prec)[0]
        except OverflowError:
            lo = Fraction(0)
        if lo > 0:
            return lo
        prec *= 2


def _tangent_parameter(order: list, point: dict, p, P, Q, NB, step: int) -> Fraction:
    r"""The half-angle parameter :math:`r` of the tangent point of the move of ``p`` onto ``Q``, in closed form.

    ``NB`` is ``p``'s neighbour toward the sink, ``step`` the direction (+1: increasing angle). With
    :math:`M` the point a quarter of the way from :math:`p` to the neighbour, :math:`D = \langle p - q, M\rangle > 0`
    and, for every other cluster :math:`c` with :math:`g_c = \langle c, p\rangle - \langle c, q\rangle > 0`,
    :math:`\beta_c = (1 - \langle c, p\rangle)/g_c > 0`, any :math:`T` with half-angle parameter strictly between
    :math:`t_p` and :math:`t_p \pm \delta` and before :math:`M` gives a pole that sees :math:`p` alone, where
    :math:`\delta = \min(L, 1)` and :math:`L \le \min_c \beta_c D / 2` (the *choice of T* in the proof of
    ``thm-capacity``): then :math:`\beta(T) = (1 - \langle p, T\rangle)/\langle p - q, T\rangle \le \|p - T\|^2/(2D)
    < 2\delta^2/D \le \min_c \beta_c`. :math:`r` is the simplest rational in that interval; no search, one
    certified sign per cluster.
    """
    t_p = _half_angle(P)
    half = _normalise((P[0] + NB[0], P[1] + NB[1]))  # the bisector of p and the neighbour
    M = _normalise((P[0] + half[0], P[1] + half[1]))  # a quarter of the way: strictly before the bisector of p, q
    D = _dot(M, (P[0] - Q[0], P[1] - Q[1]))
    bound = Fraction(1)
    for c in order:
        if c == p:
            continue
        C = point[c]
        g = _dot(C, P) - _dot(C, Q)
        if g.sign() > 0:
            bound = min(bound, _positive_lower_bound((1 - _dot(C, P)) * D / (2 * g)))
    gap = _positive_lower_bound(step * (_half_angle(M) - t_p))
    return _parameter_near(t_p, step, _choose_delta(bound, gap))


def _choose_delta(bound: Fraction, gap: Fraction) -> Fraction:
    """The width of the interval of ``r``: the PBA bound :math:`\\min(1, \\min_c \\beta_c D/2)` and the room before ``M``."""
    return min(bound, gap)


def _parameter_near(t_p: Real, step: int, delta: Fraction) -> Fraction:
    """The simplest rational strictly between :math:`t_p` and :math:`t_p + \\text{step}\\cdot\\delta`."""
    return rational_between(t_p, t_p + delta) if step > 0 else rational_between(t_p - delta, t_p)


def _move(order: list, point: dict, i: int, q: int, end: str, layer: int):
    """One block: cluster ``order[i]`` onto its sink ``q``; returns the block and the new points of the clusters."""
    p = order[i]
    P, Q = point[p], point[q]
    step = 1 if order.index(q) > i else -1
    r = _tangent_parameter(order, point, p, P, Q, point[order[i + step]], step)
    T = ((1 - r * r) / (1 + r * r), 2 * r / (1 + r * r))
    pole = exact_pole(P, Q, T)
    # certify what the closed form guarantees (PBA): the pole sees p and no other cluster
    if not ((_dot(P, pole) - 1).sign() > 0 and all((_dot(point[c], pole) - 1).sign() < 0 for c in order if c != p)):
        raise ConstructionError(layer, "the pole does not see the moved cluster alone (contradicts the choice of T in the proof of thm-capacity)")
    new_order = order[i + 1 :] + order[:i]
    # the two extreme image directions, as unit vectors (both ends of the arc treated alike)
    e0 = _normalise((point[new_order[0]][0] - pole[0], point[new_order[0]][1] - pole[1]))
    e1 = _normalise((point[new_order[-1]][0] - pole[0], point[new_order[-1]][1] - pole[1]))
    det = e0[0] * e1[1] - e1[0] * e0[1]
    if det.sign() == 0:
        raise ConstructionError(layer, "the extreme image directions are parallel")
    inv = ((e1[1] / det, -e1[0] / det), (-e0[1] / det, e0[0] / det))  # [e0 e1]^(-1)
    A = tuple(
        tuple(_LO[row] * inv[0][col] + _HI[row] * inv[1][col] for col in range(2)) for row in range(2)
    )  # the re-spread: e0 -> (4/5, -3/5), e1 -> (4/5, 3/5)
    block = ExactBlock((pole[0], pole[1]), A, r, p, q, end)
    new = {new_order[0]: (Real(_LO[0]), Real(_LO[1])), new_order[-1]: (Real(_HI[0]), Real(_HI[1]))}
    for c in new_order[1:-1]:
        new[c] = _apply(block, point[c])
    for c0, c1 in zip(new_order, new_order[1:]):  # the images keep their order, strictly: no two clusters meet
        if not (new[c0][0] * new[c1][1] - new[c0][1] * new[c1][0]).sign() > 0:
            raise ConstructionError(layer, f"clusters {c0} and {c1} do not keep their order")
    return block, new


def verify_exact_ln_net(net: ExactLNNet, X, y, *, through: str = "weights") -> dict:
    r"""Run every sample through the exact net's real weights and certify the theorem's claims.

    The forward is :meth:`ExactLNNet.forward_through_weights`: the weight matrices and biases of every
    ``Linear`` (:meth:`ExactLNNet.weights`, what :func:`to_float64_net` rounds) and LayerNorm's mean,
    variance and square root, all exact; the circle formulas the construction used are not called.
    ``through="circle"`` runs the cheaper circle formula of lemma ``lem-block-projection`` instead
    (:meth:`ExactLNNet.forward`, about half the cost; used by the lab's exhaustive sweep, where the tests have the
    real weights). Returns ``{"errors", "depth", "bound", "margin", "coincide", "spread"}``: the number of samples whose
    certified ``argmax`` is not their label, the depth and :math:`1 + m' - k`, a certified lower bound, within 1%,
    on the smallest logit margin (float; in the read-out on the unit circle, logits divided by 3), whether every
    sample's final point is within the enclosure of its label's point :math:`\sqrt3 E\zeta_j` at
    ``COINCIDE_PREC`` bits (exactly equal, as the proof says; a sample certified away from it makes this
    ``False``), and the largest certified upper bound on that distance squared (unit-circle scale). Raises
    :class:`~lnbook.capacity.certified_reals.Undecided`, saying why, where a sign needs more than ``MAX_PREC`` bits
    (samples closer than about :math:`2^{-2300}` of their spread; see :func:`build_exact_ln_net`).
    """
    if through not in ("weights", "circle"):
        raise ValueError(f'through must be "weights" or "circle", got {through!r}')
    rows, y = _exact_samples(X, y)
    with _precision_limit(rows):
        return _verify(net, rows, y, through)


def _verify(net: ExactLNNet, rows: list, y, through: str) -> dict:
    weights = net.weights() if through == "weights" else None
    W_out = weights[-1][0] if weights else None
    errors, margin, coincide, spread = 0, float("inf"), True, 0.0
    for x, lab in zip(rows, y):
        lab = int(lab)
        if weights:
            z, logits = net.forward_through_weights(x, weights)
        else:  # on the unit circle, logits scaled to the real read-out's (times 3) to share the code below
            z = net.forward(x)
            logits = [3 * (_dot(net.class_points[j], z) if j in net.class_points else Real(ABSENT_SCORE)) for j in range(net.n_logits)]
        wins = True
        for j in range(net.n_logits):
            if j == lab:
                continue
            diff = (logits[lab] - logits[j]) / 3
            if diff.sign() <= 0:
                wins = False
            else:
                lo, hi = diff.bounds()
                prec = max(START_PREC, diff._prec)
                while lo < hi * Fraction(99, 100):  # a lower bound within 1% of the margin
                    prec *= 2
                    lo, hi = diff.bounds(prec)
                margin = min(margin, float(lo))
        errors += not wins
        if net.n_classes >= 2:
            target = W_out[lab] if weights else net.class_points[lab]
            d2 = sum(((zi - wi) * (zi - wi) for zi, wi in zip(z, target)), Real(0)) / (3 if weights else 1)
            lo_d2, hi_d2 = d2.bounds(max(COINCIDE_PREC, 2 * d2._prec))
            coincide &= lo_d2 <= 0
            spread = max(spread, float(hi_d2))
    return {"errors": errors, "depth": net.depth, "bound": net.bound, "margin": margin, "coincide": coincide,
            "spread": spread}


def to_float64_net(net: ExactLNNet) -> LNNet:
    """The exact net's weights rounded to float64, as a ``torch`` module (``Linear(n,3) -> LN -> ... -> Linear(3,K)``)."""
    E = plane_basis().cpu().numpy()
    a = np.array([float(v) for v in net.direction]) * float(net.scale)
    modules = [linear_module(torch.from_numpy(np.outer(E[:, 1], a)), torch.from_numpy(E[:, 0] + E[:, 1] * float(net.offset))),
               ln_module()]
    for block in net.blocks:
        A = np.array([[float(v) for v in row] for row in block.linear])
        W, b = block_weights(A, np.array([float(v) for v in block.pole]))
        modules += [linear_module(W, b), ln_module()]
    W_out = torch.zeros(net.n_logits, 3, dtype=torch.float64)
    b_out = torch.full((net.n_logits,), float(3 * ABSENT_SCORE), dtype=torch.float64)
    for lab, zeta in net.class_points.items():
        W_out[lab] = torch.from_numpy(SQRT3 * (E @ np.array([float(zeta[0]), float(zeta[1])])))
        b_out[lab] = 0.0
    out = LNNet(*modules, linear_module(W_out, b_out))
    out.n_ln_layers, out.n_classes, out.n_distinct = net.depth, net.n_classes, net.n_distinct
    return out
