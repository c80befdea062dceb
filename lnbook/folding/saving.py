r"""Saving and reloading folded models: the RMSNorms come back only through a new proof.

Chapter 7. A folded model (:func:`lnbook.folding.fold.fold_layernorms`) is the original architecture with some
writers centred and some ``nn.LayerNorm`` modules replaced by RMSNorms. Two ways to keep it:

* **the whole module**: ``torch.save(folded, path)`` and ``torch.load(path, weights_only=False)`` keep the
  RMSNorms, the call guard and the training-mode refusal (all of them pickle), bit for bit;
* **its weights**: ``folded.state_dict()`` (what ``torch.save(folded.state_dict())`` and Hugging Face's
  ``save_pretrained`` store) has the original's keys whenever the affine stays in the norm (``affine="keep"``:
  the RMSNorm's gain is ``weight``, the bias ``bias``). Loaded into the original architecture (Hugging Face's
  ``from_pretrained``, or ``load_state_dict`` into a model you build) the weights give a model with
  *LayerNorms* and centred writers: it computes the original function (LayerNorm is blind to the mean, and
  centring changes no output), but it is not the folded model and not faster.

:func:`load_folded` turns such weights back into the folded model: it loads them into the original architecture
and folds that model again at an example call. The fold is proved again at load time (centring the centred
writers again moves them by rounding only, so in effect only the norms change), the call guard is that of the new
proof, and for a Hugging Face
model the result must swap exactly the modules that the fold recorded in the saved config
(``config.lnbook_fold``, written by :func:`~lnbook.folding.fold.fold_layernorms`): otherwise it raises
``ValueError`` naming the difference. Without an example call there is nothing to prove the fold for, so an
example is required.

Tests: ``tests/folding/test_saving.py``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping

import torch
from torch import nn

from lnbook.folding.fold import FOLD_RECORD, fold_layernorms

__all__ = ["load_folded", "fold_record", "swapped_norms"]


def fold_record(model: nn.Module) -> dict | None:
    """The fold recorded in a Hugging Face model's config (``{"layer_norms": [...], "affine": ...}``), else ``None``."""
    config = getattr(model, "config", None)
    record = getattr(config, FOLD_RECORD, None) if config is not None else None
    if record is None:
        return None
    if not isinstance(record, Mapping) or not isinstance(record.get("layer_norms"), (list, tuple)):
        raise ValueError(f"config.{FOLD_RECORD} is {record!r}, not a fold record written by fold_layernorms")
    return {"layer_norms": sorted(record["layer_norms"]), "affine": record.get("affine", "keep")}


def swapped_norms(folded: nn.Module, original: nn.Module) -> list[str]:
    """The qualified names of the modules that are ``nn.LayerNorm`` in ``original`` and RMSNorms in ``folded``."""
    before = dict(original.named_modules())
    return sorted(name for name, m in folded.named_modules()
                  if isinstance(m, nn.RMSNorm) and type(before.get(name)) is nn.LayerNorm)


def _from_pretrained(path: str | os.PathLike, kwargs: dict) -> tuple[nn.Module, list[str]]:
    """The model of a ``save_pretrained`` directory in the architecture its config names, and the LayerNorms whose
    gains and biases its weights lack (:func:`_fit_weights`: every other key must fit, as in the ``state_dict=``
    route)."""
    try:
        import transformers
    except ImportError as err:  # pragma: no cover - transformers is a dependency
        raise TypeError("loading a save_pretrained directory needs transformers; pass a model instead") from err
    config = transformers.AutoConfig.from_pretrained(path)
    names = list(getattr(config, "architectures", None) or [])
    cls = getattr(transformers, names[0], None) if names else None
    if cls is None:
        raise ValueError(f"{path}: its config names no transformers architecture ({names!r}); build the model "
                         "yourself and pass it with state_dict=")
    if "output_loading_info" in kwargs:
        raise TypeError("output_loading_info is set by load_folded (it refuses weights that do not fit); leave it out")
    kwargs = {"dtype": "auto", **kwargs, "output_loading_info": True}
    model, info = cls.from_pretrained(path, **kwargs)
    mismatched = [k if isinstance(k, str) else k[0] for k in info.get("mismatched_keys", ())]
    folded_affine = _fit_weights(model, info.get("missing_keys", ()), info.get("unexpected_keys", ()), mismatched,
                                 info.get("error_msgs", ()), where=str(path))
    return model.eval(), folded_affine


def _fit_weights(model: nn.Module, missing, unexpected, mismatched=(), errors=(), *,
                 where: str = "the state dict") -> list[str]:
    """Check what loading a folded model's weights into the original architecture ``model`` left out, and set the
    LayerNorm gains and biases that ``affine="fold"`` moved into the next layers (its RMSNorms have no parameters)
    to 1 and 0, which with the gains and biases already moved is the same function; returns the names of those
    LayerNorms (sorted; empty when none). A LayerNorm that lacks only some of its affine keys (its gain but not its
    bias) is not what such a fold leaves and raises ``ValueError``, and so does any other missing, unexpected or
    mismatched key: an unexpected key is a parameter of the folded model that the architecture has no place for
    (``affine="fold"`` gives an untied language-model head the final norm's bias as a new ``lm_head.bias``), and
    loading without it computes another function. :func:`load_folded` then checks that the redone fold swaps
    exactly these LayerNorms."""
    norms = {f"{n}.{p}": (m, p) for n, m in model.named_modules() if type(m) is nn.LayerNorm
             for p in ("weight", "bias") if getattr(m, p, None) is not None}
    missing, unexpected = sorted(missing), sorted(unexpected)
    other = [k for k in missing if k not in norms]
    if unexpected or other or mismatched or errors:
        raise ValueError(
            f"{where} does not fit this architecture: missing {other[:5]}, unexpected {unexpected[:5]}"
            f"{f', of another shape {sorted(mismatched)[:5]}' if mismatched else ''}"
            f"{f', errors {list(errors)[:2]}' if errors else ''} ({type(model).__name__}). Loaded without them the "
            "model would compute another function than the saved fold. An unexpected key is "
            "a parameter the fold added (affine='fold' moves a bias into a layer that has none, such as an untied "
            "lm_head): keep such a fold whole (torch.save(folded) and torch.load(path, weights_only=False)), or fold "
            "with affine='keep' before saving its weights; otherwise pass a fresh model of the architecture that "
            "was folded")
    owners = {key.rpartition(".")[0] for key in missing}
    partial = sorted(k for o in owners for k in norms if k.rpartition(".")[0] == o and k not in missing)
    if partial:
        raise ValueError(
            f"{where} lacks some affine parameters of LayerNorm(s) {sorted(owners)} but has {partial}: a fold with "
            "affine='fold' leaves out every gain and bias of each norm it swaps, so these weights are not a saved fold "
            "(a damaged or edited file?); loaded with the missing ones set to 1 and 0 they would compute another "
            "function. Save the folded model again")
    with torch.no_grad():
        for key in missing:
            m, p = norms[key]
            getattr(m, p).fill_(1.0 if p == "weight" else 0.0)
    return sorted(owners)


def _load_weights(model: nn.Module, state_dict: Mapping) -> list[str]:
    """Load a folded model's ``state_dict`` into the original architecture ``model``; the LayerNorms whose gains and
    biases it lacked (``affine="fold"``, :func:`_fit_weights`)."""
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    return _fit_weights(model, missing, unexpected)


def load_folded(source, example_inputs, example_kwargs: dict | None = None, *, state_dict: Mapping | None = None,
                **from_pretrained_kwargs) -> nn.Module:
    """The folded model again, from saved weights: loaded into the original architecture, then folded and proved.

    ``source`` is a directory written by ``save_pretrained`` of a folded Hugging Face model (the class is the one
    its config names; ``from_pretrained_kwargs`` go to ``from_pretrained``, ``dtype="auto"`` by default: the saved
    dtype), or a freshly built model of the original architecture, into which ``state_dict`` (the folded model's,
    e.g. from ``torch.load(path)``) is loaded. In both routes every key must fit (else ``ValueError``: a fold that
    added a parameter the architecture lacks, ``lm_head.bias`` of an untied head under ``affine="fold"``, is kept whole
    with ``torch.save``), except the LayerNorm gains and biases that a fold
    with ``affine="fold"`` moved into the next layers (set to 1 and 0, and the fold is redone with ``affine="fold"``);
    ``source`` itself is not changed.
    ``example_inputs`` / ``example_kwargs`` are the call to prove the fold for, as in ``fold_layernorms``.

    Raises ``ValueError`` when the weights fold differently from the recorded fold (another set of swapped
    norms), and whatever ``fold_layernorms`` raises when nothing folds or the check fails. A plain
    ``from_pretrained`` of the same directory gives the LayerNorm model of the module docstring when the fold added no
    parameter (``affine="keep"``, or ``affine="fold"`` where every linear layer reading a swapped norm has a bias); a
    fold that added biases (``fold_layernorms`` warns, naming them) loses them in a plain ``from_pretrained``, which
    then computes another function.
    """
    if isinstance(source, (str, os.PathLike)):
        if state_dict is not None:
            raise TypeError("pass state_dict= with a model, not with a save_pretrained directory")
        model, filled = _from_pretrained(source, from_pretrained_kwargs)
    elif isinstance(source, nn.Module):
        if from_pretrained_kwargs:
            raise TypeError(f"{sorted(from_pretrained_kwargs)} are from_pretrained arguments: pass a directory")
        import copy

        model = copy.deepcopy(source).eval()
        filled = _load_weights(model, state_dict) if state_dict is not None else []
    else:
        raise TypeError(f"source must be a save_pretrained directory or an nn.Module, got {type(source).__name__}")
    record = fold_record(model)
    affine = record["affine"] if record is not None else ("fold" if filled else "keep")
    if filled and affine != "fold":
        raise ValueError(
            f"the weights lack the gains and biases of LayerNorm(s) {filled}, but the recorded fold (config."
            f"{FOLD_RECORD}) has affine={affine!r}, which keeps them: these weights are not that fold's (a damaged or "
            "edited file?), and loaded with them set to 1 and 0 they would compute another function")
    if record is not None:
        delattr(model.config, FOLD_RECORD)  # the reloaded model is the original again until folded
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the LayerNorms left unchanged were left so by the recorded fold too
        folded = fold_layernorms(model, example_inputs, example_kwargs, affine=affine)
    now = swapped_norms(folded, model)
    if filled:  # affine="fold": the norms whose parameters were left out must be exactly those the fold swaps again
        with_affine = [n for n in now if any(p is not None for p in (getattr(model.get_submodule(n), "weight", None),
                                                                     getattr(model.get_submodule(n), "bias", None)))]
        if filled != with_affine:
            raise ValueError(
                f"the weights lack the gains and biases of LayerNorm(s) {filled}, which an affine='fold' fold leaves "
                f"out of the norms it swaps, but the fold redone at this example swaps {with_affine}: a norm whose "
                "parameters were set to 1 and 0 without being swapped computes another function than the saved fold "
                "(a damaged or edited file, or another example call)")
    if record is not None and now != record["layer_norms"]:
        now, then = set(now), set(record["layer_norms"])
        raise ValueError(
            f"the reloaded weights fold differently from the saved fold: swapped now but not then "
            f"{sorted(now - then)}, then but not now {sorted(then - now)}. The example call or the weights differ "
            "from those of the fold: pass the example the model was folded with"
        )
    return folded
