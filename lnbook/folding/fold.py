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
import warnings
from dataclasses import dataclass, field

import torch
from torch import nn

from lnbook.folding.zero_mean import (
    _IDENTITIES,
    _PERMUTES,
    _VIEWS,
    UntraceableModelError,
    Writer,
    ZeroMeanAnalysis,
    _arg,
    _dropout_is_identity,
    _module_of,
    _packet,
    _shape_map,
    describe_node,
    trace_model,
)
from lnbook.util.validation import check_eps

__all__ = [
    "UntraceableModelError",
    "LayerNormVerdict",
    "FoldReport",
    "RMSNormWithBias",
    "find_foldable_layernorms",
    "fold_layernorms",
    "centre_writers",
    "max_output_difference",
]

aten = torch.ops.aten
AFFINE_MODES = ("keep", "fold")


@dataclass(frozen=True)
class LayerNormVerdict:
    """One LayerNorm call in the traced graph: foldable or not, and why.

    ``module`` is the qualified name of the ``nn.LayerNorm`` that made the call (``None`` for a
    functional ``F.layer_norm`` inside another module, which :func:`fold_layernorms` cannot swap).
    ``writers`` are the writer nodes whose centring makes the input zero-mean.
    """

    node: str
    module: str | None
    width: int
    eps: float
    affine: str
    foldable: bool
    reason: str
    writers: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.module if self.module is not None else self.node


@dataclass
class FoldReport:
    """Every LayerNorm of a traced model with its verdict, and every writer found on the way."""

    model: str
    layer_norms: list[LayerNormVerdict]
    writers: dict[str, Writer]
    training: bool = False
    _model_id: int = field(default=0, repr=False)
    _analysis: ZeroMeanAnalysis | None = field(default=None, repr=False)

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
            line = f"{v.name:{size}} {v.width:5d} {v.eps:8.0e} {v.affine:>9}  {verdict}{why}"
            rows.append(line if width is None or len(line) <= width else line[: width - 3] + "...")
        return "\n".join(rows)

    def summary(self) -> str:
        mode = "training" if self.training else "eval"
        return (
            f"{self.model} ({mode} mode): {len(self.foldable)} of {len(self.layer_norms)} LayerNorms foldable, "
            f"{len(self.writers_to_centre())} writers to centre"
        )

    def __str__(self) -> str:
        return self.summary() + "\n" + self.table()


def _affine_of(analysis: ZeroMeanAnalysis, node) -> str:
    weight, bias = _arg(node, 2, "weight"), _arg(node, 3, "bias")
    parts = (["gain"] if weight is not None else []) + (["bias"] if bias is not None else [])
    return "+".join(parts) if parts else "none"


def find_foldable_layernorms(
    model: nn.Module, example_inputs, example_kwargs: dict | None = None, *, training: bool = False
) -> FoldReport:
    """Trace ``model`` on the example inputs and report which of its LayerNorms are foldable.

    A LayerNorm is *foldable* when its input has zero mean over the normalised features for every
    input once the mean-blind writers are centred (:mod:`lnbook.folding.zero_mean`); it is then
    exactly an RMSNorm with the same ``eps``. ``training=True`` traces the model in training mode
    (dropout is then active and breaks zero mean). Raises
    :class:`~lnbook.folding.zero_mean.UntraceableModelError` naming the module where tracing failed.
    """
    program = trace_model(model, example_inputs, example_kwargs, training=training)
    analysis = ZeroMeanAnalysis(program, model)
    verdicts: list[LayerNormVerdict] = []
    for node in analysis.graph.nodes:
        if _packet(node) is not aten.layer_norm:
            continue
        shape = list(node.args[1])
        eps = float(_arg(node, 4, "eps", 1e-5))
        module = _module_of(node)
        owner = None
        if module is not None and module[0] and isinstance(_submodule(model, module[0]), nn.LayerNorm):
            owner = module[0]
        affine = _affine_of(analysis, node)
        if len(shape) != 1:
            verdicts.append(LayerNormVerdict(node.name, owner, int(shape[-1]), eps, affine, False,
                                             f"it normalises over {len(shape)} dimensions {shape}"))
            continue
        ok, why, writers = analysis.zero_mean(node.args[0], -1)
        if ok:
            why = f"input zero-mean after centring {len(writers)} writers" if writers else "its input is zero-mean without any centring"
        verdicts.append(LayerNormVerdict(node.name, owner, int(shape[0]), eps, affine, ok, why, tuple(sorted(writers))))
    return FoldReport(type(model).__name__, verdicts, analysis.writers, training, id(model), analysis)


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


def _centre(model: nn.Module, params: tuple[tuple[str, int], ...]) -> None:
    state = {**dict(model.named_parameters(remove_duplicate=False)), **dict(model.named_buffers(remove_duplicate=False))}
    with torch.no_grad():
        for name, axis in params:
            p = state[name]
            centred = p.double() - p.double().mean(dim=axis, keepdim=True)
            p.copy_(centred.to(p.dtype))


def _affine_consumers(report: FoldReport, verdict: LayerNormVerdict) -> tuple[list[tuple[str, str | None]], str]:
    """The ``(weight, bias)`` names of the linear layers that read a LayerNorm, or a reason why not."""
    analysis = report._analysis
    found = []
    todo = [analysis.nodes[verdict.node]]  # the norm's output and reshaped copies whose features stay last
    while todo:
        node = todo.pop()
        for user in node.users:
            packet = _packet(user)
            if packet in _VIEWS or packet in _PERMUTES or packet in _IDENTITIES or (
                packet is aten.dropout and _dropout_is_identity(user)
            ):
                keeps_features_last = packet in _IDENTITIES or packet is aten.dropout or _shape_map(user, -1, forward=True) == -1
                if keeps_features_last:
                    todo.append(user)
                    continue
            if packet is not aten.linear or user.args[0] is not node:
                return [], f"its output is read by {describe_node(user)}, not only by linear layers"
            weight, bias = user.args[1], _arg(user, 2, "bias")
            for p in (weight, bias):
                if p is not None and (analysis.value(p) is None or len(p.users) != 1):
                    return [], f"the linear layer {describe_node(user)} shares its weights or computes them"
            found.append((analysis.param_of[weight.name], analysis.param_of[bias.name] if bias is not None else None))
    if not found:
        return [], "its output is not used"
    return found, ""


def _fold_affine_into(model: nn.Module, ln: nn.LayerNorm, consumers: list[tuple[str, str | None]], name: str) -> None:
    gain = ln.weight.detach() if ln.weight is not None else None
    shift = ln.bias.detach() if ln.bias is not None else None
    with torch.no_grad():
        for weight_name, bias_name in consumers:
            w = model.get_parameter(weight_name)
            if shift is not None:
                extra = w.double() @ shift.double()
                if bias_name is not None:
                    b = model.get_parameter(bias_name)
                    b.copy_((b.double() + extra).to(b.dtype))
                else:
                    owner = model.get_submodule(weight_name.rpartition(".")[0])
                    if not isinstance(owner, nn.Linear):
                        raise ValueError(f"cannot fold the bias of {name} into {weight_name}: it has no bias to absorb it")
                    owner.bias = nn.Parameter(extra.to(w.dtype))
            if gain is not None:
                w.copy_((w.double() * gain.double()).to(w.dtype))


def fold_layernorms(
    model: nn.Module,
    example_inputs,
    example_kwargs: dict | None = None,
    *,
    affine: str = "keep",
    eps: float | None = None,
    report: FoldReport | None = None,
    check: bool = True,
) -> nn.Module:
    """A copy of ``model`` with its foldable LayerNorms replaced by RMSNorm; ``model`` is unchanged.

    The writers that feed the foldable LayerNorms are centred (weights ``W - W.mean(dim=0)``,
    bias minus its mean, embedding rows minus their mean), then each foldable ``nn.LayerNorm`` module
    is swapped for an RMSNorm with the **same** ``eps``. ``affine="keep"`` keeps the gain in the
    RMSNorm and the bias as a separate add (:class:`RMSNormWithBias`); ``affine="fold"`` moves them
    into the linear layers that read the norm (``W diag(gain)``, ``b + W bias``) and raises
    ``ValueError`` for a LayerNorm whose output is read by anything else. LayerNorms that are not
    foldable are left as they are, with a warning that gives the reason; when none is foldable
    (a post-LN model, say) the function raises ``ValueError`` with the reasons.

    ``eps=None`` copies each LayerNorm's ``eps`` (the exact conversion). Another value is an explicit
    change of convention: it is applied, with a warning that the folded model then differs from the
    original. With ``check=True`` (and the exact ``eps``) both models are run on the example inputs
    and a relative difference above ``1e-3`` (far above rounding) raises ``RuntimeError``: a guard
    against an analysis rule that does not hold for some operation of the model.
    """
    if affine not in AFFINE_MODES:
        raise ValueError(f"affine must be one of {AFFINE_MODES}, got {affine!r}")
    if eps is not None:
        eps = check_eps(eps)
    if report is None:
        report = find_foldable_layernorms(model, example_inputs, example_kwargs)
    elif report._model_id != id(model) or report.training:
        raise ValueError("report= must come from find_foldable_layernorms(model, ...) on this model in eval mode")
    if not report.layer_norms:
        raise ValueError(f"{report.model} has no LayerNorm to fold")
    calls: dict[str, list[LayerNormVerdict]] = {}
    for v in report.layer_norms:
        calls.setdefault(v.module or f"<functional {v.node}>", []).append(v)
    swaps, skipped = [], []
    for name, group in calls.items():
        if not all(v.foldable for v in group):
            why = next(v.reason for v in group if not v.foldable)
            skipped.append(f"{name}: {why}" + (f" (module called {len(group)} times)" if len(group) > 1 else ""))
        elif group[0].module is None:
            skipped.append(f"{name}: a functional layer_norm call, not an nn.LayerNorm module that can be swapped")
        else:
            swaps.append((name, group))
    if not swaps:
        raise ValueError(f"no LayerNorm of {report.model} is foldable:\n  " + "\n  ".join(skipped))
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
        warnings.warn("LayerNorms left unchanged (not foldable):\n  " + "\n  ".join(skipped), stacklevel=2)

    folded = copy.deepcopy(model)
    params = tuple(p for w in report.writers_to_centre() for p in w.params)
    _centre(folded, params)
    for name, group in swaps:
        ln = folded.get_submodule(name)
        new_eps = ln.eps if eps is None else eps
        if new_eps != ln.eps:
            warnings.warn(
                f"{name}: RMSNorm eps={new_eps:g} differs from the LayerNorm's eps={ln.eps:g}; the folded model "
                "is then not equal to the original (eps enters both as mean square + eps)",
                stacklevel=2,
            )
        if affine == "fold":
            _fold_affine_into(folded, ln, consumers[name], name)
        _set_submodule(folded, name, _make_rms(ln, new_eps, keep_affine=affine == "keep"))
    folded.train(model.training)
    if check and eps is None:
        diff, scale = max_output_difference(model, folded, example_inputs, example_kwargs)
        if diff > 1e-3 * max(scale, 1e-30):
            raise RuntimeError(
                f"the folded {report.model} differs from the original by {diff:.3g} (largest output {scale:.3g}) "
                "on the example inputs; please report this model: an operation in it breaks a rule of the analysis"
            )
    return folded


def centre_writers(model: nn.Module, report: FoldReport, *, only_needed: bool = False) -> nn.Module:
    """A copy of ``model`` with its centrable writers centred and every LayerNorm kept.

    Every centrable writer is mean-blind, so in exact arithmetic the copy computes the same function
    as ``model`` (chapter 7, the centring theorem); ``only_needed=True`` centres only the writers that
    the foldable LayerNorms need (what :func:`fold_layernorms` does before swapping the norms).
    """
    if report._model_id != id(model):
        raise ValueError("report must come from find_foldable_layernorms(model, ...) on this model")
    writers = report.writers_to_centre() if only_needed else [w for w in report.writers.values() if w.centrable]
    centred = copy.deepcopy(model)
    _centre(centred, tuple(p for w in writers for p in w.params))
    return centred


def _flatten_outputs(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flatten_outputs(o)]
    return []


@torch.no_grad()
def max_output_difference(model_a: nn.Module, model_b: nn.Module, example_inputs, example_kwargs: dict | None = None) -> tuple[float, float]:
    """``(max |a - b|, max |a|)`` over every output tensor of the two models in eval mode."""
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    kwargs = dict(example_kwargs or {})
    outs = []
    for m in (model_a, model_b):
        was = m.training
        m.eval()
        try:
            outs.append(_flatten_outputs(m(*args, **kwargs)))
        finally:
            m.train(was)
    a, b = outs
    if len(a) != len(b) or not a:
        raise ValueError(f"the models return different outputs ({len(a)} and {len(b)} tensors)")
    diff = max(float((x.double() - y.double()).abs().max()) for x, y in zip(a, b) if x.is_floating_point())
    scale = max(float(x.double().abs().max()) for x in a if x.is_floating_point())
    return diff, scale
