"""lnbook.folding.refusals: a model's refusals said once per kind, with a count, never cut; the full messages kept.

Issue 33: the lab's real-model table pasted the detector's messages together, four per cell, one cut off mid-phrase
("along the ...;"). The messages here are the analysis's own (lnbook.folding.fold on torch's post-LN encoder), plus
one of each kind the analysis writes.
"""

from __future__ import annotations

import pytest

from lnbook.folding.refusals import _SHORT, refusal_kind, short_reason, summarise_refusals

GAIN = "the output of aten.layer_norm.default at encoder.layer.{}.output.LayerNorm has a per-feature gain, so its mean varies with the input"
KINDS = {
    "the output of aten.layer_norm.default at a.norm has a bias that is not centred":
        "the LayerNorm before it has a bias that is not centred",
    "the output of linear '0' is not zero-mean and cannot be centred: read by aten.linear.default at 1.layers.0.self_attn, "
    "which does not carry a shift along the axis (no rule for this operation)":
        "the linear that writes its input cannot be centred: another operation reads its output and would change",
    "the output of embedding 'transformer.wte' is not zero-mean and cannot be centred: parameter 'transformer.wte.weight' "
    "is also read by aten.linear.default at lm_head (shared or tied weights)":
        "the embedding that writes its input cannot be centred: its weight is read by another operation too (shared or tied, or looked up twice)",
    "the model input 'src' is not zero-mean by construction": "it reads the model input, which is not zero-mean",
    "the output of aten.relu.default at 1 (an elementwise nonlinearity) is not known to be zero-mean: no rule for this operation":
        "an elementwise nonlinearity before it makes its input not zero-mean",
    "foldable, not swapped: its module 'stages.0.layers.0.layernorm' is a ConvNextLayerNorm, not exactly nn.LayerNorm (a "
    "subclass or another module may compute more than the norm, e.g. permute around it); only nn.LayerNorm is swapped":
        "foldable, not swapped: its module is a ConvNextLayerNorm, not nn.LayerNorm",
}


def test_each_kind_of_message_is_said_without_its_place():
    for message, words in KINDS.items():
        assert refusal_kind(message) == words, message
    assert refusal_kind(GAIN.format(3)) == refusal_kind(GAIN.format(0)) == (
        "the LayerNorm before it has a per-feature gain, so the mean of its input varies with the input")
    unknown = "a reason of a kind this module does not know, " + "long " * 40 + "and whole to its end"
    assert refusal_kind(unknown) == unknown  # never cut, never guessed


def test_a_cell_says_each_kind_once_with_its_count_and_keeps_every_message():
    messages = {GAIN.format(n): 1 for n in range(3)} | {"the model input 'src' is not zero-mean by construction": 1}
    summary = summarise_refusals(messages)
    assert summary.cell() == ("3 LayerNorms: the LayerNorm before it has a per-feature gain, so the mean of its input "
                              "varies with the input; 1 LayerNorm: it reads the model input, which is not zero-mean")
    assert summary.messages == messages and summary.total == 4 and str(summary) == summary.cell()
    cell = summary.table_cell()
    assert cell.summary == summary.cell() and cell.lines == tuple(messages)  # the full messages, folded under it
    assert summarise_refusals([GAIN.format(1)] * 2).table_cell().lines == ("(2x) " + GAIN.format(1),)
    assert summarise_refusals([]).table_cell() is None
    assert summarise_refusals([]).cell() == "" and summarise_refusals([GAIN.format(1)] * 2).kinds == {
        refusal_kind(GAIN.format(1)): 2}


def test_a_short_cell_says_each_kind_in_a_few_words_with_its_count():
    """The table cell a reader sees: each kind in a few words (the kinds and full messages go in a list below)."""
    messages = {GAIN.format(n): 1 for n in range(3)} | {"the model input 'src' is not zero-mean by construction": 1}
    assert summarise_refusals(messages).short_cell() == "a gain before it (3); reads the model input"
    assert summarise_refusals([]).short_cell() == ""
    shorts = {short_reason(refusal_kind(m)) for m in KINDS}
    assert shorts == {"an uncentred bias before it", "its linear cannot be centred", "its embedding cannot be centred",
                      "reads the model input", "a nonlinearity before it", "not swapped: a ConvNextLayerNorm"}, shorts
    # every short reason is short, and every known kind has one (a kind of _KINDS missing here would print whole)
    assert all(len(w) <= 40 for w in set(_SHORT.values()) | shorts)
    unknown = "a reason of a kind this module does not know, " + "long " * 40 + "and whole to its end"
    assert short_reason(unknown) == unknown  # never cut, never guessed
    with pytest.raises(TypeError, match="refusal kind is a string"):
        short_reason(None)


def test_the_analysis_own_messages_of_a_post_ln_encoder_are_summarised_whole():
    """torch's post-LN encoder behind a linear input (the lab's row): its four refusals, of two kinds, each once."""
    from lnbook.folding.real_models import build_real_model
    from lnbook.folding.fold import find_foldable_layernorms

    model, args, kwargs = build_real_model("torch_encoder_post_ln")
    reasons = [v.reason for v in find_foldable_layernorms(model, args, kwargs).refused]
    summary = summarise_refusals(reasons)
    assert summary.total == len(reasons) == 4 and len(summary.kinds) == 2, summary
    assert summary.cell().startswith("3 LayerNorms: the LayerNorm before it has a per-feature gain"), summary.cell()
    assert "1 LayerNorm: the linear that writes its input cannot be centred" in summary.cell(), summary.cell()
    assert "..." not in summary.cell() and "aten." not in summary.cell()
    assert list(summary.messages) == list(dict.fromkeys(reasons))  # every message whole, for the reader who opens it


@pytest.mark.parametrize("bad, error, match", [
    ("one string", TypeError, "not one string"), ([3], TypeError, "is a string"),
    ({"a reason": 0}, ValueError, ">= 1"), ({"a reason": True}, ValueError, ">= 1"),
])
def test_bad_input_is_refused_with_what_to_give(bad, error, match):
    with pytest.raises(error, match=match):
        summarise_refusals(bad)


def _verdict(name, foldable, reason="", swap=""):
    from lnbook.folding.fold import LayerNormVerdict

    return LayerNormVerdict(node="layer_norm", module=name, width=384, eps=1e-12, affine="gain+bias",
                            foldable=foldable, reason=reason, swap=swap)


def test_a_minilm_like_report_is_two_rows_with_the_reason_once():
    """Issue 33 (the lab's MiniLM report was 13 rows, the same 9-line reason in 12): one foldable embedding norm and
    twelve refused for one reason are two rows; every LayerNorm is counted once; the reason is the kind, once."""
    from lnbook.folding.refusals import verdict_groups

    places = [f"encoder.layer.{i}.{part}.LayerNorm" for i in range(6) for part in ("attention.output", "output")]
    verdicts = [_verdict("embeddings.LayerNorm", True)] + [_verdict(p, False, GAIN.format(p)) for p in places]
    table = verdict_groups(verdicts)
    assert [str(cell) for cell in table.column("LayerNorms")] == [
        "embeddings.LayerNorm", "attention.output.LayerNorm in encoder.layer 0–5; output.LayerNorm in encoder.layer 0–5"]
    # one module group per line on the page, and no line break inside a dotted name (screenshot read 51, item 2)
    html = table._repr_html_()
    assert "attention.output.LayerNorm in encoder.layer 0–5<br>" in html.replace("<span class='lnbook-nobreak'>", "").replace("</span>", "")
    assert "<span class='lnbook-nobreak'>encoder.layer</span>" in html
    assert table.column("how many") == [1, 12] and table.column("verdict") == ["foldable", "refused"]
    assert table.column("why") == ["its input has zero mean once its writers are centred",  # not a blank cell
                                   "the LayerNorm before it has a per-feature gain, so the mean of its input varies with the input"]
    assert sum(table.column("how many")) == len(verdicts)


def test_verdict_groups_keep_kinds_and_swap_refusals_apart():
    from lnbook.folding.refusals import verdict_groups

    swap = ("its module 'stages.0.norm' is a ConvNextLayerNorm, not exactly nn.LayerNorm (a subclass or another module may "
            "compute more than the norm, e.g. permute around it); only nn.LayerNorm is swapped")
    verdicts = [_verdict("h.0.ln", False, "the model input 'x' is not zero-mean by construction"),
                _verdict("h.1.ln", False, GAIN.format("h.0.ln")), _verdict("stages.0.norm", True, swap=swap),
                _verdict("h.2.ln", False, GAIN.format("h.1.ln"))]
    table = verdict_groups(verdicts)
    assert [str(cell) for cell in table.column("LayerNorms")] == ["h.0.ln", "ln in h 1–2", "stages.0.norm"]
    assert table.column("verdict") == ["refused", "refused", "foldable, not swapped"]
    assert table.column("why")[2] == "its module is a ConvNextLayerNorm, not nn.LayerNorm"
    every = verdict_groups([_verdict(f"h.{i}.ln", True) for i in range(3)])  # all foldable: no column of blanks
    assert every.columns == ["LayerNorms", "how many", "verdict"] and [str(c) for c in every.column("LayerNorms")] == ["ln in h 0–2"]
    with pytest.raises(ValueError, match="no LayerNorm"):
        verdict_groups([])


def test_name_ranges_writes_each_pattern_once_and_leaves_other_names_whole():
    from lnbook.folding.refusals import name_ranges

    assert name_ranges(["emb.LayerNorm", "h.0.ln_1", "h.1.ln_1", "h.3.ln_1", "h.0.ln_2", "a.1.b.2.ln"]) == [
        "emb.LayerNorm", "h.{0-1,3}.ln_1", "h.0.ln_2", "a.1.b.2.ln"]
    assert name_ranges(["blocks.10", "blocks.9", "blocks.11"]) == ["blocks.{9-11}"]
    # several numbered segments: grouped by the first (screenshot read 51, item 2: "blocks.0.mlp.2; blocks.1.mlp.2")
    assert name_ranges(["blocks.0.mlp.2", "blocks.1.mlp.2", "a.0.b.0", "a.1.b.1"]) == [
        "blocks.{0-1}.mlp.2", "a.0.b.0", "a.1.b.1"]
    with pytest.raises(TypeError, match="not one string"):
        name_ranges("h.0.ln")


def test_module_ranges_write_what_repeats_then_where_with_en_dashes():
    from lnbook.folding.refusals import module_ranges

    assert module_ranges(["emb.LayerNorm", "h.0.ln_1", "h.1.ln_1", "h.3.ln_1", "a.1.b.2.ln", "blocks.9", "blocks.10"]) == [
        "emb.LayerNorm", "ln_1 in h 0–1, 3", "a.1.b.2.ln", "blocks 9–10"]
    assert module_ranges(["blocks.0.attn.out", "blocks.1.attn.out"]) == ["attn.out in blocks 0–1"]
    assert module_ranges(["blocks.0.mlp.2", "blocks.1.mlp.2"]) == ["mlp.2 in blocks 0–1"]
    assert not any("{" in text or "-" in text for text in module_ranges([f"h.{i}.ln" for i in (0, 1, 2, 5)]))
    with pytest.raises(TypeError, match="not one string"):
        module_ranges("h.0.ln")
