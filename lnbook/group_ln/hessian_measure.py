r"""A Hessian-based measure of nonlinearity, :math:`\mathcal H(f; x)`, and its closed form for LN-G (chapter 5).

**Definition** (our reconstruction of the measure of Ni et al., 2024). For a map
:math:`f:\mathbb R^d\to\mathbb R^k`, twice differentiable at :math:`x`, and an input scale :math:`s > 0`,

.. math::

    \mathcal H_s(f; x) = s^4 \sum_{i=1}^k \big\|\nabla^2 f_i(x)\big\|_F^2 ,

and for inputs drawn from a distribution :math:`\mu` with :math:`s^2(\mu) = \mathbb E\|x - \mathbb E x\|^2 / d`,
:math:`\mathcal H(f; \mu) = \mathbb E_{x\sim\mu}\, \mathcal H_{s(\mu)}(f; x)`. The factor :math:`s^4` makes the
measure scale free for maps that ignore the scale of their input (LayerNorm with
:math:`\varepsilon = 0`): the Hessian of such a map scales like :math:`s^{-2}`.

Computation, all exact up to rounding for one input:

* :func:`hessian_sq_norms` — :math:`\sum_i \|\nabla^2 f_i(x)\|_F^2` from ``torch.func.hessian``,
  vectorised over samples with ``torch.func.vmap`` (cost :math:`k d^2` per sample);
* :func:`readout_hessian_sq_norms` — :math:`\|\nabla^2 (u^\top f)(x)\|_F^2` for Gaussian read-outs
  :math:`u\sim N(0, I_k)`, an unbiased estimate of the same number at cost :math:`d^2` per sample
  (:math:`\mathbb E_u\, u_iu_j = \delta_{ij}`): the only affordable route for wide layers;
* :func:`hessian_nonlinearity` — the Monte Carlo estimate of :math:`\mathcal H(f;\mu)` from samples,
  with its standard error;
* :func:`ln_g_hessian_sq_norms` — the same per-sample number for LN-G in closed form, from chapter 2's
  Frobenius norm of LayerNorm's Hessian (:func:`lnbook.core.derivatives.layer_norm_hessian_frobenius`);
* :func:`predicted_nonlinearity` — :math:`\mathcal H` of LN-G for Gaussian inputs: with
  :math:`\varepsilon = 0` and group size :math:`m = d/G \ge 6` it is :math:`3d(m-2)/((m-3)(m-5))`
  (chapter 5's theorem); for :math:`\varepsilon > 0` one quadrature over a chi-square law;
* :func:`predicted_jacobian_sq_norm` — the first-derivative yardstick beside it: :math:`s^2\,\mathbb E\|J\|_F^2`
  of LN-G at :math:`\varepsilon = 0` for the same inputs, :math:`d(m-2)/(m-3)` for :math:`m \ge 4`.

>>> import torch
>>> from lnbook.group_ln.hessian_measure import group_ln_map, hessian_sq_norms, ln_g_hessian_sq_norms
>>> x = torch.randn(3, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
>>> auto = hessian_sq_norms(group_ln_map(2, eps=0.0), x)
>>> closed = ln_g_hessian_sq_norms(x, 2, eps=0.0)
>>> bool(torch.allclose(auto, closed, rtol=1e-10))
True
>>> predicted_nonlinearity(64, 8)  # 3 * 64 * 6 / (5 * 3)
76.8
"""

from __future__ import annotations

import functools
import math
import numbers
import sys
from dataclasses import dataclass
from typing import Callable

import torch
from torch.func import hessian, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from lnbook.core.derivatives import layer_norm_hessian_frobenius
from lnbook.util.validation import as_float_tensor, check_eps, check_positive_int

__all__ = [
    "HessianMeasure",
    "group_ln_map",
    "input_scale",
    "hessian_sq_norms",
    "readout_hessian_sq_norms",
    "probe_hessian_sq_norms",
    "hessian_nonlinearity",
    "ln_g_hessian_sq_norms",
    "group_size_of",
    "chi2_inverse_square_mean",
    "chi2_inverse_mean",
    "predicted_nonlinearity",
    "predicted_jacobian_sq_norm",
    "pointwise_growth_bound",
    "growth_over_groups",
]

# largest Hessian block (entries) materialised at once by hessian_sq_norms / readout_hessian_sq_norms
_MAX_ENTRIES = 2**24


@dataclass(frozen=True)
class HessianMeasure:
    """A Monte Carlo estimate of :math:`\\mathcal H(f;\\mu)`.

    ``value`` is :math:`s^4` times the mean of ``sq_norms`` over the ``n`` samples, ``stderr`` its
    standard error (``s`` treated as exact; NaN for a single sample, which has no spread to estimate it from),
    ``scale`` the :math:`s^2` used, ``method`` how the
    per-sample norms were computed (``"exact"``, or ``probes`` random read-outs / probes each).
    """

    value: float
    stderr: float
    n: int
    scale: float
    sq_norms: torch.Tensor
    method: str
    probes: int = 0

    @property
    def median(self) -> float:
        """:math:`s^4` times the median per-sample value: the typical input, not the mean."""
        return self.scale**2 * float(self.sq_norms.median())


def _math_attention(fn: Callable) -> Callable:
    """Run ``fn`` with scaled-dot-product attention on its math backend: the fused attention kernels (flash on the
    CPU) have no forward-mode derivative, which every estimator here needs (``torch.func.hessian`` and the probes are
    forward over reverse), so an attention block inside ``f`` would otherwise raise ``NotImplementedError``."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with sdpa_kernel(SDPBackend.MATH):
            return fn(*args, **kwargs)
    return wrapped


def group_size_of(d: int, groups: int) -> int:
    """The group size ``d // groups``, after checking that ``groups`` divides ``d`` and leaves >= 2 features."""
    d = check_positive_int(d, "d", minimum=2)
    groups = check_positive_int(groups, "groups")
    if d % groups:
        divisors = [g for g in range(1, d + 1) if d % g == 0 and d // g >= 2]
        raise ValueError(f"groups={groups} does not divide the width d={d}; choose one of {divisors}")
    if d // groups < 2:
        raise ValueError(f"groups={groups} leaves {d // groups} feature per group (d={d}); use groups <= {d // 2}")
    return d // groups


def group_ln_map(groups: int, eps: float = 1e-5) -> Callable[[torch.Tensor], torch.Tensor]:
    """LN-G as a plain function of the last axis, without checks, for ``torch.func`` transforms.

    Written with elementary tensor operations (mean, square, reciprocal square root), so that it is
    differentiable to any order and works under ``vmap``; ``eps=0`` is allowed here (the Hessian is
    then that of the exact normalisation, defined away from the group-constant inputs).
    Use :class:`lnbook.core.norms.GroupLayerNorm` in networks.
    """
    groups = check_positive_int(groups, "groups")
    eps = check_eps(eps)

    def ln_g(x: torch.Tensor) -> torch.Tensor:
        g = x.unflatten(-1, (groups, -1))
        centred = g - g.mean(dim=-1, keepdim=True)
        return (centred * torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + eps)).flatten(-2)

    return ln_g


def _samples(x, name: str = "x") -> torch.Tensor:
    x = as_float_tensor(x, name, min_dim=2)
    if len(x) == 0:
        raise ValueError(f"{name} holds no samples; pass a tensor of shape (n_samples, ...)")
    return x


def input_scale(x: torch.Tensor) -> float:
    r"""The sample estimate of :math:`s^2 = \mathbb E\|x - \mathbb E x\|^2 / d` (unbiased: divides by ``n - 1``)."""
    x = _samples(x)
    if len(x) < 2:
        raise ValueError("the input scale needs at least 2 samples; pass scale= explicitly for a single input")
    flat = x.reshape(len(x), -1)
    centred = flat - flat.mean(dim=0, keepdim=True)
    s2 = float(centred.pow(2).sum()) / ((len(x) - 1) * flat.shape[1])
    if s2 == 0.0:
        raise ValueError("all samples are equal, so the input scale is 0; pass scale= explicitly")
    return s2


def _single(f: Callable) -> Callable[[torch.Tensor], torch.Tensor]:
    """``f`` applied to one sample: batched models get a batch of one, and the output is flattened."""

    def one(v: torch.Tensor) -> torch.Tensor:
        return f(v.unsqueeze(0)).reshape(-1)

    return one


def _chunks(n: int, per_sample_entries: int):
    step = max(1, _MAX_ENTRIES // max(1, per_sample_entries))
    for start in range(0, n, step):
        yield slice(start, min(n, start + step))


@_math_attention
def hessian_sq_norms(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    r"""Per sample, :math:`\sum_i \|\nabla^2 f_i(x_n)\|_F^2`, exactly, with ``torch.func.hessian`` and ``vmap``.

    ``f`` maps a batch ``(b, ...)`` to outputs ``(b, ...)`` (a module or a function); ``x`` has shape
    ``(n, ...)``. The full Hessian tensor (outputs x inputs x inputs) is built for a few samples at a
    time, so memory stays bounded; for wide maps use :func:`readout_hessian_sq_norms`.
    """
    x = _samples(x)
    one = _single(f)
    k = one(x[0]).numel()
    d = x[0].numel()
    full = vmap(hessian(one))
    out = [full(x[s]).pow(2).reshape(s.stop - s.start, -1).sum(dim=1) for s in _chunks(len(x), k * d * d)]
    return torch.cat(out).detach()


def _default_generator(generator: torch.Generator | None) -> torch.Generator:
    # a seed unlike the 0 that samples are usually drawn with: read-outs equal to the inputs would bias
    return generator if generator is not None else torch.Generator().manual_seed(20240601)


def _copies_up_to_one_scale(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per row, whether ``a`` is ``c b`` to a relative ``1e-6``, with one ``c`` fitted to every number at once."""
    scale = (a * b).sum() / (b * b).sum()
    return (a - scale * b).norm(dim=1) <= 1e-6 * a.norm(dim=1)


def _refuse_draws_equal_to_inputs(draws: torch.Tensor, x: torch.Tensor, what: str) -> None:
    """Refuse random vectors that are the inputs themselves: read-outs or probes drawn from the generator and seed
    the samples were drawn with (the default seed 20240601 included) equal the inputs wherever their sizes agree, and
    then the estimate is biased by far more than its standard error (about 20 times at d = 64 for LayerNorm: the
    exercise on read-outs). ``draws`` is ``(n, m, ...)``; refused when, for more than half of the samples, the first
    draw is, to a relative ``1e-6``, a copy of the sample in one of three ways, each of which the bias survives
    (LayerNorm forgets a shift, and the bias comes from the centred input):

    1. the sample times one common scale ``c`` (the inputs drawn with that seed and scaled);
    2. after centring each sample and its draw (subtracting its own mean), the sample times one common scale (the
       inputs shifted, by one number or one per sample, as in ``1.5 x + 0.3``);
    3. with at least three samples, each feature an affine map of that feature of the inputs (``c_j x_j + s_j``: the
       inputs standardised per feature);
    4. with at least four dimensions, after centring each sample and its draw, the sample times a scale of its own
       (``|cos| >= 1 - 1e-6``: the inputs shifted and scaled per sample, as rows normalised to one norm or divided by
       their largest entry). Below four dimensions a centred draw lies in a plane or a line, where a chance alignment
       is not rare enough.

    One scale for all samples, fitted to every number at once (or a line per feature through three or more points),
    is what a chance alignment cannot give: a draw of one dimension is always parallel to its sample, and a draw of
    two dimensions sometimes nearly so, but their ratios differ between samples. A test is skipped where it has a
    single number left to fit (one sample of one dimension; one sample of two dimensions after centring), since a
    scaled copy cannot then be told from chance."""
    if draws.shape[0] != x.shape[0] or draws[:, 0].numel() != x.numel():
        return
    a, b = draws[:, 0].reshape(len(x), -1), x.reshape(len(x), -1)
    n, d = b.shape
    tests = []
    if bool((b * b).sum() > 0):  # inputs of zeros: no draw of a continuous distribution equals them
        if x.numel() > 1:
            tests.append(_copies_up_to_one_scale(a, b))
        else:
            tests.append((a - b).norm(dim=1) <= 1e-6 * a.norm(dim=1))
    ac, bc = a - a.mean(dim=1, keepdim=True), b - b.mean(dim=1, keepdim=True)
    if n * (d - 1) > 1 and bool((bc * bc).sum() > 0):
        tests.append(_copies_up_to_one_scale(ac, bc))
    if d >= 4:  # 4: each centred sample parallel to its centred draw, whatever its own scale (rows normalised)
        norms = ac.norm(dim=1) * bc.norm(dim=1)
        cos = (ac * bc).sum(dim=1).abs() / torch.where(norms > 0, norms, torch.ones_like(norms))
        tests.append((norms > 0) & (cos >= 1 - 1e-6))
    if n >= 3:
        af, bf = a - a.mean(dim=0, keepdim=True), b - b.mean(dim=0, keepdim=True)
        ss = (bf * bf).sum(dim=0)
        varying = ss > 0
        if bool(varying.any()):
            slope = torch.where(varying, (af * bf).sum(dim=0) / torch.where(varying, ss, torch.ones_like(ss)), 0.0)
            residual = torch.where(varying, af - slope * bf, af)
            tests.append(residual.norm(dim=1) <= 1e-6 * a.norm(dim=1))
    if any(float(t.double().mean()) > 0.5 for t in tests):
        raise ValueError(f"the {what} drawn are the inputs themselves (equal to them for most samples, up to one common "
                         "scale, a shift of each sample, a scale and shift of each feature, or a scale and shift of each "
                         "sample): the inputs were drawn "
                         "from the same generator and seed, and the estimate would be biased by far more than its "
                         "standard error. Pass generator=torch.Generator().manual_seed(s) with another seed")


@_math_attention
def readout_hessian_sq_norms(
    f: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    readouts: int = 1,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Per sample, the mean over ``readouts`` Gaussian vectors :math:`u` of :math:`\|\nabla^2(u^\top f)(x_n)\|_F^2`.

    Unbiased for :func:`hessian_sq_norms`: with :math:`u \sim N(0, I_k)`,
    :math:`\mathbb E_u \|\sum_i u_i \nabla^2 f_i\|_F^2 = \sum_i \|\nabla^2 f_i\|_F^2`. Only a
    ``d x d`` Hessian (``torch.func.hessian``) is built per sample and read-out. Without ``generator``
    the read-outs come from a fresh generator seeded 20240601 (:func:`_default_generator`): every such
    call with the same number of samples and output size draws the same read-outs. Pass a generator to
    make separate calls independent.
    """
    x = _samples(x)
    readouts = check_positive_int(readouts, "readouts")
    one = _single(f)
    k = one(x[0]).numel()
    d = x[0].numel()
    U = torch.randn(len(x), readouts, k, generator=_default_generator(generator), dtype=x.dtype).to(x.device)
    _refuse_draws_equal_to_inputs(U, x, "read-outs")

    def scalar(v: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        return (one(v) * u).sum()

    per_readout = vmap(vmap(hessian(scalar), in_dims=(None, 0)), in_dims=(0, 0))
    out = []
    for s in _chunks(len(x), readouts * d * d):
        H = per_readout(x[s], U[s])  # (b, readouts, *in, *in)
        out.append(H.pow(2).reshape(s.stop - s.start, readouts, -1).sum(dim=2).mean(dim=1))
    return torch.cat(out).detach()


@_math_attention
def probe_hessian_sq_norms(
    f: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    probes: int = 1,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Per sample, the mean over ``probes`` Gaussian pairs :math:`(u, v)` of :math:`\|\nabla^2(u^\top f)(x_n)\, v\|^2`.

    Unbiased for :func:`hessian_sq_norms` (:math:`\mathbb E_v \|Av\|^2 = \|A\|_F^2` for
    :math:`v\sim N(0, I_d)`, then the read-out identity), and cheap: one Hessian-vector product
    (``torch.func.jvp`` of ``torch.func.grad``, the forward-over-reverse step that
    ``torch.func.hessian`` repeats ``d`` times) per sample and probe. Noisier per sample than the
    exact norm; the average over many samples is what it is for. Without ``generator`` the probes come
    from a fresh generator seeded 20240601: every such call with the same sample and output shapes draws
    the same pairs :math:`(u, v)`, so its errors are correlated with those of any other such call. Pass a
    generator to make separate calls independent.
    """
    x = _samples(x)
    probes = check_positive_int(probes, "probes")
    one = _single(f)
    k = one(x[0]).numel()
    gen = _default_generator(generator)
    U = torch.randn(len(x), probes, k, generator=gen, dtype=x.dtype).to(x.device)
    V = torch.randn(len(x), probes, *x.shape[1:], generator=gen, dtype=x.dtype).to(x.device)
    _refuse_draws_equal_to_inputs(U, x, "read-outs")
    _refuse_draws_equal_to_inputs(V, x, "probes")

    def hvp_sq(v: torch.Tensor, u: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        grad_u = torch.func.grad(lambda y: (one(y) * u).sum())
        return torch.func.jvp(grad_u, (v,), (w,))[1].pow(2).sum()

    per_probe = vmap(vmap(hvp_sq, in_dims=(None, 0, 0)), in_dims=(0, 0, 0))
    out = [per_probe(x[s], U[s], V[s]).mean(dim=1) for s in _chunks(len(x), probes * (k + x[0].numel()) * 64)]
    return torch.cat(out).detach()


METHODS = ("exact", "readout", "probe")


def hessian_nonlinearity(
    f: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    *,
    scale: float | None = None,
    method: str = "exact",
    probes: int = 1,
    generator: torch.Generator | None = None,
) -> HessianMeasure:
    r"""Estimate :math:`\mathcal H(f;\mu)` from samples ``x`` of :math:`\mu`.

    ``scale`` is :math:`s^2` (default: :func:`input_scale` of ``x``). ``method="exact"`` computes
    each sample's Hessian norm exactly (:func:`hessian_sq_norms`, cost :math:`kd^2` per sample);
    ``"readout"`` uses ``probes`` Gaussian read-outs per sample (:func:`readout_hessian_sq_norms`,
    :math:`d^2`); ``"probe"`` uses ``probes`` Hessian-vector products per sample
    (:func:`probe_hessian_sq_norms`, a few network passes). All three have the same expectation.
    A non-finite Hessian (an input where ``f`` is not differentiable) raises a ``ValueError``.
    ``generator`` draws the read-outs or probes; the default is the fixed seed 20240601 (deterministic,
    and the same draws in every call with the same shapes).
    """
    x = _samples(x)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if scale is None:
        s2 = input_scale(x)
    else:
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not (0 < scale < math.inf):
            raise ValueError(f"scale (the input's mean square s^2) must be a finite number > 0, got {scale!r}")
        s2 = float(scale)
    if method == "exact":
        sq = hessian_sq_norms(f, x)
    elif method == "readout":
        sq = readout_hessian_sq_norms(f, x, probes, generator)
    else:
        sq = probe_hessian_sq_norms(f, x, probes, generator)
    if not bool(torch.isfinite(sq).all()):
        raise ValueError(
            "the Hessian is not finite at some samples: f is not twice differentiable there "
            "(e.g. LayerNorm with eps=0 at an input that is constant on a group); use eps > 0 or other samples"
        )
    n = len(sq)
    mean = float(sq.double().mean())
    stderr = float(sq.double().std()) / math.sqrt(n) if n > 1 else math.nan
    return HessianMeasure(
        value=s2**2 * mean,
        stderr=s2**2 * stderr,
        n=n,
        scale=s2,
        sq_norms=sq,
        method=method,
        probes=0 if method == "exact" else int(probes),
    )


def ln_g_hessian_sq_norms(x: torch.Tensor, groups: int, eps: float = 1e-5) -> torch.Tensor:
    r"""Per sample, :math:`\sum_i\|\nabla^2 \mathrm{LN\text{-}G}_i(x)\|_F^2` in closed form.

    LN-G is block diagonal, so its Hessian is the direct sum of the groups' LayerNorm Hessians, and
    the sum runs over groups of chapter 2's :math:`\|H\|_F^2 = \frac{m\rho^2}{r^6}\big(9 (m\varepsilon)^2/r^4
    + 3(m-2)\big)` with :math:`m = d/G`, :math:`\rho = \|P x_g\|`, :math:`r^2 = \rho^2 + m\varepsilon`.
    The formula is evaluated in float64 on the CPU (some accelerators lack float64); the result has
    ``x``'s dtype and device.
    """
    x = as_float_tensor(x, min_dim=2)
    eps = check_eps(eps)
    m = group_size_of(x.shape[-1], groups)
    g = x.unflatten(-1, (groups, m))
    rho = (g - g.mean(dim=-1, keepdim=True)).norm(dim=-1)
    per_group = layer_norm_hessian_frobenius(m, rho.double().cpu(), eps).pow(2)
    return per_group.sum(dim=-1).to(device=x.device, dtype=x.dtype)


def pointwise_growth_bound(d: int, groups: int) -> float:
    r"""The factor of prop-ch5-pointwise-growth: at :math:`\varepsilon = 0`, at every input of width ``d`` with no
    constant group, :math:`\sum_i\|\nabla^2\mathrm{LN\text{-}G}_i(x)\|_F^2 \ge c\,\sum_i\|\nabla^2\mathrm{LN}_i(x)\|_F^2`
    with :math:`c = G(d - 2G)/(d - 2)`, attained where the groups have equal means and equal centred norms. Needs
    ``d >= 3`` (at ``d = 2`` both sides vanish and :math:`c` is undefined)."""
    group_size_of(d, groups)
    if d < 3:
        raise ValueError(f"d={d}: the bound needs d >= 3 (at d = 2 LN-G is LayerNorm and both Hessians vanish)")
    return groups * (d - 2 * groups) / (d - 2)


def chi2_inverse_square_mean(k: int) -> float:
    r""":math:`\mathbb E[1/X^2]` for :math:`X \sim \chi^2_k`: :math:`1/((k-2)(k-4))` for :math:`k > 4`, else infinite."""
    k = check_positive_int(k, "k")
    return 1.0 / ((k - 2) * (k - 4)) if k > 4 else math.inf


def chi2_inverse_mean(k: int) -> float:
    r""":math:`\mathbb E[1/X]` for :math:`X \sim \chi^2_k`: :math:`1/(k-2)` for :math:`k > 2`, else infinite."""
    k = check_positive_int(k, "k")
    return 1.0 / (k - 2) if k > 2 else math.inf


def predicted_jacobian_sq_norm(d: int, groups: int) -> float:
    r""":math:`s^2\,\mathbb E\|J(x)\|_F^2` for the Jacobian :math:`J` of LN-G at ``eps = 0`` (width ``d``, ``groups``
    groups), for inputs :math:`N(\mu, \sigma^2 I_d)` with :math:`\mu` constant on each group and :math:`s^2 = \sigma^2`.

    Chapter 5's first-derivative yardstick for :func:`predicted_nonlinearity`: each group of size :math:`m = d/G`
    contributes :math:`m(m-2)/\rho_g^2` with :math:`\rho_g^2/\sigma^2 \sim \chi^2_{m-1}`, so the value is
    :math:`Gm(m-2)\,\mathbb E[1/\chi^2_{m-1}] = d(m-2)/(m-3)` for :math:`m \ge 4` (between :math:`d` and
    :math:`2d`), infinite for :math:`m = 3` and 0 for :math:`m = 2` (LN of two features is piecewise constant).

    >>> predicted_jacobian_sq_norm(64, 4)  # 64 * 14 / 13
    68.92307692307693
    """
    m = group_size_of(d, groups)
    if m == 2:
        return 0.0
    return d * (m - 2) * chi2_inverse_mean(m - 1) if m >= 4 else math.inf


def _log_group_term(m: int, s: float, log_me: float) -> float:
    """log of sigma^4 ||H_LN||_F^2 for one group of size m at rho^2 = sigma^2 e^s, with log_me = log(m eps / sigma^2).

    The direct form m t / r2^3 (9 q^2 + 3(m - 2)), r2 = t + m e, q = m e / r2, underflows (r2^3 = 0) once r2 is
    below about 1e-108, and overflows where it is large; in logs every step stays in range for any eps / sigma^2.
    """
    big, small = max(s, log_me), min(s, log_me)
    log_r2 = big + math.log1p(math.exp(small - big))
    log_q9 = _LOG9 + 2.0 * (log_me - log_r2)  # log(9 q^2), q <= 1
    if m == 2:
        log_bracket = log_q9
    else:
        c = math.log(3.0 * (m - 2))
        log_bracket = max(c, log_q9) + math.log1p(math.exp(-abs(c - log_q9)))
    return math.log(m) + s - 3.0 * log_r2 + log_bracket


_LOG9 = math.log(9.0)
_LOG_FLOAT_MAX = math.log(sys.float_info.max)


def predicted_nonlinearity(d: int, groups: int, eps: float = 0.0, sigma2: float = 1.0) -> float:
    r""":math:`\mathcal H` of LN-G (width ``d``, ``groups`` groups) for inputs :math:`N(\mu, \sigma^2 I_d)`, :math:`\mu` constant on each group.

    ``eps = 0`` (chapter 5's theorem), with :math:`m = d / G`: :math:`3d(m-2)/((m-3)(m-5))` for
    :math:`m \ge 6`, infinite for :math:`m \in \{3, 4, 5\}`, and 0 for :math:`m = 2` (LN of two
    features is piecewise constant). ``eps > 0``: :math:`G\,\mathbb E[\sigma^4 \|H\|_F^2]` with
    :math:`\rho^2/\sigma^2 \sim \chi^2_{m-1}`, by adaptive quadrature in :math:`\log\rho^2` (relative
    accuracy about :math:`10^{-8}`); it depends on ``eps`` and ``sigma2`` only through ``eps / sigma2``.
    The integrand is evaluated in logarithms and scaled by its largest value on a grid, so every positive ratio
    ``eps / sigma2`` works (``1e-300``: the ``eps = 0`` value for :math:`m \ge 6`); a value beyond the largest
    float (groups of 2 or 3 at a ratio of about ``1e-200`` or below) raises a ``ValueError``, and one below the
    smallest positive float (a ratio of about ``1e100`` or more) is returned as its rounding, 0.
    """
    m = group_size_of(d, groups)
    eps = check_eps(eps)
    if isinstance(sigma2, bool) or not isinstance(sigma2, numbers.Real) or not (0 < sigma2 < math.inf):
        raise ValueError(f"sigma2 must be a finite number > 0, got {sigma2!r}")
    k = m - 1
    if eps == 0.0:
        if m == 2:
            return 0.0
        return 3.0 * d * (m - 2) * chi2_inverse_square_mean(k) if m >= 6 else math.inf
    from scipy.integrate import quad

    log_me = math.log(m) + math.log(eps) - math.log(float(sigma2))  # log(m eps / sigma^2): no underflow of the ratio
    log_norm = -(k / 2) * math.log(2.0) - math.lgamma(k / 2)

    def log_integrand(s: float) -> float:  # t = exp(s); density of t times dt/ds = t
        # the density's terms first, as one sum: they are ~k log k each and cancel to O(log k); adding the small
        # group term to one of them first would cost k log k ulps (1e-11 relative at m = 65536)
        return _log_group_term(m, s, log_me) + ((k / 2) * s - math.exp(s) / 2 + log_norm)

    pivot = log_me
    top = math.log(k + 40.0 * math.sqrt(k) + 200.0)
    lo = min(pivot, top) - 40.0
    # the chi-square density of t is a peak of width about sqrt(2/k) in log t around log k: for large groups it
    # is narrower than quad's first subintervals, which then miss it (values 1e-20 too small at m = 65536), so
    # the peak is cut out as its own pieces
    peak, half = math.log(k), 10.0 * math.sqrt(2.0 / k)
    cuts = {lo, min(pivot, top), top} | {c for c in (peak - half, peak, peak + half) if lo < c < top}
    pieces = sorted(cuts)
    # the integrand divided by its largest value on a grid (the cuts hold both of its peaks, at log(m eps) and log k)
    grid = pieces + [lo + (top - lo) * i / 64 for i in range(1, 64)]
    log_scale = max(log_integrand(s) for s in grid)
    total = 0.0
    for a, b in zip(pieces[:-1], pieces[1:]):
        value, _ = quad(lambda s: math.exp(log_integrand(s) - log_scale), a, b, limit=400, epsabs=0.0, epsrel=1e-10)
        total += value
    log_value = math.log(groups * total) + log_scale
    if log_value > _LOG_FLOAT_MAX:
        raise ValueError(
            f"H of LN-G with groups of m = {m} at eps = {eps:.3g}, sigma2 = {float(sigma2):.3g} is about "
            f"1e{log_value / math.log(10.0):.0f}, beyond the largest float: this ratio is out of range for groups of "
            f"{m} (H grows without bound as eps -> 0 for m <= 5); use a larger eps / sigma2"
        )
    return math.exp(log_value)


def growth_over_groups(widths, samples: int, eps: float = 1e-5, *, dtype: torch.dtype = torch.float64, device=None,
                       progress: bool = True) -> list[dict]:
    r"""Chapter 5's growth of :math:`\mathcal H` with the number of groups, measured (the Hessian lab's experiment).

    For every width ``d`` of ``widths`` (powers of two: any other width raises ``ValueError``) and every number of
    groups ``G = 1, 2, 4, ..., d/2`` (so :math:`m = d/G \ge 2`):
    ``samples`` Gaussian inputs (seed ``10_000 + d + G``), :func:`hessian_nonlinearity` of LN-G by probes (seed
    ``d + G``) and :func:`predicted_nonlinearity` at the inputs' scale. One dict per case: ``d``, ``G``, ``m``,
    ``value``, ``stderr``, ``median``, ``pred`` and ``z``, the measured minus the predicted value in standard errors.
    A progress bar per width (:func:`lnbook.util.progress.progress_bar`: silent under ``LNBOOK_PROGRESS=0``, as the
    book's build runs the lab; ``progress=False`` turns it off). ``device`` (default: CUDA when torch sees a GPU)
    is where the Hessians are computed; the results are Python floats.
    """
    from lnbook.util.device import resolve_device
    from lnbook.util.progress import progress_bar

    check_positive_int(samples, "samples")
    device = resolve_device(device)
    rows = []
    for d in widths:
        check_positive_int(d, "d")
        if d < 2 or d & (d - 1):
            raise ValueError(f"every width must be a power of two of at least 2 (G = 1, 2, 4, ..., d/2 divide it), "
                             f"got {d}; for another width call hessian_nonlinearity(group_ln_map(G, eps), x) for each G "
                             "that divides it")
        groups_list = [2**j for j in range(d.bit_length() - 1)]  # G = 1, 2, ..., d/2: m = d / G >= 2
        for G in progress_bar(groups_list, desc=f"d={d}", leave=False, enabled=progress):
            x = torch.randn(samples, d, dtype=dtype, generator=torch.Generator().manual_seed(10_000 + d + G)).to(device)
            h = hessian_nonlinearity(group_ln_map(G, eps), x, method="probe", generator=torch.Generator().manual_seed(d + G))
            pred = predicted_nonlinearity(d, G, eps=eps, sigma2=h.scale)
            rows.append(dict(d=d, G=G, m=d // G, value=h.value, stderr=h.stderr, median=h.median, pred=pred,
                             z=(h.value - pred) / h.stderr))
    return rows
