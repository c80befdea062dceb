"""lnbook: the tested package behind the executable book *Layer Normalization: Theory and Experiments*.

Modules (one idea each):

* :mod:`lnbook.norms` — LayerNorm, RMSNorm, group LN (LN-G) and parallel LN (PLN), functional and modules;
* :mod:`lnbook.geometry` — Winsor's primitives: the core normalising map, stretching and folding;
* :mod:`lnbook.derivatives` — closed-form Jacobian and Hessian of LayerNorm and their sizes;
* :mod:`lnbook.symbolic_ln` — LayerNorm as a sympy expression, for exact checks;
* :mod:`lnbook.separability` — SSR and its linear lower bound LSSR;
* :mod:`lnbook.ln_nets` — linear nets and LN-Nets, the XOR counterexample, SSR training;
* :mod:`lnbook.constructions` — width-3 LN-Nets that classify any labelling (PMA and PBA, chapter 3);
* :mod:`lnbook.vc` — the VC lower bound of LN-Nets and exhaustive shattering checks;
* :mod:`lnbook.schwarzian` — the distortion budget of the constructions: Schwarzians and Sturm's limit;
* :mod:`lnbook.hermite` — Hermite coefficients of activations and the nonlinearity strength beta_0;
* :mod:`lnbook.isometry` — the isometry of a Gram matrix;
* :mod:`lnbook.mlp_at_init` — MLPs at initialisation, simulated exactly and fast;
* :mod:`lnbook.models` — the book's trainable models (MLPs, a tiny Transformer) with a ``norm=`` switch;
* :mod:`lnbook.training` — the one training loop of every experiment, and its history;
* :mod:`lnbook.vit` — a small ViT-style classifier with a ``norm=`` switch (chapter 7);
* :mod:`lnbook.zero_mean_graph` — which tensors of a traced model are zero-mean, which writers may be centred;
* :mod:`lnbook.folding` — foldable LayerNorms: detect them in any model, replace them by RMSNorm exactly;
* :mod:`lnbook.timing` — interleaved minimum-of-repeats timings for benchmarks and labs;
* :mod:`lnbook.uniform_vector` — angles between hidden vectors and the uniform vector, and their random baseline;
* :mod:`lnbook.pretrained` — MiniLM and SmolLM2 from installed packages (no download);
* :mod:`lnbook.text` — Python's own docstrings as a shipped text corpus, character tokens;
* :mod:`lnbook.data` — datasets made here or shipped by an installed package (never downloaded);
* :mod:`lnbook.scale` — the ``LNBOOK_SCALE=ci|paper`` switch read by every notebook;
* :mod:`lnbook.notebook` — the one setup cell every notebook starts with;
* :mod:`lnbook.reproduction` — our numbers beside the papers', with tolerances and verdicts;
* :mod:`lnbook.device` — CUDA when present, else CPU; seeding;
* :mod:`lnbook.plotting` — the book's figure style;
* :mod:`lnbook.validation` — the input checks behind every clear error message.
"""

from lnbook.device import describe_run, get_device, seed_everything
from lnbook.scale import at_scale, current_scale

__version__ = "0.1.0"

__all__ = ["describe_run", "get_device", "seed_everything", "at_scale", "current_scale", "__version__"]
