"""Chapter 7: the folded model's guard covers every argument of the traced call (lnbook.folding.tracing).

A non-tensor argument (a flag, a number, a string, None, a container's structure, a default left out) is a
constant of the trace. Each model below computes something else at another value of such an argument, so
the folded model, called with it, was not proved equal to the original: it proves that call on the original
first (lnbook.folding.call_proofs, tests/folding/test_call_proofs.py), and where that fails it must refuse,
naming the argument and the reason (with ``prove_calls=False``: naming the argument and saying to fold again
with that call's arguments). Each case also measures, on a copy without the guard, how far the folded model
would be off (why the refusal is needed), and checks that the same call written another way (by position, by
keyword, the default left out) is accepted and equal.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import warnings

import pytest
import torch
from torch import nn

from lnbook.folding.fold import find_foldable_layernorms, fold_layernorms, relative_output_difference
from lnbook.folding.speed import without_shape_guards
from lnbook.folding.tracing import _same, trace_model
from tests.folding.random_nets import randomise_norms

REFUSAL = r"only for the arguments of its trace.*argument '{}'.*Fold again with this call's arguments"  # prove_calls=False
NOT_PROVED = r"(?s)argument '{}'.*Proving it on the original model failed: traced at this call, LayerNorm ln is not foldable"


def refused(name: str, pattern: str = REFUSAL) -> str:
    return pattern.format(name.replace("[", r"\[").replace("]", r"\]"))


class ActBranch(nn.Module):
    """A Python branch on a flag before the LayerNorm: ``ln(relu(lin(x)))`` when ``act``, else ``ln(lin(x))``."""

    def __init__(self):
        super().__init__()
        self.lin, self.ln, self.head = nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 3)

    def forward(self, x, act=False):
        h = self.lin(x)
        if act:
            h = torch.relu(h)
        return self.head(self.ln(h))


class Shift(nn.Module):
    """A number added before the LayerNorm: ``ln(lin(x) + shift)``."""

    def __init__(self):
        super().__init__()
        self.lin, self.ln = nn.Linear(4, 8), nn.LayerNorm(8)

    def forward(self, x, shift=0.0):
        return self.ln(self.lin(x) + shift)


class Features(nn.Module):
    """Returns the writer's output (the features) only when asked: traced without, the writer is centred."""

    def __init__(self):
        super().__init__()
        self.lin, self.ln, self.head = nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 3)

    def forward(self, x, return_features=False):
        h = self.lin(x)
        y = self.head(self.ln(h))
        return (y, h) if return_features else y


class Options(nn.Module):
    """Nested containers, a string and an optional tensor: ``ln(scale * lin(x) + mask)`` or a ReLU branch."""

    def __init__(self):
        super().__init__()
        self.lin, self.ln = nn.Linear(4, 8), nn.LayerNorm(8)

    def forward(self, x, mask=None, opts=None, mode="plain"):
        h = self.lin(x) * (opts or {"scale": (1.0,)})["scale"][0]
        if mask is not None:
            h = h * mask
        return self.ln(torch.relu(h) if mode == "relu" else h)


def build(cls):
    torch.manual_seed(0)
    return randomise_norms(cls()).double().eval()


def x(batch=3):
    return torch.randn(batch, 4, dtype=torch.float64)


def unguarded_gap(model, folded, args, kwargs):
    """How far the folded model is from the original on this call once its guard is removed."""
    bare, _ = without_shape_guards(folded)
    return relative_output_difference(model, bare, args, kwargs)


@pytest.mark.parametrize("cls,name,value,gap", [
    (ActBranch, "act", True, 0.1),
    (Shift, "shift", 3.0, 0.1),
    (Features, "return_features", True, 0.1),
])
def test_a_call_with_another_non_tensor_argument_is_refused_naming_it(cls, name, value, gap):
    """Folded with ``forward(x)``, called with ``name=value``: refused with the argument's name and what to do
    (without the guard the folded model is off by more than ``gap``, relative); the traced call passed by
    position or by keyword, or with the default written out, is accepted and equal to the original."""
    model = build(cls)
    folded = fold_layernorms(model, x())
    inputs = x(5)
    with pytest.raises(ValueError, match=refused(name, NOT_PROVED)) as err:
        folded(inputs, **{name: value})
    assert f"{value!r} here" in str(err.value) and "(its default)" in str(err.value)
    with pytest.raises(ValueError, match=refused(name, NOT_PROVED)):
        folded(inputs, value)  # the same, by position
    strict = fold_layernorms(model, x(), prove_calls=False)
    with pytest.raises(ValueError, match=refused(name)):
        strict(inputs, **{name: value})
    assert unguarded_gap(model, folded, (inputs,), {name: value}) > gap
    default = {"act": False, "shift": 0.0, "return_features": False}[name]
    for args, kwargs in [((inputs,), {}), ((inputs, default), {}), ((inputs,), {name: default})]:
        assert relative_output_difference(model, folded, args, kwargs) < 1e-12


def test_the_fold_of_the_other_call_is_proved_for_that_call():
    """The refusal's advice works: folded with the other call's arguments, the fold is proved (or refused)
    for that call. With ``act=True`` nothing folds (a ReLU before the LayerNorm), with ``shift=3.0`` neither
    (a constant added along the features), each with its reason."""
    with pytest.raises(ValueError, match="(?s)no LayerNorm of ActBranch is foldable.*relu"):
        fold_layernorms(build(ActBranch), (x(),), {"act": True})
    with pytest.raises(ValueError, match="(?s)no LayerNorm of Shift is foldable.*adds 3.0"):
        fold_layernorms(build(Shift), (x(), 3.0))


def test_nested_containers_strings_none_and_types_are_part_of_the_call():
    """Every leaf of a container, its structure, a string, None against a tensor, and the type of a number
    (1 is not 1.0, True is not 1) are compared; the same values in another layout are accepted."""
    model = build(Options)
    mask = torch.ones(3, 1, dtype=torch.float64)
    folded = fold_layernorms(model, (x(),), {"opts": {"scale": (2.0,)}, "mode": "plain"}, prove_calls=False)
    inputs = x(5)
    assert relative_output_difference(model, folded, (inputs, None, {"scale": (2.0,)}), {}) < 1e-12
    assert relative_output_difference(model, folded, (inputs,), {"opts": {"scale": (2.0,)}}) < 1e-12
    for kwargs, name in [({"opts": {"scale": (3.0,)}}, r"opts['scale'][0]"),
                         ({"opts": {"scale": (2,)}}, r"opts['scale'][0]"),
                         ({"opts": {"scale": (2.0, 1.0)}}, "opts"),
                         ({"opts": None}, "opts"),
                         ({"opts": {"scale": (2.0,)}, "mode": "relu"}, "mode"),
                         ({"opts": {"scale": (2.0,)}, "mask": torch.ones(5, 1, dtype=torch.float64)}, "mask")]:
        with pytest.raises(ValueError, match=refused(name)):
            folded(inputs, **kwargs)
    assert unguarded_gap(model, folded, (inputs,), {"opts": {"scale": (2.0,)}, "mode": "relu"}) > 0.1
    # a tensor traced by position is found by keyword, and its shape is still checked
    masked = fold_layernorms(model, (x(), mask), prove_calls=False)
    assert relative_output_difference(model, masked, (inputs,), {"mask": torch.rand(5, 1, dtype=torch.float64)}) < 1e-12
    with pytest.raises(ValueError, match="input shapes and types of its trace"):
        masked(inputs, mask=torch.ones(5, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match=refused("mask")):
        masked(inputs)
    # equal in Python, other constants to the trace: a bool is not an int, an int not a float, -0.0 not 0.0
    assert not _same(True, 1) and not _same(1, 1.0) and not _same(0.0, -0.0) and _same(math.nan, math.nan)
    assert _same((1, "a"), (1, "a")) and not _same(torch.float32, torch.float64)
    # with call proofs (the default) each of those calls is proved on the original: it runs equal, or (the ReLU
    # branch) is refused with the reason
    proving = fold_layernorms(model, (x(),), {"opts": {"scale": (2.0,)}, "mode": "plain"})
    for kwargs in [{"opts": {"scale": (3.0,)}}, {"opts": None}, {"opts": {"scale": (2.0,)}, "mask": torch.rand(5, 1, dtype=torch.float64)}]:
        assert relative_output_difference(model, proving, (inputs,), kwargs) < 1e-12, kwargs
    with pytest.raises(ValueError, match=refused("mode", NOT_PROVED)):
        proving(inputs, opts={"scale": (2.0,)}, mode="relu")


def test_a_call_that_does_not_fit_the_signature_is_refused_with_the_signature():
    folded = fold_layernorms(build(Shift), x())
    with pytest.raises(ValueError, match=r"does not match the signature of forward\(x, shift=0\.0\)"):
        folded(x(), bogus=1)


def test_the_report_domain_keeps_no_example_tensor():
    """The guard records where the traced call had tensors, not the tensors themselves."""
    report = find_foldable_layernorms(build(Options), (x(), torch.ones(3, 1, dtype=torch.float64)))
    bound = dict(report.domain.call.bound)
    assert repr(bound["mask"]) == "a tensor" and not isinstance(bound["mask"], torch.Tensor)


needs_transformers = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers not installed")


@needs_transformers
def test_gpt2_folded_without_hidden_states_refuses_a_call_that_asks_for_them():
    """A tiny random GPT-2 (``transformers`` config, no download) folded with its default outputs: with
    ``output_hidden_states=True`` the logits would agree but the hidden states (the residual stream, whose
    writers the fold centred) would not; the call is refused, naming the argument."""
    from lnbook.folding.real_models import build_real_model

    model, args, kwargs = build_real_model("gpt2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folded = fold_layernorms(model, args, kwargs)
    call = {**kwargs, "output_hidden_states": True}
    with pytest.raises(ValueError, match=r"(?s)argument 'output_hidden_states'.*h\.0\.ln_1 is not foldable"):
        folded(**call)
    bare, _ = without_shape_guards(folded)
    with torch.no_grad():
        a, b = model(**call), bare(**call)
    assert (a.last_hidden_state - b.last_hidden_state).abs().max() < 1e-10 * a.last_hidden_state.abs().max()
    gap = max(float((p - q).abs().max() / p.abs().max()) for p, q in zip(a.hidden_states, b.hidden_states))
    assert gap > 1e-3
    assert relative_output_difference(model, folded, args, kwargs) < 1e-12


def test_the_guard_survives_a_copy_and_a_pickle():
    """A deep copy or a pickled copy of the folded model keeps a working guard (it holds markers, not tensors)."""
    import copy
    import io

    model = build(Features)
    folded = fold_layernorms(model, x())
    buffer = io.BytesIO()
    torch.save(folded, buffer)
    buffer.seek(0)
    for other in (copy.deepcopy(folded), torch.load(buffer, weights_only=False)):
        assert relative_output_difference(model, other, (x(5),), {}) < 1e-12
        with pytest.raises(ValueError, match=refused("return_features", NOT_PROVED)):
            other(x(5), return_features=True)


def test_a_dimension_that_stays_fixed_is_reported_not_logged(capfd):
    """A model that needs a size-1 dimension is traced with it fixed: the domain says so, and torch.export's log line
    "... specialized; Dim.AUTO was specified along with a sample input with hint = 1" (on stderr, with the build
    machine's path, seen on the ch07 lab's page) is not printed."""

    class OneChannel(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 4)

        def forward(self, x):
            if x.shape[1] != 1:
                raise ValueError("one channel")
            return self.linear(x[:, 0])

    records = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    # the logger itself (it does not propagate; torch's handler writes to the stderr of torch's import time)
    logger = logging.getLogger("torch._export.non_strict_utils")
    logger.addHandler(handler)
    capfd.readouterr()
    try:
        _, domain, args, _ = trace_model(OneChannel(), torch.randn(3, 1, 4))
    finally:
        logger.removeHandler(handler)
    err = capfd.readouterr().err
    assert tuple(args[0].shape) == (3, 1, 4)  # traced as given: the enlarged example failed
    logged = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    assert not logged and "specialized" not in err, (logged, err)
    (_, dims), = domain.inputs
    assert dims[1] == 1 and not isinstance(dims[0], int), domain.describe()  # the channel fixed, the batch dynamic
