r"""Exact LN-Net constructions: 3 neurons and at most ``m - 1`` LayerNorm layers classify any labelling.

This module builds, for labelled samples :math:`(x_i, y_i)_{i\le m}`, an **LN-Net of width 3**

.. code-block:: text

    Linear(n, 3) -> LN -> [Linear(3, 3) -> LN] x B -> Linear(3, K)

(``LN`` is ``torch.nn.LayerNorm(3, eps=0, elementwise_affine=False)``) whose predictions
``argmax`` of the ``K`` logits equal :math:`y_i` on every sample. It is our reconstruction of the
*Projection Merge Algorithm* (PMA) and *Parallelization Breaking Algorithm* (PBA) of Ni et al.
(ICML 2024); the paper's text was not available, so the algorithm, the layer count and the proof
(chapter 3 of the book) are our own.

Geometry (chapter 1): with 3 neurons and :math:`\varepsilon = 0`, LN maps every input off
:math:`\mathrm{span}(\mathbf 1)` onto the circle :math:`C = \{z : \sum z = 0,\ \|z\| = \sqrt 3\}`.
In the orthonormal plane coordinates :math:`u = E^\top z` (``E = plane_basis()``) a block
``Linear(3,3) -> LN`` with weight :math:`E M E^\top` and bias :math:`E c` acts on circle points as

.. math:: u \mapsto \sqrt 3\, \frac{M u + c}{\|M u + c\|},

which, for invertible :math:`M`, is the **central projection from the pole**
:math:`o = -M^{-1}c` followed by the linear map :math:`M` acting on directions. Internally we
work on the unit circle (angles :math:`\theta`) and write :math:`M = S/\sqrt 3`, :math:`c = -S o`.

The algorithm keeps every sample on a short arc (width ``arc_width``). It first chooses one
**sink** cluster per label (binary labels: the two clusters on either side of one label boundary,
the widest in the middle half of the arc whose order of labels is the opposite of the tightest
pairs of different labels; more labels: one cluster of each label inside the shortest stretch of
clusters that holds every label). Then every block performs one **move**:

* take a cluster :math:`p` that is not a sink: an end of the arc (the front or the back); only
  when both ends are sinks, or no end gives a precise landing, a cluster inside (the arc is then
  cut open at :math:`p`: the clusters beyond it wrap round to the other end);
* **merge** (PMA): put the pole :math:`o` on the line through :math:`p` and the sink :math:`q` of
  :math:`p`'s label, beyond :math:`p`; then :math:`p` and :math:`q` lie on one ray from
  :math:`o` and land on the same point;
* **parallelization breaking** (PBA): the pole lies on the tangent to the circle at a point
  :math:`T` inside the gap next to :math:`p` on the sink's side (half way, or 0.3 of the way,
  and never farther than the gap on the other side), so :math:`p` is the only cluster
  **visible** from :math:`o` (:math:`\langle v, o\rangle < 1` for every other sample :math:`v`,
  checked for every candidate): the projection is injective and keeps the cyclic order of all
  other samples, so no two samples of different labels ever become parallel;
* **pair move**: an end :math:`a` and its neighbour :math:`b` of the other label, both visible
  from the pole where the lines :math:`a S_a` and :math:`b S_b` meet, land on their two sinks at
  once (possible when the sinks come in the opposite order; if the lines meet beyond the sinks,
  the sinks land on :math:`a, b` instead, which become the sinks: trace kind ``"swap"``). Its lever
  is about :math:`g\,d/G` against :math:`g^2/4d` for moving :math:`a` alone (:math:`g` the gap
  between :math:`a` and :math:`b`, :math:`d` the distance to the sinks, :math:`G` the gap between
  them): the near arc magnifies the pair apart;
* **join** (last resort): an end moves onto its neighbour of the same label (a non-sink, which
  moves on later);
* **re-spread**: the linear part :math:`S` maps the two extreme image directions back to the ends
  of the arc :math:`[-\varphi/2, \varphi/2]`; this fixes :math:`S` up to the ratio of the two
  scales (a projective map of the arc fixing its ends), chosen among 21 values in
  :math:`[e^{-5}, e^5]` to maximise the smallest gap between classes (for ``m >= 64``);
* **binary finish**: for two labels, as soon as each label forms one contiguous run along the arc,
  one block with its pole **on** the circle in the gap between the runs sends the two runs to
  opposite halves of the circle (inscribed angle: :math:`g + d \mapsto g + d/2 \pm \pi/2`), and
  the read-out follows (trace kind ``"cut"``; it only shortens the net).

Every block removes one cluster (two for a pair move), so the depth is at most :math:`1 + m' - k`.
Sinks stay put (except in a swap), so a moved cluster is almost always a single sample and no
rounding error is magnified twice. The **landing error** of a move with lever :math:`s = \|o-p\|`
is about ``LANDING_EPS * cond(S) / s`` plus :math:`p`'s own spread times :math:`(b + s)/s`
(measured). Candidates are ranked: keeps the classes apart; that error below ``LANDING_LIMIT``
of the target's distance to the nearest cluster of another label; below ``LANDING_SHARE`` of it;
keeps ``GOOD_ENOUGH`` of the smallest gap; the longest lever. After every block the builder checks
where the moved samples really landed (the net's own float64 output) and stops with a
``RuntimeError`` if one is nearer to another label than to its target. Two adjacent clusters of
one label closer than ``BOOK_MERGE`` (relative to the arc) are booked as one cluster without a
layer (the sink survives). The first layer scores ``FIRST_LAYER_TRIES`` random directions (16
below m = 64) for the widest smallest gap between labels.

The state after every block is the float64 output of the net itself (not an idealised copy), so
what is checked is what the module computes.

**Numerical range** (measured, see the book's chapter 3): random binary labellings of Gaussian
points in :math:`\mathbb R^3` build and verify in float64 for all seeds tried up to m = 700 and for
most at m = 1000; the rest stop with a clear ``RuntimeError`` (never a wrong net) in the last
layers, where close pairs of different labels are left beside the sinks. Exact in real
arithmetic.

Complexity: a move costs :math:`O(m)` (all samples are mapped) and there are at most
:math:`m' - k` moves: :math:`O(m^2)` time. The implementation scores a bounded number of candidate
poles (at most 4 end moves, 2 pair moves, 12 inner moves, 2 joins) and 21 re-spreads per move by
sorting the samples, :math:`O(m^2\log m)` in all; memory :math:`O(m)`
(:math:`O(m\cdot L)` if the per-layer angles are recorded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from lnbook.geometry import plane_basis

__all__ = [
    "plane_basis",
    "MoveRecord",
    "LNNet",
    "build_ln_net",
    "layer_bound",
    "block_weights",
    "identity_block",
    "to_plane",
    "circle_angles",
    "verify_ln_net",
]

SQRT3 = math.sqrt(3.0)
DEFAULT_ARC = 0.2
FINAL_ARC = 2.0 * math.pi / 3.0
BOOK_MERGE = 1e-11  # adjacent clusters of one label closer than this (relative to the arc) are booked as one
WIDTH_GUARD = 2.0  # the pole keeps at least this many widths of the moved cluster away from it
RATIO_MIN_SAMPLES = 64  # below this many samples the re-spread parameter stays 1 (speed; float64 has room)
RATIOS = tuple(float(r) for r in np.exp(np.linspace(-5.0, 5.0, 21)))  # free parameter of the re-spread
LANDING_EPS = 2.2e-16  # landing error of a move with lever s: about LANDING_EPS * cond(S) / s (measured)
LANDING_SHARE = 1e-2  # a landing is precise if that error is below this share of the sink's zone
INNER_TRIES = 6  # inner clusters scored when no end gives a precise move
FIRST_LAYER_TRIES = 512  # random directions scored for the first projection (the smallest gap between labels)
LANDING_LIMIT = 0.3  # a move whose estimated landing error exceeds this share of the sink's zone is refused
LANDING_TRIES = 6  # candidates built and checked, in order of rank, until one lands on its target
GOOD_ENOUGH = 0.9  # a move should keep 90% of the current smallest gap between classes
# numerical settings (the layer count and the theorem do not depend on them): where the tangent
# point T sits in the gap next to the moved cluster (share of the room), the re-spread parameters
SETTINGS = {"fractions": (0.5, 0.3), "ratios": RATIOS, "book_merge": BOOK_MERGE, "guard": WIDTH_GUARD}


_E = plane_basis().numpy()


def to_plane(z) -> np.ndarray:
    """Plane coordinates :math:`E^\\top z` of points ``z`` of shape ``(..., 3)`` (numpy or torch)."""
    z = z.detach().cpu().numpy() if isinstance(z, torch.Tensor) else np.asarray(z, dtype=np.float64)
    return z @ _E


def circle_angles(z) -> np.ndarray:
    """Angles (radians) of the LN outputs ``z`` (shape ``(..., 3)``) in the plane basis :func:`plane_basis`."""
    u = to_plane(z)
    return np.arctan2(u[..., 1], u[..., 0])


def layer_bound(n_distinct: int, n_classes: int) -> int:
    r"""The theorem's bound on the number of LN layers: :math:`m' - k + 1` for :math:`k\ge 2`, 1 for :math:`k=1`.

    ``n_distinct`` is :math:`m'`, the number of distinct samples, ``n_classes`` is :math:`k`.
    The first LN layer, then one block per cluster that is not a sink: :math:`1 + m' - k` (the
    binary finish only ever shortens the net).
    """
    if n_classes <= 1:
        return 1
    return 1 + n_distinct - n_classes


def block_weights(S: np.ndarray, pole: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Weight and bias of ``Linear(3,3)`` realising :math:`u \mapsto \sqrt3\,\mathrm{normalise}(S(u/\sqrt3 - o))`.

    :math:`W = E (S/\sqrt 3) E^\top`, :math:`b = -E S o` (float64 tensors).
    """
    S = np.asarray(S, dtype=np.float64)
    pole = np.asarray(pole, dtype=np.float64)
    W = _E @ (S / SQRT3) @ _E.T
    b = -_E @ (S @ pole)
    return torch.from_numpy(W.copy()), torch.from_numpy(b.copy())


def _linear(weight: torch.Tensor, bias: torch.Tensor) -> nn.Linear:
    """A float64 ``nn.Linear`` with the given weight ``(out, in)`` and bias, built without random init."""
    lin = nn.Linear.__new__(nn.Linear)
    nn.Module.__init__(lin)
    lin.in_features, lin.out_features = int(weight.shape[1]), int(weight.shape[0])
    lin.weight = nn.Parameter(weight.to(torch.float64).clone())
    lin.bias = nn.Parameter(bias.to(torch.float64).clone())
    return lin


def _ln() -> nn.LayerNorm:
    return nn.LayerNorm(3, eps=0.0, elementwise_affine=False, dtype=torch.float64)


def identity_block() -> list[nn.Module]:
    """``[Linear(3,3) = identity, LN]``: the identity on the LN circle (padding a net to a fixed depth)."""
    return [_linear(torch.eye(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)), _ln()]


@dataclass
class MoveRecord:
    """What one hidden block (``Linear(3,3) -> LN``) of the construction did.

    ``kind`` is ``"merge"`` (cluster ``moved`` joined the sink ``onto`` of its label; ``end`` says
    where ``moved`` sat: ``"front"``, ``"back"`` or ``"inner"`` when both ends were sinks) or
    ``"join"`` (last resort: an end joined its neighbour of the same label, a non-sink that moves
    on later) or
    ``"cut"`` (binary finish: the pole is on the circle in the gap between the two runs of labels;
    ``moved = -1``, ``pole_gap`` is half that gap). Clusters are named by their smallest sample
    index (a sink keeps its name).
    ``members`` lists the sample indices carried by the moved cluster. ``pole`` is :math:`o` in
    unit-circle plane coordinates, ``pole_gap`` its distance to the moved point (small values cost
    precision: the block's Lipschitz constant at :math:`p` is about ``1/pole_gap``),
    ``visibility_margin`` is :math:`\\min_{v\\ne p} (1 - \\langle v, o\\rangle)` over the other samples
    (PBA: must be > 0), ``separation`` the smallest angle between consecutive clusters of different
    labels after the block (radians, on an arc of width ``arc_width``).
    """

    layer: int
    kind: str
    end: str
    moved: int
    onto: int | None
    label: int
    members: list[int]
    pole: tuple[float, float]
    pole_gap: float
    visibility_margin: float
    separation: float
    n_clusters: int
    tangent_fraction: float = 0.0
    moved_also: int | None = None
    onto_also: int | None = None
    members_also: list = field(default_factory=list)


class LNNet(nn.Sequential):
    """The constructed LN-Net: an ``nn.Sequential`` with the construction's record attached.

    Attributes: ``trace`` (list of :class:`MoveRecord`, one per hidden block), ``n_classes``,
    ``n_ln_layers``, ``bound`` (the theorem's bound), ``n_distinct``, ``initial_separation`` and
    ``min_separation`` (radians), ``class_angles`` (final angle of each class point), ``angles``
    (``(n_ln_layers, m)`` array of every sample's angle after each LN layer, when recorded),
    ``labels`` (the labels of the samples, as given), ``note`` (e.g. the trivial one-class case).
    """

    trace: list
    n_classes: int

    def predict(self, X) -> torch.Tensor:
        """``argmax`` of the logits for inputs ``X`` of shape ``(m, n)`` (float64)."""
        X = torch.as_tensor(X, dtype=torch.float64)
        with torch.no_grad():
            return self(X).argmax(dim=-1)

    def ln_outputs(self, X) -> list[torch.Tensor]:
        """The output of every LN layer for inputs ``X`` (list of ``(m, 3)`` tensors)."""
        out = []
        h = torch.as_tensor(X, dtype=torch.float64)
        with torch.no_grad():
            for module in self:
                h = module(h)
                if isinstance(module, nn.LayerNorm):
                    out.append(h)
        return out


@dataclass
class _State:
    theta: np.ndarray  # angle of every sample (unit circle, plane coords)
    order: list = field(default_factory=list)  # cluster leaders in angular order
    label: dict = field(default_factory=dict)  # leader -> label
    members: dict = field(default_factory=dict)  # leader -> np.ndarray of sample indices
    count: dict = field(default_factory=dict)  # label -> number of clusters
    hint: np.ndarray | None = None  # the samples in angular order (speeds up the sorts of candidate scores)


def _unit(a):
    a = np.asarray(a, dtype=np.float64)
    return np.stack([np.cos(a), np.sin(a)], axis=-1)


def _check_inputs(X, y):
    if isinstance(X, torch.Tensor):
        X = X.detach().cpu().numpy()
    if isinstance(y, torch.Tensor):
        y = y.detach().cpu().numpy()
    try:
        X = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"X must be a real (m, n) array of samples, got {type(X).__name__}") from err
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"X must have shape (m, n) (one sample per row), got shape {X.shape}")
    m, n = X.shape
    if n < 1:
        raise ValueError("X must have at least one feature (n >= 1)")
    if m < 2:
        raise ValueError(f"build_ln_net needs at least 2 samples, got m={m}")
    if not np.isfinite(X).all():
        bad = np.argwhere(~np.isfinite(X).all(axis=1)).ravel()
        raise ValueError(f"X contains non-finite values (NaN or inf) in rows {bad[:10].tolist()}; clean the input first")
    y_arr = np.asarray(y)
    if y_arr.shape != (m,):
        raise ValueError(f"y must have shape ({m},) (one label per sample), got shape {y_arr.shape}")
    if y_arr.dtype.kind == "f":
        if not np.isfinite(y_arr).all() or not np.all(y_arr == np.round(y_arr)):
            raise TypeError("y must hold integer class labels 0, 1, ..., K-1")
        y_arr = y_arr.astype(np.int64)
    elif y_arr.dtype.kind not in "iub":
        raise TypeError(f"y must hold integer class labels 0, 1, ..., K-1, got dtype {y_arr.dtype}")
    y_arr = y_arr.astype(np.int64)
    if (y_arr < 0).any():
        raise ValueError("y must hold non-negative integer labels 0, 1, ..., K-1 (logit j scores label j)")
    return X, y_arr


def _distinct_samples(X, y):
    """Group identical rows; raise if identical rows carry different labels (no net can split them)."""
    uniq, inverse = np.unique(X, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    if len(uniq) < len(X):
        order = np.lexsort((y, inverse))
        g, lab = inverse[order], y[order]
        clash = np.nonzero((g[1:] == g[:-1]) & (lab[1:] != lab[:-1]))[0]
        if len(clash):
            a, b = int(order[clash[0]]), int(order[clash[0] + 1])
            a, b = min(a, b), max(a, b)
            raise ValueError(
                f"samples {a} and {b} are identical but have different labels ({int(y[a])} and {int(y[b])}); "
                "no function, hence no network, can separate them: remove or relabel one of them"
            )
    return inverse, len(uniq)


def _first_layer(X, y, groups, n_groups, arc, seed, tries=None):
    r"""Choose a direction :math:`w` so that :math:`z_i = \langle w, \tilde x_i\rangle` separates distinct samples.

    Returns (weight (3, n), bias (3,), theta (m,)). The angle is :math:`\theta_i = \arctan(\lambda z_i + \mu)`,
    monotone in :math:`z_i`, mapped onto :math:`[-\varphi/2, \varphi/2]`.
    """
    m, n = X.shape
    mean = X.mean(axis=0)
    scale = float(np.max(np.abs(X - mean))) or 1.0
    Xc = (X - mean) / scale
    if tries is None:  # small problems have room in float64; large ones need the widest smallest gap
        tries = FIRST_LAYER_TRIES if m >= RATIO_MIN_SAMPLES else 16
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
    a = lam * w / scale
    weight = np.outer(_E[:, 1], a)  # (3, n)
    bias = _E[:, 0] + _E[:, 1] * (mu - float(a @ mean))
    theta = np.arctan(lam * z + mu)
    return torch.from_numpy(weight), torch.from_numpy(bias), theta


def pole_for_move(theta_p: float, theta_target: float, c: float) -> tuple[np.ndarray, float]:
    r"""Pole :math:`o` that sends the circle point at angle ``theta_p`` onto the one at ``theta_target``.

    :math:`o` lies on the line through :math:`p` and the target :math:`X`, beyond :math:`p`, and on
    the tangent to the unit circle at :math:`T = (\cos c, \sin c)`, where the tangent angle ``c``
    lies strictly between ``theta_p`` and the midpoint of ``theta_p`` and ``theta_target``.
    Returns ``(o, s)`` with :math:`s = \|o - p\|`.
    """
    p = _unit(theta_p)
    mid = 0.5 * (theta_p + theta_target)
    sgn = 1.0 if theta_p > theta_target else -1.0
    d = sgn * np.array([-math.sin(mid), math.cos(mid)])  # unit vector from the target towards p
    dT = sgn * math.sin(c - mid)  # <d, T>, exact
    if not dT > 0:
        raise ValueError("the tangent point must lie between p and the midpoint of p and the target")
    s = 2.0 * math.sin((c - theta_p) / 2) ** 2 / dT  # (1 - <p,T>) / <d,T>: then <o,T> = 1
    return p + s * d, s


def _apply(theta: np.ndarray, pole: np.ndarray, arc: float, ratio: float = 1.0):
    """Map every sample angle through the projection from ``pole``, then re-spread onto [-arc/2, arc/2].

    Returns ``(new_theta, S)`` (numpy model of one block; the net's own float64 output is used as
    the state, this model only scores candidate moves).
    """
    cx = np.cos(theta) - pole[0]
    cy = np.sin(theta) - pole[1]
    base = math.atan2(-pole[1], -pole[0])
    alpha = np.arctan2(cy, cx) - base
    alpha = (alpha + math.pi) % (2 * math.pi) - math.pi  # the cone of directions seen from the pole
    lo, hi = float(alpha.min()), float(alpha.max())
    D = np.array([[math.cos(base + lo), math.cos(base + hi)], [math.sin(base + lo), math.sin(base + hi)]])
    h = arc / 2
    Tm = np.array([[math.cos(h), ratio * math.cos(h)], [-math.sin(h), ratio * math.sin(h)]])
    S = Tm @ np.linalg.inv(D)
    yx = S[0, 0] * cx + S[0, 1] * cy
    yy = S[1, 0] * cx + S[1, 1] * cy
    return np.arctan2(yy, yx), S


def _sample_separation(theta, y) -> float:
    """Smallest angle between two samples of different labels that are adjacent in angular order."""
    order = np.argsort(theta, kind="stable")
    lab = y[order]
    diff = lab[1:] != lab[:-1]
    if not diff.any():
        return math.inf
    return float(np.diff(theta[order])[diff].min())


def _runs(labels: np.ndarray) -> int:
    return 1 + int(np.count_nonzero(labels[1:] != labels[:-1])) if len(labels) else 0


def _soft_separation(theta, y, cid=None, count: int = 16, hint=None):
    """Score of a candidate move: (smallest gap between adjacent samples of different labels,
    mean log of the ``count`` smallest such gaps).

    With ``cid`` (the cluster of each sample) a configuration in which some cluster's samples are
    scattered among another label's samples scores ``(-inf, -inf)``: the sorted samples must form
    as many label runs as the clusters (sorted by mean angle) do. ``hint``, a permutation that
    (nearly) sorts ``theta``, only makes the sort faster.
    """
    order = np.argsort(theta, kind="stable") if hint is None else hint[np.argsort(theta[hint], kind="stable")]
    lab = y[order]
    diff = lab[1:] != lab[:-1]
    if cid is not None:
        sums = np.bincount(cid, weights=theta)
        cnt = np.bincount(cid)
        alive = np.nonzero(cnt)[0]
        means = sums[alive] / cnt[alive]
        if _runs(y[alive][np.argsort(means, kind="stable")]) != _runs(lab):
            return (-math.inf, -math.inf)
    if not diff.any():
        return (math.inf, math.inf)
    gaps = np.diff(theta[order])[diff]
    if len(gaps) > count:
        gaps = np.partition(gaps, count - 1)[:count]
    low = float(gaps.min())
    if low <= 0:
        return (low, -math.inf)
    return (low, float(np.log(gaps).mean()))


def _choose_sinks(order: list, label: dict, theta: np.ndarray) -> dict:
    """One **sink** cluster per label: every other cluster is moved onto the sink of its label, once.

    Two labels: the two clusters on either side of one boundary between labels (so that no wrap
    round is ever needed: the ends are peeled until the two sinks are all that is left): the widest
    boundary in the middle half of the arc among those whose order of labels is the opposite of
    the tightest pairs of different labels (those can then leave by a pair move). More labels: inside the shortest run of consecutive clusters
    that holds every label, for each label its cluster with the widest gaps to its neighbours.
    """
    pos = np.array([theta[c] for c in order])
    gaps = np.diff(pos)
    labs = [label[c] for c in order]
    n = len(order)

    def gap(i):  # gap between cluster i and i + 1 (inf beyond the ends)
        return float(gaps[i]) if 0 <= i < n - 1 else math.inf

    classes = sorted(set(labs))
    if len(classes) == 2:
        bounds = [i for i in range(n - 1) if labs[i] != labs[i + 1]]
        # the tightest pairs of different labels can only leave by a pair move, which needs the
        # sinks in the opposite order: vote over the 8 tightest pairs, the tighter the louder
        tight = sorted(bounds, key=gap)[:8]
        vote = sum((1 if labs[i] == classes[0] else -1) * -math.log(max(gap(i), 1e-300)) for i in tight)
        want = classes[1] if vote > 0 else classes[0]  # label of the left sink
        best = max(bounds, key=lambda i: (labs[i] == want, n // 4 <= i <= (3 * n) // 4, gap(i)))
        return {labs[best]: order[best], labs[best + 1]: order[best + 1]}
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
    sinks = {}
    for i in range(win[0], win[1] + 1):
        room = min(gap(i - 1), gap(i))
        if labs[i] not in sinks or room > sinks[labs[i]][0]:
            sinks[labs[i]] = (room, order[i])
    return {lab: c for lab, (room, c) in sinks.items()}



def _zone(th, order, label, q) -> float:
    """The **zone** of cluster ``q``: its distance to the nearest cluster of another label."""
    other = np.array([th[c] for c in order if label[c] != label[q]])
    return float(np.min(np.abs(other - th[q]))) if len(other) else math.inf

def _best_move(movable, best, order, pos, th, y, cid, state, sinks, settings, current, arc_width, pool):
    """Score the moves of the clusters ``movable`` onto their sinks; return the best so far.

    A move is ``(key, kind, end, p_id, q, pole, s_gap, f, also, rank)`` (``also``: see
    :func:`_best_pair_move`); every scored move is appended to ``pool``. The ranking is described
    in the module docstring.
    """
    trials = []
    for end, p_id, *to in movable:
        q = to[0] if to else sinks[state.label[p_id]]
        i, tp, tq = pos[p_id], float(th[p_id]), float(th[q])
        b_ang = abs(tq - tp)
        step = 1 if tq > tp else -1
        near = [abs(float(th[order[i + step]]) - tp)]  # gap to the neighbour on the sink's side
        if 0 <= i - step < len(order):
            near.append(abs(float(th[order[i - step]]) - tp))  # and on the other side
        room = min(min(near), 0.6 * b_ang)
        for frac in settings["fractions"]:
            trials.append(("merge", end, p_id, q, tq, frac * room / b_ang if b_ang > 0 else 0.0))
    zone = {q: _zone(th, order, state.label, q) for q in {t[3] for t in trials}}
    width = {c: float(np.ptp(th[state.members[c]])) for c in {t[2] for t in trials} | set(zone)}
    for kind, end, p_id, q, target, f in trials:
        tp = float(th[p_id])
        b_ang = abs(target - tp)
        sgn = 1.0 if target > tp else -1.0
        if not (0 < f < 0.5 and f * b_ang > 0):
            continue
        try:
            pole, s_gap = pole_for_move(tp, target, tp + sgn * f * b_ang)
        except ValueError:
            continue
        if not s_gap > max(1e-14, settings["guard"] * width[p_id]):
            continue
        # a join's target may be too close to resolve (<v, o> = 1 to rounding): the landing check guards it
        others = (cid != p_id) & ((cid != q) | (q in sinks.values()))
        V = _unit(th[others])
        if not np.min(0.5 * (np.sum((V - pole) ** 2, axis=1) - (pole @ pole - 1.0))) > 0:
            continue  # another cluster is visible from the pole: it would fold too
        new_theta, S = _apply(th, pole, arc_width)
        key = _soft_separation(new_theta, y, cid, hint=state.hint)
        # expected miss: rounding over the lever (amplified by the conditioning of S), plus p's own
        # spread magnified by the lever ratio (b + s) / s
        miss = (LANDING_EPS * np.linalg.cond(S) + width[p_id] * (b_ang + s_gap)) / s_gap
        trusted = miss < LANDING_LIMIT * zone[q]  # else tried only if nothing better; the landing is checked
        precise = miss < LANDING_SHARE * zone[q]
        rank = (key[0] > 0, trusted, precise, key[0] >= settings.get("good", GOOD_ENOUGH) * current, s_gap, key)
        cand = (key, kind, end, p_id, q, pole, s_gap, f, None, rank)
        pool.append(cand)
        if best is None or rank > best[-1]:
            best = cand
    return best


def _best_pair_move(best, order, pos, th, y, cid, state, sinks, sink_ids, settings, current, arc_width, pool):
    r"""Score **pair moves**: an end cluster :math:`a` and its neighbour :math:`b` (of another
    label, neither a sink) both land on their sinks in one block.

    The pole is the intersection of the lines :math:`a S_a` and :math:`b S_b`, beyond :math:`a` and
    :math:`b`; it is a valid move if exactly :math:`a` and :math:`b` are visible from it. Where
    :math:`a` and :math:`b` are very close, a single move needs a lever :math:`s \approx g^2/4\,d`
    (gap :math:`g`, distance :math:`d` to the sink), while the pair move's lever is about
    :math:`g\,d/G` (:math:`G` the gap between the sinks): the near arc magnifies the pair apart.
    Returns the better of ``best`` and the pair moves (``also = (b, S_b)``).
    """
    for end, i, j in (("front", 0, 1), ("back", len(order) - 1, len(order) - 2)):
        if len(order) < 4 or j < 0:
            continue
        a, b = order[i], order[j]
        if a in sink_ids or b in sink_ids or state.label[a] == state.label[b]:
            continue
        qa, qb = sinks[state.label[a]], sinks[state.label[b]]
        P, Q, A, B = _unit(th[a]), _unit(th[b]), _unit(th[qa]), _unit(th[qb])
        # P + t (P - A) = Q + u (Q - B)
        M = np.column_stack([P - A, -(Q - B)])
        if abs(np.linalg.det(M)) < 1e-300:
            continue
        t, u = np.linalg.solve(M, Q - P)
        if t > 0 and u > 0:  # the lines meet beyond a and b: a -> S_a, b -> S_b
            pairs, kind = ((a, qa), (b, qb)), "merge"
        elif t < -1 and u < -1:  # they meet beyond the sinks: S_a -> a, S_b -> b (a, b become the sinks)
            pairs, kind = ((qa, a), (qb, b)), "swap"
        else:
            continue
        pole = P + t * (P - A)
        if not pole @ pole > 1.0:
            continue
        seen = _unit(th) @ pole - 1.0  # > 0: visible from the pole (on the near arc)
        mine = np.isin(cid, [c for c, _ in pairs])
        if not (seen[mine].min() > 0 and (not (~mine).any() or seen[~mine].max() < 0)):
            continue
        s_gap = float(min(np.linalg.norm(pole - _unit(th[c])) for c, _ in pairs))
        widths = max(float(np.ptp(th[state.members[c]])) for c, _ in pairs)
        if not s_gap > max(1e-14, settings["guard"] * widths):
            continue
        zone = min(_zone(th, order, state.label, q) for _, q in pairs)
        new_theta, S = _apply(th, pole, arc_width)
        key = _soft_separation(new_theta, y, cid, hint=state.hint)
        miss = max(
            (LANDING_EPS * np.linalg.cond(S) + float(np.ptp(th[state.members[c]])) * (abs(float(th[t] - th[c])) + lever)) / lever
            for c, t in pairs
            for lever in [float(np.linalg.norm(pole - _unit(th[c])))]
        )
        trusted = miss < LANDING_LIMIT * zone
        precise = miss < LANDING_SHARE * zone
        rank = (key[0] > 0, trusted, precise, key[0] >= settings.get("good", GOOD_ENOUGH) * current, s_gap, key)
        if best is None or rank > best[-1]:
            (c1, t1), also = pairs
            best = (key, kind, end, c1, t1, pole, s_gap, 0.0, also, rank)
        (c1, t1), also = pairs
        pool.append((key, kind, end, c1, t1, pole, s_gap, 0.0, also, rank))
    return best


def build_ln_net(
    X,
    y,
    *,
    arc_width: float = DEFAULT_ARC,
    final_arc_width: float = FINAL_ARC,
    seed: int = 0,
    record_angles: bool = False,
    verify: bool = True,
) -> LNNet:
    r"""Build a width-3 LN-Net that classifies the samples ``X`` (shape ``(m, n)``) with labels ``y`` exactly.

    Returns an :class:`LNNet` (an ``nn.Sequential`` in float64): ``Linear(n,3)``, ``LN``, then
    ``B`` blocks ``Linear(3,3), LN``, then ``Linear(3, K)`` with ``K = max(2, max(y)+1)``; logit
    ``j`` scores label ``j``. The number of LN layers is at most :func:`layer_bound` (``m' - 1`` for
    ``k >= 2`` classes among ``m'`` distinct samples). One class only: the trivial net (one LN layer,
    a constant read-out), recorded in ``net.note``.

    ``arc_width`` is the width of the arc on which the samples are kept between moves,
    ``final_arc_width`` the arc on which the ``k`` class points end (it sets the read-out margin),
    ``seed`` drives the choice of the first projection, ``record_angles`` stores every sample's
    angle after each LN layer (``net.angles``), ``verify`` runs the module on ``X`` and raises
    ``RuntimeError`` if any prediction is wrong (it never should in float64 within the tested range).

    Raises ``ValueError`` for fewer than 2 samples, non-finite values, wrong shapes, negative labels,
    and identical samples with different labels (naming their indices).
    """
    return _build_once(
        X, y, arc_width=arc_width, final_arc_width=final_arc_width, seed=seed,
        record_angles=record_angles, verify=verify, settings=SETTINGS,
    )


def _build_once(X, y, *, arc_width, final_arc_width, seed, record_angles, verify, settings) -> LNNet:
    """The body of :func:`build_ln_net`, with the numerical settings ``settings`` (see ``SETTINGS``)."""
    X, y = _check_inputs(X, y)
    if not (0 < arc_width < math.pi / 2 and 0 < final_arc_width < math.pi):
        raise ValueError("arc_width must lie in (0, pi/2) and final_arc_width in (0, pi)")
    m, n = X.shape
    groups, n_distinct = _distinct_samples(X, y)
    classes = sorted(set(y.tolist()))
    k = len(classes)
    K = max(2, int(y.max()) + 1)

    # ---- the state: one cluster per distinct sample --------------------------------------------
    leaders = {}
    for i in range(m):
        leaders.setdefault(int(groups[i]), i)
    first_arc = final_arc_width if n_distinct == k else arc_width
    W1, b1, theta = _first_layer(X, y, groups, n_distinct, first_arc, seed)
    modules: list[nn.Module] = []
    modules += [_linear(W1, b1), _ln()]

    # the state is what the net itself computes: the float64 outputs of the last LN layer
    with torch.no_grad():
        Z = modules[1](modules[0](torch.from_numpy(X)))
    theta = circle_angles(Z)
    state = _State(theta=theta.copy())
    members = {}
    for i in range(m):
        members.setdefault(leaders[int(groups[i])], []).append(i)
    state.members = {c: np.array(v) for c, v in members.items()}
    state.label = {c: int(y[c]) for c in state.members}
    state.order = sorted(state.members, key=lambda c: state.theta[c])
    for c in state.order:
        state.count[state.label[c]] = state.count.get(state.label[c], 0) + 1
    # every member of a cluster sits exactly where its leader sits (identical rows)
    angles = [state.theta.copy()] if record_angles else None
    trace: list[MoveRecord] = []
    initial_sep = _sample_separation(state.theta, y)
    min_sep = initial_sep

    note = ""
    if k == 1:
        note = "single class: trivial net (the read-out is constant, every sample gets the one label)"
    layer = 1
    cid = np.array([leaders[int(groups[i])] for i in range(m)])  # sample -> cluster leader
    sinks = _choose_sinks(state.order, state.label, state.theta) if k >= 2 else {}
    sink_ids = set(sinks.values())
    while k >= 2 and len(state.order) > k:
        # clusters of one label that already coincide (to rounding) are merged in the books, no layer needed
        th = state.theta
        state.hint = np.argsort(th, kind="stable")
        i = 0
        while i + 1 < len(state.order) and len(state.order) > k:
            a, b = state.order[i], state.order[i + 1]
            if state.label[a] == state.label[b] and abs(th[b] - th[a]) <= settings["book_merge"] * arc_width:
                if b in sink_ids:  # the sink survives the booking
                    a, b = b, a
                    state.order[i] = a
                state.members[a] = np.concatenate([state.members[a], state.members[b]])
                cid[state.members[b]] = a
                del state.members[b]
                state.count[state.label[a]] -= 1
                state.order.pop(i + 1)
            else:
                i += 1
        if len(state.order) <= k:
            break
        if k == 2 and _runs(y[np.argsort(th, kind="stable")]) == 2:
            # binary finish: the classes already form two contiguous arcs; a pole ON the circle in
            # the gap between them sends the two arcs to opposite halves of the circle (inscribed
            # angle: theta -> theta/2 + const on each side, with a jump of pi across the pole)
            srt = np.argsort(th, kind="stable")
            cut = int(np.nonzero(y[srt][1:] != y[srt][:-1])[0][0])
            g_lo, g_hi = float(th[srt[cut]]), float(th[srt[cut + 1]])
            pole = _unit(0.5 * (g_lo + g_hi))
            Wb, bb = block_weights(np.eye(2), pole)
            lin, ln = _linear(Wb, bb), _ln()
            modules += [lin, ln]
            with torch.no_grad():
                Z = ln(lin(Z))
            state.theta = circle_angles(Z)
            for lab in classes:  # one cluster per class in the books
                ids = [c for c in state.order if state.label[c] == lab]
                for c in ids[1:]:
                    state.members[ids[0]] = np.concatenate([state.members[ids[0]], state.members[c]])
                    cid[state.members[c]] = ids[0]
                    del state.members[c]
                state.count[lab] = 1
            state.order = sorted(state.members, key=lambda c: state.theta[c])
            layer += 1
            sep = _sample_separation(state.theta, y)
            trace.append(
                MoveRecord(
                    layer=layer,
                    kind="cut",
                    end="",
                    moved=-1,
                    onto=None,
                    label=-1,
                    members=[],
                    pole=(float(pole[0]), float(pole[1])),
                    pole_gap=0.5 * (g_hi - g_lo),
                    visibility_margin=0.0,
                    separation=sep,
                    n_clusters=len(state.order),
                )
            )
            if record_angles:
                angles.append(state.theta.copy())
            break
        order = state.order
        pos = {c: i for i, c in enumerate(order)}
        # the clusters that may move: the non-sink ends; if both ends are sinks, the first and the
        # last non-sink cluster (the sinks beyond it then wrap round to the other end)
        ends = [(end, c) for end, c in (("front", order[0]), ("back", order[-1])) if c not in sink_ids]
        inner = [c for c in order[1:-1] if c not in sink_ids]
        if not ends:
            # both ends are sinks: the first and the last non-sink cluster (the arc is cut open there)
            ends = [("inner", c) for c in dict.fromkeys([inner[0], inner[-1]])]
        current = _soft_separation(th, y, cid, hint=state.hint)[0]
        best = None
        pool = []  # every scored candidate: tried in order of rank until one really lands
        tried = {c for _, c in ends}
        # first the ends; only if no end gives a precise move, also the inner clusters with the most room
        for movable in (ends, "pair", "reverse", "inner", "join"):
            if best is not None and best[-1][0] and best[-1][2]:  # valid and precise
                break
            if movable == "pair":
                best = _best_pair_move(best, order, pos, th, y, cid, state, sinks, sink_ids, settings, current, arc_width, pool)
                continue
            if movable == "reverse":
                # a sink at an end moves onto the nearest other cluster of its label, which becomes
                # the sink (where the clusters that should move to it have no room to jump)
                movable = []
                for end, c in (("front", order[0]), ("back", order[-1])):
                    if c in sink_ids:
                        step = 1 if end == "front" else -1
                        mates = [d for d in order[::step] if d != c and state.label[d] == state.label[c]]
                        if mates:
                            movable.append((end, c, mates[0]))
                if not movable:
                    continue
            elif movable == "inner":
                rooms = {c: min(abs(float(th[order[pos[c] - 1]] - th[c])), abs(float(th[order[pos[c] + 1]] - th[c])))
                         for c in inner if c not in tried}
                movable = [("inner", c) for c in sorted(rooms, key=rooms.get, reverse=True)[:INNER_TRIES]]
            elif movable == "join":
                # last resort: an end joins the next cluster when it has the same label (a short,
                # precise hop where the gap to it is too small for a jump to the sink); the joined
                # cluster moves on later, so this move also removes one cluster
                movable = [
                    (end, c, order[pos[c] + (1 if end == "front" else -1)])
                    for end, c in (("front", order[0]), ("back", order[-1]))
                    if c not in sink_ids and len(order) > 1
                    and state.label[order[pos[c] + (1 if end == "front" else -1)]] == state.label[c]
                ]
            best = _best_move(movable, best, order, pos, th, y, cid, state, sinks, settings, current, arc_width, pool)
        if best is None:
            raise RuntimeError(f"layer {layer + 1}: two clusters of different labels coincide in float64")
        pool.sort(key=lambda c: c[-1], reverse=True)
        failure = None
        for cand in pool[:LANDING_TRIES]:
            score, kind, end, p_id, q, pole, s_gap, f, also, _ = cand
            if not score[0] > 0:
                break
            moves = [(p_id, q)] + ([also] if also else [])
            if kind == "merge" and p_id in sink_ids:
                kind = "swap"  # a sink moved onto another cluster of its label, which becomes the sink
            elif kind == "merge" and q not in sink_ids:
                kind = "join"
            last = len(order) - len(moves) == k
            out_arc = final_arc_width if last else arc_width
            # the re-spread has one free parameter (a projective map of the arc fixing its ends):
            # choose it to re-expand the squeezed part
            ratio = 1.0
            if not last and m >= RATIO_MIN_SAMPLES and len(order) >= 3:  # (small problems do not need it: speed)
                for r in settings["ratios"]:
                    key = _soft_separation(_apply(th, pole, arc_width, r)[0], y, cid, hint=state.hint)
                    if key > score:
                        score, ratio = key, r
            # visibility margin (PBA): 1 - <v, o> over samples of other clusters
            others = ~np.isin(cid, [c for c, _ in moves])
            V = _unit(th[others])
            vis = float(np.min(0.5 * (np.sum((V - pole) ** 2, axis=1) - (pole @ pole - 1.0)))) if others.any() else 1.0
            _, S = _apply(th, pole, out_arc, ratio)
            Wb, bb = block_weights(S, pole)
            lin, ln = _linear(Wb, bb), _ln()
            with torch.no_grad():
                Z_new = ln(lin(Z))
            new_theta = circle_angles(Z_new)
            failure = None
            for c, t in moves:  # where the moved samples really landed (the net's own output)
                miss = float(np.max(np.abs(new_theta[state.members[c]] - new_theta[t])))
                other = new_theta[y != state.label[t]]
                room = float(np.min(np.abs(other - new_theta[t]))) if len(other) else math.inf
                if not miss < 0.5 * room:
                    failure = (
                        f"layer {layer + 1}: cluster {c} landed {miss:.1e} rad from its target, nearer to another "
                        "label than to it (float64 rounding over a short lever)"
                    )
            if failure is None:
                break
        if not score[0] > 0:
            raise RuntimeError(
                f"layer {layer + 1}: no move keeps the classes apart in float64 (best separation {score[0]:.3e}); "
                "the samples are too close for this construction"
            )
        if failure is not None:
            raise RuntimeError(failure)
        modules += [lin, ln]
        Z = Z_new
        state.theta = new_theta
        moved_members = state.members[p_id]
        also_members = state.members[also[0]] if also else None
        for c, t in moves:
            if c in sink_ids:  # a swap: the target becomes the sink of its label
                sinks[state.label[c]] = t
                sink_ids = set(sinks.values())
            state.members[t] = np.concatenate([state.members[t], state.members[c]])
            cid[state.members[c]] = t
            del state.members[c]
            state.count[state.label[c]] -= 1
            state.order = [d for d in state.order if d != c]
        state.order.sort(key=lambda c: state.theta[c])
        layer += 1
        sep = _sample_separation(new_theta, y)
        min_sep = min(min_sep, sep)
        trace.append(
            MoveRecord(
                layer=layer,
                kind=kind,
                end=end,
                moved=int(p_id),
                onto=None if q is None else int(q),
                label=int(state.label[p_id]),
                members=[int(i) for i in moved_members],
                pole=(float(pole[0]), float(pole[1])),
                pole_gap=float(s_gap),
                visibility_margin=vis,
                separation=sep,
                n_clusters=len(state.order),
                tangent_fraction=float(f),
                moved_also=None if also is None else int(also[0]),
                onto_also=None if also is None else int(also[1]),
                members_also=[] if also is None else [int(i) for i in also_members],
            )
        )
        if record_angles:
            angles.append(new_theta.copy())

    # ---- read-out: logit j = <P_j, z> with P_j the point of class j on the circle ----------------
    R = torch.zeros(K, 3, dtype=torch.float64)
    rb = torch.full((K,), -4.0, dtype=torch.float64)  # absent labels: below every present logit (>= -3)
    if k == 1:
        rb[classes[0]] = 0.0
    else:
        for c in state.order:
            P = SQRT3 * (_E @ _unit(float(np.mean(state.theta[state.members[c]]))))
            R[state.label[c]] = torch.from_numpy(P)
            rb[state.label[c]] = 0.0
    readout = _linear(R, rb)
    modules.append(readout)
    net = LNNet(*modules)
    net.trace = trace
    net.n_classes = k
    net.n_logits = K
    net.n_distinct = n_distinct
    net.n_ln_layers = layer
    net.bound = layer_bound(n_distinct, k)
    net.initial_separation = initial_sep
    net.min_separation = min_sep
    net.class_angles = {state.label[c]: float(state.theta[c]) for c in state.order}
    net.angles = np.array(angles) if record_angles else None
    net.labels = y
    net.note = note
    net.arc_width = arc_width
    if net.n_ln_layers > net.bound:  # the theorem; never happens
        raise AssertionError(f"{net.n_ln_layers} LN layers exceed the bound {net.bound}")
    if verify:
        report = verify_ln_net(net, X, y)
        if report["errors"]:
            raise RuntimeError(
                f"the built net misclassifies {report['errors']} of {m} samples in float64 "
                f"(smallest separation {min_sep:.3e} rad): the configuration is beyond float64 precision"
            )
        net.margin = report["margin"]
    return net


def verify_ln_net(net: nn.Module, X, y, dtype=torch.float64) -> dict:
    """Run ``net`` on ``X`` (in ``dtype``) and compare ``argmax`` with ``y``.

    Returns ``{"errors": number of wrong predictions, "accuracy": fraction correct,
    "margin": min over samples of (true logit - best other logit)}``.
    """
    X = torch.as_tensor(np.asarray(X, dtype=np.float64)).reshape(len(y), -1)
    y = torch.as_tensor(np.asarray(y), dtype=torch.long)
    model = net if dtype == torch.float64 else _cast(net, dtype)
    with torch.no_grad():
        logits = model(X.to(dtype)).to(torch.float64)
    pred = logits.argmax(dim=-1)
    true = logits.gather(1, y[:, None]).squeeze(1)
    other = logits.clone()
    other.scatter_(1, y[:, None], -math.inf)
    margin = float((true - other.max(dim=1).values).min())
    errors = int((pred != y).sum())
    return {"errors": errors, "accuracy": 1.0 - errors / len(y), "margin": margin}


def _cast(net: nn.Module, dtype) -> nn.Module:
    import copy

    clone = copy.deepcopy(net)
    return clone.to(dtype)
