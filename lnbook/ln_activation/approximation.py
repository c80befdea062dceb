r"""Approximating functions of one variable with ``Linear -> norm -> Linear`` (chapter 6).

* :class:`ShallowLNForm` / :func:`shallow_ln_form` — the exact closed form of a shallow LN net
  ``Linear(1, d) -> LN -> Linear(d, 1)``: :math:`f(x) = c + (\alpha x + \beta)/\sqrt{A x^2 + 2Bx + C}`,
  whose derivative has a numerator linear in :math:`x` (at most one stationary point);
* :func:`alternation_bound` — the error below which no function with at most one turning point
  can approximate given values (the lower bound for such nets);
* :func:`pln_step_network` / :func:`step_error_bound` — an explicit ``Linear(1, 2k) -> PLN(group
  size 2) -> Linear(2k, 1)`` network, a smoothed staircase, with its proved error bound;
* :func:`relu_interpolant_network` / :func:`relu_error_bound` — the piecewise-linear interpolant as
  a ``Linear(1, k) -> ReLU -> Linear(k, 1)`` network, the baseline with the same count of neurons;
* :func:`sup_error`, :func:`trained_errors` — measured errors, of constructed and of trained nets.

Neurons are the hidden units (the width of the middle layer); the parameter count of
``Linear(1, N) -> (PLN | LN | ReLU) -> Linear(N, 1)`` without affine norms is :math:`3N + 1` for all three.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn

from lnbook.core.geometry import complement_basis
from lnbook.core.norms import ParallelLayerNorm
from lnbook.ml.models import mlp
from lnbook.util.validation import check_eps, check_positive_int

__all__ = [
    "smooth_target",
    "lipschitz_target",
    "TARGET_LIPSCHITZ",
    "ShallowLNForm",
    "shallow_ln_form",
    "shallow_ln_network",
    "alternation_bound",
    "pln_step_network",
    "step_error_bound",
    "step_error_bound_modulus",
    "step_slope_for",
    "relu_interpolant_network",
    "relu_error_bound",
    "sup_error",
    "shallow_net",
    "FitError",
    "fit_error",
    "trained_errors",
    "train_shallow_net",
    "train_shallow_nets",
    "pln_pair_widths",
    "pln_group_forms",
    "pln_group_networks",
    "derivative_sign_changes",
    "pln_sigmoid_network",
    "staircase_neurons",
]

TARGET_LIPSCHITZ = 2 * math.pi  # both targets below are 2*pi-Lipschitz on the real line


def smooth_target(x: torch.Tensor) -> torch.Tensor:
    r"""The smooth target :math:`\cos(2\pi x)` (two periods on :math:`[-1, 1]`)."""
    return torch.cos(2 * math.pi * x)


def lipschitz_target(x: torch.Tensor) -> torch.Tensor:
    r"""The Lipschitz target :math:`|\sin(2\pi x)|`: :math:`2\pi`-Lipschitz, with kinks at the multiples of 1/2."""
    return torch.sin(2 * math.pi * x).abs()


def _interval(interval) -> tuple[float, float]:
    try:
        a, b = (float(v) for v in interval)
    except (TypeError, ValueError):
        raise ValueError(f"interval must be a pair (a, b) of numbers, got {interval!r}") from None
    if not (math.isfinite(a) and math.isfinite(b) and a < b):
        raise ValueError(f"interval must be (a, b) with finite a < b, got {interval!r}")
    return a, b


# --- the shallow LN net ----------------------------------------------------------------------


@dataclass(frozen=True)
class ShallowLNForm:
    r""":math:`f(x) = c + (\alpha x + \beta) / \sqrt{A x^2 + 2 B x + C}`, the function of a shallow LN net.

    :math:`f'(x) = \big((\alpha B - \beta A) x + (\alpha C - \beta B)\big) / (A x^2 + 2Bx + C)^{3/2}`.
    """

    alpha: float
    beta: float
    A: float
    B: float
    C: float
    c: float

    def __call__(self, x):
        x = np.asarray(x, dtype=float)
        return self.c + (self.alpha * x + self.beta) / np.sqrt(self.A * x * x + 2 * self.B * x + self.C)

    def derivative(self, x):
        x = np.asarray(x, dtype=float)
        q = self.A * x * x + 2 * self.B * x + self.C
        return (self.slope * x + self.intercept) / q**1.5

    @property
    def slope(self) -> float:
        """Coefficient of :math:`x` in the numerator of :math:`f'`: :math:`\\alpha B - \\beta A`."""
        return self.alpha * self.B - self.beta * self.A

    @property
    def intercept(self) -> float:
        """Constant term of the numerator of :math:`f'`: :math:`\\alpha C - \\beta B`."""
        return self.alpha * self.C - self.beta * self.B

    def stationary_points(self) -> list[float]:
        """The zeros of :math:`f'`: one point, none (strictly monotone) or, for a constant ``f``, ``[]``
        as well (see :meth:`is_constant`)."""
        if self.slope != 0:
            return [-self.intercept / self.slope]
        return []

    def is_constant(self, tol: float = 0.0) -> bool:
        scale = max(abs(self.alpha * self.C), abs(self.beta * self.B), abs(self.alpha * self.B), abs(self.beta * self.A), 1e-300)
        return abs(self.slope) <= tol * scale and abs(self.intercept) <= tol * scale


def shallow_ln_form(net: nn.Sequential) -> ShallowLNForm:
    r"""The closed form of ``Linear(1, d) -> LayerNorm(d) -> Linear(d, 1)`` (an ``nn.Sequential``).

    With hidden pre-activation :math:`h = w x + b`, :math:`P = I - \mathbf 1\mathbf 1^\top/d`, read-out
    :math:`(a, c_0)` and LN gain and bias :math:`(\gamma, \beta_{\mathrm{LN}})` (1 and 0 without affine):
    :math:`\alpha = \sqrt d\, (\gamma\odot a)^\top P w`, :math:`\beta = \sqrt d\, (\gamma\odot a)^\top P b`,
    :math:`A = \|Pw\|^2`, :math:`B = (Pw)^\top Pb`, :math:`C = \|Pb\|^2 + d\varepsilon`,
    :math:`c = c_0 + a^\top \beta_{\mathrm{LN}}`.
    """
    if not (isinstance(net, nn.Sequential) and len(net) == 3):
        raise TypeError("shallow_ln_form needs nn.Sequential(Linear(1, d), LayerNorm(d), Linear(d, 1))")
    first, norm, last = net
    if not (isinstance(first, nn.Linear) and first.in_features == 1 and isinstance(last, nn.Linear) and last.out_features == 1):
        raise TypeError("the first layer must be nn.Linear(1, d) and the last nn.Linear(d, 1)")
    if not isinstance(norm, nn.LayerNorm):
        raise TypeError(f"the middle layer must be nn.LayerNorm, got {type(norm).__name__}")
    d = first.out_features
    with torch.no_grad():
        w = first.weight.detach().double().reshape(d).cpu()
        b = first.bias.detach().double().cpu() if first.bias is not None else torch.zeros(d, dtype=torch.float64)
        a = last.weight.detach().double().reshape(d).cpu()
        c0 = float(last.bias.detach().double()) if last.bias is not None else 0.0
        gain = norm.weight.detach().double().cpu() if norm.weight is not None else torch.ones(d, dtype=torch.float64)
        shift = norm.bias.detach().double().cpu() if norm.bias is not None else torch.zeros(d, dtype=torch.float64)
    Pw, Pb = w - w.mean(), b - b.mean()
    ga = gain * a
    return ShallowLNForm(
        alpha=float(math.sqrt(d) * ga @ Pw),
        beta=float(math.sqrt(d) * ga @ Pb),
        A=float(Pw @ Pw),
        B=float(Pw @ Pb),
        C=float(Pb @ Pb + d * norm.eps),
        c=c0 + float(a @ shift),
    )


def shallow_ln_network(form: ShallowLNForm, d: int = 3, eps: float = 1e-5, dtype=torch.float64) -> nn.Sequential:
    r"""A ``Linear(1, d) -> LayerNorm(d, eps) -> Linear(d, 1)`` network (no affine) computing ``form``.

    Any :math:`\alpha, \beta, c` and any positive definite :math:`q = Ax^2 + 2Bx + C` (:math:`A > 0`,
    :math:`AC > B^2`) are realised for every :math:`d \ge 3` and :math:`\varepsilon \ge 0`: scale
    :math:`(\alpha, \beta, q)` to :math:`(t\alpha, t\beta, t^2 q)` (the same function) with :math:`t` so large
    that :math:`t^2 q - d\varepsilon` is still a Gram matrix, and read :math:`Pw`, :math:`Pb` off its
    Cholesky factor in an orthonormal basis of :math:`\mathbf 1^\perp`. So the functions of shallow LN
    nets are the same for every width :math:`d \ge 3`.
    """
    d = check_positive_int(d, "d", minimum=3)
    eps = check_eps(eps)
    A, B, C = form.A, form.B, form.C
    if not (A > 0 and A * C - B * B > 0):
        raise ValueError("form must have a positive definite quadratic: A > 0 and A*C > B**2")
    t2 = max(1.0, 2 * A * d * eps / (A * C - B * B))
    g11, g12, g22 = t2 * A, t2 * B, t2 * C - d * eps  # Gram matrix of (Pw, Pb)
    Q = complement_basis(d, dtype=torch.float64)
    e1, e2 = Q[:, 0], Q[:, 1]
    r11 = math.sqrt(g11)
    r12 = g12 / r11
    r22 = math.sqrt(max(g22 - r12 * r12, 0.0))
    Pw, Pb = r11 * e1, r12 * e1 + r22 * e2
    t = math.sqrt(t2)
    # read-out a in span(e1, e2) with sqrt(d) a.Pw = t alpha and sqrt(d) a.Pb = t beta
    R = torch.tensor([[r11, 0.0], [r12, r22]], dtype=torch.float64)
    coef = torch.linalg.solve(R, torch.tensor([t * form.alpha, t * form.beta], dtype=torch.float64) / math.sqrt(d))
    a = coef[0] * e1 + coef[1] * e2
    first, norm, last = nn.Linear(1, d, dtype=dtype), nn.LayerNorm(d, eps=eps, elementwise_affine=False), nn.Linear(d, 1, dtype=dtype)
    with torch.no_grad():
        first.weight.copy_(Pw.reshape(d, 1))
        first.bias.copy_(Pb)
        last.weight.copy_(a.reshape(1, d))
        last.bias.fill_(form.c)
    return nn.Sequential(first, norm, last)


def alternation_bound(values) -> float:
    r"""The largest :math:`\delta` such that four of ``values`` (in the order given, e.g. a target
    at increasing points) alternate by at least :math:`2\delta`:

    .. math:: \delta = \tfrac12 \max_{i<j<k<l} \max\big(\min(v_i - v_j,\ v_k - v_j,\ v_k - v_l),\;
              \min(v_j - v_i,\ v_j - v_k,\ v_l - v_k)\big),

    and 0 if none do. No function with at most one turning point (monotone, or monotone on both
    sides of one point) comes closer than :math:`\delta` to all of the values (chapter 6).
    Time :math:`O(n^2)`, memory :math:`O(n)`.

    >>> alternation_bound([1, -1, 1, -1])
    1.0
    >>> alternation_bound([0, 1, 2, 1, 0])   # one turning point: no obstruction
    0.0
    """
    v = np.asarray(values, dtype=float).reshape(-1)
    if not np.all(np.isfinite(v)):
        raise ValueError("values must be finite")
    n = len(v)
    if n < 4:
        return 0.0
    best = 0.0
    for s in (v, -v):  # high-low-high-low, then low-high-low-high
        # for the pair (j, k), the best i < j is the largest earlier value, the best l > k the smallest later one
        earlier_max = np.concatenate([[-np.inf], np.maximum.accumulate(s)[:-1]])
        later_min = np.concatenate([np.minimum.accumulate(s[::-1])[::-1][1:], [np.inf]])
        left = earlier_max - s  # as a function of j
        right = s - later_min  # as a function of k
        right[n - 1] = -np.inf  # k <= n - 2 leaves room for l
        for j0 in range(1, n - 2, 512):  # blocks of rows j: O(n) memory
            j = np.arange(j0, min(j0 + 512, n - 2))
            gap = np.minimum(np.minimum(left[j, None], s[None, :] - s[j, None]), right[None, :])
            gap = np.where(np.arange(n)[None, :] > j[:, None], gap, -np.inf)
            best = max(best, float(gap.max()) / 2)
    return best


# --- the PLN staircase -------------------------------------------------------------------------


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
    a, b = _interval(interval)
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
    a, b = _interval(interval)
    h = (b - a) / k
    return lipschitz * h / 2 + math.pi**2 * lipschitz * check_eps(eps) / (4 * slope**2 * h)


def step_error_bound_modulus(omega: Callable[[float], float], k: int, interval=(-1.0, 1.0), *, slope: float, eps: float = 1e-5) -> float:
    r"""The bound :math:`\omega(h)\,(1 + \pi^2 \varepsilon / (4 s^2 h^2))` for a continuous target
    with modulus of continuity :math:`\omega` (:math:`|g(x) - g(y)| \le \omega(|x - y|)`)."""
    k = check_positive_int(k, "k")
    a, b = _interval(interval)
    h = (b - a) / k
    return float(omega(h)) * (1 + math.pi**2 * check_eps(eps) / (4 * slope**2 * h * h))


def step_slope_for(k: int, interval=(-1.0, 1.0), *, eps: float = 1e-5) -> float:
    r"""The slope at which the smoothing term of :func:`step_error_bound` is at most the staircase
    term (then the bound is at most :math:`L h`): :math:`s = \pi\sqrt{\varepsilon/2}/h`, and at least 1."""
    k = check_positive_int(k, "k")
    a, b = _interval(interval)
    h = (b - a) / k
    return max(1.0, math.pi * math.sqrt(check_eps(eps) / 2) / h)


# --- the ReLU baseline -------------------------------------------------------------------------


def relu_interpolant_network(g, k: int, interval=(-1.0, 1.0), *, dtype=torch.float64) -> nn.Sequential:
    r"""``Linear(1, k) -> ReLU -> Linear(k, 1)`` computing the piecewise-linear interpolant of ``g``
    at the nodes :math:`x_j = a + jh`, :math:`j = 0..k`, on :math:`[a, b]`: neuron :math:`j` is
    :math:`\mathrm{ReLU}(x - x_j)` (:math:`j = 0..k-1`) and its read-out weight is the change of slope
    there (the first one the first slope)."""
    k = check_positive_int(k, "k")
    a, b = _interval(interval)
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
    a, b = _interval(interval)
    h = (b - a) / k
    if second_derivative is not None:
        return h * h * float(second_derivative) / 8
    return lipschitz * h / 2


# --- measuring ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FitError:
    """Errors of a fit on a grid: the largest, where it is, and the root-mean-square."""

    sup: float
    worst_x: float
    rms: float


@torch.no_grad()
def fit_error(model: nn.Module, g, interval=(-1.0, 1.0), n: int = 20001) -> FitError:
    """:class:`FitError` of ``model`` against ``g`` on ``n`` equally spaced points of the interval (ends
    included), evaluated in the model's dtype. The sup over the grid is a lower estimate of the sup
    over the interval that tends to it as ``n`` grows."""
    a, b = _interval(interval)
    n = check_positive_int(n, "n", minimum=2)
    param = next(model.parameters())
    x = torch.linspace(a, b, n, dtype=torch.float64).unsqueeze(1)
    out = model(x.to(dtype=param.dtype, device=param.device)).double().cpu().reshape(-1)
    err = (out - g(x.reshape(-1))).abs()
    k = int(err.argmax())
    return FitError(sup=float(err[k]), worst_x=float(x[k, 0]), rms=float(err.pow(2).mean().sqrt()))


def sup_error(model: nn.Module, g, interval=(-1.0, 1.0), n: int = 20001) -> float:
    """``max |model(x) - g(x)|`` over ``n`` equally spaced points of the interval (see :func:`fit_error`)."""
    return fit_error(model, g, interval, n).sup


def shallow_net(kind: str, neurons: int, *, eps: float = 1e-5, group_size: int = 2) -> nn.Sequential:
    """``Linear(1, N) -> PLN | LN | ReLU -> Linear(N, 1)`` by name (``"pln"``, ``"ln"``, ``"relu"``), no affine."""
    neurons = check_positive_int(neurons, "neurons", minimum=2)
    if kind == "pln":
        return mlp(1, neurons, 1, 1, norm="pln", group_size=group_size, eps=eps)
    if kind == "ln":
        return mlp(1, neurons, 1, 1, norm="ln", eps=eps)
    if kind == "relu":
        return mlp(1, neurons, 1, 1, norm="none", activation="relu")
    raise ValueError(f"kind must be 'pln', 'ln' or 'relu', got {kind!r}")


def train_shallow_net(
    kind: str,
    g,
    width: int,
    *,
    steps: int,
    lr: float = 1e-2,
    n_train: int = 256,
    seed: int = 0,
    interval=(-1.0, 1.0),
    eps: float = 1e-5,
    group_size: int = 2,
    device=None,
) -> nn.Sequential:
    """``shallow_net(kind, width)`` trained on ``n_train`` equally spaced points of ``g`` (full-batch Adam,
    mean squared error, learning rate ``lr`` decayed by a cosine to 0, seeded), returned on the CPU."""
    from lnbook.ml.training import train

    a, b = _interval(interval)
    steps = check_positive_int(steps, "steps")
    x = torch.linspace(a, b, n_train, dtype=torch.float64).unsqueeze(1)
    y = g(x.reshape(-1))
    torch.manual_seed(seed)
    model = shallow_net(kind, int(width), eps=eps, group_size=group_size)
    train(
        model, x.float(), y.float(), task="regression", epochs=steps, batch_size=None, optimizer="adam", lr=lr,
        lr_schedule=lambda e: 0.5 * (1 + math.cos(math.pi * e / steps)), seed=seed, device=device,
        log_every=steps, progress=False, report=False,
    )
    return model.cpu()


def train_shallow_nets(
    kind: str,
    g,
    width: int,
    seeds,
    *,
    steps: int,
    lr: float = 1e-2,
    n_train: int = 256,
    interval=(-1.0, 1.0),
    eps: float = 1e-5,
    group_size: int = 2,
    device=None,
) -> list[nn.Sequential]:
    """:func:`train_shallow_net` for several seeds at once (each from its own seeded initialisation), on the CPU.

    The seeds' networks are the blocks of one ``Linear(1, S N) -> PLN | ReLU -> Linear(S N, S)`` with a read-out
    masked block-diagonal, trained by one Adam on the sum of their mean squared errors: Adam is elementwise, so
    this is separate training per seed up to float rounding (which long training of near-step pairs can amplify:
    compare spreads over seeds), at about the cost of one. ``kind="ln"`` would mix the seeds and is refused.
    """
    a, b = _interval(interval)
    steps = check_positive_int(steps, "steps")
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    if kind not in ("pln", "relu"):
        raise ValueError(f"train_shallow_nets trains kind 'pln' or 'relu' side by side, got {kind!r} (use train_shallow_net)")
    device = torch.device("cpu") if device is None else torch.device(device)
    models = []
    for seed in seeds:
        torch.manual_seed(seed)
        models.append(shallow_net(kind, int(width), eps=eps, group_size=group_size))
    S, N = len(models), models[0][0].out_features
    middle = nn.Sequential(*models[0][1:-1])  # the norm, or the activation: parameter-free, acting within a block
    first, last = nn.Linear(1, S * N), nn.Linear(S * N, S)
    with torch.no_grad():
        first.weight.copy_(torch.cat([m[0].weight for m in models]))
        first.bias.copy_(torch.cat([m[0].bias for m in models]))
        last.weight.copy_(torch.block_diag(*[m[-1].weight for m in models]))
        last.bias.copy_(torch.cat([m[-1].bias for m in models]))
    first, middle, last = first.to(device), middle.to(device), last.to(device)
    mask = torch.block_diag(*[torch.ones(1, N)] * S).to(device)
    x = torch.linspace(a, b, n_train, dtype=torch.float64).unsqueeze(1)
    y = g(x.reshape(-1)).float().to(device).unsqueeze(1)
    x = x.float().to(device)
    opt = torch.optim.Adam([first.weight, first.bias, last.weight, last.bias], lr=lr)
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / steps))
        out = nn.functional.linear(middle(first(x)), last.weight * mask, last.bias)
        loss = ((out - y) ** 2).mean(dim=0).sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if not math.isfinite(float(loss.detach())):
            raise RuntimeError(f"the loss became {float(loss.detach())} at step {step + 1}; lower the learning rate")
    first, last = first.cpu(), last.cpu()
    with torch.no_grad():
        for i, m in enumerate(models):
            block = slice(i * N, (i + 1) * N)
            m[0].weight.copy_(first.weight[block])
            m[0].bias.copy_(first.bias[block])
            m[-1].weight.copy_(last.weight[i : i + 1, block])
            m[-1].bias.copy_(last.bias[i : i + 1])
    return models


def trained_errors(
    kind: str,
    g,
    widths,
    *,
    steps: int,
    lr: float = 1e-2,
    n_train: int = 256,
    seed: int = 0,
    interval=(-1.0, 1.0),
    eps: float = 1e-5,
    group_size: int = 2,
    device=None,
) -> dict[int, FitError]:
    """:func:`train_shallow_net` for every width ``N``: ``{N: FitError}`` measured on a grid 40 times finer than
    the training points."""
    return {
        int(width): fit_error(
            train_shallow_net(kind, g, int(width), steps=steps, lr=lr, n_train=n_train, seed=seed, interval=interval,
                              eps=eps, group_size=group_size, device=device),
            g, interval, n=40 * n_train,
        )
        for width in widths
    }


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
    s = np.abs((w[0::2] - w[1::2]).numpy()) / 2
    with np.errstate(divide="ignore"):
        return np.where(s > 0, math.sqrt(norm.eps) / s, np.inf)


# --- what Linear -> PLN(m) -> Linear computes --------------------------------------------------


def pln_group_networks(net: nn.Sequential) -> list[nn.Sequential]:
    r"""``Linear(1, N) -> PLN(group size m, p = 2, centring) -> Linear(N, 1)`` split into its ``N/m`` shallow LN nets.

    Group :math:`j` sees the slice :math:`w^{(j)} x + b^{(j)}` and is read out by :math:`a^{(j)}`: it is the float64
    network ``Linear(1, m) -> LayerNorm(m) -> Linear(m, 1)`` returned here, and the sum of the returned networks is
    ``net``. The first carries the read-out bias :math:`c_0`, the others bias 0.
    """
    if not (isinstance(net, nn.Sequential) and len(net) == 3 and isinstance(net[1], ParallelLayerNorm)):
        raise TypeError("pln_group_networks needs nn.Sequential(Linear(1, N), ParallelLayerNorm(m), Linear(N, 1))")
    first, norm, last = net
    if norm.p != 2 or not norm.centering:
        raise ValueError("pln_group_networks needs PLN with p = 2 and centring (each group is then a LayerNorm)")
    m, N = norm.group_size, first.out_features
    if N % m:
        raise ValueError(f"group size {m} does not divide the width {N}")
    subs = []
    for j in range(N // m):
        sl = slice(j * m, (j + 1) * m)
        sub = nn.Sequential(nn.Linear(1, m), nn.LayerNorm(m, eps=norm.eps, elementwise_affine=False), nn.Linear(m, 1)).double()
        with torch.no_grad():
            sub[0].weight.copy_(first.weight[sl])
            sub[0].bias.copy_(first.bias[sl] if first.bias is not None else torch.zeros(m, dtype=torch.float64))
            sub[2].weight.copy_(last.weight[:, sl])
            sub[2].bias.fill_(float(last.bias) if (j == 0 and last.bias is not None) else 0.0)
        subs.append(sub)
    return subs


def pln_group_forms(net: nn.Sequential) -> list[ShallowLNForm]:
    r"""``Linear(1, N) -> PLN(group size m, p = 2, centring) -> Linear(N, 1)`` as a sum of ``N/m`` shallow LN forms.

    The forms of :func:`pln_group_networks`: :math:`f(x) = c_0 + \sum_j (\alpha_j x + \beta_j)/\sqrt{q_j(x)}` with
    one unimodal term per group; the forms carry :math:`c = 0`, except the first, which carries :math:`c_0`.
    """
    return [shallow_ln_form(sub) for sub in pln_group_networks(net)]


def derivative_sign_changes(model: nn.Module, interval=(-1.0, 1.0), n: int = 20001, *, rtol: float = 1e-9) -> int:
    r"""How often the derivative of a one-input, one-output ``model`` changes sign on a grid of ``n`` points.

    The derivative is taken by autograd on a float64 copy of the model itself (not from a closed form); values with
    :math:`|f'| \le` ``rtol`` :math:`\cdot \max|f'|` count as zero and are skipped (a constant model gives 0). Each
    sign change brackets a stationary point, so the count is a lower bound on the number of turning points in the
    interval (a turning point narrower than the grid spacing can be missed).
    """
    import copy

    lo, hi = _interval(interval)
    n = check_positive_int(n, "n", minimum=3)
    probe = copy.deepcopy(model).double().cpu()
    x = torch.linspace(lo, hi, n, dtype=torch.float64).unsqueeze(1).requires_grad_(True)
    out = probe(x)
    if out.shape != (n, 1):
        raise ValueError(f"derivative_sign_changes needs a model with one input and one output, got output shape {tuple(out.shape)}")
    (grad,) = torch.autograd.grad(out.sum(), x)
    g = grad.detach().numpy().ravel()
    scale = float(np.abs(g).max())
    if scale == 0.0:
        return 0
    sgn = np.sign(g[np.abs(g) > rtol * scale])
    return int(np.sum(sgn[1:] != sgn[:-1]))


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


def staircase_neurons(lipschitz: float, delta: float, interval=(-1.0, 1.0), *, large_slope: bool = False) -> int:
    r"""Neurons of :func:`pln_step_network` that guarantee sup error :math:`\le \delta` for an
    :math:`L`-Lipschitz target (corollary of chapter 6).

    ``large_slope=False``: :math:`N = 2\lceil L(b - a)/\delta\rceil` with :math:`s^2 \ge \pi^2 L\varepsilon/(2h\delta)`.
    ``large_slope=True``: :math:`N = 2(\lfloor L(b - a)/(2\delta)\rfloor + 1)`, about half, with
    :math:`s^2 \ge \pi^2 L\varepsilon/(4h(\delta - Lh/2))` (the first term :math:`Lh/2` is then below
    :math:`\delta`, and the smoothing term fills the rest).
    """
    a, b = _interval(interval)
    if not (lipschitz > 0 and delta > 0):
        raise ValueError("lipschitz and delta must be > 0")
    if large_slope:
        return 2 * (math.floor(lipschitz * (b - a) / (2 * delta)) + 1)
    return 2 * math.ceil(lipschitz * (b - a) / delta)
