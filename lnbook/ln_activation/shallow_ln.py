r"""The shallow LN net ``Linear(1, d) -> LayerNorm(d) -> Linear(d, 1)`` and its limit (chapter 6).

* :class:`ShallowLNForm` / :func:`shallow_ln_form` — the exact closed form of a shallow LN net:
  :math:`f(x) = c + (\alpha x + \beta)/\sqrt{A x^2 + 2Bx + C}`, whose derivative has a numerator linear in
  :math:`x` (at most one stationary point); :func:`shallow_ln_network` builds a net from a form, at any width
  :math:`d \ge 3`;
* :func:`alternation_bound` — the error below which no function with at most one turning point
  can approximate given values (the lower bound for such nets);
* :func:`pln_group_networks` / :func:`pln_group_forms` — ``Linear(1, N) -> PLN(m) -> Linear(N, 1)`` as a sum of
  ``N/m`` shallow LN nets;
* :func:`derivative_sign_changes` — the turning points of a one-variable network, counted by autograd.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from lnbook.core.geometry import complement_basis
from lnbook.core.norms import LayerNorm as BookLayerNorm
from lnbook.core.norms import ParallelLayerNorm
from lnbook.ln_activation.shallow_fits import check_interval
from lnbook.util.validation import check_eps, check_positive_int

__all__ = [
    "ShallowLNForm",
    "shallow_ln_form",
    "shallow_ln_network",
    "alternation_bound",
    "pln_group_networks",
    "pln_group_forms",
    "derivative_sign_changes",
]


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

    The LayerNorm is ``nn.LayerNorm(d)`` (with or without affine) or the book's ``lnbook.core.norms.LayerNorm``
    (no affine; the same :math:`\varepsilon` convention, added to the variance).

    With hidden pre-activation :math:`h = w x + b`, :math:`P = I - \mathbf 1\mathbf 1^\top/d`, read-out
    :math:`(a, c_0)` and LN gain and bias :math:`(\gamma, \beta_{\mathrm{LN}})` (1 and 0 without affine):
    :math:`\alpha = \sqrt d\, (\gamma\odot a)^\top P w`, :math:`\beta = \sqrt d\, (\gamma\odot a)^\top P b`,
    :math:`A = \|Pw\|^2`, :math:`B = (Pw)^\top Pb`, :math:`C = \|Pb\|^2 + d\varepsilon`,
    :math:`c = c_0 + a^\top \beta_{\mathrm{LN}}`.

    A net with :math:`\varepsilon = 0` and every first-layer row equal (:math:`A = C = 0`) is undefined at every
    :math:`x` (thm-ch6-shallow-ln); it is refused with a ValueError.
    """
    if not (isinstance(net, nn.Sequential) and len(net) == 3):
        raise TypeError("shallow_ln_form needs nn.Sequential(Linear(1, d), LayerNorm(d), Linear(d, 1))")
    first, norm, last = net
    if not (isinstance(first, nn.Linear) and first.in_features == 1 and isinstance(last, nn.Linear) and last.out_features == 1):
        raise TypeError("the first layer must be nn.Linear(1, d) and the last nn.Linear(d, 1)")
    if not isinstance(norm, (nn.LayerNorm, BookLayerNorm)):
        raise TypeError("the middle layer must be torch.nn.LayerNorm or lnbook.core.norms.LayerNorm, got "
                        f"{type(norm).__module__}.{type(norm).__qualname__}")
    d = first.out_features
    if isinstance(norm, nn.LayerNorm) and tuple(norm.normalized_shape) != (d,):
        raise ValueError(f"the LayerNorm must normalise the {d} hidden units, got normalized_shape "
                         f"{tuple(norm.normalized_shape)}; build it as nn.LayerNorm({d})")
    with torch.no_grad():
        w = first.weight.detach().double().reshape(d).cpu()
        b = first.bias.detach().double().cpu() if first.bias is not None else torch.zeros(d, dtype=torch.float64)
        a = last.weight.detach().double().reshape(d).cpu()
        c0 = float(last.bias.detach().double()) if last.bias is not None else 0.0
        weight, bias = getattr(norm, "weight", None), getattr(norm, "bias", None)  # the book's LayerNorm has neither
        gain = weight.detach().double().cpu() if weight is not None else torch.ones(d, dtype=torch.float64)
        shift = bias.detach().double().cpu() if bias is not None else torch.zeros(d, dtype=torch.float64)
    Pw, Pb = w - w.mean(), b - b.mean()
    A, C = float(Pw @ Pw), float(Pb @ Pb + d * norm.eps)
    if A == 0.0 and C == 0.0:
        raise ValueError("LayerNorm undefined everywhere at eps = 0: every row of the first layer is equal (Pw = Pb = 0), "
                         "so the hidden units have zero variance at every x and the net is 0/0 (NaN) there; no closed "
                         "form exists. Use eps > 0, or a first layer whose rows are not all equal")
    ga = gain * a
    return ShallowLNForm(
        alpha=float(math.sqrt(d) * ga @ Pw),
        beta=float(math.sqrt(d) * ga @ Pb),
        A=A,
        B=float(Pw @ Pb),
        C=C,
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
    v = np.asarray(values, dtype=float)
    if v.ndim == 2 and v.shape[1] == 1:
        v = v[:, 0]
    if v.ndim != 1:
        raise ValueError(f"values must be one curve: a 1-D array or shape (n, 1), got shape {v.shape}; "
                         "call alternation_bound once per curve")
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

    The derivative is taken by autograd on a float64 copy of the model itself (not from a closed form), in eval mode
    (a model with dropout or batch norm left in training mode is counted as the function it computes; ``model``
    itself is not changed); values with
    :math:`|f'| \le` ``rtol`` :math:`\cdot \max|f'|` count as zero and are skipped (a constant model gives 0). Each
    sign change brackets a stationary point, so the count is a lower bound on the number of turning points in the
    interval (a turning point narrower than the grid spacing can be missed). A NaN or infinite output or derivative at
    a grid point (an :math:`\varepsilon = 0` LayerNorm at a root of its variance) raises a ValueError naming the point.
    """
    import copy

    lo, hi = check_interval(interval)
    n = check_positive_int(n, "n", minimum=3)
    probe = copy.deepcopy(model).double().cpu().eval()  # one function: dropout off, batch norm on its running statistics
    x = torch.linspace(lo, hi, n, dtype=torch.float64).unsqueeze(1).requires_grad_(True)
    out = probe(x)
    if out.shape != (n, 1):
        raise ValueError(f"derivative_sign_changes needs a model with one input and one output, got output shape {tuple(out.shape)}")
    (grad,) = torch.autograd.grad(out.sum(), x)
    g = grad.detach().cpu().numpy().ravel()
    bad = ~(np.isfinite(g) & np.isfinite(out.detach().cpu().numpy().ravel()))
    if bad.any():
        xs = x.detach().cpu().numpy().ravel()[bad]
        raise ValueError(f"the model's output or derivative is not finite at {int(bad.sum())} grid point(s), first at "
                         f"x = {float(xs[0])!r} (an eps = 0 LayerNorm whose input has zero variance there?): no count of sign "
                         f"changes is possible; use eps > 0, or an n or interval that avoids those points")
    scale = float(np.abs(g).max())
    if scale == 0.0:
        return 0
    sgn = np.sign(g[np.abs(g) > rtol * scale])
    return int(np.sum(sgn[1:] != sgn[:-1]))
