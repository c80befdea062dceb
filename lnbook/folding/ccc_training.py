r"""Training under the column-centred constraint (CCC) with RMSNorm, against LayerNorm: chapter 7's experiment on
the second claim of Guo et al.'s abstract (our reconstruction), which measures the effect of the LN biases.

The claim, in the abstract's words: "when exact equivalence is partially broken in practical training settings",
the method "remains competitive with vanilla LN while improving efficiency". Our reading of those settings, the
only one considered here: writers column-centred and RMSNorm in place of LayerNorm, which is exactly LayerNorm with a
zero bias (nothing is broken); the paper's own settings are not reproduced. Here the book's pre-LN ``TinyTransformer`` is trained both ways
on the characters of the standard library's docstrings, with the same seeds, data and steps:

* ``"ln"``: LayerNorm, unconstrained weights;
* ``"ccc-rms"``: RMSNorm, and every writer of the residual stream (token and position embeddings, the
  output projections of attention and MLP) kept centred *during* training by a reparametrisation
  (:class:`Centred`: the layer uses :math:`PW`, :math:`Pb` of free parameters :math:`W, b`), so that the
  stream stays in :math:`\mathbf 1^\perp` at every step and every RMSNorm computes what a LayerNorm would;
* ``"rms"``: RMSNorm without the constraint, for reference;
* ``"ln-bias0"`` (not one of the lab's :data:`VARIANTS`): LayerNorm with its biases fixed at zero (frozen).

``"ccc-rms"`` *is* ``"ln-bias0"``: the pre-LN model is blind to the mean of every stream writer, so the two
losses are the same function of the same parameters, the norms draw no random numbers (same initialisation
under the same seed), and any deterministic optimiser follows the same path (chapter 7,
``prop-ch7-ccc-training``; checked step by step in float64 by ``tests/folding/test_ccc_training.py``). The lab's
comparison of ``"ccc-rms"`` with ``"ln"`` therefore measures the effect of the LayerNorm biases only.

:func:`stream_writers` names the writers, :func:`constrain_writers` installs the reparametrisation,
:func:`bake` replaces it by plain centred weights for inference, :func:`make_variant` builds a variant's
model, :func:`training_steps` is the training loop (AdamW, one step per item), and :func:`train_variant` /
:func:`ccc_experiment` run the comparison and return losses and times (training step and inference).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils import parametrize

from lnbook.ml.models import TinyTransformer
from lnbook.util.progress import progress_bar
from lnbook.util.timing import interleaved_min_times
from lnbook.util.validation import check_positive_int

__all__ = ["VARIANTS", "MODEL_VARIANTS", "Centred", "make_variant", "training_steps", "stream_writers", "constrain_writers", "bake", "stream_mean", "RunResult",
           "train_variant", "ccc_experiment"]

VARIANTS = ("ln", "ccc-rms", "rms")
# what figures and tables call the variants (the codes above are for code)
VARIANT_NAMES = {"ln": "LayerNorm", "ccc-rms": "CCC + RMSNorm", "rms": "RMSNorm"}
# every variant make_variant builds: the lab's three and LayerNorm with its biases frozen at zero
MODEL_VARIANTS = VARIANTS + ("ln-bias0",)


class Centred(nn.Module):
    """Parametrisation ``W -> W - W.mean(dim)``: the layer always uses the centred weight."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight - weight.mean(dim=self.dim, keepdim=True)


def stream_writers(model: TinyTransformer) -> list[tuple[nn.Module, str, int]]:
    """``(module, parameter name, axis to centre)`` for every writer of a pre-LN TinyTransformer's residual
    stream: embeddings centred along the feature axis, output projections over their outputs."""
    if not isinstance(model, TinyTransformer) or not model.norm_first:
        raise TypeError("stream_writers knows the pre-LN lnbook.ml.models.TinyTransformer only")
    out = [(model.embed, "weight", 1), (model.pos, "weight", 1)]
    for block in model.blocks:
        for layer in (block.attn.out, block.mlp[2]):
            out.append((layer, "weight", 0))
            if layer.bias is not None:
                out.append((layer, "bias", 0))
    return out


def constrain_writers(model: TinyTransformer) -> TinyTransformer:
    """Install :class:`Centred` on every stream writer (in place); returns the model."""
    for module, name, dim in stream_writers(model):
        parametrize.register_parametrization(module, name, Centred(dim))
    return model


def bake(model: nn.Module) -> nn.Module:
    """Replace every parametrisation by its current value (plain parameters; in place)."""
    for module in list(model.modules()):
        if parametrize.is_parametrized(module):
            for name in list(module.parametrizations):
                parametrize.remove_parametrizations(module, name, leave_parametrized=True)
    return model


def stream_mean(model: TinyTransformer, tokens: torch.Tensor) -> float:
    """Largest ``|mean|`` over the features of any residual-stream vector (0 up to rounding under the CCC)."""
    with torch.no_grad():
        return max(float(h.mean(-1).abs().max()) for h in model.hidden_states(tokens))


@dataclass(frozen=True)
class RunResult:
    variant: str
    seed: int
    losses: tuple[float, ...]  # training loss at every step
    held_out_loss: float
    train_seconds: float
    stream_mean: float


def make_variant(variant: str, vocab: int, d_model: int, n_layers: int, seq: int, seed: int, *,
                 dtype: torch.dtype = torch.float32) -> TinyTransformer:
    """The pre-LN ``TinyTransformer`` of ``variant`` (one of :data:`MODEL_VARIANTS`), initialised under
    ``torch.manual_seed(seed)`` and then cast to ``dtype``. The norms draw no random numbers, so every variant
    starts from the same weights for the same seed (the LayerNorm variants have the biases besides). For
    ``"ln-bias0"`` the LayerNorm biases are zero and frozen (``requires_grad=False``)."""
    if variant not in MODEL_VARIANTS:
        raise ValueError(f"variant must be one of {MODEL_VARIANTS}, got {variant!r}")
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    torch.manual_seed(seed)
    model = TinyTransformer(vocab, d_model, 4, n_layers, max_len=seq, norm="ln" if variant.startswith("ln") else "rms")
    model = model.to(dtype)
    if variant == "ln-bias0":
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                with torch.no_grad():
                    module.bias.zero_()
                module.bias.requires_grad_(False)
    return constrain_writers(model) if variant == "ccc-rms" else model


def training_steps(model: nn.Module, data: tuple[torch.Tensor, torch.Tensor], *, steps: int, batch_size: int,
                   lr: float = 3e-3, seed: int = 0, optimizer=None):
    """Train ``model`` in place on the parameters that require a gradient, one random batch of ``data`` per step
    (indices from a generator seeded with ``seed``); yields the training loss of each step after its update, so
    that a caller can inspect the model between steps. The optimiser is AdamW with torch's defaults but ``lr``
    (decoupled weight decay 0.01), or ``optimizer(parameters)`` when given (a callable returning a
    ``torch.optim.Optimizer``)."""
    steps, batch_size = check_positive_int(steps, "steps"), check_positive_int(batch_size, "batch_size")
    if optimizer is not None and not callable(optimizer):
        raise TypeError("optimizer must be a callable taking the parameters and returning a torch.optim.Optimizer")
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr) if optimizer is None else optimizer(params)
    if not isinstance(opt, torch.optim.Optimizer):
        raise TypeError(f"optimizer(parameters) must return a torch.optim.Optimizer, got {type(opt).__name__}")
    return _steps(model, data, steps, batch_size, opt, seed)  # checked now, not at the first step


def _steps(model, data, steps, batch_size, opt, seed):
    X, Y = data
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, len(X), (batch_size,), generator=gen)
        loss = nn.functional.cross_entropy(model(X[idx]).flatten(0, 1), Y[idx].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        yield loss.item()


def train_variant(variant: str, data: tuple[torch.Tensor, torch.Tensor], held_out: tuple[torch.Tensor, torch.Tensor], *,
                  vocab: int, d_model: int = 64, n_layers: int = 2, steps: int = 300, batch_size: int = 32,
                  lr: float = 3e-3, seed: int = 0) -> tuple[RunResult, TinyTransformer]:
    """Train one variant with AdamW for ``steps`` steps on random batches of ``data`` (seeded), and return
    its :class:`RunResult` and the trained model (parametrisations baked in, eval mode)."""
    steps, batch_size = check_positive_int(steps, "steps"), check_positive_int(batch_size, "batch_size")
    model = make_variant(variant, vocab, d_model, n_layers, data[0].shape[1], seed)
    start = time.process_time()
    losses = list(training_steps(model, data, steps=steps, batch_size=batch_size, lr=lr, seed=seed))
    seconds = time.process_time() - start
    if not all(torch.isfinite(torch.tensor(losses))):
        raise RuntimeError(f"{variant} (seed {seed}) diverged")
    model = bake(model).eval()
    Xv, Yv = held_out
    with torch.no_grad():
        held = float(nn.functional.cross_entropy(model(Xv).flatten(0, 1), Yv.flatten()))
    return RunResult(variant, seed, tuple(losses), held, seconds, stream_mean(model, Xv[:8])), model


def ccc_experiment(data, held_out, *, vocab: int, seeds=(0, 1, 2), variants=VARIANTS, timing_repeats: int = 15,
                   progress: bool = True, **kwargs) -> tuple[list[RunResult], dict[str, float]]:
    """Every variant for every seed, and the inference time of each variant's first-seed model (minimum of
    interleaved repeats over the held-out windows, CPU time of the thread): ``(runs, seconds per variant)``."""
    runs, models = [], {}
    jobs = [(v, s) for s in seeds for v in variants]
    for variant, seed in progress_bar(jobs, desc="CCC training", enabled=bool(progress)):
        result, model = train_variant(variant, data, held_out, vocab=vocab, seed=seed, **kwargs)
        runs.append(result)
        models.setdefault(variant, model)
    tokens = held_out[0][:32]
    with torch.inference_mode():
        times = interleaved_min_times({v: (lambda m=m: m(tokens)) for v, m in models.items()},
                                      repeats=timing_repeats, inner=2, clock="thread")
    return runs, times
