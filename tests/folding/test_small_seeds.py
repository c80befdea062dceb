"""Chapter 7's small Transformers over three seeds per norm (referee 20 of chapter 7, finding 8: one seed per small
model printed percentile ranges with no spread): lnbook.folding.lab's train_small_models, seeds_summary,
paired_seed_comparison, weak_reading_uninformative_over_seeds, small_models_table and small_seeds_figure."""

from __future__ import annotations

import types

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from lnbook.folding.lab import (  # noqa: E402
    SMALL_SEEDS,
    SmallRun,
    null_summary,
    paired_seed_comparison,
    profiles_over_seeds,
    seeds_summary,
    small_models_table,
    small_seeds_figure,
    train_small_models,
    weak_reading_uninformative_over_seeds,
)
from lnbook.folding.uniform_angles import UniformNull  # noqa: E402

K = 99  # random directions of the planted rows: mean |cos| 0.01, 0.02, ..., 0.99


def _row(percentile: float, layer: str = "x", lean: bool = False) -> UniformNull:
    """A layer whose uniform direction sits at ``percentile`` of K planted random directions (``lean``: far above all
    of them, so that it stands out at family-wise level 5% when the other layers do not)."""
    by_direction = tuple((k + 1) / 100 for k in range(K))
    ones = 10.0 if lean else (percentile / 100 * K + 0.5) / 100
    return UniformNull(layer, 100, ones, tuple(sorted(by_direction)), float(percentile), by_direction, 0, 8)


def _run(norm, seed, trained, initial=None, loss=2.0, lean_layer=None):
    rows = tuple(_row(p, f"l{i}", lean=(i == lean_layer)) for i, p in enumerate(trained))
    init = tuple(_row(p, f"l{i}") for i, p in enumerate(initial or [50] * len(trained)))
    return SmallRun(norm, seed, loss, rows, init)


# the ci lab's percentiles of the LayerNorm models, three layers of each seed
LN = [_run("ln", 0, [46, 55, 8], loss=3.009), _run("ln", 1, [73, 70, 4], loss=2.988), _run("ln", 2, [92, 92, 15], loss=3.003)]


def test_seeds_summary_spreads_every_statistic_over_the_seeds():
    """Each seed's range, in seed order, and the lowest and highest percentile of each seed with their range over the
    seeds: a summary computed from one seed (the old one-seed lab) or from the pooled layers gives other strings."""
    s = seeds_summary(LN)
    assert s["seeds"] == [0, 1, 2]
    assert s["percentiles"] == "8\u201355, 4\u201373 and 15\u201392"
    assert s["lowest"] == [8, 4, 15] and s["highest"] == [55, 73, 92]
    assert s["lowest-range"] == "4\u201315" and s["highest-range"] == "55\u201392"
    assert (s["lean"], s["avoid"], s["lean_share"]) == ("0 of 3", "0 of 3", 0.0)
    assert seeds_summary(LN, "initial")["percentiles"] == "50, 50 and 50"  # one value where a seed's range is one
    assert seeds_summary(LN[:1])["percentiles"] == "8\u201355" and seeds_summary(LN[:1])["lowest-range"] == "8"
    # whole percentiles, as printed: 73.0 and 73.4 both read 73, and the comparison of the norms calls them equal
    near = seeds_summary([_run("ln", 0, [10.4, 73.4]), _run("ln", 1, [9.6, 72.6])])
    assert near["lowest"] == [10, 10] and near["highest"] == [73, 73] and near["percentiles"] == "10\u201373 and 10\u201373"
    assert paired_seed_comparison(near["highest"], [73, 73], [0, 1])["ties"] == 2


def test_a_count_that_differs_between_seeds_is_a_range_and_the_largest_share_is_kept():
    runs = [LN[0], _run("ln", 1, [73, 70, 4], lean_layer=0), LN[2]]  # 1 stands out in one layer of seed 1 only
    s = seeds_summary(runs)
    assert [x["lean"] for x in s["per_seed"]] == ["0 of 3", "1 of 3", "0 of 3"]
    assert s["lean"] == "0\u20131 of 3" and s["lean_share"] == pytest.approx(100 / 3)


def test_over_the_seeds_each_seed_is_tested_at_alpha_over_the_number_of_seeds():
    """"1 stands out in some layer of some seed" is one test over all the seeds' layers: each seed at level 5%/3
    (Bonferroni), so that the family-wise level over three seeds is at most 5%, not 1 - 0.95^3 = 14% (referee 27 of
    chapter 7, finding 6). A layer with family-wise p = 0.03 in one seed stands out at 5% for that seed alone, not
    over the three seeds; a layer above every direction (p = 0.01) stands out in both."""
    borderline = _run("ln", 1, [99, 70, 4])
    assert null_summary(list(borderline.trained), 0.05)["lean"] == "1 of 3"  # that seed alone, at 5%
    s = seeds_summary([LN[0], borderline, LN[2]])
    assert s["alpha_per_seed"] == pytest.approx(0.05 / 3)
    assert s["lean"] == "0 of 3" and s["lean_share"] == 0.0  # over the three seeds, at 5% family-wise
    clear = seeds_summary([LN[0], _run("ln", 1, [73, 70, 4], lean_layer=0), LN[2]])
    assert clear["lean"] == "0\u20131 of 3" and clear["lean_share"] > 0
    assert seeds_summary(LN[:1])["alpha_per_seed"] == 0.05  # one seed: its own level
    with pytest.raises(ValueError, match="alpha"):
        seeds_summary(LN, alpha=0.0)


def test_profiles_over_seeds_gives_each_draws_verdict_and_their_range():
    """A verdict over several draws (other random directions, or other random weights of one architecture): a count
    where every draw has it, else its range, and each draw's percentiles in draw order (referee 27 of chapter 7,
    finding 8: the MiniLM control's percentiles were one seed's)."""
    same = profiles_over_seeds([list(r.trained) for r in LN])
    assert same["lean"] == "0 of 3" and same["percentiles"] == "8\u201355, 4\u201373 and 15\u201392"
    assert [s["percentiles"] for s in same["per_seed"]] == ["8\u201355", "4\u201373", "15\u201392"]
    mixed = profiles_over_seeds([list(LN[0].trained), list(_run("ln", 1, [73, 70, 4], lean_layer=0).trained)])
    assert mixed["lean"] == "0\u20131 of 3"  # each draw at 5% on its own: seed 1's layer stands out there
    assert profiles_over_seeds([list(LN[0].trained)])["percentiles"] == "8\u201355"
    with pytest.raises(TypeError, match="null_profile"):
        profiles_over_seeds([])
    with pytest.raises(ValueError, match="numbers of layers"):
        profiles_over_seeds([list(LN[0].trained), list(_run("ln", 1, [1, 2]).trained)])


def test_seeds_summary_refuses_what_it_cannot_summarise():
    with pytest.raises(TypeError, match="SmallRun"):
        seeds_summary([])
    with pytest.raises(ValueError, match="'trained' or 'initial'"):
        seeds_summary(LN, "final")
    with pytest.raises(ValueError, match="numbers of norm layers"):
        seeds_summary([LN[0], _run("ln", 1, [1, 2])])


def test_paired_seed_comparison_is_a_sign_test_over_the_seeds():
    """Three seeds on one side happen with probability 2/2**3 = 1/4 when the norm does not matter: the words say so,
    and a mixed or tied outcome says the seeds do not separate the norms."""
    out = paired_seed_comparison([8, 4, 15], [21, 43, 43], [0, 1, 2])
    assert (out["lower"], out["higher"], out["ties"], out["chance"]) == (3, 0, 0, 0.25)
    assert out["words"] == "the lowest percentile is lower with LayerNorm than with RMSNorm in each of the 3 seeds"
    assert out["chance_words"] == "1/4"
    high = paired_seed_comparison([55, 73, 92], [57, 73, 93], [0, 1, 2], what="the highest percentile")
    assert (high["lower"], high["higher"], high["ties"]) == (2, 0, 1)
    assert high["words"] == ("the highest percentile is lower with LayerNorm than with RMSNorm in 2 and higher in none of the "
                             "3 seeds (equal in 1), so the seeds do not separate the two norms")
    assert "higher with LayerNorm" in paired_seed_comparison([3, 4], [1, 2], [0, 1])["words"]
    assert paired_seed_comparison([1] * 5, [2] * 5, range(5))["chance"] == 1 / 16
    assert paired_seed_comparison([1], [2], [0])["chance"] == 1.0  # one seed shows nothing
    assert paired_seed_comparison([1] * 5, [2] * 5, range(5))["chance_words"] == "1/16"
    with pytest.raises(ValueError, match="one value per seed"):
        paired_seed_comparison([1, 2], [1, 2, 3], [0, 1, 2])
    with pytest.raises(ValueError, match="finite"):
        paired_seed_comparison([1, float("nan")], [1, 2], [0, 1])
    with pytest.raises(ValueError, match="distinct"):
        paired_seed_comparison([1, 2], [1, 2], [0, 0])


def _summary(lean_share, lean="0 of 3"):
    return {"lean_share": lean_share, "lean": lean}


def test_the_weak_reading_over_seeds_is_kept_when_one_seed_is_informative():
    same = [_summary(0.0)] * 3
    reason = weak_reading_uninformative_over_seeds(same, same)
    assert reason.startswith("not informative in any of the 3 seeds: the weak reading")
    assert "0 of 3, 0 of 3, 0 of 3 layers lean towards" in reason
    # one seed whose initialisation leans while the trained model does not: that seed separates the verdict
    assert weak_reading_uninformative_over_seeds(same, [_summary(0.0), _summary(33.3, "1 of 3"), _summary(0.0)]) == ""
    # a trained seed in which 1 stands out rejects the weak reading: always kept
    assert weak_reading_uninformative_over_seeds([_summary(0.0), _summary(33.3, "1 of 3"), _summary(0.0)], same) == ""
    assert weak_reading_uninformative_over_seeds(same[:1], same[:1]).startswith("not informative: the weak reading")
    with pytest.raises(ValueError, match="one initialisation summary per seed"):
        weak_reading_uninformative_over_seeds(same, same[:2])
    with pytest.raises(TypeError, match="null_summary"):
        weak_reading_uninformative_over_seeds([], [])


def test_small_models_table_shows_the_range_over_seeds_and_every_seed():
    rms = [_run("rms", s, p, loss=l) for s, p, l in ((0, [46, 57, 21], 3.011), (1, [73, 72, 43], 2.989), (2, [92, 93, 43], 2.994))]
    table = small_models_table({"ln": LN, "rms": rms})
    assert table.column("model") == ["LN, trained", "LN, initial", "RMS, trained", "RMS, initial"]
    assert table.columns[1] == "loss (nats/char)" and len(table.columns) == 5
    loss = table.column("loss (nats/char)")
    assert str(loss[0]) == "2.988\u20133.009" and loss[1] is None
    assert loss[0].lines == ("seed 0: 3.009", "seed 1: 2.988", "seed 2: 3.003")
    pct = table.column("𝟏 percentiles")
    assert [str(c) for c in pct] == ["4\u201392", "50", "21\u201393", "50"]
    assert pct[2].lines == ("seed 0: 21\u201357", "seed 1: 43\u201373", "seed 2: 43\u201393")
    assert str(table.column("𝟏 stands out")[0]) == "0 of 3" and len(table.column("𝟏 avoided")[0].lines) == 3
    with pytest.raises(ValueError, match="rms"):
        small_models_table({"ln": LN})
    with pytest.raises(TypeError, match="SmallRun"):
        small_models_table({"ln": LN, "rms": []})


def test_small_seeds_figure_draws_one_line_per_seed_readably():
    from lnbook.util.plotting import legend_overlap_problems, readability_problems, use_book_style

    use_book_style()
    rms = [_run("rms", s, [40 + s, 50, 60]) for s in SMALL_SEEDS]
    fig = small_seeds_figure({"ln": LN, "rms": rms})
    try:
        assert len(fig.axes) == 2 and readability_problems(fig) == [] and legend_overlap_problems(fig) == []
        for ax in fig.axes:  # per seed a trained and an initial line, and the line at 1
            assert len([line for line in ax.lines if len(line.get_xdata()) == 3]) == 2 * len(SMALL_SEEDS)
        assert [t.get_text() for t in fig.legends[0].get_texts()] == [
            "random directions, 5–95%", "seed 0", "seed 1", "seed 2", "at initialisation"]
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def _tiny_data(vocab_size=7, seq=8, n=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab_size, (n + 16, seq + 1), generator=g)
    X, Y = tokens[:n, :-1], tokens[:n, 1:]
    return types.SimpleNamespace(size=vocab_size), (X, Y), (tokens[n:, :-1], tokens[n:, 1:])


def test_train_small_models_seeds_each_model_and_is_deterministic():
    """Seed s trains the same model whether it runs alone or after other seeds (its weights and batches come from
    s, not from the RNG's state), twice the same, and different seeds give different models; the old lab seeded
    every model with 0."""
    vocab, data, held_out = _tiny_data()
    kw = dict(d_model=16, n_layers=1, epochs=1, n_directions=20, device="cpu")
    both = train_small_models(vocab, data, held_out, seeds=(0, 1), **kw)
    alone = train_small_models(vocab, data, held_out, seeds=(1,), **kw)
    assert [r.seed for r in both["ln"]] == [0, 1] and [r.norm for r in both["rms"]] == ["rms", "rms"]
    assert both["ln"][1] == alone["ln"][0] and both["rms"][1] == alone["rms"][0]
    assert both["ln"][0].initial != both["ln"][1].initial and both["ln"][0].loss != both["ln"][1].loss
    assert len(both["ln"][0].trained[0].by_direction) == 20  # the null's directions as asked
    assert train_small_models(vocab, data, held_out, seeds=(0,), **kw)["ln"][0] == both["ln"][0]


@pytest.mark.parametrize("seeds,error,match", [
    ("012", TypeError, "sequence of whole numbers"), (3, TypeError, "sequence of whole numbers"),
    ((), ValueError, "non-empty"), ((0, -1), ValueError, ">= 0"), ((0, 1.5), ValueError, "whole numbers"),
    ((0, 0), ValueError, "distinct"),
])
def test_train_small_models_refuses_bad_seeds(seeds, error, match):
    vocab, data, held_out = _tiny_data()
    with pytest.raises(error, match=match):
        train_small_models(vocab, data, held_out, d_model=16, n_layers=1, epochs=1, seeds=seeds)


def test_the_chapter_and_the_lab_say_three_seeds_as_the_code_trains():
    """The figure's caption (chapter and lab) and the lab's heading say "three seeds" in words; the code trains
    SMALL_SEEDS."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    chapter = (root / "book" / "ch07_layernorm_vs_rmsnorm.md").read_text(encoding="utf-8")
    lab = json.loads((root / "notebooks" / "ch07_uniform_vector_lab.ipynb").read_text(encoding="utf-8"))
    cells = "\n".join("".join(c["source"]) + json.dumps(c.get("metadata", {})) for c in lab["cells"])
    assert SMALL_SEEDS == (0, 1, 2)
    assert "with RMSNorm, three seeds\neach: one line per seed" in chapter
    assert "## Small Transformers trained here, three seeds per norm" in cells and "seeds 0, 1 and 2 for each norm" in cells
    assert "one seed each" not in chapter
