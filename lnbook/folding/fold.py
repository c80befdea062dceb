r"""Foldable LayerNorms: find them in any model and replace them by RMSNorm without changing the model.

A LayerNorm whose input has zero mean over its features for *every* input computes exactly what
RMSNorm with the same ``eps`` computes. Chapter 7 proves when a model can be brought into that
state by centring some of its weights without changing its function (the column-centred
constraint and column-based weight centring of Guo et al., and TransformerLens's
``center_writing_weights`` for pre-LN transformers):

* :func:`find_foldable_layernorms` traces the model with ``torch.export`` and reports, for every
  LayerNorm, whether it is foldable and why (or why not), naming the node and the module
  (:class:`FoldReport`);
* :func:`fold_layernorms` returns a new model in which the writers that feed foldable LayerNorms
  are centred and those LayerNorms are RMSNorms with the same ``eps``, gain and bias (the bias as a
  separate add, :class:`RMSNormWithBias`, since ``torch.nn.RMSNorm`` has none), or, with
  ``affine="fold"``, with gain and bias moved into the linear layers that read the norm;
* :func:`max_output_difference` compares the outputs of two models.

The graph analysis itself is in :mod:`lnbook.folding.zero_mean`.
"""

from __future__ import annotations

import copy
import hashlib
import warnings
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.fx import Node
from torch.utils import _pytree as pytree

from lnbook.folding.call_proofs import (FOLD_RECORD, CallProver, RefuseChangesSinceFolding, SubmoduleCallGuard, call_state, is_quantised_module,
                                        declare_untied_head,
                                        record_proved_state)
from lnbook.folding.op_rules import IDENTITY_OPS, PERMUTE_OPS, VIEW_OPS, linear_inputs, op_name
from lnbook.folding.tracing import ShapeDomain, checking_copies, draw_inputs, is_float_zeros, trace_model
from lnbook.folding.zero_mean import (
    UntraceableModelError,
    Writer,
    ZeroMeanAnalysis,
    _arg,
    _module_of,
    bias_centred_within_rounding,
    centred_within_rounding,
    describe_node,
    feature_width_ok,
)
from lnbook.util.device import tf32
from lnbook.util.tables import Table, power_of_ten
from lnbook.util.validation import check_eps

CAST_OPS = {"aten._to_copy.default", "aten.to.dtype", "aten.to.dtype_layout", "aten.to.device", "aten.type_as.default"}

__all__ = [
    "UntraceableModelError",
    "LayerNormVerdict",
    "FoldReport",
    "eps_text",
    "RMSNormWithBias",
    "find_foldable_layernorms",
    "refuse_stale_report",
    "fold_layernorms",
    "centre_writers",
    "max_output_difference",
    "relative_output_difference",
    "verify_fold",
    "floating_casts",
    "check_tolerance",
    "checkable_dtype",
    "refuse_training_mode",
    "FOLD_RECORD",
]

aten = torch.ops.aten
AFFINE_MODES = ("keep", "fold")


@dataclass(frozen=True)
class LayerNormVerdict:
    """One LayerNorm call in the traced graph: foldable or not, and why.

    ``module`` is the qualified name of the module that made the call (``None`` for a functional
    ``F.layer_norm`` at the top level). ``swap`` is empty when that module is exactly an
    ``nn.LayerNorm`` that :func:`fold_layernorms` may replace, else the reason it may not.
    ``writers`` are the writer nodes whose centring makes the input zero-mean. ``relies_on`` names what the
    verdict takes as centred up to rounding without centring it (already-centred writers that cannot be
    centred, LayerNorm biases centred up to rounding: :meth:`lnbook.folding.zero_mean.ZeroMeanAnalysis.relied_on`),
    as node names like ``writers``; their stored means are measured by the fold's check (:func:`verify_fold`), not assumed away.
    """

    node: str
    module: str | None
    width: int
    eps: float
    affine: str
    foldable: bool
    reason: str
    writers: tuple[str, ...] = ()
    swap: str = ""
    relies_on: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.module if self.module is not None else self.node


@dataclass
class FoldReport:
    """Every LayerNorm of a traced model with its verdict, every writer found on the way, and the
    input shapes on which the verdicts hold (``domain``)."""

    model: str
    layer_norms: list[LayerNormVerdict]
    writers: dict[str, Writer]
    training: bool = False
    domain: ShapeDomain | None = None
    _model_id: int = field(default=0, repr=False)
    _analysis: ZeroMeanAnalysis | None = field(default=None, repr=False)
    _traced: tuple = field(default=((), {}), repr=False)
    _digests: dict = field(default_factory=dict, repr=False)  # tensor_digests of the model's state dict when analysed

    @property
    def foldable(self) -> list[LayerNormVerdict]:
        return [v for v in self.layer_norms if v.foldable]

    @property
    def refused(self) -> list[LayerNormVerdict]:
        return [v for v in self.layer_norms if not v.foldable]

    def writers_to_centre(self) -> list[Writer]:
        names = sorted({w for v in self.foldable for w in v.writers})
        return [self.writers[n] for n in names]

    def table(self, width: int | None = None) -> str:
        """One line per LayerNorm: name, width, eps, affine, verdict and reason (cut at ``width`` characters)."""
        size = max([len("LayerNorm")] + [len(v.name) for v in self.layer_norms])
        rows = [f"{'LayerNorm':{size}} {'d':>5} {'eps':>8} {'affine':>9}  verdict"]
        for v in self.layer_norms:
            verdict = "foldable" if v.foldable else "NOT foldable"
            why = f" ({len(v.writers)} writers centred)" if v.foldable else f": {v.reason}"
            if v.foldable and v.swap:
                verdict, why = "foldable, not swapped", f": {v.swap}"
            line = f"{v.name:{size}} {v.width:5d} {v.eps:8.0e} {v.affine:>9}  {verdict}{why}"
            rows.append(line if width is None or len(line) <= width else line[: width - 3] + "...")
        return "\n".join(rows)

    def summary(self) -> str:
        mode = "training" if self.training else "eval"
        shapes = f"; shapes: {self.domain.describe()}" if self.domain is not None else ""
        return (
            f"{self.model} ({mode} mode): {len(self.foldable)} of {len(self.layer_norms)} LayerNorms foldable, "
            f"{len(self.writers_to_centre())} writers to centre{shapes}"
        )

    def __str__(self) -> str:
        return self.summary() + "\n" + self.table()

    def to_table(self, columns=None):
        """The report as a :class:`lnbook.util.tables.Table` (HTML in a notebook and the book), one row per LayerNorm
        call, every reason whole (:meth:`table` cuts lines at a width): ``LayerNorm``, ``width``, ``ε`` (its eps as the
        page writes numbers, ``10⁻⁵`` rather than ``1e-05``, with every digit of the value: :func:`eps_text`),
        ``affine`` (in words: "gain and bias", "gain", "bias" or "none"), ``verdict`` ("foldable", "foldable, not swapped" or "refused"), ``writers centred`` and
        ``reason``; ``columns`` picks some of them. Without ``columns`` the ``reason`` column is left out when it is
        empty in every row (every LayerNorm foldable and swapped): a page shows no column of blank cells."""
        rows = []
        for v in self.layer_norms:
            verdict = ("foldable, not swapped" if v.swap else "foldable") if v.foldable else "refused"
            reason = v.swap if v.foldable and v.swap else ("" if v.foldable else v.reason)
            rows.append({"LayerNorm": v.name, "width": v.width, "ε": eps_text(v.eps), "affine": v.affine.replace("+", " and "),
                         "verdict": verdict, "writers centred": len(v.writers) if v.foldable else 0, "reason": reason})
        table = Table(rows, ["LayerNorm", "width", "ε", "affine", "verdict", "writers centred", "reason"])
        if columns is None:
            columns = [c for c in table.columns if c != "reason" or any(table.column("reason"))]
        return table.select(columns)


def eps_text(eps: float) -> str:
    """A LayerNorm's eps as a table cell: a power of ten in the page's notation with the fewest digits that give the
    value back exactly (``10⁻⁵`` for ``1e-5``, ``1.5×10⁻⁶`` for ``1.5e-6``, ``0`` for ``0.0``), never a rounded value.

    >>> eps_text(1e-5), eps_text(1.5e-6), eps_text(1e-12), eps_text(0.0)
    ('10⁻⁵', '1.5×10⁻⁶', '10⁻¹²', '0')
    """
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0 or eps == float("inf"):
        raise ValueError(f"a LayerNorm's eps is a finite number >= 0, got {eps!r}")
    for digits in range(17):  # 17 significant digits give every float64 back
        if float(format(eps, f".{digits}e")) == eps:
            return power_of_ten(eps, f".{digits}p")
    raise AssertionError(f"no exact decimal form of {eps!r} found")  # pragma: no cover - 17 digits always suffice


def _affine_of(node) -> str:
    weight, bias = _arg(node, 2, "weight"), _arg(node, 3, "bias")
    parts = (["gain"] if weight is not None else []) + (["bias"] if bias is not None else [])
    return "+".join(parts) if parts else "none"


def _swap_refusal(model: nn.Module, owner: str | None) -> str:
    """Why the module that called a layer_norm may not be replaced by an RMSNorm ('' when it may)."""
    if owner is None:
        return "a functional layer_norm call, not an nn.LayerNorm module that can be swapped"
    module = _submodule(model, owner)
    if type(module) is not nn.LayerNorm:
        return (f"its module '{owner}' is a {type(module).__name__}, not exactly nn.LayerNorm (a subclass or another "
                "module may compute more than the norm, e.g. permute around it); only nn.LayerNorm is swapped")
    if module._forward_hooks or module._forward_pre_hooks:
        return f"its module '{owner}' has forward hooks, which a swap would drop"
    if len(module.normalized_shape) != 1:
        return f"its module '{owner}' normalises over {len(module.normalized_shape)} dimensions"
    return ""


def find_foldable_layernorms(
    model: nn.Module, example_inputs, example_kwargs: dict | None = None, *, training: bool = False,
    enlarge: bool = True,
) -> FoldReport:
    """Trace ``model`` on the example inputs and report which of its LayerNorms are foldable.

    A LayerNorm is *foldable* when its input has zero mean over the normalised features for every
    input of the traced shape domain once the mean-blind writers are centred
    (:mod:`lnbook.folding.zero_mean`); it is then exactly an RMSNorm with the same ``eps``. The model
    is traced with dynamic shapes (:func:`lnbook.folding.tracing.trace_model`); ``report.domain`` says
    on which input shapes the verdicts hold. ``training=True`` traces the model in training mode
    (dropout is then active and breaks zero mean). ``enlarge=False`` traces the call as given, its sizes of 1
    fixed (:func:`lnbook.folding.tracing.trace_model`). Raises
    :class:`~lnbook.folding.tracing.UntraceableModelError` naming the module where tracing failed, and ``ValueError``
    for a model holding quantised modules (``torch.ao.quantization``), which the fold cannot analyse.
    """
    quantised: list[str] = []
    for name, module in model.named_modules() if isinstance(model, nn.Module) else ():  # (a non-Module: trace_model's TypeError)
        if is_quantised_module(module) and not any(name.startswith(q + ".") for q in quantised):
            quantised.append(name or "the model itself")
    if quantised:
        raise ValueError(
            f"cannot analyse {type(model).__name__} for folding: it holds quantised modules ({', '.join(quantised[:3])}"
            f"{', ...' if len(quantised) > 3 else ''}). Quantisation and folding do not compose here: a quantised module "
            "cannot be traced, and is not among the operations the fold's proof has rules for (its weights' column means "
            "are not zero after rounding to integers); a folded model refuses to have its modules quantised. Fold and run "
            "the unquantised model, or quantise it and keep its LayerNorms")
    program, domain, args, kwargs = trace_model(model, example_inputs, example_kwargs, training=training,
                                                enlarge=enlarge)
    analysis = ZeroMeanAnalysis(program, model)
    verdicts: list[LayerNormVerdict] = []
    for node in analysis.graph.nodes:
        if op_name(node) != "aten.layer_norm.default":
            continue
        shape = list(node.args[1])
        eps = float(_arg(node, 4, "eps", 1e-5))
        module = _module_of(node)
        owner = module[0] if module is not None and module[0] else None
        swap = _swap_refusal(model, owner)
        owner = owner if owner is not None and _submodule(model, owner) is not None else None
        affine = _affine_of(node)
        width = int(shape[-1])
        if len(shape) != 1:
            verdicts.append(LayerNormVerdict(node.name, owner, width, eps, affine, False,
                                             f"{describe_node(node)} normalises over {len(shape)} dimensions {shape}", swap=swap))
            continue
        if not feature_width_ok(node):
            verdicts.append(LayerNormVerdict(node.name, owner, width, eps, affine, False,
                                             f"{describe_node(node)} normalises an axis of size {width} < 2", swap=swap))
            continue
        ok, why, writers = analysis.zero_mean(node.args[0], -1)
        relied = tuple(sorted(analysis.relied_on(node.args[0], -1)))
        if ok:
            why = f"input zero-mean after centring {len(writers)} writers" if writers else "its input is zero-mean with no writer to centre"
            if relied:
                named = ", ".join(analysis.describe_relied(r) for r in relied)
                why += f", taking {named} as centred up to rounding (the fold's check measures their stored means)"
            elif not writers:
                why = "its input is zero-mean without any centring"
        verdicts.append(LayerNormVerdict(node.name, owner, width, eps, affine, ok, why, tuple(sorted(writers)), swap, relied))
    return FoldReport(type(model).__name__, verdicts, analysis.writers, training, domain, id(model), analysis, (args, kwargs),
                      tensor_digests(model.state_dict()))


def _submodule(model: nn.Module, name: str) -> nn.Module | None:
    try:
        return model.get_submodule(name)
    except AttributeError:
        return None


class RMSNormWithBias(nn.RMSNorm):
    """``torch.nn.RMSNorm`` (gain included) followed by a per-feature bias.

    ``torch.nn.RMSNorm`` has no bias; a folded LayerNorm keeps its bias as this separate add
    (or, with ``fold_layernorms(..., affine="fold")``, moves it into the next linear layer).
    """

    def __init__(self, width: int, eps: float, weight: torch.Tensor | None, bias: torch.Tensor):
        super().__init__(width, eps=eps, elementwise_affine=weight is not None, device=bias.device, dtype=bias.dtype)
        if weight is not None:
            self.weight.data.copy_(weight)
        self.bias = nn.Parameter(bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + self.bias


def _make_rms(ln: nn.LayerNorm, eps: float, keep_affine: bool) -> nn.Module:
    width = ln.normalized_shape[0]
    weight = ln.weight.detach() if keep_affine and ln.weight is not None else None
    bias = ln.bias.detach() if keep_affine and ln.bias is not None else None
    if bias is not None:
        return RMSNormWithBias(width, eps, weight, bias)
    ref = ln.weight if ln.weight is not None else None
    kw = {} if ref is None else {"device": ref.device, "dtype": ref.dtype}
    rms = nn.RMSNorm(width, eps=eps, elementwise_affine=weight is not None, **kw)
    if weight is not None:
        rms.weight.data.copy_(weight)
    return rms


def _runs_the_swapped_norms(module, inputs):
    """A no-op forward pre-hook. Its presence turns off the fused fast path of
    ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` (which would compute LayerNorm
    with the norm's parameters instead of calling the swapped RMSNorm)."""
    return None


def _set_submodule(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)
    fused = (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)
    if isinstance(parent, fused) and _runs_the_swapped_norms not in parent._forward_pre_hooks.values():
        parent.register_forward_pre_hook(_runs_the_swapped_norms)


def _centred_norm_biases(model: nn.Module) -> tuple[tuple[str, int], ...]:
    """The biases of the model's LayerNorms that the zero-mean analysis reads as centred (mean within
    :func:`lnbook.folding.zero_mean.bias_centred_within_rounding`, the rule of ``_norm_output``): like an
    already-centred writer, such a bias is centred exactly in the float64 check copies, so that the check tests
    the model the proof is about (a float32 bias centred in float32 keeps a mean of about 1e-8, far above the
    float64 tolerance: the referee's false alarm)."""
    out = []
    for name, m in model.named_modules():
        b = getattr(m, "bias", None)
        if isinstance(m, nn.LayerNorm) and isinstance(b, torch.Tensor) and b.dim() == 1 and b.is_floating_point():
            if bias_centred_within_rounding(b):
                out.append((f"{name}.bias" if name else "bias", 0))
    return tuple(out)


def _centre(model: nn.Module, params: tuple[tuple[str, int], ...]) -> None:
    state = {**dict(model.named_parameters(remove_duplicate=False)), **dict(model.named_buffers(remove_duplicate=False))}
    with torch.no_grad():
        for name, axis in params:
            p = state[name]
            centred = p.double() - p.double().mean(dim=axis, keepdim=True)
            p.copy_(centred.to(p.dtype))


# operations that pick whole feature vectors of tokens: gain and bias commute with them (gamma * n[i] + beta is
# (gamma * n + beta)[i]), so a linear layer behind them may absorb the affine (OPT's head reads ``h[:, -k:]``)
TOKEN_SELECTIONS = {"aten.slice.Tensor", "aten.select.int", "aten.narrow.default", "aten.index_select.default"}


def _affine_consumers(report: FoldReport, verdict: LayerNormVerdict) -> tuple[list[tuple[str, str | None, str]], str]:
    """The readers of a LayerNorm that can absorb its gain and bias, or a reason why not.

    Each reader is ``(weight, bias, layout)``: ``"linear"`` for ``aten.linear`` (``x W^T + b``, ``W`` of shape
    ``(out, in)``: ``nn.Linear``) and ``"addmm"`` for ``aten.addmm(b, x, W)`` (``x W + b``, ``W`` of shape
    ``(in, out)``: GPT-2's ``Conv1D``), reached from the norm's output through copies, reshapes and transposes that
    keep the features last and whole, and through selections of tokens (:data:`TOKEN_SELECTIONS`)."""
    analysis = report._analysis
    norm = analysis.nodes[verdict.node]
    for index, key, what in ((2, "weight", "gain"), (3, "bias", "bias")):
        param = _arg(norm, index, key)
        others = [describe_node(u) for u in param.users if u is not norm] if isinstance(param, Node) else []
        if others:  # affine="fold" drops the module's gain and bias: any other reader of them would break
            return [], f"its {what} is also read by {', '.join(others)}, which would lose it when the module's affine is dropped"
    found = []
    todo = [norm]  # the norm's output and copies whose features stay last and whole
    transparent = IDENTITY_OPS | VIEW_OPS | PERMUTE_OPS | TOKEN_SELECTIONS | {"aten.dropout.default"}
    while todo:
        node = todo.pop()
        for user in node.users:
            name = op_name(user)
            if name == "aten._assert_tensor_metadata.default":
                continue
            if name in transparent and linear_inputs(user, -1) == [(node, -1)]:
                todo.append(user)
                continue
            if user.op == "output":
                return [], ("it is returned by the model (GPT2Model's ln_f, a bare decoder's final norm): its gain and "
                            "bias cannot move into a layer outside the model")
            if name == "aten.linear.default" and user.args[0] is node:
                weight, bias, layout = user.args[1], _arg(user, 2, "bias"), "linear"
            elif name == "aten.addmm.default" and user.args[1] is node:
                if _arg(user, 3, "beta", 1) != 1 or _arg(user, 4, "alpha", 1) != 1:
                    return [], f"its output is read by {describe_node(user)} with beta or alpha other than 1"
                weight, bias, layout = user.args[2], user.args[0], "addmm"
                if not (isinstance(bias, Node) and analysis.value(bias) is not None and analysis.value(bias).dim() == 1):
                    return [], f"its output is read by {describe_node(user)}, whose added term is not a stored bias vector"
            else:
                return [], (f"its output is read by {describe_node(user)}, which is not a linear layer that can absorb the "
                            "gain and bias (only aten.linear, as in nn.Linear, and aten.addmm with a stored (in, out) weight, "
                            "as in GPT-2's Conv1D, can; behind copies, reshapes, transposes and selections of tokens)")
            for p in (weight, bias):
                if p is not None and (analysis.value(p) is None or len(p.users) != 1):
                    return [], f"the linear layer {describe_node(user)} shares its weights or computes them"
            found.append((analysis.param_of[weight.name], analysis.param_of[bias.name] if bias is not None else None, layout))
    if not found:
        return [], "its output is not used"
    return found, ""


def _fold_affine_into(model: nn.Module, ln: nn.LayerNorm, consumers: list[tuple[str, str | None, str]], name: str) -> None:
    gain = ln.weight.detach() if ln.weight is not None else None
    shift = ln.bias.detach() if ln.bias is not None else None
    with torch.no_grad():
        for weight_name, bias_name, layout in consumers:
            w = model.get_parameter(weight_name)
            if shift is not None:
                extra = w.double() @ shift.double() if layout == "linear" else shift.double() @ w.double()
                if bias_name is not None:
                    b = model.get_parameter(bias_name)
                    b.copy_((b.double() + extra).to(b.dtype))
                else:
                    owner = model.get_submodule(weight_name.rpartition(".")[0])
                    if not isinstance(owner, nn.Linear):
                        raise ValueError(f"cannot fold the bias of {name} into {weight_name}: it has no bias to absorb it")
                    owner.bias = nn.Parameter(extra.to(w.dtype))
            if gain is not None:
                factor = gain.double() if layout == "linear" else gain.double()[:, None]
                w.copy_((w.double() * factor).to(w.dtype))


def _plan(report: FoldReport):
    """``(swaps, skipped)``: the nn.LayerNorm modules to replace (with their calls) and the reasons for the rest."""
    calls: dict[str, list[LayerNormVerdict]] = {}
    for v in report.layer_norms:
        calls.setdefault(v.module or f"<functional {v.node}>", []).append(v)
    swaps, skipped = [], []
    for name, group in calls.items():
        if not all(v.foldable for v in group):
            why = next(v.reason for v in group if not v.foldable)
            skipped.append(f"{name}: {why}" + (f" (module called {len(group)} times)" if len(group) > 1 else ""))
        elif group[0].swap:
            skipped.append(f"{name}: foldable but not swapped: {group[0].swap}")
        else:
            swaps.append((name, group))
    return swaps, skipped


def _apply(model: nn.Module, report: FoldReport, swaps, consumers, affine: str, eps: float | None) -> nn.Module:
    """Centre the needed writers of ``model`` (in place) and swap the planned LayerNorms."""
    _centre(model, tuple(p for w in report.writers_to_centre() for p in w.params))
    for name, _ in swaps:
        ln = model.get_submodule(name)
        new_eps = ln.eps if eps is None else eps
        if affine == "fold":
            _fold_affine_into(model, ln, consumers[name], name)
        _set_submodule(model, name, _make_rms(ln, new_eps, keep_affine=affine == "keep"))
    return model


def check_tolerance(dtype: torch.dtype) -> float:
    """The relative tolerance of the fold check: ``2**12`` machine epsilons of ``dtype``, for float64 and float32.

    The check runs in float64 (``2**12 * 2**-52``, about ``9e-13``) whenever the model can be copied to float64 and run there;
    rounding of the folded model is then far below it and a broken rule far above it. In float32 it is
    ``2**-11``, about ``4.9e-4``. A dtype less precise than float32 raises ``ValueError``: there ``2**12`` machine
    epsilons are 32 (bfloat16) or 4 (float16) relative to the output's largest entry, a bound that no wrong fold
    exceeds (LayerNorm swapped for RMSNorm without centring moves the output by about half its size), so a check at
    that tolerance would prove nothing.
    """
    if not checkable_dtype(dtype):
        raise ValueError(
            f"no fold check tolerance in {str(dtype)[6:]}: 2^12 of its machine epsilons are "
            f"{4096 * torch.finfo(dtype).eps:g} relative to the output's largest entry, which no wrong fold exceeds. "
            "Check in float64 or float32 (copy the model with .double() or .float())")
    return 4096 * torch.finfo(dtype).eps


def checkable_dtype(dtype: torch.dtype) -> bool:
    """Can a fold be checked in ``dtype`` at :func:`check_tolerance`? Only float64 and float32 (and any floating
    dtype at least as precise as float32): see :func:`check_tolerance`."""
    return dtype.is_floating_point and torch.finfo(dtype).eps <= torch.finfo(torch.float32).eps


@torch.no_grad()
def verify_fold(model: nn.Module, report: FoldReport, affine: str = "keep", *, seed: int = 0) -> list[tuple[tuple, float]]:
    """Check the fold of ``report`` in float64 on random inputs of two shapes drawn from ``report.domain``.

    The writers are centred and the norms swapped on a float64 copy of ``model`` (so the check tests
    the rules, not the rounding of the model's own dtype), both copies run in eval mode on inputs drawn
    like the traced example (:func:`lnbook.folding.tracing.draw_inputs`), at the traced sizes and with
    every dynamic size changed. Returns ``[(shapes, relative difference)]``; raises ``RuntimeError``
    when a difference exceeds :func:`check_tolerance` (float64 or, for a model that cannot run in
    float64, its own dtype). A model whose forward pass casts between floating dtypes
    (:func:`floating_casts`) cannot be checked in float64 when the casts make the float64 copy fail or
    round: ``ValueError`` names the casts and says what to do (a fold is never accepted unchecked).

    Writers the analysis accepts as already centred (each column's mean within the rounding of that
    column in its own dtype, :func:`lnbook.folding.zero_mean.centred_within_rounding`; e.g. a float32 model
    trained under the CCC) are centred exactly in *both* copies of this first comparison, and so are the
    LayerNorm biases centred up to rounding: it tests the rules on the model the proof is about, whose weights
    differ from the given ones by at most those residual means, a rounding of the model's dtype (in float32
    about ``1e-8``, far above the float64 tolerance).

    The folded model keeps those residual means, and each was judged against its own tensor's magnitude, not
    against the LayerNorm input that they add up in: large biases that cancel in a sum leave their residual means
    beside a small input. So when a swapped LayerNorm's verdict takes stored tensors as centred up to rounding
    (``LayerNormVerdict.relies_on``) and one of them has a mean that is not exactly zero, a second comparison
    keeps them as stored in both float64 copies (the folded copy centres only the writers the fold centres, as
    :func:`fold_layernorms` does): it measures what the folded model computes. A difference above
    :func:`check_tolerance` of the model's own dtype raises ``ValueError`` naming each LayerNorm whose stored
    tensors alone make the difference exceed it (or all of them, when only together they do), and those tensors.
    """
    with checking_copies():  # copies only: the guards of earlier rewrites on them do nothing (tracing_for_analysis)
        return _verify_fold(model, report, affine, seed)


def _verify_fold(model: nn.Module, report: FoldReport, affine: str, seed: int) -> list[tuple[tuple, float]]:
    swaps, _ = _plan(report)
    consumers = {name: _affine_consumers(report, group[0])[0] for name, group in swaps} if affine == "fold" else {}
    casts = floating_casts(report)
    try:
        stored = copy.deepcopy(model).double().eval()
        if not casts:  # (with casts, a failing float64 run is refused by name in _differences)
            _run_at_traced_sizes(report, stored, seed)  # a float32 constant built in forward fails only when run
        dtype = torch.float64
    except Exception as error:  # noqa: BLE001 - a model that has no float64 form is checked in its own dtype
        if not checkable_dtype(_model_dtype(model)):
            raise ValueError(
                f"cannot check the fold of {report.model}: its float64 copy fails ({type(error).__name__}: {error}), "
                f"and in its own dtype, {str(_model_dtype(model))[6:]}, 2^12 machine epsilons are "
                f"{4096 * torch.finfo(_model_dtype(model)).eps:g} relative to the output's largest entry: a check at "
                "that tolerance passes a wrong fold, so it is not made. Make the model castable to float64 and runnable "
                "there (.double(); tensors built inside forward should take the input's dtype, e.g. "
                "torch.ones(n, n, dtype=x.dtype)) and fold again, or pass check=False and compare the outputs yourself "
                "(max_output_difference) against the model's own rounding in its dtype") from error
        stored, dtype = copy.deepcopy(model).eval(), None
    original = copy.deepcopy(stored)
    _centre(original, tuple(p for w in report.writers.values() if w.already_centred for p in w.params))
    _centre(original, _centred_norm_biases(model))
    folded = _apply(copy.deepcopy(original), report, swaps, consumers, affine, None).eval()
    tol = check_tolerance(dtype or _model_dtype(model))

    def rule_error(rel, shapes):
        if casts and dtype is not None:
            raise _uncheckable(report, casts, f"the float64 copies differ by {rel:.3g}, above the tolerance {tol:.1e}, "
                               "which a rounding cast explains as well as a broken rule")
        raise RuntimeError(
            f"the folded {report.model} differs from the original by {rel:.3g} (relative to the largest "
            f"entry of the same output tensor, tolerance {tol:.1e}) on random inputs of shapes {shapes}; please report this model: "
            "an operation in it breaks a rule of the analysis (unless the example had a size of 1: it is then traced "
            "at 2 with its tensors redrawn, and an input tied to its size, such as a causal mask, does not carry "
            "over; fold with an example of size 2 or more)"
        )

    results = _differences(report, original, folded, dtype, casts, seed, tol, rule_error)
    del original, folded  # at most three float64 copies of the model alive at once, in every path (the chapter)
    residual = _stored_residuals(report, swaps)
    if residual:
        _check_stored_residuals(model, report, stored, swaps, consumers, affine, residual, dtype, casts, seed)
    return results


def _run_at_traced_sizes(report: FoldReport, model: nn.Module, seed: int) -> None:
    """Run the float64 copy ``model`` once on float64 inputs at the traced sizes (drawn as in :func:`_differences`);
    raises what the forward pass raises, e.g. a float32 constant built inside ``forward`` meeting a float64 tensor."""
    args, kwargs = report._traced
    a, k = draw_inputs(args, kwargs, None, report.domain, seed)
    model(*(_to_double(t) for t in a), **{key: _to_double(t) for key, t in k.items()})


def _differences(report: FoldReport, original: nn.Module, folded: nn.Module, dtype, casts, seed: int, tol: float,
                 refuse) -> list[tuple[tuple, float]]:
    """``[(shapes, relative difference)]`` of ``original`` and ``folded`` on random inputs at the traced sizes and at
    the first other sizes the model runs at; ``refuse(rel, shapes)`` is called (and raises) on a difference above
    ``tol``, unless it is ``None``."""
    args, kwargs = report._traced
    env = report.domain.values(args, kwargs) if report.domain is not None else {}
    others = report.domain.other_sizes(env) if isinstance(env, dict) and env else []
    results = []
    for i, candidates in enumerate([[None], others]):
        for sizes in candidates:
            a, k = draw_inputs(args, kwargs, sizes, report.domain, seed + i)
            if dtype is not None:
                a, k = tuple(_to_double(t) for t in a), {key: _to_double(t) for key, t in k.items()}
            try:
                outs = _outputs(original, folded, a, k)
                if _void(outs[0]) and any(map(is_float_zeros, pytree.tree_leaves((tuple(args), dict(kwargs))))):  # a mask of zeros drawn at random is no mask
                    a, k = draw_inputs(args, kwargs, sizes, report.domain, seed + i, keep_zeros=True)
                    if dtype is not None:
                        a, k = tuple(_to_double(t) for t in a), {key: _to_double(t) for key, t in k.items()}
                    outs = _outputs(original, folded, a, k)
            except Exception as error:  # noqa: BLE001 - the model does not run at these sizes (e.g. beyond its positions)
                if casts and dtype is not None:
                    raise _uncheckable(report, casts, f"the float64 copy fails with {type(error).__name__}: {error}") from error
                if sizes is None or sizes is candidates[-1]:
                    raise
                continue
            shapes = tuple(tuple(t.shape) for t in list(a) + list(k.values()) if isinstance(t, torch.Tensor))
            if _void(outs[0]):  # referee 28 of chapter 7, finding 1: NaN in both counts as equal, so nothing is compared
                raise ValueError(
                    f"cannot check the fold of {report.model}: on the random inputs that the check draws like the "
                    f"example (shapes {shapes}; floating tensors drawn around the example's mean and spread, additive "
                    "masks of -inf or of zeros and values at most -1e4, and boolean tensors, kept as given) the original "
                    "model's outputs are NaN or infinite everywhere, so a comparison would accept any fold. If one of "
                    "the inputs is a mask in another convention, pass it as a boolean tensor or with -inf; else pass "
                    "check=False and compare the outputs yourself (relative_output_difference)")
            rel = _relative(*outs)
            results.append((shapes, rel))
            if not rel <= tol and refuse is not None:
                refuse(rel, shapes)
            break
    return results


def _stored_residuals(report: FoldReport, swaps) -> dict[str, tuple[str, ...]]:
    """For each swapped LayerNorm, the entries of its verdicts' ``relies_on`` (stored tensors taken as centred up to
    rounding) that have a stored mean other than exactly zero; LayerNorms with none are left out."""
    analysis = report._analysis
    out = {}
    for name, group in swaps:
        relied = sorted({r for v in group for r in v.relies_on})
        nonzero = tuple(r for r in relied if any(bool((analysis.state[p].detach().double().mean(dim=axis) != 0).any())
                                                 for p, axis in analysis.relied_params(r)))
        if nonzero:
            out[name] = nonzero
    return out


def _check_stored_residuals(model, report, stored, swaps, consumers, affine, residual, dtype, casts, seed) -> None:
    """The second comparison of :func:`verify_fold`: the relied-on tensors kept as stored, the model's own tolerance."""
    analysis = report._analysis
    if not checkable_dtype(_model_dtype(model)):
        # Unreached with the analysis as it is (in bfloat16 and float16 a stored tensor counts as centred only with
        # an exactly zero mean: lnbook.folding.zero_mean.DISTINGUISHABLE), and refused if reached: 2^12 machine
        # epsilons of a half-precision dtype (32 or 4 relative) would accept any difference the stored means make.
        raise ValueError(
            f"cannot fold {report.model}: LayerNorm(s) {', '.join(residual)} rely on stored tensors whose means are "
            f"not exactly zero, and in {str(_model_dtype(model))[6:]} there is no tolerance at which their effect can "
            "be checked (2^12 machine epsilons are not below 1). Centre those tensors exactly and fold again")
    tol = check_tolerance(_model_dtype(model))
    kept = _apply(copy.deepcopy(stored), report, swaps, consumers, affine, None).eval()
    results = _differences(report, stored, kept, dtype, casts, seed, float("inf"), None)
    # a relied-on embedding table is a writer per row: random ids drawn on the example's range may miss the one row
    # whose mean matters, so every row of each such table is also run once (one input holding every index)
    relied = {p for rs in residual.values() for r in rs for p, _ in analysis.relied_params(r)}
    results += _every_row_differences(report, stored, kept, relied, dtype)
    del kept
    worst = max(results, key=lambda r: r[1])
    if worst[1] <= tol:
        return
    guilty = []
    for name, relied in residual.items():  # each LayerNorm alone: every other relied-on tensor centred exactly
        others = tuple({p for other, rs in residual.items() if other != name for r in rs for p in analysis.relied_params(r)}
                       - {p for r in relied for p in analysis.relied_params(r)})
        alone = copy.deepcopy(stored)
        _centre(alone, others)
        one = [(n, g) for n, g in swaps if n == name]
        swapped = _apply(copy.deepcopy(alone), report, one, {n: consumers[n] for n, _ in one if n in consumers}, affine, None)
        diffs = _differences(report, alone, swapped.eval(), dtype, casts, seed, float("inf"), None)
        diffs += _every_row_differences(report, alone, swapped.eval(), {p for r in relied for p, _ in analysis.relied_params(r)}, dtype)
        del alone, swapped  # freed before the next LayerNorm's copies are made
        if not max(rel for _, rel in diffs) <= tol:  # (a NaN difference is refused, not passed)
            guilty.append(name)
    named = "; ".join(f"LayerNorm {n} takes {', '.join(analysis.describe_relied(r) for r in residual[n])} as centred "
                      "up to rounding" for n in (guilty or list(residual)))
    together = "" if guilty else " (only all of them together exceed the tolerance)"
    raise ValueError(
        f"cannot fold {report.model}: {named}{together}. Each column's mean is within the "
        "rounding of that column's own magnitude, but these means add up at the LayerNorm's input, whose magnitude can "
        f"be far smaller (large biases that cancel): with them as stored, the folded model differs from the original by "
        f"{worst[1]:.3g} (relative to the largest entry of the same output tensor) on {_where(worst[0])}, "
        f"above the tolerance {tol:.1e} (2^12 machine epsilons of {str(_model_dtype(model))[6:]}, the model's dtype; "
        f"compared in {'float64' if dtype else 'that dtype'}). "
        "Centre those tensors exactly (subtract each column's mean and store the result: the model then changes by that "
        "residual, which max_output_difference measures) and fold again, or keep these LayerNorms"
    )


def _where(shapes: tuple) -> str:
    """Where a difference of :func:`_check_stored_residuals` was measured, in words."""
    if shapes and shapes[0] and shapes[0][0] == "every index of an embedding":
        return f"an input holding every index of a relied-on embedding table ({shapes[0][1]} rows)"
    return f"random inputs of shapes {shapes}"


def _embedding_index_inputs(report: FoldReport, params: set) -> dict[int, int]:
    """``{position among the traced call's tensor inputs: rows}`` for every tensor input that the traced graph passes
    directly as the indices of ``aten.embedding`` of a weight in ``params`` (the number of rows of that weight; the
    largest where one input indexes several)."""
    program = report._analysis.program
    param_of = program.graph_signature.inputs_to_parameters
    users = [n.name for n in program.graph.nodes if n.op == "placeholder" and n.name in set(program.graph_signature.user_inputs)]
    found: dict[int, int] = {}
    for node in program.graph.nodes:
        if op_name(node) != "aten.embedding.default":
            continue
        weight, indices = node.args[0], node.args[1]
        if param_of.get(getattr(weight, "name", None)) in params and getattr(indices, "name", None) in users:
            rows = int(weight.meta["val"].shape[0])
            i = users.index(indices.name)
            found[i] = max(found.get(i, 0), rows)
    return found


def _every_row_differences(report: FoldReport, original: nn.Module, folded: nn.Module, params: set, dtype) -> list:
    """``[(shapes, relative difference)]`` of ``original`` and ``folded`` on inputs in which each input that indexes a
    relied-on embedding table holds every index of that table at least once (``arange`` laid out over as many rows of
    the example's shape as needed; the other inputs as in the example). Empty when no relied-on table is indexed
    directly by an input."""
    where = _embedding_index_inputs(report, params)
    if not where:
        return []
    args, kwargs = report._traced
    flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    tensor_at = [i for i, leaf in enumerate(flat) if isinstance(leaf, torch.Tensor)]
    results = []
    for position, rows in where.items():
        leaf = flat[tensor_at[position]]
        if leaf.dim() < 2 or leaf.is_floating_point():  # (batch, ..., length) token ids only: other layouts are not run
            continue
        length = leaf.shape[-1]
        batches = -(-rows // length)  # every index once, in rows of the example's last dimension
        out = []
        for i, other in enumerate(flat):
            if not isinstance(other, torch.Tensor):
                out.append(other)
            elif i == tensor_at[position]:
                ids = torch.arange(batches * length, dtype=other.dtype, device=other.device) % rows
                out.append(ids.reshape(batches, *([1] * (other.dim() - 2)), length).expand(batches, *other.shape[1:-1], length).contiguous())
            elif other.dim() >= 1 and other.shape[0] == leaf.shape[0]:  # same batch: repeat the example's first row
                out.append(other[:1].expand(batches, *other.shape[1:]).contiguous())
            else:
                out.append(other)
        a, k = pytree.tree_unflatten(out, spec)
        if dtype is not None:
            a, k = tuple(_to_double(t) for t in a), {key: _to_double(t) for key, t in k.items()}
        try:
            rel = relative_output_difference(original, folded, a, k)
        except Exception as error:  # noqa: BLE001 - the model does not run on that layout: the rows stay unmeasured
            raise ValueError(f"cannot fold {report.model}: its verdicts take an embedding table of {rows} rows as centred "
                             "up to rounding, and every row of it must be measured, but the model does not run on an input "
                             f"holding every index ({type(error).__name__}: {error}). Centre that table exactly and fold "
                             "again, or keep these LayerNorms") from error
        results.append(((("every index of an embedding", rows),), rel))
    return results


def floating_casts(report: FoldReport) -> list[str]:
    """The casts inside the traced forward pass that change a floating tensor's dtype, as
    ``"aten.to.dtype at the top-level model (float32 -> float16)"``: what the float64 check cannot run through."""
    found = []
    for node in report._analysis.graph.nodes if report._analysis is not None else []:
        if op_name(node) not in CAST_OPS or not node.args:
            continue
        source, out = node.args[0].meta.get("val"), node.meta.get("val")
        if isinstance(source, torch.Tensor) and isinstance(out, torch.Tensor) and out.is_floating_point() \
                and source.is_floating_point() and source.dtype != out.dtype:
            found.append(f"{describe_node(node)} ({str(source.dtype)[6:]} -> {str(out.dtype)[6:]})")
    return found


def _uncheckable(report: FoldReport, casts: list[str], what: str) -> ValueError:
    return ValueError(
        f"cannot check the fold of {report.model}: its forward pass casts between floating dtypes "
        f"({'; '.join(casts)}), so the float64 check cannot test the fold ({what}). Remove the casts (or "
        "make them follow the input's dtype) and fold again, or pass check=False and compare the outputs "
        "yourself (max_output_difference) at the precision of the lowest dtype you cast to"
    )


def _to_double(t):
    return t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t


def _model_dtype(model: nn.Module) -> torch.dtype:
    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.get_default_dtype()


@tf32(False)  # tracing runs the model and the fold is checked: full float32 (lnbook/util/device.py)
def fold_layernorms(
    model: nn.Module,
    example_inputs,
    example_kwargs: dict | None = None,
    *,
    affine: str = "keep",
    eps: float | None = None,
    report: FoldReport | None = None,
    check: bool = True,
    prove_calls: bool = True,
) -> nn.Module:
    """A copy of ``model`` with its foldable LayerNorms replaced by RMSNorm; ``model`` is unchanged.

    The writers that feed the foldable LayerNorms are centred (weights ``W - W.mean(dim=0)``,
    bias minus its mean, embedding rows minus their mean), then each foldable module whose type is
    exactly ``nn.LayerNorm`` is swapped for an RMSNorm with the **same** ``eps`` (subclasses and
    functional calls are left, with the reason). ``affine="keep"`` keeps the gain in the RMSNorm and
    the bias as a separate add (:class:`RMSNormWithBias`); ``affine="fold"`` moves them into the linear
    layers that read the norm (``W diag(gain)``, ``b + W bias``) and raises ``ValueError`` for a
    LayerNorm whose output is read by anything else. LayerNorms that are not foldable are left as they
    are, with a warning that gives the reason; when none is foldable the function raises ``ValueError``.

    A model in training mode is folded as an eval-mode copy, with a warning: dropout between a writer
    and a LayerNorm breaks zero mean while training. The result is in eval mode, refuses to run in training mode
    (:func:`refuse_training_mode`), records the fold in a Hugging Face model's config (``config.lnbook_fold``,
    saved by ``save_pretrained``; :func:`lnbook.folding.saving.load_folded` reloads it), and each call class is
    proved before it runs (:class:`lnbook.folding.call_proofs.CallProver`): a call outside the shape domain of
    the trace (``report.domain``), or whose non-tensor arguments (flags, numbers, strings, ``None``,
    containers, a ``transformers`` cache, defaults left out) or model configuration are not those of the
    traced call, is first traced on a copy of the original model and analysed; it runs when the same
    LayerNorms fold through the same writers there and :func:`verify_fold` passes at that call's sizes (with
    ``check=True``: the eager forward can differ from its trace), and is refused with the reason (a ``ValueError``)
    otherwise. So ``generate`` with its cache works on a folded causal LM. ``prove_calls=False`` keeps no copy
    of the original and refuses every such call, naming the argument or the dimension (fold again with that
    call's arguments as the example): that includes inputs of another rank and a call under
    ``torch.func.vmap`` (which shows it one slice).

    ``eps=None`` copies each LayerNorm's ``eps`` (the exact conversion), and so does an ``eps`` equal to every
    swapped LayerNorm's own; another value is applied with a warning that the folded model then differs. ``check=True``
    (the default) runs :func:`verify_fold` on the exact conversion, whatever ``eps`` is applied after it: float64
    copies of both models on random inputs of two shapes, a relative difference above :func:`check_tolerance` raises
    ``RuntimeError``, and stored tensors taken as centred up to rounding are measured in the model's own dtype.
    A ``report=`` of this model made before its tensors changed is refused (:func:`refuse_stale_report`).
    """
    if affine not in AFFINE_MODES:
        raise ValueError(f"affine must be one of {AFFINE_MODES}, got {affine!r}")
    if eps is not None:
        eps = check_eps(eps)
    if model.training:
        warnings.warn(
            f"{type(model).__name__} is in training mode; folding an eval-mode copy (dropout between a writer and "
            "a LayerNorm breaks zero mean while training). The folded model is returned in eval mode.",
            stacklevel=2,
        )
    if report is None:
        report = find_foldable_layernorms(model, example_inputs, example_kwargs)
    elif report._model_id != id(model) or report.training:
        raise ValueError("report= must come from find_foldable_layernorms(model, ...) on this model in eval mode")
    else:
        refuse_stale_report(report, model)
    if not report.layer_norms:
        raise ValueError(f"{report.model} has no LayerNorm to fold")
    swaps, skipped = _plan(report)
    if not swaps:
        what = "can be swapped" if any(v.foldable for v in report.layer_norms) else "is foldable"
        raise ValueError(f"no LayerNorm of {report.model} {what}:\n  " + "\n  ".join(skipped))
    consumers = {}
    if affine == "fold":
        for name, group in swaps:
            if len(group) > 1:
                raise ValueError(f"cannot fold the affine of {name}: the module is called {len(group)} times")
            found, why = _affine_consumers(report, group[0])
            if why:
                raise ValueError(
                    f"cannot fold the gain and bias of {name} into the next layer: {why}. "
                    "Use affine='keep' (RMSNorm with the gain, plus the bias as a separate add)"
                )
            consumers[name] = found
    if skipped:
        warnings.warn("LayerNorms left unchanged:\n  " + "\n  ".join(skipped), stacklevel=2)
    if eps is not None and all(model.get_submodule(name).eps == eps for name, _ in swaps):
        eps = None  # each LayerNorm's own eps: the exact conversion, checked and proved as with eps=None
    for name, _ in swaps:
        old = model.get_submodule(name).eps
        if eps is not None and eps != old:
            warnings.warn(
                f"{name}: RMSNorm eps={eps:g} differs from the LayerNorm's eps={old:g}; the folded model "
                "is then not equal to the original (eps enters both as mean square + eps)",
                stacklevel=2,
            )
    if check:  # the exact conversion (each LayerNorm's own eps), also when another eps is applied after it
        verify_fold(model, report, affine)
    original = copy.deepcopy(model).eval() if prove_calls and report.domain is not None else None
    folded = _apply(copy.deepcopy(model).eval(), report, swaps, consumers, affine, eps)
    added = sorted(set(dict(folded.named_parameters())) - set(dict(model.named_parameters())))
    if added:  # referee 33 of chapter 7, finding 4: weights that a plain reload drops without a word
        shown = ", ".join(added[:5]) + (f" and {len(added) - 5} more" if len(added) > 5 else "")
        warnings.warn(
            f"affine='fold' added {len(added)} {'bias' if len(added) == 1 else 'biases'} that the architecture lacks, "
            f"to bias-less linear layers reading a swapped norm ({shown}): the folded model computes the original function, but its weights no longer fit the "
            "original architecture, and a plain from_pretrained or load_state_dict(strict=False) into it drops these "
            "biases without an error (load_folded refuses them). Keep this fold whole with torch.save, or fold with "
            "affine='keep', whose weights reload as the original function",
            stacklevel=2,
        )
    _record_fold(folded, [name for name, _ in swaps], affine)
    declare_untied_head(folded)  # a head untied by hand under a stale tie_word_embeddings flag would be re-tied on reload
    folded.register_forward_pre_hook(refuse_training_mode)
    centred = frozenset(p for w in report.writers_to_centre() for p in w.params)
    folded.register_load_state_dict_pre_hook(RefuseUncentredWeights(centred, f"the folded {report.model}",
                                                                    proved=tensor_digests(folded.state_dict())))
    if report.domain is not None:
        what = f"the folded {report.model}"
        if eps is not None and any(model.get_submodule(n).eps != eps for n, _ in swaps):
            original = None  # another eps is not the original's function: nothing to prove
        relied = frozenset(p for _, group in swaps for v in group for r in v.relies_on for p in report._analysis.relied_params(r))
        prover = CallProver(report.domain, what, original=original, affine=affine, centred=centred, relied=relied,
                            swapped={name: consumers.get(name) for name, _ in swaps}, config=call_state(folded),
                            analyse=find_foldable_layernorms, consumers=_affine_consumers,
                            verify=verify_fold if check else None)
        folded.register_forward_pre_hook(prover, with_kwargs=True)
    guard_submodule_calls(folded, [name for name, _ in swaps], f"the folded {report.model}")
    # last, so that it records the fold's own hooks, and prepended, so that it runs first
    watch = RefuseChangesSinceFolding(folded, f"the folded {report.model}")
    folded.register_forward_pre_hook(watch, prepend=True)
    watch.record(folded)  # with itself among the hooks
    folded.register_load_state_dict_post_hook(record_after_load)
    return folded


def record_after_load(module: nn.Module, incompatible_keys) -> None:
    """A ``load_state_dict`` post-hook of every folded model: a state dict that
    :class:`RefuseUncentredWeights` let through (the model's own values, the values the fold proved, or centred
    writers) was copied into the parameters in place; take them as the proved ones
    (:func:`lnbook.folding.call_proofs.record_proved_state`), so that the next call is not refused for it."""
    record_proved_state(module)


def guard_submodule_calls(folded: nn.Module, swapped: list[str], what: str) -> None:
    """Register :class:`lnbook.folding.call_proofs.SubmoduleCallGuard` on ``folded``: every submodule on the path to a
    swapped norm (the norm included, the root excluded) refuses to be called outside a call of the whole model."""
    guard = SubmoduleCallGuard(what)
    folded.register_forward_pre_hook(guard.enter, prepend=True)
    folded.register_forward_hook(guard.leave, always_call=True)
    guarded = set()
    for name in swapped:
        parts = name.split(".")
        guarded |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    for name in sorted(guarded):
        folded.get_submodule(name).register_forward_pre_hook(guard.check)


def _record_fold(folded: nn.Module, swapped: list[str], affine: str) -> None:
    """Write which modules became RMSNorms, and the affine mode, into a Hugging Face model's config (a copy of the
    original's), so that ``save_pretrained`` saves it and :func:`lnbook.folding.saving.load_folded` can check the
    reloaded fold against it. Other models carry no config: nothing is recorded."""
    config = getattr(folded, "config", None)
    if config is not None and callable(getattr(config, "to_dict", None)):
        setattr(config, FOLD_RECORD, {"layer_norms": sorted(swapped), "affine": affine})


def refuse_training_mode(module: nn.Module, args) -> None:
    """A forward pre-hook of every folded model: a call in training mode raises ``ValueError``.

    The fold was proved, and checked, in eval mode. In training mode a dropout between a centred writer and a
    swapped norm scales each feature by its own random factor (0 or ``1/(1-p)``), so the RMSNorm's input is no
    longer zero-mean and the folded model no longer computes what the original computes with the same mask
    (``tests/folding/test_saving.py`` shows the difference). Refusing is the only answer that is never silently
    wrong; a model without dropout would agree, but the proof does not cover training mode at all.
    """
    if module.training:
        raise ValueError(
            f"this folded {type(module).__name__} is in training mode: the fold was proved in eval mode, and in "
            "training mode dropout between the centred writers and the RMSNorms breaks the zero mean that makes "
            "RMSNorm equal to LayerNorm, so it would compute something else than the original. Call .eval() "
            "before running it; to train, train the original model (with LayerNorm, or under the column-centred "
            "constraint of lnbook.folding.ccc_training) and fold it afterwards"
        )
    return None


class RefuseUncentredWeights:
    """A ``load_state_dict`` pre-hook of every folded model: a state dict that changes any weight is refused.

    The fold was proved for the folded model's own weights: the writers it centred, the writers it found centred
    already, and the gains and biases of the LayerNorms upstream whose outputs it found zero-mean. A state dict that
    puts other values into any of them (``folded.load_state_dict(original.state_dict())``: the original's un-centred
    writers; a "fine-tuned" gain of an upstream LayerNorm; a writer that is no longer centred) would load without a
    complaint from torch and leave RMSNorms that may see non-zero means, a model that silently computes something
    else. Before anything is loaded, the centred ``(parameter, axis)`` pairs of the incoming state dict are checked
    column by column with :func:`lnbook.folding.zero_mean.centred_within_rounding` (named in the refusal), and every
    other tensor must equal the folded model's own (after casting to its dtype) or the value the fold proved (kept as
    a digest, :func:`tensor_digests`: a state dict saved right after folding restores a model changed in place since);
    a failure raises ``ValueError``,
    leaves the model as it was and points to :func:`lnbook.folding.saving.load_folded`, which loads new weights into
    the original architecture and proves the fold again. A tensor absent from the state dict keeps its value
    (``strict=False``). Loading the folded model's own state dict passes. A module-level class, so the folded model
    still pickles.
    """

    def __init__(self, centred, what: str, proved: dict | None = None):
        self.centred = tuple(sorted(centred))
        self.what = what
        self.proved = dict(proved or {})  # tensor_digests of the state the fold proved

    def __call__(self, module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        own = module.state_dict(prefix=prefix)

        def unchanged(key, value) -> bool:  # equal to the model's value now, or to the value the fold proved
            now = own[key]
            if value.shape == now.shape and torch.equal(value.detach().to(device=now.device, dtype=now.dtype), now):
                return True
            proved = self.proved.get(key[len(prefix):])
            return proved is not None and proved == _digest(value.detach().to(dtype=proved[1]))

        bad = []
        for name, axis in self.centred:  # (a writer's own value passes: in bfloat16 no rounding test can say it is
            value = state_dict.get(prefix + name)  # centred, lnbook.folding.zero_mean.DISTINGUISHABLE)
            if (isinstance(value, torch.Tensor) and not (prefix + name in own and unchanged(prefix + name, value))
                    and not centred_within_rounding(value.detach(), axis)):
                bad.append(f"{prefix + name} (axis {axis})")
        if bad:
            raise ValueError(
                f"{self.what} needs its centred writers centred, and this state dict's {', '.join(bad[:4])}"
                f"{' ...' if len(bad) > 4 else ''} are not (column by column, up to rounding): loaded, the RMSNorms "
                "would see inputs with a non-zero mean and compute something else than LayerNorm. Nothing was loaded. "
                "To load the original's weights, load them into the original architecture and fold again "
                "(fold_layernorms), or use lnbook.folding.saving.load_folded(model, example, state_dict=...)"
            )

        changed = [key for key, value in state_dict.items()
                   if key in own and isinstance(value, torch.Tensor) and isinstance(own[key], torch.Tensor)
                   and not unchanged(key, value)]
        if changed:
            raise ValueError(
                f"{self.what} was proved equal to the original for its own weights, and this state dict changes "
                f"{', '.join(changed[:4])}{' ...' if len(changed) > 4 else ''}: the proof (which writers are centred, "
                "which LayerNorm outputs are zero-mean) would not cover the new weights. Nothing was loaded. Load new "
                "weights into the original architecture and fold again (fold_layernorms), or use "
                "lnbook.folding.saving.load_folded(model, example, state_dict=...), which proves the fold again"
            )


def _digest(t: torch.Tensor) -> tuple:
    """``(shape, dtype, blake2b of the bytes)`` of a tensor: what :class:`RefuseUncentredWeights` remembers of the
    proved state (a digest, not a second copy of the weights)."""
    data = t.detach().cpu().contiguous()
    raw = data.view(torch.uint8) if data.dim() else data.reshape(1).view(torch.uint8)
    return tuple(data.shape), data.dtype, hashlib.blake2b(raw.cpu().numpy().tobytes(), digest_size=16).hexdigest()


def tensor_digests(state: dict) -> dict:
    """:func:`_digest` of every tensor of a state dict."""
    return {key: _digest(value) for key, value in state.items() if isinstance(value, torch.Tensor)}


def refuse_stale_report(report: FoldReport, model: nn.Module) -> None:
    """Raise ``ValueError`` when ``model``'s state dict (its weights and buffers, by :func:`tensor_digests`) is not
    what it was when ``report`` analysed it: the verdicts (which writers are centred, which stored tensors are taken
    as centred up to rounding) were drawn from those values, so a report of an earlier state (a model analysed at
    initialisation, then trained) proves nothing about the model now."""
    if not report._digests:
        return
    now = tensor_digests(model.state_dict())
    if now != report._digests:
        changed = sorted(k for k in set(now) | set(report._digests) if now.get(k) != report._digests.get(k))
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        raise ValueError(f"report= was made by find_foldable_layernorms on this model when its tensors were other "
                         f"values ({shown} changed since): its verdicts are about those values. Analyse the model as "
                         "it is now (call without report=, or make a new report)")


def centre_writers(model: nn.Module, report: FoldReport, *, only_needed: bool = False) -> nn.Module:
    """A copy of ``model`` with its centrable writers centred and every LayerNorm kept.

    Every centrable writer is mean-blind in the graph ``report`` traced, so in exact arithmetic the copy computes the
    same function as ``model`` on the calls of that trace's domain (chapter 7, the centring theorem); another call
    (another shape class, other non-tensor arguments such as ``output_hidden_states=True``, which returns states a
    centred writer has shifted) may not, and the copy refuses it with the reason (a
    :class:`~lnbook.folding.call_proofs.CallProver` without an original: nothing is proved beyond the trace; fold
    with :func:`fold_layernorms` to have each new call class proved). ``only_needed=True`` centres only the writers
    that the foldable LayerNorms need (what :func:`fold_layernorms` does before swapping the norms).
    """
    if report._model_id != id(model):
        raise ValueError("report must come from find_foldable_layernorms(model, ...) on this model")
    refuse_stale_report(report, model)
    writers = report.writers_to_centre() if only_needed else [w for w in report.writers.values() if w.centrable]
    params = tuple(p for w in writers for p in w.params)
    centred = copy.deepcopy(model)
    _centre(centred, params)
    if report.domain is not None:
        guard = CallProver(report.domain, f"the centred copy of {report.model}", original=None, swapped={},
                           centred=frozenset(params), affine="keep", config=call_state(centred),
                           analyse=find_foldable_layernorms, consumers=_affine_consumers)
        centred.register_forward_pre_hook(guard, with_kwargs=True)
    return centred


def _flatten_outputs(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flatten_outputs(o)]
    return []


def entrywise_difference(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """``(max |a_i - b_i|, max |a_i|)`` for two outputs of the same shape, NaN- and infinity-safe: entries equal in both
    (infinities of the same sign included, as a logit masked with ``-inf`` in both models; NaN in both) count as equal,
    an entry that is NaN or infinite in only one of them (or infinite with opposite signs) makes the difference
    ``inf``, and the scale is taken over the finite entries of ``a`` only (0.0 when there is none). A comparison
    ``not diff <= tol`` then refuses every NaN or one-sided infinity (referee 20 of chapter 7, addenda A1, A2)."""
    x, y = a.detach().double(), b.detach().double()
    same = (x == y) | (torch.isnan(x) & torch.isnan(y))
    finite = torch.isfinite(x)
    scale = float(x[finite].abs().max()) if bool(finite.any()) else 0.0
    differ = ~same
    if not bool(differ.any()):
        return 0.0, scale
    if not bool((torch.isfinite(x) & torch.isfinite(y))[differ].all()):
        return float("inf"), scale
    return float((x - y)[differ].abs().max()), scale


@torch.no_grad()
def relative_output_difference(model_a: nn.Module, model_b: nn.Module, example_inputs,
                               example_kwargs: dict | None = None) -> float:
    """The largest, over the floating output tensors, of ``max |a_i - b_i| / max |a_i|``: each output is
    measured against its own size, so a small output is not hidden by a large one (an output that is
    all zeros is measured against the largest output). Entries equal in both outputs (a ``-inf`` masked logit in
    both) count as equal and the sizes are taken over finite entries (:func:`entrywise_difference`); a NaN or an
    infinity that only one model produces gives ``inf``."""
    return _relative(*_outputs(model_a, model_b, example_inputs, example_kwargs))


def _relative(a: list, b: list) -> float:
    """:func:`relative_output_difference` of two models' flattened outputs. Without a floating output (a model that
    returns only predictions, ``argmax``), the outputs are compared exactly: ``0.0`` when every one is equal, else
    ``inf`` (a changed prediction; referee 28 of chapter 7, finding 5: the comparison failed with Python's "max() arg
    is an empty sequence"); ``ValueError`` when the models return no tensor at all."""
    if len(a) != len(b):
        return float("inf")
    pairs = [entrywise_difference(x, y) for x, y in zip(a, b) if x.is_floating_point()]
    if not pairs:
        if not a:
            raise ValueError("the models return no tensor: there is nothing to compare")
        return 0.0 if all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b)) else float("inf")
    largest = max(scale for _, scale in pairs)
    return max(diff / max(scale or largest, 1e-300) if diff else 0.0 for diff, scale in pairs)


def _void(outputs: list) -> bool:
    """Whether a comparison of these outputs (the original model's) can see nothing: no floating output has a finite
    entry (NaN or infinite everywhere), so that :func:`entrywise_difference` counts any other output that is NaN there
    as equal."""
    floats = [t for t in outputs if t.is_floating_point() and t.numel()]
    return bool(floats) and not any(bool(torch.isfinite(t).any()) for t in floats)


@tf32(False)  # a float32 fold is compared with its model to 1e-5: never in TF32 (lnbook/util/device.py)
@torch.no_grad()  # a comparison needs no autograd (and float() of an output requiring grad warns)
def _outputs(model_a: nn.Module, model_b: nn.Module, example_inputs, example_kwargs: dict | None):
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    kwargs = dict(example_kwargs or {})
    outs = []
    for m in (model_a, model_b):
        was = m.training
        m.eval()
        try:
            a, k = _own_inputs(args, kwargs)
            outs.append(_flatten_outputs(m(*a, **k)))
        finally:
            m.train(was)
    a, b = outs
    if len(a) != len(b) or not a:
        raise ValueError(f"the models return different outputs ({len(a)} and {len(b)} tensors)")
    return a, b


def _own_inputs(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A copy of a call's inputs for one model of a comparison: a forward may change its inputs in place (a
    ``transformers`` cache grows by the new keys and values), and the second model must see them as the first did.
    A deep copy; inputs that cannot be deep-copied (a non-leaf tensor that requires grad) are copied container by
    container (pytree), their tensors shared."""
    try:
        return copy.deepcopy((args, kwargs))
    except Exception:  # noqa: BLE001 - e.g. "Only Tensors created explicitly by the user support the deepcopy protocol"
        return pytree.tree_map(lambda leaf: leaf, (args, kwargs))


def max_output_difference(model_a: nn.Module, model_b: nn.Module, example_inputs, example_kwargs: dict | None = None) -> tuple[float, float]:
    """``(max |a - b|, max |a|)`` over every output tensor of the two models in eval mode (one scale for
    all outputs; :func:`relative_output_difference` measures each output against its own size)."""
    a, b = _outputs(model_a, model_b, example_inputs, example_kwargs)
    floats = [(x, y) for x, y in zip(a, b) if x.is_floating_point() and x.numel()]
    if not floats:
        raise ValueError("the models return no floating output tensor: max_output_difference measures floating "
                         "outputs; compare integer outputs (predictions) with relative_output_difference, which "
                         "tells whether they are equal")
    diff = max(float((x.double() - y.double()).abs().max()) for x, y in floats)
    scale = max(float(x.double().abs().max()) for x, _ in floats)
    return diff, scale
