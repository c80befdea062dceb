r"""The rule table of the zero-mean analysis: which ATen operations move feature vectors linearly.

Chapter 7, {prf:ref}`prop-ch7-closure`. Every rule here is stated for one exact operator overload
(``aten.div.Tensor``, never the packet ``aten.div``, whose ``Tensor_mode`` overload rounds): an
overload that is not in the table has no rule, and its output is "not known to be zero-mean".

A rule answers, for an output axis ``dim`` (a negative index) of a node: is every fibre of the output
along ``dim`` a linear combination of fibres of some inputs along their axes ``in_dim``, with
coefficients that do not depend on the position along the fibre? :func:`linear_inputs` returns those
``(operand, in_dim)`` pairs, ``in_dim=None`` for an operand that is constant along the fibre (a number, or
a tensor broadcast along the axis), or a string that says why there is no such rule. Then, with
:math:`u_i` the inputs' fibres and :math:`A_i` matrices that act on the other axes only,
``out = sum_i A_i u_i`` and

* zero mean is kept: :math:`\mu(\sum_i A_iu_i)=\sum_iA_i\mu(u_i)=0` when every :math:`u_i` has zero
  mean and every constant operand is 0;
* a shift is carried: :math:`\sum_iA_i(u_i+c_i\one)=\sum_iA_iu_i+(\sum_iA_ic_i)\one`.

Both facts are the linearity of the mean; the rules below only establish the linear form for each
overload, and the tests check each one against the operation itself (``tests/folding/test_op_rules.py``).

An in-place overload with a functional twin (``aten.add_.Tensor`` for ``aten.add.Tensor``: :data:`INPLACE_OPS`)
gets its twin's rule when the write is invisible everywhere else in the graph (:func:`inplace_refusal`): the
tensor written into is a fresh result (of an operation known to allocate it, :data:`ALLOCATING_OPS`: not a view,
input, parameter or buffer, nor the result of an operation that may return its operand), and no other reader of
it runs after the write or may keep a view of it. Then ``x.add_(y)`` is ``x + y`` stored in ``x``'s memory, read only
through the node of the write. Otherwise it has no rule, and the refusal says which of these fails.
"""

from __future__ import annotations

import operator

import sympy as sp
import torch
from torch.fx import Node

__all__ = ["linear_inputs", "inplace_refusal", "op_name", "size", "same_size", "rank", "IDENTITY_OPS", "NO_OP_READERS",
           "RULE_OPS", "INPLACE_OPS",
           "ALLOCATING_OPS", "returns_fresh", "may_alias_operands"]

Operand = tuple[object, int | None]

# A floating-point cast is the identity of the real-number model (its rounding is covered by the
# tolerance of the check); a cast to an integer or bool type is not (it rounds to whole numbers).
IDENTITY_OPS = {
    "aten.clone.default", "aten.alias.default", "aten.detach.default", "aten.lift_fresh_copy.default",
    "aten.contiguous.default", "aten._to_copy.default", "aten.to.dtype", "aten.to.dtype_layout",
    "aten.to.device", "aten.type_as.default",
}
# Nodes that read only metadata (shape, dtype, device) of a tensor: centring changes none of it. The factories that
# take a tensor only for its shape, dtype, device and layout (torch.zeros_like(h) as an accumulator in routing code;
# referee 24 of chapter 7, finding 5) are among them.
NO_OP_READERS = {
    "aten._assert_tensor_metadata.default", "aten.sym_size.int", "aten.sym_numel.default",
    "aten.sym_stride.int", "aten.sym_storage_offset.default", "aten.size.int", "aten.dim.default",
    "aten.zeros_like.default", "aten.ones_like.default", "aten.empty_like.default", "aten.full_like.default",
    "aten.rand_like.default", "aten.randn_like.default", "aten.randint_like.default",
    "aten.new_zeros.default", "aten.new_ones.default", "aten.new_empty.default", "aten.new_full.default",
}
VIEW_OPS = {"aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", "aten.flatten.using_ints", "aten.unflatten.int"}
PERMUTE_OPS = {"aten.permute.default", "aten.transpose.int", "aten.t.default", "aten.numpy_T.default"}
SPLIT_OPS = {"aten.split.Tensor", "aten.split_with_sizes.default", "aten.chunk.default", "aten.unbind.int", "aten.tensor_split.sections"}
MATMUL_OPS = {"aten.matmul.default", "aten.mm.default", "aten.bmm.default"}
RULE_OPS = IDENTITY_OPS | VIEW_OPS | PERMUTE_OPS | SPLIT_OPS | MATMUL_OPS | {
    "aten.neg.default", "aten.add.Tensor", "aten.sub.Tensor", "aten.add.Scalar", "aten.sub.Scalar",
    "aten.rsub.Scalar", "aten.mul.Tensor", "aten.mul.Scalar", "aten.div.Tensor", "aten.div.Scalar",
    "aten.dropout.default", "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default",
    "aten.expand.default", "aten.slice.Tensor", "aten.narrow.default", "aten.select.int", "aten.cat.default",
    "aten.index_select.default", "aten.flip.default", "aten.roll.default", "aten.constant_pad_nd.default", "aten.pad.default",
    "aten.sum.dim_IntList", "aten.mean.dim", "aten.cumsum.default", "aten.masked_fill.Scalar", "aten.where.self",
    "aten.where.ScalarOther", "aten.where.ScalarSelf",
    "aten.scaled_dot_product_attention.default", "aten.einsum.default",
}
# interpolation over the trailing spatial axes (1, 2 or 3 of them) with coefficients that depend on the positions
# only, never on the channel: of lem-ch7-rule-table's form along the channel and batch axes (referee 18 of chapter
# 7, finding 11: a ViT's position embeddings are interpolated to another image size by upsample_bicubic2d; referee
# 19, finding 6: mode='nearest-exact' too)
UPSAMPLE_OPS = {f"aten.{op}.{overload}": k for op, k in [
    ("upsample_nearest1d", 1), ("upsample_linear1d", 1), ("upsample_nearest2d", 2), ("upsample_bilinear2d", 2),
    ("upsample_bicubic2d", 2), ("_upsample_bilinear2d_aa", 2), ("_upsample_bicubic2d_aa", 2),
    ("upsample_nearest3d", 3), ("upsample_trilinear3d", 3),
    ("_upsample_nearest_exact1d", 1), ("_upsample_nearest_exact2d", 2), ("_upsample_nearest_exact3d", 3)]
    for overload in ("vec", "default")}
RULE_OPS = RULE_OPS | set(UPSAMPLE_OPS)
# in-place overload -> its functional twin, whose rule it gets when inplace_refusal finds the write invisible
INPLACE_OPS = {
    "aten.add_.Tensor": "aten.add.Tensor", "aten.add_.Scalar": "aten.add.Scalar",
    "aten.sub_.Tensor": "aten.sub.Tensor", "aten.sub_.Scalar": "aten.sub.Scalar",
    "aten.mul_.Tensor": "aten.mul.Tensor", "aten.mul_.Scalar": "aten.mul.Scalar",
    "aten.div_.Tensor": "aten.div.Tensor", "aten.div_.Scalar": "aten.div.Scalar",
    "aten.neg_.default": "aten.neg.default", "aten.masked_fill_.Scalar": "aten.masked_fill.Scalar",
    "aten.dropout_.default": "aten.dropout.default",
}
RULE_OPS = RULE_OPS | set(INPLACE_OPS)

# Operations known to allocate their result: at every input each one computes into new memory that no operand
# shares (elementwise arithmetic and functions, products, convolutions, norms, reductions, copies and factories).
# This, not the schema, decides that a result is fresh (returns_fresh): a schema without an alias annotation on
# its result binds only a kernel of the operation's own; a composite (CompositeImplicitAutograd) operation is
# held to no such contract, and aten.dropout in eval mode, aten.type_as to the same dtype and an identity
# aten.einsum return their operand or a view of it at run time (as aten.lift and aten._unsafe_view do, outside
# composites). Every entry's schema declares an unaliased result (tests/folding/test_op_rules.py), and each
# composite entry is listed because every path of its decomposition ends in an allocating kernel (linear and
# matmul in mm/addmm/bmm/mv/dot, the norms in their native kernels, softmax in _softmax, the convolutions in
# convolution). Anything else may alias its operands: an in-place write into its result is refused.
ALLOCATING_OPS = frozenset({
    # copies
    "aten.clone.default", "aten._to_copy.default", "aten.lift_fresh_copy.default",
    # elementwise arithmetic and functions
    "aten.add.Tensor", "aten.add.Scalar", "aten.sub.Tensor", "aten.sub.Scalar", "aten.rsub.Tensor", "aten.rsub.Scalar",
    "aten.mul.Tensor", "aten.mul.Scalar", "aten.div.Tensor", "aten.div.Scalar", "aten.div.Tensor_mode",
    "aten.neg.default", "aten.abs.default", "aten.exp.default", "aten.log.default", "aten.sqrt.default",
    "aten.rsqrt.default", "aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.reciprocal.default",
    "aten.sin.default", "aten.cos.default", "aten.relu.default", "aten.gelu.default", "aten.silu.default",
    "aten.tanh.default", "aten.sigmoid.default", "aten.elu.default", "aten.leaky_relu.default", "aten.softplus.default",
    "aten.hardtanh.default", "aten.mish.default", "aten.erf.default", "aten.masked_fill.Scalar", "aten.masked_fill.Tensor",
    "aten.where.self", "aten.where.ScalarOther", "aten.where.ScalarSelf", "aten.eq.Tensor", "aten.eq.Scalar", "aten.ne.Tensor", "aten.ne.Scalar", "aten.lt.Tensor",
    "aten.lt.Scalar", "aten.le.Tensor", "aten.le.Scalar", "aten.gt.Tensor", "aten.gt.Scalar", "aten.ge.Tensor",
    "aten.ge.Scalar", "aten.logical_not.default", "aten.bitwise_not.default", "aten.bitwise_and.Tensor",
    "aten.bitwise_or.Tensor",
    # products, convolutions, lookups
    "aten.linear.default", "aten.addmm.default", "aten.mm.default", "aten.bmm.default", "aten.baddbmm.default",
    "aten.matmul.default", "aten.embedding.default", "aten.convolution.default", "aten.conv1d.default",
    "aten.conv2d.default", "aten.conv3d.default", "aten.conv1d.padding", "aten.conv2d.padding", "aten.conv3d.padding",
    "aten.index_select.default", "aten.gather.default",
    # norms and softmax
    "aten.layer_norm.default", "aten.native_layer_norm.default", "aten.rms_norm.default", "aten.group_norm.default",
    "aten.softmax.int", "aten._softmax.default", "aten.log_softmax.int", "aten._log_softmax.default",
    # reductions and scans along an axis, concatenation, reordering copies
    "aten.sum.dim_IntList", "aten.mean.dim", "aten.cumsum.default", "aten.cat.default", "aten.stack.default",
    "aten.flip.default", "aten.repeat.default", "aten.tril.default", "aten.triu.default",
    # factories
    "aten.zeros.default", "aten.ones.default", "aten.full.default", "aten.empty.memory_format", "aten.arange.default",
    "aten.arange.start", "aten.arange.start_step", "aten.scalar_tensor.default", "aten.zeros_like.default",
    "aten.ones_like.default", "aten.full_like.default", "aten.empty_like.default", "aten.new_zeros.default",
    "aten.new_ones.default", "aten.new_full.default", "aten.new_empty.default",
})


def op_name(node) -> str:
    """``aten.div.Tensor``: the exact overload of a call (``getitem`` for tuple indexing, else the node's op)."""
    if not isinstance(node, Node):
        return ""
    if node.op == "call_function":
        if node.target is operator.getitem:
            return "getitem"
        return str(node.target)
    return node.op


def _val(node):
    return node.meta.get("val") if isinstance(node, Node) else None


def is_tensor(node) -> bool:
    return isinstance(_val(node), torch.Tensor)


def rank(node) -> int:
    return _val(node).dim()


def size(node, dim: int):
    """The size of ``node`` along ``dim`` as a sympy expression (a symbol for a dynamic dimension)."""
    s = _val(node).shape[dim]
    return sp.sympify(s.node.expr) if isinstance(s, torch.SymInt) else sp.Integer(int(s))


def same_size(a, b) -> bool:
    return sp.expand(sp.sympify(a) - sp.sympify(b)) == 0


def _prod(sizes):
    out = sp.Integer(1)
    for s in sizes:
        out = out * s
    return sp.expand(out)


def _arg(node: Node, index: int, name: str, default=None):
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _neg(d: int, r: int) -> int:
    return d - r if d >= 0 else d


def _floating(node) -> bool:
    return is_tensor(node) and _val(node).is_floating_point()


def _along(operand, out: Node, dim: int) -> Operand:
    """``operand`` broadcast to ``out``: its axis for ``dim``, or ``None`` when it is constant along it."""
    if not is_tensor(operand):
        return operand, None
    r = rank(operand)
    if -dim > r:
        return operand, None
    if same_size(size(operand, dim), 1) and not same_size(size(out, dim), 1):
        return operand, None
    return operand, dim


def _constant_along(operand, dim: int) -> bool:
    """A number, or a tensor of size 1 along ``dim`` (or without that axis): constant along the fibre."""
    if isinstance(operand, (int, float)) and not isinstance(operand, bool):
        return True
    if not is_tensor(operand):
        return False
    return -dim > rank(operand) or same_size(size(operand, dim), 1)


def _view_map(node: Node, dim: int):
    """The axis of the input of a reshape whose fibres are the output's fibres along ``dim``.

    Row-major reshapes move axis ``k`` of the input onto axis ``j`` of the output exactly when the
    sizes before them have the same product and ``in[k] == out[j]`` (every fibre along ``j`` is then a
    fibre along ``k``). Sizes are compared as expressions in the dynamic dimensions, so a map that holds
    only at the traced sizes is refused; the size must be at least 2.
    """
    src = node.args[0]
    r_out, r_in = rank(node), rank(src)
    j = dim % r_out
    want = size(node, j)
    if not (want.is_Integer and int(want) >= 2) and not want.free_symbols:
        return None
    before = _prod(size(node, i) for i in range(j))
    for k in range(r_in):
        if same_size(_prod(size(src, i) for i in range(k)), before) and same_size(size(src, k), want):
            return k - r_in
    return None


def _permute_back(node: Node, dim: int) -> int:
    name, r = op_name(node), rank(node)
    if name == "aten.t.default":
        order = [1, 0][:r]
    elif name == "aten.numpy_T.default":  # Tensor.T: every axis reversed
        order = list(range(r))[::-1]
    elif name == "aten.transpose.int":
        a, b = node.args[1] % r, node.args[2] % r
        order = list(range(r))
        order[a], order[b] = order[b], order[a]
    else:
        order = [d % r for d in node.args[1]]
    return order[dim % r] - r


def _squeeze_back(node: Node, dim: int) -> int | None:
    """Output axis ``dim`` of an (un)squeeze -> input axis (``None``: the inserted axis of unsqueeze)."""
    src, name = node.args[0], op_name(node)
    r_in, r_out = rank(src), rank(node)
    if name == "aten.unsqueeze.default":
        ins = node.args[1] % r_out
        j = dim % r_out
        return None if j == ins else (j if j < ins else j - 1) - r_in
    if name == "aten.squeeze.default":
        gone = [k for k in range(r_in) if same_size(size(src, k), 1)]
    else:
        dims = [node.args[1]] if name == "aten.squeeze.dim" else list(node.args[1])
        gone = [d % r_in for d in dims if same_size(size(src, d % r_in), 1)]
    kept = [k for k in range(r_in) if k not in gone]
    return kept[dim % r_out] - r_in


def _split_getitem(node: Node, dim: int):
    split = node.args[0]
    name = op_name(split)
    src = split.args[0]
    r_in = rank(src)
    if name == "aten.unbind.int":
        along = _arg(split, 1, "dim", 0) % r_in
        j = dim % rank(node)
        return [(src, (j if j < along else j + 1) - r_in)]
    along = _arg(split, 2, "dim", 0)
    if _neg(along, r_in) == dim:
        return f"{name} splits the axis itself"
    return [(src, dim)]


def _einsum(node: Node, dim: int):
    equation, operands = node.args[0], list(node.args[1])
    equation = equation.replace(" ", "")
    if "..." in equation or "->" not in equation:
        return "an einsum with '...' or without an explicit output is not in the rule table"
    ins, out = equation.split("->")
    terms = ins.split(",")
    letter = out[dim % len(out)]
    holders = [i for i, t in enumerate(terms) if letter in t]
    if len(holders) != 1 or terms[holders[0]].count(letter) != 1:
        return f"index '{letter}' of '{equation}' is shared by several factors (a batch index) or repeated"
    i = holders[0]
    return [(operands[i], terms[i].index(letter) - len(terms[i]))]


def _schema_returns_fresh(node: Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return schema is not None and all(r.alias_info is None for r in schema.returns)


def returns_fresh(node) -> bool:
    """Is ``node``'s value newly allocated memory, shared with none of its operands (at every input)?

    Yes only for an operation of :data:`ALLOCATING_OPS` whose schema declares no result aliased (and for a
    ``getitem`` of such an operation's tuple). The schema alone proves nothing: a composite operation is held to
    no alias contract (:data:`ALLOCATING_OPS`), so anything else may return an operand or a view of it.
    """
    if not isinstance(node, Node) or node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return returns_fresh(node.args[0])
    return op_name(node) in ALLOCATING_OPS and _schema_returns_fresh(node)


def _tensor_operands(node: Node) -> list[Node]:
    out = []
    for a in list(node.args) + list(node.kwargs.values()):
        for x in (a if isinstance(a, (list, tuple)) else [a]):
            v = _val(x)
            if isinstance(v, torch.Tensor) or (isinstance(v, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in v)):
                out.append(x)
    return out


def may_alias_operands(node) -> list[Node]:
    """The operands whose memory ``node``'s value may share: the tensors an in-place write into one is seen by.

    None for a fresh result (:func:`returns_fresh`) or a node that is not a call (an input, parameter or buffer is
    a base itself); for an operation whose schema annotates every result with alias sets that name some of its
    arguments (a view such as ``aten.mT`` or ``aten.diagonal``, an in-place write's result), those arguments;
    for anything else (a list of views, a composite that may return its operand, an operation without a schema)
    every tensor operand. The answer is read off the schema's alias annotations, never off the operation's name.
    """
    if not isinstance(node, Node) or node.op != "call_function":
        return []
    if node.target is operator.getitem:
        return [node.args[0]] if isinstance(node.args[0], Node) else []
    if returns_fresh(node):
        return []
    schema = getattr(node.target, "_schema", None)
    if schema is not None and schema.returns and all(r.alias_info is not None for r in schema.returns):
        sets = set().union(*(r.alias_info.before_set | r.alias_info.after_set for r in schema.returns))
        if sets and "*" not in sets:
            named = []
            for i, a in enumerate(schema.arguments):
                if a.alias_info is not None and (a.alias_info.before_set | a.alias_info.after_set) & sets:
                    value = node.args[i] if i < len(node.args) else node.kwargs.get(a.name)
                    named.extend(x for x in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(x, Node))
            if named:
                return named
    return _tensor_operands(node)


def inplace_refusal(node: Node) -> str:
    """Why the in-place ``node`` (one of :data:`INPLACE_OPS`) cannot be read as its functional twin; "" when it can.

    ``x.add_(y)`` stores ``x + y`` in ``x``'s memory. The graph's node for it is then that sum, and every other
    node that mentions ``x`` is read as ``x`` before the write; this holds when (1) ``x`` is a fresh tensor
    (:func:`returns_fresh`: the result of an operation known to allocate it, or of an earlier in-place write that
    passes this test itself), so the write reaches no model input, parameter, buffer or other tensor of which ``x``
    is a view; and (2) every other reader of ``x`` (apart from metadata reads) runs before the write and returns a
    fresh tensor, so none sees the new values, directly or through a view taken earlier. Each refusal names the
    operation and says to write out of place.
    """
    name = op_name(node)
    target = node.args[0] if node.args else None
    what = f"{name} writes in place into its first operand"
    method = name.split(".")[1]
    instead = f"; write it out of place (x = x.{method.rstrip('_')}(...), not x.{method}(...) or x += ...)"
    if not isinstance(target, Node):
        return f"{what}, which is not a tensor of the graph"
    if target.op != "call_function":
        return (f"{what}, '{target.name}', a model input, parameter or buffer: the write is seen outside the graph "
                "(and by the next call)" + instead)
    if op_name(target) in INPLACE_OPS:
        why = inplace_refusal(target)
        if why:
            return why
    elif not returns_fresh(target):
        return (f"{what}, the output of {op_name(target)}, which may be a view of another tensor (it is not an "
                "operation known to allocate its result, op_rules.ALLOCATING_OPS: a view, or a composite such as "
                "eval-mode dropout, type_as or an identity einsum, returns its operand or a view of it): the write "
                "changes that tensor too" + instead)
    later, n = set(), node.next
    while n.op != "root":
        later.add(n)
        n = n.next
    for user in target.users:
        if user is node or op_name(user) in NO_OP_READERS:
            continue
        if user in later:
            return f"{what}, and {op_name(user)} reads that operand after the write (it sees the new values)" + instead
        if not returns_fresh(user):
            if _schema_returns_fresh(user):
                return (f"{what}, and {op_name(user)} read that operand before the write but is not known to "
                        "allocate its result (op_rules.ALLOCATING_OPS): it may have returned the operand or a view "
                        "of it, which shows the new values" + instead)
            return (f"{what}, and {op_name(user)} made a view of that operand before the write (the view shows "
                    "the new values)" + instead)
    return ""


def linear_inputs(node: Node, dim: int):
    """The linear form of ``node``'s fibres along ``dim``: a list of ``(operand, in_dim)``, or a reason.

    ``in_dim=None`` marks an operand that is constant along the fibre. See the module docstring; an in-place
    overload gets its functional twin's form when :func:`inplace_refusal` finds its write invisible.
    """
    name = op_name(node)
    if name in INPLACE_OPS:
        why = inplace_refusal(node)
        if why:
            return why
        name = INPLACE_OPS[name]
    if name == "getitem":
        if isinstance(node.args[0], Node) and op_name(node.args[0]) in SPLIT_OPS:
            return _split_getitem(node, dim)
        source = op_name(node.args[0]) if isinstance(node.args[0], Node) else ""
        if "embedding_bag" in source:  # referee 30 of chapter 7, finding 3: name the module and what to do
            return ("an output of an nn.EmbeddingBag (aten._embedding_bag), for which the analysis has no rule: a sum "
                    "or mean bag is a linear writer, but it is not supported here; use nn.Embedding and sum its rows")
        if source:  # referee 32 of chapter 7, finding 7: name the operation (sort, max(dim), var_mean, topk, ...)
            return f"takes an output of {source}, an operation returning several tensors for which the analysis has no rule"
        return "indexes a tuple that is not the output of an operation it knows"
    if name not in RULE_OPS:
        return "no rule for this operation"
    a = node.args[0] if node.args else None
    r = rank(node) if is_tensor(node) else 0
    if name in IDENTITY_OPS:
        if not (_floating(a) and _floating(node)):
            return f"casts {_val(a).dtype} to {_val(node).dtype}, which is not value-preserving"
        return [(a, dim)]
    if name == "aten.dropout.default":
        rate = float(_arg(node, 1, "p", 0.0))
        if bool(_arg(node, 2, "train", False)) and rate != 0.0:
            if rate >= 1.0:
                return "dropout in training mode with p = 1 outputs zeros, which no rule of the table models"
            return "dropout in training mode with 0 < p < 1 rescales each feature independently"
        return [(a, dim)]
    if name == "aten.neg.default":
        return [(a, dim)]
    if name in ("aten.add.Tensor", "aten.sub.Tensor", "aten.add.Scalar", "aten.sub.Scalar", "aten.rsub.Scalar"):
        alpha = _arg(node, 2, "alpha", 1)
        if not isinstance(alpha, (int, float)):
            return "its alpha is not a number"
        return [_along(a, node, dim), _along(node.args[1], node, dim)]
    if name in ("aten.mul.Tensor", "aten.mul.Scalar", "aten.div.Tensor", "aten.div.Scalar"):
        b = node.args[1]
        orders = [(a, b)] if name.startswith("aten.div") else [(a, b), (b, a)]
        for x, s in orders:
            if isinstance(x, Node) and _constant_along(s, dim) and _along(x, node, dim)[1] is not None:
                return [(x, dim)]
        return "multiplies by a factor that varies along the axis"
    if name in VIEW_OPS:
        k = _view_map(node, dim)
        return f"{name} splits or merges the axis" if k is None else [(a, k)]
    if name in PERMUTE_OPS:
        return [(a, _permute_back(node, dim))]
    if name in ("aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default"):
        k = _squeeze_back(node, dim)
        return "the axis is the one unsqueeze inserts" if k is None else [(a, k)]
    if name == "aten.expand.default":
        return [_along(a, node, dim)]
    if name in ("aten.slice.Tensor", "aten.narrow.default", "aten.index_select.default", "aten.cumsum.default"):
        along = _arg(node, 1, "dim", 0)
        if _neg(along, rank(a)) == dim:
            return f"{name} acts along the axis itself"
        if name == "aten.cumsum.default" and _arg(node, 2, "dtype") is not None:
            return "cumsum with a dtype casts"
        return [(a, dim)]
    if name == "aten.select.int":
        along = _arg(node, 1, "dim", 0) % rank(a)
        j = dim % r
        return [(a, (j if j < along else j + 1) - rank(a))]
    if name == "aten.cat.default":
        along = _arg(node, 1, "dim", 0)
        if _neg(along, r) == dim:
            return "concatenates along the axis itself"
        return [(t, dim) for t in a]
    if name in ("aten.flip.default", "aten.roll.default"):
        dims = list(node.args[1] if name == "aten.flip.default" else _arg(node, 2, "dims", []))
        if not dims or any(_neg(d, r) == dim for d in dims):
            return f"{name} reorders the axis itself (or the flattened tensor)"
        return [(a, dim)]
    if name in ("aten.constant_pad_nd.default", "aten.pad.default"):
        pad = list(node.args[1])
        if name == "aten.pad.default":
            if _arg(node, 2, "mode", "constant") != "constant":
                return "a reflecting or replicating pad is not in the rule table"
            value = _arg(node, 3, "value", None)
            value = 0 if value is None else value
        else:
            value = _arg(node, 2, "value", 0)
        padded = {-(i // 2) - 1 for i in range(len(pad)) if pad[i] != 0}
        if dim in padded:
            return "pads the axis itself"
        return [(a, dim), (value, None)]
    if name in ("aten.sum.dim_IntList", "aten.mean.dim"):
        dims, keep = _arg(node, 1, "dim"), bool(_arg(node, 2, "keepdim", False))
        if _arg(node, 3, "dtype") is not None:
            return f"{name} with a dtype casts"
        if not dims:
            return f"{name} reduces every axis"
        gone = sorted(d % rank(a) for d in dims)
        if any(g - rank(a) == dim for g in gone) and keep:
            return f"{name} reduces the axis itself"
        kept = list(range(rank(a))) if keep else [k for k in range(rank(a)) if k not in gone]
        k = kept[dim % r]
        if k in gone:
            return f"{name} reduces the axis itself"
        return [(a, k - rank(a))]
    if name == "aten.masked_fill.Scalar":
        value = node.args[2]
        if not _constant_along(node.args[1], dim):
            return "its mask varies along the axis"
        return [(a, dim), (value, None)]
    if name in ("aten.where.self", "aten.where.ScalarOther", "aten.where.ScalarSelf"):  # a number: a constant operand
        cond, x, y = node.args[:3]
        if not _constant_along(cond, dim):
            return "its condition varies along the axis"
        return [_along(x, node, dim), _along(y, node, dim)]
    if name == "aten.scaled_dot_product_attention.default":
        if dim != -1:
            return "an attention output is a weighted sum of value rows along the last axis only"
        return [(node.args[2], -1)]
    if name in MATMUL_OPS:
        b = node.args[1]
        if rank(a) < 2 or rank(b) < 2:
            return "a matrix-vector product contracts the axis (an operand has rank 1)"
        if dim == -1:
            return [(b, -1)]
        if dim == -2:
            return [(a, -2)]
        return "along a batch axis the coefficients of a product change from one position of the fibre to the next"
    if name == "aten.einsum.default":
        return _einsum(node, dim)
    if name in UPSAMPLE_OPS:
        if -UPSAMPLE_OPS[name] <= dim <= -1:
            return f"{name} interpolates along the axis itself"
        return [(a, dim)]
    return "no rule for this operation"
