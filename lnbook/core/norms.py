r"""Normalisation layers without affine parameters, in functional and ``nn.Module`` form.

All functions normalise the **last** dimension of a floating-point torch tensor of shape
``(..., d)``.

**The eps convention** (the same as ``torch.nn.functional``): statistics are population
statistics (divide by ``d``, not ``d - 1``) and ``eps`` is added to the mean square *inside*
the square root,

.. math::

    \mathrm{LN}(x) = \frac{x - \mu(x)\mathbf 1}{\sqrt{\sigma^2(x) + \varepsilon}}, \qquad
    \mathrm{RMS}(x) = \frac{x}{\sqrt{\tfrac1d \|x\|^2 + \varepsilon}} .

With this convention ``layer_norm`` equals ``F.layer_norm(x, (d,), eps=eps)``, ``rms_norm``
equals ``F.rms_norm(x, (d,), eps=eps)`` and, on a 2-D input ``(N, C)``, ``group_layer_norm``
equals ``F.group_norm(x, groups, eps=eps)``.

**Zero variance.** With ``eps > 0`` a constant input has a centred part equal to 0, and the
output is the zero vector (well defined, no NaN). With ``eps == 0`` the value would be 0/0:
the functions raise ``ValueError`` instead of returning NaN (in eager mode; under ``torch.func``
transforms and tracing the value checks are skipped, see :func:`lnbook.util.validation.under_transform`).

**Float64.** Every row is divided by its largest entry before anything is squared (and, with
``eps = 0``, the centred row once more), so inputs as large as ``1e300`` or as small as ``1e-300`` stay
on the sphere of radius ``sqrt(d)`` (``eps = 0``). What rescaling cannot repair is the rounding of the
mean: it is exact only to about ``eps_mach * max|x_i|``, so for a near-constant input, whose centred part
is of that size, the output is far from zero-mean (``[1, 1 + 2^-52, 1]`` gives ``[-1, 1, -1]``: on the
sphere, but with mean ``-1/3``).
The output's mean is bounded by about ``eps_mach * sqrt(d) * max|x_i| / ||Px||``, small unless the
input is constant to rounding.
"""

from __future__ import annotations

import math

import torch
import torch.fx
from torch import nn

from lnbook.core import group_norm_kernel as fused_group_norm
from lnbook.util.validation import (
    as_float_tensor,
    check_eps,
    check_positive_int,
    check_width,
    under_transform,
)

__all__ = [
    "layer_norm",
    "rms_norm",
    "group_layer_norm",
    "parallel_layer_norm",
    "remove_uniform_component",
    "normalize_to_unit_sphere",
    "scale_by_sqrt_d",
    "layer_norm_three_steps",
    "layer_norm_preimage",
    "uniform_vector",
    "centering_matrix",
    "LayerNorm",
    "RMSNorm",
    "GroupLayerNorm",
    "ParallelLayerNorm",
]


def _divide_checked(
    numerator: torch.Tensor, denom: torch.Tensor, eps: float, what: str, quantity: str = "variance"
) -> torch.Tensor:
    if eps == 0.0 and not under_transform(denom) and bool((denom == 0).any()):
        rows = int((denom == 0).sum())
        raise ValueError(
            f"{what}: {rows} input vector(s) have zero {quantity} and eps=0, so the output would be "
            "0/0 (NaN); pass eps > 0 (e.g. 1e-5) or remove those rows"
        )
    return numerator / denom


def _row_scale(g: torch.Tensor, eps: float) -> torch.Tensor:
    """A positive per-row scale ``s`` (the largest entry in absolute value) to divide by before squaring.

    With ``eps = 0`` it is the largest entry itself (1 for a zero row), so the rescaled row has entries in
    ``[-1, 1]`` and one of modulus 1: no square overflows (``1e200``) or underflows (``1e-200``). With
    ``eps > 0`` it is at least 1 (``eps / s^p`` then never overflows). Pure tensor operations: no
    data-dependent control flow, so the norms work under ``torch.func``.
    """
    s = g.abs().amax(dim=-1, keepdim=True)
    if eps == 0.0:
        return torch.where(s > 0, s, torch.ones_like(s))
    return s.clamp_min(1.0)


def _abs_pow(c: torch.Tensor, p: float) -> torch.Tensor:
    r"""``|c|^p`` with gradient 0 where ``c = 0``. Autograd's :math:`d|z|^p/dz` at :math:`z = 0` is
    :math:`\infty \cdot 0` = NaN for ``p < 1``, while the Jacobian of :math:`c / (\mathrm{agg}|c|^p + \varepsilon)^{1/p}`
    at a zero group is :math:`P/\varepsilon^{1/p}` (the denominator's term is multiplied by ``c``, and
    :math:`c\,|c|^{p-1} \to 0`): so PLN with ``p < 1`` trains at the centre of every pair's sigmoid."""
    a = c.abs()
    zero = a == 0
    return torch.where(zero, torch.zeros_like(a), torch.where(zero, torch.ones_like(a), a).pow(p))


def _normalise(g: torch.Tensor, eps: float, what: str, *, centre: bool = True, p: float = 2.0,
               mean: bool = True, quantity: str = "variance") -> torch.Tensor:
    r"""``c / (agg |c|^p + eps)^(1/p)`` over the last axis, with ``c = g - mean(g)`` when ``centre``
    (``agg`` = mean, or sum when ``mean=False``), computed on rescaled rows.

    The identity used: for ``s > 0``, ``c / (agg|c|^p + eps)^(1/p) = (c/s) / (agg|c/s|^p + eps/s^p)^(1/p)``.
    The row is rescaled before centring (the mean cannot overflow) and, for ``eps = 0``, once more after
    centring (the centred part of a near-constant row cannot underflow when raised to the power ``p``).
    """
    dtype = g.dtype
    g = g.to(torch.promote_types(dtype, torch.float32))  # half precision: statistics in float32, as PyTorch's norms
    s0 = _row_scale(g, eps)
    g = g / s0
    c = g - g.mean(dim=-1, keepdim=True) if centre else g
    t = _row_scale(c, 0.0)  # the largest centred entry (1 for a zero row): no square of c / t underflows
    u = c / t
    power = u.pow(2) if p == 2 else _abs_pow(u, p)
    agg = power.mean(dim=-1, keepdim=True) if mean else power.sum(dim=-1, keepdim=True)
    if eps == 0.0:
        denom = torch.sqrt(agg) if p == 2 else agg.pow(1.0 / p)
        return _divide_checked(u, denom, eps, what, quantity).to(dtype)
    scale = s0 * t  # the largest centred entry of the row itself
    eps_t = eps / scale.pow(p)
    denom = torch.sqrt(agg + eps_t) if p == 2 else (agg + eps_t).pow(1.0 / p)
    # agg >= 1/d unless u == 0 (a constant group: value 0), so denom is 0 only there (divide by 1 instead of 0/0);
    # where scale^p underflows, eps_t is infinite and eps dominates: the value is (centred part) / eps^(1/p)
    safe = torch.where(denom > 0, denom, torch.ones_like(denom))
    tiny = torch.isinf(eps_t)
    out = torch.where(tiny, c * s0 / eps ** (1.0 / p), u / torch.where(tiny, torch.ones_like(safe), safe))
    return out.to(dtype)


def uniform_vector(d: int, dtype=torch.float64, device=None) -> torch.Tensor:
    """The all-ones ("uniform") vector :math:`\\mathbf 1 \\in \\mathbb R^d`."""
    check_positive_int(d, "d")
    return torch.ones(d, dtype=dtype, device=device)


def centering_matrix(d: int, dtype=torch.float64, device=None) -> torch.Tensor:
    """The orthogonal projector :math:`P = I - \\mathbf 1 \\mathbf 1^\\top / d` onto the hyperplane orthogonal to 1."""
    check_positive_int(d, "d")
    return torch.eye(d, dtype=dtype, device=device) - torch.full((d, d), 1.0 / d, dtype=dtype, device=device)


def layer_norm(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm of the last dimension, without affine parameters (see the module docstring)."""
    x = as_float_tensor(x)
    eps = check_eps(eps)
    check_width(x.shape[-1], 2, "layer_norm")
    return _normalise(x, eps, "layer_norm")


def rms_norm(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """RMSNorm of the last dimension, without gain: ``x / sqrt(mean(x**2) + eps)``."""
    x = as_float_tensor(x)
    eps = check_eps(eps)
    check_width(x.shape[-1], 1, "rms_norm")
    return _normalise(x, eps, "rms_norm", centre=False, quantity="norm")


def _split_groups(x: torch.Tensor, n_groups: int) -> torch.Tensor:
    return x.reshape(*x.shape[:-1], n_groups, x.shape[-1] // n_groups)


def group_layer_norm(x: torch.Tensor, groups: int, eps: float = 1e-5) -> torch.Tensor:
    """LN-G: LayerNorm applied separately to each of ``groups`` contiguous groups of features.

    ``groups`` must divide the width ``d`` and every group needs at least 2 features.
    ``groups=1`` is :func:`layer_norm`.
    """
    x = as_float_tensor(x)
    eps = check_eps(eps)
    groups = check_positive_int(groups, "groups")
    d = x.shape[-1]
    if d % groups != 0:
        divisors = [g for g in range(1, d + 1) if d % g == 0]
        raise ValueError(f"groups={groups} does not divide the width d={d}; choose one of {divisors}")
    if d // groups < 2:
        raise ValueError(
            f"groups={groups} leaves {d // groups} feature per group (width d={d}); every group needs "
            f"at least 2 features, so use groups <= {d // 2}"
        )
    return _normalise(_split_groups(x, groups), eps, "group_layer_norm").reshape(x.shape)


def parallel_layer_norm(
    x: torch.Tensor, group_size: int, p: float = 2, centering: bool = True, eps: float = 1e-5
) -> torch.Tensor:
    r"""PLN: split the features into contiguous groups of ``group_size`` and in each group compute

    .. math:: y = \frac{x - c\,\mu(x)\mathbf 1}{\left(\tfrac1g \sum_i |x_i - c\,\mu(x)|^p + \varepsilon\right)^{1/p}}

    with :math:`c = 1` when ``centering`` else 0. ``p=2``, ``centering=True`` and
    ``group_size=d`` give :func:`layer_norm`; ``group_size = d / G`` gives
    ``group_layer_norm(x, G)``. Without centering the layer is "parallel layer scaling" (PLS),
    and a group of size 1 is then allowed (it computes ``x / (|x|^p + eps)^(1/p)``).
    """
    x = as_float_tensor(x)
    eps = check_eps(eps)
    group_size = check_positive_int(group_size, "group_size", minimum=2 if centering else 1)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not (p > 0) or math.isinf(p):
        raise ValueError(f"p must be a finite number > 0, got {p!r}")
    d = x.shape[-1]
    if d % group_size != 0:
        sizes = [g for g in range(2 if centering else 1, d + 1) if d % g == 0]
        raise ValueError(f"group_size={group_size} does not divide the width d={d}; choose one of {sizes}")
    g = _split_groups(x, d // group_size)
    return _normalise(g, eps, "parallel_layer_norm", centre=centering, p=float(p)).reshape(x.shape)


# --- the three steps of Gupta et al.: LN = scale_by_sqrt_d(normalize(remove_uniform_component(x)))


def remove_uniform_component(x: torch.Tensor) -> torch.Tensor:
    """Step 1: subtract the component along the uniform vector 1, i.e. ``P x = x - mean(x) 1``."""
    x = as_float_tensor(x)
    return x - x.mean(dim=-1, keepdim=True)


def normalize_to_unit_sphere(x: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """Step 2: ``x / sqrt(|x|^2 + eps)`` (``eps`` here is in units of the squared norm)."""
    x = as_float_tensor(x)
    eps = check_eps(eps)
    return _normalise(x, eps, "normalize_to_unit_sphere", centre=False, mean=False, quantity="norm")


def scale_by_sqrt_d(x: torch.Tensor) -> torch.Tensor:
    """Step 3: multiply by ``sqrt(d)``, so that the output's mean square is 1."""
    x = as_float_tensor(x)
    return math.sqrt(x.shape[-1]) * x


def layer_norm_three_steps(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """LN as the composition of the three steps; LN's ``eps`` becomes ``d * eps`` in step 2."""
    x = as_float_tensor(x)
    eps = check_eps(eps)
    check_width(x.shape[-1], 2, "layer_norm_three_steps")
    centred = remove_uniform_component(x)
    d = x.shape[-1]
    if eps == 0.0 and not under_transform(centred) and bool((centred == 0).all(dim=-1).any()):
        raise ValueError("layer_norm_three_steps: an input vector has zero variance and eps=0, so the output "
                         "would be 0/0 (NaN); pass eps > 0 (e.g. 1e-5) or remove those rows")
    return scale_by_sqrt_d(normalize_to_unit_sphere(centred, eps=d * eps))


def layer_norm_preimage(y: torch.Tensor, eps: float = 1e-5, atol: float = 1e-10) -> torch.Tensor:
    r"""A point :math:`x` with :math:`\mathrm{LN}_\varepsilon(x) = y`, for every ``y`` in the image of LayerNorm.

    The image is the sphere :math:`\{y \perp \mathbf 1 : \|y\| = \sqrt d\}` when ``eps = 0`` and the open
    ball :math:`\{y \perp \mathbf 1 : \|y\| < \sqrt d\}` when ``eps > 0``. For such ``y`` the point is
    :math:`x = t\,y` with :math:`t = \sqrt{d\varepsilon / (d - \|y\|^2)}` (``t = 1`` when ``eps = 0``):
    then :math:`\|Px\|^2 = t^2\|y\|^2` and :math:`\sqrt d\, t y/\sqrt{t^2\|y\|^2 + d\varepsilon} = y`.
    ``y`` of shape ``(..., d)``; a ``y`` that is not orthogonal to 1 (to ``atol`` times ``sqrt(d)``), or whose
    norm is not in the image, raises ``ValueError``.

    >>> y = torch.tensor([1.0, 0.0, -1.0], dtype=torch.float64)          # |y| = sqrt(2) < sqrt(3)
    >>> torch.allclose(layer_norm(layer_norm_preimage(y, eps=0.1), eps=0.1), y)
    True
    """
    y = as_float_tensor(y, "y")
    eps = check_eps(eps)
    d = y.shape[-1]
    check_width(d, 2, "layer_norm_preimage")
    if bool((y.sum(dim=-1).abs() > atol * math.sqrt(d)).any()):
        raise ValueError("layer_norm_preimage: y is not orthogonal to the uniform vector (its entries must sum to 0); "
                         "no input is mapped there")
    sq = y.pow(2).sum(dim=-1, keepdim=True)
    if eps == 0.0:
        if not torch.allclose(sq, torch.full_like(sq, float(d)), rtol=0, atol=atol * d):
            raise ValueError(f"layer_norm_preimage: with eps=0 the image is the sphere of radius sqrt(d) = {math.sqrt(d):.6g}; "
                             "y must have that norm")
        return y.clone()
    if bool((sq >= d).any()):
        raise ValueError(f"layer_norm_preimage: with eps > 0 the image is the open ball of radius sqrt(d) = {math.sqrt(d):.6g}; "
                         "y must be strictly inside it")
    return torch.sqrt(d * eps / (d - sq)) * y


# --- nn.Module forms


class _Norm(nn.Module):
    def __init__(self, eps: float = 1e-5, validate: bool = True):
        super().__init__()
        self.eps = check_eps(eps)
        self.validate = validate

    def extra_repr(self) -> str:
        return f"eps={self.eps}"

    def __prepare_scriptable__(self):
        # torch.jit.script calls this first: refuse with the reason and the working routes, rather than fail deep
        # inside TorchScript's compiler on the module's Python checks
        raise TypeError(f"{type(self).__name__} does not support torch.jit.script (TorchScript is deprecated, and the "
                        "module's Python checks do not script): use torch.jit.trace, torch.compile or torch.export, "
                        "which all run it")


class LayerNorm(_Norm):
    """``nn.Module`` form of :func:`layer_norm` (no affine parameters)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.validate or _traced(x):  # a torch.fx trace records the unchecked op, as compile and export do
            return torch.nn.functional.layer_norm(x, x.shape[-1:], eps=self.eps)
        return layer_norm(x, eps=self.eps)


class RMSNorm(_Norm):
    """``nn.Module`` form of :func:`rms_norm` (no gain)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.validate or _traced(x):
            return torch.nn.functional.rms_norm(x, x.shape[-1:], eps=self.eps)
        return rms_norm(x, eps=self.eps)


def _traced(x) -> bool:
    """``x`` is a ``torch.fx`` proxy: the value checks cannot run on it, and the trace records the unchecked
    computation (values are not checked in traced, compiled or exported graphs; a refused input gives NaN there)."""
    return isinstance(x, torch.fx.Proxy)


def _fast_path_applies(x, width_ok) -> bool:
    """True when a module may skip the value checks: ``x`` is a floating-point tensor whose width
    passes ``width_ok``. A ``torch.fx`` proxy is not a tensor: tracing records the fast path."""
    if isinstance(x, torch.fx.Proxy):
        return True
    return isinstance(x, torch.Tensor) and torch.is_floating_point(x) and x.dim() >= 1 and width_ok(x.shape[-1])


def _fits(p, x) -> bool:
    """True when ``p`` is None or a CPU per-feature parameter for ``x``: what the kernel reads is then valid."""
    return p is None or (p.dtype == x.dtype and p.is_cpu and p.shape == x.shape[-1:])


class GroupLayerNorm(_Norm):
    """``nn.Module`` form of :func:`group_layer_norm` (LN-G), optionally with a per-feature affine map.

    **Fast path** (the default, ``validate=False``): on the CPU, the operator
    ``torch.ops.lnbook.group_layer_norm`` of :mod:`lnbook.core.group_norm_kernel` (a fused C kernel, one
    pass forward and one backward, the affine map included; a ``torch.library`` operator with fake,
    autograd and vmap rules, so FakeTensor, ``torch.compile``, ``torch.export``, batched gradients and
    double backward see it as one op). Under ``torch.func`` transforms and forward-mode AD, on CUDA, and in
    ``torch.fx`` traces it runs the documented decomposition: one reshape to ``(..., groups, d / groups)``,
    ``F.layer_norm`` over the last axis, then the affine map; the operator equals it to rounding.
    Only the shape is checked on each call (a group count that does not divide the width raises the
    functional form's ``ValueError``, an input whose width is not the affine layer's ``width`` a ``ValueError`` naming
    both); values are not, since a check would cost a host synchronisation
    per call (:func:`lnbook.ml.training.train` checks the data and the loss instead).
    ``validate=True``, or ``eps=0`` (where a constant group would give 0/0), runs the checked
    :func:`group_layer_norm`: NaN/inf inputs and zero-variance groups raise a ``ValueError`` in eager mode;
    under ``torch.func`` transforms (``vmap``, ``jacrev``, ...), ``torch.compile``, ``torch.export`` and in
    ``torch.fx`` traces values are not checked, and such inputs give NaN.

    ``affine=True`` needs ``width`` and adds ``weight`` (ones) and ``bias`` (zeros) of that length:
    ``y = LN-G(x) * weight + bias``, which on inputs ``(N, width)`` is ``nn.GroupNorm(groups, width)``.
    Parameters of another floating dtype than the input are not refused, as ``nn.GroupNorm`` refuses them: the
    result follows PyTorch's type promotion of ``y * weight + bias`` (a float32 input with float64 parameters gives
    float64, normalised in float32; under ``torch.autocast`` a bfloat16 input with float32 parameters gives float32). Keep the layer in the
    input's dtype (``.to(dtype)``) for an output of that dtype.
    """

    def __init__(self, groups: int, eps: float = 1e-5, validate: bool = False, *, affine: bool = False,
                 width: int | None = None):
        super().__init__(eps, validate)
        self.groups = check_positive_int(groups, "groups")
        if affine:
            if width is None:
                raise ValueError("GroupLayerNorm(affine=True) needs width= (the number of features) for its weight and bias")
            width = check_positive_int(width, "width")
            if not self._width_ok(width):
                raise ValueError(f"groups={groups} must divide width={width} into groups of at least 2 features")
            self.weight = nn.Parameter(torch.ones(width))
            self.bias = nn.Parameter(torch.zeros(width))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def _width_ok(self, d: int) -> bool:
        return d % self.groups == 0 and d // self.groups >= 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if w is not None and isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[-1] != w.shape[0]:
            # one int comparison: without it a wrong width fell back to the decomposition and failed in its broadcast
            raise ValueError(f"this GroupLayerNorm has width={w.shape[0]} (its weight and bias) but the input's last "
                             f"dimension is {x.shape[-1]}: pass inputs of width {w.shape[0]} or make the layer with "
                             f"width={x.shape[-1]}")
        if ((self.validate or self.eps == 0.0) and not _traced(x)) or not _fast_path_applies(x, self._width_ok):
            y = group_layer_norm(x, self.groups, eps=self.eps)
            return y * self.weight + self.bias if self.weight is not None else y
        w, b = self.weight, self.bias
        if fused_group_norm.applies(x) and _fits(w, x) and _fits(b, x):
            # fused_group_layer_norm's checks hold (width above, parameters here): call the operator itself
            return fused_group_norm.OPERATOR(x, w, b, self.groups, self.eps)[0]
        return fused_group_norm.reference_group_layer_norm(x, self.groups, self.eps, w, b)

    def extra_repr(self) -> str:
        return f"groups={self.groups}, eps={self.eps}, affine={self.weight is not None}"


class ParallelLayerNorm(_Norm):
    """``nn.Module`` form of :func:`parallel_layer_norm` (PLN; PLS when ``centering=False``).

    Same contract as :class:`GroupLayerNorm`: a fast path by default (for ``p=2`` with centring, LN-G's
    fused CPU operator where :func:`lnbook.core.group_norm_kernel.applies`, else ``F.layer_norm`` on the
    grouped view, ``F.rms_norm`` for ``p=2`` without, plain tensor operations for
    other ``p``), shape checks only; ``validate=True`` or ``eps=0`` runs the checked functional form.
    """

    def __init__(self, group_size: int, p: float = 2, centering: bool = True, eps: float = 1e-5, validate: bool = False):
        super().__init__(eps, validate)
        self.group_size = check_positive_int(group_size, "group_size", minimum=2 if centering else 1)
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not (p > 0) or math.isinf(p):
            raise ValueError(f"p must be a finite number > 0, got {p!r}")
        self.p = p
        self.centering = centering

    def _width_ok(self, d: int) -> bool:
        return d % self.group_size == 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if ((self.validate or self.eps == 0.0) and not _traced(x)) or not _fast_path_applies(x, self._width_ok):
            return parallel_layer_norm(x, self.group_size, p=self.p, centering=self.centering, eps=self.eps)
        if self.p == 2 and self.centering and fused_group_norm.applies(x):
            # PLN with p = 2 and centring is LN-G with width / group_size groups: the fused CPU kernel
            # (GroupLayerNorm's), several times cheaper than F.layer_norm over groups of 2 (equal to rounding)
            return fused_group_norm.OPERATOR(x, None, None, x.shape[-1] // self.group_size, self.eps)[0]
        g = x.unflatten(-1, (-1, self.group_size))
        shape = g.shape[-1:]
        if self.p == 2:
            norm = torch.nn.functional.layer_norm if self.centering else torch.nn.functional.rms_norm
            return norm(g, shape, eps=self.eps).flatten(-2)
        # p != 2: |g|^p of half-precision input overflows (75^3 > 65504 in float16) or loses the small differences
        # of near-equal pairs (bfloat16): computed in float32 at least, returned in the input's dtype
        dtype = x.dtype
        g = g.to(torch.promote_types(dtype, torch.float32))
        if self.centering:
            g = g - g.mean(dim=-1, keepdim=True)
        denom = (_abs_pow(g, self.p).mean(dim=-1, keepdim=True) + self.eps).pow(1.0 / self.p)
        return (g / denom).flatten(-2).to(dtype)

    def extra_repr(self) -> str:
        return f"group_size={self.group_size}, p={self.p}, centering={self.centering}, eps={self.eps}"
