"""lnbook: the tested package behind the executable book *Layer Normalization: Theory and Experiments*.

Modules (one idea each):

* :mod:`lnbook.norms` — LayerNorm, RMSNorm, group LN (LN-G) and parallel LN (PLN), functional and modules;
* :mod:`lnbook.geometry` — Winsor's primitives: the core normalising map, stretching and folding;
* :mod:`lnbook.derivatives` — closed-form Jacobian and Hessian of LayerNorm and their sizes;
* :mod:`lnbook.symbolic_ln` — LayerNorm as a sympy expression, for exact checks;
* :mod:`lnbook.separability` — SSR and its linear lower bound LSSR;
* :mod:`lnbook.ln_nets` — linear nets and LN-Nets, the XOR counterexample, SSR training;
* :mod:`lnbook.ln_layer_figures` — figures of one ``Linear -> LN`` layer acting on planar data (chapter 2);
* :mod:`lnbook.ln_circle` — the LN circle of width 3 and the blocks acting on it (poles, re-spreads);
* :mod:`lnbook.width3_nets` — the width-3 LN-Nets the constructions return: record, layer bounds, check;
* :mod:`lnbook.constructions` — the float64 builder: width-3 LN-Nets that classify any labelling (chapter 3);
* :mod:`lnbook.landing` — the float64 landing planner of that builder (companions, pair moves, ranking);
* :mod:`lnbook.exact_construction` — the same construction in exact arithmetic, layer count = the theorem's;
* :mod:`lnbook.certified_reals` — exact constructible numbers with certified signs (interval arithmetic);
* :mod:`lnbook.vc` — the VC lower bound of LN-Nets and exhaustive shattering checks;
* :mod:`lnbook.capacity_lab` — what the chapter-3 lab draws and tabulates (circle panels, float64 survey);
* :mod:`lnbook.schwarzian` — the distortion budget of the constructions: Schwarzians, Sturm's limit, straightening;
* :mod:`lnbook.hermite` — Hermite coefficients of activations and the nonlinearity strength beta_0;
* :mod:`lnbook.isometry` — the isometry of a Gram matrix;
* :mod:`lnbook.mlp_at_init` — MLPs at initialisation, simulated exactly and fast;
* :mod:`lnbook.isometry_experiments` — the official configurations and gap curves of chapter 4's experiments;
* :mod:`lnbook.nonlinearity` — the Hessian measure of nonlinearity H(f; x) and its closed form for LN-G;
* :mod:`lnbook.random_label_fit` — fitting random labels with linear, LN and LN-G nets (the harness's setting);
* :mod:`lnbook.ln_activation` — LayerNorm as the only activation of an MLP: sweeps over seeds, the layer-to-layer path, the width-3 limit;
* :mod:`lnbook.phases` — phase transitions in a loss curve (sudden drops after plateaus);
* :mod:`lnbook.universal` — one-variable approximation: the shallow-LN limit, PLN staircases, ReLU interpolants;
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
* :mod:`lnbook.plotting` — the book's figure style and embedded JavaScript animations;
* :mod:`lnbook.validation` — the input checks behind every clear error message.

The book's machinery (``python -m lnbook`` runs it):

* :mod:`lnbook.toc` — the book's pages, notebooks, chapters and experiments, read from ``_toc.yml``;
* :mod:`lnbook.notebook_runner` — executes notebooks into the build's cache, keeping their results;
* :mod:`lnbook.reproduction_table` — the table of every number compared with a paper;
* :mod:`lnbook.theorem_index` — the index of the chapters' statements and their machine checks;
* :mod:`lnbook.offline_assets` — MathJax and the widget manager, served by the book itself;
* :mod:`lnbook.sphinx_glue_images` — a Sphinx extension writing the images glued into chapters;
* :mod:`lnbook.site_check` — every page of the built book, checked in headless Chromium.
"""

from lnbook.device import describe_run, get_device, seed_everything
from lnbook.scale import at_scale, current_scale

__version__ = "0.1.0"

__all__ = ["describe_run", "get_device", "seed_everything", "at_scale", "current_scale", "__version__"]
