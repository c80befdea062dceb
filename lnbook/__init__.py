"""lnbook: the tested package behind the executable book *Layer Normalization: Theory and Experiments*.

Modules (one idea each):

* :mod:`lnbook.norms` — LayerNorm, RMSNorm, group LN (LN-G) and parallel LN (PLN), functional and modules;
* :mod:`lnbook.geometry` — Winsor's primitives: the core normalising map, stretching and folding;
* :mod:`lnbook.scale` — the ``LNBOOK_SCALE=ci|paper`` switch read by every notebook;
* :mod:`lnbook.device` — CUDA when present, else CPU; seeding;
* :mod:`lnbook.plotting` — the book's figure style.
"""

from lnbook.device import describe_run, get_device, seed_everything
from lnbook.scale import at_scale, current_scale

__version__ = "0.1.0"

__all__ = ["describe_run", "get_device", "seed_everything", "at_scale", "current_scale", "__version__"]
