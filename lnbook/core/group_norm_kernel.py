r"""A fused CPU kernel for LN-G (group LayerNorm): forward and backward in one pass each.

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

**When it is used.** :class:`lnbook.core.norms.GroupLayerNorm` calls :func:`fused_group_layer_norm` when
:func:`applies` says so: the kernel was built, the tensor is a CPU float32/float64 tensor, and no
``torch.func`` transform, ``torch.fx`` trace or ``torch.compile`` is running (those record the
``F.layer_norm`` path, which they understand). Elsewhere, on CUDA in particular, the module keeps
``F.layer_norm`` over the grouped view. ``LNBOOK_FUSED_KERNEL=0`` switches the kernel off.
Without a C compiler everything still works, on the ``F.layer_norm`` path; :func:`kernel_status`
says why.

**Numbers.** The kernel's sums run in a different order from ATen's, so results agree with
``F.layer_norm`` to rounding (a few float32 ulps; ``tests/test_fused_group_norm.py`` holds them
within ``1e-5`` absolute in float32 and ``1e-12`` in float64), not bit for bit. Groups are
independent, so results do not depend on the number of threads: the same command prints the same
numbers.

**Second derivatives.** ``backward`` under ``create_graph=True`` recomputes the gradient through
``F.layer_norm``, so double backward (``torch.autograd.gradgradcheck``) is exact too.
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

__all__ = ["fused_group_layer_norm", "applies", "kernel_status", "kernel_library"]

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
            fwd.argtypes = [pointer, pointer, pointer, i64, i64, ctypes.c_double, ctypes.c_int]
            bwd.argtypes = [pointer, pointer, pointer, pointer, i64, i64, ctypes.c_int]
            fwd.restype = bwd.restype = None
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


def applies(x) -> bool:
    """True when :class:`lnbook.core.norms.GroupLayerNorm` may run ``x`` through the fused kernel."""
    return (
        isinstance(x, torch.Tensor)
        and x.device.type == "cpu"
        and x.dtype in _SUFFIX
        and x.numel() > 0
        and not x.is_sparse
        and not torch._C._are_functorch_transforms_active()
        and not torch.jit.is_scripting()
        and not torch.jit.is_tracing()
        and not torch.compiler.is_compiling()
        and kernel_library() is not None
    )


class _FusedGroupLayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, groups: int, eps: float) -> torch.Tensor:
        lib, suffix = kernel_library(), _SUFFIX[x.dtype]
        m = x.shape[-1] // groups
        xc = x.contiguous()
        y = torch.empty_like(xc)
        rstd = torch.empty(xc.numel() // m, dtype=x.dtype)
        getattr(lib, f"lng_forward_{suffix}")(xc.data_ptr(), y.data_ptr(), rstd.data_ptr(), rstd.numel(), m,
                                              float(eps), torch.get_num_threads())
        ctx.save_for_backward(x, y, rstd)
        ctx.groups, ctx.eps = groups, eps
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, y, rstd = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: a differentiable gradient, through F.layer_norm
            with torch.enable_grad():
                grouped = x.unflatten(-1, (ctx.groups, -1))
                ref = F.layer_norm(grouped, grouped.shape[-1:], eps=ctx.eps).flatten(-2)
                (dx,) = torch.autograd.grad(ref, x, grad, create_graph=True)
            return dx, None, None
        g = grad.contiguous()
        dx = torch.empty_like(g)
        getattr(kernel_library(), f"lng_backward_{_SUFFIX[g.dtype]}")(
            g.data_ptr(), y.data_ptr(), rstd.data_ptr(), dx.data_ptr(), rstd.numel(), y.shape[-1] // ctx.groups,
            torch.get_num_threads())
        return dx, None, None


def fused_group_layer_norm(x: torch.Tensor, groups: int, eps: float = 1e-5) -> torch.Tensor:
    """LN-G of the last dimension through the fused kernel (no value checks: the module's fast path).

    ``groups`` must divide the width; ``x`` must satisfy :func:`applies`. Use
    :class:`lnbook.core.norms.GroupLayerNorm`, which checks both and falls back to ``F.layer_norm``.
    """
    if isinstance(x, torch.Tensor) and x.dtype not in _SUFFIX:
        raise TypeError(f"the fused LN-G kernel takes float32 or float64 tensors, got {x.dtype}; convert with x.float()")
    if not applies(x):
        raise ValueError(f"the fused LN-G kernel does not apply here ({kernel_status()}); "
                         "use lnbook.core.norms.GroupLayerNorm, which falls back to F.layer_norm")
    if x.shape[-1] % groups or x.shape[-1] // groups < 2:
        raise ValueError(f"groups={groups} must divide the width {x.shape[-1]} into groups of at least 2 features")
    return _FusedGroupLayerNorm.apply(x, groups, eps)
