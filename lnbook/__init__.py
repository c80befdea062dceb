"""lnbook: the tested package behind the executable book *Layer Normalization: Theory and Experiments*.

Three kinds of code live apart. The mathematics, one subpackage per topic (named after the
mathematics, each naming its chapter, labs and tests in its docstring; topic packages never import
each other, shared mathematics lives in ``core``):

* :mod:`lnbook.core` — LN, RMSNorm, LN-G, PLN; the fused LN-G kernel; Winsor's geometry; derivatives; LN in sympy;
* :mod:`lnbook.separability` — LN is nonlinear: SSR, LSSR, LN-Nets, the XOR counterexample (chapter 2);
* :mod:`lnbook.capacity` — the width-3 constructions (float64 and exact), their budget, the VC bound (chapter 3);
* :mod:`lnbook.isometry` — Gram isometry, Hermite expansions and beta_0, MLPs at initialisation (chapter 4);
* :mod:`lnbook.group_ln` — LN-G: the Hessian measure of nonlinearity, random labels (chapter 5);
* :mod:`lnbook.ln_activation` — LN as an activation, the width-3 limit, phases, PLN approximation (chapter 6);
* :mod:`lnbook.folding` — foldable LNs, exact LN -> RMSNorm conversion, the uniform vector (chapter 7);
* :mod:`lnbook.whitening` — from LN to whitening: spectral transformations, IterNorm, INTL (chapter 8).

Below them, shared by all: :mod:`lnbook.util` (validation, device, scale, timing, plotting) and
:mod:`lnbook.ml` (models, training, data, text). Above them: :mod:`lnbook.notebook`, the lab facade
(setup, at_scale, compare, glue), and :mod:`lnbook.book`, the book's machinery (runner, reproduction
table, theorem index, site check, ``python -m lnbook``). The layers are
``util <- core <- ml <- topic packages <- notebook / book``, checked by ``tests/whole_book/test_layers.py``.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# Imported when first used (PEP 562), so that the book's machinery (``python -m lnbook``, the notebook
# runner, the reproduction table), which needs no torch, starts without importing it.
_LAZY = {
    "describe_run": "lnbook.util.device",
    "get_device": "lnbook.util.device",
    "seed_everything": "lnbook.util.device",
    "at_scale": "lnbook.util.scale",
    "current_scale": "lnbook.util.scale",
}

__all__ = ["describe_run", "get_device", "seed_everything", "at_scale", "current_scale", "__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'lnbook' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
