r"""Which tensors of a traced model are zero-mean over their features, and which writers may be centred.

This module is the graph analysis behind :mod:`lnbook.folding.fold` (chapter 7). A model is traced with
``torch.export`` (:func:`trace_model`) into a graph of ATen operations; :class:`ZeroMeanAnalysis`
then answers two questions about it, both along one dimension ``dim`` of a tensor (a negative
index; ``-1`` is the feature dimension that a LayerNorm normalises):

* **mean-blind** (:meth:`ZeroMeanAnalysis.mean_blind`): adding any vector ``c * 1`` along ``dim``
  to this tensor (``c`` may differ from row to row and depend on the input) changes no output of
  the model. True when every path from the tensor to an output goes through a LayerNorm input, with
  only shift-transparent operations on the way (sums, scalar multiples, reshapes that keep ``dim``
  whole, concatenation and slicing along other dimensions, dropout in eval mode).
* **zero-mean after centring** (:meth:`ZeroMeanAnalysis.zero_mean`): once every mean-blind
  *writer* is centred, the tensor has zero mean along ``dim`` for every input. Writers are linear
  layers, convolutions (over their output channels), embeddings (their rows) and parameters used
  directly; zero mean then propagates through sums, scalar multiples, token mixing (attention,
  matrix products whose right factor is zero-mean), reshapes, concatenation and slicing along other
  dimensions, and dropout in eval mode. Everything else is "not zero-mean", with a reason that names
  the node and the module it came from.

Unknown operations are never assumed to preserve anything: the analysis is sound (a tensor it calls
zero-mean is zero-mean in exact arithmetic), not complete.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch
from torch import nn
from torch.fx import Node

__all__ = ["UntraceableModelError", "Writer", "ZeroMeanAnalysis", "trace_model", "describe_node"]

aten = torch.ops.aten

_SUMS = {aten.add, aten.sub}
_IDENTITIES = {aten.clone, aten.alias, aten.contiguous, aten.detach, aten._to_copy, aten.to, aten.lift_fresh_copy}
_VIEWS = {aten.view, aten.reshape, aten._unsafe_view, aten.flatten, aten.unflatten, aten.unsqueeze, aten.squeeze}
_PERMUTES = {aten.transpose, aten.permute, aten.t}
_SPLITS = {aten.split, aten.split_with_sizes, aten.chunk, aten.unbind}
_CONVS = {aten.conv1d, aten.conv2d, aten.conv3d, aten.convolution}
_ELEMENTWISE_NONLINEAR = {
    aten.relu, aten.gelu, aten.silu, aten.tanh, aten.sigmoid, aten.elu, aten.leaky_relu, aten.softplus,
    aten.hardtanh, aten.mish, aten.exp, aten.abs, aten.pow, aten.sqrt, aten.rsqrt, aten.log,
}


class UntraceableModelError(ValueError):
    """``torch.export`` could not trace the model; the message names the module where it failed."""


def trace_model(model: nn.Module, example_inputs, example_kwargs: dict | None = None, *, training: bool = False):
    """Trace ``model`` on the example inputs with ``torch.export`` (non-strict) and return the program.

    ``example_inputs`` is one tensor or a tuple of positional arguments; ``example_kwargs`` keyword
    arguments (e.g. a Hugging Face model's ``attention_mask``). The model is traced in eval mode
    unless ``training=True`` (its mode is restored afterwards), with PyTorch's fused
    ``nn.MultiheadAttention`` fast path switched off so that attention is traced op by op.
    Raises :class:`UntraceableModelError` naming the innermost module that was running when tracing
    failed.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    kwargs = dict(example_kwargs or {})
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
    try:
        model.train(training)
        torch.backends.mha.set_fastpath_enabled(False)
        return torch.export.export(model, args, kwargs, strict=False)
    except Exception as err:  # noqa: BLE001 - every tracing failure becomes one clear error
        where = running[-1] if running else ""
        module = model.get_submodule(where) if where else model
        label = f"module '{where}' ({type(module).__name__})" if where else f"the top-level {type(model).__name__}"
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UntraceableModelError(
            f"cannot trace {type(model).__name__} with torch.export: it failed inside {label}: "
            f"{type(err).__name__}: {first}. Make that module traceable (no Python branching on tensor "
            "values, such as `if bool(x.isnan().any())` input checks), or analyse a model without it."
        ) from err
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
        torch.backends.mha.set_fastpath_enabled(fastpath)


# --- small helpers on graph nodes


def _packet(node: Node):
    return getattr(node.target, "overloadpacket", None) if node.op == "call_function" else None


def _val(node):
    return node.meta.get("val") if isinstance(node, Node) else None


def _is_tensor(node) -> bool:
    return isinstance(_val(node), torch.Tensor)


def _rank(node) -> int:
    return _val(node).dim()


def _shape(node) -> tuple[int, ...]:
    return tuple(int(s) for s in _val(node).shape)


def _arg(node: Node, index: int, name: str, default=None):
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _module_of(node: Node) -> tuple[str, str] | None:
    """``(qualified name, class path)`` of the innermost module that produced ``node``."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return None
    name, cls = list(stack.values())[-1]
    return name, cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))


def describe_node(node: Node) -> str:
    """``aten.gelu at blocks.0.mlp.1``: the operation and the module it came from."""
    if node.op == "placeholder":
        return f"input '{node.name}'"
    packet = _packet(node)
    op = f"aten.{packet.__name__}" if packet is not None else getattr(node.target, "__name__", str(node.target))
    module = _module_of(node)
    return f"{op} at {module[0] or 'the top-level model'}" if module else op


def _neg(dim: int, rank: int) -> int:
    return dim - rank if dim >= 0 else dim


def _view_map(src: tuple[int, ...], dst: tuple[int, ...], dim: int) -> int | None:
    """The dimension of ``dst`` that a row-major reshape of ``src`` maps dimension ``dim`` onto.

    Dimension ``k`` of ``src`` maps onto ``j`` of ``dst`` exactly when the sizes before them have
    the same product and ``src[k] == dst[j]`` (then every fibre along ``k`` is a fibre along ``j``).
    Returns a negative index, or ``None`` when the reshape splits or merges the dimension.
    """
    k = dim % len(src)
    if src[k] < 2:
        return None
    before = math.prod(src[:k])
    for j in range(len(dst)):
        if math.prod(dst[:j]) == before and dst[j] == src[k]:
            return j - len(dst)
    return None


def _permute_map(node: Node, dim: int, forward: bool) -> int | None:
    packet = _packet(node)
    rank = _rank(node)
    if packet is aten.t:
        order = [1, 0][:rank]
    elif packet is aten.transpose:
        a, b = _arg(node, 1, "dim0") % rank, _arg(node, 2, "dim1") % rank
        order = list(range(rank))
        order[a], order[b] = order[b], order[a]
    else:
        order = [d % rank for d in _arg(node, 1, "dims")]
    k = dim % rank
    mapped = order.index(k) if forward else order[k]
    return mapped - rank


def _shape_map(node: Node, dim: int, forward: bool) -> int | None:
    """Map ``dim`` of the input of a reshape/permute/expand node to its output (``forward``) or back."""
    src = node.args[0]
    packet = _packet(node)
    if packet in _PERMUTES:
        return _permute_map(node, dim, forward)
    if packet is aten.expand:
        in_rank, out_rank = _rank(src), _rank(node)
        return dim if forward or -dim <= in_rank else None
    a, b = (_shape(src), _shape(node)) if forward else (_shape(node), _shape(src))
    return _view_map(a, b, dim)


def _dropout_is_identity(node: Node) -> bool:
    return not bool(_arg(node, 2, "train", False)) or float(_arg(node, 1, "p", 0.0)) == 0.0


def _is_row_scalar(operand, dim: int) -> bool:
    """A number, or a tensor that is constant along ``dim`` after broadcasting (size 1 or absent)."""
    if isinstance(operand, (int, float)) and not isinstance(operand, bool):
        return True
    if not _is_tensor(operand):
        return False
    shape = _shape(operand)
    return -dim > len(shape) or shape[dim] == 1


@dataclass(frozen=True)
class Writer:
    """A node whose output can be centred by centring its own parameters.

    ``params`` lists ``(qualified name, axis)``: centring subtracts each parameter's mean along
    ``axis`` (a linear layer's weight of shape ``(out, in)`` along 0, its bias along 0; an
    embedding table along 1; a parameter used directly along its last axis). Afterwards the node's
    output has zero mean along ``out_dim``.
    """

    node: str
    kind: str
    module: str
    params: tuple[tuple[str, int], ...]
    out_dim: int
    centrable: bool
    already_centred: bool
    reason: str

    @property
    def label(self) -> str:
        return self.module or self.params[0][0]


class ZeroMeanAnalysis:
    """The two analyses of the module docstring on one exported program of ``model``."""

    def __init__(self, program, model: nn.Module):
        self.program = program
        self.graph = program.graph
        sig = program.graph_signature
        self.param_of: dict[str, str] = {**sig.inputs_to_parameters, **sig.inputs_to_buffers}
        self.user_inputs = set(sig.user_inputs)
        self.state = {**dict(model.named_parameters(remove_duplicate=False)), **dict(model.named_buffers(remove_duplicate=False))}
        self.nodes = {n.name: n for n in self.graph.nodes}
        self._blind: dict[tuple[str, int], tuple[bool, str]] = {}
        self._zero: dict[tuple[str, int], tuple[bool, str, frozenset]] = {}
        self.writers: dict[str, Writer] = {}
        self._writer_at: dict[tuple[str, int], str] = {}
        self._find_writers()

    # --- parameters

    def value(self, node) -> torch.Tensor | None:
        """The current value of a parameter or buffer placeholder (``None`` for anything else)."""
        if isinstance(node, Node) and node.op == "placeholder" and node.name in self.param_of:
            value = self.state.get(self.param_of[node.name])
            return None if value is None else value.detach()
        return None

    def _is_state(self, node) -> bool:
        return self.value(node) is not None

    def _centred_already(self, params: tuple[tuple[str, int], ...]) -> bool:
        for name, axis in params:
            p = self.state[name].detach()
            scale = float(p.abs().max()) if p.numel() else 0.0
            tol = 8 * torch.finfo(p.dtype).eps * max(scale, 1e-30) if p.is_floating_point() else 0.0
            if not p.is_floating_point() or float(p.double().mean(dim=axis).abs().max()) > tol:
                return False
        return True

    # --- writers

    def _writer_params(self, node: Node):
        """``(kind, params, out_dim)`` if ``node`` is a writer candidate, else ``None``."""
        packet = _packet(node)
        if packet is aten.linear:
            weight, bias = node.args[1], _arg(node, 2, "bias")
            return "linear", [(weight, 0)] + ([(bias, 0)] if bias is not None else []), -1
        if packet in _CONVS:
            if packet is aten.convolution and bool(_arg(node, 6, "transposed", False)):
                return None
            weight, bias = node.args[1], _arg(node, 2, "bias")
            channel = 1 if _rank(node) == _rank(weight) else 0
            return "conv", [(weight, 0)] + ([(bias, 0)] if bias is not None else []), channel - _rank(node)
        if packet is aten.embedding:
            return "embedding", [(node.args[0], 1)], -1
        return None

    def _find_writers(self) -> None:
        weight_uses: dict[str, int] = {}
        for node in self.graph.nodes:
            spec = self._writer_params(node)
            if spec is None:
                continue
            kind, params, out_dim = spec
            module = _module_of(node)
            reason = ""
            for p, _ in params:
                if not self._is_state(p):
                    reason = f"its {kind} weights are computed in the forward pass, not stored parameters"
                    break
                weight_uses[p.name] = weight_uses.get(p.name, 0) + 1
                others = [u for u in p.users if u is not node]
                if others:
                    reason = f"parameter '{self.param_of[p.name]}' is also read by {describe_node(others[0])} (shared or tied weights)"
                    break
            if not reason:
                ok, why = self.mean_blind(node, out_dim)
                reason = "" if ok else why
            named = tuple((self.param_of[p.name], axis) for p, axis in params if self._is_state(p))
            self._add_writer(node, kind, module[0] if module else "", named, out_dim, reason)
        for node in self.graph.nodes:  # parameters used directly (position embeddings, class tokens)
            if not self._is_state(node) or not node.users or not self.value(node).is_floating_point():
                continue
            if all(self._is_weight_use(node, u) for u in node.users):
                continue
            if self.value(node).dim() == 0:
                continue
            ok, why = self.mean_blind(node, -1)
            name = self.param_of[node.name]
            self._add_writer(node, "parameter", "", ((name, -1),), -1, "" if ok else why)

    def _is_weight_use(self, param: Node, user: Node) -> bool:
        """Is ``param`` the weight or bias of ``user`` (a writer or a norm), not an activation?"""
        if self._writer_params(user) is not None:
            return any(p is param for p, _ in self._writer_params(user)[1])
        norms = (aten.layer_norm, aten.rms_norm, aten.group_norm, aten.batch_norm, aten.instance_norm)
        return _packet(user) in norms and param not in user.args[:1]

    def _add_writer(self, node, kind, module, params, out_dim, reason):
        centrable = not reason and bool(params)
        already = bool(params) and self._centred_already(params)
        self.writers[node.name] = Writer(node.name, kind, module, params, out_dim, centrable, already, reason)
        self._writer_at[(node.name, out_dim)] = node.name

    # --- mean-blindness (backward)

    def mean_blind(self, node: Node, dim: int) -> tuple[bool, str]:
        """Is adding ``c * 1`` along ``dim`` to ``node`` invisible at every output? ``(answer, reason)``."""
        key = (node.name, dim)
        if key not in self._blind:
            self._blind[key] = (False, "cycle")
            result = (True, "")
            for user in node.users:
                ok, why = self._consumer_blind(node, dim, user)
                if not ok:
                    result = (False, why)
                    break
            self._blind[key] = result
        return self._blind[key]

    def _consumer_blind(self, v: Node, dim: int, u: Node) -> tuple[bool, str]:
        if u.op == "output":
            return False, "it is returned as an output of the model"
        packet = _packet(u)
        if packet is aten.layer_norm and u.args[0] is v and len(u.args[1]) == 1 and dim == -1:
            return True, ""  # LN(x + c 1) = LN(x)
        if packet in _SUMS and u.args[0] is not None and (u.args[0] is v or (len(u.args) > 1 and u.args[1] is v)):
            return self.mean_blind(u, dim)
        if packet in (aten.mul, aten.div):
            a, b = u.args[0], u.args[1] if len(u.args) > 1 else None
            other = b if a is v else a
            if other is not v and _is_row_scalar(other, dim) and not (packet is aten.div and b is v):
                return self.mean_blind(u, dim)
        if packet is aten.neg or packet in _IDENTITIES or (packet is aten.dropout and _dropout_is_identity(u)):
            if packet is not aten.neg and packet is not aten.dropout and not _val(u).is_floating_point():
                return False, f"read by {describe_node(u)}, which casts it to {_val(u).dtype}"
            return self.mean_blind(u, dim)
        if packet is aten.dropout:
            return False, f"read by {describe_node(u)} in training mode (dropout rescales features independently)"
        if packet in _VIEWS or packet in _PERMUTES or packet is aten.expand:
            mapped = _shape_map(u, dim, forward=True)
            if mapped is None:
                return False, f"read by {describe_node(u)}, which reshapes across the feature dimension"
            return self.mean_blind(u, mapped)
        if packet is aten.cat:
            if _neg(_arg(u, 1, "dim", 0), _rank(u)) == dim:
                return False, f"read by {describe_node(u)}, which concatenates along the feature dimension"
            return self.mean_blind(u, dim)
        if packet in (aten.slice, aten.select) and u.args[0] is v:
            along = _neg(_arg(u, 1, "dim", 0), _rank(v))
            if along == dim:
                return False, f"read by {describe_node(u)}, which slices the feature dimension"
            return self.mean_blind(u, dim if packet is aten.slice or along < dim else dim + 1)
        if packet in _SPLITS and u.args[0] is v:
            along = _neg(_arg(u, 2 if packet is not aten.unbind else 1, "dim", 0), _rank(v))
            if along == dim or any(g.target is not operator.getitem for g in u.users):
                return False, f"read by {describe_node(u)}, which splits the feature dimension"
            out = dim + 1 if packet is aten.unbind and along > dim else dim
            for g in u.users:
                ok, why = self.mean_blind(g, out)
                if not ok:
                    return ok, why
            return True, ""
        return False, f"read by {describe_node(u)} (not a LayerNorm input, a sum or a reshape)"

    # --- zero mean after centring (forward)

    def zero_mean(self, node, dim: int) -> tuple[bool, str, frozenset]:
        """Is ``node`` zero-mean along ``dim`` once the centrable writers are centred?

        Returns ``(answer, reason, writers)``: ``writers`` are the names of the writer nodes the
        answer relies on (the ones to centre), ``reason`` says why not when the answer is no.
        """
        if not isinstance(node, Node):
            if isinstance(node, (int, float)) and node == 0:
                return True, "", frozenset()
            return False, f"a constant {node!r} is added", frozenset()
        key = (node.name, dim)
        if key not in self._zero:
            self._zero[key] = (False, "cycle", frozenset())
            self._zero[key] = self._zero_mean(node, dim)
        return self._zero[key]

    def _all_zero(self, operands, dim):
        used = frozenset()
        for x in operands:
            ok, why, w = self.zero_mean(x, dim)
            if not ok:
                return False, why, frozenset()
            used |= w
        return True, "", used

    def _zero_mean(self, node: Node, dim: int) -> tuple[bool, str, frozenset]:
        no = frozenset()
        writer = self.writers.get(self._writer_at.get((node.name, dim), ""))
        if writer is not None:
            if writer.centrable:
                return True, "", frozenset([writer.node])
            if writer.already_centred:
                return True, "", no
            what = f"{writer.kind} '{writer.label}'"
            return False, f"the output of {what} is not zero-mean and cannot be centred: {writer.reason}", no
        if node.op == "placeholder":
            if node.name in self.user_inputs:
                return False, f"the model input '{node.name}' is not zero-mean by construction", no
            return False, f"'{self.param_of.get(node.name, node.name)}' is not zero-mean", no
        if node.op != "call_function":
            return False, f"{describe_node(node)} is not zero-mean", no
        packet = _packet(node)
        here = describe_node(node)
        if packet in _SUMS:
            operands = [node.args[0], node.args[1]]
            for x in operands:
                if _is_tensor(x) and -dim > _rank(x):
                    return False, f"{here} adds a tensor that is constant along the features", no
            return self._all_zero(operands, dim)
        if packet in (aten.mul, aten.div):
            a, b = node.args[0], node.args[1]
            pairs = [(a, b)] if packet is aten.div else [(a, b), (b, a)]
            for x, s in pairs:
                if _is_row_scalar(s, dim) and isinstance(x, Node):
                    return self.zero_mean(x, dim)
            return False, f"{here} multiplies by a per-feature factor", no
        if packet is aten.neg or packet in _IDENTITIES:
            return self.zero_mean(node.args[0], dim)
        if packet is aten.dropout:
            if _dropout_is_identity(node):
                return self.zero_mean(node.args[0], dim)
            return False, f"{here} is dropout in training mode (it rescales features independently)", no
        if packet in _VIEWS or packet in _PERMUTES or packet is aten.expand:
            mapped = _shape_map(node, dim, forward=False)
            if mapped is None:
                return False, f"{here} reshapes across the feature dimension", no
            return self.zero_mean(node.args[0], mapped)
        if packet is aten.cat:
            if _neg(_arg(node, 1, "dim", 0), _rank(node)) == dim:
                return False, f"{here} concatenates along the features", no
            return self._all_zero(node.args[0], dim)
        if packet is aten.slice:
            if _neg(_arg(node, 1, "dim", 0), _rank(node.args[0])) == dim:
                return False, f"{here} slices the features", no
            return self.zero_mean(node.args[0], dim)
        if packet is aten.select:  # the selected dimension is gone from the output
            along = _neg(_arg(node, 1, "dim", 0), _rank(node.args[0]))
            return self.zero_mean(node.args[0], dim - 1 if along >= dim else dim)
        if node.target is operator.getitem and isinstance(node.args[0], Node) and _packet(node.args[0]) in _SPLITS:
            split = node.args[0]
            src = split.args[0]
            if _packet(split) is aten.unbind:
                along = _neg(_arg(split, 1, "dim", 0), _rank(src))
                return self.zero_mean(src, dim - 1 if along >= dim else dim)
            if _neg(_arg(split, 2, "dim", 0), _rank(src)) == dim:
                return False, f"{describe_node(split)} splits the features", no
            return self.zero_mean(src, dim)
        if packet is aten.scaled_dot_product_attention and dim == -1:
            return self.zero_mean(node.args[2], -1)  # each output row is a weighted sum of value rows
        if packet in (aten.matmul, aten.bmm, aten.mm) and dim == -1:
            return self.zero_mean(node.args[1], -1)
        if packet in (aten.layer_norm, aten.rms_norm) and dim == -1:
            return self._norm_output(node, packet)
        kind = " (an elementwise nonlinearity)" if packet in _ELEMENTWISE_NONLINEAR else ""
        return False, f"the output of {here}{kind} is not zero-mean", no

    def _norm_output(self, node: Node, packet) -> tuple[bool, str, frozenset]:
        no = frozenset()
        here = describe_node(node)
        if len(node.args[1]) != 1:
            return False, f"{here} normalises several dimensions", no
        weight = _arg(node, 2, "weight")
        bias = _arg(node, 3, "bias") if packet is aten.layer_norm else None
        w = self.value(weight) if weight is not None else None
        if weight is not None and (w is None or bool((w != w.reshape(-1)[0]).any())):
            return False, f"the output of {here} has a per-feature gain, so its mean varies with the input", no
        if bias is not None:
            b = self.value(bias)
            if b is None or abs(float(b.double().mean())) > 8 * torch.finfo(b.dtype).eps * float(b.abs().max()):
                return False, f"the output of {here} has a bias that is not centred", no
        if packet is aten.layer_norm:
            return True, "", no
        return self.zero_mean(node.args[0], -1)
