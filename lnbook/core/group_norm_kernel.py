r"""A fused CPU kernel for LN-G (group LayerNorm): one kernel call forward; backward, one for the input
gradient and one for the gain and bias gradients when they are needed (float32 groups of 2, 4, 8 on one
thread: one call and one pass for all three, with the same numbers; groups of 16 too).

Why it exists: on the CPU, ``F.layer_norm`` over the grouped view ``(..., groups, d / groups)`` pays a
fixed cost per group, so with small groups (8 .. 128 numbers) LN-G cost up to 3.9x LN at the same
width and batch, although it reads and writes the same bytes (``benchmarks/lng_speed.py``). The C
source ``lnbook/core/csrc/group_layer_norm.c`` computes, for each group of ``m`` numbers,

.. math::

    y = (x - \bar x)\, r, \quad r = (\sigma^2(x) + \varepsilon)^{-1/2}, \qquad
    \frac{\partial L}{\partial x} = r\,\bigl(g - \bar g - y\, \overline{g y}\bigr),

the second line being the vector-Jacobian product of LayerNorm with upstream gradient ``g`` (bars
are means over the group). Each group size 2, 4, .., 128 has a loop of known length, which the
compiler turns into a few vector instructions.

**Build.** At first use the source is compiled with the system C compiler (``$CC``, else ``cc``) and
``-O3 -march=native -fopenmp`` plus the reassociation flags that let the compiler vectorise the sums
(``-fassociative-math -fno-signed-zeros -fno-trapping-math -fno-math-errno``; no other fast-math
flag). The shared library is cached under ``$LNBOOK_KERNEL_CACHE`` (default ``~/.cache/lnbook``),
named by a hash of the source, the flags, the compiler and the CPU, and written atomically, so
parallel test workers can build it at the same time. Building takes about a second.

**The operator.** The kernel sits behind a real PyTorch operator, ``torch.ops.lnbook.group_layer_norm(x,
weight, bias, groups, eps) -> (y, mean, rstd)`` (``torch.library.Library``), with the per-feature affine
map fused in, and its backward ``torch.ops.lnbook.group_layer_norm_backward``. Both have a fake
implementation (FakeTensorMode, ``torch.compile``, ``torch.export`` see shapes, never the ctypes call) and
a vmap rule; the forward has an autograd rule. Dispatch modes (FLOP counters) see one op. On CUDA the operator
runs in torch operations (so a graph exported on the CPU runs on a GPU).

The operator checks its own arguments (groups divide the width into groups of at least 2, ``eps >= 0``, weight and bias
of ``x``'s dtype, device and width, statistics of the right shape in the backward), from metadata only, so
a direct call or a compiled or exported graph gets a ValueError rather than a misread buffer.

**Transforms.** The kernel has no forward-mode formula, so under forward-mode AD (dual tensors,
``jacobian(strategy="forward-mode")``) and under a differentiating ``torch.func`` transform (``grad``, ``vjp``,
``jacrev``, ``jvp``, ``jacfwd``, ``hessian``) the operator's Autograd kernel runs the decomposition
(``native_layer_norm`` over the grouped view, then the affine map: the ATen calls of
:func:`reference_group_layer_norm`, so the same numbers), which they differentiate at every order. This holds for
the operator itself, so for a direct call and for every compiled or exported graph that holds it
(``tests/core/test_group_norm_kernel.py::test_operator_and_exported_model_under_every_transform``); ``vmap``
alone keeps the kernel through the vmap rule, and plain reverse mode the autograd rule.

**When it is used.** :class:`lnbook.core.norms.GroupLayerNorm` calls the operator when :func:`applies`
says so: a CPU float32/float64 tensor, and neither a ``torch.func`` transform nor forward-mode AD active.
Those two, CUDA and ``torch.fx`` traces run the documented decomposition
:func:`reference_group_layer_norm` (``F.layer_norm`` over the grouped view, then the affine map), which
the operator equals to rounding (the operator itself runs it under those transforms, above). ``LNBOOK_FUSED_KERNEL=0``
switches the kernel off; without a C compiler the operator computes the same numbers with torch
operations (:func:`kernel_status` says which).

**Range.** Where the float sum of squared deviations of a group overflows or underflows its type (float32
groups with deviations beyond about 1e19 or below about 1e-19), the kernel recomputes that group's
statistics with the deviations scaled by their largest magnitude, so the forward value is LN-G to rounding
for every finite input with ``|x|`` below half the type's largest number (NaN for NaN or infinite input;
with a gain, for ``|x| * max|gain|`` below it too: under the reassociation flags the compiler may multiply the
deviation by the gain before the reciprocal standard deviation, so float32 inputs near 2^126 with a gain of 5
overflow to infinity),
except, at ``eps = 0``, a group whose standard deviation is below the reciprocal of the type's largest number
(about 3e-39 in float32, subnormal inputs): its ``rstd`` overflows to infinity and the operator returns
infinities. The module never meets that case (at ``eps = 0`` it runs the checked
:func:`lnbook.core.norms.group_layer_norm`); a direct call of the operator or an exported graph at ``eps = 0``
can.
The decomposition :func:`reference_group_layer_norm` does not: ``F.layer_norm`` in float32 gives zeros for
inputs near 1e19 and NaN near 1e20, so "equal to rounding" holds where the decomposition's own sums stay finite. The
backward pass (input, gain and bias gradients) is the vector-Jacobian product to rounding over the same range, for
every group size and ``eps``, in the kernel itself: it never forms ``rstd**2`` (which leaves the type once a group's
standard deviation is beyond 2^63 or below 2^-63 in float32, 2^511 / 2^-511 in float64), not even under the
reassociation flags (the C source's ``LNG_OPAQUE``). Only where the gradient itself (about ``|grad| / std``)
exceeds the type's largest number, at ``eps = 0`` and groups of standard deviation below about ``|grad| / 3e38`` in
float32, does it overflow.
``tests/core/test_group_norm_kernel.py::test_kernel_is_exact_far_from_unit_scale`` and
``::test_the_backward_is_exact_for_every_group_size_far_from_unit_scale``.

**Numbers.** The kernel's sums run in a different order from ATen's, so results agree with
``F.layer_norm`` to rounding (a few float32 ulps; ``tests/core/test_group_norm_kernel.py``), not bit for
bit. Groups are independent and every parameter-gradient sum runs over the samples in order, so results
do not depend on the number of threads.

**Second derivatives.** The autograd rule's backward under ``create_graph=True`` (double backward,
``torch.autograd.functional.hessian``) recomputes the gradient through the decomposition, so every
order of derivative is exact; with ``create_graph=False`` it calls the backward kernel.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.autograd import forward_ad

from lnbook.util.validation import traced_here

__all__ = ["fused_group_layer_norm", "reference_group_layer_norm", "applies", "kernel_status", "kernel_library"]

SOURCE = Path(__file__).with_name("csrc") / "group_layer_norm.c"
BASE_FLAGS = ["-O3", "-fPIC", "-shared", "-fno-math-errno", "-fassociative-math", "-fno-signed-zeros",
              "-fno-trapping-math"]
# Tried in order: the first set the compiler accepts is used.
OPTIONAL_FLAG_SETS = (["-march=native", "-fopenmp"], ["-march=native"], ["-fopenmp"], [])

_lock = threading.Lock()
_state: dict = {"tried": False, "lib": None, "status": "not built yet"}


def _cpu_fingerprint() -> str:
    """The CPU's model and feature flags (Linux), else what ``platform`` knows: part of the cache key,
    since ``-march=native`` code may not run on another CPU."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        keep = [ln for ln in lines if ln.startswith(("model name", "flags", "Features", "CPU part"))]
        return "\n".join(sorted(set(keep)))
    except OSError:
        return f"{platform.machine()} {platform.processor()}"


def _cache_dir() -> Path:
    return Path(os.environ.get("LNBOOK_KERNEL_CACHE", Path.home() / ".cache" / "lnbook"))


def _compile(compiler: str, flags: list[str], target: Path) -> bool:
    """Compile SOURCE into ``target`` atomically; False (and no file) when the compiler refuses."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        result = subprocess.run([compiler, *BASE_FLAGS, *flags, str(SOURCE), "-o", tmp, "-lm"],
                                capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            return False
        os.replace(tmp, target)
        return True
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _build() -> ctypes.CDLL | None:
    if os.environ.get("LNBOOK_FUSED_KERNEL", "1") == "0":
        _state["status"] = "switched off by LNBOOK_FUSED_KERNEL=0: F.layer_norm over the grouped view"
        return None
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        _state["status"] = "no C compiler found ($CC, cc, gcc, clang): F.layer_norm over the grouped view"
        return None
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as err:
        _state["status"] = f"cannot run {compiler} ({err}): F.layer_norm over the grouped view"
        return None
    source = SOURCE.read_bytes()
    for flags in OPTIONAL_FLAG_SETS:
        key = hashlib.sha256(b"\0".join([source, " ".join(BASE_FLAGS + flags).encode(), version.encode(),
                                         _cpu_fingerprint().encode()])).hexdigest()[:16]
        target = _cache_dir() / f"group_layer_norm-{key}.so"
        try:
            if not target.exists() and not _compile(compiler, flags, target):
                continue
            lib = ctypes.CDLL(str(target))
        except (OSError, subprocess.SubprocessError):
            continue
        pointer, i64 = ctypes.c_void_p, ctypes.c_int64
        for suffix in ("f32", "f64"):
            fwd, bwd = getattr(lib, f"lng_forward_{suffix}"), getattr(lib, f"lng_backward_{suffix}")
            par = getattr(lib, f"lng_param_grads_{suffix}")
            both = getattr(lib, f"lng_backward_params_{suffix}")
            both.argtypes = [pointer] * 8 + [i64, i64, i64, ctypes.c_int]
            both.restype = None
            fwd.argtypes = [pointer] * 6 + [i64, i64, i64, ctypes.c_double, ctypes.c_int]
            bwd.argtypes = [pointer] * 6 + [i64, i64, i64, ctypes.c_int]
            par.argtypes = [pointer] * 6 + [i64, i64, i64, ctypes.c_int]
            fwd.restype = bwd.restype = par.restype = None
        openmp = "with OpenMP" if lib.lng_has_openmp() else "without OpenMP"
        _state["status"] = f"built with {Path(compiler).name} {' '.join(flags) or '(no optional flags)'} ({openmp}): {target}"
        return lib
    _state["status"] = f"{compiler} could not compile {SOURCE.name}: F.layer_norm over the grouped view"
    return None


def kernel_library() -> ctypes.CDLL | None:
    """The compiled kernel (built at the first call), or None when it cannot be built here."""
    if not _state["tried"]:
        with _lock:
            if not _state["tried"]:
                _state["lib"] = _build()
                _state["tried"] = True
    return _state["lib"]


def kernel_status() -> str:
    """One line: how the kernel was built and where it lives, or why LN-G runs on ``F.layer_norm``."""
    kernel_library()
    return _state["status"]


_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}


def _forward_ad_active() -> bool:
    """True inside ``torch.autograd.forward_ad.dual_level()`` (forward-mode AD outside ``torch.func``)."""
    return forward_ad._current_level >= 0


def applies(x) -> bool:
    """True when :class:`lnbook.core.norms.GroupLayerNorm` runs ``x`` through the operator
    ``torch.ops.lnbook.group_layer_norm``: a non-empty dense CPU float32/float64 tensor, no ``torch.func``
    transform and no forward-mode AD active (the operator has no forward-mode formula: those run the
    documented decomposition, ``F.layer_norm`` over the grouped view, which they differentiate exactly),
    not TorchScript, and the kernel built (under ``torch.compile``/``torch.export`` the operator is kept
    in the graph either way; its fake implementation gives the shapes)."""
    return (
        isinstance(x, torch.Tensor)
        and x.is_cpu
        and x.dtype in _SUFFIX
        and x.numel() > 0
        and x.layout == torch.strided
        and not torch._C._are_functorch_transforms_active()
        and not _forward_ad_active()
        and not torch.jit.is_scripting()
        and not torch.jit.is_tracing()
        and (traced_here(x) or kernel_library() is not None)
    )


def reference_group_layer_norm(x: torch.Tensor, groups: int, eps: float = 1e-5, weight=None, bias=None) -> torch.Tensor:
    """The decomposition: ``F.layer_norm`` over the grouped view ``(..., groups, d / groups)``, then the
    per-feature affine map. Every transform differentiates it; the operator equals it to rounding."""
    grouped = x.unflatten(-1, (groups, -1))
    y = F.layer_norm(grouped, grouped.shape[-1:], eps=eps).flatten(-2)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def _statistics(x: torch.Tensor, groups: int, eps: float):
    grouped = x.unflatten(-1, (groups, -1))
    mean = grouped.mean(-1)
    rstd = (grouped.var(-1, unbiased=False) + eps).rsqrt()
    return mean, rstd


def _xhat(x, mean, rstd, groups):
    return ((x.unflatten(-1, (groups, -1)) - mean.unsqueeze(-1)) * rstd.unsqueeze(-1)).flatten(-2)


def _ptr(t):
    return None if t is None else t.data_ptr()


# --- the operators. Registered with the low-level ``torch.library.Library`` API rather than
# ``torch.library.custom_op``: the same schema, fake, vmap and autograd rules, without custom_op's Python
# wrappers around every call (default filling, alias checks, a dynamo-disabled frame), which cost more than
# the kernel itself at the labs' size (profiled on 10 000 calls; ``benchmarks/lng_speed.py``).
_LIB = torch.library.Library("lnbook", "DEF")
_LIB.define("group_layer_norm(Tensor x, Tensor? weight, Tensor? bias, int groups, float eps) -> (Tensor, Tensor, Tensor)")
_LIB.define("group_layer_norm_backward(Tensor grad, Tensor x, Tensor mean, Tensor rstd, Tensor? weight, int groups, "
            "bool weight_grad, bool bias_grad) -> (Tensor, Tensor, Tensor)")
_FORWARD = OPERATOR = torch.ops.lnbook.group_layer_norm.default
_BACKWARD = torch.ops.lnbook.group_layer_norm_backward.default
_CALLS: dict = {}  # (name, dtype) -> the ctypes function


def _kernel(name: str, dtype):
    fn = _CALLS.get((name, dtype))
    if fn is None:
        fn = _CALLS[name, dtype] = getattr(kernel_library(), f"lng_{name}_{_SUFFIX[dtype]}")
    return fn


def _check_operator_arguments(x, weight, bias, groups, eps) -> None:
    """The operator's own argument checks (shapes, dtypes and numbers only: no data read, no host sync), so
    that a direct call ``torch.ops.lnbook.group_layer_norm(...)`` or a compiled/exported graph holding it
    refuses what the kernel would misread (a weight shorter than the width is read past its end)."""
    if not x.dtype.is_floating_point:
        raise TypeError(f"x must be a floating-point tensor, got {x.dtype}; convert it with x.float()")
    d = x.shape[-1] if x.dim() > 0 else 0
    if groups < 1 or d % groups or d // groups < 2:
        raise ValueError(f"groups={groups} must divide the width {d} into groups of at least 2 features")
    if not 0 <= eps < float("inf"):  # also refuses NaN; eps = inf would make the layer a constant 0, silently
        raise ValueError(f"eps must be a finite number >= 0, got {eps}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and (tuple(p.shape) != (d,) or p.dtype != x.dtype or p.device != x.device):
            raise ValueError(f"{name} must be a {x.dtype} tensor of shape ({d},) on {x.device}, "
                             f"got {p.dtype} {tuple(p.shape)} on {p.device}")


def _check_backward_arguments(grad, x, mean, rstd, weight, groups) -> None:
    _check_operator_arguments(x, weight, None, groups, 0.0)
    stats = (*x.shape[:-1], groups)
    if grad.shape != x.shape or grad.dtype != x.dtype:
        raise ValueError(f"grad must be a {x.dtype} tensor of shape {tuple(x.shape)}, "
                         f"got {grad.dtype} {tuple(grad.shape)}")
    for name, t in (("mean", mean), ("rstd", rstd)):
        if tuple(t.shape) != stats or t.dtype != x.dtype:
            raise ValueError(f"{name} must be a {x.dtype} tensor of shape {stats}, got {t.dtype} {tuple(t.shape)}")


def _forward_torch(x, weight, bias, groups, eps):
    """The forward operator in torch operations: on CUDA, and on a CPU without a compiler."""
    _check_operator_arguments(x, weight, bias, groups, eps)
    mean, rstd = _statistics(x, groups, eps)
    y = _xhat(x, mean, rstd, groups)
    y = y * weight if weight is not None else y
    return (y + bias if bias is not None else y), mean, rstd


def _forward_cpu(x, weight, bias, groups, eps):
    """LN-G of the last dimension with an optional per-feature affine map; returns (y, mean, rstd), the
    statistics of shape ``(..., groups)`` (saved for the backward pass, not differentiable)."""
    if kernel_library() is None or x.dtype not in _SUFFIX:  # no compiler here, or a type the kernel has no
        return _forward_torch(x, weight, bias, groups, eps)  # version for (float16, bfloat16): torch operations
    _check_operator_arguments(x, weight, bias, groups, eps)
    xc = x.contiguous()
    stats = (*x.shape[:-1], groups)
    y, mean, rstd = torch.empty_like(xc), xc.new_empty(stats), xc.new_empty(stats)
    w = weight.contiguous() if weight is not None else None
    b = bias.contiguous() if bias is not None else None
    _kernel("forward", x.dtype)(xc.data_ptr(), y.data_ptr(), mean.data_ptr(), rstd.data_ptr(), _ptr(w), _ptr(b),
                                mean.numel(), x.shape[-1] // groups, groups, eps, torch.get_num_threads())
    return y, mean, rstd


def _backward_cpu(grad, x, mean, rstd, weight, groups, weight_grad, bias_grad):
    """The vector-Jacobian product of the forward operator: (dx, dweight, dbias); a parameter gradient that is
    not asked for is an empty tensor."""
    _check_backward_arguments(grad, x, mean, rstd, weight, groups)
    if kernel_library() is None or x.dtype not in _SUFFIX:
        return _backward_formula(grad, x, mean, rstd, weight, groups, weight_grad, bias_grad, 0)
    g, xc = grad.contiguous(), x.contiguous()
    mean, rstd = mean.contiguous(), rstd.contiguous()
    w = weight.contiguous() if weight is not None else None
    d, m, threads = x.shape[-1], x.shape[-1] // groups, torch.get_num_threads()
    dx = torch.empty_like(xc)
    dw = xc.new_empty(d if weight_grad else 0)
    db = xc.new_empty(d if bias_grad else 0)
    if weight_grad and bias_grad and w is not None:  # one pass over grad and x where the kernel can
        _kernel("backward_params", x.dtype)(g.data_ptr(), xc.data_ptr(), mean.data_ptr(), rstd.data_ptr(), _ptr(w),
                                            dx.data_ptr(), dw.data_ptr(), db.data_ptr(), rstd.numel(), m, groups,
                                            threads)
        return dx, dw, db
    _kernel("backward", x.dtype)(g.data_ptr(), xc.data_ptr(), mean.data_ptr(), rstd.data_ptr(), _ptr(w),
                                 dx.data_ptr(), rstd.numel(), m, groups, threads)
    if weight_grad or bias_grad:
        _kernel("param_grads", x.dtype)(g.data_ptr(), xc.data_ptr(), mean.data_ptr(), rstd.data_ptr(),
                                        _ptr(dw) if weight_grad else None, _ptr(db) if bias_grad else None,
                                        rstd.numel() // groups, m, groups, threads)
    return dx, dw, db


def _backward_torch(grad, x, mean, rstd, weight, groups, weight_grad, bias_grad):
    """The backward operator in torch operations (CUDA)."""
    _check_backward_arguments(grad, x, mean, rstd, weight, groups)
    return _backward_formula(grad, x, mean, rstd, weight, groups, weight_grad, bias_grad, 0)


_LIB.impl("group_layer_norm", _forward_cpu, "CPU")
_LIB.impl("group_layer_norm_backward", _backward_cpu, "CPU")
# CUDA has no kernel here; the operator still runs there (an exported CPU graph moved to a GPU), in torch operations
_LIB.impl("group_layer_norm", _forward_torch, "CUDA")
_LIB.impl("group_layer_norm_backward", _backward_torch, "CUDA")


@torch.library.register_fake("lnbook::group_layer_norm", lib=_LIB)
def _op_fake(x, weight, bias, groups, eps):
    _check_operator_arguments(x, weight, bias, groups, eps)
    stats = (*x.shape[:-1], groups)
    return torch.empty_like(x, memory_format=torch.contiguous_format), x.new_empty(stats), x.new_empty(stats)


@torch.library.register_fake("lnbook::group_layer_norm_backward", lib=_LIB)
def _op_backward_fake(grad, x, mean, rstd, weight, groups, weight_grad, bias_grad):
    _check_backward_arguments(grad, x, mean, rstd, weight, groups)
    d = x.shape[-1]
    return (torch.empty_like(x, memory_format=torch.contiguous_format), x.new_empty(d if weight_grad else 0),
            x.new_empty(d if bias_grad else 0))

def _backward_formula(grad, x, mean, rstd, weight, groups, weight_grad, bias_grad, batch_dims):
    """The kernel's backward in torch operations (for ``vmap`` and machines without a compiler).
    Parameter gradients sum over every dimension except the first ``batch_dims`` and the last."""
    xhat = _xhat(x, mean, rstd, groups)
    gw = grad * weight if weight is not None else grad
    gw_g, xhat_g = gw.unflatten(-1, (groups, -1)), xhat.unflatten(-1, (groups, -1))
    dx = rstd.unsqueeze(-1) * (gw_g - gw_g.mean(-1, keepdim=True)
                               - xhat_g * (gw_g * xhat_g).mean(-1, keepdim=True))
    dx = dx.flatten(-2)
    reduce = tuple(range(batch_dims, grad.dim() - 1))
    dw = (grad * xhat).sum(reduce) if weight_grad else x.new_empty(0)
    db = grad.sum(reduce) if bias_grad else x.new_empty(0)
    return dx, dw, db


def _to_front(t, dim, size):
    if t is None:
        return None
    return t.movedim(dim, 0) if dim is not None else t.expand(size, *t.shape)


@torch.library.register_vmap("lnbook::group_layer_norm", lib=_LIB)
def _op_vmap(info, in_dims, x, weight, bias, groups, eps):
    x = _to_front(x, in_dims[0], info.batch_size)
    _check_operator_arguments(x, *(None if p is None else p.select(dim, 0) if dim is not None else p
                                   for p, dim in zip((weight, bias), in_dims[1:3])), groups, eps)
    if in_dims[1] is None and in_dims[2] is None:  # rows are independent: one call on the stacked input
        return _FORWARD(x, weight, bias, groups, eps), (0, 0, 0)
    mean, rstd = _statistics(x, groups, eps)
    y = _xhat(x, mean, rstd, groups)
    lift = (slice(None),) + (None,) * (x.dim() - 2)
    if weight is not None:
        y = y * (_to_front(weight, in_dims[1], info.batch_size)[lift] if in_dims[1] is not None else weight)
    if bias is not None:
        y = y + (_to_front(bias, in_dims[2], info.batch_size)[lift] if in_dims[2] is not None else bias)
    return (y, mean, rstd), (0, 0, 0)


@torch.library.register_vmap("lnbook::group_layer_norm_backward", lib=_LIB)
def _op_backward_vmap(info, in_dims, grad, x, mean, rstd, weight, groups, weight_grad, bias_grad):
    size = info.batch_size
    grad, x, mean, rstd = (_to_front(t, d, size) for t, d in zip((grad, x, mean, rstd), in_dims[:4]))
    if weight is not None and in_dims[4] is not None:
        weight = _to_front(weight, in_dims[4], size)[(slice(None),) + (None,) * (x.dim() - 2)]
    dx, dw, db = _backward_formula(grad, x, mean, rstd, weight, groups, weight_grad, bias_grad, 1)
    return (dx, dw, db), (0, 0 if weight_grad else None, 0 if bias_grad else None)


class _GroupLayerNormFunction(torch.autograd.Function):
    """The forward operator's reverse-mode rule under plain autograd (no ``torch.func`` transform, no
    forward-mode AD: :func:`_forward_autograd` sends those to :func:`_forward_decomposed`, so no
    ``setup_context`` is needed; the ``setup_context`` form of ``apply`` costs about 16 us more per call,
    half the operator's forward at the labs' size)."""

    @staticmethod
    def forward(ctx, x, weight, bias, groups, eps):
        with torch._C._AutoDispatchBelowAutograd():
            y, mean, rstd = _FORWARD(x, weight, bias, groups, eps)
        ctx.mark_non_differentiable(mean, rstd)
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        ctx.groups, ctx.eps = groups, eps
        return y, mean, rstd

    @staticmethod
    def backward(ctx, grad, _grad_mean, _grad_rstd):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        needs = ctx.needs_input_grad[:3]
        if torch.is_grad_enabled():  # create_graph=True: a differentiable gradient, through the decomposition
            wanted = [t for t, need in zip((x, weight, bias), needs) if need]
            with torch.enable_grad():
                y = reference_group_layer_norm(x, ctx.groups, ctx.eps, weight, bias)
                got = iter(torch.autograd.grad(y, wanted, grad, create_graph=True, allow_unused=True))
            grads = [next(got) if need else None for need in needs]
            grads = [torch.zeros_like(t) if need and gr is None else gr
                     for t, need, gr in zip((x, weight, bias), needs, grads)]
            return (*grads, None, None)
        dx, dw, db = _BACKWARD(grad, x, mean, rstd, weight, ctx.groups, bool(needs[1]), bool(needs[2]))
        return (dx if needs[0] else None, dw if needs[1] else None, db if needs[2] else None, None, None)


def _forward_decomposed(x, weight, bias, groups, eps):
    """The operator as the decomposition :func:`reference_group_layer_norm` (the same ATen calls, so the same
    numbers), with the statistics: ``native_layer_norm`` over the grouped view, then the affine map. Every
    transform differentiates it at every order; the statistics are not differentiable, as in the autograd
    rule."""
    _check_operator_arguments(x, weight, bias, groups, eps)
    grouped = x.unflatten(-1, (groups, -1))
    y, mean, rstd = torch.native_layer_norm(grouped, grouped.shape[-1:], None, None, eps)
    y = y.flatten(-2)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y, mean.squeeze(-1).detach(), rstd.squeeze(-1).detach()


_DIFFERENTIATING = {torch._C._functorch.TransformType.Grad, torch._C._functorch.TransformType.Jvp}


def _differentiating_transform_active() -> bool:
    """True when forward-mode AD (dual tensors, ``torch.autograd.functional.jacobian(strategy="forward-mode")``)
    or a ``torch.func`` transform that differentiates (``grad``, ``vjp``, ``jacrev``, ``jvp``, ``jacfwd``,
    ``hessian``) is active. ``vmap`` alone is not: the operator's vmap rule keeps the kernel."""
    if _forward_ad_active():
        return True
    if not torch._C._are_functorch_transforms_active():
        return False
    return any(level.key() in _DIFFERENTIATING for level in torch._C._functorch.get_interpreter_stack() or ())


def _forward_autograd(x, weight, bias, groups, eps):
    """The operator's Autograd kernel. Under forward-mode AD or a differentiating ``torch.func`` transform the
    operator is its decomposition (:func:`_forward_decomposed`), which they differentiate exactly (the kernel
    has no forward-mode formula, and an autograd.Function under ``torch.func`` would run its first-order
    backward kernel where second derivatives are asked for). This holds for direct calls and for compiled or
    exported graphs holding the operator, not only for :class:`lnbook.core.norms.GroupLayerNorm`. Otherwise
    reverse mode uses :class:`_GroupLayerNormFunction` when a gradient is wanted, and the kernel alone when
    not."""
    if _differentiating_transform_active():
        return _forward_decomposed(x, weight, bias, groups, eps)
    if torch.is_grad_enabled() and torch._C._any_requires_grad(x, weight, bias):
        return _GroupLayerNormFunction.apply(x, weight, bias, groups, eps)
    with torch._C._AutoDispatchBelowAutograd():
        return _FORWARD(x, weight, bias, groups, eps)


_LIB.impl("group_layer_norm", _forward_autograd, "Autograd")


def fused_group_layer_norm(x: torch.Tensor, groups: int, eps: float = 1e-5, weight: torch.Tensor | None = None,
                           bias: torch.Tensor | None = None) -> torch.Tensor:
    """LN-G of the last dimension, then ``* weight + bias`` (per feature, both optional), through the
    operator ``torch.ops.lnbook.group_layer_norm`` (whose checks, shapes and numbers only, live in the
    operator itself, so a direct call or a compiled graph gets them too).

    ``x`` must satisfy :func:`applies`; use :class:`lnbook.core.norms.GroupLayerNorm`, which checks it and
    otherwise runs :func:`reference_group_layer_norm`.
    """
    if isinstance(x, torch.Tensor) and x.dtype not in _SUFFIX:
        raise TypeError(f"the fused LN-G kernel takes float32 or float64 tensors, got {x.dtype}; convert with x.float()")
    if not applies(x):
        raise ValueError(f"the fused LN-G kernel does not apply here ({kernel_status()}); "
                         "use lnbook.core.norms.GroupLayerNorm, which falls back to F.layer_norm")
    _check_operator_arguments(x, weight, bias, groups, float(eps))
    return _FORWARD(x, weight, bias, groups, float(eps))[0]
