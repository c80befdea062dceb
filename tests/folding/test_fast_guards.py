"""Chapter 7: the per-call guards of a folded model answer from exact shortcuts (lnbook.folding.fast_guards).

Each shortcut must answer what the full check answers: the identity watch must fail on every change the full checks
read (an attribute replaced by an equal value of another type or sign, added or removed, a submodule, parameter or
hook replaced, added or removed, an in-place write, a conversion, a configuration flag or list entry, the grad
mode); the call skeleton must separate the constants a trace fixes; the compiled size check must agree with
``ShapeDomain.sizes`` on every shape; and a folded model must answer repeated calls without the full checks.
"""

from __future__ import annotations

import itertools
import warnings

import pytest
import sympy as sp
import torch
from torch import nn

from lnbook.folding import call_proofs
from lnbook.folding.call_proofs import _MODULE_BOOKKEEPING, CallProver, RefuseChangesSinceFolding
from lnbook.folding.fast_guards import (IdentityWatch, NotFast, call_skeleton, compile_size_check, watch_model_state,
                                        watch_weights_and_hooks)
from lnbook.folding.fold import fold_layernorms, relative_output_difference
from lnbook.folding.tracing import ShapeDomain, tensor_kind
from tests.folding.random_nets import randomise_norms


class Flags(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.ln, self.head = nn.Linear(4, 8), nn.LayerNorm(8), nn.Linear(8, 3)
        self.use_act, self.scale, self.pair = False, 0.0, (1, 2)

    def forward(self, x):
        return self.head(self.ln(self.lin(x)))


def _state_watch(model):
    watch = IdentityWatch()
    watch_model_state(watch, model, _MODULE_BOOKKEEPING)
    return watch


def _weights_watch(model):
    watch = IdentityWatch()
    watch_weights_and_hooks(watch, list(model.modules()))
    return watch


STATE_CHANGES = {
    "a bool replaced by an equal int": lambda m: setattr(m, "use_act", 0),
    "0.0 replaced by -0.0": lambda m: setattr(m, "scale", -0.0),
    "a tuple replaced by an equal one of other types": lambda m: setattr(m, "pair", (True, 2)),
    "an attribute added": lambda m: setattr(m.lin, "mode", "leak"),
    "an attribute removed": lambda m: delattr(m, "pair"),
    "a submodule replaced": lambda m: setattr(m, "head", nn.Linear(8, 4)),
    "a submodule added": lambda m: m.add_module("extra", nn.Dropout(0.1)),
    "a norm's eps": lambda m: setattr(m.ln, "eps", 1e-3),
    "the grad mode": lambda m: torch.set_grad_enabled(not torch.is_grad_enabled()),
}

WEIGHT_CHANGES = {
    "a parameter replaced": lambda m: setattr(m.lin, "weight", nn.Parameter(m.lin.weight.detach().clone())),
    "a parameter written in place": lambda m: m.lin.weight.detach().add_(1.0),  # detach shares the version counter
    "a dtype conversion": lambda m: m.double(),
    "new storage through .data": lambda m: setattr(m.lin.weight, "data", m.lin.weight.detach().clone()),
    "a forward hook added": lambda m: m.lin.register_forward_hook(lambda *a: None),
    "a pre-hook added": lambda m: m.head.register_forward_pre_hook(lambda *a: None),
    "a global hook added": lambda m: nn.modules.module.register_module_forward_hook(lambda *a: None),
    "a forward assigned on the instance": lambda m: setattr(m.lin, "forward", lambda x: x),
    "the class changed": lambda m: setattr(m.head, "__class__", type("Steered", (nn.Linear,), {})),
    "a submodule replaced": lambda m: setattr(m, "head", nn.Linear(8, 3)),
}


@pytest.mark.parametrize("change", list(STATE_CHANGES))
def test_the_state_watch_fails_on_every_change_of_what_call_state_reads(change):
    """Each change makes ``call_state`` differ, and the watch fails on it (the shortcut then runs the full check);
    unchanged, the watch holds. A watch by ``==`` instead of identity holds on the first three and is wrong."""
    model = Flags().eval()
    grad = torch.is_grad_enabled()
    watch = _state_watch(model)
    before = call_proofs.call_state(model)
    assert watch.holds()
    try:
        STATE_CHANGES[change](model)
        assert not watch.holds()
        if change != "the grad mode":  # call_state does not read the mode; the watch keeps it for a state that would
            assert call_proofs.call_state(model) != before
    finally:
        torch.set_grad_enabled(grad)


@pytest.mark.parametrize("change", list(WEIGHT_CHANGES))
def test_the_weights_and_hooks_watch_fails_on_every_change_the_refusal_reads(change):
    """Each change of weights, hooks, modules or classes that ``RefuseChangesSinceFolding`` reads (or a conversion,
    which it takes as a new state) makes the watch fail; unchanged, it holds."""
    model = Flags().eval()
    watch = _weights_watch(model)
    assert watch.holds()
    handles = []
    try:
        out = WEIGHT_CHANGES[change](model)
        if hasattr(out, "remove"):
            handles.append(out)
        assert not watch.holds()
    finally:
        for h in handles:
            h.remove()


def test_the_configuration_watch_fails_on_a_flag_a_list_entry_and_a_class_attribute():
    """A ``transformers`` configuration: a flag set, an entry of one of its dicts changed in place and an attribute
    of its class replaced each change ``config.to_dict()``, and each makes the watch fail."""
    transformers = pytest.importorskip("transformers")
    transformers.utils.logging.set_verbosity_error()
    cfg = transformers.GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2, n_positions=16)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    for change in [lambda: setattr(model.config, "output_hidden_states", True),
                   lambda: model.config.id2label.__setitem__(0, "other"),
                   lambda: setattr(type(model.config), "model_type", "other")]:
        saved = (model.config.output_hidden_states, dict(model.config.id2label), type(model.config).model_type)
        watch = _state_watch(model)
        assert watch.holds()
        try:
            change()
            assert not watch.holds()
        finally:
            model.config.output_hidden_states = saved[0]
            model.config.id2label.clear()
            model.config.id2label.update(saved[1])
            type(model.config).model_type = saved[2]


def test_the_call_skeleton_separates_the_constants_a_trace_fixes_and_not_the_sizes():
    """Calls that differ only in their tensors' sizes share a skeleton; a flag of another type (``True`` and ``1``),
    a float of another sign, another dtype, rank, keyword or number of positional arguments do not."""
    x = torch.zeros(2, 3)

    def key(*args, **kwargs):
        return call_skeleton(args, kwargs, [])

    assert key(x, flag=True) == key(torch.ones(5, 7), flag=True)
    others = [key(x, flag=1), key(x, flag=False), key(x.double(), flag=True), key(x[0], flag=True),
              key(x, other=True), key(x, True), key(x, flag=True, shift=0.0)]
    assert all(k != key(x, flag=True) for k in others)
    assert key(x, shift=0.0) != key(x, shift=-0.0)
    assert key(x, extra=[x, (x, None)]) == key(torch.ones(4, 1), extra=[x, (x, None)])
    assert key(x, extra=[x, (x, None)]) != key(x, extra=[x, [x, None]])
    tensors: list = []
    call_skeleton((x,), {"extra": [torch.ones(1), {"a": torch.ones(2)}]}, tensors)
    assert [tuple(t.shape) for t in tensors] == [(2, 3), (1,), (2,)]
    with pytest.raises(NotFast):
        key(x, dtype=torch.float32)  # an object: its == is not the key's


def test_the_compiled_size_check_agrees_with_the_domain_on_every_shape():
    """A domain with a fixed size, shared symbols, a polynomial (``s0 + 1``, ``2 s1``), ranges and a specialised size
    of 1: the compiled check and ``ShapeDomain.sizes`` agree on every shape of a grid (sizes 1 to 6 in every
    dimension). Loosening any rule of the compiled check (the range, the size-1 rule, a polynomial) fails it."""
    s0, s1 = sp.symbols("s0 s1", integer=True, positive=True)
    a, b = torch.zeros(2, 3), torch.zeros(2, 3)
    kind = tensor_kind(a)
    domain = ShapeDomain(inputs=(("args[0]", (s0, 3, s1)), ("args[1]", (s0 + 1, 2 * s1))),
                         ranges=((s0, 2, 4), (s1, 1, None)), dynamic=True, kinds=(("args[0]", kind), ("args[1]", kind)))
    tensors: list = []
    x, y = torch.zeros(2, 3, 2), torch.zeros(3, 4)
    call_skeleton((x, y), {}, tensors)
    inside = compile_size_check(domain, ((x, y), {}), tensors)
    agree = inside_count = 0
    for shape_x in itertools.product(range(1, 7), [3, 4], range(1, 7)):
        for shape_y in itertools.product(range(1, 7), range(1, 13, 3)):
            call = [torch.zeros(shape_x), torch.zeros(shape_y)]
            expected = isinstance(domain.sizes(tuple(call), {}), dict)
            assert inside(call) == expected, (shape_x, shape_y)
            agree += 1
            inside_count += expected
    assert agree == 6 * 2 * 6 * 6 * 4 and inside_count > 0
    xd = x.double()
    assert compile_size_check(domain, ((xd, y), {}), [xd, y]) is None  # another dtype: never inside
    x0 = x[0]
    assert compile_size_check(domain, ((x0, y), {}), [x0, y]) is None  # another rank
    with pytest.raises(NotFast):
        compile_size_check(domain, ((x, x), {}), [x, x])  # one tensor twice: positions are ambiguous


def _count(monkeypatch):
    calls = {"call_state": 0, "change": 0}
    state, change = call_proofs.call_state, RefuseChangesSinceFolding._change

    def counted_state(model):
        calls["call_state"] += 1
        return state(model)

    def counted_change(self):
        calls["change"] += 1
        return change(self)

    monkeypatch.setattr(call_proofs, "call_state", counted_state)
    monkeypatch.setattr(RefuseChangesSinceFolding, "_change", counted_change)
    return calls


def test_repeated_calls_are_answered_by_the_shortcuts_and_changes_by_the_full_checks(monkeypatch):
    """After its first call of a class, a folded model answers calls of other sizes in the proved domain without the
    full checks (no ``call_state``, no walk of its modules): that is what makes its guards cheap. A change (a flag
    set, a weight written in place) sends the next call to the full checks, which prove it or refuse it as before."""
    torch.manual_seed(0)
    model = randomise_norms(Flags()).double().eval()
    x = torch.randn(3, 5, 4, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folded = fold_layernorms(model, x)
    prover = next(h for h in folded._forward_pre_hooks.values() if isinstance(h, CallProver))
    calls = _count(monkeypatch)
    with torch.no_grad():  # as relative_output_difference calls it: the grad mode is part of what the watch holds
        folded(x)
    first = dict(calls)
    for n in (2, 4, 7):
        assert relative_output_difference(model, folded, (torch.randn(n, 6, 4, dtype=torch.float64),)) < 1e-12
    assert calls == first  # the originals go through the hook-free copy: only the folded model's guards count
    folded.scale = model.scale = 0.5
    assert relative_output_difference(model, folded, (x,)) < 1e-12
    assert calls["call_state"] > first["call_state"] and prover.proofs_made == 1
    with torch.no_grad():
        folded.lin.weight.add_(1.0)
    with pytest.raises(ValueError, match="changed in place"):
        folded(x)
