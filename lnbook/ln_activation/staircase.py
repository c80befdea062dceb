r"""Explicit one-variable approximations with a proved error (chapter 6): the PLN staircase and its ReLU baseline.

* :func:`pln_step_network` / :func:`step_error_bound` / :func:`step_error_bound_modulus` — an explicit
  ``Linear(1, 2k) -> PLN(group size 2) -> Linear(2k, 1)`` network, a smoothed staircase, with its proved error
  bound; :func:`step_slope_for` and :func:`staircase_neurons` choose its slope and its size;
* :func:`relu_interpolant_network` / :func:`relu_error_bound` — the piecewise-linear interpolant as
  a ``Linear(1, k) -> ReLU -> Linear(k, 1)`` network, the baseline with the same count of neurons;
* :func:`pln_sigmoid_network` — PLN pairs computing a sum of sigmoids of affine forms in :math:`n` variables;
* :func:`pln_pair_widths` — the transition widths of the sigmoids of a trained PLN network.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch
from torch import nn

from lnbook.core.norms import ParallelLayerNorm
from lnbook.ln_activation.shallow_fits import check_interval
from lnbook.util.validation import check_eps, check_positive_int

__all__ = [
    "pln_step_network",
    "step_error_bound",
    "step_error_bound_modulus",
    "step_slope_for",
    "staircase_neurons",
    "relu_interpolant_network",
    "relu_error_bound",
    "pln_sigmoid_network",
    "pln_pair_widths",
]


def pln_step_network(
    g: Callable[[torch.Tensor], torch.Tensor],
    k: int,
    interval=(-1.0, 1.0),
    *,
    slope: float,
    eps: float = 1e-5,
    dtype=torch.float64,
) -> nn.Sequential:
    r"""``Linear(1, 2k) -> PLN(group size 2, p = 2, centring, eps) -> Linear(2k, 1)``: a smoothed staircase.

    Nodes :math:`x_j = a + jh` (:math:`h = (b-a)/k`, :math:`j = 0..k`), thresholds
    :math:`\theta_j = x_j - h/2`. Group :math:`j` receives :math:`(s(x - \theta_j), -s(x - \theta_j))`,
    which PLN maps to :math:`\pm\sigma_\varepsilon(s(x - \theta_j))` with
    :math:`\sigma_\varepsilon(t) = t/\sqrt{t^2 + \varepsilon}`; the read-out adds
    :math:`\Delta_j = g(x_j) - g(x_{j-1})` times the smoothed step :math:`(1 + \sigma_\varepsilon)/2`
    to :math:`g(x_0)`.
    """
    k = check_positive_int(k, "k")
    a, b = check_interval(interval)
    eps = check_eps(eps)
    if not (isinstance(slope, (int, float)) and slope > 0 and math.isfinite(slope)):
        raise ValueError(f"slope must be a finite number > 0, got {slope!r}")
    h = (b - a) / k
    nodes = a + h * torch.arange(k + 1, dtype=torch.float64)
    gv = torch.as_tensor(g(nodes), dtype=torch.float64).reshape(k + 1)
    if not bool(torch.isfinite(gv).all()):
        raise ValueError("the target returned a non-finite value at a node")
    delta = gv[1:] - gv[:-1]
    theta = nodes[1:] - h / 2
    first = nn.Linear(1, 2 * k, dtype=dtype)
    last = nn.Linear(2 * k, 1, dtype=dtype)
    with torch.no_grad():
        ones = torch.ones(k, dtype=torch.float64)  # float64 like theta: a float32 slope would move every threshold
        first.weight.copy_(torch.stack([slope * ones, -slope * ones], 1).reshape(2 * k, 1))
        first.bias.copy_(torch.stack([-slope * theta, slope * theta], 1).reshape(2 * k))
        last.weight.copy_(torch.stack([delta / 4, -delta / 4], 1).reshape(1, 2 * k))
        last.bias.fill_(float(gv[0] + gv[-1]) / 2)
    return nn.Sequential(first, ParallelLayerNorm(2, p=2, centering=True, eps=eps), last)


def step_error_bound(lipschitz: float, k: int, interval=(-1.0, 1.0), *, slope: float, eps: float = 1e-5) -> float:
    r"""The proved bound :math:`L h/2 + \pi^2 L \varepsilon / (4 s^2 h)` on the sup error of
    :func:`pln_step_network` for an :math:`L`-Lipschitz target (:math:`h = (b-a)/k`)."""
    k = check_positive_int(k, "k")
    a, b = check_interval(interval)
    h = (b - a) / k
    return lipschitz * h / 2 + math.pi**2 * lipschitz * check_eps(eps) / (4 * slope**2 * h)


def step_error_bound_modulus(omega: Callable[[float], float], k: int, interval=(-1.0, 1.0), *, slope: float, eps: float = 1e-5) -> float:
    r"""The bound :math:`\omega(h)\,(1 + \pi^2 \varepsilon / (4 s^2 h^2))` for a continuous target
    with modulus of continuity :math:`\omega` (:math:`|g(x) - g(y)| \le \omega(|x - y|)`)."""
    k = check_positive_int(k, "k")
    a, b = check_interval(interval)
    h = (b - a) / k
    return float(omega(h)) * (1 + math.pi**2 * check_eps(eps) / (4 * slope**2 * h * h))


def step_slope_for(k: int, interval=(-1.0, 1.0), *, eps: float = 1e-5) -> float:
    r"""The slope at which the smoothing term of :func:`step_error_bound` is at most the staircase
    term (then the bound is at most :math:`L h`): :math:`s = \pi\sqrt{\varepsilon/2}/h`, and at least 1."""
    k = check_positive_int(k, "k")
    a, b = check_interval(interval)
    h = (b - a) / k
    return max(1.0, math.pi * math.sqrt(check_eps(eps) / 2) / h)


# --- the ReLU baseline -------------------------------------------------------------------------


def relu_interpolant_network(g, k: int, interval=(-1.0, 1.0), *, dtype=torch.float64) -> nn.Sequential:
    r"""``Linear(1, k) -> ReLU -> Linear(k, 1)`` computing the piecewise-linear interpolant of ``g``
    at the nodes :math:`x_j = a + jh`, :math:`j = 0..k`, on :math:`[a, b]`: neuron :math:`j` is
    :math:`\mathrm{ReLU}(x - x_j)` (:math:`j = 0..k-1`) and its read-out weight is the change of slope
    there (the first one the first slope)."""
    k = check_positive_int(k, "k")
    a, b = check_interval(interval)
    h = (b - a) / k
    nodes = a + h * torch.arange(k + 1, dtype=torch.float64)
    gv = torch.as_tensor(g(nodes), dtype=torch.float64).reshape(k + 1)
    slopes = (gv[1:] - gv[:-1]) / h
    out_w = torch.cat([slopes[:1], slopes[1:] - slopes[:-1]])
    first = nn.Linear(1, k, dtype=dtype)
    last = nn.Linear(k, 1, dtype=dtype)
    with torch.no_grad():
        first.weight.fill_(1.0)
        first.bias.copy_(-nodes[:-1])
        last.weight.copy_(out_w.reshape(1, k))
        last.bias.fill_(float(gv[0]))
    return nn.Sequential(first, nn.ReLU(), last)


def relu_error_bound(lipschitz: float, k: int, interval=(-1.0, 1.0), *, second_derivative: float | None = None) -> float:
    r"""Sup error of :func:`relu_interpolant_network`: :math:`L h / 2` for an :math:`L`-Lipschitz target,
    or :math:`h^2 \|g''\|_\infty / 8` when ``second_derivative`` (the bound on :math:`|g''|`) is given."""
    k = check_positive_int(k, "k")
    a, b = check_interval(interval)
    h = (b - a) / k
    if second_derivative is not None:
        return h * h * float(second_derivative) / 8
    return lipschitz * h / 2


def pln_pair_widths(net: nn.Sequential) -> np.ndarray:
    r"""The transition widths :math:`\sqrt\varepsilon/|s_j|` of the sigmoids of ``Linear(1, 2k) -> PLN(groups of 2) ->
    Linear``: group :math:`j` fed :math:`(u, v) = (w_1 x + b_1, w_2 x + b_2)` outputs
    :math:`\pm\sigma_\varepsilon(s_j x + t_j)` with :math:`s_j = (w_1 - w_2)/2`, and :math:`\sigma_\varepsilon(s(x - \theta))`
    goes from :math:`-1/\sqrt 2` to :math:`1/\sqrt 2` over :math:`|x - \theta| \le \sqrt\varepsilon/|s|`
    (infinite where :math:`s_j = 0`)."""
    first, norm = net[0], net[1]
    if not (isinstance(norm, ParallelLayerNorm) and norm.group_size == 2 and norm.p == 2 and norm.centering):
        raise TypeError("pln_pair_widths needs Linear(1, 2k) -> ParallelLayerNorm(groups of 2, p = 2, centring) -> Linear")
    if not isinstance(first, nn.Linear) or first.in_features != 1:
        raise ValueError("pln_pair_widths needs a first layer nn.Linear(1, 2k) (one input): a pair's sigmoid width "
                         f"is defined for one input only, got {first}")
    w = first.weight.detach().double().cpu().reshape(-1)
    s = np.abs((w[0::2] - w[1::2]).cpu().numpy()) / 2
    with np.errstate(divide="ignore"):
        return np.where(s > 0, math.sqrt(norm.eps) / s, np.inf)


def pln_sigmoid_network(W, b, a, c: float = 0.0, *, eps: float = 1e-5, dtype=torch.float64) -> nn.Sequential:
    r"""``Linear(n, 2k) -> PLN(groups of 2) -> Linear(2k, 1)`` computing
    :math:`c + \sum_{j=1}^k a_j\,\sigma_\varepsilon(w_j^\top x + b_j)` on :math:`\mathbb R^n`,
    :math:`\sigma_\varepsilon(t) = t/\sqrt{t^2 + \varepsilon}`.

    Group :math:`j` receives :math:`(t_j, -t_j)` with :math:`t_j = w_j^\top x + b_j`, which PLN maps to
    :math:`\sigma_\varepsilon(t_j)(1, -1)`; the read-out weights are :math:`\pm a_j/2`. So every one-hidden-layer
    network with the sigmoidal activation :math:`\sigma_\varepsilon` (or :math:`(1 + \sigma_\varepsilon)/2`, which
    differs by constants) is a PLN network, and Cybenko's theorem applies.
    """
    W = torch.as_tensor(W, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64).reshape(-1)
    a = torch.as_tensor(a, dtype=torch.float64).reshape(-1)
    if W.ndim != 2 or not (len(b) == len(a) == W.shape[0]):
        raise ValueError("W must have shape (k, n), b and a shape (k,)")
    k, n = W.shape
    first, last = nn.Linear(n, 2 * k, dtype=dtype), nn.Linear(2 * k, 1, dtype=dtype)
    with torch.no_grad():
        first.weight.copy_(torch.stack([W, -W], 1).reshape(2 * k, n))
        first.bias.copy_(torch.stack([b, -b], 1).reshape(2 * k))
        last.weight.copy_(torch.stack([a / 2, -a / 2], 1).reshape(1, 2 * k))
        last.bias.fill_(float(c))
    return nn.Sequential(first, ParallelLayerNorm(2, p=2, centering=True, eps=check_eps(eps)), last)


MARGIN = 2.0**-20  # smallest relative margin (delta - Lh/2) / delta that staircase_neurons(large_slope=True) leaves


def staircase_neurons(lipschitz: float, delta: float, interval=(-1.0, 1.0), *, large_slope: bool = False) -> int:
    r"""Neurons of :func:`pln_step_network` that guarantee sup error :math:`\le \delta` for an
    :math:`L`-Lipschitz target (corollary of chapter 6).

    ``large_slope=False``: :math:`N = 2\lceil L(b - a)/\delta\rceil` with :math:`s^2 \ge \pi^2 L\varepsilon/(2h\delta)`.
    ``large_slope=True``: :math:`N = 2(\lfloor L(b - a)/(2\delta)\rfloor + 1)`, about half, with
    :math:`s^2 \ge \pi^2 L\varepsilon/(4h(\delta - Lh/2))` (the first term :math:`Lh/2` is then below
    :math:`\delta`, and the smoothing term fills the rest). When :math:`L(b-a)/(2\delta)` is within
    :data:`MARGIN` (relative) of an integer, the count has one more step: at :math:`k = L(b-a)/(2\delta)` exactly
    the margin :math:`\delta - Lh/2` is 0, and computed in floats it can be 0 or negative (no slope exists), as with
    ``staircase_neurons(1, 0.05, (0, 0.7), large_slope=True)``, which returned a count with
    :math:`\delta - Lh/2 = -7\cdot10^{-18}` in float64.
    """
    a, b = check_interval(interval)
    if not (lipschitz > 0 and delta > 0):
        raise ValueError("lipschitz and delta must be > 0")
    if large_slope:
        k = math.floor(lipschitz * (b - a) / (2 * delta)) + 1
        while delta - lipschitz * (b - a) / k / 2 < MARGIN * delta:  # the margin the slope divides by, in floats
            k += 1
        return 2 * k
    return 2 * math.ceil(lipschitz * (b - a) / delta)
