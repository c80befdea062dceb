r"""The float64 landing planner of the width-3 LN-Net builder (chapter 3 and its float64 appendix).

In exact arithmetic every move of the construction lands the moved cluster exactly on the sink of its
label. In float64 a block computes :math:`A(v - o)` from a point known to about
:math:`\epsilon_{\mathrm{mach}}` and a pole at distance :math:`s` (the **lever**) from the moved point:
the landing is off by about :math:`\kappa(A)\,\epsilon_{\mathrm{mach}}/s`. The planner chooses, before
every block, a move whose landing is precise compared with the **room** of its target (the distance
from the sink to the nearest sample of another label):

* candidate moves: both ends of the arc (a cluster from inside only when both ends are sinks), near sets
  of 1 to ``NEAR_MAX`` clusters (the moved end and **companions**, which are folded across the tangent
  point into the far arc), ``TANGENTS`` tangent points each, and the first companion also aimed at chosen
  gaps or at its own sink (a **pair move**);
* each candidate is judged **in the image** (where every companion lands after the block) and ranked
  (:meth:`LandingPlanner.score`): precise (estimated landing error below ``1/(2 SAFE)`` of the room),
  comfortably precise (``COMFORT``), companions keep out of another label's sink's room, no gap below
  ``CROWD`` of the median gap, the end with more clusters left, companions land beyond the first
  ``DEEP`` far clusters, the smallest distance between classes kept, fewer companions, a longer lever.

The builder (:mod:`lnbook.capacity.build_float64`) then builds the best candidates in order and keeps the first
whose samples land where predicted in the net's own float64 output. :func:`landing_margin_estimate` is
the margin law of the appendix for a single move on an evenly filled arc.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lnbook.capacity.circle import (
    block_image,
    line_meet,
    pole_for_move,
    poles_for_move,
    sample_separation,
    second_hits,
    unit,
)

__all__ = [
    "MACHINE_EPS",
    "LANDING_EPS",
    "SAFE",
    "Snapshot",
    "Candidate",
    "choose_sinks",
    "is_clean",
    "LandingPlanner",
    "landing_margin_estimate",
]

MACHINE_EPS = float(np.finfo(np.float64).eps)  # 2^-52, the float64 machine epsilon
LANDING_EPS = 2.2e-16  # landing error of a move with lever s: about LANDING_EPS * cond(A) / s (measured)
COND = 3.0  # cond(A) of an end move is about 2; the estimate uses 3
SAFE = 2.5  # a landing is precise if its estimated error is below 1/(2 SAFE) of the room around its target
COMFORT = 10.0  # ... and comfortably precise above this ratio
CROWD = 0.3  # a move should create no gap below CROWD x the median gap between clusters
NEAR_MAX = 10  # at most this many clusters seen by the pole (the moved end and its companions)
TANGENTS = 16  # tangent points scanned per near set
SQUEEZE = 0.55  # the tangent point lies at most this far into the gap after the near set
KEEP = 3  # best candidates kept from each scan
DEEP = 5  # companions preferably land beyond this many far clusters from the end (not in the room next to it)
_SCAN_1 = np.geomspace(0.03, 1.0, TANGENTS)  # tangent points for a single move (share of the room)
_SCAN_J = np.geomspace(1e-6, 1.0, TANGENTS)  # ... and with companions (share of the gap after the near set)


def landing_margin_estimate(n_clusters: int, width: float, cond: float = 2.0) -> float:
    r"""The landing margin of a single end move on an arc of ``width`` evenly filled with ``n_clusters`` clusters.

    The gap is :math:`\gamma = w/N`, the sink sits in the middle (:math:`\Delta = w/2` away), the tangent
    point half way into the gap (:math:`\tau = \gamma/2`): the lever is :math:`s \approx \tau^2/\Delta
    = \gamma^2/(4\Delta)`, the landing error :math:`\kappa\,\epsilon_{\mathrm{mach}}/s`, the room
    :math:`\gamma`, and the margin (room over twice the error, as the planner scores it)

    .. math:: \frac{\gamma\, s}{2\kappa\,\epsilon_{\mathrm{mach}}} \approx \frac{w^2}{4\kappa\,\epsilon_{\mathrm{mach}} N^3}.

    >>> round(landing_margin_estimate(1000, 0.25))  # a 0.25-rad arc of 1000 clusters, kappa = 2
    35184
    """
    if not (isinstance(n_clusters, int) and n_clusters >= 2 and width > 0 and cond > 0):
        raise ValueError("need an integer n_clusters >= 2, a positive width and a positive cond")
    return width**2 / (4.0 * cond * MACHINE_EPS * n_clusters**3)


@dataclass
class Snapshot:
    """The clusters before a block, in angular order."""

    order: np.ndarray  # cluster names (leaders) in angular order
    pos: np.ndarray  # their angles
    lab: np.ndarray  # their labels
    sep: float  # smallest gap between neighbouring clusters of different labels
    medg: float  # median gap between neighbouring clusters
    sink_at: list  # positions of the sinks in ``order`` (sorted)
    zones: dict  # sink name -> distance to the nearest cluster of another label
    by_label: dict  # label -> angles of its clusters (sorted)
    hull: tuple  # the smallest and the largest sink angle
    lo_edge: np.ndarray  # smallest angle of a member of each cluster (in ``order``)
    hi_edge: np.ndarray  # largest


@dataclass
class Candidate:
    """One scored move: its rank (compared as a tuple, larger first), the moved cluster, its sink, the pole."""

    rank: tuple
    end: str
    p: int  # the moved cluster
    q: int  # its sink
    pole: np.ndarray
    lever: float
    near: list  # the clusters the pole sees, p first
    pair: tuple | None  # (c, sink of c) when a companion lands on its own sink
    fraction: float
    margin: float


def choose_sinks(snap: Snapshot) -> dict:
    """One **sink** cluster per label; every other cluster is moved onto the sink of its label, once.

    Two labels: the two clusters on either side of one boundary between labels in the middle half
    of the arc, the boundary whose sinks keep the widest distance to the other label (on both
    sides and across the boundary). More labels: inside the shortest run of consecutive clusters
    that holds every label, for each label its cluster with the widest gaps to its neighbours.
    """
    order, pos, labs = snap.order, snap.pos, snap.lab
    n = len(order)
    classes = sorted(set(labs.tolist()))
    if len(classes) == 2:
        change = np.nonzero(labs[1:] != labs[:-1])[0]  # boundary i: between clusters i and i + 1
        starts = np.r_[0, change + 1]  # first cluster of each run
        ends = np.r_[change, n - 1]  # last cluster of each run
        run_of = np.repeat(np.arange(len(starts)), ends - starts + 1)

        def reach(i, step):  # distance from cluster i to the nearest cluster of the other label that way
            r = run_of[i]
            j = starts[r] - 1 if step < 0 else ends[r] + 1
            return abs(pos[j] - pos[i]) if 0 <= j < n else math.inf

        middle = [i for i in change if n // 4 <= i <= (3 * n) // 4] or list(change)
        best = max(middle, key=lambda i: min(pos[i + 1] - pos[i], reach(i, -1), reach(i + 1, +1)))
        return {int(labs[best]): int(order[best]), int(labs[best + 1]): int(order[best + 1])}
    # shortest window holding every label (two pointers)
    need, have, lo, win = len(classes), {}, 0, (0, n - 1)
    for hi in range(n):
        have[labs[hi]] = have.get(labs[hi], 0) + 1
        while len(have) == need:
            if hi - lo < win[1] - win[0]:
                win = (lo, hi)
            have[labs[lo]] -= 1
            if not have[labs[lo]]:
                del have[labs[lo]]
            lo += 1
    gaps = np.diff(pos)
    sinks = {}
    for i in range(win[0], win[1] + 1):
        room = min(gaps[i - 1] if i > 0 else math.inf, gaps[i] if i < n - 1 else math.inf)
        if labs[i] not in sinks or room > sinks[labs[i]][0]:
            sinks[labs[i]] = (room, order[i])
    return {int(lab): int(c) for lab, (room, c) in sinks.items()}


def is_clean(c: Candidate) -> bool:
    """Precise, comfortably so, keeps the sinks' room, no crowding, companions deep, classes kept apart."""
    return all(c.rank[:4]) and all(c.rank[5:7])


class LandingPlanner:
    """Candidate moves of the float64 builder, scored before any block is built.

    A base class of the builder: it reads the builder's state, ``y`` (labels), ``theta`` (every sample's
    current angle), ``cid`` (sample -> cluster name), ``sinks`` (label -> sink cluster), ``spread(c)``
    (angular spread of cluster ``c``) and ``width(n)`` (the arc kept for ``n`` clusters).
    """

    # -- candidate moves -----------------------------------------------------------------------

    def end_candidates(self, snap: Snapshot, end: str, heavy: bool) -> list:
        """Moves of the cluster at one end of the arc onto its sink, with 0 to NEAR_MAX - 1 companions."""
        order, pos = snap.order, snap.pos
        n = len(order)
        idx = np.arange(n) if end == "front" else np.arange(n - 1, -1, -1)
        p = int(order[idx[0]])
        sink_ids = set(self.sinks.values())
        if p in sink_ids:
            return []
        q = self.sinks[int(self.y[p])]
        tp, tq = float(pos[idx[0]]), float(self.theta[q])
        sgn = 1.0 if tq > tp else -1.0
        half = abs(tq - tp) / 2
        J = min(NEAR_MAX, n - 1)
        edge = snap.lo_edge if end == "front" else snap.hi_edge  # the member of each cluster nearest to this end
        dist = np.abs(edge[idx[: J + 1]] - tp)
        dist[0] = 0.0
        near_max = 1  # companions: movable single samples (or identical ones), never a sink
        while near_max < J and int(order[idx[near_max]]) not in sink_ids and self.spread(int(order[idx[near_max]])) == 0.0:
            near_max += 1
        base = dict(snap=snap, end=end, idx=idx, p=p, q=q, heavy=heavy, spread_p=self.spread(p))
        out = []
        for j in range(1, near_max + 1):
            lo, first_far = float(dist[j - 1]), float(dist[j])
            hi = min(lo + SQUEEZE * (first_far - lo), 0.98 * half)
            if not hi > lo:
                break
            taus = hi * _SCAN_1 if j == 1 else lo + (hi - lo) * _SCAN_J
            O, s = poles_for_move(tp, tq, tp + sgn * taus)
            out += self.score(O, s, j, (taus - lo) / (first_far - lo), **base)
            if any(is_clean(c) for c in out):  # a clean move: more companions cannot rank higher
                return out
        if near_max >= 2 and n > 3:
            out += self.aimed_companion(snap, idx, p, q, sgn, dist, base)
        return out

    def aimed_companion(self, snap, idx, p, q, sgn, dist, base) -> list:
        """Near set {p, c}: the pole where the line p -> sink(p) meets a line c -> target, for targets in
        the middle of gaps next to clusters of c's label, and c's own sink (a pair move)."""
        order, pos = snap.order, snap.pos
        c = int(order[idx[1]])
        lc = int(self.y[c])
        far = np.sort(pos[idx[2:]])
        far_lab = self.y[np.asarray(order[idx[2:]])][np.argsort(pos[idx[2:]])]
        mids = 0.5 * (far[1:] + far[:-1])
        ok = (far_lab[1:] == lc) | (far_lab[:-1] == lc)
        targets = np.r_[mids[ok], self.theta[self.sinks[lc]]]
        P, A, C = unit(pos[idx[0]]), unit(self.theta[q]), unit(pos[idx[1]])
        O, t, u = line_meet(P, A, C, unit(targets))
        limit = unit(pos[idx[1]] + sgn * SQUEEZE * (dist[2] - dist[1]))
        good = (t > 0) & (u > 0) & (np.sum(O * O, axis=1) > 1.0) & (O @ C > 1.0) & (O @ limit < 1.0)
        if not good.any():
            return []
        O, targets = O[good], targets[good]
        s = np.linalg.norm(O - P[None, :], axis=1)
        pair = targets == self.theta[self.sinks[lc]]
        tangent = np.arctan2(O[:, 1], O[:, 0]) + sgn * np.arccos(1.0 / np.linalg.norm(O, axis=1))
        frac = (np.abs(tangent - pos[idx[0]]) - dist[1]) / (dist[2] - dist[1])
        return self.score(O, s, 2, frac, pair=pair, **base)

    def score(self, O, s, j, frac, *, snap, end, idx, p, q, heavy, spread_p, pair=None) -> list:
        """Rank the moves with poles ``O`` (near set = the first ``j`` clusters from ``end``)."""
        order, pos, lab = snap.order, snap.pos, snap.lab
        n = len(order)
        y, theta = self.y, self.theta
        A = unit(theta[q])
        err_p = (LANDING_EPS * COND + spread_p * (np.linalg.norm(O - A[None, :], axis=1) + s)) / s
        margin = 0.5 * snap.zones[q] / err_p
        allowed = np.ones(len(s), dtype=bool)
        zone_kept = np.ones(len(s), dtype=bool)
        deep = np.ones(len(s), dtype=bool)  # every companion lands beyond the first DEEP far clusters (not in the room)
        crowd = np.full(len(s), math.inf)  # smallest gap created (any labels)
        clash = np.full(len(s), math.inf)  # smallest gap created between different labels
        far_pos = pos[j:] if end == "front" else pos[: n - j]
        room_edge = far_pos[min(DEEP, len(far_pos) - 1)] if end == "front" else far_pos[max(len(far_pos) - 1 - DEEP, 0)]
        near_lab = [int(y[order[idx[i]]]) for i in range(j)]
        far_by_label = {}  # the far clusters of each label (sorted angles): drop the near ones at this end
        for lab_, arr in snap.by_label.items():
            cut = near_lab.count(lab_)
            far_by_label[lab_] = arr[cut:] if end == "front" else arr[: len(arr) - cut]
        sink_pos = {lab_: theta[c] for lab_, c in self.sinks.items()}
        zO = (O[:, 0] + 1j * O[:, 1])[:, None]  # the poles, (T, 1) complex

        def seen(angles):  # directions from the poles to circle points, unit complex; angles (T, c) or (1, c)
            z = np.exp(1j * angles) - zO
            return z / np.abs(z)

        def image_gap(u, v):  # gap between two images after the block (the fold halves, the re-spread doubles)
            return 2.0 * np.abs(np.angle(u / v))

        def nearest_image(arr, a, u):  # image distance from u to the images of the two clusters of arr around a
            if len(arr) == 0:
                return np.full(a.shape, math.inf)
            k = np.searchsorted(arr, a)
            lo, hi = arr[np.maximum(k - 1, 0)], arr[np.minimum(k, len(arr) - 1)]
            return np.minimum(image_gap(seen(lo), u), image_gap(seen(hi), u))

        if j > 1:  # the companions, all at once: arrays (T, j - 1)
            t_c = pos[idx[1:j]][None, :]
            l_c = np.array(near_lab[1:])
            u = seen(t_c)  # the direction in which each companion leaves: it lands where that ray meets the far arc
            a = second_hits(O, t_c[0])
            err = LANDING_EPS * COND / np.abs(np.exp(1j * t_c) - zO)
            is_pair = np.zeros(u.shape, dtype=bool)
            if pair is not None:  # the first companion may land exactly on its own sink (a pair move)
                is_pair[:, 0] = pair
                margin = np.where(pair, np.minimum(margin, 0.5 * snap.zones[self.sinks[int(l_c[0])]] / err[:, 0]), margin)
            d_any = nearest_image(far_pos, a, u)
            d_other = np.full(u.shape, math.inf)
            for lab_ in set(l_c.tolist()):
                others = [arr for other, arr in far_by_label.items() if other != lab_]
                if others:
                    mine = l_c == lab_
                    merged = np.sort(np.concatenate(others))
                    d_other[:, mine] = nearest_image(merged, a[:, mine], u[:, mine])
            if j > 2:  # companions landing next to each other
                pairwise = image_gap(u[:, :, None], u[:, None, :])
                pairwise[:, np.arange(j - 1), np.arange(j - 1)] = math.inf
                d_any = np.minimum(d_any, pairwise.min(axis=2))
                differ = l_c[:, None] != l_c[None, :]
                d_other = np.minimum(d_other, np.where(differ[None], pairwise, math.inf).min(axis=2))
            deep = ((a > room_edge) if end == "front" else (a < room_edge)).all(axis=1)
            inside = (a > snap.hull[0]) & (a < snap.hull[1])
            allowed &= (~inside | is_pair).all(axis=1)
            for lab_, c_s in self.sinks.items():  # keep the room around another label's sink
                near_sink = image_gap(seen(np.array([[sink_pos[lab_]]])), u) < snap.zones[c_s]
                zone_kept &= (~(near_sink & (l_c != lab_)[None, :]) | is_pair).all(axis=1)
            keep = ~is_pair
            margin = np.minimum(margin, np.where(keep, 0.5 * d_other / err, math.inf).min(axis=1))
            crowd = np.where(keep, d_any, math.inf).min(axis=1)
            clash = np.where(keep, d_other, math.inf).min(axis=1)
        # the fold squeezes the first gaps after the near set: their new size (the block halves, the re-spread doubles)
        nxt_idx = idx[j : j + 4]
        if len(nxt_idx) >= 2:
            zc = np.exp(1j * pos[nxt_idx])[None, :] - (O[:, 0] + 1j * O[:, 1])[:, None]
            new_gaps = 2.0 * np.abs(np.angle(zc[:, 1:] / zc[:, :-1]))
            crowd = np.minimum(crowd, new_gaps.min(axis=1))
            nlab = lab[nxt_idx]
            other = nlab[1:] != nlab[:-1]
            if other.any():
                clash = np.minimum(clash, new_gaps[:, other].min(axis=1))
        level = np.select([crowd >= CROWD * snap.medg, crowd >= 0.1 * snap.medg, crowd >= 0.03 * snap.medg], [3, 2, 1], 0)
        is_pair = np.zeros(len(s), dtype=bool) if pair is None else pair
        ok = (margin >= SAFE) & allowed & np.isfinite(margin) & (s > 0)
        keys = (s, is_pair, level, -j * np.ones(len(s)), clash >= snap.sep, deep, heavy * np.ones(len(s)), level >= 2,
                zone_kept, margin >= COMFORT, ok)  # np.lexsort: the last key is the primary one
        best = np.lexsort(keys)[::-1][:KEEP]
        near = [int(order[idx[i]]) for i in range(j)]
        out = []
        for t in best:
            if not (np.isfinite(margin[t]) and s[t] > 0):
                continue
            rank = (bool(ok[t]), bool(margin[t] >= COMFORT), bool(zone_kept[t]), bool(level[t] >= 2), heavy, bool(deep[t]),
                    bool(clash[t] >= snap.sep), -j, int(level[t]), bool(is_pair[t]), float(s[t]))
            out.append(Candidate(rank, end, p, q, O[t], float(s[t]), near,
                                 (near[1], self.sinks[int(y[near[1]])]) if is_pair[t] else None,
                                 float(frac[t]) if np.isfinite(frac[t]) else math.nan, float(margin[t])))
        return out

    def inner_candidates(self, snap: Snapshot) -> list:
        """Both ends are sinks (three or more labels): the first or last non-sink cluster moves from
        inside the arc (which is cut open there: the clusters beyond it wrap round to the other end)."""
        order, pos = snap.order, snap.pos
        sink_ids = set(self.sinks.values())
        inner = [i for i in range(len(order)) if int(order[i]) not in sink_ids]
        out = []
        for i in dict.fromkeys([inner[0], inner[-1]]):
            p = int(order[i])
            q = self.sinks[int(self.y[p])]
            tp, tq = float(pos[i]), float(self.theta[q])
            b = abs(tq - tp)
            step = 1 if tq > tp else -1
            gaps = [abs(float(pos[i + d]) - tp) for d in (step, -step) if 0 <= i + d < len(order)]
            room = min(min(gaps), 0.6 * b)
            for f in (0.5, 0.3):
                o, s = pole_for_move(tp, tq, tp + step * f * room)
                seen = unit(self.theta) @ o - 1.0
                if not (seen[self.cid != p].max() < 0):
                    continue
                new, A_ = block_image(self.theta, o, self.width(len(order) - 1))
                err = (LANDING_EPS * np.linalg.cond(A_) + self.spread(p) * (b + s)) / s
                margin = 0.5 * snap.zones[q] / err
                sep = sample_separation(new, self.y)
                rank = (bool(margin >= SAFE), bool(margin >= COMFORT), True, True, True, True, sep > 0, -1, 3, False, float(s))
                out.append(Candidate(rank, "inner", p, q, o, float(s), [p], None, f, float(margin)))
        return out
