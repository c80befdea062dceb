r"""Trace a model with ``torch.export`` over dynamic shapes, and the input shapes on which the trace holds.

Chapter 7. A traced graph is the model's computation only for the input shapes it was traced for:
Python branches on shapes and sizes read from the example are baked into it. :func:`trace_model`
therefore exports with every input dimension dynamic (``torch.export.Dim.AUTO``), so that sizes
become symbols and a reshape that is correct only at the traced sizes is visibly so; a dimension of
size 1 (which ``torch.export`` always specialises) is first tried at size 2. What remains fixed, and
the ranges the export found for the dynamic sizes, form the :class:`ShapeDomain` of the trace: every
verdict holds on that domain, :func:`lnbook.folding.fold.fold_layernorms` checks the folded model on
two shapes drawn from it, and the folded model runs no input outside it unproved: it proves that call on the
original model first (:class:`lnbook.folding.call_proofs.CallProver`), or refuses it (:class:`ShapeGuard`).

Every argument that is not a tensor (a flag, a number, a string, ``None``, the structure of a container,
and every parameter left at its default) is a constant of the trace: ``torch.export`` bakes it into the
graph, so a Python branch on it, or arithmetic with it, holds for that value only. The domain therefore
also records the traced call's arguments (:class:`CallSpec`, bound to the signature of ``forward`` with
its defaults applied, so that passing an argument by position, by keyword or not at all is the same call
when the values agree), and the guard refuses a call whose non-tensor arguments differ, naming the
argument.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import logging
import math
import sys
from dataclasses import dataclass

import sympy as sp
import torch
from torch import nn
from torch.utils import _pytree as pytree

__all__ = ["UntraceableModelError", "checking_copies", "CallSpec", "ShapeDomain", "ShapeGuard", "trace_model", "draw_inputs", "register_cache_types",
           "tracing_for_analysis"]

# True while trace_model runs torch.export for lnbook's own analysis (tracing_for_analysis).
_ANALYSING = contextvars.ContextVar("lnbook_tracing_for_analysis", default=False)


# True (in this thread) while lnbook runs private copies of a model for its own numerical check (checking_copies).
_CHECKING = contextvars.ContextVar("lnbook_checking_copies", default=False)


def tracing_for_analysis() -> bool:
    """Is :func:`trace_model` tracing a model for lnbook's own analysis right now, or is lnbook running private copies
    of a model for its own numerical check (:func:`checking_copies`, the fold's float64 check)? A per-call check hook
    whose answer depends on tensor values (the attention-mask check of
    :func:`lnbook.folding.softmax_shifts.fold_value_biases`) cannot run under ``torch.export``, and need not there:
    the traced graph is analysed, never returned to compute outputs, and every eager call of the model still runs
    the hook. The same holds for the check's copies: their outputs are only compared with each other, the same
    guards sit on both, and a guard of an earlier rewrite (``fold_value_biases``' refusal of a cache it did not fill)
    would refuse the check's random inputs. A ``torch.export`` of the user's own is not this, and the hook still
    fails it rather than being left out of the exported program."""
    return _ANALYSING.get() or _CHECKING.get()


@contextlib.contextmanager
def checking_copies():
    """Within this context (this thread only), :func:`tracing_for_analysis` is true: lnbook's guard hooks on the
    models run inside it do nothing. For private copies whose outputs are only compared, never returned
    (:func:`lnbook.folding.fold.verify_fold`)."""
    token = _CHECKING.set(True)
    try:
        yield
    finally:
        _CHECKING.reset(token)


class UntraceableModelError(ValueError):
    """``torch.export`` could not trace the model; the message names the module where it failed."""


def _label(path) -> str:
    """``x[0]`` for the first positional argument, ``attention_mask`` for a keyword argument."""
    head = f"args[{path[1].idx}]" if path[0].idx == 0 else str(getattr(path[1], "key", path[1]))
    return head + pytree.keystr(path[2:])


def _leaves(args: tuple, kwargs: dict) -> list[tuple[str, object]]:
    flat, _ = pytree.tree_flatten_with_path((tuple(args), dict(kwargs)))
    return [(_label(path), leaf) for path, leaf in flat]


def _same(a, b) -> bool:
    """Are two non-tensor arguments the same constant for the trace? Same type and equal (a float also by
    its sign, so 0.0 and -0.0 differ; NaN equals NaN); an object whose ``==`` is not a plain truth value
    only when it is the very same object."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1.0, a) == math.copysign(1.0, b))
    try:
        equal = a == b
        return equal if isinstance(equal, bool) else False
    except Exception:  # noqa: BLE001 - an == that fails says nothing: not the same
        return False


class _Marker:
    """A singleton that stays itself through ``copy.deepcopy`` and pickling (a folded model is copied with its guard)."""

    def __init__(self, name: str, text: str):
        self.name, self.text = name, text

    def __repr__(self) -> str:
        return self.text

    def __deepcopy__(self, memo):
        return self

    def __copy__(self):
        return self

    def __reduce__(self):
        return self.name


_TENSOR = _Marker("_TENSOR", "a tensor")  # where the traced call had a tensor (its value is no constant of the call)
_NOT_PASSED = _Marker("_NOT_PASSED", "<not passed>")  # a **kwargs key that one of the two calls does not pass


_BUILTIN_NODES = (tuple, list, dict)


def _custom(spec) -> bool:
    """Does a tree spec contain a node type registered outside Python's containers (a ``transformers`` cache)?"""
    if spec.is_leaf():
        return False
    return not issubclass(spec.type, _BUILTIN_NODES) or any(_custom(c) for c in spec.children())


class _Flat:
    """A traced argument with a registered pytree node inside (a ``transformers`` cache), kept flattened: its
    structure and, per leaf, the leaf or ``_TENSOR`` (a node such as a cache cannot be rebuilt from markers)."""

    def __init__(self, value):
        flat, self.spec = pytree.tree_flatten_with_path(value)
        self.leaves = [(path, _TENSOR if isinstance(leaf, torch.Tensor) else leaf) for path, leaf in flat]
        self.text = f"a {type(value).__name__} holding {sum(leaf is _TENSOR for _, leaf in self.leaves)} tensors"

    def __repr__(self) -> str:
        return self.text


def _slots(value):
    if _custom(pytree.tree_structure(value)):
        return _Flat(value)
    return pytree.tree_map(lambda leaf: _TENSOR if isinstance(leaf, torch.Tensor) else leaf, value)


def _flat_with_path(value):
    if isinstance(value, _Flat):
        return value.leaves, value.spec
    return pytree.tree_flatten_with_path(value)


def _show(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if not isinstance(value, _Flat) and _custom(pytree.tree_structure(value)):
        value = _Flat(value)
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class CallSpec:
    """The traced call apart from its tensors' values: what a call must repeat to be covered by the proof.

    ``signature`` is that of the model's ``forward`` (``None`` when it cannot be read: the call is then
    compared as passed, position by position and keyword by keyword). ``bound`` is the traced call bound
    to it with the defaults applied (``name -> value``); ``passed`` the names the traced call gave
    explicitly; ``positional`` and ``keywords`` how it passed them, the layout in which
    :class:`ShapeDomain` names its tensor inputs. The traced tensors themselves are not kept (each is a slot).
    """

    signature: inspect.Signature | None
    bound: tuple[tuple[str, object], ...]
    passed: frozenset
    positional: int
    keywords: tuple[str, ...]

    @classmethod
    def of(cls, model: nn.Module, args: tuple, kwargs: dict) -> "CallSpec":
        try:
            signature = inspect.signature(model.forward)
            bound = signature.bind(*args, **kwargs)
        except (TypeError, ValueError):
            signature = None
        if signature is None:
            return cls(None, (("args", _slots(tuple(args))), ("kwargs", _slots(dict(kwargs)))),
                       frozenset(["args", "kwargs"]), len(args), tuple(kwargs))
        passed = frozenset(bound.arguments)
        bound.apply_defaults()
        var_keyword = {n for n, p in signature.parameters.items() if p.kind == p.VAR_KEYWORD}
        # the entries of **kwargs one by one (_pairs compares them so): a cache passed through **kwargs (transformers'
        # past_key_values=) is flattened on its own, not as part of a dict that _pairs could not walk (referee 14)
        return cls(signature, tuple((k, {key: _slots(x) for key, x in v.items()} if k in var_keyword else _slots(v))
                                    for k, v in bound.arguments.items()), passed, len(args), tuple(kwargs))

    def _bind(self, args: tuple, kwargs: dict) -> dict | str:
        if self.signature is None:
            return {"args": tuple(args), "kwargs": dict(kwargs)}
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as err:
            return f"it does not match the signature of forward{self.signature}: {err}"
        bound.apply_defaults()
        return dict(bound.arguments)

    def _pairs(self, got: dict):
        """``(label, traced value, this call's value, note)`` per argument; the entries of ``**kwargs`` one by
        one (a key passed on one side only is compared as ``<not passed>``), those of ``*args`` by index."""
        kinds = {n: p.kind for n, p in self.signature.parameters.items()} if self.signature is not None else {}
        for name, traced in self.bound:
            value = got[name]
            where = "" if name in self.passed else " (its default)"
            if kinds.get(name) == inspect.Parameter.VAR_KEYWORD:
                for key in list(traced) + [k for k in value if k not in traced]:
                    yield (key, traced.get(key, _NOT_PASSED), value.get(key, _NOT_PASSED),
                           "" if key in traced else " (not passed)")
            elif kinds.get(name) == inspect.Parameter.VAR_POSITIONAL and len(traced) != len(value):
                yield f"*{name}", len(traced), len(value), " (the number of extra positional arguments)"
            else:
                yield name, traced, value, where

    def match(self, args: tuple, kwargs: dict) -> tuple[tuple, dict] | str:
        """The call ``(args, kwargs)`` laid out as the traced call passed its arguments (the layout in which
        :class:`ShapeDomain` names its tensors), or the reason it is not the traced call up to the values of
        its tensors: the argument that differs, as it is here and as it was traced."""
        got = self._bind(args, kwargs)
        if isinstance(got, str):
            return got
        for name, traced, value, where in self._pairs(got):
            t_flat, t_spec = _flat_with_path(traced)
            v_flat, v_spec = pytree.tree_flatten_with_path(value)
            if t_spec != v_spec:
                return f"argument '{name}' is {_show(value)} here, {_show(traced)} in the traced call{where}"
            for (path, t), (_, v) in zip(t_flat, v_flat):
                if (t is _TENSOR) != isinstance(v, torch.Tensor) or (t is not _TENSOR and not _same(t, v)):
                    return (f"argument '{name}{pytree.keystr(path)}' is {_show(v)} here, {_show(t)} in the traced "
                            f"call{where}")
        if self.signature is None:
            return tuple(args), dict(kwargs)
        params = self.signature.parameters
        positional: list = []
        for name, param in params.items():
            if param.kind == param.VAR_POSITIONAL:
                positional.extend(got[name])
            elif param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
                positional.append(got[name])
        extra = next((got[n] for n, p in params.items() if p.kind == p.VAR_KEYWORD), {})
        named = {n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        return tuple(positional[: self.positional]), {k: got[k] if k in named else extra[k] for k in self.keywords}


@dataclass(frozen=True)
class ShapeDomain:
    """The input shapes on which a traced graph is the model's computation.

    ``inputs`` lists, per tensor input (by its path in ``(args, kwargs)``), each dimension as a fixed
    size or a sympy expression in the dynamic sizes; ``ranges`` the interval the export allows for each
    symbol (upper bound ``None`` for unbounded). ``conditions`` are the export's other guards on the sizes (sympy
    relations such as ``Ne(s1, 7)`` from ``if x.shape[1] == 7`` or ``Ne(Mod(s1, 4), 0)`` from a branch on
    divisibility): the traced graph is the model's computation only where every one holds (referee 23 of chapter
    7, finding 0: they were dropped, and a call at length 7 ran through the other branch unproved). ``call`` is the
    traced call's non-tensor part (:class:`CallSpec`): a call is in the domain only when it repeats it.
    """

    inputs: tuple[tuple[str, tuple], ...]
    ranges: tuple[tuple[sp.Symbol, int, int | None], ...]
    dynamic: bool
    call: CallSpec | None = None
    kinds: tuple[tuple[str, str], ...] = ()  # per tensor input: tensor_kind at the trace
    aliases: tuple = ()  # alias_pattern of the tensor inputs (in the order of ``kinds``) at the trace
    conditions: tuple = ()  # the export's guards on the sizes besides the ranges (sympy relations)
    strides: tuple[tuple[str, tuple], ...] = ()  # per tensor input: its strides at the trace, fixed or symbolic

    def bind_strides(self, leaves: dict, env: dict) -> str:
        """Add to ``env`` the value of each stride symbol of the trace from the call's tensors (``leaves``: path ->
        tensor), and check every stride of a dimension of size 2 or more against the trace's (a size-1 dimension's
        stride is never used to address an element, and torch leaves it arbitrary). ``""`` when they agree, else the
        reason. A non-contiguous input (a slice ``x[:, :3]``, the last token ``x[:, -1:]``) is traced with symbolic
        strides, and its guards name them: without their values a call of it could not be decided and was refused
        (referee 28 of chapter 7, finding 3)."""
        for path, strides in getattr(self, "strides", ()):  # (a domain pickled before strides existed has none)
            for i, d in enumerate(strides):
                if isinstance(d, sp.Symbol) and d not in env:
                    env[d] = leaves[path].stride(i)
        for path, strides in getattr(self, "strides", ()):
            t = leaves[path]
            for i, d in enumerate(strides):
                if t.shape[i] < 2:
                    continue
                want = int(sp.sympify(d).xreplace({k: sp.Integer(v) for k, v in env.items()})) if not isinstance(d, int) else d
                if t.stride(i) != want:
                    return (f"{path} has stride {t.stride(i)} in dimension {i}, where the trace holds for {d} = {want}: "
                            "another memory layout, which a forward may branch on")
        return ""

    def violated(self, env: dict) -> str:
        """``""`` when the symbol values ``env`` satisfy every condition of the trace, else the first condition
        that fails or cannot be decided from them (a condition on a size that is not an input's), in words."""
        values = {sym: sp.Integer(int(n)) for sym, n in env.items()}
        for cond in getattr(self, "conditions", ()):  # (a domain pickled before conditions existed has none)
            try:
                verdict = cond.xreplace(values)
            except Exception:  # noqa: BLE001 - an expression sympy cannot evaluate at these values
                verdict = None
            if verdict is sp.true or verdict is True:
                continue
            at = ", ".join(f"{sym} = {env[sym]}" for sym in sorted(cond.free_symbols, key=str) if sym in env)
            if verdict is sp.false or verdict is False:
                return (f"the trace holds only where {cond} (the model branches on these sizes), and here {at}: the "
                        "model may compute otherwise there")
            return f"the trace holds only where {cond}, which cannot be decided for this call ({at or 'no size bound'})"
        return ""

    def describe(self) -> str:
        parts = []
        for path, dims in self.inputs:
            parts.append(f"{path}: ({', '.join(str(d) for d in dims)})")
        rng = [f"{lo} <= {s} <= {hi if hi is not None else 'inf'}" for s, lo, hi in self.ranges]
        return "; ".join(parts) + (" with " + ", ".join(rng) if rng else "")

    def values(self, args: tuple, kwargs: dict) -> dict | str:
        """The symbol values of a call, or the reason it lies outside the domain (its arguments, then its shapes)."""
        if self.call is not None:
            laid = self.call.match(args, kwargs)
            if isinstance(laid, str):
                return laid
            args, kwargs = laid
        return self.sizes(args, kwargs)

    def sizes(self, args: tuple, kwargs: dict) -> dict | str:
        """The symbol values of a call laid out as the traced call, or the reason its shapes lie outside the domain."""
        leaves = dict((p, t) for p, t in _leaves(args, kwargs) if isinstance(t, torch.Tensor))
        if set(leaves) != {p for p, _ in self.inputs}:
            return f"its tensor arguments {sorted(leaves)} are not those of the traced call {[p for p, _ in self.inputs]}"
        for path, kind in self.kinds:  # a forward may branch on an input's dtype or device: torch.export specialises it
            if tensor_kind(leaves[path]) != kind:
                return (f"{path} is a {tensor_kind(leaves[path])} tensor, and the traced call's was {kind}: a forward may "
                        "take another path for another dtype, device, layout, grad requirement or memory layout, so the "
                        "trace says nothing about it")
        if self.aliases and alias_pattern([leaves[p] for p, _ in self.kinds]) != self.aliases:
            return ("its tensor arguments are the same tensor or share memory where the traced call's did not (or the "
                    "other way round): a forward may branch on that (x is y), so the trace says nothing about it")
        env: dict = {}
        for path, dims in self.inputs:
            shape = tuple(leaves[path].shape)
            if len(shape) != len(dims):
                return (f"{path} has {len(shape)} dimensions, the traced call {len(dims)}: the fold was proved for "
                        f"inputs of the traced rank only, so an unbatched call or a call under torch.func.vmap (which "
                        f"hides the mapped axis) is refused. To call it with {len(shape)} dimensions, fold with an "
                        f"example of that rank (for vmap: an example shaped like one slice)")
            for i, (n, d) in enumerate(zip(shape, dims)):
                if isinstance(d, sp.Symbol) and d not in env:
                    env[d] = n
        for path, dims in self.inputs:
            shape = tuple(leaves[path].shape)
            for i, (n, d) in enumerate(zip(shape, dims)):
                want = int(sp.sympify(d).subs(env)) if not isinstance(d, int) else d
                if n != want:
                    return f"{path} has size {n} in dimension {i}, where the trace holds only for {d} = {want}"
        strided = self.bind_strides(leaves, env)
        if strided:
            return strided
        for s, lo, hi in self.ranges:
            if s in env and env[s] == 1 and lo >= 2:
                return (f"size {s} = 1, and the model was traced with this dimension (a batch or a sequence length) "
                        "at 2 or more: torch.export specialises a size of 1, so the trace says nothing about it. "
                        "Pass at least 2 there (repeat the row and keep the first output)")
            if s in env and (env[s] < lo or (hi is not None and env[s] > hi)):
                return f"size {s} = {env[s]} lies outside the traced range [{lo}, {hi if hi is not None else 'inf'}]"
        return self.violated(env) or env

    def other_sizes(self, env: dict) -> list[dict]:
        """Candidate second values for the dynamic sizes of ``env`` inside the domain: each moved down (not below 2),
        then each moved up, by the smallest step (at most 64) at which every size stays in its range and every
        condition of the trace holds."""
        out = []
        for sign in (-1, 1):
            for step in range(1, 65):
                sizes = dict(env)
                for s, lo, hi in self.ranges:
                    if s in env:
                        v = env[s] + sign * step
                        if v >= max(lo, 2) and (hi is None or v <= hi):
                            sizes[s] = v
                if sizes == env:
                    break
                if not self.violated(sizes):
                    out.append(sizes)
                    break
        return out


class ShapeGuard:
    """A forward pre-hook that refuses calls outside a :class:`ShapeDomain` with the reason: a call whose
    non-tensor arguments are not those of the trace, or whose input shapes lie outside the domain."""

    def __init__(self, domain: ShapeDomain, what: str):
        self.domain, self.what = domain, what

    @torch.compiler.disable  # under torch.compile: a graph break, and the check runs eagerly on the call's tensors
    def __call__(self, module, args, kwargs):
        args, kwargs = tuple(args), dict(kwargs)
        if self.domain.call is not None:
            laid = self.domain.call.match(args, kwargs)
            if isinstance(laid, str):
                raise ValueError(
                    f"{self.what} was proved equal to the original model only for the arguments of its trace, and "
                    f"this call's differ: {laid}. Every argument that is not a tensor (a flag, a number, a string, "
                    "None, a container's structure, a default left out) is a constant of the trace: the model may "
                    "branch on it or compute with it, so the proof says nothing about another value. Fold again with "
                    "this call's arguments as the example (fold_layernorms(model, example_inputs, example_kwargs) "
                    "with the same non-tensor arguments) and call that folded model this way."
                )
            args, kwargs = laid
        got = self.domain.sizes(args, kwargs)
        if isinstance(got, str):
            raise ValueError(
                f"{self.what} was proved equal to the original model only for the input shapes and types of its "
                f"trace ({self.domain.describe()}), and this call is outside them: {got}. Fold again with an example "
                "of these shapes and types (or check the original model for a branch on them)."
            )
        return None


def draw_inputs(args: tuple, kwargs: dict, sizes: dict | None, domain: ShapeDomain | None, seed: int,
                keep_zeros: bool = False):
    """Random inputs like the example (:func:`_draw_like`): floats ~ N(mean, std) of the example (an additive mask
    kept), boolean masks kept, integers uniform on the example's range (a constant kept); with
    ``sizes`` (symbol -> size), dynamic dimensions resized. ``keep_zeros``: a floating tensor of zeros is kept as
    zeros (a mask that masks nothing, ``generate_square_subsequent_mask(1)``), which the check uses only when the
    drawn inputs leave the original's outputs NaN everywhere (referee 29 of chapter 7, finding 1b)."""
    gen = torch.Generator().manual_seed(seed)
    dims = dict(domain.inputs) if domain is not None else {}
    flat, spec = pytree.tree_flatten_with_path((tuple(args), dict(kwargs)))
    out = []
    for path, leaf in flat:
        if not isinstance(leaf, torch.Tensor):
            out.append(leaf)
            continue
        shape = tuple(leaf.shape)
        key = _label(path)
        if sizes and key in dims:
            shape = tuple(int(sp.sympify(d).subs(sizes)) if not isinstance(d, int) else d for d in dims[key])
        if keep_zeros and is_float_zeros(leaf):
            out.append(torch.zeros(shape, dtype=leaf.dtype, device=leaf.device))
        else:
            out.append(_draw_like(leaf, shape, gen))
    a, k = pytree.tree_unflatten(out, pytree.tree_structure((tuple(args), dict(kwargs))))
    return a, k


def _draw_like(t: torch.Tensor, shape: tuple, gen: torch.Generator) -> torch.Tensor:
    """A random tensor like ``t`` of shape ``shape``. Floats: N(mean, std) of ``t``, except an additive attention mask
    (:func:`_additive_mask`: a ``-inf`` entry, or zeros beside one very negative value), which is kept as it is; booleans (a mask): kept as they are;
    constant integers: the constant; other integers: uniform on ``t``'s range. A kept tensor is resampled to another
    shape by nearest index (:func:`_resampled`). An additive causal mask drawn as N(mean, std) of its entries was
    ``-inf`` everywhere, and a boolean mask was a constant of its first entry: every query masked, both models'
    outputs NaN, and the comparison void (referee 28 of chapter 7, findings 1 and 2); a mask's finite entries drawn
    at random are no mask either (torch's fused encoder path then masks every key)."""
    if t.is_floating_point():
        flat = t.detach().double().reshape(-1)
        if _additive_mask(flat):  # kept as it is
            return _resampled(t.detach(), shape).to(t.device)
        std = float(flat.std()) if flat.numel() > 1 and float(flat.std()) > 0 else 1.0
        mean = float(flat.mean()) if flat.numel() else 0.0
        return (torch.randn(shape, generator=gen, dtype=torch.float64) * std + mean).to(t.dtype).to(t.device)
    if t.dtype == torch.bool and t.numel():
        return _resampled(t.detach(), shape).to(t.device)
    if t.numel() == 0 or bool((t == t.reshape(-1)[0]).all()):
        fill = t.reshape(-1)[0] if t.numel() else torch.zeros((), dtype=t.dtype)
        return torch.full(shape, fill.item(), dtype=t.dtype, device=t.device)
    lo, hi = int(t.min()), int(t.max())
    return torch.randint(lo, hi + 1, shape, generator=gen, dtype=t.dtype).to(t.device)


def is_float_zeros(t) -> bool:
    """Whether ``t`` is a non-empty floating tensor of zeros (an additive mask that masks nothing)."""
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 0 and not bool(t.any())


MASK_LEVEL = -1e4  # an entry at or below this, beside zeros, marks a float tensor as an additive mask


def _additive_mask(flat: torch.Tensor) -> bool:
    """Whether a float tensor (flattened, float64) is an additive attention mask: it has a non-finite entry (``-inf``),
    or its entries take two values, 0 and one at most :data:`MASK_LEVEL` (``-1e9``, ``torch.finfo(dtype).min``, the
    ``-10000.0`` of older models). Drawn at random, the finite conventions are no mask either (referee 29 of chapter
    7, finding 1: a causal encoder's check on such draws was void and refused)."""
    if not flat.numel():
        return False
    if not bool(torch.isfinite(flat).all()):
        return True
    values = torch.unique(flat)
    return len(values) == 2 and float(values[1]) == 0.0 and float(values[0]) <= MASK_LEVEL


def _resampled(t: torch.Tensor, shape: tuple) -> torch.Tensor:
    """``t`` (on the CPU) at ``shape`` (same rank) by nearest index: entry ``i`` of a dimension of new size ``m`` is
    entry ``floor(i * n / m)`` of old size ``n``. A causal mask stays lower triangular in the sense that each row keeps
    its first key unmasked; ``t`` itself when the shape is its own."""
    t = t.cpu()
    if tuple(t.shape) == tuple(shape):
        return t.clone()
    if t.dim() != len(shape):
        raise ValueError(f"cannot draw an input of shape {tuple(shape)} like a tensor of shape {tuple(t.shape)}")
    for dim, m in enumerate(shape):
        n = t.shape[dim]
        if n != m:
            t = t.index_select(dim, torch.div(torch.arange(m) * n, m, rounding_mode="floor"))
    return t


def _dynamic_spec(model: nn.Module, args: tuple, kwargs: dict):
    """``Dim.AUTO`` for every dimension of every tensor input, keyed like ``torch.export`` wants it."""

    def tree(value):
        """The spec in the layout ``torch.export`` wants: containers as containers, and a registered pytree
        node (a ``transformers`` cache) as the list of its children's specs."""
        if isinstance(value, torch.Tensor):
            return {i: torch.export.Dim.AUTO for i in range(value.dim())} or None
        if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
            return type(value)(tree(v) for v in value)
        if type(value) is dict:
            return {k: tree(v) for k, v in value.items()}
        node = pytree.SUPPORTED_NODES.get(type(value))
        if node is not None and not pytree.tree_is_leaf(value):
            children, _ = node.flatten_fn(value)
            return [tree(c) for c in children]
        return None

    if not kwargs:
        return tuple(tree(a) for a in args)
    bound = inspect.signature(model.forward).bind(*args, **kwargs)
    return {name: tree(value) for name, value in bound.arguments.items()}


def _domain(program, args: tuple, kwargs: dict, dynamic: bool, call: CallSpec | None = None) -> ShapeDomain:
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder" and n.name in set(program.graph_signature.user_inputs)]
    tensors = [(p, t) for p, t in _leaves(args, kwargs) if isinstance(t, torch.Tensor)]
    inputs, symbols, strides = [], set(), []
    for (path, _), node in zip(tensors, placeholders):
        dims = []
        for s in node.meta["val"].shape:
            if isinstance(s, torch.SymInt):
                expr = sp.sympify(s.node.expr)
                dims.append(expr)
                symbols |= expr.free_symbols
            else:
                dims.append(int(s))
        inputs.append((path, tuple(dims)))
        strides.append((path, tuple(sp.sympify(s.node.expr) if isinstance(s, torch.SymInt) else int(s)
                                    for s in node.meta["val"].stride())))
    ranges = []
    for sym, vr in program.range_constraints.items():
        s = sp.sympify(sym)
        if s in symbols:
            ranges.append((s, _bound(vr.lower, 0), _bound(vr.upper, None)))
    kinds = tuple((path, tensor_kind(t)) for path, t in tensors)
    return ShapeDomain(tuple(inputs), tuple(sorted(ranges, key=lambda r: str(r[0]))), dynamic, call, kinds,
                       alias_pattern([t for _, t in tensors]), _size_conditions(placeholders, symbols), tuple(strides))


def _size_conditions(placeholders, symbols: set) -> tuple:
    """The guards that ``torch.export`` recorded on the sizes (its shape environment's, as sympy relations): a branch on ``x.shape[1] == 7`` leaves ``Ne(s1, 7)``, one on ``x.shape[1] % 4 == 0``
    leaves ``Ne(Mod(s1, 4), 0)`` (the bounds that the ranges hold are kept too: checking them twice costs little). A
    guard on sizes that are not among the inputs' symbols is kept as well (a call cannot then be shown to satisfy it,
    and is refused)."""
    env = next((n.meta["val"].fake_mode.shape_env for n in placeholders
                if getattr(getattr(n.meta.get("val"), "fake_mode", None), "shape_env", None) is not None), None)
    if env is None:
        return ()
    out = []
    for guard in env.guards:
        expr = guard.expr
        try:
            expr = env.simplify(expr)
        except Exception:  # noqa: BLE001 - keep the guard as recorded
            pass
        if expr is sp.true or expr is True:
            continue
        if expr not in out:
            out.append(expr)
    return tuple(out)



def alias_pattern(tensors) -> tuple:
    """Which of ``tensors`` are one tensor and which share memory: per tensor, the index of the first that is the
    same object and of the first with the same storage (a forward may branch on ``x is y`` or on shared memory).
    A tensor whose storage cannot be read (a fake tensor while tracing) counts as sharing none."""
    same, stored, out = {}, {}, []
    for i, t in enumerate(tensors):
        try:
            ptr = t.untyped_storage().data_ptr()
        except Exception:  # noqa: BLE001 - fake or functional tensors: no memory to compare
            ptr = 0
        out.append((same.setdefault(id(t), i), stored.setdefault(ptr, i) if ptr else i))
    return tuple(out)


def tensor_kind(t: torch.Tensor) -> str:
    """What a forward may branch on of a tensor besides its shape, and a trace specialises: its dtype, device type,
    layout, whether it requires grad and whether it is contiguous (``"torch.int64 cpu torch.strided"``, with
    ``", requires grad"`` and ``", not contiguous"`` appended where they hold)."""
    return (f"{t.dtype} {t.device.type} {t.layout}" + (", requires grad" if t.requires_grad else "")
            + ("" if t.is_contiguous() else ", not contiguous"))


def _bound(value, infinite):
    try:
        return int(value)
    except (OverflowError, TypeError, ValueError, AttributeError):
        return infinite


def register_cache_types() -> None:
    """Make the key-value caches of ``transformers`` (``DynamicCache``) pytree nodes, so that a call with
    ``use_cache=True`` (a cache in the inputs and in the output) can be traced, and its tensors are inputs of the
    trace like any other. A no-op without ``transformers`` imported; registering twice is harmless."""
    if "transformers" not in sys.modules:
        return
    try:
        from transformers.integrations.executorch import register_dynamic_cache_export_support
    except ImportError:  # an older transformers: the cache stays unknown and the trace says so
        return
    register_dynamic_cache_export_support()


@contextlib.contextmanager
def _quiet_export():
    """``torch.export`` logs a warning per dimension of size 1 that it specialises; the domain records them."""
    logger = logging.getLogger("torch._export.non_strict_utils")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def trace_model(model: nn.Module, example_inputs, example_kwargs: dict | None = None, *, training: bool = False,
                enlarge: bool = True):
    """Trace ``model`` with ``torch.export`` (non-strict, dynamic shapes); return ``(program, domain, args, kwargs)``.

    ``example_inputs`` is one tensor or a tuple of positional arguments; ``example_kwargs`` keyword
    arguments. Every input dimension is exported as dynamic where the model allows it (else fixed); an
    example with a dimension of size 1 is traced with those dimensions at size 2 when the model accepts
    that (``args``, ``kwargs`` are the inputs actually traced), unless ``enlarge=False``: then the call is
    traced as given and its sizes of 1 are fixed in the domain (what a folded model does to prove a call
    it was not proved for). The model is traced in eval mode unless
    ``training=True`` (its mode is restored), with the fused ``nn.MultiheadAttention`` fast path off.
    A ``transformers`` cache (``use_cache=True``) is traced as part of the inputs and outputs
    (:func:`register_cache_types`).
    Raises :class:`UntraceableModelError` naming the innermost module running when tracing failed.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    register_cache_types()
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    kwargs = dict(example_kwargs or {})
    if enlarge and any(isinstance(t, torch.Tensor) and 1 in tuple(t.shape) for _, t in _leaves(args, kwargs)):
        bigger = _enlarged(args, kwargs)
        try:
            program = _export(model, bigger[0], bigger[1], training, dynamic=True)
            return program, _domain(program, *bigger, True, CallSpec.of(model, *bigger)), bigger[0], bigger[1]
        except Exception:  # noqa: BLE001 - the model needs those sizes: trace the example as given
            pass
    try:
        program = _export(model, args, kwargs, training, dynamic=True)
        return program, _domain(program, args, kwargs, True, CallSpec.of(model, args, kwargs)), args, kwargs
    except UntraceableModelError:
        program = _export(model, args, kwargs, training, dynamic=False)
        return program, _domain(program, args, kwargs, False, CallSpec.of(model, args, kwargs)), args, kwargs


def _enlarged(args, kwargs):
    gen = torch.Generator().manual_seed(0)

    def grow(leaf):
        if not isinstance(leaf, torch.Tensor):
            return leaf
        shape = tuple(2 if n == 1 else n for n in leaf.shape)
        if is_float_zeros(leaf):  # zeros (a mask masking nothing) stay zeros
            return torch.zeros(shape, dtype=leaf.dtype, device=leaf.device)
        return _draw_like(leaf, shape, gen)

    a, k = pytree.tree_map(grow, (tuple(args), dict(kwargs)), is_leaf=lambda x: isinstance(x, torch.Tensor))
    return a, k


def _name_extra_keywords(model: nn.Module, kwargs: dict) -> bool:
    """Give ``model.forward`` (for the time of the export) a signature that names the call's ``**kwargs`` entries
    (``return_dict=True`` from ``generate``) as keyword-only parameters: ``torch.export`` matches dynamic shapes
    against ``**kwargs`` inconsistently ("Must provide a tree_name when there might be a mismatch"). The
    computation is the same call. Returns whether ``forward`` was patched (the caller deletes the patch)."""
    try:
        signature = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return False
    params = [p for p in signature.parameters.values() if p.kind != p.VAR_KEYWORD]
    named = {p.name for p in params}
    extra = [k for k in kwargs if k not in named]
    if len(params) == len(signature.parameters) or not extra or "forward" in vars(model):
        return False
    bound_forward = model.forward

    def forward(*args, **kw):
        return bound_forward(*args, **kw)

    forward.__signature__ = signature.replace(
        parameters=params + [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY) for k in extra])
    model.forward = forward
    return True


def _export(model, args, kwargs, training, dynamic):
    running: list[str] = []

    def enter(name):
        def hook(module, inputs):
            running.append(name)

        return hook

    def leave(module, inputs, output):
        if running:
            running.pop()

    handles = []
    for name, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(enter(name)))
        handles.append(module.register_forward_hook(leave))
    was_training = model.training
    fastpath = torch.backends.mha.get_fastpath_enabled()
    patched = _name_extra_keywords(model, kwargs)
    try:
        model.train(training)
        torch.backends.mha.set_fastpath_enabled(False)
        shapes = _dynamic_spec(model, args, kwargs) if dynamic else None
        token = _ANALYSING.set(True)
        try:
            with _quiet_export():
                return torch.export.export(model, tuple(args), dict(kwargs), dynamic_shapes=shapes, strict=False)
        finally:
            _ANALYSING.reset(token)
    except Exception as err:  # noqa: BLE001 - every tracing failure becomes one clear error
        where = running[-1] if running else ""
        module = model.get_submodule(where) if where else model
        label = f"module '{where}' ({type(module).__name__})" if where else f"the top-level {type(model).__name__}"
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        unknown = ("in output, which is not a known type" in first or "in input, which is not a known type" in first
                   or first.startswith("Unsupported input type"))  # torch 2.13's wording (referee 33 of chapter 7)
        if unknown:
            raise UntraceableModelError(
                f"cannot trace {type(model).__name__} with torch.export: {first.split(' which')[0]}, which torch.export "
                "cannot flatten into tensors (not a registered pytree type), so this call cannot be traced or "
                "proved. Only a transformers DynamicCache is supported (generate's default cache, not "
                "cache_implementation='static'); pass use_cache=False or a DynamicCache."
            ) from err
        raise UntraceableModelError(
            f"cannot trace {type(model).__name__} with torch.export: it failed inside {label}: "
            f"{type(err).__name__}: {first}. Make that module traceable (no Python branching on tensor "
            "values, such as `if bool(x.isnan().any())` input checks), or analyse a model without it."
        ) from err
    finally:
        if patched:
            del model.forward
        for h in handles:
            h.remove()
        model.train(was_training)
        torch.backends.mha.set_fastpath_enabled(fastpath)
