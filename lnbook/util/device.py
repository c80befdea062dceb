"""Where computations run (CUDA when present, else the CPU) and how runs are seeded."""

from __future__ import annotations

import random

import numpy as np
import torch


def get_device() -> torch.device:
    """``cuda`` when a GPU is visible to torch, otherwise ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


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
