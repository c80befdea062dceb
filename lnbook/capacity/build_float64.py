r"""Width-3 LN-Nets that classify any labelling, built in float64: the builder of chapter 3.

:func:`build_ln_net` builds, for labelled samples :math:`(x_i, y_i)_{i\le m}`, an **LN-Net of width 3**

.. code-block:: text

    Linear(n, 3) -> LN -> [Linear(3, 3) -> LN] x B -> Linear(3, K)

(``LN`` is ``torch.nn.LayerNorm(3, eps=0, elementwise_affine=False)``, float64) whose ``argmax`` of the
``K`` logits equals :math:`y_i` on every sample. It implements the construction of chapter 3 (our
reconstruction of the Projection Merge and Parallelization Breaking Algorithms of Ni et al., ICML 2024):
one **sink** cluster per label; every block sends one cluster at an end of the arc onto the sink of its
label (its pole on the line through both, beyond the moved cluster, and so close to it that no other
cluster is seen from the pole) and re-spreads the image onto the arc. The exact-arithmetic version of
the same algorithm, which checks the theorem by its own construction, is
:mod:`lnbook.capacity.build_exact`.

The float64 builder adds devices that never add a merging layer (chapter 3's float64 appendix):

* the circle and block geometry is :mod:`lnbook.capacity.circle`; the choice of each move (companions, pair
  moves, the ranking of candidate poles) is the landing planner :mod:`lnbook.capacity.landing`;
* **booking**: adjacent clusters of one label that coincide to rounding (closer than ``BOOK_MERGE`` of
  the arc), and clusters that touch the sink of their label (closer than ``BOOK_SINK`` of its room, or
  among its samples), are merged in the books, without a layer;
* **binary finish**: for two labels, as each label forms one contiguous run along the arc, one
  block with its pole on the circle in the gap between the runs sends them to opposite sides (trace kind
  ``"cut"``);
* **arc and straightening** (:mod:`lnbook.capacity.schwarzian`): below 2000 distinct samples the arc shrinks with
  the number :math:`N` of clusters, :math:`w(N) = \min(0.25, 3/\sqrt N)`; from 2000 on it stays at 0.25 rad
  and **straightening blocks** (pole inside the circle: nothing merges) are inserted, at most one per 8
  merges (trace kind ``"straighten"``).

**Layer counts.** The merging blocks number at most :math:`m' - k` (:math:`m'` distinct samples,
:math:`k` labels), so a net without straightening blocks has at most :func:`layer_bound`
:math:`= 1 + m' - k` LN layers, the theorem's bound; with straightening blocks the depth is at most
:func:`float64_layer_bound` :math:`= 1 + (m' - k) + \lfloor (m' - k)/8 \rfloor`, which exceeds
:math:`m - 1` (``net.bound`` is this bound). :func:`build_ln_net` asserts both.

The state after every block is the float64 output of the net itself (not an idealised copy), and every
landing is checked there. Where float64 runs out the builder raises :class:`ConstructionError` (a
``RuntimeError`` naming the layer and the reason). ``verify=True`` then checks the net under eager ``torch``
and under an independent numpy forward; ``certify=True`` proves it correct under every admissible float64
forward (:mod:`lnbook.capacity.rounding_bound`). See :func:`build_ln_net` for what each guarantees.

Complexity: a move costs :math:`O(m)` (all samples are mapped), a sort of the clusters and a bounded
number of vectorised candidate scores; there are at most :math:`m' - k` moves: :math:`O(m^2 \log m)`
time, :math:`O(m)` memory (:math:`O(m\cdot D)` if the per-layer angles are recorded).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from lnbook.capacity.circle import (
    SQRT3,
    block_image,
    block_weights,
    circle_angles,
    identity_block,
    linear_module,
    ln_module,
    pole_for_move,
    sample_separation,
    to_plane,
    unit,
)
from lnbook.capacity.landing import (
    SAFE,
    Candidate,
    LandingPlanner,
    Snapshot,
    choose_sinks,
    is_clean,
)
from lnbook.capacity.nets import (
    ConstructionError,
    LNNet,
    MoveRecord,
    float64_layer_bound,
    layer_bound,
    verify_ln_net,
)
from lnbook.capacity.rounding_bound import certify_ln_net, propagate_layer
from lnbook.capacity.schwarzian import (
    ARC_CAP,
    STRAIGHTEN_BELOW,
    STRAIGHTEN_EVERY,
    STRAIGHTEN_FROM,
    arc_width_for,
    end_ratios,
    straightening_allowance,
    straightening_pole,
)
from lnbook.core.geometry import plane_basis
from lnbook.util.validation import check_labelled_samples, group_identical_samples

__all__ = [
    "ConstructionError",
    "MoveRecord",
    "LNNet",
    "build_ln_net",
    "verify_ln_net",
    "layer_bound",
    "float64_layer_bound",
    # re-exported from lnbook.capacity.nets, lnbook.capacity.circle and lnbook.capacity.schwarzian (used with the builder)
    "plane_basis",
    "to_plane",
    "circle_angles",
    "block_weights",
    "block_image",
    "identity_block",
    "pole_for_move",
    "arc_width_for",
    "straightening_allowance",
    "straightening_pole",
]

FINAL_ARC = 2.0 * math.pi / 3.0  # the arc on which the k class points end (it sets the read-out margin)
BOOK_MERGE = 1e-11  # adjacent clusters of one label closer than this (relative to the arc) are booked as one
BOOK_SINK = 0.05  # a cluster next to the sink of its label, closer than this share of the sink's room, joins it in the books
LANDING_TRIES = 6  # candidates built and checked, in order of rank, until one lands where predicted
FIRST_LAYER_TRIES = 512  # random directions scored for the first projection (the smallest gap between labels)
SMALL = 64  # below this many samples the first layer scores 16 directions
FINAL_TILTS = tuple(float(t) for t in np.exp(np.linspace(-4.0, 4.0, 41)))  # the last block's free parameter, scanned


def _first_layer(X, y, groups, arc, seed, tries=None):
    r"""Choose a direction :math:`w` so that :math:`z_i = \langle w, \tilde x_i\rangle` separates distinct samples.

    Returns (weight (3, n), bias (3,)). The angle is :math:`\theta_i = \arctan(\lambda z_i + \mu)`,
    monotone in :math:`z_i`, mapped onto :math:`[-w/2, w/2]`. Among ``tries`` random directions
    the one with the widest smallest gap between samples of different labels (then between any two
    distinct samples) wins.
    """
    m, n = X.shape
    mean = X.mean(axis=0)
    scale = float(np.max(np.abs(X - mean))) or 1.0
    Xc = (X - mean) / scale
    if tries is None:  # small problems have room in float64; large ones need the widest smallest gap
        tries = FIRST_LAYER_TRIES if m >= SMALL else 16
    rng = np.random.default_rng(seed)
    cands = [np.ones(1)] if n == 1 else [rng.standard_normal(n) for _ in range(tries)]
    best = None
    for w in cands:
        w = w / np.linalg.norm(w)
        z = Xc @ w
        order = np.argsort(z, kind="stable")
        zs, gs, ls = z[order], groups[order], y[order]
        new = gs[1:] != gs[:-1]
        gaps = np.diff(zs)
        if (gaps[new] <= 0).any():
            score = (-1.0, -1.0)
        else:
            span = zs[-1] - zs[0]
            diff = new & (ls[1:] != ls[:-1])
            score = (
                float(gaps[diff].min() / span) if diff.any() else 1.0,
                float(gaps[new].min() / span) if new.any() else 1.0,
            )
        if best is None or score > best[0]:
            best = (score, w, z)
    score, w, z = best
    if score[1] <= 0:
        raise ValueError(
            "two distinct samples project to the same value in float64 for every direction tried: they are "
            "too close to be told apart (rescale the data or remove near-duplicates)"
        )
    zmin, zmax = float(z.min()), float(z.max())
    t = math.tan(arc / 2)
    lam = 2 * t / (zmax - zmin) if zmax > zmin else 1.0
    mu = -t - lam * zmin if zmax > zmin else 0.0
    # plane coordinates u = (1, lam*z + mu), z = <w, (x - mean)/scale>
    E = plane_basis().cpu().numpy()
    with np.errstate(over="ignore", invalid="ignore"):
        a = lam * w / scale
        weight = np.outer(E[:, 1], a)  # (3, n)
    with np.errstate(over="ignore", invalid="ignore"):
        bias = E[:, 0] + E[:, 1] * (mu - float(a @ mean))
    if not (np.isfinite(weight).all() and np.isfinite(bias).all()):
        raise ValueError(
            f"the samples spread over only {scale:.3g} (largest distance from their mean): the first layer's weights, "
            "of order 1/spread, overflow float64; rescale X (for example divide it by its spread) and build again"
        )
    return torch.from_numpy(weight), torch.from_numpy(bias)

def _runs(labels: np.ndarray) -> int:
    """Number of runs of equal consecutive labels."""
    return 1 + int(np.count_nonzero(labels[1:] != labels[:-1])) if len(labels) else 0


class _Builder(LandingPlanner):
    """State and blocks of :func:`build_ln_net`; the candidate moves come from :class:`~lnbook.capacity.landing.LandingPlanner`."""

    def __init__(self, X, y, arc_width, final_arc_width, seed, record_angles, straighten=None):
        self.X, self.y = X, y
        self.m = len(y)
        self.fixed_arc = arc_width
        self.final_arc = final_arc_width
        self.seed = seed
        self.groups, self.n_distinct = group_identical_samples(X, y)
        self.classes = sorted(set(y.tolist()))
        self.k = len(self.classes)
        self.K = max(2, int(y.max()) + 1)
        leaders = {}
        for i in range(self.m):
            leaders.setdefault(int(self.groups[i]), i)
        self.cid = np.array([leaders[int(self.groups[i])] for i in range(self.m)])  # sample -> cluster name
        members = {}
        for i in range(self.m):
            members.setdefault(int(self.cid[i]), []).append(i)
        self.members = {c: np.array(v) for c, v in members.items()}
        self.multi = {c for c, v in self.members.items() if len(v) > 1}  # clusters of more than one sample
        self.modules: list[nn.Module] = []
        self.trace: list[MoveRecord] = []
        self.record_angles = record_angles
        self.angles = [] if record_angles else None
        self.arcs: list[float] = []
        auto = self.n_distinct >= STRAIGHTEN_FROM
        self.straighten = (auto if straighten is None else bool(straighten)) and arc_width is None and self.k >= 2
        self.merges_since = 0  # merging blocks since the last straightening block
        self.certify = False  # set by build_ln_net(certify=True): reject moves whose rounding radius is too large
        self.n_straighten = 0

    # -- helpers -------------------------------------------------------------------------------

    def width(self, n_clusters: int) -> float:
        """The arc kept for ``n_clusters`` clusters (the final arc once one cluster per label is left)."""
        if n_clusters <= self.k:
            return self.final_arc
        if self.fixed_arc is not None:
            return self.fixed_arc
        if self.straighten:
            return ARC_CAP  # a wide arc, straightened (see straighten_arc)
        return arc_width_for(n_clusters)

    def merge(self, c: int, into: int) -> None:
        """Cluster ``c`` joins cluster ``into`` (in the books)."""
        self.members[into] = np.concatenate([self.members[into], self.members[c]])
        self.cid[self.members[c]] = into
        del self.members[c]
        self.multi.discard(c)
        self.multi.add(into)

    def spread(self, c: int) -> float:
        """Angular spread of the samples of cluster ``c`` (0 for a single sample)."""
        mem = self.members[c]
        return float(np.ptp(self.theta[mem])) if len(mem) > 1 else 0.0

    def _radius(self, lin: nn.Linear):
        """The rounding radius (per sample) after the block ``lin -> LN`` under every admissible float64 forward
        (:mod:`lnbook.capacity.rounding_bound`), propagated from the current one."""
        W, b = lin.weight.detach().cpu().numpy(), lin.bias.detach().cpu().numpy()
        if not self.modules:
            return propagate_layer(self.X, np.zeros(self.m), W, b, None)[1:]
        return propagate_layer(self.Z.cpu().numpy(), self.err, W, b, self.rho)[1:]

    def survives_rounding(self, lin: nn.Linear, theta: np.ndarray) -> tuple[bool, float]:
        """Whether every sample stays, under every admissible forward, within half its distance to the
        nearest sample of another label (angles after the block ``lin``): the test that rejects short levers."""
        err, _ = self._radius(lin)
        worst = float(np.max(err)) if len(err) else 0.0
        sep = sample_separation(theta, self.y)
        return bool(np.isfinite(worst) and 2.0 * worst / SQRT3 < 0.5 * sep), worst

    def _push(self, lin: nn.Linear, Z: torch.Tensor, arc: float) -> None:
        self.err, self.rho = self._radius(lin)
        self.modules += [lin, ln_module()]
        self.Z = Z
        self.theta = circle_angles(Z)
        self.arcs.append(arc)
        if self.record_angles:
            self.angles.append(self.theta.copy())

    def snapshot(self) -> Snapshot:
        """The clusters in angular order, with what the planner needs (gaps, sinks' rooms, edges)."""
        lead = np.fromiter(self.members, dtype=np.int64, count=len(self.members))
        ang = self.theta[lead]
        o = np.argsort(ang, kind="stable")
        order, pos = lead[o], ang[o]
        lab = self.y[order]
        gaps = np.diff(pos)
        diff = lab[1:] != lab[:-1]
        sep = float(gaps[diff].min()) if diff.any() else math.inf
        medg = float(np.median(gaps)) if len(gaps) else math.inf
        sinks = getattr(self, "sinks", {})
        sink_at = sorted(np.nonzero(np.isin(order, list(sinks.values())))[0].tolist())
        zones = {}  # distance from the sink to the nearest sample of another label
        for q in sinks.values():
            other = self.theta[self.y != self.y[q]]
            zones[q] = float(np.min(np.abs(other - self.theta[q]))) if len(other) else math.inf
        by_label = {int(c): pos[lab == c] for c in np.unique(lab)}
        ends = [self.theta[q] for q in sinks.values()]
        hull = (min(ends), max(ends)) if ends else (0.0, 0.0)
        lo_edge, hi_edge = pos.copy(), pos.copy()
        for i in np.nonzero(np.isin(order, list(self.multi)))[0]:
            member_angles = self.theta[self.members[int(order[i])]]
            lo_edge[i], hi_edge[i] = member_angles.min(), member_angles.max()
        return Snapshot(order, pos, lab, sep, medg, sink_at, zones, by_label, hull, lo_edge, hi_edge)

    # -- the run -------------------------------------------------------------------------------

    def run(self) -> None:
        k, y = self.k, self.y
        first_arc = self.width(self.n_distinct)
        W1, b1 = _first_layer(self.X, y, self.groups, first_arc, self.seed)
        lin = linear_module(W1, b1)
        with torch.no_grad():
            Z = ln_module()(lin(torch.from_numpy(self.X)))
        self._push(lin, Z, first_arc)
        self.initial_separation = sample_separation(self.theta, y)
        self.min_separation = self.initial_separation
        if k < 2:
            return
        self.sinks = choose_sinks(self.snapshot())
        while len(self.members) > k:
            snap = self.book(self.snapshot())
            if len(self.members) <= k:
                break
            if k == 2 and _runs(snap.lab) == 2:
                self.binary_finish(snap)
                break
            self.move(snap)
            self.merges_since += 1
            if self.straighten and self.merges_since >= STRAIGHTEN_EVERY and len(self.members) > k:
                self.straighten_arc()

    def book(self, snap: Snapshot) -> Snapshot:
        """Merge in the books (no layer): adjacent clusters of one label that coincide to rounding, and a
        cluster next to the sink of its label, closer to it than ``BOOK_SINK`` of the sink's room (no other
        label lies between them, and sinks never move, so it stays there)."""
        same = snap.lab[1:] == snap.lab[:-1]
        gaps = np.diff(snap.pos)
        close = same & (gaps <= BOOK_MERGE * self.arcs[-1])
        sink_ids = set(self.sinks.values())
        for i in snap.sink_at:
            q = int(snap.order[i])
            for b, nb in ((i - 1, i - 1), (i, i + 1)):  # the gaps on either side of the sink, and the neighbour there
                if not (0 <= b < len(gaps) and same[b]):
                    continue
                inside = snap.lo_edge[i] <= snap.pos[nb] <= snap.hi_edge[i]  # among the sink's own members
                if gaps[b] < BOOK_SINK * snap.zones[q] or inside:
                    close[b] = True
        if not close.any():
            return snap
        for i in np.nonzero(close)[0][::-1]:
            if len(self.members) <= self.k:
                break
            a, b = int(self.cid[snap.order[i]]), int(self.cid[snap.order[i + 1]])
            if a == b:
                continue
            if b in sink_ids:  # the sink survives the booking
                a, b = b, a
            self.merge(b, a)
        return self.snapshot()

    def binary_finish(self, snap: Snapshot) -> None:
        """The classes already form two contiguous runs: a pole ON the circle in the gap between them
        sends the two runs to opposite halves of the circle (inscribed angle: theta -> theta/2 + const
        on each side, with a jump of pi across the pole)."""
        cut = int(np.nonzero(snap.lab[1:] != snap.lab[:-1])[0][0])
        g_lo, g_hi = float(snap.pos[cut]), float(snap.pos[cut + 1])
        pole = unit(0.5 * (g_lo + g_hi))
        Wb, bb = block_weights(np.eye(2), pole)
        lin = linear_module(Wb, bb)
        with torch.no_grad():
            Z = ln_module()(lin(self.Z))
        self._push(lin, Z, math.pi)
        for lab in self.classes:  # one cluster per class in the books
            ids = [int(c) for c in snap.order if self.y[c] == lab]
            for c in ids[1:]:
                self.merge(c, ids[0])
        sep = sample_separation(self.theta, self.y)
        self.trace.append(
            MoveRecord(layer=len(self.arcs), kind="cut", end="", moved=-1, onto=None, label=-1, members=[],
                       pole=(float(pole[0]), float(pole[1])), pole_gap=0.5 * (g_hi - g_lo), visibility_margin=0.0,
                       separation=sep, n_clusters=len(self.members))
        )

    def straighten_arc(self) -> None:
        """A block with its pole **inside** the circle (a bijection: nothing merges, nothing folds) whose
        positive Schwarzian pays back the distortion of the merging blocks: the gaps near the ends of
        the arc, squeezed by the repeated re-spreads, are stretched back to the size of the middle ones.
        Used only when the mean gap over the outer twentieth of the clusters at either end falls below
        ``STRAIGHTEN_BELOW`` of the middle one; the pole (distance and direction) is the scanned one that
        brings both ends closest to the middle."""
        snap = self.snapshot()
        if min(end_ratios(snap.pos)) >= STRAIGHTEN_BELOW:
            return
        arc = self.arcs[-1]
        pole, _, _ = straightening_pole(snap.pos, arc)
        if pole is None:
            return
        pred, A = block_image(self.theta, pole, arc)
        Wb, bb = block_weights(A, pole)
        lin = linear_module(Wb, bb)
        with torch.no_grad():
            Z = ln_module()(lin(self.Z))
        new = circle_angles(Z)
        # a bijection of the circle: the clusters keep their order and no two labels meet
        lead = snap.order
        if not (np.all(np.diff(new[lead]) > 0) and sample_separation(new, self.y) > 0.25 * sample_separation(pred, self.y)):
            return  # a safeguard: keep the net as it is
        self._push(lin, Z, arc)
        self.merges_since = 0
        self.n_straighten += 1
        sep = sample_separation(self.theta, self.y)
        self.min_separation = min(self.min_separation, sep)
        self.trace.append(
            MoveRecord(layer=len(self.arcs), kind="straighten", end="", moved=-1, onto=None, label=-1, members=[],
                       pole=(float(pole[0]), float(pole[1])), pole_gap=float(1.0 - np.linalg.norm(pole)),
                       visibility_margin=0.0, separation=sep, n_clusters=len(self.members))
        )

    def final_tilt(self, cand: Candidate, merges: list) -> float:
        """The last block's free parameter: spread the ``k`` class points over the final arc as evenly as
        possible (the widest smallest gap between the samples of neighbouring classes)."""
        cid = self.cid.copy()
        for c, t in merges:
            cid[self.members[c]] = t
        best = (-math.inf, 1.0)
        for tilt in FINAL_TILTS:
            pred, _ = block_image(self.theta, cand.pole, self.final_arc, tilt)
            order = np.argsort(pred, kind="stable")
            cls = cid[order]
            change = np.nonzero(cls[1:] != cls[:-1])[0]
            gap = float(np.min(pred[order][change + 1] - pred[order][change])) if len(change) else math.inf
            if gap > best[0]:
                best = (gap, tilt)
        return best[1]

    def move(self, snap: Snapshot) -> None:
        """One merging block: rank the candidate moves, build them in order, keep the first that lands where predicted."""
        y = self.y
        n = len(snap.order)
        cnt = {"front": snap.sink_at[0], "back": n - 1 - snap.sink_at[-1]}
        cands = []
        ends = sorted(("front", "back"), key=lambda e: -cnt[e])  # the end with more clusters left first
        for end in ends:
            if any(is_clean(c) and c.rank[4] for c in cands):  # a clean move from the heavier end wins anyway
                break
            cands += self.end_candidates(snap, end, heavy=cnt[end] >= cnt["back" if end == "front" else "front"])
        if not cands:
            cands = self.inner_candidates(snap)
        if not cands:
            raise ConstructionError(len(self.arcs) + 1, "no move keeps the samples apart in float64")
        cands.sort(key=lambda c: c.rank, reverse=True)
        failure = (f"no precise move (best estimated landing margin {cands[0].margin:.2e}, "
                   f"needed {SAFE}); the samples are too close for this construction in float64")
        for cand in cands[:LANDING_TRIES]:
            if not cand.rank[0]:
                break
            merges = [(cand.p, cand.q)] + ([cand.pair] if cand.pair else [])
            merged = {c for c, _ in merges}
            companions = [c for c in cand.near if c not in merged]
            seen = unit(self.theta) @ cand.pole - 1.0  # > 0: the pole sees the sample (near arc)
            in_near = np.isin(self.cid, cand.near)
            if not (seen[in_near].min() > 0 and (in_near.all() or seen[~in_near].max() < 0)):
                failure = "the pole would see more than the near set"
                continue
            out_arc = self.width(n - len(merges))
            tilt = self.final_tilt(cand, merges) if out_arc == self.final_arc and self.k >= 3 else 1.0
            pred, A = block_image(self.theta, cand.pole, out_arc, tilt)
            Wb, bb = block_weights(A, cand.pole)
            lin = linear_module(Wb, bb)
            with torch.no_grad():
                Z = ln_module()(lin(self.Z))
            new = circle_angles(Z)
            failure = None
            ok, worst = self.survives_rounding(lin, new) if self.certify else (True, 0.0)
            if not ok:
                failure = (f"the lever {cand.lever:.1e} is too short for float64: another correctly rounded forward "
                           f"could move a sample by {worst:.1e}, more than half the gap between labels")
                continue
            for c, t in merges:  # where the moved samples really landed (the net's own output)
                miss = float(np.max(np.abs(new[self.members[c]] - new[t])))
                room = float(np.min(np.abs(new[y != y[t]] - new[t]))) if (y != y[t]).any() else math.inf
                if not miss < 0.5 * room:
                    failure = (f"cluster {c} landed {miss:.1e} rad from its target, nearer to "
                               "another label than to it (float64 rounding over a short lever)")
            for c in companions:
                room = float(np.min(np.abs(pred[y != y[c]] - pred[c]))) if (y != y[c]).any() else math.inf
                if not abs(new[c] - pred[c]) < 0.25 * room:
                    failure = f"companion {c} landed away from where it was sent"
            if failure is None:
                break
        if failure is not None:
            raise ConstructionError(len(self.arcs) + 1, failure)
        vis = float(-seen[~in_near].max()) if (~in_near).any() else 1.0
        self._push(lin, Z, out_arc)
        members = {c: self.members[c] for c, _ in merges}
        for c, t in merges:
            self.merge(c, t)
        sep = sample_separation(self.theta, y)
        self.min_separation = min(self.min_separation, sep)
        pair = cand.pair
        self.trace.append(
            MoveRecord(
                layer=len(self.arcs), kind="merge", end=cand.end, moved=cand.p, onto=cand.q, label=int(y[cand.p]),
                members=[int(i) for i in members[cand.p]], pole=(float(cand.pole[0]), float(cand.pole[1])),
                pole_gap=cand.lever, visibility_margin=vis, separation=sep, n_clusters=len(self.members),
                tangent_fraction=cand.fraction,
                moved_also=None if pair is None else int(pair[0]), onto_also=None if pair is None else int(pair[1]),
                members_also=[] if pair is None else [int(i) for i in members[pair[0]]],
                relocated=[int(c) for c in companions],
            )
        )

    # -- the read-out --------------------------------------------------------------------------

    def net(self) -> LNNet:
        """The finished net: the blocks built so far and the read-out, logit j = <point of label j, z>."""
        k, K = self.k, self.K
        W_out = torch.zeros(K, 3, dtype=torch.float64)
        b_out = torch.full((K,), -4.0, dtype=torch.float64)  # absent labels: below every present logit (>= -3)
        if k == 1:
            b_out[self.classes[0]] = 0.0
        else:
            E = plane_basis().cpu().numpy()
            for c, mem in self.members.items():
                point = SQRT3 * (E @ unit(float(np.mean(self.theta[mem]))))
                W_out[self.y[c]] = torch.from_numpy(point)
                b_out[self.y[c]] = 0.0
        net = LNNet(*self.modules, linear_module(W_out, b_out))
        net.trace = self.trace
        net.n_classes = k
        net.n_logits = K
        net.n_distinct = self.n_distinct
        net.n_ln_layers = len(self.arcs)
        net.n_straighten = self.n_straighten
        net.bound = float64_layer_bound(self.n_distinct, k, self.straighten)
        net.initial_separation = self.initial_separation
        net.min_separation = self.min_separation
        net.class_angles = {int(self.y[c]): float(self.theta[c]) for c in self.members} if k >= 2 else {}
        net.angles = np.array(self.angles) if self.record_angles else None
        net.arc_widths = list(self.arcs)
        net.arc_width = self.arcs[0]
        net.labels = self.y
        net.note = "single class: trivial net (the read-out is constant, every sample gets the one label)" if k == 1 else ""
        return net


def build_ln_net(
    X,
    y,
    *,
    arc_width: float | None = None,
    final_arc_width: float = FINAL_ARC,
    seed: int = 0,
    record_angles: bool = False,
    verify: bool = True,
    straighten: bool | None = None,
    certify: bool = False,
) -> LNNet:
    r"""Build a width-3 LN-Net that classifies the samples ``X`` (shape ``(m, n)``) with labels ``y`` exactly.

    Returns an :class:`LNNet` (an ``nn.Sequential`` in float64): ``Linear(n,3)``, ``LN``, then
    ``B`` blocks ``Linear(3,3), LN``, then ``Linear(3, K)`` with ``K = max(2, max(y)+1)``; logit
    ``j`` scores label ``j``. The merging blocks number at most ``m' - k`` (``k >= 2`` classes among
    ``m'`` distinct samples), so without straightening the depth is at most :func:`layer_bound`
    ``= 1 + m' - k``; when the builder straightens (see below) it adds ``net.n_straighten``
    straightening blocks, at most :func:`straightening_allowance`, and ``net.bound`` is
    :func:`float64_layer_bound`, the sum. One class only: the trivial net
    (one LN layer, a constant read-out), recorded in ``net.note``.

    ``arc_width`` is the width of the arc on which the samples are kept between moves (``None``:
    :func:`arc_width_for` the current number of clusters), ``final_arc_width`` the arc on which
    the ``k`` class points end (it sets the read-out margin), ``seed`` drives the choice of the
    first projection, ``record_angles`` stores every sample's angle after each LN layer
    (``net.angles``), ``verify`` runs the module on ``X`` and raises :class:`ConstructionError` if any
    prediction is wrong (it never should: every landing is checked on the way). ``straighten``
    (``None``: from 2000 distinct samples on) keeps the arc at its widest, 0.25 rad, and inserts a
    **straightening block** (pole inside the circle, see :func:`straightening_pole`) whenever the end
    gaps have shrunk below ``STRAIGHTEN_BELOW`` of the middle ones, at most once per
    ``STRAIGHTEN_EVERY`` merges: the wide arc buys float64 precision, the straightening pays back the
    distortion that a wide arc accumulates. Ignored with a fixed ``arc_width``.

    **What the check guarantees.** ``verify=True``: every sample is classified correctly by the returned module
    under eager ``torch`` (float64, CPU) *and* under an independent float64 forward (numpy, two-pass LayerNorm,
    :func:`~lnbook.capacity.rounding_bound.certify_ln_net`); a net whose answer depends on which of the two runs
    it is refused (:class:`ConstructionError`); on random labels of Gaussian points this happens from a few hundred
    samples on, and for every problem tried from a thousand on (the float64 appendix states the limit). This is
    evidence, not a proof, for other forwards
    (``torch.compile``, GPUs). ``certify=True`` proves more: every sample is classified correctly under *every*
    admissible float64 forward (the rounding model of :mod:`lnbook.capacity.rounding_bound`: any summation order
    in the linear layers, a LayerNorm with two-pass or Welford statistics) and in exact arithmetic, by a rigorous
    bound propagated layer by layer; moves whose lever would let rounding carry a sample more than half way to
    another label are rejected while building, and a net that is not certified raises. ``net.certified`` records
    whether the certificate holds (also when only ``verify`` was asked).

    Raises ``ValueError`` for fewer than 2 samples, non-finite values, wrong shapes, negative labels,
    and identical samples with different labels (naming their indices); :class:`ConstructionError` (a
    ``RuntimeError`` with ``layer`` and ``reason``) when the samples are too close for float64 (no
    candidate move lands precisely).
    """
    X, y = check_labelled_samples(X, y)
    if certify and not verify:
        raise ValueError("certify=True needs verify=True (the certificate is part of the check)")
    if arc_width is not None and not (0 < arc_width < math.pi / 2):
        raise ValueError("arc_width must be None (automatic) or lie in (0, pi/2)")
    if not 0 < final_arc_width < math.pi:
        raise ValueError("final_arc_width must lie in (0, pi)")
    builder = _Builder(X, y, arc_width, final_arc_width, seed, record_angles, straighten)
    builder.certify = bool(certify)
    builder.run()
    net = builder.net()
    if net.n_ln_layers - net.n_straighten > layer_bound(net.n_distinct, net.n_classes) or net.n_ln_layers > net.bound:
        raise AssertionError(f"{net.n_ln_layers} LN layers ({net.n_straighten} straightening) exceed the bound {net.bound}")
    if verify:
        report = verify_ln_net(net, X, y)
        if report["errors"]:
            raise ConstructionError(
                net.n_ln_layers,
                f"the built net misclassifies {report['errors']} of {len(y)} samples in float64 "
                f"(smallest separation {net.min_separation:.3e} rad): the configuration is beyond float64 precision",
            )
        net.margin = report["margin"]
        cert = certify_ln_net(net, X, y)
        wrong = np.nonzero(cert["predicted"] != y)[0]
        if len(wrong):
            raise ConstructionError(
                net.n_ln_layers,
                f"the net classifies every sample under eager torch but misclassifies samples {wrong[:10].tolist()} "
                "under an independent float64 forward (numpy, two-pass LayerNorm): its levers are too short for "
                "float64, and which forward runs it decides the answer",
            )
        net.certified = cert["certified"]
    if certify:
        if not cert["certified"]:
            raise ConstructionError(
                net.n_ln_layers,
                f"the net classifies every sample under eager torch, but not under every admissible float64 forward: "
                f"samples {cert['failures'][:10]} are not certified (rounding amplified by levers down to "
                f"{min((r.pole_gap for r in net.trace if r.kind == 'merge'), default=math.inf):.1e}); "
                "the configuration is beyond float64 precision",
            )
        net.certified_margin = cert["margin"]
    return net
