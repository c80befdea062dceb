r"""VC-dimension lower bound for width-3 LN-Nets, and shattering checks.

An **LN-Net of depth** :math:`D` (width 3, binary output) is the fixed architecture

.. code-block:: text

    Linear(n, 3) -> LN -> [Linear(3, 3) -> LN] x (D - 1) -> Linear(3, 2)

with :math:`D` LayerNorm layers (``eps = 0``). The class it computes is the ``argmax`` of the two
logits. Our reconstruction of the VC lower bound of Ni et al. (ICML 2024) reads

.. math:: \mathrm{VC}(\text{LN-Net}_{D}) \;\ge\; \max(D + 1,\; n + 1),

because (i) the construction of chapter 3 classifies any :math:`m` distinct points under any binary
labelling with :math:`1 + m - k \le m - 1` LN layers in exact arithmetic (:mod:`lnbook.capacity.build_exact`;
pad with identity blocks to reach exactly :math:`D`), and (ii) one LN layer already realises every affine classifier
:math:`\operatorname{sign}(\langle a, x\rangle + c)` (:func:`ln_net_from_linear`), whose VC
dimension on :math:`\mathbb R^n` is :math:`n + 1`.

:func:`exact_shatter_check` checks the corollary as stated, in exact arithmetic: for every labelling it runs
the exact construction, pads it with exact identity blocks to depth :math:`D` (:func:`pad_exact_ln_net`) and
certifies every sample through the padded net's real weights and LayerNorm
(:func:`~lnbook.capacity.build_exact.verify_exact_ln_net`); it is meant for small sets.
The float64 checks here are exhaustive too: :func:`shatter_check` builds a float64 net
(:func:`~lnbook.capacity.build_float64.build_ln_net`, which keeps the bound :math:`m - 1` below 2000 distinct
samples) for every one of the :math:`2^m` labellings and runs it; :func:`depth_d_net` follows the proof
(a padded construction, or a padded affine classifier); :func:`linear_shatters` decides linear separability of every
labelling with a linear program.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from fractions import Fraction

import numpy as np
import torch
from torch import nn

from lnbook.capacity.build_exact import ExactBlock, ExactLNNet, build_exact_ln_net, verify_exact_ln_net
from lnbook.capacity.build_float64 import build_ln_net
from lnbook.capacity.certified_reals import Real
from lnbook.capacity.circle import SQRT3, identity_block
from lnbook.core.geometry import plane_basis

__all__ = [
    "linear_vc_dimension",
    "ln_net_vc_lower_bound",
    "pad_ln_net",
    "count_ln_layers",
    "ln_net_from_linear",
    "depth_d_net",
    "linearly_separable",
    "linear_shatters",
    "shatter_check",
    "pad_exact_ln_net",
    "exact_shatter_check",
]


def linear_vc_dimension(n: int) -> int:
    """VC dimension of affine classifiers ``sign(<a, x> + c)`` on ``R^n``: ``n + 1``."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer (the input dimension), got {n!r}")
    return n + 1


def ln_net_vc_lower_bound(depth: int, n: int = 1) -> int:
    r"""Lower bound :math:`\max(D + 1, n + 1)` on the VC dimension of width-3 LN-Nets with ``depth`` LN layers.

    ``depth`` (:math:`D \ge 1`) counts LayerNorm layers, ``n`` is the input dimension.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be a positive integer (the number of LN layers), got {depth!r}")
    return max(depth + 1, linear_vc_dimension(n))


def count_ln_layers(net: nn.Module) -> int:
    """Number of ``nn.LayerNorm`` modules in ``net``."""
    return sum(isinstance(m, nn.LayerNorm) for m in net.modules())


def pad_ln_net(net: nn.Sequential, depth: int) -> nn.Sequential:
    """Insert identity blocks before the read-out so that ``net`` has exactly ``depth`` LN layers.

    On the LN circle :math:`\\{z: \\sum z = 0, \\|z\\| = \\sqrt 3\\}` the block ``Linear = I, LN``
    is the identity, so the padded net computes the same function on every input.
    """
    have = count_ln_layers(net)
    if depth < have:
        raise ValueError(f"the net already has {have} LN layers, more than depth={depth}")
    modules = list(net)
    body, readout = modules[:-1], modules[-1]
    for _ in range(depth - have):
        body += identity_block()
    return nn.Sequential(*body, readout)


def ln_net_from_linear(a, c: float) -> nn.Sequential:
    r"""A one-LN-layer width-3 net whose class is :math:`[\langle a, x\rangle + c > 0]`.

    The first layer sends :math:`x` to the plane point :math:`u = (1, \langle a, x\rangle + c)`
    (times :math:`E`); LN maps it to the circle at angle :math:`\arctan(\langle a, x\rangle + c)`,
    whose second coordinate has the sign of :math:`\langle a, x\rangle + c`; the read-out compares
    the points at angles :math:`\pm\pi/4`.
    """
    a = np.asarray(a, dtype=np.float64).ravel()
    E = plane_basis().cpu().numpy()
    lin = nn.Linear(len(a), 3, dtype=torch.float64)
    ln = nn.LayerNorm(3, eps=0.0, elementwise_affine=False, dtype=torch.float64)
    out = nn.Linear(3, 2, dtype=torch.float64)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(np.outer(E[:, 1], a)))
        lin.bias.copy_(torch.from_numpy(E[:, 0] + E[:, 1] * float(c)))
        for j, angle in enumerate((-math.pi / 4, math.pi / 4)):
            out.weight[j] = torch.from_numpy(SQRT3 * (E @ np.array([math.cos(angle), math.sin(angle)])))
        out.bias.zero_()
    return nn.Sequential(lin, ln, out)


def depth_d_net(X, y, depth: int) -> nn.Sequential:
    r"""A binary width-3 LN-Net with exactly ``depth`` LN layers that classifies ``(X, y)``: the proof of the VC bound.

    If the construction of chapter 3 (:func:`~lnbook.capacity.build_float64.build_ln_net`) needs at most ``depth``
    LN layers (always when there are at most ``depth + 1`` distinct samples), its net padded with identity
    blocks; otherwise, if the labelling is linearly separable (always for affinely independent points), the
    one-LN-layer net of an affine classifier (:func:`ln_net_from_linear`), padded. Raises ``ValueError``
    when neither applies. Labels must be 0 and 1.
    """
    X = np.asarray(X, dtype=np.float64)
    X = X[:, None] if X.ndim == 1 else X
    y = np.asarray(y)
    if not set(y.tolist()) <= {0, 1}:
        raise ValueError("depth_d_net is for binary labels 0 and 1")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be a positive integer (the number of LN layers), got {depth!r}")
    net = build_ln_net(X, y)
    if net.n_ln_layers <= depth:
        return pad_ln_net(net, depth)
    separable, ac = linearly_separable(X, y)
    if separable:
        linear = ln_net_from_linear(ac[:-1], float(ac[-1]))
        if len(set(y.tolist())) == 1 and y[0] == 0:  # a constant labelling: the LP's separator says "class 1"
            linear = ln_net_from_linear(np.zeros(X.shape[1]), -1.0)
        return pad_ln_net(linear, depth)
    raise ValueError(
        f"the construction needs {net.n_ln_layers} LN layers and the labelling is not linearly separable: "
        f"this proof gives no net of depth {depth} for it"
    )


def linearly_separable(X, y) -> tuple[bool, np.ndarray | None]:
    r"""Is there :math:`(a, c)` with :math:`(2y_i - 1)(\langle a, x_i\rangle + c) \ge 1` for all :math:`i`?

    Decided exactly (up to the LP solver's tolerance) with ``scipy.optimize.linprog``. Returns
    ``(separable, (a, c) as one vector or None)``.
    """
    from scipy.optimize import linprog

    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    y = np.asarray(y)
    s = 2.0 * (y == y.max()).astype(np.float64) - 1.0 if len(set(y.tolist())) > 1 else np.ones(len(y))
    if len(set(y.tolist())) < 2:
        return True, np.concatenate([np.zeros(X.shape[1]), [1.0]])
    A = -s[:, None] * np.hstack([X, np.ones((len(X), 1))])
    res = linprog(np.zeros(X.shape[1] + 1), A_ub=A, b_ub=-np.ones(len(X)), bounds=(None, None), method="highs")
    return bool(res.status == 0), (res.x if res.status == 0 else None)


def _labellings(m: int):
    for bits in itertools.product((0, 1), repeat=m):
        yield np.array(bits, dtype=np.int64)


def linear_shatters(X) -> bool:
    """Whether affine classifiers shatter the rows of ``X`` (every labelling is linearly separable)."""
    X = np.asarray(X, dtype=np.float64)
    return all(linearly_separable(X, y)[0] for y in _labellings(len(X)))


def shatter_check(X, depth: int | None = None, *, symmetric: bool = True, **build_kwargs) -> dict:
    r"""Build, pad and run a width-3 LN-Net for every binary labelling of the rows of ``X``.

    ``depth`` (default :math:`m - 1`) is the number of LN layers every net is padded to. With
    ``symmetric=True`` only labellings with :math:`y_0 = 0` are built; the other half follows by
    swapping the two logits (a relabelling of the read-out), which the check also performs.

    Returns ``{"m", "depth", "labellings", "correct", "max_ln_layers", "min_margin", "failures"}``;
    the set is shattered by depth-``depth`` LN-Nets iff ``correct == labellings``.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    m = len(X)
    if m < 2:
        raise ValueError("shatter_check needs at least 2 points")
    depth = m - 1 if depth is None else depth
    correct = 0
    total = 0
    max_layers = 0
    min_margin = math.inf
    failures = []
    Xt = torch.from_numpy(X)
    for y in _labellings(m):
        if symmetric and y[0] == 1:
            continue
        try:
            net = build_ln_net(X, y, verify=False, **build_kwargs)
        except (RuntimeError, ValueError) as err:
            failures.append((y.tolist(), str(err)))
            total += 2 if symmetric else 1
            continue
        max_layers = max(max_layers, net.n_ln_layers)
        padded = pad_ln_net(net, max(depth, net.n_ln_layers))
        with torch.no_grad():
            logits = padded(Xt)
        for flip in ((False, True) if symmetric else (False,)):
            yy = 1 - y if flip else y
            lg = logits[:, [1, 0]] if flip else logits
            rep = _report(lg, yy)
            total += 1
            if rep["errors"] == 0 and net.n_ln_layers <= depth:
                correct += 1
                min_margin = min(min_margin, rep["margin"])
            else:
                failures.append((yy.tolist(), f"{rep['errors']} errors, {net.n_ln_layers} LN layers"))
    return {
        "m": m,
        "depth": depth,
        "labellings": total,
        "correct": correct,
        "max_ln_layers": max_layers,
        "min_margin": min_margin,
        "failures": failures,
    }


def pad_exact_ln_net(net: ExactLNNet, depth: int) -> ExactLNNet:
    r"""The exact net with identity blocks appended until it has ``depth`` LN layers.

    An identity block has pole :math:`o = 0` and :math:`A = \sqrt3 I`, i.e. the weight :math:`E E^\top = P`
    (the identity on the plane the LN outputs live in) and bias 0; LN fixes every point of the circle
    :math:`C` (mean 0, variance 1). Raises ``ValueError`` if the net is deeper than ``depth``.
    """
    if net.depth > depth:
        raise ValueError(f"the exact net has {net.depth} LN layers, more than depth={depth}")
    s3 = Real(3).sqrt()
    pad = ExactBlock((Real(0), Real(0)), ((s3, Real(0)), (Real(0), s3)), Fraction(0), -1, -1, "pad")
    return dataclasses.replace(net, blocks=list(net.blocks) + [pad] * (depth - net.depth),
                               members={c: list(v) for c, v in net.members.items()})


def exact_shatter_check(X, depth: int | None = None) -> dict:
    """The corollary ``cor-vc`` in exact arithmetic: every binary labelling of the rows of ``X`` gets an exact
    net padded to exactly ``depth`` LN layers (default :math:`m - 1`), certified on every sample through its
    real weights and LayerNorm (:func:`~lnbook.capacity.build_exact.verify_exact_ln_net`).

    Returns ``{"m", "depth", "labellings", "correct", "min_margin", "failures"}``; exponential in ``m``: for
    small sets.
    """
    X = np.asarray(X, dtype=np.float64)
    X = X[:, None] if X.ndim == 1 else X
    m = len(X)
    depth = m - 1 if depth is None else depth
    correct, margin, failures = 0, math.inf, []
    for y in _labellings(m):
        net = build_exact_ln_net(X, y)
        try:
            padded = pad_exact_ln_net(net, depth)
        except ValueError as err:
            failures.append((y.tolist(), str(err)))
            continue
        rep = verify_exact_ln_net(padded, X, y)
        if rep["errors"] == 0 and rep["coincide"] and padded.depth == depth:
            correct += 1
            margin = min(margin, rep["margin"])
        else:
            failures.append((y.tolist(), f"{rep['errors']} errors, coincide={rep['coincide']}, depth {padded.depth}"))
    return {"m": m, "depth": depth, "labellings": 2**m, "correct": correct, "min_margin": margin, "failures": failures}


def _report(logits: torch.Tensor, y: np.ndarray) -> dict:
    yt = torch.as_tensor(y, dtype=torch.long)
    pred = logits.argmax(dim=-1)
    true = logits.gather(1, yt[:, None]).squeeze(1)
    other = logits.clone()
    other.scatter_(1, yt[:, None], -math.inf)
    return {"errors": int((pred != yt).sum()), "margin": float((true - other.max(dim=1).values).min())}

