"""Timing helpers of chapter 7's speed benchmark (``benchmarks/fold_speed.py``).

* :func:`interleaved_median_times`: seconds per call of each candidate, the **median** over rounds in
  which the candidates run in a fresh random order (each timed block after one untimed call);
* :func:`best_kernels`: for each norm, the faster of its eager and compiled kernels, so that no compiled
  kernel slower than eager serves as a baseline (and the other way round);
* :func:`without_norms` and :func:`ablation_share`: the share of a (compiled) model's time spent in its
  norms, measured on that model by timing it again with every norm replaced by the identity;
* :func:`without_shape_guards` and :func:`guard_seconds`: the folded model without the input-shape guard that
  :func:`~lnbook.folding.fold.fold_layernorms` attaches (a Python pre-hook the original model does not have), for
  timing only, and the guard's own cost per call, timed separately;
* :func:`new_call_class_seconds`: what the first call of a call class not proved yet costs (its proof: a trace of
  the original model at that call and the fold's analysis), against the same call once proved;
* :data:`MMAP_THRESHOLD_ENV`: the glibc variable of the allocator measurement (a fixed mmap threshold of 16 MiB).
  Meant to keep large temporaries on the heap, it also switches off glibc's dynamic threshold (``mallopt(3)``),
  under which the default allocator already reuses such blocks after the first is freed, and leaves the trim
  threshold at its default, so freed memory can go back to the system: it does not isolate page faults (chapter 7,
  the allocator paragraph).
"""

from __future__ import annotations

import copy
import statistics
from typing import Callable

import torch
from torch import nn

from lnbook.folding.call_proofs import RefuseChangesSinceFolding, SubmoduleCallGuard
from lnbook.folding.fold import refuse_training_mode
from lnbook.folding.tracing import ShapeGuard
from lnbook.util.timing import CLOCKS, synchronize
from lnbook.util.validation import check_positive_int

__all__ = ["MMAP_THRESHOLD_ENV", "interleaved_median_times", "best_kernels", "without_norms", "ablation_share",
           "without_shape_guards", "guard_seconds", "new_call_class_seconds"]

MMAP_THRESHOLD_ENV = {"MALLOC_MMAP_THRESHOLD_": str(16 * 2**20)}  # 16 MiB, fixed (module docstring: not a clean test)


def interleaved_median_times(candidates: dict[str, Callable[[], object]], *, repeats: int = 15, inner: int = 1,
                             warmup: int = 2, clock: str = "wall", seed: int = 0) -> dict[str, float]:
    """Median seconds per call of each candidate over ``repeats`` interleaved rounds of ``inner`` calls."""
    if not candidates:
        raise ValueError("candidates is empty")
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {tuple(CLOCKS)}, got {clock!r}")
    repeats, inner = check_positive_int(repeats, "repeats"), check_positive_int(inner, "inner")
    now = CLOCKS[clock]
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    names = list(candidates)
    samples: dict[str, list[float]] = {n: [] for n in names}
    order = torch.Generator().manual_seed(seed)
    for _ in range(repeats):
        for i in torch.randperm(len(names), generator=order).tolist():
            fn = candidates[names[i]]
            fn()
            start = now()
            for _ in range(inner):
                fn()
            samples[names[i]].append((now() - start) / inner)
    return {n: statistics.median(v) for n, v in samples.items()}


def best_kernels(eager: dict[str, float], compiled: dict[str, float]) -> dict[str, tuple[float, str]]:
    """For each kernel name in both dicts: ``(faster time, "eager" or "compiled")``."""
    if set(eager) != set(compiled):
        raise ValueError(f"the two timings name different kernels: {sorted(eager)} vs {sorted(compiled)}")
    return {k: (eager[k], "eager") if eager[k] <= compiled[k] else (compiled[k], "compiled") for k in eager}


def without_norms(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` with every LayerNorm and RMSNorm module replaced by ``nn.Identity``."""
    out = copy.deepcopy(model)
    names = [n for n, m in out.named_modules() if isinstance(m, (nn.LayerNorm, nn.RMSNorm)) and n]
    if not names:
        raise ValueError(f"{type(model).__name__} has no LayerNorm or RMSNorm module")
    for name in names:
        parent, _, child = name.rpartition(".")
        setattr(out.get_submodule(parent) if parent else out, child, nn.Identity())
    return out


def ablation_share(t_model: float, t_without: float) -> float:
    """``1 - t_without / t_model``: the share of the model's time that its norms take."""
    if not (t_model > 0 and t_without > 0):
        raise ValueError(f"times must be positive, got {t_model} and {t_without}")
    return 1.0 - t_without / t_model


def without_shape_guards(model: nn.Module) -> tuple[nn.Module, list[ShapeGuard]]:
    """A deep copy of ``model`` without its :class:`ShapeGuard` pre-hooks and its check of weights and hooks
    (:class:`~lnbook.folding.call_proofs.RefuseChangesSinceFolding`), and the guards removed.

    For timing only: the guard refuses inputs outside the shapes for which the fold was proved, so a model
    without it may be called on inputs where it is not equal to the original. The training-mode refusal
    (:func:`~lnbook.folding.fold.refuse_training_mode`, a pre-hook the original has not either) and the hooks of the
    :class:`~lnbook.folding.call_proofs.SubmoduleCallGuard` (on the root and on every module on the path to a swapped
    norm) go too, so that the timed copy has no Python hook of the fold: it differs from the original only by its
    norms (and, with ``affine="fold"``, its folded weights). Raises ``ValueError`` when ``model`` has no guard
    (nothing would be compared)."""
    out = copy.deepcopy(model)
    guards = []
    for module in out.modules():
        for hook_id, hook in list(module._forward_hooks.items()):
            if isinstance(getattr(hook, "__self__", None), SubmoduleCallGuard):
                del module._forward_hooks[hook_id]
                module._forward_hooks_with_kwargs.pop(hook_id, None)
                module._forward_hooks_always_called.pop(hook_id, None)
        for hook_id, hook in list(module._forward_pre_hooks.items()):
            if hook is refuse_training_mode or isinstance(getattr(hook, "__self__", None), SubmoduleCallGuard):
                del module._forward_pre_hooks[hook_id]
            elif isinstance(hook, (ShapeGuard, RefuseChangesSinceFolding)):
                guards.append(hook)
                del module._forward_pre_hooks[hook_id]
                module._forward_pre_hooks_with_kwargs.pop(hook_id, None)
    if not guards:
        raise ValueError(f"{type(model).__name__} has no ShapeGuard pre-hook (is it a model from fold_layernorms?)")
    return out, guards


def guard_seconds(model: nn.Module, *args, repeats: int = 15, inner: int = 20, clock: str = "wall", **kwargs) -> float:
    """Median seconds per call of the guards of ``model`` (its :class:`ShapeGuard` pre-hooks and its
    :class:`~lnbook.folding.call_proofs.RefuseChangesSinceFolding`) on ``(args, kwargs)`` alone."""
    stripped, guards = without_shape_guards(model)
    for g in guards:
        if isinstance(g, RefuseChangesSinceFolding):
            g.record(stripped)  # the stripped copy's hooks, so that it times the comparison and does not refuse
    calls = [(g, (stripped, args) if isinstance(g, RefuseChangesSinceFolding) else (stripped, args, kwargs))
             for g in guards]
    fn = lambda: [g(*a) for g, a in calls]  # noqa: E731
    return interleaved_median_times({"guard": fn}, repeats=repeats, inner=inner, clock=clock)["guard"]


def new_call_class_seconds(model: nn.Module, *args, **kwargs) -> tuple[float, float]:
    """``(first, again)``: wall seconds of the first call of ``model(*args, **kwargs)`` on a folded model (from
    :func:`~lnbook.folding.fold.fold_layernorms`, proving calls) whose call class is not proved yet, which proves it
    before running, and of the same call made again, which runs at once. Under ``torch.no_grad``. Raises
    ``ValueError`` when ``model`` has no call prover, when the first call made no proof (its class was proved
    already: nothing new was timed), or when the call is refused (the refusal's reason is in the message)."""
    import time

    from lnbook.folding.call_proofs import CallProver

    provers = [h for h in model._forward_pre_hooks.values() if isinstance(h, CallProver)]
    if len(provers) != 1:
        raise ValueError(f"{type(model).__name__} has no call prover: pass a model from fold_layernorms(..., "
                         "prove_calls=True)")
    prover, made = provers[0], provers[0].proofs_made
    device = next((t.device for t in list(args) + list(kwargs.values()) if isinstance(t, torch.Tensor)), None)

    def synced() -> float:  # on CUDA the kernels run asynchronously: wait for them before reading the clock
        synchronize(device)
        return time.perf_counter()

    with torch.no_grad():
        start = synced()
        model(*args, **kwargs)
        first = synced() - start
        if prover.proofs_made == made:
            raise ValueError("this call's class was proved already, so its first call made no proof: pass a call of "
                             "another class (another batch size or length, another argument)")
        start = synced()
        model(*args, **kwargs)
        again = synced() - start
    return first, again
