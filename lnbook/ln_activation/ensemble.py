r"""Many seeds of one small classifier trained at once (chapter 6's sweeps).

:func:`seed_sweep_batched` trains one copy of ``make_model()`` per seed with full-batch Adam, all copies
in one batched pass (weights stacked along a leading seed axis, ``torch.baddbmm`` for the linear layers). The loss is the
**sum** of the copies' mean cross-entropies, so each copy receives the gradient of its own loss only, and
Adam, which acts elementwise, updates each copy exactly as a separate run of
:func:`lnbook.ml.training.train` with ``batch_size=None`` would (up to float rounding; checked in
``tests/ln_activation/test_ensemble.py``). Small networks are dominated by per-step overhead, so
eight seeds cost about as much as one.

With ``keep_states=True`` the parameters of every copy are kept at every logged epoch, so the hidden
geometry before and after a phase transition can be looked at without training again
(:meth:`SeedSweep.model_at`).
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from lnbook.ln_activation.lab import SeedSweep
from lnbook.ml.training import History
from lnbook.util.device import resolve_device
from lnbook.util.progress import progress_bar
from lnbook.util.validation import check_positive_int

__all__ = ["seed_sweep_batched"]


_SUPPORTED = (nn.Linear, nn.LayerNorm, nn.RMSNorm, nn.Tanh, nn.ReLU, nn.Identity)


def _shared_positions(layers) -> list[int]:
    """The positions of the first layers found that are one module, or hold one parameter tensor, with an earlier
    position (empty when every layer is distinct): ``named_parameters()`` lists a shared tensor once, at its first
    position, so :func:`_batched_forward` could not train it at the others."""
    seen: dict[int, int] = {}
    for i, layer in enumerate(layers):
        for key in [id(layer)] + [id(t) for t in layer.parameters(recurse=True)]:
            if key in seen and seen[key] != i:
                return [seen[key], i]
            seen[key] = i
    return []


def _batched_forward(layers, p: dict, x: torch.Tensor) -> torch.Tensor:
    """The Sequential ``layers`` applied to ``x`` (n, d) with parameters stacked along a seed axis: (S, K, n).

    Features run along axis 1 and samples along the last axis, so that a LayerNorm over a few features
    (four, in the chapter's nets) is a handful of elementwise operations on rows of ``n`` numbers: on
    the CPU this is about twice as fast as ``F.layer_norm`` over rows of four (the same numbers up to
    float rounding)."""
    h = x.t().unsqueeze(0).expand(next(iter(p.values())).shape[0], *x.t().shape)
    for i, layer in enumerate(layers):
        w, b = p.get(f"{i}.weight"), p.get(f"{i}.bias")
        if isinstance(layer, nn.Linear):
            h = torch.bmm(w, h) if b is None else torch.baddbmm(b.unsqueeze(2), w, h)
            continue
        if isinstance(layer, nn.LayerNorm):
            c = h - h.mean(1, keepdim=True)
            h = c * torch.rsqrt(c.pow(2).mean(1, keepdim=True) + layer.eps)
        elif isinstance(layer, nn.RMSNorm):
            eps = layer.eps if layer.eps is not None else torch.finfo(h.dtype).eps
            h = h * torch.rsqrt(h.pow(2).mean(1, keepdim=True) + eps)
        elif isinstance(layer, nn.Identity):
            continue
        elif isinstance(layer, nn.Tanh):
            h = torch.tanh(h)
        else:
            h = torch.relu(h)
        if w is not None:
            h = h * w.unsqueeze(2)
        if b is not None:
            h = h + b.unsqueeze(2)
    return h


def seed_sweep_batched(
    make_model: Callable[[], nn.Module],
    X: torch.Tensor,
    y: torch.Tensor,
    seeds,
    *,
    epochs: int,
    lr: float,
    log_every: int = 10,
    success_at: float = 0.95,
    keep_states: bool = False,
    progress: bool = True,
    label: str = "",
    device: torch.device | str | None = None,
) -> SeedSweep:
    """For every seed, ``torch.manual_seed(seed); make_model()``, then train all copies together with
    full-batch Adam (learning rate ``lr``) on the cross-entropy of ``(X, y)`` for ``epochs`` steps.

    Histories record, every ``log_every`` epochs and at the last one (like :func:`train`), the loss of
    the step and the training accuracy after it. Models must hold parameters only (no buffers that
    change), as LN-MLPs and plain MLPs do, and every layer must be its own module with its own parameters (a module
    or parameter used at two positions raises, since parameters are looked up by position).

    The copies train on ``device`` (default :func:`lnbook.util.device.get_device`, as :func:`train`), ``X`` and ``y``
    are moved there, and the trained models (and the kept states) stay there, like a model trained by :func:`train`;
    the histories hold Python numbers.
    """
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    epochs = check_positive_int(epochs, "epochs")
    log_every = check_positive_int(log_every, "log_every")
    if not (isinstance(lr, (int, float)) and 0 < lr < math.inf):
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    if not (0 < success_at <= 1):
        raise ValueError(f"success_at must be an accuracy in (0, 1], got {success_at!r}")
    device = resolve_device(device)
    X = torch.as_tensor(X)
    y = torch.as_tensor(y).long()
    if X.ndim != 2 or y.ndim != 1 or len(X) != len(y):
        raise ValueError(f"X must have shape (n, d) and y shape (n,), got {tuple(X.shape)} and {tuple(y.shape)}")
    models = []
    for seed in seeds:
        torch.manual_seed(seed)
        models.append(make_model())
    dtype = next(models[0].parameters()).dtype
    top_label = int(y.max())  # read on the CPU, before the move
    X, y = X.to(device=device, dtype=dtype), y.to(device)
    layers = list(models[0]) if isinstance(models[0], nn.Sequential) else None
    if layers is None or not all(type(m) in _SUPPORTED for m in layers):
        odd = [type(m).__name__ for m in (layers or [models[0]]) if type(m) not in _SUPPORTED]
        raise TypeError("seed_sweep_batched needs an nn.Sequential of exactly nn.Linear, nn.LayerNorm, nn.RMSNorm, "
                        f"nn.Tanh, nn.ReLU, nn.Identity (not subclasses, whose forward may compute something else); "
                        f"got {odd}. Train such a model with lnbook.ml.training.train")
    frozen = [name for name, p in models[0].named_parameters() if not p.requires_grad]
    if frozen:
        raise ValueError(f"seed_sweep_batched trains every parameter, but {frozen} have requires_grad=False: train a "
                         "model with frozen parameters with lnbook.ml.training.train, which leaves them alone")
    if any(dict(m.named_buffers()) for m in models):
        raise TypeError("seed_sweep_batched needs models without buffers")
    shared = _shared_positions(layers)
    if shared:
        raise ValueError(
            f"seed_sweep_batched needs every layer of the Sequential to be its own module with its own parameters, "
            f"but positions {shared} hold one module (or share a parameter): the batched pass looks parameters up by "
            "position, so a shared module would be trained at its first position only while the returned model uses "
            "it at every one. Build a separate module for each position, or train the shared model with "
            "lnbook.ml.training.train")
    stacked = {name: torch.stack([dict(m.named_parameters())[name].detach() for m in models])
               for name, _ in models[0].named_parameters()}
    # one flat leaf holds every stacked parameter (each a contiguous block), so that Adam, elementwise,
    # makes one pass per step instead of one per parameter tensor: the same update, less overhead
    flat = torch.cat([v.reshape(-1) for v in stacked.values()]).to(device).requires_grad_(True)

    def unflatten(t: torch.Tensor) -> dict[str, torch.Tensor]:
        out, offset = {}, 0
        for name, v in stacked.items():
            out[name] = t[offset : offset + v.numel()].view(v.shape)
            offset += v.numel()
        return out

    def forward(p, _buffers, x):
        return _batched_forward(layers, p, x)

    buffers = None
    S = len(seeds)
    y_s = y.unsqueeze(0).expand(S, len(y))
    opt = torch.optim.Adam([flat], lr=float(lr))
    histories = [History(task="classification", device=str(device), label=f"{label} seed {s}") for s in seeds]
    states: list[dict[str, torch.Tensor]] = []
    for epoch in progress_bar(range(epochs), desc=label or "seeds (batched)", enabled=bool(progress)):
        out = forward(unflatten(flat), buffers, X)  # (S, K, n)
        if epoch == 0 and out.shape[1] <= top_label:
            raise ValueError(f"the model has {out.shape[1]} outputs but the labels go up to {top_label}")
        losses = F.cross_entropy(out, y_s, reduction="none").mean(1)
        if not bool(torch.isfinite(losses).all()):
            raise ValueError(f"{label or 'training'}: the loss became non-finite in epoch {epoch + 1}; lower lr")
        opt.zero_grad(set_to_none=True)
        losses.sum().backward()
        opt.step()
        if (epoch + 1) % log_every == 0 or epoch + 1 == epochs:
            with torch.no_grad():
                acc = (forward(unflatten(flat), buffers, X).argmax(1) == y).double().mean(1)
            for i, h in enumerate(histories):
                h.epochs.append(epoch + 1)
                h.loss.append(float(losses[i].detach()))
                h.accuracy.append(float(acc[i]))
                h.samples_seen = (epoch + 1) * len(X)
            if keep_states:
                states.append(unflatten(flat.detach().clone()))
    params = unflatten(flat.detach())
    trained = []
    for i, model in enumerate(models):
        model.to(device)
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(params[name][i])
        trained.append(model)
    return SeedSweep(seeds, histories, trained, success_at, states=states if keep_states else None)
