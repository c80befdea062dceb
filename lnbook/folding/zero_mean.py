r"""Which tensors of a traced model are zero-mean over their features, and which writers may be centred.

This module is the graph analysis behind :mod:`lnbook.folding.fold` (chapter 7). A model is traced with
``torch.export`` over dynamic shapes (:func:`lnbook.folding.tracing.trace_model`) into a graph of ATen
operations; :class:`ZeroMeanAnalysis` then answers two questions about it, both along one axis ``dim``
of a tensor (a negative index; ``-1`` is the feature axis that a LayerNorm normalises):

* **mean-blind** (:meth:`ZeroMeanAnalysis.mean_blind`): adding any vector ``c * 1`` along ``dim`` to
  this tensor (``c`` may differ from fibre to fibre and depend on the input) changes no output of the
  model. True when every reader is the input of a LayerNorm over that axis, a node that reads only
  metadata (``aten._assert_tensor_metadata``, ``aten.sym_size``), or an operation of the rule table
  (:mod:`lnbook.folding.op_rules`) that is linear in this tensor along the axis and whose output is
  mean-blind along the image axis.
* **zero-mean after centring** (:meth:`ZeroMeanAnalysis.zero_mean`): once every mean-blind *writer*
  is centred, the tensor has zero mean along ``dim`` for every input in the traced shape domain.
  Writers are linear layers (``aten.linear``, ``aten.addmm`` and products with a stored right factor or its transpose ``x @ w.T``),
  dense convolutions (``groups == 1``, over their output channels), embeddings (their rows) and
  parameters or registered buffers used directly. Their stored tensors (parameters or buffers) are
  what centring changes, so a writer that reads a *non-persistent* buffer (``persistent=False``, not in
  ``state_dict()``) or a buffer the forward pass writes is refused: its centring would not survive a
  reload or the next forward pass. Zero mean then propagates through the rule table, and through LayerNorm
  without a per-feature gain and with a centred bias. What a yes takes as centred only up to rounding (writers that
  are already centred and cannot be centred, LayerNorm biases) is :meth:`ZeroMeanAnalysis.relied_on`.

Everything without a rule is "not known to be zero-mean", with a reason that names the node and the
module it came from. A tensor that an in-place operation mutates (directly, or through any tensor that may share
its memory by the schemas' alias annotations or an operation not known to allocate its result) gets no
verdict at all, unless the operation is read as its functional twin (``x.add_(y)`` as ``x + y``, when no other
node sees the write: :func:`lnbook.folding.op_rules.inplace_refusal`). The analysis is sound (a tensor it calls zero-mean is zero-mean in exact arithmetic on
the traced shape domain), not complete.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.fx import Node

from lnbook.folding.op_rules import (
    IDENTITY_OPS,
    NO_OP_READERS,
    SPLIT_OPS,
    INPLACE_OPS,
    RULE_OPS,
    inplace_refusal,
    is_tensor,
    may_alias_operands,
    linear_inputs,
    op_name,
    rank,
    same_size,
    size,
)
from lnbook.folding.tracing import UntraceableModelError, trace_model

__all__ = ["UntraceableModelError", "Writer", "ZeroMeanAnalysis", "trace_model", "describe_node", "NORM_OPS",
           "centred_within_rounding", "bias_centred_within_rounding", "DISTINGUISHABLE"]

CONV_OPS = {"aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default", "aten.conv1d.padding",
            "aten.conv2d.padding", "aten.conv3d.padding", "aten.convolution.default"}
NORM_OPS = {"aten.layer_norm.default", "aten.rms_norm.default", "aten.group_norm.default",
            "aten.batch_norm.default", "aten.instance_norm.default"}
_TRANSPOSES = {"aten.numpy_T.default", "aten.t.default", "aten.transpose.int", "aten.permute.default"}
_NONLINEAR = ("relu", "gelu", "silu", "tanh", "sigmoid", "elu", "leaky_relu", "softplus", "hardtanh", "mish",
              "exp", "abs", "pow", "sqrt", "rsqrt", "log", "sin", "cos")


def _renormalised(param: Node) -> bool:
    """Is ``param`` (or a detached alias of it) rescaled in place by ``aten.embedding_renorm_`` (max_norm)?"""
    seen, todo = set(), [param]
    while todo:
        n = todo.pop()
        for u in n.users:
            if op_name(u) == "aten.embedding_renorm_.default" and u.args[0] is n:
                return True
            if op_name(u) in ("aten.detach.default", "aten.alias.default") and u not in seen:
                seen.add(u)
                todo.append(u)
    return False


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
    """``aten.gelu.default at blocks.0.mlp.1``: the exact operation and the module it came from."""
    if node.op == "placeholder":
        return f"input '{node.name}'"
    op = op_name(node)
    module = _module_of(node)
    return f"{op} at {module[0] or 'the top-level model'}" if module else op


def _args_of(node: Node) -> list:
    out = []
    for a in list(node.args) + list(node.kwargs.values()):
        if isinstance(a, (list, tuple)):
            out.extend(a)
        else:
            out.append(a)
    return out


# in-place operations whose schema marks a write but which change no value: torch.export traces a constant made in
# forward (torch.tensor([...])) as lift_fresh_copy followed by detach_, which only cuts the autograd history
VALUE_PRESERVING_WRITES = frozenset({"aten.detach_.default"})


def _mutated(graph) -> dict[str, str]:
    """Names of the nodes whose value an in-place operation changes, directly or through memory they may share; an
    in-place operation that :func:`lnbook.folding.op_rules.inplace_refusal` reads as its functional twin changes none,
    and neither does one of :data:`VALUE_PRESERVING_WRITES` (``detach_``, which writes no value).

    Two nodes may share memory when one is an operand that the other may alias
    (:func:`lnbook.folding.op_rules.may_alias_operands`: the schema's alias annotations for a view, every tensor
    operand for an operation not known to allocate its result); a write into one node changes every node
    connected to it by such pairs (its base, the base's other views, and theirs), and each of them is marked."""
    direct: dict[str, str] = {}
    for node in graph.nodes:
        schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
        if schema is None or op_name(node) in VALUE_PRESERVING_WRITES:
            continue
        why = inplace_refusal(node) if op_name(node) in INPLACE_OPS else ""
        if op_name(node) in INPLACE_OPS and not why:
            continue
        for i, a in enumerate(schema.arguments):
            if a.alias_info is not None and a.alias_info.is_write:
                value = node.args[i] if i < len(node.args) else node.kwargs.get(a.name)
                for v in value if isinstance(value, (list, tuple)) else [value]:
                    if isinstance(v, Node):
                        direct[v.name] = describe_node(node) + (f" ({why})" if why else "")
    if not direct:
        return {}
    shares: dict[str, set[str]] = {}  # node -> the nodes it may share memory with, one step either way
    nodes = {n.name: n for n in graph.nodes}
    for n in graph.nodes:
        for base in may_alias_operands(n):
            shares.setdefault(n.name, set()).add(base.name)
            shares.setdefault(base.name, set()).add(n.name)
    out: dict[str, str] = {}
    for name, by in direct.items():
        todo = [name]
        while todo:
            n = todo.pop()
            if n in out:
                continue
            out[n] = by
            todo.extend(shares.get(n, ()))
    return {n: by for n, by in out.items() if n in nodes}


@dataclass(frozen=True)
class Writer:
    """A node whose output can be centred by centring its own stored tensors (parameters or buffers).

    ``params`` lists ``(qualified name, axis)`` of those tensors, parameters or registered buffers alike:
    centring subtracts each one's mean along ``axis`` (a linear layer's weight of shape ``(out, in)``
    along 0, its bias along 0; an addmm's right factor ``(in, out)`` along 1; an embedding table along 1;
    a parameter (``kind == "parameter"``) or buffer (``kind == "buffer"``) added directly along its last
    axis). A writer that reads a non-persistent buffer, or a buffer the forward pass writes, is not
    centrable (``reason`` says so): the centred value would be lost on ``load_state_dict`` of a fresh
    model, or overwritten. Afterwards the node's output has zero mean along ``out_dim``. ``already_centred``: every
    stored tensor is centred already, column by column up to its own rounding (:func:`centred_within_rounding`); it needs every
    weight the op reads to be such a stored parameter: a weight computed in the forward pass never is. Each column is
    judged against its own magnitude, so the means that several such writers keep can add up at a LayerNorm whose
    input is far smaller (large biases that cancel): a verdict that relies on them names them
    (:meth:`ZeroMeanAnalysis.relied_on`), and the fold's check measures their stored means.
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
        """The writer's module; at the top level, its first stored tensor, or "the top-level model" when it has none
        (a weight computed in forward and no bias: referee 17 of chapter 7, finding 4, an IndexError before)."""
        return self.module or (self.params[0][0] if self.params else "the top-level model")


class ZeroMeanAnalysis:
    """The two analyses of the module docstring on one exported program of ``model``."""

    def __init__(self, program, model: nn.Module):
        self.program = program
        self.graph = program.graph
        sig = program.graph_signature
        self.param_of: dict[str, str] = {**sig.inputs_to_parameters, **sig.inputs_to_buffers}
        self.user_inputs = set(sig.user_inputs)
        self.buffers = set(sig.inputs_to_buffers.values())
        self.non_persistent = set(sig.non_persistent_buffers) | {
            f"{prefix}.{b}" if prefix else b for prefix, m in model.named_modules() for b in m._non_persistent_buffers_set}
        self.written_buffers = set(sig.buffers_to_mutate.values())
        self.state = {**dict(model.named_parameters(remove_duplicate=False)), **dict(model.named_buffers(remove_duplicate=False))}
        self.nodes = {n.name: n for n in self.graph.nodes}
        self.mutated = _mutated(self.graph)
        self._blind: dict[tuple[str, int], tuple[bool, str]] = {}
        self._zero: dict[tuple[str, int], tuple[bool, str, frozenset, frozenset]] = {}
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

    def _unstable_buffer(self, node: Node) -> str:
        """Why centring the buffer behind ``node`` would not last ("" when it is a parameter or a
        persistent buffer that the forward pass does not write)."""
        name = self.param_of.get(node.name, "")
        if name in self.non_persistent:
            return (f"buffer '{name}' is not persistent (registered with persistent=False): it is not in state_dict(), "
                    "so its centred value would be lost when the folded model is saved and reloaded (or rebuilt by the "
                    "module); register it as a persistent buffer or a parameter")
        if name in self.written_buffers:
            return f"buffer '{name}' is written by the forward pass, which would overwrite its centred value"
        return ""

    def _centred_already(self, params: tuple[tuple[str, int], ...]) -> bool:
        return all(centred_within_rounding(self.state[name].detach(), axis) for name, axis in params)

    # --- writers

    def _writer_params(self, node: Node):
        """``(kind, params, out_dim)`` if ``node`` is a writer candidate, ``(None, reason)`` if it is a
        linear layer that is not a writer, else ``None``."""
        name = op_name(node)
        if name == "aten.linear.default":
            weight, bias = node.args[1], _arg(node, 2, "bias")
            return "linear", [(weight, 0)] + ([(bias, 0)] if bias is not None else []), -1
        if name in CONV_OPS:
            transposed = name == "aten.convolution.default" and bool(_arg(node, 6, "transposed", False))
            groups = _arg(node, 8 if name == "aten.convolution.default" else 6, "groups", 1)
            if transposed:
                return None, "a transposed convolution is not in the writer table"
            if groups != 1:
                return None, f"a grouped convolution (groups={groups}) mixes only the channels of its group"
            weight, bias = node.args[1], _arg(node, 2, "bias")
            channel = 1 if rank(node) == rank(weight) else 0
            return "conv", [(weight, 0)] + ([(bias, 0)] if bias is not None else []), channel - rank(node)
        if name == "aten.embedding.default":
            return "embedding", [(node.args[0], 1)], -1
        if name == "aten.addmm.default":
            bias, right = node.args[0], node.args[2]
            if _arg(node, 3, "beta", 1) != 1 or _arg(node, 4, "alpha", 1) != 1:
                return None, "an addmm with beta or alpha other than 1"
            if not is_tensor(bias) or rank(bias) != 1:
                return None, "an addmm whose bias is not a vector"
            return "linear", [(right, 1), (bias, 0)], -1
        if name in ("aten.mm.default", "aten.matmul.default") and self._transposed_state(node.args[1]) is not None:
            if self._is_state(node.args[0]):
                return None, "a product of two stored matrices"
            return "linear", [(self._transposed_state(node.args[1]), 0)], -1  # x @ w.T: w is (out, in), as in F.linear
        if name in ("aten.mm.default", "aten.matmul.default") and self._is_state(node.args[1]):
            if rank(node.args[1]) != 2:
                return None, f"a matrix-vector product contracts the axis (its right factor has rank {rank(node.args[1])})"
            if self._is_state(node.args[0]):
                return None, "a product of two stored matrices"
            return "linear", [(node.args[1], 1)], -1
        return None

    def _transposed_state(self, node) -> Node | None:
        """The stored matrix ``w`` when ``node`` is its transpose (``w.T``, ``w.t()``, ``w.transpose(0, 1)``,
        ``w.permute(1, 0)``): a product ``x @ w.T`` is then a linear layer with weight ``w`` of shape (out, in)
        (Falcon's ``FalconLinear``). ``None`` otherwise."""
        if not isinstance(node, Node) or op_name(node) not in _TRANSPOSES:
            return None
        src = node.args[0]
        if not self._is_state(src) or rank(src) != 2:
            return None
        if op_name(node) == "aten.transpose.int" and sorted(d % 2 for d in node.args[1:3]) != [0, 1]:
            return None
        if op_name(node) == "aten.permute.default" and [d % 2 for d in node.args[1]] != [1, 0]:
            return None
        return src

    def _only_transposed_for(self, user: Node, writer: Node) -> bool:
        """Is ``user`` a transpose of a stored matrix that only ``writer`` reads (apart from metadata reads)?"""
        return self._transposed_state(user) is not None and all(
            u is writer or op_name(u) in NO_OP_READERS for u in user.users)

    def _find_writers(self) -> None:
        self.not_writers: dict[str, str] = {}
        for node in self.graph.nodes:
            spec = self._writer_params(node)
            if spec is None:
                continue
            if spec[0] is None:
                self.not_writers[node.name] = spec[1]
                continue
            kind, params, out_dim = spec
            module = _module_of(node)
            reason = ""
            for p, _ in params:
                if not self._is_state(p) or not self.value(p).is_floating_point():
                    reason = f"its {kind} weights are computed in the forward pass, not stored parameters"
                    break
                others = [u for u in p.users if u is not node and op_name(u) not in NO_OP_READERS
                          and not self._only_transposed_for(u, node)]
                if kind == "embedding" and _renormalised(p):
                    reason = (f"embedding '{module[0] if module else node.name}' has max_norm set: "
                              "aten.embedding_renorm_ rescales the rows it looks up, in place, by a factor that depends "
                              "on their norm, which centring changes; pass max_norm=None (or renormalise the weight "
                              "once beforehand)")
                    break
                if others:
                    reason = (f"parameter '{self.param_of[p.name]}' is also read by {describe_node(others[0])} (shared or tied "
                              "weights, or the same table looked up twice: a parameter is centred only when one "
                              "writer reads it; a second reader is not analysed, even when centring would be exact)")
                    break
                reason = self._unstable_buffer(p)
                if reason:
                    break
            if not reason:
                ok, why = self.mean_blind(node, out_dim)
                reason = "" if ok else why
            named = tuple((self.param_of[p.name], axis) for p, axis in params if self._is_state(p))
            # "already centred" is a statement about the weights the op reads: only when every one of them is
            # a stored parameter read directly (not weight_norm/spectral_norm or 2*w computed in the forward
            # pass) does the stored value say anything; a zero bias alone proves nothing.
            stored = len(named) == len(params)
            self._add_writer(node, kind, module[0] if module else "", named, out_dim, reason, stored)
        for node in self.graph.nodes:  # parameters and buffers used directly (position embeddings, class tokens)
            if not self._is_state(node) or not node.users or not self.value(node).is_floating_point():
                continue
            if self.value(node).dim() == 0 or all(self._is_weight_use(node, u) for u in node.users):
                continue
            kind = "buffer" if self.param_of[node.name] in self.buffers else "parameter"
            why = self._unstable_buffer(node)
            if not why:
                ok, why = self.mean_blind(node, -1)
                why = "" if ok else why
            self._add_writer(node, kind, "", ((self.param_of[node.name], -1),), -1, why)

    def _is_weight_use(self, param: Node, user: Node) -> bool:
        """Is ``param`` the weight or bias of ``user`` (a writer or a norm), not an activation?"""
        if self._transposed_state(user) is param:  # w.T read by products that are writers with weight w
            readers = [u for u in user.users if op_name(u) not in NO_OP_READERS]
            return bool(readers) and all(self._is_weight_use(param, u) for u in readers)
        spec = self._writer_params(user)
        if spec is not None and spec[0] is not None:
            return any(p is param for p, _ in spec[1])
        return op_name(user) in NORM_OPS and param not in user.args[:1]

    def _add_writer(self, node, kind, module, params, out_dim, reason, stored=True):
        centrable = not reason and bool(params)
        already = stored and bool(params) and self._centred_already(params)
        self.writers[node.name] = Writer(node.name, kind, module, params, out_dim, centrable, already, reason)
        self._writer_at[(node.name, out_dim)] = node.name

    # --- mean-blindness (backward)

    def mean_blind(self, node: Node, dim: int) -> tuple[bool, str]:
        """Is adding ``c * 1`` along ``dim`` to ``node`` invisible at every output? ``(answer, reason)``."""
        key = (node.name, dim)
        if key not in self._blind:
            self._blind[key] = (False, "cycle")
            result = (True, "")
            if node.name in self.mutated:
                result = (False, f"it is mutated in place by {self.mutated[node.name]}")
            for user in node.users:
                if not result[0]:
                    break
                result = self._consumer_blind(node, dim, user)
            self._blind[key] = result
        return self._blind[key]

    def _consumer_blind(self, v: Node, dim: int, u: Node) -> tuple[bool, str]:
        name = op_name(u)
        if u.op == "output":
            return False, "it is returned as an output of the model"
        if name in NO_OP_READERS:
            return True, ""
        if name == "aten.layer_norm.default":
            # LN(x + c 1) = LN(x) for a LayerNorm over the last axis alone, fed the stream as its input only;
            # each condition below is a separate refusal (tests/folding/test_op_rules.py, REFUSE catalogue).
            here = describe_node(u)
            if any(a is v for a in _args_of(u)[1:]):
                return False, f"read by {here} as its weight or bias, which a shift changes"
            if len(u.args[1]) != 1:
                return False, (f"read by {here}, which normalises {len(u.args[1])} dimensions together: it removes "
                               "one constant over all of them, not a separate shift in each row")
            if dim != -1:
                return False, (f"read by {here} along another axis: the shift is along axis {dim} of its input, "
                               "the LayerNorm removes a shift along the last axis only")
            return True, ""
        if name in SPLIT_OPS:
            if any(op_name(g) != "getitem" for g in u.users):
                return False, f"read by {describe_node(u)}, whose parts are not only indexed"
            for g in u.users:
                ok, why = self._carried(v, dim, g)
                if not ok:
                    return ok, why
            return True, ""
        return self._carried(v, dim, u)

    def _carried(self, v: Node, dim: int, u: Node) -> tuple[bool, str]:
        """Does ``u`` carry a shift of ``v`` along ``dim`` to a shift of its output, which is then blind?"""
        src = u.args[0] if op_name(u) == "getitem" else u
        occurrences = sum(1 for a in _args_of(src) if a is v)
        if not is_tensor(u):
            return False, f"read by {describe_node(u)} (not a LayerNorm input or a linear operation of the rule table)"
        last_reason, partly = "", False
        for out_dim in range(-rank(u), 0):
            form = linear_inputs(u, out_dim)
            if isinstance(form, str):
                last_reason = form if not last_reason or form != "no rule for this operation" else last_reason
                continue
            hits = [d for x, d in form if x is v]
            if hits and all(d == dim for d in hits) and len(hits) == occurrences:
                return self.mean_blind(u, out_dim)
            partly = partly or dim in hits
        if not last_reason and op_name(u) not in RULE_OPS | {"getitem"}:
            last_reason = "no rule for this operation"
        if not last_reason:  # the operation has a rule at every output axis, and none carries this one
            last_reason = (f"it reads this tensor {occurrences} times and not every occurrence carries the shift to one output axis"
                           if partly else
                           f"its rule carries axis {dim} of this input to no output axis: it reduces or contracts that axis")
        return False, f"read by {describe_node(u)}, which does not carry a shift along the axis ({last_reason})"

    # --- zero mean after centring (forward)

    def zero_mean(self, node, dim: int) -> tuple[bool, str, frozenset]:
        """Is ``node`` zero-mean along ``dim`` once the centrable writers are centred?

        Returns ``(answer, reason, writers)``: ``writers`` are the names of the writer nodes the
        answer relies on (the ones to centre), ``reason`` says why not when the answer is no. What the answer
        takes as centred up to rounding, without centring it, is :meth:`relied_on`.
        """
        return self._zero_with_relied(node, dim)[:3]

    def relied_on(self, node, dim: int) -> frozenset:
        """The stored tensors that a yes of :meth:`zero_mean` takes as centred *up to rounding* and does not centre:
        the names of the already-centred writers that cannot be centred (:attr:`Writer.already_centred`) and of the
        LayerNorm nodes whose bias passes :func:`bias_centred_within_rounding`. Their stored means are not exactly
        zero in general, and several of them can add up in one LayerNorm input whose magnitude is far below
        their own (large biases that cancel): each one's tolerance says nothing about that sum, so the fold's
        check (:func:`lnbook.folding.fold.verify_fold`) measures them as stored. Empty when the answer is no."""
        return self._zero_with_relied(node, dim)[3]

    def relied_params(self, name: str) -> tuple[tuple[str, int], ...]:
        """``(qualified name, axis)`` of the stored tensors behind one entry of :meth:`relied_on`."""
        if name in self.writers:
            return self.writers[name].params
        bias = _arg(self.nodes[name], 3, "bias")
        return ((self.param_of[bias.name], 0),)

    def describe_relied(self, name: str) -> str:
        """``linear 'h1'`` for an already-centred writer, ``the bias of aten.layer_norm.default at ln1`` for a norm."""
        if name in self.writers:
            return f"{self.writers[name].kind} '{self.writers[name].label}'"
        return f"the bias of {describe_node(self.nodes[name])}"

    def _zero_with_relied(self, node, dim: int) -> tuple[bool, str, frozenset, frozenset]:
        if not isinstance(node, Node):
            if isinstance(node, (int, float)) and not isinstance(node, bool) and node == 0:
                return True, "", frozenset(), frozenset()
            return False, f"a constant {node!r} is added along the features", frozenset(), frozenset()
        key = (node.name, dim)
        if key not in self._zero:
            self._zero[key] = (False, "cycle", frozenset(), frozenset())
            self._zero[key] = self._zero_mean(node, dim)
        return self._zero[key]

    def _zero_mean(self, node: Node, dim: int) -> tuple[bool, str, frozenset, frozenset]:
        no = frozenset()
        here = describe_node(node)
        if node.name in self.mutated:
            return False, f"{here} is mutated in place by {self.mutated[node.name]}", no, no
        writer = self.writers.get(self._writer_at.get((node.name, dim), ""))
        if writer is not None:
            if writer.centrable:
                return True, "", frozenset([writer.node]), no
            if writer.already_centred:
                return True, "", no, frozenset([writer.node])
            return False, f"the output of {writer.kind} '{writer.label}' is not zero-mean and cannot be centred: {writer.reason}", no, no
        if node.op == "placeholder":
            if node.name in self.user_inputs:
                return False, f"the model input '{node.name}' is not zero-mean by construction", no, no
            return False, f"'{self.param_of.get(node.name, node.name)}' is not zero-mean", no, no
        if node.op != "call_function":
            return False, f"{here} is not zero-mean", no, no
        name = op_name(node)
        if name in ("aten.layer_norm.default", "aten.rms_norm.default") and dim == -1:
            return self._norm_output(node, name)
        if node.name in self.not_writers:
            return False, f"the output of {here} is not known to be zero-mean: {self.not_writers[node.name]}", no, no
        form = linear_inputs(node, dim) if is_tensor(node) or name == "getitem" else "not a tensor"
        other = self.writers.get(node.name)
        if isinstance(form, str) and other is not None and is_tensor(node):
            # a writer read along an axis it does not write (x -> Linear -> transpose -> LayerNorm): the proof stops
            # at the axis, not at the operation, which has a rule along the axis it writes
            r = rank(node)
            return False, (f"the output of {other.kind} '{other.label}' is written along axis {other.out_dim % r - r} "
                           f"(of {r}), but the LayerNorm normalises its axis {dim % r - r} (after the operations between them): "
                           f"centring the {other.kind} "
                           f"makes its output zero-mean along axis {other.out_dim % r - r} only"), no, no
        if isinstance(form, str):
            kind = " (an elementwise nonlinearity)" if any(f"aten.{k}." in name for k in _NONLINEAR) else ""
            return False, f"the output of {here}{kind} is not known to be zero-mean: {form}", no, no
        used, relied = frozenset(), frozenset()
        for x, d in form:
            if d is None:
                if isinstance(x, (int, float)) and not isinstance(x, bool) and x == 0:
                    continue
                return False, f"{here} adds {'a tensor' if isinstance(x, Node) else repr(x)} that is constant along the features", no, no
            ok, why, w, r = self._zero_with_relied(x, d)
            if not ok:
                return False, why, no, no
            used |= w
            relied |= r
        return True, "", used, relied

    def _norm_output(self, node: Node, name: str) -> tuple[bool, str, frozenset, frozenset]:
        no = frozenset()
        here = describe_node(node)
        if len(node.args[1]) != 1:
            return False, f"{here} normalises several dimensions", no, no
        weight = _arg(node, 2, "weight")
        bias = _arg(node, 3, "bias") if name == "aten.layer_norm.default" else None
        w = self.value(weight) if weight is not None else None
        if weight is not None and w is None:
            return False, (f"the output of {here} has a gain that is not a stored tensor (computed in the forward pass), so "
                           "whether it is constant is not known"), no, no
        if weight is not None and bool((w != w.reshape(-1)[0]).any()):
            return False, f"the output of {here} has a per-feature gain, so its mean varies with the input", no, no
        if bias is not None:
            b = self.value(bias)
            if b is None:
                return False, (f"the output of {here} has a bias that is not a stored tensor (computed in the forward "
                               "pass), so whether it is centred is not known"), no, no
            if not bias_centred_within_rounding(b):
                return False, f"the output of {here} has a bias that is not centred", no, no
        if name == "aten.layer_norm.default":
            return True, "", no, (frozenset([node.name]) if bias is not None else no)
        return self._zero_with_relied(node.args[0], -1)


# A rounding bound tells a centred column from an uncentred one only while it is far below the mean of an ordinary
# uncentred column, about mean|c| / sqrt(n) (a random column of height n): where bound * sqrt(n) exceeds this
# fraction of mean|c|, a column within the bound may well be uncentred (in bfloat16 every N(0, 1) column of height
# 4096 was), and only an exactly zero mean counts. A random column then passes with probability about 2^-10.
DISTINGUISHABLE = 2.0**-10


def bias_centred_within_rounding(b: torch.Tensor) -> bool:
    """Is a LayerNorm's bias centred up to rounding? The criterion of the LayerNorm-output rule, and of the biases
    the fold's float64 check centres exactly: the same as for one column of a writer (:func:`centred_within_rounding`
    with the bias as a single column of height ``d``), ``|mean(b)| <= (ceil(log2 d) + 2) eps mean|b|`` in its own
    dtype, so that every vector the analysis relies on as centred (a column, a bias, an embedding row) meets the one
    bound the chapter states. Where that bound cannot tell a centred bias from an uncentred one
    (:data:`DISTINGUISHABLE`: in bfloat16 and float16 at any width, where 100 of 100 random N(0, 1) biases of width
    256 passed an earlier bound), only an exactly zero mean passes. A bias that is not one-dimensional never passes."""
    b = b.detach()
    if b.dim() != 1:
        return False
    return centred_within_rounding(b.reshape(-1, 1), 0)


def centred_within_rounding(p: torch.Tensor, axis: int) -> bool:
    r"""Is every column of ``p`` along ``axis`` centred up to the rounding of its own dtype?

    A *column* is one fibre along ``axis``: for a linear weight ``(out, in)`` and ``axis=0``, the ``n = out``
    entries that one input direction writes, so that an input along that direction alone writes that column's
    mean into the stream (a tolerance set by the largest entry of the whole weight would let a small column
    with a large mean pass beside a large centred one). The column ``c`` passes when

    .. math:: \Big|\frac1n\sum_i c_i\Big| \le (\lceil\log_2 n\rceil + 2)\,\varepsilon\,\frac1n\sum_i |c_i|,

    with ``eps`` the machine epsilon of ``p``'s dtype (``u = eps / 2`` its unit roundoff). The bound is the
    rounding of centring the column in its own dtype, ``c_i = fl(p_i - m)`` with ``m`` the mean computed by
    pairwise (torch's cascade) summation: the computed mean is off by at most
    ``gamma_{ceil(log2 n) + 1} * mean|p|`` (Higham, *Accuracy and Stability*, sec. 4.2, with the division),
    each subtraction rounds by ``u |c_i|``, and the float64 mean taken here is off by the same pairwise bound
    in float64 (negligible for float32 and lower, equal in order for float64); with ``mean|p| ~ mean|c|`` the
    three add up to ``(2 ceil(log2 n) + 3) u mean|c|``, below the bound. A column centred with a less accurate
    summation (recursive, ``gamma_n``), or whose original mean dwarfed its centred entries, may fail: the
    writer is then "not known to be centred", a refusal, never a wrong verdict. For ``n = 8`` in float32 the
    bound is ``5 eps = 6e-7`` of the column's mean magnitude. A column of zeros passes; an integer or empty
    tensor never does. The bound does not shrink with ``n`` while an ordinary uncentred column's mean does (about
    ``mean|c| / sqrt(n)``): where ``bound * sqrt(n)`` exceeds :data:`DISTINGUISHABLE` of ``mean|c|`` the test could
    not tell the two apart, and only columns with an exactly zero mean pass (bfloat16 and float16 at every height
    of 2 or more; float32 up to heights of about 10^5).
    """
    if not p.is_floating_point() or not p.numel():
        return False
    n = p.shape[axis]
    q = p.double()
    relative = (math.ceil(math.log2(max(n, 1))) + 2) * torch.finfo(p.dtype).eps
    mean = q.mean(dim=axis).abs()
    if relative * math.sqrt(n) > DISTINGUISHABLE:  # the bound cannot tell centred from uncentred: exact zeros only
        return bool((mean == 0).all())
    return bool((mean <= relative * q.abs().mean(dim=axis)).all())


def feature_width_ok(node: Node) -> bool:
    """The normalised axis of a layer_norm node has a size of at least 2: read from the node's static
    ``normalized_shape`` (``aten.layer_norm`` requires the input's last size to equal it). The input's symbolic last size
    can be an expression that equals it only at the traced sizes (after a reshape that makes an inner axis of size 1,
    ``torch.export`` writes ``8//(s1//2)``; referee 24 of chapter 7, finding 4); when ``normalized_shape`` is missing,
    the symbolic size must be a fixed integer."""
    shape = node.args[1] if len(node.args) > 1 else None
    if isinstance(shape, (list, tuple)) and len(shape) == 1 and isinstance(shape[0], int):
        return shape[0] >= 2
    s = size(node.args[0], -1)
    return s.is_Integer and int(s) >= 2 and not same_size(s, 1)


__all__ += ["feature_width_ok", "IDENTITY_OPS"]
