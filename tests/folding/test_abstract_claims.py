"""lnbook.folding.abstract_claims: the records of the structural claims of Guo et al.'s abstract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lnbook.book.reproduction import compare
from lnbook.folding.abstract_claims import (
    ABSTRACT_SENTENCE, PRE_LN_BODIES, QUOTE_EXACT, QUOTE_FOLDABLE, QUOTE_PREDICTIONS, WIDELY_USED, foldable_counts,
    structural_comparisons,
)
from lnbook.folding.fold import check_tolerance
from lnbook.folding.real_models import CHAPTER_TABLE, FAST_MODELS, REAL_MODELS

LAB = Path(__file__).resolve().parents[2] / "notebooks" / "ch07_folding_lab.ipynb"


def rows(models=FAST_MODELS):
    """The rows the lab computes at its small scale, as real_model_table returns them."""
    return [dict(model=m, layer_norms=CHAPTER_TABLE[m][0], foldable=CHAPTER_TABLE[m][1], swapped=CHAPTER_TABLE[m][2],
                 refusals={}) for m in models]


RUN = {"diff64": 3.1e-16, "diff32": 2.4e-7, "diff32_affine": 3.0e-7, "uncentred": 0.41}
VIT = {"changed": 0, "n_test": 297, "difference": 4.5e-7}


def verdicts(calls):
    return {c["key"]: compare(**c, record=False, show=False).verdict for c in calls}


def test_the_quotes_are_words_of_the_abstracts_sentence():
    # the sentence as the abstract has it (the project's copy of the abstract, seed 002, checked word for word)
    assert ABSTRACT_SENTENCE.startswith("Our analysis shows that many LNs")
    for quote in (QUOTE_FOLDABLE, QUOTE_EXACT, QUOTE_PREDICTIONS):
        assert quote in ABSTRACT_SENTENCE
    calls = structural_comparisons(rows(), RUN, VIT)
    assert [c["key"] for c in calls] == ["ch07-foldable-layernorms", "ch07-exact-conversion-float64",
                                         "ch07-exact-conversion-float32", "ch07-predictions-unchanged"]
    for call, quote in zip(calls, (QUOTE_FOLDABLE, QUOTE_EXACT, QUOTE_EXACT, QUOTE_PREDICTIONS)):
        assert f'"{quote}"' in call["claim"] and call["source"] == "guo2026foldable" and call["reconstruction"]


def test_the_records_are_consistent_reconstructions_with_stated_tolerances():
    calls = structural_comparisons(rows(), RUN, VIT)
    assert set(verdicts(calls).values()) == {"consistent (reconstruction)"}
    results = [compare(**c, record=False, show=False) for c in calls]
    assert [r.tolerance for r in results] == [
        "tolerance exact", "tolerance abs 1e-12",
        f"tolerance abs {check_tolerance(torch.float32):.3g}", "tolerance abs 0"]
    # the float32 record is the largest of the three float32 differences, and names the control
    assert calls[2]["ours"] == 4.5e-7 and "by 0.41 of the largest output" in calls[2]["reason"]
    assert calls[3]["ours"] == 0 and "its 297 test images" in calls[3]["reason"]


def test_the_foldable_record_quotes_the_counts_of_the_chapters_table():
    counts = foldable_counts()
    assert set(WIDELY_USED) <= set(REAL_MODELS) and set(PRE_LN_BODIES) < set(WIDELY_USED)
    assert sum(counts[m][1] for m in PRE_LN_BODIES) == 34 and all(counts[m][0] == counts[m][1] for m in PRE_LN_BODIES)
    reason = structural_comparisons(rows(), RUN, VIT)[0]["reason"]
    # the pre-LN bodies 34 of 34; the others per architecture (BLOOM 1/6, CLIP 1/6, BERT 1/5, ConvNeXt 1/5, GPT-2
    # with its tied head 0/5), never pooled (referee 18 of chapter 7, finding 4: the pooled 38 of 61 depends on the
    # table's depth of 2 layers); 4 of the table's 18 rows recomputed at the lab's small scale
    assert "34 of 34" in reason and "38 of" not in reason and "61" not in reason
    assert "at the table's depth of 2 layers" in reason and "no count pooled over architectures" in reason
    assert "BERT 1 of 5" in reason and "GPT-2 with its language-model head 0 of 5" in reason
    assert "this run recomputed 4 of the table's 18 rows" in reason
    with pytest.raises(ValueError, match="not rows of the chapter's table"):
        foldable_counts(("gpt2", "gpt3"))


def test_a_pre_ln_body_that_stops_folding_turns_the_record_into_differs(monkeypatch):
    """The yes/no record follows the table: with one LayerNorm of GPT-2's body refused it says no, and differs."""
    monkeypatch.setitem(CHAPTER_TABLE, "gpt2", (5, 4, 4))
    calls = structural_comparisons(rows(), RUN, VIT)
    assert calls[0]["ours"] is False and verdicts(calls)["ch07-foldable-layernorms"] == "differs"


def test_a_difference_beyond_the_check_or_a_changed_prediction_differs():
    far = dict(RUN, diff64=1e-9, diff32_affine=1e-3)
    v = verdicts(structural_comparisons(rows(), far, dict(VIT, changed=1)))
    assert v == {"ch07-foldable-layernorms": "consistent (reconstruction)", "ch07-exact-conversion-float64": "differs",
                 "ch07-exact-conversion-float32": "differs", "ch07-predictions-unchanged": "differs"}


def test_bad_input_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="the lab's row 'bert' gives .* \\(5, 2, 2\\), the chapter's table \\(5, 1, 1\\)"):
        structural_comparisons(rows() + [dict(model="bert", layer_norms=5, foldable=2, swapped=2)], RUN, VIT)
    with pytest.raises(ValueError, match="'gpt3' is not a row"):
        structural_comparisons([dict(model="gpt3", layer_norms=5, foldable=5, swapped=5)], RUN, VIT)
    with pytest.raises(TypeError, match="non-empty list"):
        structural_comparisons([], RUN, VIT)
    with pytest.raises(TypeError, match="each row must be a dict"):
        structural_comparisons([("opt", 5, 5, 5)], RUN, VIT)
    with pytest.raises(ValueError, match=r"run\['diff64'\] must be a finite relative difference"):
        structural_comparisons(rows(), {k: v for k, v in RUN.items() if k != "diff64"}, VIT)
    with pytest.raises(ValueError, match=r"vit\['difference'\] must be a finite"):
        structural_comparisons(rows(), RUN, dict(VIT, difference=float("nan")))
    with pytest.raises(ValueError, match=r"vit\['changed'\] must be a count"):
        structural_comparisons(rows(), RUN, dict(VIT, changed=0.0))
    with pytest.raises(ValueError, match="0 <= changed <= n_test"):
        structural_comparisons(rows(), RUN, dict(VIT, changed=3, n_test=2))


def test_the_folding_lab_records_every_structural_comparison():
    """The lab compares each of these records (the chapter's Records dropdown points to them), in a hide-input cell."""
    cells = [c for c in json.loads(LAB.read_text())["cells"] if c["cell_type"] == "code"]
    found = [c for c in cells if "structural_comparisons(" in "".join(c["source"])]
    assert len(found) == 1, "the folding lab must compare the records of structural_comparisons once"
    source = "".join(found[0]["source"])
    assert "compare(**call)" in source and "hide-input" in found[0]["metadata"].get("tags", [])
