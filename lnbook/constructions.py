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

**The algorithm** keeps every sample on a short arc. It chooses one **sink** cluster per label
(two labels: the two clusters on either side of one label boundary near the middle, the one whose
sinks keep the widest distance to the other label; more labels: one cluster of each label inside
the shortest stretch of clusters holding every label). Every block then performs one **move**:

* **merge** (PMA): an **end** cluster :math:`p` of the arc (the front or the back; a cluster from
  inside only when both ends are sinks) lands on the sink :math:`q` of its label: the pole lies
  on the line :math:`pq` beyond :math:`p`, so :math:`p` and :math:`q` lie on one ray from it;
* **parallelization breaking** (PBA): the pole also lies on the tangent at a point :math:`T` of the
  circle on the sink's side of :math:`p`; the clusters between :math:`p` and :math:`T` (the **near
  set**, seen by the pole) are folded, all others keep their order and stay distinct, so no two
  samples of different labels become parallel. In the proof the near set is :math:`\{p\}`. In
  float64 it may also hold up to ``NEAR_MAX - 1`` **companions**, the clusters next to :math:`p`:
  they do not merge but are *relocated* into the far arc (folded across :math:`T`); a companion
  whose line to its own sink passes through the pole lands on it (a **pair move**);
* **re-spread**: the linear part :math:`S` maps the two extreme image directions onto the ends of
  the arc :math:`[-w/2, w/2]`, symmetrically; below 2000 distinct samples the width shrinks with
  the number :math:`n` of clusters, :math:`w(n) = \min(0.25, 3/\sqrt n)` (``arc_width=None``; see
  below), from 2000 on it stays at 0.25 and is straightened;
* **binary finish**: for two labels, as soon as each label forms one contiguous run along the arc,
  one block with its pole **on** the circle in the gap between the runs sends the two runs to
  opposite halves of the circle (trace kind ``"cut"``; it only shortens the net).

Every merging block merges at least one cluster, so the depth is at most :math:`1 + m' - k`
(:func:`layer_bound`), plus the straightening blocks described below (float64, large problems only). Sinks never move and companions are single samples, so no rounding spread
is ever magnified twice.

**Why the arc is short, or straightened.** A block whose pole lies on or outside the circle and
which keeps the arc's width has Schwarzian derivative :math:`\le -3/2` on it
(:mod:`lnbook.schwarzian`); these add up along the net, and by Sturm's comparison theorem an arc of
fixed width :math:`w` collapses near its ends after about :math:`53/w^2` blocks. With
:math:`w \propto n^{-1/2}` the budget stays bounded, but the landing margin of a move scales like
:math:`w^2/n^3` and runs out near :math:`n = 10^4`. So from 2000 distinct samples on the builder keeps
:math:`w = 0.25` and pays the budget back with **straightening blocks**: a block whose pole lies
*inside* the circle is a bijection (nothing merges) with *positive* Schwarzian, about
:math:`3R/(1-R)` for a pole at distance :math:`R` from the centre; one is inserted (pole chosen by
:func:`straightening_pole`) whenever the end gaps fall below 0.8 of the middle ones, at most once per
8 merges (about one block in twenty in practice). They are trace records of kind ``"straighten"``
and are counted apart: merging blocks :math:`\le m' - k`, straightening blocks
:math:`\le` :func:`straightening_allowance`.

**float64.** The landing error of a cluster moved with lever :math:`s = \|o - p\|` is about
``LANDING_EPS * COND / s`` (plus its own spread times :math:`(b+s)/s`). Candidate moves (both ends,
near sets of 1 to ``NEAR_MAX`` clusters, ``TANGENTS`` tangent points each, the first companion also
aimed at chosen gaps or its sink) are judged in the image and ranked: precise (estimated error
below ``1/(2 SAFE)`` of the room around the target), comfortably precise (``COMFORT``), companions
keep out of another label's sink's room, no gap below ``CROWD`` of the median gap, the end with
more clusters left, companions land beyond the first ``DEEP`` far clusters, the smallest distance
between classes kept, fewer companions, a longer lever. The builder then builds up to
``LANDING_TRIES`` of them in order and keeps the first whose samples land where predicted in the
net's own float64 output and whose pole sees exactly its near set; if none does it stops with a
``RuntimeError``. It never returns a wrong net. Adjacent clusters of one label closer than
``BOOK_MERGE`` (relative to the arc), and clusters that touch the sink of their label (closer than
``BOOK_SINK`` of its room, or among its samples), are booked as one cluster without a layer.

The state after every block is the float64 output of the net itself (not an idealised copy), so
what is checked is what the module computes.

**Numerical range** (measured, see the book's chapter 3): random binary labellings of Gaussian
points in :math:`\mathbb R^3` build and verify in float64 for every seed tried up to m = 10 000
(8 of 8 seeds there). Where a configuration is beyond float64 the builder stops with a clear
``RuntimeError``, never with a wrong net. Exact in real arithmetic.

Complexity: a move costs :math:`O(m)` (all samples are mapped), a sort of the clusters, and a
bounded number of vectorised candidate scores (the companions' landings are located by binary
search); there are at most :math:`m' - k` moves: :math:`O(m^2 \log m)` time, :math:`O(m)` memory
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
    "straightening_allowance",
    "straightening_pole",
    "arc_width_for",
    "block_weights",
    "block_image",
    "identity_block",
    "pole_for_move",
    "to_plane",
    "circle_angles",
    "verify_ln_net",
]

SQRT3 = math.sqrt(3.0)
FINAL_ARC = 2.0 * math.pi / 3.0
ARC_CAP = 0.25  # widest arc kept between moves (small problems)
ARC_SCALE = 3.0  # arc width w(n) = min(ARC_CAP, ARC_SCALE / sqrt(n)) for n clusters (the Schwarzian budget)
BOOK_MERGE = 1e-11  # adjacent clusters of one label closer than this (relative to the arc) are booked as one
BOOK_SINK = 0.05  # a cluster next to the sink of its label, closer than this share of the sink's room, joins it in the books
LANDING_EPS = 2.2e-16  # landing error of a move with lever s: about LANDING_EPS * cond(S) / s (measured)
COND = 3.0  # cond(S) of an end move is about 2; the estimate uses 3
SAFE = 2.5  # a landing is precise if its estimated error is below 1/(2 SAFE) of the room around its target
COMFORT = 10.0  # ... and comfortably precise above this ratio
CROWD = 0.3  # a move should create no gap below CROWD x the median gap between clusters
NEAR_MAX = 10  # at most this many clusters seen by the pole (the moved end and its companions)
TANGENTS = 16  # tangent points scanned per near set
SQUEEZE = 0.55  # the tangent point lies at most this far into the gap after the near set
LANDING_TRIES = 6  # candidates built and checked, in order of rank, until one lands where predicted
FIRST_LAYER_TRIES = 512  # random directions scored for the first projection (the smallest gap between labels)
SMALL = 64  # below this many samples the first layer scores 16 directions
KEEP = 3  # best candidates kept from each scan
FINAL_TILTS = tuple(float(t) for t in np.exp(np.linspace(-4.0, 4.0, 41)))  # the last block's free parameter, scanned
STRAIGHTEN_FROM = 2000  # from this many distinct samples on, the builder keeps a wide arc and straightens it
STRAIGHTEN_EVERY = 8  # ... with at most one straightening block per this many merging blocks
STRAIGHTEN_BELOW = 0.8  # ... when the mean end gap falls below this share of the mean middle gap
STRAIGHTEN_R = np.linspace(0.3, 0.97, 68)  # distances of the interior pole from the centre, scanned
STRAIGHTEN_W = np.linspace(-0.4, 0.4, 9)  # its direction, in units of the arc width, scanned
DEEP = 5  # companions preferably land beyond this many far clusters from the end (not in the room next to it)
_SCAN_1 = np.geomspace(0.03, 1.0, TANGENTS)  # tangent points for a single move (share of the room)
_SCAN_J = np.geomspace(1e-6, 1.0, TANGENTS)  # ... and with companions (share of the gap after the near set)

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


def straightening_allowance(n_distinct: int, n_classes: int, straighten: bool | None = None) -> int:
    r"""Extra blocks the float64 builder may add to straighten a wide arc: :math:`\lfloor (m' - k)/8 \rfloor`
    when it straightens (``straighten=None``: from ``STRAIGHTEN_FROM`` = 2000 distinct samples on, as
    :func:`build_ln_net` decides), else 0.

    They merge nothing (their pole is inside the circle); the theorem's count :math:`1 + m' - k` is
    about the merging blocks and holds exactly. ``net.bound`` is the sum of the two.
    """
    if straighten is None:
        straighten = n_distinct >= STRAIGHTEN_FROM
    if n_classes <= 1 or not straighten:
        return 0
    return (n_distinct - n_classes) // STRAIGHTEN_EVERY


def arc_width_for(n_clusters: int) -> float:
    r"""Width of the arc on which the builder keeps :math:`n` clusters: :math:`\min(0.25, 4/\sqrt n)` radians.

    Short enough that the accumulated distortion of the re-spreads (the Schwarzian budget of
    chapter 3, about :math:`50/w^2` blocks) is not exhausted, wide enough for float64 levers.
    """
    return min(ARC_CAP, ARC_SCALE / math.sqrt(max(int(n_clusters), 1)))


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
    where ``moved`` sat: ``"front"``, ``"back"``, or ``"inner"`` when both ends were sinks),
    ``"cut"`` (binary finish: the pole is on the circle in the gap between the two runs of labels;
    ``moved = -1``, ``pole_gap`` is half that gap) or ``"straighten"`` (float64, large problems: the
    pole is inside the circle, nothing merges; ``moved = -1``, ``pole_gap`` is the pole's distance to
    the circle). Clusters are named by their smallest sample
    index (a sink keeps its name).
    ``members`` lists the sample indices carried by the moved cluster. ``pole`` is :math:`o` in
    unit-circle plane coordinates, ``pole_gap`` the lever :math:`\\|o - p\\|` (small values cost
    precision: the block's Lipschitz constant at :math:`p` is about ``1/pole_gap``),
    ``visibility_margin`` is :math:`\\min (1 - \\langle v, o\\rangle)` over the samples the pole does
    not see (PBA: must be > 0), ``separation`` the smallest angle between consecutive samples of
    different labels after the block (radians, on the arc of width ``arc_width``).
    A **pair move** also merges ``moved_also`` (samples ``members_also``) into its sink
    ``onto_also``. ``relocated`` lists the companions: clusters seen by the pole besides ``moved``
    that did not merge but were moved elsewhere on the arc (float64 only; they move on later).
    ``tangent_fraction`` says where the tangent point sat: 0 at ``moved``, 1 at the first cluster
    the pole does not see.
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
    relocated: list = field(default_factory=list)


class LNNet(nn.Sequential):
    """The constructed LN-Net: an ``nn.Sequential`` with the construction's record attached.

    Attributes: ``trace`` (list of :class:`MoveRecord`, one per hidden block), ``n_classes``,
    ``n_ln_layers``, ``bound`` (the theorem's bound), ``n_distinct``, ``initial_separation`` and
    ``min_separation`` (radians), ``class_angles`` (final angle of each class point), ``angles``
    (``(n_ln_layers, m)`` array of every sample's angle after each LN layer, when recorded),
    ``arc_widths`` (the width of the arc after each LN layer), ``labels`` (the labels of the
    samples, as given), ``note`` (e.g. the trivial one-class case).
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


# ---------------------------------------------------------------------------------- input checks


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
    a = lam * w / scale
    weight = np.outer(_E[:, 1], a)  # (3, n)
    bias = _E[:, 0] + _E[:, 1] * (mu - float(a @ mean))
    return torch.from_numpy(weight), torch.from_numpy(bias)


# ---------------------------------------------------------------------------------- geometry of a move


def _unit(a):
    if np.ndim(a) == 0:
        return np.array([math.cos(a), math.sin(a)])
    a = np.asarray(a, dtype=np.float64)
    return np.stack([np.cos(a), np.sin(a)], axis=-1)


def _poles(theta_p: float, theta_target: float, c) -> tuple[np.ndarray, np.ndarray]:
    """:func:`pole_for_move` for an array ``c`` of tangent angles: poles ``(T, 2)`` and levers ``(T,)``."""
    c = np.asarray(c, dtype=np.float64)
    p = _unit(theta_p)
    mid = 0.5 * (theta_p + theta_target)
    sgn = 1.0 if theta_p > theta_target else -1.0
    d = sgn * np.array([-math.sin(mid), math.cos(mid)])  # unit vector from the target towards p
    dT = sgn * np.sin(c - mid)  # <d, T>, exact
    s = 2.0 * np.sin((c - theta_p) / 2) ** 2 / dT  # (1 - <p,T>) / <d,T>: then <o,T> = 1
    return p[None, :] + s[:, None] * d[None, :], s


def pole_for_move(theta_p: float, theta_target: float, c: float) -> tuple[np.ndarray, float]:
    r"""Pole :math:`o` that sends the circle point at angle ``theta_p`` onto the one at ``theta_target``.

    :math:`o` lies on the line through :math:`p` and the target :math:`X`, beyond :math:`p`, and on
    the tangent to the unit circle at :math:`T = (\cos c, \sin c)`, where the tangent angle ``c``
    lies strictly between ``theta_p`` and the midpoint of ``theta_p`` and ``theta_target``.
    Returns ``(o, s)`` with :math:`s = \|o - p\|`.
    """
    mid = 0.5 * (theta_p + theta_target)
    if not (math.sin(c - mid) * (1.0 if theta_p > theta_target else -1.0)) > 0:
        raise ValueError("the tangent point must lie between p and the midpoint of p and the target")
    o, s = _poles(theta_p, theta_target, [c])
    return o[0], float(s[0])


def _second_hit(poles: np.ndarray, theta: float) -> np.ndarray:
    """Angle of the second point where the line from each pole through the circle point ``theta`` meets the circle."""
    d = _unit(theta)[None, :] - poles
    t = (np.sum(poles * poles, axis=1) - 1.0) / np.sum(d * d, axis=1)
    w = poles + t[:, None] * d
    return np.arctan2(w[:, 1], w[:, 0])


def _second_hit_many(poles: np.ndarray, thetas: np.ndarray) -> np.ndarray:
    """:func:`_second_hit` for several circle points at once: angles ``(T, len(thetas))``."""
    d = _unit(thetas)[None, :, :] - poles[:, None, :]
    t = (np.sum(poles * poles, axis=1)[:, None] - 1.0) / np.sum(d * d, axis=2)
    w = poles[:, None, :] + t[:, :, None] * d
    return np.arctan2(w[..., 1], w[..., 0])


def _line_meet(P, A, Q, B):
    """Intersection of the line :math:`P + t(P - A)` with each line :math:`Q + u(Q - B_i)`: points ``(T, 2)``, ``t``, ``u``."""
    d1 = P - A
    d2 = Q[None, :] - B
    r = Q - P
    det = -d1[0] * d2[:, 1] + d1[1] * d2[:, 0]
    with np.errstate(divide="ignore", invalid="ignore"):  # parallel lines: inf/nan, rejected by the caller
        t = (-r[0] * d2[:, 1] + r[1] * d2[:, 0]) / det
        u = (d1[0] * r[1] - d1[1] * r[0]) / det
        return P[None, :] + t[:, None] * d1[None, :], t, u


def block_image(theta: np.ndarray, pole: np.ndarray, arc: float, tilt: float = 1.0):
    """Map every sample angle through the projection from ``pole``, then re-spread onto [-arc/2, arc/2].

    Returns ``(new_theta, S)`` (numpy model of one block; the net's own float64 output is used as
    the state, this model only predicts where the samples go). ``S`` sends the two extreme image
    directions to the ends of the arc; a projective map of the arc that fixes its ends has one free
    parameter left, ``tilt``: 1 treats both ends alike, ``tilt > 1`` stretches the end at
    ``-arc/2`` by about ``tilt`` and shrinks the other by about ``1/tilt`` (used by the last block,
    to spread the class points evenly).
    """
    cx = np.cos(theta) - pole[0]
    cy = np.sin(theta) - pole[1]
    # the directions seen from the pole lie within a half-turn of ``base``: towards the centre from a pole
    # outside the circle, outwards from a pole inside it (a straightening block; its arc lies that way)
    base = math.atan2(-pole[1], -pole[0]) if float(pole @ pole) > 1.0 else math.atan2(pole[1], pole[0])
    alpha = np.arctan2(cy, cx) - base
    alpha = (alpha + math.pi) % (2 * math.pi) - math.pi  # the cone of directions seen from the pole
    lo, hi = float(alpha.min()), float(alpha.max())
    D = np.array([[math.cos(base + lo), math.cos(base + hi)], [math.sin(base + lo), math.sin(base + hi)]])
    h = arc / 2
    Tm = np.array([[math.cos(h), tilt * math.cos(h)], [-math.sin(h), tilt * math.sin(h)]])
    S = Tm @ np.linalg.inv(D)
    yx = S[0, 0] * cx + S[0, 1] * cy
    yy = S[1, 0] * cx + S[1, 1] * cy
    return np.arctan2(yy, yx), S


def _runs(labels: np.ndarray) -> int:
    return 1 + int(np.count_nonzero(labels[1:] != labels[:-1])) if len(labels) else 0


def _end_ratios(pos: np.ndarray) -> tuple[float, float]:
    """Mean gap over the outer twentieth of the sorted angles ``pos`` at the front and at the back, each
    divided by the mean gap over the middle twentieth (1: evenly spread; small: squeezed ends)."""
    gaps = np.diff(pos)
    k = max(1, len(gaps) // 20)
    mid = gaps[len(gaps) // 2 - k // 2 : len(gaps) // 2 - k // 2 + k].mean()
    return float(gaps[:k].mean() / mid), float(gaps[-k:].mean() / mid)


def _part_ratios(part: np.ndarray, k: int) -> tuple[float, float]:
    """:func:`_end_ratios` from the ``3(k+1)`` points it uses: the first, middle and last ``k + 1``."""
    g = np.diff(part)
    front, mid, back = g[:k], g[k + 1 : 2 * k + 1], g[2 * k + 2 :]
    return float(front.mean() / mid.mean()), float(back.mean() / mid.mean())


def straightening_pole(pos, arc: float):
    r"""The interior pole of a straightening block for clusters at sorted angles ``pos`` on an arc of width ``arc``.

    Scans the pole's distance from the centre (``STRAIGHTEN_R``) and its direction (``STRAIGHTEN_W``
    times the arc width) and keeps the one after which the mean end gaps, front and back, are
    closest to the mean middle gap (:func:`block_image` with that pole and the same width). Returns
    ``(pole or None if no scanned pole improves, end ratios before, end ratios after)``.
    """
    pos = np.sort(np.asarray(pos, dtype=np.float64))
    if pos.ndim != 1 or len(pos) < 3 or not np.all(np.isfinite(pos)):
        raise ValueError("pos must be a 1-d array of at least 3 finite angles")
    if not np.all(np.diff(pos) > 0):
        raise ValueError("pos must hold distinct angles (merge coinciding clusters first)")
    before = _end_ratios(pos)
    best = (max(abs(math.log(r)) for r in before), None, before)
    n = len(pos)
    k = max(1, (n - 1) // 20)
    m0 = (n - 1) // 2 - k // 2
    part = pos[np.r_[0 : k + 1, m0 : m0 + k + 1, n - 1 - k : n]]  # the points that the ratios use (and the two ends)
    for om in STRAIGHTEN_W * arc:
        for R in STRAIGHTEN_R:
            pole = R * _unit(float(om))
            new, _ = block_image(part, pole, arc)
            ratios = _part_ratios(new, k)
            bad = max(abs(math.log(r)) for r in ratios)
            if bad < best[0]:
                best = (bad, pole, ratios)
    return best[1], before, best[2]


def _sample_separation(theta, y) -> float:
    """Smallest angle between two samples of different labels that are adjacent in angular order."""
    order = np.argsort(theta, kind="stable")
    lab = y[order]
    diff = lab[1:] != lab[:-1]
    if not diff.any():
        return math.inf
    return float(np.diff(theta[order])[diff].min())


def _nearest(sorted_pos: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Distance from each ``a`` to the nearest of ``sorted_pos`` (inf if empty)."""
    if len(sorted_pos) == 0:
        return np.full(np.shape(a), math.inf)
    i = np.searchsorted(sorted_pos, a)
    hi = sorted_pos[np.minimum(i, len(sorted_pos) - 1)]
    lo = sorted_pos[np.maximum(i - 1, 0)]
    return np.minimum(np.abs(hi - a), np.abs(a - lo))


# ---------------------------------------------------------------------------------- the builder


@dataclass
class _Snapshot:
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
class _Candidate:
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


def _choose_sinks(snap: _Snapshot) -> dict:
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


def _clean(c: _Candidate) -> bool:
    """Precise, comfortably so, keeps the sinks' room, no crowding, companions deep, classes kept apart."""
    return all(c.rank[:4]) and all(c.rank[5:7])


class _Builder:
    """State and moves of :func:`build_ln_net` (see the module docstring)."""

    def __init__(self, X, y, arc_width, final_arc_width, seed, record_angles, straighten=None):
        self.X, self.y = X, y
        self.m = len(y)
        self.fixed_arc = arc_width
        self.final_arc = final_arc_width
        self.seed = seed
        self.groups, self.n_distinct = _distinct_samples(X, y)
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
        self.n_straighten = 0

    # -- helpers -------------------------------------------------------------------------------

    def width(self, n_clusters: int) -> float:
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
        mem = self.members[c]
        return float(np.ptp(self.theta[mem])) if len(mem) > 1 else 0.0

    def _push(self, lin: nn.Linear, Z: torch.Tensor, arc: float) -> None:
        self.modules += [lin, _ln()]
        self.Z = Z
        self.theta = circle_angles(Z)
        self.arcs.append(arc)
        if self.record_angles:
            self.angles.append(self.theta.copy())

    def snapshot(self) -> _Snapshot:
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
        return _Snapshot(order, pos, lab, sep, medg, sink_at, zones, by_label, hull, lo_edge, hi_edge)

    # -- the run -------------------------------------------------------------------------------

    def run(self) -> None:
        k, y = self.k, self.y
        first_arc = self.width(self.n_distinct)
        W1, b1 = _first_layer(self.X, y, self.groups, first_arc, self.seed)
        lin = _linear(W1, b1)
        with torch.no_grad():
            Z = _ln()(lin(torch.from_numpy(self.X)))
        self._push(lin, Z, first_arc)
        self.initial_separation = _sample_separation(self.theta, y)
        self.min_separation = self.initial_separation
        if k < 2:
            return
        self.sinks = _choose_sinks(self.snapshot())
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

    def book(self, snap: _Snapshot) -> _Snapshot:
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

    def binary_finish(self, snap: _Snapshot) -> None:
        """The classes already form two contiguous runs: a pole ON the circle in the gap between them
        sends the two runs to opposite halves of the circle (inscribed angle: theta -> theta/2 + const
        on each side, with a jump of pi across the pole)."""
        cut = int(np.nonzero(snap.lab[1:] != snap.lab[:-1])[0][0])
        g_lo, g_hi = float(snap.pos[cut]), float(snap.pos[cut + 1])
        pole = _unit(0.5 * (g_lo + g_hi))
        Wb, bb = block_weights(np.eye(2), pole)
        lin = _linear(Wb, bb)
        with torch.no_grad():
            Z = _ln()(lin(self.Z))
        self._push(lin, Z, math.pi)
        for lab in self.classes:  # one cluster per class in the books
            ids = [int(c) for c in snap.order if self.y[c] == lab]
            for c in ids[1:]:
                self.merge(c, ids[0])
        sep = _sample_separation(self.theta, self.y)
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
        if min(_end_ratios(snap.pos)) >= STRAIGHTEN_BELOW:
            return
        arc = self.arcs[-1]
        pole, _, _ = straightening_pole(snap.pos, arc)
        if pole is None:
            return
        pred, S = block_image(self.theta, pole, arc)
        Wb, bb = block_weights(S, pole)
        lin = _linear(Wb, bb)
        with torch.no_grad():
            Z = _ln()(lin(self.Z))
        new = circle_angles(Z)
        # a bijection of the circle: the clusters keep their order and no two labels meet
        lead = snap.order
        if not (np.all(np.diff(new[lead]) > 0) and _sample_separation(new, self.y) > 0.25 * _sample_separation(pred, self.y)):
            return  # a safeguard: keep the net as it is
        self._push(lin, Z, arc)
        self.merges_since = 0
        self.n_straighten += 1
        sep = _sample_separation(self.theta, self.y)
        self.min_separation = min(self.min_separation, sep)
        self.trace.append(
            MoveRecord(layer=len(self.arcs), kind="straighten", end="", moved=-1, onto=None, label=-1, members=[],
                       pole=(float(pole[0]), float(pole[1])), pole_gap=float(1.0 - np.linalg.norm(pole)),
                       visibility_margin=0.0, separation=sep, n_clusters=len(self.members))
        )

    # -- candidate moves -----------------------------------------------------------------------

    def end_candidates(self, snap: _Snapshot, end: str, heavy: bool) -> list:
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
            O, s = _poles(tp, tq, tp + sgn * taus)
            out += self.score(O, s, j, (taus - lo) / (first_far - lo), **base)
            if any(_clean(c) for c in out):  # a clean move: more companions cannot rank higher
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
        P, A, C = _unit(pos[idx[0]]), _unit(self.theta[q]), _unit(pos[idx[1]])
        O, t, u = _line_meet(P, A, C, _unit(targets))
        limit = _unit(pos[idx[1]] + sgn * SQUEEZE * (dist[2] - dist[1]))
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
        A = _unit(theta[q])
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
            a = _second_hit_many(O, t_c[0])
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
            out.append(_Candidate(rank, end, p, q, O[t], float(s[t]), near,
                                  (near[1], self.sinks[int(y[near[1]])]) if is_pair[t] else None,
                                  float(frac[t]) if np.isfinite(frac[t]) else math.nan, float(margin[t])))
        return out

    def inner_candidates(self, snap: _Snapshot) -> list:
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
                seen = _unit(self.theta) @ o - 1.0
                if not (seen[self.cid != p].max() < 0):
                    continue
                new, S = block_image(self.theta, o, self.width(len(order) - 1))
                err = (LANDING_EPS * np.linalg.cond(S) + self.spread(p) * (b + s)) / s
                margin = 0.5 * snap.zones[q] / err
                sep = _sample_separation(new, self.y)
                rank = (bool(margin >= SAFE), bool(margin >= COMFORT), True, True, True, True, sep > 0, -1, 3, False, float(s))
                out.append(_Candidate(rank, "inner", p, q, o, float(s), [p], None, f, float(margin)))
        return out

    # -- one block -----------------------------------------------------------------------------

    def final_tilt(self, cand: _Candidate, merges: list) -> float:
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

    def move(self, snap: _Snapshot) -> None:
        y = self.y
        n = len(snap.order)
        cnt = {"front": snap.sink_at[0], "back": n - 1 - snap.sink_at[-1]}
        cands = []
        ends = sorted(("front", "back"), key=lambda e: -cnt[e])  # the end with more clusters left first
        for end in ends:
            if any(_clean(c) and c.rank[4] for c in cands):  # a clean move from the heavier end wins anyway
                break
            cands += self.end_candidates(snap, end, heavy=cnt[end] >= cnt["back" if end == "front" else "front"])
        if not cands:
            cands = self.inner_candidates(snap)
        if not cands:
            raise RuntimeError(f"layer {len(self.arcs) + 1}: no move keeps the samples apart in float64")
        cands.sort(key=lambda c: c.rank, reverse=True)
        failure = (f"layer {len(self.arcs) + 1}: no precise move (best estimated landing margin {cands[0].margin:.2e}, "
                   f"needed {SAFE}); the samples are too close for this construction in float64")
        for cand in cands[:LANDING_TRIES]:
            if not cand.rank[0]:
                break
            merges = [(cand.p, cand.q)] + ([cand.pair] if cand.pair else [])
            merged = {c for c, _ in merges}
            companions = [c for c in cand.near if c not in merged]
            seen = _unit(self.theta) @ cand.pole - 1.0  # > 0: the pole sees the sample (near arc)
            in_near = np.isin(self.cid, cand.near)
            if not (seen[in_near].min() > 0 and (in_near.all() or seen[~in_near].max() < 0)):
                failure = f"layer {len(self.arcs) + 1}: the pole would see more than the near set"
                continue
            out_arc = self.width(n - len(merges))
            tilt = self.final_tilt(cand, merges) if out_arc == self.final_arc and self.k >= 3 else 1.0
            pred, S = block_image(self.theta, cand.pole, out_arc, tilt)
            Wb, bb = block_weights(S, cand.pole)
            lin = _linear(Wb, bb)
            with torch.no_grad():
                Z = _ln()(lin(self.Z))
            new = circle_angles(Z)
            failure = None
            for c, t in merges:  # where the moved samples really landed (the net's own output)
                miss = float(np.max(np.abs(new[self.members[c]] - new[t])))
                room = float(np.min(np.abs(new[y != y[t]] - new[t]))) if (y != y[t]).any() else math.inf
                if not miss < 0.5 * room:
                    failure = (f"layer {len(self.arcs) + 1}: cluster {c} landed {miss:.1e} rad from its target, nearer to "
                               "another label than to it (float64 rounding over a short lever)")
            for c in companions:
                room = float(np.min(np.abs(pred[y != y[c]] - pred[c]))) if (y != y[c]).any() else math.inf
                if not abs(new[c] - pred[c]) < 0.25 * room:
                    failure = f"layer {len(self.arcs) + 1}: companion {c} landed away from where it was sent"
            if failure is None:
                break
        if failure is not None:
            raise RuntimeError(failure)
        vis = float(-seen[~in_near].max()) if (~in_near).any() else 1.0
        self._push(lin, Z, out_arc)
        members = {c: self.members[c] for c, _ in merges}
        for c, t in merges:
            self.merge(c, t)
        sep = _sample_separation(self.theta, y)
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
        k, K = self.k, self.K
        R = torch.zeros(K, 3, dtype=torch.float64)
        rb = torch.full((K,), -4.0, dtype=torch.float64)  # absent labels: below every present logit (>= -3)
        if k == 1:
            rb[self.classes[0]] = 0.0
        else:
            for c, mem in self.members.items():
                P = SQRT3 * (_E @ _unit(float(np.mean(self.theta[mem]))))
                R[self.y[c]] = torch.from_numpy(P)
                rb[self.y[c]] = 0.0
        net = LNNet(*self.modules, _linear(R, rb))
        net.trace = self.trace
        net.n_classes = k
        net.n_logits = K
        net.n_distinct = self.n_distinct
        net.n_ln_layers = len(self.arcs)
        net.n_straighten = self.n_straighten
        net.bound = layer_bound(self.n_distinct, k) + (straightening_allowance(self.n_distinct, k, True) if self.straighten else 0)
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
) -> LNNet:
    r"""Build a width-3 LN-Net that classifies the samples ``X`` (shape ``(m, n)``) with labels ``y`` exactly.

    Returns an :class:`LNNet` (an ``nn.Sequential`` in float64): ``Linear(n,3)``, ``LN``, then
    ``B`` blocks ``Linear(3,3), LN``, then ``Linear(3, K)`` with ``K = max(2, max(y)+1)``; logit
    ``j`` scores label ``j``. The number of LN layers of the merging construction is at most
    :func:`layer_bound` (``m' - k + 1`` for ``k >= 2`` classes among ``m'`` distinct samples); when the
    builder straightens (see below) it adds ``net.n_straighten`` straightening blocks, at most
    :func:`straightening_allowance`, and ``net.bound`` is the sum. One class only: the trivial net
    (one LN layer, a constant read-out), recorded in ``net.note``.

    ``arc_width`` is the width of the arc on which the samples are kept between moves (``None``:
    :func:`arc_width_for` the current number of clusters), ``final_arc_width`` the arc on which
    the ``k`` class points end (it sets the read-out margin), ``seed`` drives the choice of the
    first projection, ``record_angles`` stores every sample's angle after each LN layer
    (``net.angles``), ``verify`` runs the module on ``X`` and raises ``RuntimeError`` if any
    prediction is wrong (it never should: every landing is checked on the way). ``straighten``
    (``None``: from 2000 distinct samples on) keeps the arc at its widest, 0.25 rad, and inserts a
    **straightening block** (pole inside the circle, see :func:`straightening_pole`) whenever the end
    gaps have shrunk below ``STRAIGHTEN_BELOW`` of the middle ones, at most once per
    ``STRAIGHTEN_EVERY`` merges: the wide arc buys float64 precision, the straightening pays back the
    distortion that a wide arc accumulates. Ignored with a fixed ``arc_width``.

    Raises ``ValueError`` for fewer than 2 samples, non-finite values, wrong shapes, negative labels,
    and identical samples with different labels (naming their indices); ``RuntimeError`` when the
    samples are too close for float64 (no candidate move lands precisely).
    """
    X, y = _check_inputs(X, y)
    if arc_width is not None and not (0 < arc_width < math.pi / 2):
        raise ValueError("arc_width must be None (automatic) or lie in (0, pi/2)")
    if not 0 < final_arc_width < math.pi:
        raise ValueError("final_arc_width must lie in (0, pi)")
    builder = _Builder(X, y, arc_width, final_arc_width, seed, record_angles, straighten)
    builder.run()
    net = builder.net()
    if net.n_ln_layers - net.n_straighten > layer_bound(net.n_distinct, net.n_classes) or net.n_ln_layers > net.bound:
        raise AssertionError(f"{net.n_ln_layers} LN layers ({net.n_straighten} straightening) exceed the bound {net.bound}")
    if verify:
        report = verify_ln_net(net, X, y)
        if report["errors"]:
            raise RuntimeError(
                f"the built net misclassifies {report['errors']} of {len(y)} samples in float64 "
                f"(smallest separation {net.min_separation:.3e} rad): the configuration is beyond float64 precision"
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
