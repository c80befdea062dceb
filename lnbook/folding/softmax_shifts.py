r"""Two exact rewrites that rest on the softmax: centring the unembedding, and folding value biases.

Chapter 7, "Beyond the LayerNorms". Both are proved in the chapter; each function here refuses, with the
reason, every model in which the proof's hypothesis cannot be checked.

* :func:`center_unembed`. A softmax ignores a common shift of its inputs:
  :math:`\operatorname{softmax}(\ell + c\mathbf 1) = \operatorname{softmax}(\ell)`. If a model's output
  is the logits :math:`\ell = Wz + b` of a linear unembedding (``W`` of shape ``(V, d)``), replacing
  ``W`` by ``W - W.mean(dim=0)`` and ``b`` by ``b - b.mean()`` (centring over the vocabulary) gives
  :math:`\ell' = \ell - \mu(\ell)\mathbf 1`: the same probabilities, log-probabilities, argmax and
  cross-entropy, for every input. The hypothesis checked in the traced graph: the linear layer's output
  reaches the model's outputs only through reshapes that keep the vocabulary axis whole, and nothing
  else reads it. A caller that reads the raw logits sees the shift: in Hugging Face ``generate``, the
  logits processors listed in :data:`RAW_LOGIT_PROCESSORS` (``repetition_penalty`` and two others) and
  ``output_scores``/``output_logits``; for a model that has ``generate`` the function warns, naming them.
* :func:`fold_value_biases`. An attention row is a convex combination: its weights sum to 1, so
  :math:`\sum_t a_{st}(x_tW_v + b_v) = \sum_t a_{st}x_tW_v + b_v`, and after the output projection the
  value bias contributes the constant :math:`W_o b_v`. It can be moved into the output bias
  (:math:`b_o \leftarrow b_o + W_o b_v`, :math:`b_v \leftarrow 0`). Hypothesis: every query row has at
  least one unmasked key. A row whose keys are all masked out has weights that sum to 0, not 1, under
  ``scaled_dot_product_attention`` (which returns 0 for it): GPT-2's default SDPA attention with a left-padded
  ``attention_mask``, ``nn.MultiheadAttention`` with a ``key_padding_mask`` that masks every key. Modules are
  found by their class, not in a traced graph: only attention modules whose code is known are rewritten (the
  book's ``CausalSelfAttention``, torch's ``nn.MultiheadAttention``, Hugging Face's GPT-2 attention), and
  each rewritten module of the returned copy checks the mask of every call and refuses a fully masked row
  (:func:`fully_masked_rows`); in training mode dropout on the attention weights breaks the row sums, so
  the model is rewritten as an eval-mode copy, and each rewritten module of the copy refuses to run in
  training mode (:func:`refuse_attention_in_training_mode`).

Both functions return a copy (the original is untouched) and check the copy in float64 on the example
before returning it.
"""

from __future__ import annotations

import copy
import functools
import inspect
import warnings

import torch
from torch import nn
from torch.utils import _pytree as pytree

from lnbook.folding.call_proofs import GraphCallProver, call_state, declare_untied_head, record_proved_state
from lnbook.folding.fold import entrywise_difference
from lnbook.folding.op_rules import op_name
from lnbook.folding.tracing import trace_model, tracing_for_analysis

__all__ = ["center_unembed", "logits_only_returned", "fold_value_biases", "value_bias_sites", "value_bias_refusals", "fully_masked_rows",
           "refuse_attention_in_training_mode", "RAW_LOGIT_PROCESSORS", "RefuseForeignCaches"]

# Hugging Face logits processors that read the raw logits and are not invariant under a common shift of them
# (argument of ``generate`` -> class): after center_unembed they see other numbers and can pick other tokens.
# Temperature, top-k, top-p, min-p, typical, epsilon/eta sampling, n-gram and bad-word bans, sequence biases
# and forced tokens are invariant (tests/folding/test_softmax_shifts.py checks both lists).
RAW_LOGIT_PROCESSORS = {
    "repetition_penalty": "RepetitionPenaltyLogitsProcessor",
    "encoder_repetition_penalty": "EncoderRepetitionPenaltyLogitsProcessor",
    "exponential_decay_length_penalty": "ExponentialDecayLengthPenalty",
}

_VIEWS = {"aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", "aten.alias.default"}


def _eval_copy(model: nn.Module, what: str) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if model.training:
        warnings.warn(f"{what}: the model is in training mode; the rewrite is exact in eval mode only "
                      "(dropout breaks it), so an eval-mode copy is returned", stacklevel=3)
    return copy.deepcopy(model).eval()


def _collect(value, take) -> list:
    """The objects of a call's arguments or output that ``take`` accepts, found inside tuples, lists and dicts (a
    ``transformers`` ``ModelOutput`` is a dict), in order; an object ``take`` accepts is not walked into, and
    neither is any other object."""
    found: list = []

    def walk(v):
        if take(v):
            found.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)

    walk(value)
    return found


def _outputs(out) -> list[torch.Tensor]:
    """The tensors of a call's output that the rewrites compare (:func:`_collect`). A key-value cache (an object
    with ``get_seq_length``) is not walked, and neither is any other object: the answer does not depend on which
    types are registered as pytree nodes in this process (lnbook's traces register the ``transformers`` caches;
    referee 14 of chapter 7, finding 1: the same call compared the cache's values once a trace had run, and not
    before)."""
    return _collect(out, lambda v: isinstance(v, torch.Tensor))


def _caches(value) -> list:
    """The key-value caches (objects with ``get_seq_length``) in a call's arguments or output."""
    return _collect(value, lambda v: callable(getattr(v, "get_seq_length", None))
                    and not isinstance(v, (torch.Tensor, nn.Module)))


# The mark that a model of the value-bias-free convention puts on each cache it fills (an attribute of the cache, so
# that copy.deepcopy and pickling carry it): the convention, the token of the fold_value_biases call that the filler
# descends from (shared by the copy and every model derived from it: fold_layernorms, center_unembed, deep or pickled
# copies carry the hook with its token) and the sequence length the cache reached in that call.
CACHE_MARK = "_lnbook_value_bias_mark"
VALUE_BIAS_FREE = "values without value biases"


def _value_bias(m: nn.Module, kind: str):
    """The value-bias slice of an attention module of ``kind`` (``None`` if the module is not of that kind)."""
    try:
        if kind == "lnbook":
            return m.qkv.bias[2 * m.out.in_features:]
        if kind == "torch":
            return m.in_proj_bias[2 * m.embed_dim:]
        return m.c_attn.bias[2 * m.c_proj.weight.shape[0]:]
    except (AttributeError, TypeError):
        return None


def _cache_length(cache):
    try:
        return int(cache.get_seq_length())
    except Exception:  # noqa: BLE001 - a cache that cannot say its length is treated as filled and never matched
        return None


def _last_values(cache) -> list[torch.Tensor] | None:
    """Layer by layer, the values of the last filled slot of a Hugging Face key-value cache (``[batch, heads *
    head_dim]``: the slot of the latest position, also in a sliding-window layer), or ``None`` when the cache's
    values cannot be read (a cache of another structure)."""
    slots = _new_slots(cache, 1)
    return None if slots is None else [s[0] for s in slots]


def _new_slots(cache, count: int) -> list[torch.Tensor] | None:
    """Layer by layer, the values of the last ``count`` slots (oldest first: ``[count, batch, heads * head_dim]``),
    or ``None`` when the cache's values cannot be read or a layer holds fewer slots."""
    values = [getattr(layer, "values", None) for layer in getattr(cache, "layers", None) or ()]
    if not values or not all(isinstance(v, torch.Tensor) and v.dim() == 4 and v.shape[2] >= count for v in values):
        return None
    return [v[:, :, v.shape[2] - count:, :].permute(2, 0, 1, 3).reshape(count, v.shape[0], -1) for v in values]


class RefuseForeignCaches:
    """Hooks of :func:`fold_value_biases`' copy: its attention values are :math:`W_v x` where the original's are
    :math:`W_v x + b_v` (prop-ch7-value-bias: the attention *outputs* agree, the values do not), so a key-value cache
    that a model of the other convention filled (the original's, in a prefill or assisted decoding) would be read
    wrongly. The forward hook marks each cache that a call returns, on the cache itself (attribute ``CACHE_MARK``, which
    ``copy.deepcopy`` carries: Hugging Face's prompt-cache reuse deep-copies the prompt's cache), with the convention,
    a token that the copy shares with every model derived from it (a deep copy, ``fold_layernorms`` or
    ``center_unembed`` of it, a pickled copy: each carries this hook with the same token) and the sequence length the
    cache reached, with a fingerprint of the values written at each position (:attr:`PRINTS` random projections per
    layer, seeded by the token); it marks only when the filler's value biases are all zero, so a copy into which the
    original's weights were loaded marks nothing. The pre-hook refuses a call with a non-empty cache unless it carries
    this token's mark, has not grown since (a cache that the copy filled and the original then extended is refused),
    and holds in its last position values whose fingerprint is one stored for that position (a cache cut back and
    then extended by another model is refused: any position another model wrote makes the last one such a position,
    until the cache is cut back before it; the fingerprint is a check, not a proof: a change orthogonal to its
    directions would pass),
    and refuses any call with a non-empty cache while the model's value biases are not zero (referee 19 of chapter
    7, findings 2, 3, 7). Within lnbook's own traces (:func:`tracing_for_analysis`) the hooks do nothing, since every
    eager call still runs them. An empty cache (``generate``'s first call) is accepted. A module-level class, so that
    the copy pickles."""

    PRINTS = 4  # random directions per layer of a slot's fingerprint
    PRINT_TOLERANCE = 1e-9  # relative to |direction| |values|: float64 rounding of a reordered sum is ~1e-13 there

    def __init__(self, what: str, sites=()):
        import uuid

        self.what, self.token, self.sites = what, uuid.uuid4().hex, list(sites)
        self._directions, self._incoming = {}, {}

    def _prints(self, rows: torch.Tensor) -> torch.Tensor:
        """The fingerprints of value rows ``[..., width]``: their projections (float64, exact inputs) on ``PRINTS``
        random directions seeded by the token, so that every model sharing the token prints alike."""
        width = rows.shape[-1]
        if width not in self._directions:
            g = torch.Generator().manual_seed(int(self.token[:15], 16))
            self._directions[width] = torch.randn(width, self.PRINTS, generator=g, dtype=torch.float64)
        d = self._directions[width].to(rows.device)
        return rows.to(torch.float64) @ d

    def _last_slot_written_here(self, cache, mark: dict, length: int) -> bool:
        """Whether the values in the cache's last slot (position ``length - 1``) are, in every layer and every row,
        values that a model sharing the token wrote at that position (their fingerprints match a row's stored at
        that position, to ``PRINT_TOLERANCE``; rows may have been reordered or repeated, as in beam search)."""
        stored = mark.get("prints", {}).get(length - 1)
        last = _last_values(cache)
        if stored is None or last is None or len(last) != stored.shape[0]:
            return False
        for rows, kept in zip(last, stored):
            now = self._prints(rows).cpu()
            scale = self.PRINT_TOLERANCE * (rows.to(torch.float64).norm(dim=-1).cpu()[:, None] + 1e-300) * \
                self._directions[rows.shape[-1]].norm(dim=0)[None, :]
            close = ((now[:, None, :] - kept[None, :, :]).abs() <= scale[:, None, :]).all(-1)
            if not bool(close.any(1).all()):
                return False
        return True

    def _nonzero_value_biases(self, module) -> list[str]:
        """The rewritten modules whose value bias is not zero now (weights loaded or changed after the rewrite)."""
        out = []
        for name, kind in self.sites:
            try:
                bv = _value_bias(module.get_submodule(name), kind)
            except AttributeError:
                bv = None
            if bv is None or bool((bv != 0).any()):
                out.append(name or type(module).__name__)
        return out

    def check(self, module, args, kwargs) -> None:
        if tracing_for_analysis():  # lnbook's own trace (a derived model proving a call class on its copy of this
            # one): torch.export rebuilds the cache from its tensors, so it carries no mark, and nothing is computed
            # there; the derived model's own copy of this hook checks the real call
            return
        self._incoming = {id(c): _cache_length(c) or 0 for c in _caches((args, kwargs))}
        used = [c for c in _caches((args, kwargs)) if (_cache_length(c) or 0) > 0 or _cache_length(c) is None]
        if not used:
            return
        changed = self._nonzero_value_biases(module)
        if changed:
            raise ValueError(
                f"{self.what} was called with a non-empty key-value cache, but the value biases of "
                f"{', '.join(changed)} are not zero (weights were loaded or changed after fold_value_biases), so the "
                "model no longer stores values of the convention its caches are marked with. Fold again "
                "(fold_value_biases on the model with those weights), or run without a cache")
        for cache in used:
            mark = getattr(cache, CACHE_MARK, None)
            length = _cache_length(cache)
            if not (isinstance(mark, dict) and mark.get("token") == self.token
                    and mark.get("convention") == VALUE_BIAS_FREE and length is not None
                    and length <= mark.get("length", -1)):
                grown = isinstance(mark, dict) and mark.get("token") == self.token
                raise ValueError(
                    f"{self.what} was called with a key-value cache that it did not fill"
                    + (f" (it filled {mark.get('length')} positions; the cache now holds {length}: another model "
                       "extended it)" if grown else "")
                    + ": its values lack the value biases (moved into the output bias), so a cache filled by a "
                    "model that keeps them (the original, in a prefill or in assisted decoding) would be read "
                    "wrongly. Fill the cache with this copy or a model derived from it (start from an empty cache; "
                    "a deep copy of a cache it filled is accepted), or use the original model for the whole "
                    "generation")
            if not self._last_slot_written_here(cache, mark, length):
                raise ValueError(
                    f"{self.what} was called with a key-value cache whose last position ({length - 1}) holds values "
                    "that it did not write there (the cache was cut back and then extended by another model, or "
                    "changed in place, or its values cannot be read): its values lack the value biases (moved into "
                    "the output bias), so values written by a model that keeps them would be read wrongly. Cut the "
                    "cache back to the positions this copy filled and extend it with this copy, or use the original "
                    "model for the whole generation")

    def record(self, module, args, kwargs, output) -> None:
        if tracing_for_analysis():
            return
        caches = _caches((args, kwargs, output))
        if not caches:
            return
        free = not self._nonzero_value_biases(module)
        incoming, self._incoming = self._incoming, {}
        for cache in caches:
            try:
                if free:
                    length = _cache_length(cache)
                    old = getattr(cache, CACHE_MARK, None)
                    prints = dict(old["prints"]) if isinstance(old, dict) and old.get("token") == self.token else {}
                    start = incoming.get(id(cache), 0)
                    slots = _new_slots(cache, (length or 0) - start) if length and length > start else None
                    if slots is not None:  # fingerprints of the positions this call wrote, layer by layer
                        new = torch.stack([self._prints(s).cpu() for s in slots], 1)  # [positions, layers, rows, k]
                        prints.update({start + i: new[i] for i in range(new.shape[0])})
                    setattr(cache, CACHE_MARK, {"convention": VALUE_BIAS_FREE, "token": self.token,
                                                "length": length, "prints": prints})
                elif getattr(cache, CACHE_MARK, None) is not None:
                    delattr(cache, CACHE_MARK)  # extended with values of the other convention
            except (AttributeError, TypeError):  # a cache that takes no attribute carries no mark: refused later
                pass

    def __getstate__(self):
        return {"what": self.what, "token": self.token, "sites": self.sites}

    def __setstate__(self, state):
        self.what, self.token, self.sites = state["what"], state["token"], state.get("sites", [])
        self._directions, self._incoming = {}, {}


def _call(model, args, kwargs):
    return model(*args, **kwargs)


def _shared_with(model: nn.Module, param: torch.Tensor, own: str) -> list[str]:
    return [n for n, p in model.named_parameters(remove_duplicate=False) if p is param and n != own]


def _reaches_only_outputs(program, node) -> str:
    """'' if every path from ``node`` ends at the graph output through vocabulary-preserving views,
    else the reason naming the first other reader."""
    width = node.meta["val"].shape[-1]
    stack, hit = [node], False
    while stack:
        n = stack.pop()
        for user in n.users:
            if user.op == "output":
                hit = True
            elif op_name(user) in _VIEWS and user.meta["val"].shape[-1] == width:
                stack.append(user)
            else:
                return f"its output is read by {op_name(user)} ({user.name}), not only returned as logits"
    return "" if hit else "its output is not an output of the model"


def logits_only_returned(name: str, program) -> str:
    """``""`` when the linear layer ``name`` is called once in the traced ``program`` and its output reaches the
    model's outputs only through views that keep the vocabulary axis whole, else the reason (the hypothesis of
    :func:`center_unembed`, checked at the example call and again at every call of another class)."""
    params = program.graph_signature.inputs_to_parameters
    nodes = [n for n in program.graph.nodes if op_name(n) == "aten.linear.default"
             and params.get(getattr(n.args[1], "name", None)) == f"{name}.weight"]
    if len(nodes) != 1:
        return f"{name!r} is called {len(nodes)} times in the traced model; center_unembed needs exactly one call"
    return _reaches_only_outputs(program, nodes[0])


# transformers' config.problem_type values whose outputs are read raw, not through a softmax over them
_RAW_READ_OUTS = {"regression": "regression values", "multi_label_classification": "one sigmoid per label"}


def center_unembed(model: nn.Module, name: str, example_inputs=(), example_kwargs: dict | None = None, *,
                   untie: bool = False) -> nn.Module:
    """A copy of ``model`` whose linear unembedding ``name`` is centred over the vocabulary axis.

    The copy's outputs are the original logits minus their mean over the vocabulary: every softmax of
    them is unchanged (proof in chapter 7). ``example_inputs``/``example_kwargs`` are traced to check
    that the logits are returned as they are. A weight shared with another parameter (a tied embedding)
    is refused unless ``untie=True``, which gives the copy's unembedding its own weight first.

    Hypothesis: the logits are read only through a softmax over the vocabulary axis. Outputs read raw (a value,
    reward or regression head) are outside it: a head with fewer than two outputs is refused with a
    ``ValueError`` (centring a single output sets it to zero), and so is a model whose ``config.problem_type``
    declares its outputs read raw (``"regression"``, ``"multi_label_classification"``), the model's own configuration
    or that of any module on the path to ``name`` (a wrapper around a ``transformers`` model). The traced graph is checked for readers inside
    the model, at the example call and again at every call of another class (another shape class, other
    non-tensor arguments, another configuration: :class:`~lnbook.folding.call_proofs.GraphCallProver`), which runs
    only when its own trace passes the check and is refused with the reason otherwise (a loss computed from
    ``labels`` reads the logits); a caller reading the raw logits is not visible there.

    Only a reader of the logits through a softmax is unaffected. A model with a ``generate`` method gets a
    ``UserWarning``: the logits processors of :data:`RAW_LOGIT_PROCESSORS` (``repetition_penalty``,
    ``encoder_repetition_penalty``, ``exponential_decay_length_penalty``) read the raw logits, so the copy can
    generate other tokens with them, and ``output_scores``/``output_logits`` return the shifted logits; greedy
    decoding and sampling with temperature, top-k or top-p are unchanged.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be the module's name (a str), got {type(name).__name__}")
    model = _eval_copy(model, "center_unembed")
    try:
        layer = model.get_submodule(name)
    except AttributeError:
        raise ValueError(f"model has no submodule {name!r}; pass the name of its unembedding (e.g. 'lm_head')") from None
    if type(layer) is not nn.Linear:
        raise TypeError(f"{name!r} is a {type(layer).__name__}; center_unembed handles an exact nn.Linear only")
    if layer.out_features < 2:
        raise ValueError(f"{name!r} has {layer.out_features} output{'' if layer.out_features == 1 else 's'}: centring the logits is exact only for a softmax "
                         "read-out over at least two of them, and a one-output head (a value, reward or regression "
                         "head, read raw) would be set to zero; leave it as it is")
    parts = name.split(".")
    for holder in (".".join(parts[:i]) for i in range(len(parts))):  # the model, then every module on the path to the
        # head: a wrapper around a transformers model has no configuration of its own
        declared = getattr(getattr(model.get_submodule(holder), "config", None), "problem_type", None)
        if declared in _RAW_READ_OUTS:
            where = f"{holder}.config" if holder else "config"
            raise ValueError(f"the model's configuration declares its outputs read as {_RAW_READ_OUTS[declared]} "
                             f"({where}.problem_type = {declared!r}), not through a softmax over them: centring {name!r} "
                             "would change its predictions; leave it as it is (if the outputs are in fact read through a "
                             f"softmax, set {where}.problem_type = 'single_label_classification' first)")
    bad = [part for part, t in (("weight", layer.weight), ("bias", layer.bias)) if t is not None
           and not bool(torch.isfinite(t.detach()).all())]
    if bad:
        raise ValueError(f"cannot centre {name!r}: its {' and '.join(bad)} {'has' if len(bad) == 1 else 'have'} "
                         "entries that are not finite (a vocabulary masked with -inf, say). The proof that centring keeps "
                         "every softmax assumes finite logits, and centring subtracts a mean that is then -inf or NaN, "
                         "which makes the logits NaN; leave this head as it is")
    tied = _shared_with(model, layer.weight, f"{name}.weight")
    if tied and not untie:
        raise ValueError(f"the weight of {name!r} is shared with {tied}: centring it would change the embedding too; "
                         "pass untie=True to give the unembedding its own copy of the weight")
    if tied:
        layer.weight = nn.Parameter(layer.weight.detach().clone())
        declare_untied_head(model)  # else a save and reload with tie_weights() would tie them again
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    program, domain, _, _ = trace_model(model, args, example_kwargs)
    why = logits_only_returned(name, program)
    if why:
        raise ValueError(f"cannot centre {name!r}: {why}; only logits that the caller reads through a softmax may shift")
    before = _outputs(_call(model, args, example_kwargs or {}))
    with torch.no_grad():
        removed = (layer.weight.mean(dim=0, keepdim=True).clone(),
                   None if layer.bias is None else layer.bias.mean().clone())
        layer.weight.sub_(removed[0])
        if layer.bias is not None:
            layer.bias.sub_(removed[1])
    # every later call is checked the same way, in a trace at that call (another call may read the logits inside the
    # model: a loss computed from labels, an output that returns them transformed), and numerically at that call's
    # sizes (a forward may compute otherwise when run than when traced)
    model.register_forward_pre_hook(GraphCallProver(functools.partial(logits_only_returned, name),
                                                    f"center_unembed's copy of {type(model).__name__}", domain,
                                                    call_state(model),
                                                    numeric=functools.partial(shift_kept_at_call, name, *removed)),
                                    with_kwargs=True)
    # a folded model (fold_layernorms) refuses calls after its weights or hooks change; this rewrite proves itself
    # (the unembedding reaches only the outputs, checked above in the graph and at every call, and the shift is
    # checked just below)
    record_proved_state(model)
    after = _outputs(_call(model, args, example_kwargs or {}))
    _check_shift(before, after, layer.out_features, name)
    if callable(getattr(model, "generate", None)):
        processors = ", ".join(f"{cls} ({arg})" for arg, cls in RAW_LOGIT_PROCESSORS.items())
        warnings.warn(f"center_unembed({name!r}): the copy's logits are the original's minus their mean over the "
                      f"vocabulary; generate() gives the same tokens with greedy decoding, temperature, top-k or top-p, "
                      f"but logits processors that read the raw logits can give other tokens: {processors}; "
                      "output_scores/output_logits return the shifted logits. Use the original model for those",
                      UserWarning, stacklevel=2)
    return model


@torch.no_grad()
def shift_kept_at_call(name: str, weight_mean: torch.Tensor, bias_mean, model: nn.Module, args, kwargs,
                       domain) -> str:
    """The numerical check of :func:`center_unembed`'s copy at a call of a new class, made after its graph check:
    float64 copies of the copy ``model`` and of the model it was made from (the removed means ``weight_mean``,
    ``bias_mean`` of head ``name`` added back) run eagerly on random inputs drawn like the call
    (:func:`lnbook.folding.tracing.draw_inputs`) at its sizes and at one other size of ``domain``, and every
    log-softmax of the logits must agree as in :func:`_check_shift`, at the tolerance of the model's own dtype (the
    stored centred weights are rounded in it). A forward that computes otherwise when run than when traced (an
    eager-only branch reading the logits at length 1) shows here, and the graph check cannot see it. Runs under
    :func:`lnbook.folding.tracing.checking_copies` (the copies' own guards do nothing). Returns ``""`` or the
    reason."""
    from lnbook.folding.tracing import checking_copies, draw_inputs

    own = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.get_default_dtype())
    with checking_copies():
        try:
            centred = copy.deepcopy(model).double().eval()
            to = (lambda t: t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t)  # noqa: E731
            centred(*pytree.tree_map(to, copy.deepcopy(tuple(args))), **pytree.tree_map(to, copy.deepcopy(dict(kwargs))))
        except Exception:  # noqa: BLE001 - no float64 form: compare in the model's own dtype
            centred, to = copy.deepcopy(model).eval(), (lambda t: t)  # noqa: E731
        original = copy.deepcopy(centred)
        head = original.get_submodule(name)
        head.weight.add_(weight_mean.to(head.weight))
        if bias_mean is not None:
            head.bias.add_(bias_mean.to(head.bias))
        env = domain.values(args, kwargs)
        others = domain.other_sizes(env) if isinstance(env, dict) and env else []
        for i, candidates in enumerate([[None], others]):
            for sizes in candidates:
                a, k = draw_inputs(tuple(args), dict(kwargs), sizes, domain, i)
                a, k = pytree.tree_map(to, (a, k))
                try:
                    before = _outputs(_call(original, *copy.deepcopy((a, k))))
                except Exception as err:  # noqa: BLE001 - the model does not run at these sizes
                    if sizes is None:
                        return f"the copies could not be run at this call's sizes ({type(err).__name__}: {err})"
                    continue
                after = _outputs(_call(centred, *copy.deepcopy((a, k))))
                try:
                    _check_shift(before, after, head.out_features, name, dtype=own)
                except (ValueError, AssertionError) as err:
                    return (f"run eagerly on float64 copies at this call's sizes, the logits moved by more than a "
                            f"common shift (the forward computes otherwise than its trace, e.g. a branch on "
                            f"torch.compiler.is_compiling()): {err}")
                break
    return ""


def _check_shift(before, after, width, name, dtype=None):
    """The copy's outputs against the original's, in the model's own dtype, on what the proposition promises: every
    log-softmax over the vocabulary unchanged. Measured on the entries that carry probability in either model (log-
    probability at least ``log eps`` of the dtype), with a tolerance of 64 machine epsilons of the dtype times the
    largest of 1 and the original's logits there: a bias that masks part of the vocabulary with very negative
    entries is left out of that scale, though it dominates the mean that centring subtracts (in float32 the other
    logits then sit on a large offset and lose their resolution). A difference above it, or NaN, raises
    ``ValueError``. ``dtype`` (default: each output's own) is the dtype whose machine epsilon sets the tolerance."""
    for a, b in zip(before, after):
        if not a.is_floating_point() or a.shape[-1:] != (width,):
            if not torch.equal(a, b):
                raise AssertionError(f"center_unembed({name!r}) changed an output that is not its logits")
            continue
        eps = torch.finfo(dtype or a.dtype).eps
        x, y = a.detach().double(), b.detach().double()
        lx, ly = torch.log_softmax(x, -1), torch.log_softmax(y, -1)
        carries = (lx >= torch.log(torch.tensor(eps, dtype=torch.float64))) | (ly >= torch.log(torch.tensor(eps, dtype=torch.float64)))
        change = float((lx - ly)[carries].abs().max()) if bool(carries.any()) else float("nan")
        tol = 64 * eps * max(float(x[carries].abs().max()) if bool(carries.any()) else float("nan"), 1.0)
        if not change <= tol:
            raise ValueError(
                f"cannot centre {name!r} in {str(a.dtype)[6:]}: the copy's log-probabilities differ from the original's "
                f"by {change:.2e} (tolerance {tol:.1e}) on the example, so the logits moved by more than a common shift. "
                "Either the head's output is transformed before it is returned (which the graph check should have "
                "refused), or the mean that centring subtracts is far from the logits that carry the probability (a "
                f"bias that masks part of the vocabulary with very negative entries, say) and in {str(a.dtype)[6:]} the "
                "shifted logits lose their resolution. Leave this head as it is"
                + ("" if a.dtype == torch.float64 else ", or centre a float64 copy of the model"))


def value_bias_sites(model: nn.Module) -> list[tuple[str, str]]:
    """``(module name, kind)`` of every attention module :func:`fold_value_biases` can rewrite."""
    out = []
    for mname, m in model.named_modules():
        kind = _kind(m)
        if kind:
            out.append((mname, kind))
    return out


def _kind(m: nn.Module) -> str:
    cls = type(m).__name__
    if cls == "CausalSelfAttention" and type(m).__module__ == "lnbook.ml.models":
        return "lnbook" if m.qkv.bias is not None else ""
    if type(m) is nn.MultiheadAttention:
        ok = m._qkv_same_embed_dim and m.in_proj_bias is not None and not _mha_refusal(m)
        return "torch" if ok else ""
    if cls == "GPT2Attention" and not getattr(m, "is_cross_attention", False):
        return "gpt2"
    return ""


def _mha_refusal(m: nn.Module) -> str:
    """Why prop-ch7-value-bias does not hold for this ``nn.MultiheadAttention`` ('' if it does)."""
    if m.add_zero_attn:
        return ("add_zero_attn=True appends a zero key and a zero value: the zero value row takes part of the "
                "softmax weight, so the attention weights on the real values do not sum to 1")
    if m.bias_v is not None:
        return ("add_bias_kv=True appends the learned bias_v as an extra value row: it takes part of the softmax "
                "weight, so the attention weights on the projected values do not sum to 1")
    return ""


def value_bias_refusals(model: nn.Module) -> list[tuple[str, str]]:
    """``(module name, reason)`` of every ``nn.MultiheadAttention`` whose value bias cannot be moved."""
    return [(n, _mha_refusal(m)) for n, m in model.named_modules()
            if type(m) is nn.MultiheadAttention and _mha_refusal(m)]


def _masked(mask: torch.Tensor, true_masks: bool) -> torch.Tensor:
    """Which entries of an attention mask take a key out of the softmax: ``True`` entries of a boolean mask if
    ``true_masks`` (torch's convention) else ``False`` entries (Hugging Face's), and ``-inf`` of an additive one
    (a finite large negative entry, as in GPT-2's eager attention, leaves the row summing to 1)."""
    if mask.dtype == torch.bool:
        return mask if true_masks else ~mask
    if mask.is_floating_point():
        return mask == float("-inf")
    raise TypeError(f"an attention mask of dtype {mask.dtype} is neither boolean nor additive; "
                    "pass a boolean or floating mask")


def fully_masked_rows(module: nn.Module, args: tuple = (), kwargs: dict | None = None) -> int:
    """How many rows of the call's attention mask have every key masked out (0: every query row of the call
    ``module(*args, **kwargs)`` has an unmasked key, the
    hypothesis of prop-ch7-value-bias holds for this call). ``module`` is an attention module that
    :func:`value_bias_sites` lists; a mask this function cannot read (not a tensor) raises ``TypeError``."""
    kwargs = dict(kwargs or {})
    kind = _kind(module)
    if kind == "lnbook":  # causal, no mask argument: every row has its own position as a key
        return 0
    bound = inspect.signature(type(module).forward).bind(module, *args, **kwargs).arguments
    if kind == "gpt2":
        masks = [(bound.get("attention_mask"), False)]
    elif kind == "torch":
        masks = [(bound.get("key_padding_mask"), True), (bound.get("attn_mask"), True)]
    else:
        raise ValueError(f"{type(module).__name__} is not an attention module that fold_value_biases rewrites")
    masked = None
    for mask, true_masks in masks:
        if mask is None:
            continue
        if not isinstance(mask, torch.Tensor):
            raise TypeError(f"cannot check the rows of an attention mask of type {type(mask).__name__}: "
                            "fold_value_biases's hypothesis (every query row has an unmasked key) is checked on "
                            "tensor masks only; pass the mask as a tensor")
        m = _masked(mask, true_masks)
        if kind == "torch":
            if mask is bound.get("key_padding_mask"):  # (N, S) or (S,): the same for every query
                m = m.reshape(-1, 1, 1, m.shape[-1])
            elif m.dim() == 3:  # (N * heads, L, S)
                m = m.reshape(-1, module.num_heads, *m.shape[-2:])
        masked = m if masked is None else masked | m
    if masked is None:
        return 0
    return int(masked.all(dim=-1).sum())


def _refuse_fully_masked_rows(module: nn.Module, args: tuple, kwargs: dict):
    """Forward pre-hook of every attention module that fold_value_biases rewrote. Skipped while lnbook traces the
    model for its own analysis (:func:`lnbook.folding.tracing.tracing_for_analysis`: the count depends on the mask's
    values, which torch.export cannot branch on, and the traced graph computes no output anyone reads), so the copy
    can be folded, centred or proved after this rewrite; every eager call runs it."""
    if tracing_for_analysis():
        return None
    n = fully_masked_rows(module, args, kwargs)
    if n:
        raise ValueError(
            f"{type(module).__name__}: this call's attention mask leaves a query row with every key masked out ({n} "
            "such row(s) of the mask: a left-padded attention_mask, or a key_padding_mask that masks a whole sequence). Under scaled_dot_product_attention "
            "such a row gets weights that sum to 0, not 1, so its value bias was not a constant and moving it into "
            "the output bias would change the output at those positions. Pad on the right, use "
            "attn_implementation='eager' (whose finite mask keeps the rows summing to 1), or run the original model")
    return None


def refuse_attention_in_training_mode(module: nn.Module, args) -> None:
    """Forward pre-hook of every attention module that :func:`fold_value_biases` rewrote: a call in training mode
    raises ``ValueError``.

    prop-ch7-value-bias needs each attention row to sum to 1. In training mode dropout on the attention weights
    zeroes some of them and scales the rest by ``1/(1-p)``, so a row no longer sums to 1 and ``b_v`` is no longer
    a constant ``W_o b_v`` after the projection: under the same dropout mask the rewritten module computes
    something else than the original. The rewrite was proved (and checked) in eval mode only, so every call in
    training mode is refused, whatever the dropout probability (it can be changed at any time by assignment)."""
    if module.training:
        raise ValueError(
            f"this {type(module).__name__} had its value bias moved into its output bias by fold_value_biases, which "
            "is exact in eval mode only: in training mode dropout on the attention weights makes a row sum to other "
            "than 1, so the moved bias would change the output. Call .eval() before running it; to train, train the "
            "original model and fold afterwards")
    return None


def _fold_one(m: nn.Module, kind: str) -> None:
    with torch.no_grad():
        if kind == "lnbook":
            c = m.out.in_features
            bv = m.qkv.bias[2 * c:]
            m.out.bias.add_(m.out.weight @ bv)
            bv.zero_()
        elif kind == "torch":
            e = m.embed_dim
            bv = m.in_proj_bias[2 * e:]
            if m.out_proj.bias is None:
                m.out_proj.bias = nn.Parameter(torch.zeros_like(bv))
            m.out_proj.bias.add_(m.out_proj.weight @ bv)
            bv.zero_()
        else:  # GPT-2: Conv1D computes x @ W + b with W of shape (in, out)
            c = m.c_proj.weight.shape[0]
            bv = m.c_attn.bias[2 * c:]
            m.c_proj.bias.add_(bv @ m.c_proj.weight)
            bv.zero_()


def fold_value_biases(model: nn.Module, example_inputs=(), example_kwargs: dict | None = None) -> tuple[nn.Module, list[str]]:
    """A copy of ``model`` with every value bias of a known attention module moved into its output bias,
    and the names of the modules rewritten. Raises ``ValueError`` if there is none.

    The check is done in float64 whatever the model's dtype: a float64 copy is folded and compared with the
    float64 original on the example (tolerance ``2**12`` float64 epsilons, relative; ``RuntimeError``
    beyond it); then the same rewrite is applied to the copy in the model's own dtype, whose rounding of
    ``b_o + W_o b_v`` (about one unit in the last place of that dtype) is not a failure of the rewrite.

    Hypothesis (prop-ch7-value-bias): every query row has at least one unmasked key. Under
    ``scaled_dot_product_attention`` (GPT-2's default ``sdpa`` attention, ``nn.MultiheadAttention`` without
    weights) a row whose keys are all masked out gets weights summing to 0, and the rewrite changes the output
    there (a left-padded batch: the padded positions). Each rewritten module of the returned copy therefore
    carries a forward pre-hook that counts such rows in the mask of every call (:func:`fully_masked_rows`) and
    raises ``ValueError`` if there is one, saying what to do; the example call is checked the same way. Dropout
    on the attention weights breaks the row sums too, so each rewritten module also refuses every call in training
    mode (:func:`refuse_attention_in_training_mode`). The
    modules are found by their class (:func:`value_bias_sites`), not in a traced graph; the hook is Python,
    so a ``torch.export`` of the copy with a mask fails on it rather than dropping the check."""
    folded = _eval_copy(model, "fold_value_biases")
    sites, refused = value_bias_sites(folded), value_bias_refusals(folded)
    why = "".join(f"; {n or type(model).__name__} is left as it is: {r}" for n, r in refused)
    if not sites:
        raise ValueError(f"{type(model).__name__} has no attention module with a value bias that fold_value_biases "
                         "knows (lnbook CausalSelfAttention, nn.MultiheadAttention with packed projections, GPT-2)"
                         + why)
    if refused:
        warnings.warn("fold_value_biases" + why, stacklevel=2)
    ref = copy.deepcopy(folded).double()
    new = copy.deepcopy(ref)
    for mname, kind in sites:
        _fold_one(new.get_submodule(mname), kind)
        new.get_submodule(mname).register_forward_pre_hook(_refuse_fully_masked_rows, with_kwargs=True)
        new.get_submodule(mname).register_forward_pre_hook(refuse_attention_in_training_mode)
    record_proved_state(new)  # checked against ref just below
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    to64 = lambda t: t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t  # noqa: E731
    a64, k64 = pytree.tree_map(to64, (args, dict(example_kwargs or {})))
    with torch.no_grad():
        for a, b in zip(_outputs(_call(ref, a64, k64)), _outputs(_call(new, a64, k64))):
            if not a.is_floating_point():
                continue
            diff, scale = entrywise_difference(a, b)  # NaN-safe, its scale from the finite entries (a masked logit)
            if not diff <= 2**12 * 2**-52 * max(scale, 1.0):
                raise RuntimeError(f"fold_value_biases changed the float64 model's output by {diff:.2e}")
    for mname, kind in sites:
        _fold_one(folded.get_submodule(mname), kind)
        folded.get_submodule(mname).register_forward_pre_hook(_refuse_fully_masked_rows, with_kwargs=True)
        folded.get_submodule(mname).register_forward_pre_hook(refuse_attention_in_training_mode)
    caches = RefuseForeignCaches(f"fold_value_biases' copy of {type(model).__name__}", sites)
    folded.register_forward_pre_hook(caches.check, with_kwargs=True)
    folded.register_forward_hook(caches.record, with_kwargs=True)
    record_proved_state(folded)  # a folded model (fold_layernorms): this rewrite proves itself, so it is recorded
    return folded, [s for s, _ in sites]
