r"""A certificate that a float64 LN-Net classifies its samples under *every* admissible float64 forward.

The float64 builder (:mod:`lnbook.capacity.build_float64`) places poles so close to the circle that the
net is ill-conditioned on purpose: a lever of :math:`10^{-11}` amplifies rounding by :math:`10^{11}`. Checking
the predictions under one forward (eager ``torch``) says nothing about another one (``torch.compile``, a
hand-written LayerNorm, numpy): their roundings differ, and the differences are amplified layer by layer.
This module bounds them.

**The model.** Let :math:`u = 2^{-53}`. A forward of the net (``Linear(n,3) -> LN -> [Linear(3,3) -> LN]*
-> Linear(3,K)``) is **admissible** if, at every layer, given its own computed input :math:`\hat z`,

* its ``Linear`` output :math:`\hat h` satisfies :math:`|\hat h - (W\hat z + b)| \le \gamma_{n+1}(|W||\hat z| + |b|)`
  componentwise, :math:`\gamma_k = ku/(1 - ku)` (Higham's bound: true for every summation order, with or
  without fused multiply-add);
* its LayerNorm output satisfies :math:`\|\hat z' - \mathrm{LN}(\hat h)\| \le c_{\mathrm{LN}}\, u \sqrt d\,(1 +
  \|\hat h\|/\|P\hat h\|)` with :math:`c_{\mathrm{LN}} =` ``C_LN`` :math:`= 32`. A two-pass LayerNorm (mean, then
  the centred sum of squares) or Welford's update satisfies this with :math:`c_{\mathrm{LN}} \approx 11` for
  :math:`d = 3` (the mean is exact to :math:`\approx 3u\|h\|`, the rest to a few :math:`u` relative); the one-pass
  formula :math:`\overline{h^2} - \bar h^2` does **not** (its error grows as :math:`(\|h\|/\|Ph\|)^2`).

Exact arithmetic is admissible (all errors 0). That eager ``torch`` on the CPU, ``torch.compile`` and numpy
are admissible is an assumption about their kernels (two-pass or Welford statistics), checked on nets by
``tests/capacity/test_build_float64.py``; it is not proved here.

**The bound.** :func:`certify_ln_net` runs its own forward (numpy, two-pass, itself admissible) and
propagates, per sample, a radius :math:`e_l` with :math:`\|\hat z_l^{f} - \hat z_l\| \le e_l` for every admissible
forward :math:`f`. With :math:`\delta = W(\hat z^f - \hat z) + (\text{both roundings of the Linear})`, LN depends on
:math:`P\delta`, and for :math:`a = \|P\hat h\|` and :math:`\|P\delta\| \le \Delta < a`

.. math:: \|\mathrm{LN}(\hat h + \delta) - \mathrm{LN}(\hat h)\| \le \sqrt d\,\frac{\|Q P\delta\| + \Delta^2/(a - \Delta)}{a - \Delta},

with :math:`Q` the projector orthogonal to :math:`P\hat h` (proof: integrate the derivative
:math:`(I - \hat w\hat w^\top)/\|w\|` of :math:`w \mapsto w/\|w\|` along the segment; the projector turns by at
most :math:`\|\hat w_s - \hat w\| \le s\Delta/(a - \Delta)`). Adding both LayerNorm roundings gives :math:`e_{l+1}`. No
linearisation in the inequality above. **What this is not**: a machine proof. The propagation itself runs in
float64 rounded to nearest, without outward rounding; :math:`a` is taken as the computed
:math:`\|P\hat h\|` minus :math:`8u\sqrt d\|\hat h\|`, a lower bound on the true value that is asserted
from the usual error analysis of a two-pass norm, not proved here; and :math:`c_{\mathrm{LN}} = 32` is a
constant of the model. So the result is a bound computed in float64 under the model, with slack (the
admitted errors are a few :math:`u` relative to quantities that the check then compares with margins of
order :math:`10^{-6}` and more); an interval-arithmetic version would make it a proof. At the read-out each logit moves by at
most :math:`|W_j| e + \gamma(\ldots)`, and the certificate holds when every sample's true logit beats every
other one by more than both bounds together. A radius that reaches half of :math:`\|P\hat h\|` stops the
certificate (the LN input could cross zero).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

__all__ = ["U", "C_LN", "ln_rounding", "propagate_layer", "certify_ln_net"]

U = 2.0**-53  # the unit roundoff of float64
C_LN = 32.0  # the LayerNorm rounding constant of the model (module docstring)


def _gamma(k: int) -> float:
    return k * U / (1.0 - k * U)


def _weights(lin: nn.Linear) -> tuple[np.ndarray, np.ndarray]:
    W = lin.weight.detach().to("cpu", torch.float64).numpy()
    b = lin.bias.detach().to("cpu", torch.float64).numpy() if lin.bias is not None else np.zeros(W.shape[0])
    return W, b


def _linear(z: np.ndarray, e: np.ndarray, W: np.ndarray, b: np.ndarray):
    """The centre's Linear output and the bound on both forwards' rounding, per sample and component."""
    h = z @ W.T + b
    g = _gamma(W.shape[1] + 1)
    absW = np.abs(W)
    mag = np.abs(z) @ absW.T + np.abs(b)  # |W||z| + |b|
    # the other forward's input is within e (2-norm, so within e in every component)
    rho = g * (2.0 * mag + e[:, None] * absW.sum(axis=1)[None, :])
    return h, rho


def ln_rounding(h_norm: np.ndarray, a: np.ndarray, d: int) -> np.ndarray:
    """The model's bound on one LayerNorm's rounding: ``C_LN u sqrt(d) (1 + ||h|| / ||Ph||)``."""
    return C_LN * U * math.sqrt(d) * (1.0 + h_norm / a)


def propagate_layer(z: np.ndarray, e: np.ndarray, W: np.ndarray, b: np.ndarray, rho_prev=None):
    """One ``Linear -> LN`` layer: the centre's output ``(m, d)``, the new radius ``(m,)`` (``inf`` where the
    LN input may reach zero) and the LayerNorm rounding of this layer (both forwards, ``(m,)``), for inputs
    ``z`` ``(m, n)`` known to radius ``e`` ``(m,)``. ``rho_prev``: the previous LayerNorm's rounding when ``z`` is
    an LN output of width 3 (then the error is split into a tangential part and a small radial part, see
    :func:`certify_ln_net`); ``None`` for the net's input."""
    h, rho = _linear(z, e, W, b)
    d = h.shape[1]
    Ph = h - h.mean(axis=1, keepdims=True)
    a_comp = np.linalg.norm(Ph, axis=1)
    h_norm = np.linalg.norm(h, axis=1)
    a = a_comp - 8.0 * U * math.sqrt(d) * h_norm  # a lower bound of the exact ||P h||
    scale = np.max(np.abs(Ph), axis=1, keepdims=True)
    c = Ph / np.where(scale > 0, scale, 1.0)
    out = math.sqrt(d) * c / np.linalg.norm(c, axis=1, keepdims=True)  # the centre's LN (two-pass, rescaled)
    P = np.eye(d) - 1.0 / d
    PW = P @ W
    unit_h = Ph / np.where(a_comp > 0, a_comp, 1.0)[:, None]
    QPW = PW[None] - unit_h[:, :, None] * (unit_h @ PW)[:, None, :]  # (I - u u^T) P W, per sample
    rho_n = np.linalg.norm(rho, axis=1)
    full_P, full_Q = np.linalg.norm(PW, 2), np.linalg.norm(QPW, ord=2, axis=(1, 2))
    if rho_prev is None or z.shape[1] != 3:
        big = full_P * e + rho_n  # ||P delta||
        small = full_Q * e + rho_n  # ||Q P delta||
    else:
        # both inputs lie within their rounding of the circle of radius sqrt 3: their difference is a chord
        # (tangential, at most e_plus) plus a radial part (e_plus^2 / (2 sqrt 3)) plus the roundings
        r3 = math.sqrt(3.0)
        tangent = np.cross(np.ones(3) / r3, z / np.linalg.norm(z, axis=1, keepdims=True))
        e_plus = e + rho_prev
        rest = e_plus * 2.0 * rho_prev / r3 + e_plus**2 / (2.0 * r3) + rho_prev
        big = np.linalg.norm(tangent @ PW.T, axis=1) * e_plus + full_P * rest + rho_n
        small = np.linalg.norm(np.einsum("mij,mj->mi", QPW, tangent), axis=1) * e_plus + full_Q * rest + rho_n
    room = a - big
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        moved = math.sqrt(d) * (small + big**2 / room) / room
        rounding = ln_rounding(h_norm, a, d) + ln_rounding(h_norm + big, room, d)
        new = moved + rounding
    ok = (a > 0) & (big < 0.5 * a)
    return out, np.where(ok, new, math.inf), np.where(ok, rounding, math.inf)


def certify_ln_net(net: nn.Sequential, X, y) -> dict:
    r"""Certify that ``net`` classifies every sample ``X[i]`` as ``y[i]`` under every admissible float64 forward.

    Returns ``{"certified": bool, "failures": sample indices not certified, "margin": the smallest certified
    margin (true logit minus best other, after subtracting both bounds; negative where not certified),
    "radius": (n_ln_layers, m) array of the radii e_l, "predicted": the centre forward's argmax}``. See the
    module docstring for the model and the argument (a bound computed in float64 under that model, not a
    machine proof).
    """
    mods = list(net)
    X = np.asarray(X, dtype=np.float64).reshape(len(y), -1)
    y = np.asarray(y, dtype=np.int64)
    z, e, rho_prev = X, np.zeros(len(y)), None
    radii = []
    i = 0
    while i + 1 < len(mods) and isinstance(mods[i], nn.Linear) and isinstance(mods[i + 1], nn.LayerNorm):
        if mods[i + 1].elementwise_affine or mods[i + 1].eps != 0.0:
            raise ValueError("certify_ln_net handles LayerNorm without affine parameters and eps = 0 only")
        z, e, rho_prev = propagate_layer(z, e, *_weights(mods[i]), rho_prev)
        radii.append(e)
        i += 2
    if i != len(mods) - 1 or not isinstance(mods[i], nn.Linear):
        raise ValueError("net must be Linear -> LN -> [Linear -> LN]* -> Linear")
    W, b = _weights(mods[i])
    logits, rho = _linear(z, e, W, b)
    bound = rho + np.linalg.norm(W, axis=1)[None, :] * e[:, None]
    bound = np.where(np.isfinite(e)[:, None], bound, math.inf)
    rows = np.arange(len(y))
    true_lo = logits[rows, y] - bound[rows, y]
    other_hi = logits + bound
    other_hi[rows, y] = -math.inf
    margin = true_lo - other_hi.max(axis=1)
    failures = np.nonzero(~(margin > 0))[0]
    return {"certified": len(failures) == 0, "failures": failures.tolist(),
            "margin": float(np.min(margin)) if len(margin) else math.inf,
            "radius": np.array(radii), "predicted": logits.argmax(axis=1)}
