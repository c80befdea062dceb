"""lnbook.folding.speed_glue: chapter 7's speed comparisons and quoted values from the recorded runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lnbook.folding.lab import speed_numbers
from lnbook.folding.speed_glue import PAPER_END_TO_END, PAPER_NORM, speed_comparisons, speed_glue

RECORDED = Path(__file__).resolve().parents[2] / "benchmarks" / "recorded"


@pytest.fixture(scope="module")
def speed():
    bench = json.loads((RECORDED / "fold_speed_cpu.json").read_text())
    focus = json.loads((RECORDED / "fold_speed_focus_cpu.json").read_text())
    return speed_numbers(bench, focus)


def test_every_quoted_value_is_text_in_the_chapters_format(speed):
    g = speed_glue(speed, guard=1.5e-4, no_guard=1.2e-3)
    assert len(g) == 49 and all(k.startswith("ch07-") and isinstance(v, str) and v for k, v in g.items())
    assert g["ch07-live-guard"] == "0.15 ms" and g["ch07-live-guard-share"] == "12%"
    changed = dict(speed, **{"kernel-eager": 0.123, "e2e-eager": -0.0456, "kernel-eager-min": -0.3})
    g = speed_glue(changed, guard=1e-3, no_guard=1e-3)
    assert g["ch07-kernel-eager"] == "+12%" and g["ch07-e2e-eager"] == "-4.6%"
    assert re.fullmatch(r"-30% to [+-]\d+%", g["ch07-kernel-eager-range"]), g["ch07-kernel-eager-range"]
    with pytest.raises(ValueError, match="positive times"):
        speed_glue(speed, guard=0.0, no_guard=1e-3)


def test_the_comparisons_name_the_papers_ranges_and_the_expected_verdicts(speed):
    calls = speed_comparisons(speed)
    assert [c["key"] for c in calls] == [
        "ch07-norm-speedup-eager", "ch07-norm-speedup-compiled", "ch07-norm-speedup-best",
        "ch07-end-to-end-speedup-eager", "ch07-end-to-end-speedup-compiled", "ch07-end-to-end-speedup-cuda"]
    assert all(c["paper"] == PAPER_NORM for c in calls[:3]) and all(c["paper"] == PAPER_END_TO_END for c in calls[3:])
    assert calls[0]["ours"] == speed["kernel-eager"] and calls[-1]["ours"] is None
    assert [c["expect"] for c in calls] == ["differs"] * 5 + ["not checkable here"]
    assert f"{speed['share-profiler-eager']:.1%} of the eager model's time" in calls[3]["reason"]
