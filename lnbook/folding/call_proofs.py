r"""Folded models that serve: each call class is proved before it runs (chapter 7).

A fold is proved on one traced call (:func:`lnbook.folding.fold.fold_layernorms`): its shape domain and its
non-tensor arguments (:class:`lnbook.folding.tracing.ShapeDomain`). Real use makes other calls: Hugging Face
``model.generate`` calls the model at batch 1, with a prompt of length 1 or more, then one token at a time with a
key-value cache (``use_cache=True``), with an ``attention_mask``. :class:`CallProver`, the forward pre-hook of a
folded model, runs a call only once what it computes was proved equal to the original model:

* a call inside a domain already proved, under the configuration it was proved for, runs at once;
* any other call is first traced on a private copy of the **original** model at that very call (its shapes,
  its sizes of 1 kept, its non-tensor arguments, the cache object included, and the model's state as it is now
  (:func:`call_state`: its configuration, so that a flag such as ``config.output_hidden_states`` set after folding
  is part of the call, and the plain attributes of every submodule, such as ``self.use_act = True``, copied onto
  the original); the
  analysis must find every swapped LayerNorm foldable there through exactly the writers the fold centred (and,
  with ``affine="fold"``, read by the same linear layers), and the fold's float64 check
  (:func:`lnbook.folding.fold.verify_fold`, the fold applied again to float64 copies of the original, both run
  eagerly at this call's sizes and one other) must pass: a forward can compute otherwise when run than when traced
  (an eager-only branch on ``torch.compiler.is_compiling()``), and the check runs the eager path (a check at one
  draw of inputs per size, not a proof: an eager-only branch taken only at other sizes of a domain already proved,
  or at particular input values, is not seen). Then the new domain is added to the proved ones and
  the call runs; otherwise the call is refused with the reason, and that verdict is kept for its call class
  (a verdict of a completed analysis only: when the trace itself fails, the call is refused and the next call of
  its class is traced again).

Proofs are serialised: ``torch.export`` is not thread-safe, and a folded model served from several threads
(a thread-pool server) would otherwise run two traces at once, which fail inside ``torch.export``. Each prover
holds a lock (``threading.RLock``, made anew for a deep or pickled copy) over its proofs and its records, and all
provers take one process-wide lock around the trace itself; a call inside a domain already proved takes no lock.
The guards of a folded model skip themselves only while the call itself is traced (:func:`_traced_call`): a non-strict
``torch.export`` sets torch's ``is_compiling`` flag for the whole process, so a call made in another thread during
a proof is checked as any other.

The copy of the original costs the model's memory once more. ``fold_layernorms(..., prove_calls=False)`` keeps
no copy and refuses every call outside the traced domain (:class:`lnbook.folding.tracing.ShapeGuard`).
What the state covers: the ``transformers`` configuration and every ``__dict__`` entry of every submodule that is a
``bool``, ``int``, ``float``, ``str`` or ``None`` or a tuple of these (except ``training``, which has its own
refusal, and ``nn.Module``'s own bookkeeping). An attribute of any other type (a tensor that is not a registered
parameter or buffer, a dtype, a list or dict, an object) is not part of the proved call: changing one after folding
is not detected. The state also holds whether the call runs under ``torch.inference_mode()`` (such a call is proved
by a trace under it), but not grad mode (``torch.no_grad``) or module-level globals: a ``forward`` that branches on
``torch.is_grad_enabled()`` or on a global changed after folding runs unproved on that branch. An attribute of a swapped norm (its ``eps``) changed after folding is refused: fold again.

Tests: ``tests/folding/test_call_proofs.py``.
"""

from __future__ import annotations

import copy
import sys
import threading
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils import _pytree as pytree

from lnbook.folding.fast_guards import (IdentityWatch, NotFast, autocast_state, call_skeleton, compile_size_check, watch_model_state,
                                        watch_weights_and_hooks)
from lnbook.folding.tracing import (ShapeDomain, ShapeGuard, UntraceableModelError, alias_pattern, trace_model,
                                    tracing_for_analysis)
from lnbook.util.validation import traced_here

__all__ = ["CallProver", "GraphCallProver", "FOLD_RECORD", "config_state", "module_attributes", "call_state",
           "RefuseChangesSinceFolding", "record_proved_state", "declare_untied_head"]

FOLD_RECORD = "lnbook_fold"  # the attribute of a Hugging Face config that records a fold (lnbook.folding.saving)


def config_state(model: nn.Module):
    """The model's configuration as it is now (``model.config.to_dict()`` for a ``transformers`` model, else
    ``None``): flags there (``output_hidden_states``, ``output_attentions``, the attention implementation) change
    what ``forward`` computes without being arguments of the call. The fold's own record
    (``config.lnbook_fold``, :data:`FOLD_RECORD`) is left out: no ``forward`` reads it, and the fold writes it
    after the proved state was taken."""
    config = getattr(model, "config", None)
    to_dict = getattr(config, "to_dict", None)
    if not callable(to_dict):
        return None
    state = to_dict()
    state.pop(FOLD_RECORD, None)
    state["_attn_implementation"] = getattr(config, "_attn_implementation", None)
    return state


# what nn.Module itself keeps in __dict__ (hooks, registries, the training flag): not flags of the computation
# (torch.compile marks a module it wraps with ``_is_torch_compile``: not part of what forward computes)
_MODULE_BOOKKEEPING = frozenset(nn.Module().__dict__) | {"training", "_compiled_call_impl", "_is_torch_compile"}
_PRIMITIVES = (bool, int, float, str, type(None))


def _primitive(value) -> bool:
    if isinstance(value, _PRIMITIVES):
        return True
    return isinstance(value, tuple) and all(_primitive(v) for v in value)


def module_attributes(model: nn.Module) -> dict[tuple[str, str], str]:
    """The plain attributes of every submodule: ``(module name, attribute) -> "type: repr"`` for each ``__dict__``
    entry that is a ``bool``, ``int``, ``float``, ``str``, ``None`` or a tuple of these (``nn.Module``'s own
    bookkeeping and ``training`` left out). Such a flag (``self.use_act = True``) changes what ``forward``
    computes without being an argument of the call. Values are compared by type and ``repr`` (so that a NaN equals
    itself and ``1`` differs from ``True``)."""
    out = {}
    for name, m in model.named_modules():
        for key, value in vars(m).items():
            if key not in _MODULE_BOOKKEEPING and _primitive(value):
                out[(name, key)] = f"{type(value).__name__}: {value!r}"
    return out


def call_state(model: nn.Module) -> dict:
    """What a call computes besides its arguments: ``{"config": config_state(model), "attributes":
    module_attributes(model), "inference_mode": torch.is_inference_mode_enabled(), "autocast": autocast_state()}``.
    A call runs only under a state it was proved for. ``forward`` may branch on ``torch.is_inference_mode_enabled()``
    (a cheaper inference path), and a trace under inference mode takes that branch: a call under
    ``torch.inference_mode()`` is proved by a trace under it; so is a call under ``torch.autocast`` (its trace and the
    fold's numerical check then run under the same autocast). Grad mode and module-level globals are not part of the
    state (module docstring)."""
    return {"config": config_state(model), "attributes": module_attributes(model),
            "inference_mode": torch.is_inference_mode_enabled(), "autocast": autocast_state()}


def _call_class(args: tuple, kwargs: dict, config) -> str:
    """A key for the class of a call: its structure, each tensor's rank, dtype and which sizes are 1, each other
    argument's value, and the configuration. Calls with one key have one trace up to the sizes the export keeps
    symbolic; the key only keys cached refusals (a call runs only inside a proved domain)."""
    flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    parts = [str(spec)]
    for leaf in flat:
        if isinstance(leaf, torch.Tensor):
            layout = "" if leaf.is_contiguous() else f"order{_stride_order(leaf)}"  # a slice, or a transpose
            parts.append(f"T{leaf.dim()}{leaf.dtype}{tuple(n == 1 for n in leaf.shape)}"
                         f"{leaf.requires_grad}{leaf.is_contiguous()}{layout}")
        else:
            parts.append(f"{type(leaf).__name__}:{leaf!r}")
    parts.append(repr(sorted(config["config"].items())) if isinstance(config["config"], dict) else repr(config["config"]))
    parts.append(repr(sorted(config["attributes"].items())))
    parts.append(f"inference_mode={config['inference_mode']}")
    parts.append(f"autocast={config.get('autocast')}")
    return "|".join(parts)


def _stride_order(t: torch.Tensor) -> tuple:
    """The dimensions of ``t`` of size 2 or more from the largest stride to the smallest: a slice keeps the order of a
    contiguous tensor, a transpose does not. Part of a non-contiguous call's class, so that a refusal of one layout
    is not quoted for another (referee 28 of chapter 7, finding 3)."""
    return tuple(sorted((i for i in range(t.dim()) if t.shape[i] >= 2), key=lambda i: -t.stride(i)))


_MAX_SKELETONS = 256  # call skeletons kept per state; the table starts afresh beyond


@dataclass(frozen=True)
class _Proof:
    domain: ShapeDomain
    config: object


class _OwnLock:
    """A prover's lock (``threading.RLock``) over its proofs and records: a lock does not copy, so a deep or pickled
    copy leaves it out (and the attributes named in ``_NOT_COPIED``: caches that hold the model's own objects) and
    makes its own."""

    _NOT_COPIED: tuple[str, ...] = ()

    def __getstate__(self):
        state = dict(self.__dict__)
        for key in ("_lock", *self._NOT_COPIED):
            state.pop(key, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.RLock()


class CallProver(_OwnLock, ShapeGuard):
    """The forward pre-hook of a folded model: a call runs once it lies in a proved domain; any other call class
    is proved on a copy of the original model first, or refused with the reason (module docstring).

    ``plan`` is what the fold did: ``swapped`` (module name -> the ``(weight, bias)`` names of the linear layers that
    absorbed its gain and bias with ``affine="fold"``, else ``None``) and ``centred`` (the ``(parameter, axis)`` pairs
    of the centred writers), and ``relied``: the ``(parameter, axis)`` pairs that the swapped LayerNorms' verdicts take
    as centred up to rounding without centring them (``LayerNormVerdict.relies_on``), whose stored means the fold's
    check measured; a call whose proof takes any other stored tensor as centred up to rounding is refused. ``original`` is a private copy of the unfolded model (``None``: refuse instead of
    proving). ``verify`` is :func:`lnbook.folding.fold.verify_fold`, run at each new call class (``None``: the fold
    was made with ``check=False``, and new classes are not checked numerically either). ``analyse`` is :func:`lnbook.folding.fold.find_foldable_layernorms` and ``consumers`` its module's
    ``_affine_consumers`` (passed in by :func:`~lnbook.folding.fold.fold_layernorms`, which imports this module:
    module-level functions, so the folded model still pickles). ``proved`` and ``refused`` grow as calls are
    made; ``proofs_made`` counts the traces.
    """

    _NOT_COPIED = ("_cached",)  # the shortcut's caches hold the model's own objects: a copy builds its own

    def __init__(self, domain: ShapeDomain, what: str, *, original: nn.Module | None, swapped: dict,
                 centred: frozenset, affine: str, config, analyse, consumers, relied: frozenset = frozenset(),
                 verify=None):
        super().__init__(domain, what)
        self.relied = frozenset(relied)
        self.verify = verify
        self.analyse, self.consumers = analyse, consumers
        self.original = original
        self.swapped, self.centred, self.affine = dict(swapped), frozenset(centred), affine
        self.proved: list[_Proof] = [_Proof(domain, config)]
        self.refused: dict[str, str] = {}
        self.proofs_made = 0
        self._lock = threading.RLock()

    @torch.compiler.disable  # under torch.compile: a graph break, and the check runs eagerly on the call's tensors
    def __call__(self, module, args, kwargs):
        if tracing_for_analysis():  # lnbook tracing the folded model to analyse it (center_unembed after a fold): the
            return None  # domain's sizes are symbols there, and the graph computes no output; every eager call is proved
        contiguous_caches(args, kwargs)  # a cropped cache (speculative decoding) as a proved layout, same values
        config, table = self._state(module)
        tensors: list = []
        try:
            skeleton = (call_skeleton(args, kwargs, tensors), alias_pattern(tensors))  # x is y: another call
        except NotFast:
            skeleton = None
        # the shortcut (lnbook.folding.fast_guards): a call of a skeleton seen before, inside a domain proved under
        # this very state, runs at once; what it answers is what the loop below would answer
        # (lock-free: the table only gains complete entries, each built under the lock from domains already proved)
        if skeleton is not None and any(inside(tensors) for inside in table.get(skeleton, ())):
            return None
        args, kwargs = tuple(args), dict(kwargs)
        with self._lock:  # one proof at a time (module docstring)
            try:
                self._check(module, args, kwargs, config)  # runs or raises with the reason
            except ValueError as err:
                advice = torch_func_advice(args, kwargs)
                if advice:
                    raise ValueError(f"{err}. {advice}") from err
                raise
            if skeleton is not None:
                if len(table) >= _MAX_SKELETONS:
                    table.clear()
                table[skeleton] = self._size_checks(config, args, kwargs, tensors)
        return None

    def _check(self, module, args, kwargs, config) -> None:
        """The full check of a call: return when a proved domain holds it under ``config`` (or a new proof does),
        else raise ``ValueError`` with the reason."""
        for proof in self.proved:
            if proof.config == config and isinstance(proof.domain.values(args, kwargs), dict):
                return
        if self.original is None:
            if config != self.proved[0].config:
                raise ValueError(f"{self.what} was proved equal to the original model under its configuration, "
                                 f"module attributes and inference mode at folding time, and they have changed since "
                                 f"({_config_change(self.proved[0].config, config)}); fold again with prove_calls=True "
                                 "to prove calls under the new state")
            super().__call__(module, args, kwargs)
            return
        key = _call_class(args, kwargs, config)
        advice = torch_func_advice(args, kwargs)
        if advice:  # refused at once, untraced: torch.export cannot trace wrapped tensors, and the attempt (minutes
            # under load) only ended in a refusal (referee 31 of chapter 7); not kept, a later plain call may prove it
            raise ValueError(self._refusal(self._outside(args, kwargs, config),
                                           "the call is under a torch.func transform and cannot be traced there"))
        if key not in self.refused:
            why = self._prove(module, args, kwargs, config)
            if why is None:
                return
            if isinstance(why, _TracerFailed):  # not a verdict on the class: the next call of the class is traced again
                raise ValueError(str(why))
            self.refused[key] = why
            raise ValueError(why)
        why, now = self.refused[key], self._outside(args, kwargs, config)
        if now not in why:  # the class's verdict was made at another call of it (another size that a condition excludes)
            why = (f"{self.what} was proved equal to the original model only for the calls traced so far, and this call "
                   f"is of another class ({now}); a call of the same class was refused before: {why}")
        raise ValueError(why)

    def _state(self, module) -> tuple[dict, dict]:
        """``call_state(module)`` and the table of compiled size checks proved under it (skeleton -> checks): read
        again only when something it reads may have changed (:func:`lnbook.folding.fast_guards.watch_model_state`);
        a new state starts a new table."""
        cached = self.__dict__.get("_cached")
        if cached is not None and cached[0] is module and cached[1].holds():
            return cached[2], cached[3]
        state = call_state(module)
        table = cached[3] if cached is not None and cached[0] is module and cached[2] == state else {}
        try:
            watch = IdentityWatch()
            watch_model_state(watch, module, _MODULE_BOOKKEEPING)
            self._cached = (module, watch, state, table)
        except NotFast:  # a state the watch cannot hold (a configuration value that does not equal its copy)
            self._cached = None
        return state, table

    def _size_checks(self, config, args, kwargs, tensors) -> list:
        """For each domain proved under ``config`` that holds calls of this call's skeleton: its compiled size check
        (:func:`lnbook.folding.fast_guards.compile_size_check`)."""
        checks = []
        for proof in self.proved:
            if proof.config != config:
                continue
            laid = proof.domain.call.match(args, kwargs) if proof.domain.call is not None else (args, kwargs)
            if isinstance(laid, str):
                continue
            try:
                inside = compile_size_check(proof.domain, laid, tensors)
            except NotFast:
                continue
            if inside is not None:
                checks.append(inside)
        return checks

    def _outside(self, args, kwargs, config) -> str:
        """Why the call is not one the fold was proved for (against the traced call)."""
        if config != self.proved[0].config:
            return f"the model's state changed since folding ({_config_change(self.proved[0].config, config)})"
        got = self.domain.values(args, kwargs)
        return got if isinstance(got, str) else "it lies outside every domain proved so far"

    @torch.no_grad()
    def _prove(self, module, args, kwargs, config) -> str | None:
        """Trace the original at this call and compare its verdicts with the fold; ``None`` when proved."""
        outside = self._outside(args, kwargs, config)
        now, then = config["attributes"], self.proved[0].config["attributes"]
        changed = sorted(k for k in set(now) | set(then) if now.get(k) != then.get(k))
        norms = [f"{name or 'model'}.{key}" for name, key in changed if self._in_swapped(name)]
        if norms:
            return self._refusal(outside, f"attributes of the swapped norms changed after folding ({', '.join(norms)}): "
                                 "the RMSNorm's attributes are not the LayerNorm's; fold again with the new values")
        there = dict(self.original.named_modules())
        new = sorted({name for name, _ in changed if name not in there})
        if new:
            return self._refusal(outside, f"the folded model has submodules that the original has not ({', '.join(new)})")
        original = self._original_for(module, config)
        self.proofs_made += 1
        try:
            with _TRACE_LOCK:
                report = self.analyse(original, args, kwargs, enlarge=False)
        except UntraceableModelError as err:
            return _TracerFailed(self._refusal(outside, f"the original model cannot be traced at this call: {err}"))
        verdicts = [v for v in report.layer_norms if v.module in self.swapped]
        needed: set = set()
        for v in verdicts:
            if not v.foldable:
                return self._refusal(outside, f"traced at this call, LayerNorm {v.name} is not foldable: {v.reason}")
            if v.swap:
                return self._refusal(outside, f"traced at this call, LayerNorm {v.name} may not be swapped: {v.swap}")
            needed |= {p for w in v.writers for p in report.writers[w].params}
            unmeasured = sorted({p for r in v.relies_on for p in report._analysis.relied_params(r)} - self.relied)
            if unmeasured:
                return self._refusal(outside, f"traced at this call, LayerNorm {v.name} takes stored tensors as centred up to "
                                     f"rounding that the fold's check did not measure ({_names(unmeasured)}); fold again "
                                     "with this call's arguments as the example")
            if self.affine == "fold":
                found, why = self.consumers(report, v)
                if why or sorted(found) != sorted(self.swapped[v.module]):
                    return self._refusal(outside, f"traced at this call, the gain and bias of {v.name} would go into "
                                         f"other layers than the fold's ({why or sorted(found)})")
        if needed != self.centred:
            extra, missing = sorted(needed - self.centred), sorted(self.centred - needed)
            return self._refusal(outside, "traced at this call, the swapped LayerNorms are foldable through other writers "
                                 f"than those the fold centred (needed here and not centred: {_names(extra)}; centred and "
                                 f"not shown to be invisible here: {_names(missing)})")
        inside = report.domain.values(args, kwargs)
        if not isinstance(inside, dict):  # the trace's domain must hold the call it was made at
            return self._refusal(outside, f"the trace at this call does not cover the call itself: {inside}")
        differs = self._run_check(original, report)
        if differs:
            return self._refusal(outside, differs)
        self.proved.append(_Proof(report.domain, config))
        return None

    def _run_check(self, original: nn.Module, report) -> str:
        """The fold's numerical check at the new call class: ``verify(original, report, affine)``
        (:func:`lnbook.folding.fold.verify_fold`: this fold's rewrite applied again to float64 copies of the
        original, both copies run eagerly on random inputs at this call's sizes and at one other size of its domain).
        The analysis above reads a ``torch.export`` trace, and a forward can compute otherwise when run than when
        traced (an eager-only branch on ``torch.compiler.is_compiling()``, ``is_exporting()`` or
        ``torch.jit.is_tracing()``: a decoding fast path at length 1; referee 20 of chapter 7, addendum A4). The
        copies run the eager path, so such a branch that breaks the fold at this call's sizes shows as a
        difference. Each rewrite checks its own promise against its own original (later rewrites of the same model,
        such as :func:`~lnbook.folding.softmax_shifts.center_unembed`, are not in either copy). Returns ``""`` when
        the check passes (or the fold was made with ``check=False``: ``verify`` is ``None``), else the reason."""
        verify = getattr(self, "verify", None)  # (a prover pickled before the check existed has none)
        if verify is None:
            return ""
        try:
            verify(original, report, self.affine)
        except (RuntimeError, ValueError) as err:
            return ("the trace at this call folds, but the fold's float64 check at this call's sizes failed (the eager "
                    "forward computes otherwise than its trace, e.g. a branch on torch.compiler.is_compiling(), or a "
                    f"rule of the analysis is broken): {err}")
        return ""

    def _original_for(self, module: nn.Module, config) -> nn.Module:
        """The copy of the original, on the folded model's device and dtype, with its configuration and the plain
        attributes of its (unswapped) submodules as the folded model's are now."""
        original = self.original
        if config["config"] is not None and config_state(original) != config["config"]:
            # the copy's config object is shared by its submodules, as the folded model's is: update it in place
            original.config.__dict__.update(copy.deepcopy(module.config.__dict__))
        here, there = dict(module.named_modules()), dict(original.named_modules())
        before = module_attributes(original)
        for name, key in set(config["attributes"]) | set(before):
            if self._in_swapped(name) or name not in there or config["attributes"].get((name, key)) == before.get((name, key)):
                continue
            if (name, key) in config["attributes"]:
                setattr(there[name], key, copy.deepcopy(vars(here[name])[key]))
            else:
                delattr(there[name], key)
        here = next((p for p in module.parameters() if p.is_floating_point()), None)
        there = next((p for p in original.parameters() if p.is_floating_point()), None)
        if here is not None and there is not None and (here.device, here.dtype) != (there.device, there.dtype):
            original.to(device=here.device, dtype=here.dtype)
        return original.eval()

    def _in_swapped(self, name: str) -> bool:
        return any(name == n or name.startswith(n + ".") for n in self.swapped)

    def _refusal(self, outside: str, why: str) -> str:
        return (f"{self.what} was proved equal to the original model only for the calls traced so far, and this call "
                f"is of another class ({outside}). Proving it on the original model failed: {why}. Running it could "
                "silently compute something else, so it is refused (fold the model with this call as the example to "
                "see the full report)")


def contiguous_caches(args, kwargs) -> None:
    """Lay out each ``transformers`` ``DynamicCache`` among the call's arguments contiguously, in place (its values
    unchanged). ``DynamicCache.crop``, which prompt-lookup and assisted (speculative) decoding call when candidate
    tokens are rejected, leaves each layer's keys and values as views with the stride of the longer cache: a memory
    layout no trace had, so the folded model refused every such ``generate`` call, with advice that no user could
    follow (referee 34 of chapter 7, finding 1). With the cache contiguous, the call is of a class proved as usual.
    A no-op without ``transformers`` imported."""
    if "transformers" not in sys.modules:
        return
    try:
        from transformers.cache_utils import DynamicCache
    except ImportError:
        return
    for value in (*args, *kwargs.values()):
        if isinstance(value, DynamicCache):
            for layer in getattr(value, "layers", ()):
                for attr in ("keys", "values"):
                    t = getattr(layer, attr, None)
                    if isinstance(t, torch.Tensor) and not t.is_contiguous():
                        setattr(layer, attr, t.contiguous())


def torch_func_advice(args, kwargs) -> str:
    """What to do when a call of a new class arrives under a ``torch.func`` transform (``vmap``, ``grad``, ...), or
    ``""`` when no argument is a functorch-wrapped tensor. Such a call cannot be proved there: the proof traces the
    original model with ``torch.export``, which cannot trace functorch-wrapped tensors, and inside ``vmap`` each
    slice has lost the batched axis (referee 19 of chapter 7, finding 1). A class proved by an eager call outside
    the transform is run inside it without a new proof."""
    from torch._C import _functorch as ft

    leaves = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    if not any(ft.is_functorch_wrapped_tensor(t) for t in leaves):
        return ""
    return ("This call arrived under a torch.func transform (vmap, grad, jacrev, ...), whose wrapped tensors cannot "
            "be traced to prove a new call class. Call the folded model once outside the transform as one call inside "
            "it is made: the same keyword arguments, one slice's shape under vmap (model(x[:1]) for a vmap over x's "
            "first axis), and inputs that require grad under grad, jacrev, vjp or hessian "
            "(model(x.detach().requires_grad_())); the transform then runs on that proved class")


class _TracerFailed(str):
    """A refusal because the trace itself failed (:class:`~lnbook.folding.tracing.UntraceableModelError`), not a
    verdict of a completed analysis: it is not kept for the call's class."""


# torch.export is not thread-safe: every prover traces under this lock (a prover's own lock guards its records)
_TRACE_LOCK = threading.RLock()


def declare_untied_head(model: nn.Module) -> None:
    """Make a ``transformers`` model's configuration say what its weights are: when the configuration declares the
    unembedding tied to the token embedding (``tie_word_embeddings``, on the model's configuration or its text
    configuration) but the two are separate parameters (untied by
    :func:`lnbook.folding.softmax_shifts.center_unembed` with ``untie=True``, or by hand), set the flag to ``False``.
    Otherwise ``save_pretrained`` writes the stale flag, and after ``from_pretrained`` the next ``tie_weights()`` (which
    ``resize_token_embeddings`` calls) ties them again, putting the centred embedding in the unembedding: the
    log-probabilities of a referee's GPT-2 moved by 11.6, silently. Other models are left as they are."""
    config = getattr(model, "config", None)
    get_in, get_out = getattr(model, "get_input_embeddings", None), getattr(model, "get_output_embeddings", None)
    if config is None or not callable(get_in) or not callable(get_out):
        return
    try:
        embedding, unembedding = get_in(), get_out()
    except (NotImplementedError, AttributeError):
        return
    weights = getattr(embedding, "weight", None), getattr(unembedding, "weight", None)
    if weights[0] is None or weights[1] is None or weights[0] is weights[1]:
        return
    text = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config
    for c in (config, text):
        if getattr(c, "tie_word_embeddings", False):
            c.tie_word_embeddings = False


def _config_change(before: dict, now: dict) -> str:
    """The differences of two :func:`call_state` results, at most four of each kind."""
    parts = []
    a, b = before["config"], now["config"]
    if a != b:
        if not isinstance(a, dict) or not isinstance(b, dict):
            parts.append(f"config {a!r} -> {b!r}")
        else:
            keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            parts.append(", ".join(f"config.{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in keys[:4]) + (" ..." if len(keys) > 4 else ""))
    a, b = before["attributes"], now["attributes"]
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    if keys:
        def value(v):
            return "absent" if v is None else v.partition(": ")[2]
        parts.append(", ".join(f"attribute {name or 'model'}.{key}: {value(a.get((name, key)))} -> {value(b.get((name, key)))}"
                               for name, key in keys[:4]) + (" ..." if len(keys) > 4 else ""))
    if before["inference_mode"] != now["inference_mode"]:
        parts.append(f"torch.inference_mode: {before['inference_mode']} -> {now['inference_mode']}")
    if before.get("autocast") != now.get("autocast"):
        def shown(state):
            on = [f"{device} in {dtype[6:]}" for device, enabled, dtype in state or () if enabled]
            return "on (" + ", ".join(on) + ")" if on else "off"
        parts.append(f"torch.autocast: {shown(before.get('autocast'))} -> {shown(now.get('autocast'))}")
    return "; ".join(parts)


def _names(params) -> str:
    return ", ".join(name for name, _ in params) or "none"


class GraphCallProver(_OwnLock):
    """The forward pre-hook (with kwargs) of a rewritten model whose hypothesis is a property of its traced graph
    (:func:`lnbook.folding.softmax_shifts.center_unembed`: the logits are only returned). A call runs once ``check(program)`` accepted a trace made under the
    same :func:`call_state` whose domain holds the call; any other call is first traced at that call
    (:func:`~lnbook.folding.tracing.trace_model`, sizes of 1 kept) and checked, and runs when the check accepts, or is
    refused with ``ValueError`` and the check's reason (kept for its class; a failure of the trace itself is not
    kept). Traces are made one at a time, under the prover's lock and the process-wide trace lock, as
    :class:`CallProver`'s (module docstring), and of a deep copy of the model: ``torch.export`` swaps the traced
    module's parameters for fake tensors while it runs, and another thread may be calling the model. ``check`` is a module-level function (or a
    ``functools.partial`` of one) returning ``""`` or the reason, so that the model still pickles. ``numeric``
    (optional, the same kind of function) is then called as ``numeric(model, args, kwargs, domain)`` and checks the
    rewrite numerically at the call's sizes (a forward can compute otherwise when run than when traced), returning
    ``""`` or the reason. ``proofs_made``
    counts the traces. Each call computes :func:`call_state` (about a millisecond or more: this guard is for analysis
    copies, not for serving)."""

    def __init__(self, check, what: str, domain: ShapeDomain, state: dict, numeric=None):
        self.check, self.what = check, what
        self.numeric = numeric
        self.proved: list[tuple[ShapeDomain, dict]] = [(domain, state)]
        self.refused: dict[str, str] = {}
        self.proofs_made = 0
        self._lock = threading.RLock()

    def _proved(self, args, kwargs, state) -> bool:
        return any(proved_state == state and isinstance(domain.values(args, kwargs), dict)
                   for domain, proved_state in list(self.proved))

    @torch.compiler.disable  # under torch.compile: a graph break, and the check runs eagerly
    def __call__(self, module, args, kwargs):
        if tracing_for_analysis():  # the trace below (or another analysis) calls the model: nothing is computed there
            return None
        contiguous_caches(args, kwargs)  # as in CallProver.__call__
        args, kwargs = tuple(args), dict(kwargs)
        state = call_state(module)
        if self._proved(args, kwargs, state):  # lock-free: proved domains are only appended
            return None
        with self._lock:  # one proof at a time (CallProver's module docstring)
            if self._proved(args, kwargs, state):  # proved by another thread while this one waited
                return None
            key = _call_class(args, kwargs, state)
            advice = torch_func_advice(args, kwargs)
            if advice:  # refused at once, untraced (as in CallProver._check)
                raise ValueError(self._refusal("the call is under a torch.func transform and cannot be traced there")
                                 + f". {advice}")
            if key not in self.refused:
                self.proofs_made += 1
                try:
                    with _TRACE_LOCK:  # a copy is traced: torch.export swaps the traced module's parameters for
                        # fake ones while it runs, and another thread may be calling this very model meanwhile
                        program, domain, _, _ = trace_model(copy.deepcopy(module), args, kwargs, enlarge=False)
                except UntraceableModelError as err:  # not a verdict on the class: not kept, the next call traces again
                    raise ValueError(self._refusal(f"the model cannot be traced at this call: {err}")) from err
                why = self.check(program)
                numeric = getattr(self, "numeric", None)  # (a prover pickled before the check existed has none)
                if not why and numeric is not None:
                    why = numeric(module, args, kwargs, domain)
                if not why:
                    if isinstance(domain.values(args, kwargs), dict):
                        self.proved.append((domain, state))
                        return None
                    why = "the trace at this call does not cover the call itself"
                self.refused[key] = self._refusal(why)
            advice = torch_func_advice(args, kwargs)
            raise ValueError(self.refused[key] + (f". {advice}" if advice else ""))

    def _refusal(self, why: str) -> str:
        return (f"{self.what} was checked for the calls it was traced at, and traced at this call the check fails: "
                f"{why}; use the original model for this call")


class SubmoduleCallGuard:
    """Refuses a direct call of a submodule of a folded model that holds a swapped norm (or is one).

    The fold is proved for calls of the whole model: a submodule called on its own (``folded.transformer(
    inputs_embeds=e)``, one block, the RMSNorm itself) gets inputs the proof never saw, and its RMSNorms may see
    non-zero means (the referee's GPT-2 transformer called so differed by 0.56). The root's pre-hook :meth:`enter`
    (run first) and its always-called forward hook :meth:`leave` count the calls of the whole model in progress
    in the calling thread (a thread-local count: another thread's call of the whole model does not let this
    thread call a part); the submodules' pre-hook :meth:`check` refuses when none is. While the call itself is
    traced by ``torch.compile``/``torch.export`` (:func:`_traced_call`, asked of this call's own tensors, not of
    torch's process-wide export flag) the hooks do nothing (the compiled call is the whole model's). A module-level
    class: the model still pickles.
    """

    def __init__(self, what: str):
        self.what = what
        self._calls = threading.local()

    @property
    def depth(self) -> int:
        """The calls of the whole model in progress in the calling thread."""
        return len(self._frames())

    def _frames(self) -> list:
        frames = getattr(self._calls, "frames", None)
        if frames is None:
            frames = self._calls.frames = []
        return frames

    def enter(self, module, args) -> None:
        if not _traced_call(module, args):
            frames = self._frames()
            if frames:  # forget calls that ended without leave() (interrupted): their frames hold their callers' locals
                live = set()
                frame = sys._getframe(1)
                while frame is not None:
                    live.add(id(frame))
                    frame = frame.f_back
                frames[:] = [f for f in frames if id(f) in live]
            frames.append(sys._getframe(1))  # the frame of the whole model's call, which runs the hooks

    def leave(self, module, args, output) -> None:
        if not _traced_call(module, args):
            frames = self._frames()
            here = sys._getframe(1)
            for i in range(len(frames) - 1, -1, -1):  # this call's own frame (an interrupted one may sit above it)
                if frames[i] is here:
                    del frames[i:]
                    return
            if frames:
                frames.pop()

    def _in_a_whole_call(self) -> bool:
        """Is a call of the whole model in progress in this thread? Its frame must be on the current stack: a call
        interrupted by ``KeyboardInterrupt`` (which PyTorch's always-called forward hooks do not see, so
        :meth:`leave` never ran; referee 25 of chapter 7, finding 1) left its frame recorded, and is forgotten here."""
        frames = self._frames()
        while frames:
            frame = sys._getframe(1)
            while frame is not None and frame is not frames[-1]:
                frame = frame.f_back
            if frame is not None:
                return True
            frames.pop()  # a call that ended without leave(): interrupted
        return False

    def check(self, module, args) -> None:
        if not _traced_call(module, args) and not self._in_a_whole_call():
            raise ValueError(
                f"this {type(module).__name__} is part of {self.what} and holds an RMSNorm that replaced a LayerNorm: the "
                "fold was proved for calls of the whole model, so a call of this part on its own may give the RMSNorm "
                "inputs with a non-zero mean and compute something else than the original part. Call the whole folded "
                "model, or fold this part on its own (fold_layernorms(part, example)) to use it alone"
            )

    def __getstate__(self):  # a pickled or copied model is not in the middle of a call; a thread-local does not copy
        return {"what": self.what}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._calls = threading.local()


def _traced_call(module: nn.Module, args) -> bool:
    """Whether this call of ``module`` is being traced by ``torch.compile`` or ``torch.export`` rather than computed
    (:func:`lnbook.util.validation.traced_here` over the module's first parameter and buffer and the call's
    positional tensors): a non-strict ``torch.export`` swaps the traced module's parameters and inputs for fake
    tensors, and another thread's eager call meanwhile has real ones, so its checks still run. Also true (in this
    thread only) while lnbook traces a model for its own analysis or runs private copies for its own numerical check
    (:func:`lnbook.folding.tracing.tracing_for_analysis`): their outputs are never returned, and the check's copy of
    the model an earlier rewrite started from has, by design, other weights than the ones its guards recorded."""
    if not torch.compiler.is_compiling() and not torch.compiler.is_dynamo_compiling():
        return tracing_for_analysis()  # the eager path: only lnbook's own checking copies (read only here: Dynamo
        # cannot trace a ContextVar lookup, and under torch.compile this hook is traced)
    first = [t for t in (next(module.parameters(), None), next(module.buffers(), None)) if t is not None]
    return traced_here(*first, *(a for a in args if isinstance(a, torch.Tensor)))


class ReadOnlyHook:
    """A forward hook or pre-hook marked as one that only reads, which the change guard of a folded model
    (:class:`RefuseChangesSinceFolding`) does not count as a change; :func:`lnbook.folding.uniform_angles.capture_norm_inputs`
    registers its hooks this way, so the inputs of a folded model's norms can be captured. The mark is enforced, not
    trusted: each call raises ``ValueError`` when the wrapped ``fn`` returns anything but ``None`` (a pre-hook's value
    replaces the input, a forward hook's the output) or writes in place to a tensor it was given or to a parameter of
    the hooked module (their version counters; an inference tensor has none and is not checked, and writes that
    bypass the counters, through ``.data`` or a numpy view, are not seen). A hook registered
    without this wrapper is counted, and the folded model's next call is refused. A module-level class, so a model
    holding one still pickles."""

    def __init__(self, fn, what: str = "a read-only hook"):
        if not callable(fn):
            raise TypeError(f"ReadOnlyHook wraps a hook function, got {type(fn).__name__}")
        self.fn, self.what = fn, what

    def __call__(self, module, *args):
        tensors = [t for t in pytree.tree_leaves(args) if isinstance(t, torch.Tensor)] + list(module.parameters())
        before = [_version(t) for t in tensors]
        out = self.fn(module, *args)
        if out is not None:
            raise ValueError(f"{self.what} is marked read-only (ReadOnlyHook) but returned a value, which would replace "
                             "the module's input or output: register it without ReadOnlyHook (a folded model then "
                             "refuses the call) or make it return None")
        if [_version(t) for t in tensors] != before:
            raise ValueError(f"{self.what} is marked read-only (ReadOnlyHook) but wrote in place to a tensor it was given "
                             "or to a parameter of its module: register it without ReadOnlyHook (a folded model then "
                             "refuses the call) or have it read a copy (x.detach().clone())")
        return None


QUANTISED = " [quantised]"  # the mark at the end of a change that is a quantised module (RefuseChangesSinceFolding)


def is_quantised_module(module) -> bool:
    """Whether ``module`` is one of PyTorch's quantised modules (``torch.ao.nn.quantized``, its dynamic and reference
    forms, and the older ``torch.nn.quantized`` path), as ``torch.ao.quantization.quantize_dynamic`` puts in place of
    ``nn.Linear``."""
    return isinstance(module, nn.Module) and any(
        cls.__module__.startswith(("torch.ao.nn.quantized", "torch.nn.quantized", "torch.ao.nn.intrinsic.quantized"))
        for cls in type(module).__mro__)


def _observes_only(hook) -> bool:
    """Whether a forward hook or pre-hook only reads: one of ``transformers``' output-capturing hooks
    (``install_output_capuring_hook`` in ``transformers.utils.output_capturing`` registers them on the first call with
    ``output_hidden_states=True`` or ``output_attentions=True``; they append the module's output to a collector and
    always return ``None``, so they never change what the module returns; a hook that returns a value would be
    watched), or a :class:`ReadOnlyHook` (the book's own capture hooks), which enforces that it only reads."""
    return isinstance(hook, ReadOnlyHook) or (getattr(hook, "__module__", None) == "transformers.utils.output_capturing"
                                              and getattr(hook, "__name__", None) == "output_capturing_hook")


def _watched_hooks(hooks) -> tuple:
    """The keys of the forward hooks or pre-hooks that may change a module's input or output: all but
    :func:`_observes_only`'s."""
    return tuple(key for key, hook in hooks.items() if not _observes_only(hook))


def _version(t: torch.Tensor) -> int | None:
    """A tensor's version counter; ``None`` for an inference tensor (made under ``torch.inference_mode``), which has
    none."""
    return None if t.is_inference() else t._version


def _functorch_unwrapped(t: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    """The plain tensor under ``torch.func``'s wrappers (``grad``'s, ``vmap``'s), and the batch dimensions that
    ``vmap`` levels added, outermost last."""
    from torch._C import _functorch as ft

    bdims = []
    while ft.is_functorch_wrapped_tensor(t):
        bdim = ft.maybe_get_bdim(t)
        t = ft.get_unwrapped(t)
        if bdim is not None and bdim >= 0:
            bdims.append(bdim)
    return t, bdims


def _equal_values(new: torch.Tensor, proved: torch.Tensor) -> bool:
    """Whether ``new`` holds the proved tensor's values, with its dtype, device and shape; read through
    ``torch.func``'s wrappers (under ``grad`` the values are the wrapped tensor's; under ``vmap`` each batch entry
    must equal them; weights batched by two nested ``vmap`` levels are not read, and not accepted)."""
    if not isinstance(new, torch.Tensor) or (new.dtype, new.device, tuple(new.shape)) != \
            (proved.dtype, proved.device, tuple(proved.shape)):
        return False
    plain, bdims = _functorch_unwrapped(new)
    if len(bdims) > 1:  # weights batched by nested vmaps: not read here, refused (never wrongly accepted)
        return False
    plain = (plain.movedim(bdims[0], 0) if bdims else plain).detach()
    if not bdims:
        return bool(torch.equal(plain, proved.detach()))
    return tuple(plain.shape[1:]) == tuple(proved.shape) and bool((plain == proved.detach()).all())


class RefuseChangesSinceFolding:
    """A forward pre-hook of every folded model (run first): a call after its weights or hooks changed is refused.

    The fold is proved for the weights the folded model has when :func:`lnbook.folding.fold.fold_layernorms` returns
    it, and for the modules and hooks it has then. ``load_state_dict`` is checked on its own
    (:class:`lnbook.folding.fold.RefuseUncentredWeights`); this hook covers the other ordinary routes, each of
    which a referee showed to change the folded model silently (by 0.34 to 1.2 relative against the original changed
    the same way): a parameter replaced by weights of other values (``torch.func.functional_call`` with other weights,
    a parameter assigned anew; a replacement by a tensor of the proved values, dtype, device and shape computes the
    same function and is accepted, its values compared at every call, read through ``torch.func``'s wrappers), a
    submodule assigned anew, a parameter changed in place through autograd-visible operations (``p.copy_(...)`` under
    ``no_grad``, an optimizer step), a forward hook or pre-hook added to or removed from any module (a steering
    vector added to a block's output reaches the RMSNorms with a non-zero mean), and the same steering done by
    assigning a module's ``forward`` on the instance or changing its class. Before each call it compares every
    parameter's identity and version counter (``Tensor._version``) with those it recorded, the module tree, and the
    keys of every module's forward hooks and pre-hooks (but hooks that only read, :func:`_observes_only`:
    ``transformers``' output-capturing hooks and the book's :class:`ReadOnlyHook`) and of the global ones, and each module's instance ``forward`` (if
    any) and class; any difference raises ``ValueError``
    naming it. A dtype or device conversion (``.to(...)``, ``.half()``) changes a parameter's dtype or device and is
    accepted (the fold holds at every dtype to its rounding): the new state is recorded.

    What it cannot see, and the text says so: a write through ``.data`` (``p.data.copy_(...)``: PyTorch gives
    ``.data`` its own version counter, so no hook can see it), in-place changes of parameters that are inference
    tensors (a model copied or converted under ``torch.inference_mode``: they have no version counter), changes to buffers (some models update buffers in
    their forward pass), and calls traced by ``torch.compile`` or ``torch.export`` (skipped while the call itself is
    traced, :func:`_traced_call`, as :class:`SubmoduleCallGuard` is; another thread's eager call made meanwhile is
    checked). A pickled or deep-copied folded model keeps its modules, parameters and hooks under the same checks (the
    version counters of its new tensors are read when it is unpickled).
    A module-level class, so the folded model still pickles.
    """

    def __init__(self, model: nn.Module, what: str):
        self.what = what
        self.state = self._snapshot(model)

    @staticmethod
    def _snapshot(model: nn.Module):
        edges, params, hooks = [], [], []
        for name, module in model.named_modules():
            edges.extend((name, module, key, child) for key, child in module._modules.items())
            params.extend((name, module, key, p, _version(p), p.dtype, p.device)
                          for key, p in module._parameters.items() if p is not None)
            hooks.append((name, module, _watched_hooks(module._forward_pre_hooks), _watched_hooks(module._forward_hooks),
                          module.__dict__.get("forward"), type(module)))
        glob = (tuple(nn.modules.module._global_forward_pre_hooks), tuple(nn.modules.module._global_forward_hooks))
        return edges, params, hooks, glob

    def _change(self) -> str | None:
        edges, params, hooks, glob = self.state
        for name, module, key, child in edges:
            now = module._modules.get(key)
            if now is not child:
                if is_quantised_module(now):
                    return (f"the submodule {name + '.' if name else ''}{key} was replaced by a quantised "
                            f"{type(now).__name__} ({type(now).__module__}){QUANTISED}")
                return f"the submodule {name + '.' if name else ''}{key} was replaced or removed"
        if (tuple(nn.modules.module._global_forward_pre_hooks),
                tuple(nn.modules.module._global_forward_hooks)) != glob:
            return "a global forward hook or pre-hook (torch.nn.modules.module.register_module_forward_hook) was added or removed"
        for name, module, pre, post, forward, cls in hooks:
            if _watched_hooks(module._forward_pre_hooks) != pre or _watched_hooks(module._forward_hooks) != post:
                return f"a forward hook or pre-hook of {name or 'the model'} was added or removed"
            if module.__dict__.get("forward") is not forward:
                return (f"the forward method of {name or 'the model'} was replaced on the instance "
                        "(module.forward = ..., as steering code and accelerate's hooks do)")
            if type(module) is not cls:
                return f"the class of {name or 'the model'} was changed (module.__class__ = ...)"
        converted = replaced = False
        for name, module, key, p, version, dtype, device in params:
            where = f"{name + '.' if name else ''}{key}"
            now = module._parameters.get(key)
            if now is not p:
                # a replacement by equal values (torch.func.functional_call with clones of the proved weights) computes
                # the proved function: accepted, checked again at every call (referee 18 of chapter 7, finding 9)
                if now is None or _version(p) != version or (p.dtype, p.device) != (dtype, device) \
                        or not _equal_values(now, p):
                    return (f"the parameter {where} was replaced by weights of other values (torch.func.functional_call "
                            "with weights of other values, or a new parameter assigned)")
                replaced = True
                continue
            if (p.dtype, p.device) != (dtype, device):
                converted = True
            elif _version(p) != version:
                return f"the parameter {where} was changed in place (an optimizer step, or p.copy_(...))"
        if converted:
            return "converted"
        return "replaced by equal values" if replaced else None

    def record(self, model: nn.Module) -> None:
        """Take the model's weights, modules and hooks as they are now as the proved ones (for a rewrite that
        proves itself, such as :func:`lnbook.folding.softmax_shifts.fold_value_biases`)."""
        self.state = self._snapshot(model)
        self._fast = None

    def _watch(self) -> IdentityWatch | None:
        """What :meth:`_change` reads, held by identity (:func:`lnbook.folding.fast_guards.watch_weights_and_hooks`
        over the recorded modules): while it holds, :meth:`_change` would find what it found last."""
        seen, modules = set(), []
        for _, module, *_ in self.state[2]:
            if id(module) not in seen:
                seen.add(id(module))
                modules.append(module)
        try:
            watch = IdentityWatch()
            watch_weights_and_hooks(watch, modules)
            return watch
        except NotFast:
            return None

    def __call__(self, module, args) -> None:
        if _traced_call(module, args):
            return None
        fast = self.__dict__.get("_fast")
        if fast is not None and fast.holds():  # nothing that _change reads was replaced, added, removed or written to
            return None
        change = self._change()
        if change == "converted":  # .to(dtype/device): the fold holds at the new dtype to its rounding
            self.state = self._snapshot(module)
            change = None
        if change == "replaced by equal values":  # accepted; no shortcut, so the values are compared at every call
            self._fast = None
        elif change is None:
            self._fast = self._watch()
        elif change.endswith(QUANTISED):
            raise ValueError(
                f"{self.what} was proved equal to the original model for the weights, modules and hooks it had when it "
                f"was folded, and {change[:-len(QUANTISED)]} since. Quantisation and folding do not compose here: a "
                "quantised module is not among the operations the fold's proof has rules for (its weights' column means "
                "are no longer zero after rounding to integers), and a quantised model cannot be traced to be folded "
                "(fold_layernorms refuses it). Run the folded model unquantised, or quantise the original model and "
                "keep its LayerNorms"
            )
        else:
            raise ValueError(
                f"{self.what} was proved equal to the original model for the weights, modules and hooks it had when it "
                f"was folded, and {change} since. A folded model is for inference with the weights it was folded with: "
                "it does not compute the changed original (its writers are centred and its norms are RMSNorms), so "
                "the call is refused. Change the original model instead (train it, load its new weights, add the "
                "hook) and fold it again (fold_layernorms, or lnbook.folding.saving.load_folded for new weights)"
            )
        return None

    def __getstate__(self):  # the shortcut holds the model's own objects: a copy builds its own
        state = dict(self.__dict__)
        state.pop("_fast", None)
        return state

    def __setstate__(self, state):  # a deep or pickled copy: its parameters are new tensors with their own counters
        self.__dict__.update(state)
        edges, params, hooks, glob = self.state
        self.state = (edges, [(*q[:4], _version(q[3]), *q[5:]) for q in params], hooks, glob)


def record_proved_state(model: nn.Module) -> None:
    """After a rewrite of a folded model that proves itself: take its weights, modules and hooks as they are now as
    the proved ones (:meth:`RefuseChangesSinceFolding.record`); a model that was not folded is left as it is."""
    for hook in list(model._forward_pre_hooks.values()):
        if isinstance(hook, RefuseChangesSinceFolding):
            hook.record(model)
