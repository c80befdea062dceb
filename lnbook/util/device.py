r"""Where computations run (CUDA when present, else the CPU), how runs are seeded, and when TF32 is allowed.

**The device rule** (followed by every module of the package; ``tests/whole_book/test_device_discipline.py``
checks the source for it, ``tests/whole_book/test_device_meta.py`` runs helpers with inputs on another device):

* A public function that computes on a device takes ``device=`` (default :func:`get_device`: CUDA when torch sees a
  GPU, else the CPU; :func:`resolve_device` turns the argument into a ``torch.device``) and moves its inputs there
  itself: a caller may pass CPU tensors whatever the device.
* What it returns for a plot or a table is read on the CPU: Python numbers, numpy arrays, CPU tensors. Every
  ``.numpy()`` in the package goes through ``.cpu()`` (free on a CPU tensor: the same tensor, the same numbers).
* A model trained in place (:func:`lnbook.ml.training.train`, the seed sweeps) stays on its device, and is evaluated
  on that device whatever device its inputs come on (:func:`lnbook.ml.training.evaluate` and ``predict`` move the
  inputs to the model's device and return CPU results). Functions that build and return their own models say where
  they return them (those of ``lnbook.ln_activation.shallow_fits``: on the CPU, for the plots).
* Random numbers are drawn from CPU generators (``torch.Generator()``, seeded) and then moved, so that a seed gives
  the same initialisation, batches and augmentations on every device.

**TF32.** On Ampere and later GPUs, float32 matrix products and convolutions may run in TF32 (a 10-bit mantissa:
relative errors near ``1e-3`` instead of ``1e-7``). The book allows it only where a trained network's accuracy or
loss is the result, read with the tolerance of a trained network (the training loops: :func:`lnbook.ml.training.train`,
the seed sweeps, the SSL training of chapter 8); there the setting is the caller's (torch's default: TF32 off for
matrix products, on for cuDNN convolutions). It must not be used where a float32 result is compared with an exact
or float64 one: the exact checks, the folding of chapter 7 (``diff32 < 1e-5``), the isometry gaps of chapter 4.
Those code paths run inside :func:`tf32` ``(False)``, which sets the matrix products and the cuDNN convolutions to
full float32 and restores the previous setting on the way out. On the CPU TF32 does not exist: the setting changes
nothing there.

**Autocast (AMP).** Inside ``torch.autocast`` a float32 matrix product runs in bfloat16 (CPU) or float16 (CUDA)
whatever the dtype of its inputs, so a dtype check on the inputs does not decide the precision of the products. A
function whose result is only as accurate as its products (the whitening of chapter 8: a covariance, its inverse
square root, the Newton iteration) is wrapped in :func:`without_autocast`: its body runs with autocast disabled for
the device types of its tensor arguments, so it computes in their dtype and returns that dtype.
"""

from __future__ import annotations

import functools
import random
from contextlib import ExitStack, contextmanager

import numpy as np
import torch

__all__ = ["get_device", "resolve_device", "seed_everything", "describe_run", "tf32", "tf32_enabled",
           "autocast_disabled", "without_autocast"]


def get_device() -> torch.device:
    """``cuda`` when a GPU is visible to torch, otherwise ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_device(device: torch.device | str | None = None) -> torch.device:
    """``device`` as a ``torch.device``; ``None`` means :func:`get_device`."""
    return get_device() if device is None else torch.device(device)


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed Python, NumPy and torch (all devices); return a CPU ``torch.Generator`` with that seed."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def describe_run() -> str:
    """One line naming the scale, device and torch version, printed at the top of each notebook."""
    from lnbook.util.scale import current_scale

    device = get_device()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    return f"lnbook scale={current_scale()} device={device.type} ({name}) torch={torch.__version__}"


def _legacy() -> tuple[bool, bool] | None:
    """The legacy ``allow_tf32`` flags, or None where torch refuses to read them (torch >= 2.9 raises once its newer
    per-backend ``fp32_precision`` settings were used in a way the legacy flags cannot express)."""
    try:
        return bool(torch.backends.cuda.matmul.allow_tf32), bool(torch.backends.cudnn.allow_tf32)
    except RuntimeError:
        return None


_KNOBS = (("",), ("cuda", "matmul"), ("cudnn",), ("cudnn", "conv"), ("cudnn", "rnn"))


def _knob(path):
    obj = torch.backends
    for name in path:
        obj = getattr(obj, name) if name else obj
    return obj


def _precision(*paths) -> str:
    """The first setting other than ``"none"`` (which inherits) along ``paths``, from the leaf up; ``"ieee"`` if all
    inherit."""
    for path in paths:
        value = getattr(_knob(path), "fp32_precision", "none")
        if value != "none":
            return value
    return "ieee"


def tf32_enabled() -> tuple[bool, bool]:
    """Whether CUDA float32 ``(matrix products, cuDNN convolutions)`` may use TF32 now."""
    legacy = _legacy()
    if legacy is not None:
        return legacy
    return (_precision(("cuda", "matmul"), ("",)) == "tf32",
            _precision(("cudnn", "conv"), ("cudnn",), ("",)) == "tf32")


def _set_legacy(matmul: bool, conv: bool) -> None:
    # set through the legacy flags: torch keeps both APIs readable after them (setting the new per-backend API
    # makes later reads of the legacy flags, by torch itself e.g. in torch.export, raise)
    torch.backends.cuda.matmul.allow_tf32 = matmul
    torch.backends.cudnn.allow_tf32 = conv


@contextmanager
def tf32(enabled: bool):
    """Within the block, CUDA float32 matrix products and cuDNN convolutions use TF32 iff ``enabled``; the
    previous setting is restored afterwards (also when the block raises). ``tf32(False)`` guards the code paths
    that compare float32 with exact or float64 results (module docstring)."""
    legacy = _legacy()
    saved = None if legacy is not None else [getattr(_knob(k), "fp32_precision") for k in _KNOBS]
    _set_legacy(bool(enabled), bool(enabled))
    try:
        yield
    finally:
        if legacy is not None:
            _set_legacy(*legacy)
        else:
            for k, value in zip(_KNOBS, saved):
                setattr(_knob(k), "fp32_precision", value)


@contextmanager
def autocast_disabled(*tensors):
    """Within the block, autocast is off for the device types of ``tensors`` (the CPU when none is a tensor), so
    their operations run in the tensors' own dtypes; the previous setting is restored afterwards. A device type
    without autocast (``meta``) is left alone."""
    types = {t.device.type for t in tensors if isinstance(t, torch.Tensor)} or {"cpu"}
    with ExitStack() as stack:
        for device_type in sorted(types):
            if torch.amp.is_autocast_available(device_type):
                stack.enter_context(torch.autocast(device_type, enabled=False))
        yield


def without_autocast(fn):
    """``fn`` with its body run in :func:`autocast_disabled` for its tensor arguments (positional and keyword): it
    computes, and returns, in the dtypes of its inputs also when it is called inside ``torch.autocast``."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with autocast_disabled(*args, *kwargs.values()):
            return fn(*args, **kwargs)

    return wrapper
