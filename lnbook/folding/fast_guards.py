r"""What the guards of a folded model check on every call, checked fast (chapter 7).

A folded model refuses, before each call, weights or hooks changed since folding
(:class:`lnbook.folding.call_proofs.RefuseChangesSinceFolding`), and runs a call only inside a proved domain under
the model state it was proved for (:class:`lnbook.folding.call_proofs.CallProver`). Done from scratch, that walks
every module, formats every plain attribute, serialises the configuration and binds the call to the signature of
``forward``: about 2 ms a call, more than a forward of a small language model at batch 1. Each guard therefore
keeps its full check for the first call and for any call in which something may have changed, and answers the other
calls from what the full check accepted, by three exact shortcuts (no answer differs from the full check's; a
shortcut that cannot say falls back to it):

* :class:`IdentityWatch`: the objects the full check read, held by identity. Every entry of the watched
  dictionaries (a module's ``__dict__``, its ``_modules``, ``_parameters`` and hook dictionaries, the configuration's
  ``__dict__`` and its class dictionaries), every parameter's version counter, dtype and device, every module's class,
  the global hooks, the grad and inference modes, and a deep copy of each mutable value of the configuration. When all
  are the same objects as when the full check accepted, the full check would read exactly what it read then, and
  its answer is the same. Any difference (one entry replaced, added or removed, one version counter moved) sends the
  call to the full check, which accepts or refuses it with the reason, as before.
* :func:`call_skeleton`: the call without its tensors' sizes (the structure of its arguments, each tensor's rank,
  dtype, device type and layout, each other argument's exact type and value, a float also by its sign), a dict key.
  Two calls with one skeleton bind to ``forward`` alike and lay their tensors out alike, so whether they lie in a
  proved domain depends only on their sizes.
* :func:`compile_size_check`: the size constraints of a :class:`lnbook.folding.tracing.ShapeDomain` for one
  skeleton, compiled into a list of integer comparisons (fixed sizes, equal symbols, polynomial expressions in
  them, the traced ranges and sizes of 1): ``ShapeDomain.values`` without the binding, the tree walks or sympy.

Tests: ``tests/folding/test_fast_guards.py``.
"""

from __future__ import annotations

import copy
import math
import operator

import sympy as sp
import torch
from torch import nn
from torch.utils import _pytree as pytree

__all__ = ["IdentityWatch", "NotFast", "autocast_state", "call_skeleton", "compile_size_check", "watch_configuration", "watch_model_state",
           "watch_weights_and_hooks"]


class NotFast(Exception):
    """A shortcut cannot answer for this call or this state: the full check runs."""


_IMMUTABLE = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)
_DTYPE = operator.attrgetter("dtype")
_VERSION = operator.attrgetter("_version")
_DATA_PTR = torch.Tensor.data_ptr


def _immutable(value) -> bool:
    """A value that cannot change without being replaced (then its identity changes)."""
    if type(value) in _IMMUTABLE:
        return True
    return type(value) is tuple and all(_immutable(v) for v in value)


def _equal(a, b) -> bool:
    result = a == b
    return result if type(result) is bool else False


class IdentityWatch:
    """The objects a full check read, by identity; :meth:`holds` says whether they are all still the same.

    Built by :meth:`mapping` (every entry, or the named entries, of a dictionary), :meth:`typed` (an object's class),
    :meth:`tensor` (a tensor's dtype, storage and version counter), :meth:`deep` (a mutable value against a deep
    copy, compared with ``==`` as the full check compares it) and :meth:`probe` (a value read again by a
    function). :meth:`holds` is a handful of C-level passes over flat lists: no Python loop per entry.
    """

    def __init__(self):
        self._sized, self._sizes = [], []  # mappings watched whole: their lengths
        self._mappings, self._keys, self._values = [], [], []  # one watched entry each, flat
        self._absent_from, self._absent = [], []  # keys absent from mappings
        self._objects, self._types = [], []
        self._tensors, self._dtypes, self._pointers = [], [], []
        self._versioned, self._versions = [], []
        self._deep_values, self._deep_copies = [], []
        self._probes, self._probed = [], []

    def mapping(self, mapping, keys=None) -> "IdentityWatch":
        """Watch entries of ``mapping`` by identity: all of them (``keys=None``: then its length too, so that an entry
        added is seen; one removed fails the lookup) or the named ones (each must be present now)."""
        if keys is None:
            self.length(mapping)
            keys = list(mapping)
        for key in keys:
            self._mappings.append(mapping)
            self._keys.append(key)
            self._values.append(mapping[key])
        return self

    def length(self, mapping) -> "IdentityWatch":
        """Watch the length of ``mapping`` (an entry added or removed)."""
        self._sized.append(mapping)
        self._sizes.append(len(mapping))
        return self

    def absent(self, mapping, key) -> "IdentityWatch":
        """Watch ``key`` to stay absent from ``mapping``."""
        if key in mapping:
            raise NotFast(f"{key!r} is present")
        self._absent_from.append(mapping)
        self._absent.append(key)
        return self

    def typed(self, obj) -> "IdentityWatch":
        self._objects.append(obj)
        self._types.append(type(obj))
        return self

    def tensor(self, t: torch.Tensor) -> "IdentityWatch":
        """Watch a tensor's dtype, its data pointer (a conversion to another dtype or device, or ``.data = ...``,
        gives it new storage) and, unless it is an inference tensor (which has none), its version counter (an
        in-place write through autograd-visible operations)."""
        self._tensors.append(t)
        self._dtypes.append(t.dtype)
        self._pointers.append(t.data_ptr())
        if not t.is_inference():
            self._versioned.append(t)
            self._versions.append(t._version)
        return self

    def deep(self, value) -> "IdentityWatch":
        """Watch a mutable value (a list or dict of a configuration) against a deep copy, compared by ``==``."""
        try:
            snapshot = copy.deepcopy(value)
            same = _equal(value, snapshot)
        except Exception as err:  # noqa: BLE001 - a value that cannot be copied or compared is not watched fast
            raise NotFast(f"a {type(value).__name__} cannot be compared with a copy of itself") from err
        if not same:
            raise NotFast(f"a {type(value).__name__} does not equal a copy of itself")
        self._deep_values.append(value)
        self._deep_copies.append(snapshot)
        return self

    def probe(self, read, expected) -> "IdentityWatch":
        """Watch ``read()`` (a function of no argument) to stay ``expected`` (by identity)."""
        self._probes.append(read)
        self._probed.append(expected)
        return self

    def holds(self) -> bool:
        """Are all the watched objects the same as when they were recorded?"""
        try:
            return (list(map(len, self._sized)) == self._sizes
                    and all(map(operator.is_, map(operator.getitem, self._mappings, self._keys), self._values))
                    and not any(map(operator.contains, self._absent_from, self._absent))
                    and all(map(operator.is_, map(type, self._objects), self._types))
                    and all(map(operator.is_, map(_DTYPE, self._tensors), self._dtypes))
                    and list(map(_DATA_PTR, self._tensors)) == self._pointers
                    and list(map(_VERSION, self._versioned)) == self._versions
                    and all(map(operator.is_, (read() for read in self._probes), self._probed))
                    and all(map(_equal, self._deep_values, self._deep_copies)))
        except Exception:  # noqa: BLE001 - a read that fails (a key removed, a tensor turned into an inference tensor)
            return False


def watch_configuration(watch: IdentityWatch, config) -> None:
    """Watch what ``config.to_dict()`` reads: the configuration's class and class dictionaries, every entry of its
    ``__dict__``, each mutable value against a deep copy, and nested configurations alike."""
    watch.typed(config)
    for cls in type(config).__mro__[:-1]:  # not object's
        watch.mapping(vars(cls))
    entries = vars(config)
    watch.mapping(entries)
    for value in list(entries.values()):
        if _immutable(value):
            continue
        if callable(getattr(value, "to_dict", None)) and hasattr(value, "__dict__") and not isinstance(value, type):
            watch_configuration(watch, value)  # a nested configuration (to_dict recurses into it)
        else:
            watch.deep(value)


def call_skeleton(args: tuple, kwargs: dict, tensors: list):
    """The call's key without its tensors' sizes, appending its tensors to ``tensors`` in a fixed order.

    The key holds the number of positional arguments, the keyword names in order, and per argument: for a tensor its
    rank, dtype, device type, layout, whether it requires grad and whether it is contiguous; for ``None``, a ``bool``, ``int``, ``str`` its exact type and value, for a
    ``float`` also its sign (``0.0`` and ``-0.0`` are other constants of a trace); for a container or another pytree
    node (a ``transformers`` cache) its type, its flattening context and the keys of its children. Raises
    :class:`NotFast` for any other leaf (an object whose ``==`` the key cannot stand for) or a node type that is
    registered under another key than its class (a named tuple)."""
    return (len(args), tuple(_leaf_key(a, tensors) for a in args),
            tuple((name, _leaf_key(v, tensors)) for name, v in kwargs.items()))


def _leaf_key(value, tensors: list):
    kind = type(value)
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return (torch.Tensor, value.dim(), value.dtype, value.device.type, value.layout, value.requires_grad,
                value.is_contiguous())
    if kind is float:
        return (float, value, math.copysign(1.0, value))
    if kind in (type(None), bool, int, str):
        return (kind, value)
    node = pytree.SUPPORTED_NODES.get(kind)
    if node is None:
        raise NotFast(f"an argument of type {kind.__name__}")
    children, context = node.flatten_fn(value)
    return (kind, _frozen(context), tuple(_leaf_key(c, tensors) for c in children))


def _frozen(context):
    """A hashable stand-in for a pytree context whose equality implies the context's."""
    kind = type(context)
    if kind is float:
        return (float, context, math.copysign(1.0, context))
    if kind in (type(None), bool, int, str):
        return (kind, context)
    if kind in (list, tuple):
        return (kind, tuple(_frozen(c) for c in context))
    if kind is dict:
        return (dict, tuple((_frozen(k), _frozen(v)) for k, v in context.items()))
    raise NotFast(f"a pytree context of type {kind.__name__}")


def _polynomial(expr, symbols: set):
    """``expr`` (a sympy expression) as a function of ``env`` (symbol -> int) in exact integer arithmetic, or
    :class:`NotFast` when it is not a polynomial with integer coefficients in ``symbols``."""
    if isinstance(expr, sp.Integer):
        value = int(expr)
        return lambda env: value
    if isinstance(expr, sp.Symbol):
        if expr not in symbols:
            raise NotFast(f"{expr} is bound by no input dimension")
        return lambda env: env[expr]
    if isinstance(expr, sp.Add):
        terms = [_polynomial(a, symbols) for a in expr.args]
        return lambda env: sum(t(env) for t in terms)
    if isinstance(expr, sp.Mul):
        factors = [_polynomial(a, symbols) for a in expr.args]
        return lambda env: math.prod(f(env) for f in factors)
    if isinstance(expr, sp.Pow) and isinstance(expr.exp, sp.Integer) and int(expr.exp) >= 0:
        base, exp = _polynomial(expr.base, symbols), int(expr.exp)
        return lambda env: base(env) ** exp
    raise NotFast(f"the size {expr} is not a polynomial with integer coefficients")


def compile_size_check(domain, laid: tuple[tuple, dict], tensors: list):
    """``domain.sizes(*laid)`` for every call of this skeleton, as a function of the call's tensors.

    ``laid`` is a call laid out as the traced call (``CallSpec.match``), ``tensors`` the same call's tensors in
    :func:`call_skeleton`'s order. Returns a function of such a list that is ``True`` exactly when
    ``domain.sizes`` returns symbol values for the call, or ``None`` when no call of this skeleton lies in the
    domain (other tensor arguments, another rank, dtype, device or layout: all fixed by the skeleton). Raises
    :class:`NotFast` when a laid-out tensor is not found once among ``tensors`` or a size is not a polynomial."""
    from lnbook.folding.tracing import _leaves, tensor_kind

    leaves = {path: t for path, t in _leaves(*laid) if isinstance(t, torch.Tensor)}
    if set(leaves) != {path for path, _ in domain.inputs}:
        return None
    for path, kind in domain.kinds:
        if tensor_kind(leaves[path]) != kind:
            return None
    index: dict[int, int] = {}
    for i, t in enumerate(tensors):
        if id(t) in index:
            raise NotFast("one tensor is passed twice")
        index[id(t)] = i
    where = {}
    for path, t in leaves.items():
        if id(t) not in index:
            raise NotFast(f"{path} is not among the call's tensors")
        where[path] = index[id(t)]
    binds, bound = [], set()
    for path, dims in domain.inputs:
        if leaves[path].dim() != len(dims):
            return None
        for i, d in enumerate(dims):
            if isinstance(d, sp.Symbol) and d not in bound:
                bound.add(d)
                binds.append((where[path], i, d))
    checks = []
    for path, dims in domain.inputs:
        for i, d in enumerate(dims):
            if isinstance(d, int):
                checks.append((where[path], i, lambda env, d=d: d))
            else:
                checks.append((where[path], i, _polynomial(sp.sympify(d), bound)))
    # the strides (ShapeDomain.bind_strides): a stride symbol takes the call's stride, and every stride of a dimension
    # of size 2 or more must be the trace's
    stride_binds, stride_checks = [], []
    for path, strides in getattr(domain, "strides", ()):
        for i, d in enumerate(strides):
            if isinstance(d, sp.Symbol) and d not in bound:
                bound.add(d)
                stride_binds.append((where[path], i, d))
    for path, strides in getattr(domain, "strides", ()):
        for i, d in enumerate(strides):
            stride_checks.append((where[path], i, (lambda env, d=d: d) if isinstance(d, int) else _polynomial(sp.sympify(d), bound)))
    ranges = [(s, lo, hi) for s, lo, hi in domain.ranges if s in bound]
    conditions = bool(getattr(domain, "conditions", ()))  # the export's other guards (ShapeDomain.violated)
    order = [d for _, _, d in binds] + [d for _, _, d in stride_binds]
    decided: dict[tuple, bool] = {}  # sizes -> whether every condition holds, each evaluated once

    def inside(call_tensors: list) -> bool:
        shapes = [t.shape for t in call_tensors]
        env = {d: shapes[t][i] for t, i, d in binds}
        for t, i, want in checks:
            if shapes[t][i] != want(env):
                return False
        if stride_checks:
            strides = [t.stride() for t in call_tensors]
            for t, i, d in stride_binds:
                env[d] = strides[t][i]
            for t, i, want in stride_checks:
                if shapes[t][i] >= 2 and strides[t][i] != want(env):
                    return False
        for s, lo, hi in ranges:
            n = env[s]
            if n < lo or (hi is not None and n > hi):  # a size of 1 where the trace had 2 or more is below lo
                return False
        if conditions:
            key = tuple(env[d] for d in order)
            holds = decided.get(key)
            if holds is None:
                if len(decided) >= 4096:
                    decided.clear()
                holds = decided[key] = not domain.violated(env)
            return holds
        return True

    return inside


def watch_model_state(watch: IdentityWatch, model: nn.Module, ignored: frozenset) -> None:
    """Watch what :func:`lnbook.folding.call_proofs.call_state` reads: the module tree (every module's
    ``_modules``), every module's ``__dict__`` (the entries but ``ignored``, the keys that the state leaves out, and
    its length), the configuration ``getattr(model, "config")`` resolves to and what
    its ``to_dict`` reads (:func:`watch_configuration`), the grad and inference modes and the autocast state."""
    for module in model.modules():
        entries = vars(module)
        watch.mapping(module._modules)
        watch.mapping(entries, ["_modules"] + [k for k in entries if k not in ignored])
        watch.length(entries)  # an attribute added is seen by the length
    config = getattr(model, "config", None)
    watch.probe(lambda: getattr(model, "config", None), config)
    if callable(getattr(config, "to_dict", None)):
        watch_configuration(watch, config)
    modes = (torch.is_grad_enabled(), torch.is_inference_mode_enabled())
    watch.probe(lambda: _MODES[(torch.is_grad_enabled(), torch.is_inference_mode_enabled())], _MODES[modes])
    watch.probe(lambda: _interned(autocast_state()), _interned(autocast_state()))


def _autocast_devices() -> tuple[str, ...]:
    """Every device type whose autocast state this torch can report (CPU, CUDA, XPU, MPS, HPU, ... and the private
    backend): a forward may branch on autocast for any of them (referee 25 of chapter 7, finding 2)."""
    names = ["cpu", "cuda", "xpu", "mps", "hpu", "mtia", "xla", "ipu", "maia", torch._C._get_privateuse1_backend_name()]
    out = []
    for name in dict.fromkeys(names):
        try:
            torch.is_autocast_enabled(name)
            torch.get_autocast_dtype(name)
        except Exception:  # noqa: BLE001 - a device type this build does not know
            continue
        out.append(name)
    return tuple(out)


_AUTOCAST_DEVICES = _autocast_devices()


def autocast_state() -> tuple:
    """Whether ``torch.autocast`` is on, and in which dtype, for each of :data:`_AUTOCAST_DEVICES`:
    ``(("cpu", False, None), ("cuda", True, "torch.float16"), ...)`` (the dtype only where it is on). A forward may branch on
    ``torch.is_autocast_enabled()`` (an upcast path around a norm), and autocast changes what every eligible operation
    computes (referee 24 of chapter 7, finding 2: a folded model ran such a branch under autocast unproved)."""
    out = []
    for device in _AUTOCAST_DEVICES:
        on = bool(torch.is_autocast_enabled(device))
        out.append((device, on, str(torch.get_autocast_dtype(device)) if on else None))
    return tuple(out)


_MODES = {(g, i): (g, i) for g in (False, True) for i in (False, True)}  # one object per pair, for the identity probe
_INTERNED: dict = {}  # one object per autocast state, for the identity probe


def _interned(value):
    return _INTERNED.setdefault(value, value)


def watch_weights_and_hooks(watch: IdentityWatch, modules) -> None:
    """Watch what :meth:`lnbook.folding.call_proofs.RefuseChangesSinceFolding._change` reads of ``modules`` (the
    modules it recorded): every module's
    ``_modules``, ``_parameters`` and forward hook and pre-hook dictionaries (all their entries), its instance
    ``forward`` and the ``__dict__`` entries that hold those dictionaries, its class, every parameter's version,
    dtype and device, and the global forward hooks and pre-hooks."""
    for module in modules:
        watch.typed(module)
        entries = vars(module)
        watch.mapping(entries, ["_modules", "_parameters", "_forward_pre_hooks", "_forward_hooks"])
        if "forward" in entries:
            watch.mapping(entries, ["forward"])
        else:
            watch.absent(entries, "forward")
        watch.mapping(module._modules).mapping(module._parameters)
        watch.mapping(module._forward_pre_hooks).mapping(module._forward_hooks)
        for p in module._parameters.values():
            if p is not None:
                watch.tensor(p)
    watch.mapping(nn.modules.module._global_forward_pre_hooks).mapping(nn.modules.module._global_forward_hooks)
    globals_ = vars(nn.modules.module)
    watch.mapping(globals_, ["_global_forward_pre_hooks", "_global_forward_hooks"])
