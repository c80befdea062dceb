"""The lab's helpers: the condition-number map and the summary of SSL results."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from lnbook.whitening.lab import (  # noqa: E402
    ERROR_LABEL, batch_gram_spectrum, best_iterations, condition_map, condition_map_figure, error_cell, error_column, label,
    label_in_words, phi_figure, summarise, summary_table, paper_claims_table, unbroken_range,
)
from lnbook.whitening.ssl import SSLRun  # noqa: E402
from lnbook.util.tables import significant  # noqa: E402


def test_condition_map_error_floor_grows_with_kappa_and_only_stable_matrices_stay_accurate():
    """float64, d = 32, T up to 25: kappa = 2 (below (9 - sqrt 17)/2) stays at 1e-12 at T = 25; kappa = 100 and
    1000 have a best T and then blow up; the best error grows with kappa."""
    maps = condition_map([2.0, 100.0, 1000.0], 25, d=32, dtypes=(torch.float64,))
    err = maps["float64"]
    _, best = best_iterations(err)
    assert best[0] < best[1] < best[2] and err[0, -1] < 1e-12 and err[1, -1] > 1 and err[2, -1] > 1


def test_summary_groups_seeds():
    results = [dict(method="intl", T=4, axis=0, seed=s, erank=10.0 + s, top5=0.5 + s / 10, knn=0.9, few_shot=0.8, probe=0.95) for s in (0, 1)]
    (row,) = summarise(results)
    assert row["seeds"] == 2 and row["erank"] == 10.5 and row["erank_min"] == 10 and row["erank_max"] == 11
    assert row["top5_min"] == 0.5 and row["top5_max"] == 0.6
    assert summary_table([row]).column("configuration") == ["INTL, \U0001d447 = 4, axis 0"] and label("mse", 4, 0) == "alignment loss alone"
    assert label("iternorm", 8, 1) == "IterNorm without trace loss, \U0001d447 = 8, axis 1"  # no undefined "TL", T italic
    # for the chapter's glued sentence: the symbol T in words (screenshot read 41: a plain "T = 8, axis 0" beside math)
    assert label_in_words("intl", 8, 0) == "INTL with 8 iterations on axis 0" and label_in_words("mse", 4, 0) == label("mse", 4, 0)
    assert label_in_words("iternorm", 1, 1) == "IterNorm without trace loss with 1 iteration on axis 1"
    for bad in [("tl", 4, 0), ("intl", -1, 0), ("intl", 4.0, 0), ("intl", 4, 2)]:
        with pytest.raises(ValueError):
            label_in_words(*bad)
    assert phi_figure() is not None and np.isfinite(row["knn"])


def test_the_chapter_names_exactly_the_intl_configurations_the_lab_runs():
    """The chapter's sentence on the healthy runs names the INTL configurations with T >= 4 that the lab's CONFIGS
    list runs: T = 4 on both axes, T = 8 on axis 0 only."""
    import ast
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    cells = json.loads((root / "notebooks" / "ch08_whitening_lab.ipynb").read_text())["cells"]
    source = next("".join(c["source"]) for c in cells if "CONFIGS = [" in "".join(c["source"]))
    start = source.index("CONFIGS = [") + len("CONFIGS = ")
    configs = ast.literal_eval(source[start:source.index("]", start) + 1])
    intl = {(T, axis) for method, T, axis in configs if method == "intl" and T >= 4}
    assert intl == {(4, 0), (4, 1), (8, 0)}
    chapter = (root / "book" / "ch08_from_layernorm_to_whitening.md").read_text()
    assert "INTL with $T=4$ on either axis or $T=8$ on axis 0 keeps at least" in chapter
    assert "$T=4$ or $8$, on either axis" not in chapter


def test_batch_gram_spectrum_of_a_rank_two_embedding():
    """A projector whose output has rank 2 (after centring each sample over its features): the normalised Gram
    of 64 samples has two non-zero eigenvalues summing to 1, the rest zero to 1e-12, and phi_8 keeps those
    zeros at zero (float64)."""
    torch.manual_seed(0)
    enc = torch.nn.Linear(10, 2).double()
    proj = torch.nn.Linear(2, 16, bias=False).double()
    run = SSLRun(method="iternorm", T=8, axis=0, seed=0, encoder=enc, projector=proj)
    X = torch.randn(80, 10, dtype=torch.float64)
    x, phi = batch_gram_spectrum(run, X, 8, batch=64)
    assert x.shape == (64,) and abs(x.sum() - 1) < 1e-12 and np.all(np.diff(x) <= 1e-15)
    assert x[1] > 1e-3 and np.abs(x[2:]).max() < 1e-12 and np.abs(phi[2:]).max() < 1e-9
    assert np.all(phi[:2] >= x[:2]) and np.all(phi <= 1 + 1e-12)  # phi_8 lifts the two non-zero ones, within [0, 1]


def test_the_condition_map_labels_are_typeset_math():
    """The colorbar's label is mathtext (issue 33: the page showed a literal "Σ^{-1/2}"): every label with a
    superscript or a Greek letter is inside $...$ and matplotlib's mathtext parses it."""
    import matplotlib.pyplot as plt
    from matplotlib.mathtext import MathTextParser

    maps = {"float64": np.full((2, 3), 1e-3)}
    fig = condition_map_figure(maps, [2.0, 10.0])
    try:
        colorbar_label = fig.axes[-1].get_xlabel()  # a horizontal bar below the maps
        labels = [colorbar_label, fig.axes[0].get_ylabel(), fig.axes[0].get_xlabel()]
        assert fig.axes[0].get_xlabel() == "iterations $T$"  # screenshot read 42: a plain "iterations T" beside typeset math
        parser = MathTextParser("path")
        for text in labels:
            outside = "".join(text.split("$")[0::2])  # the parts outside $...$
            assert not any(c in outside for c in "^_{}\\Σκ‖"), f"math outside $...$ in {text!r}"
            for math in text.split("$")[1::2]:
                parser.parse(f"${math}$")  # raises ValueError on a label mathtext cannot typeset
        assert r"\Sigma^{-1/2}" in colorbar_label
    finally:
        plt.close(fig)


def test_the_summary_is_a_table_of_ranges_as_the_chapter_writes_them():
    """The lab's table of runs is a Table (issue 33: no printed text tables): one row per configuration, the range over
    the seeds, lowest to highest, as the chapter's Table 8.2 writes it (screenshot read 41: the lab wrote
    "7.3 (6.2–8.4)" where the chapter writes "6.2–8.4"), in the same digits (effective rank .1f, top-5 share .3f,
    accuracies .2f); a range whose ends print the same is one value."""
    rows = summarise([dict(method="intl", T=4, axis=0, seed=s, erank=10.0 + s, top5=0.5, knn=0.9, few_shot=0.8, probe=0.95)
                      for s in (0, 1)])
    table = summary_table(rows)
    assert table.column("configuration") == ["INTL, \U0001d447 = 4, axis 0"] and table.column("effective rank") == ["10.0–11.0"]
    assert "<td>INTL, \U0001d447 = 4, axis 0</td>" in table._repr_html_()
    assert "<td class='lnbook-short'>10.0\u201311.0</td>" in table._repr_html_()  # the range stays whole
    rows = summarise([dict(method="mse", T=4, axis=0, seed=s, erank=1.0 + s / 1000, top5=0.4821 + s / 100, knn=0.8 + s / 10,
                           few_shot=0.8, probe=0.96) for s in (0, 1, 2)])
    (cells,) = summary_table(rows).cells
    assert cells[1:] == ["1.0", "0.482–0.502", "0.80–1.00", "0.80", "0.96"]
    assert not any("(" in c for c in cells[1:])  # no mean before a bracketed range


def test_trained_output_errors_measure_iternorm_on_the_runs_embedding():
    """trained_output_errors: per batch of the run's embedding, the error of IterNorm's output covariance against
    V phi_T V^T, with the run's T and axis. A linear encoder and projector (float64) at T = 4: within sqrt(u_64);
    the same embedding in float32 at T = 12 on axis 1 (64 rows of a 16-dimensional embedding that has rank 2) is off."""
    from lnbook.whitening import output_covariance_tolerance
    from lnbook.whitening.lab import trained_output_errors

    torch.manual_seed(0)
    enc = torch.nn.Linear(8, 16, dtype=torch.float64)
    proj = torch.nn.Linear(16, 32, dtype=torch.float64)
    X = torch.randn(128, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    errs = trained_output_errors(SSLRun("intl", 4, 0, 0, enc, proj), X, batches=2, batch=64)
    assert len(errs) == 2 and max(errs) <= output_covariance_tolerance(torch.float64)
    low = torch.nn.Sequential(torch.nn.Linear(8, 2, bias=False), torch.nn.Linear(2, 16)).float()
    off = trained_output_errors(SSLRun("iternorm", 12, 1, 0, low[0], low[1]), X.float(), batches=1, batch=64)
    assert not off[0] <= output_covariance_tolerance(torch.float32)


def test_spectrum_figure_is_readable_at_the_column_width():
    """Four runs (chapter 8's Fig. 8.3) in two rows of two: the column's width, no text below 9 pt in the page."""
    import matplotlib.pyplot as plt

    from lnbook.util.plotting import COLUMN_WIDTH_IN, math_text_problems, readability_problems
    from lnbook.whitening.lab import spectrum_figure

    lam = np.sort(np.random.default_rng(0).random(64))[::-1]
    runs = [SSLRun(method=m, T=t, axis=0, seed=0, encoder=torch.nn.Identity(), projector=torch.nn.Identity(),
                   spectra=[(0, lam / lam.sum()), (10, lam**2 / (lam**2).sum())])
            for m, t in (("mse", 4), ("iternorm", 4), ("intl", 1), ("intl", 4))]
    fig = spectrum_figure(runs)
    assert len([ax for ax in fig.axes if ax.get_visible()]) == 4 and fig.get_size_inches()[0] <= COLUMN_WIDTH_IN + 1e-9
    assert readability_problems(fig) == []
    assert math_text_problems(fig) == []  # the y label was a raw "λ_i / Σλ" (issue 33)
    # ... and then a cramped 10 pt formula whose subscripts read as 7 px (issue 33): at least 12 pt now
    assert all(ax.get_ylabel() == "" or ax.yaxis.label.get_fontsize() >= 12 for ax in fig.axes if ax.get_visible())
    plt.close(fig)


@pytest.mark.parametrize("figure", ["phi", "condition map"])
def test_phi_and_condition_map_figures_are_readable_at_the_column_width(figure):
    """Figs 8.1 and 8.2 (issue 33: they were 9 in wide, shrunk to about 7.8 pt text in the page): no text below
    9 pt at the column's width, for the lab's two dtypes."""
    import matplotlib.pyplot as plt

    from lnbook.util.plotting import math_text_problems, readability_problems

    kappas = np.logspace(0, 8, 9)
    rng = np.random.default_rng(0)
    fig = phi_figure() if figure == "phi" else condition_map_figure(
        {"float32": rng.random((9, 21)), "float64": rng.random((9, 21)) ** 4}, kappas)
    try:
        assert readability_problems(fig) == []
        assert math_text_problems(fig) == []  # labels were raw "φ_T(x)", "φ_T(1/n)" (issue 33)
    finally:
        plt.close(fig)


def test_condition_map_legend_is_off_the_maps_and_its_swatch_is_visible():
    """Fig. 8.2 (issue 33, the reader's page): the "best T" legend showed an empty white swatch (a white line on the
    legend's white box) and covered the top-left of each heatmap. Now the legend lies over no data and its handle has
    an edge that differs from white."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    from lnbook.util.plotting import legend_overlap_problems

    rng = np.random.default_rng(0)
    fig = condition_map_figure({"float32": rng.random((9, 21)), "float64": rng.random((9, 21)) ** 4}, np.logspace(0, 8, 9))
    try:
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends)
        assert len(legends) == 1 and [t.get_text() for t in legends[0].get_texts()] == ["best T"]
        handle = legends[0].legend_handles[0]
        assert to_rgba(handle.get_markeredgecolor()) != to_rgba("white") and handle.get_marker() not in ("", "None", None)
        canvas = fig.canvas
        canvas.draw()
        box = legends[0].get_window_extent()
        for ax in fig.axes[:2]:  # the two maps: the legend's box meets neither
            assert not box.overlaps(ax.get_window_extent()), "the legend lies over a map"
        assert legend_overlap_problems(fig) == []
        # ... and it is attached to them (issue 33: it floated at the bottom, below the x labels): its box begins within
        # 12 pt above the maps' top edge (their titles included) and its right edge is that of the last map
        renderer = canvas.get_renderer()
        pt = fig.dpi / 72
        maps_top = max(ax.get_tightbbox(renderer).y1 for ax in fig.axes[:2])
        assert 0 <= box.y0 - maps_top <= 12 * pt, (box.y0, maps_top)
        assert abs(box.x1 - fig.axes[1].get_window_extent().x1) <= 12 * pt
    finally:
        plt.close(fig)


def test_condition_map_colour_bar_lies_below_the_maps_with_its_label_across():
    """Fig. 8.2 (issue 33): the colour bar's label, rotated beside a vertical bar, was an unreadable 8 px line. The bar
    is horizontal, below both maps, and its label is written across at 11 pt."""
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(0)
    fig = condition_map_figure({"float32": rng.random((9, 21)), "float64": rng.random((9, 21)) ** 4}, np.logspace(0, 8, 9))
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        bar = fig.axes[-1]
        label = bar.xaxis.label
        assert label.get_text() == ERROR_LABEL and label.get_rotation() == 0 and label.get_fontsize() >= 11
        bar_box = bar.get_window_extent(renderer)
        assert bar_box.width > bar_box.height
        for ax in fig.axes[:2]:  # below each map and its x label
            assert bar_box.y1 <= ax.get_tightbbox(renderer).y0 + 1
    finally:
        plt.close(fig)


def test_error_cells_say_overflow_and_write_powers_of_ten():
    """Issue 33: the condition map's table showed "inf", "5.6e+17" and "9.3e+121"; a cell now reads "overflows
    (float32)" where the iterate overflowed, and a finite error as the text writes it, two digits, not e-notation."""
    assert error_cell(5.621565544522816e17, "float32") == "5.6×10¹⁷"
    assert error_cell(6.98e138, "float64") == "7.0×10¹³⁸" and error_cell(1.66e-7, "float32") == "1.7×10⁻⁷"
    assert error_cell(0.3149, "float32") == "3.1×10⁻¹" and error_cell(6.07e-3, "float64") == "6.1×10⁻³"
    # one style for the column at every size (screenshot read 41: "4.3×10⁻⁶" above "0.013"; read 42: "1.3×10⁻²" above "0.31")
    assert [error_cell(v, "float32") for v in (1.66e-7, 4.3e-6, 0.0134, 0.31, 0.67)] == [
        "1.7×10⁻⁷", "4.3×10⁻⁶", "1.3×10⁻²", "3.1×10⁻¹", "6.7×10⁻¹"]
    assert error_cell(12.4, "float32") == "1.2×10¹" and error_cell(9.6e-4, "float64") == "9.6×10⁻⁴"
    assert error_cell(np.float64("inf"), "float32") == "overflows (float32)"
    assert error_cell(float("nan"), "float64") == "overflows (float64)"
    # the map's own overflow, as in the lab (d = 64): at kappa = 1e4 the float32 iterate passes 3.4e38 before T = 25
    err = condition_map([1e4], 25, d=64, dtypes=(torch.float32,))["float32"][0, -1]
    assert not np.isfinite(err) and error_cell(err, "float32") == "overflows (float32)"
    with pytest.raises(ValueError, match="not negative"):
        error_cell(-1.0, "float32")
    with pytest.raises(TypeError):
        error_cell(1.0, None)


def test_a_summary_cell_stays_on_one_line():
    """Issue 33 (screenshot read 34, ch08 lab): the accuracy table wrapped every cell ("0.89 / (0.88–0.90)", "0.96 (all /
    seeds)"). A value cell of the summary has no space a browser may break at: its HTML holds no ordinary space."""
    import re

    rows = summarise([dict(method="iternorm", T=4, axis=0, seed=s, erank=3.0 + s, top5=1.0, knn=0.88 + s / 50,
                           few_shot=0.7, probe=0.96) for s in (0, 1)])
    html = summary_table(rows)._repr_html_()
    cells = re.findall(r"<td[^>]*>.*?</td>", html)
    assert re.sub(r"<[^>]+>", "", cells[0]).startswith("IterNorm without trace loss")  # the configuration may wrap
    for cell in cells[1:]:  # a range stays whole: a short cell (kept on one line) or a no-break span
        text = re.sub(r"<[^>]+>", "", cell)
        assert " " not in text and ("\u2013" not in text or "lnbook-short" in cell or "lnbook-nobreak" in cell), cell


def test_paper_claims_table_says_what_each_unchecked_claim_needs():
    """Issue 33: the ch08 lab ended with eight "Checked against the paper: not checkable here" lines; they are one
    table: the claim, the paper's value ("—" for a claim in words) and "not checkable here (note N)" for a claim not
    checked, with what checking it needs said once, in note N under the table, however many claims share it (screenshot
    read 36: the same "needs the CIFAR files ..." filled four rows); a checked claim shows its verdict and our value.
    Refuses $ math in a claim and an unchecked claim without what it needs."""
    from types import SimpleNamespace as C

    unchecked = C(claim="CIFAR-10 ResNet-18 INTL, 5-NN accuracy (%)", paper=90.03, ours=None, verdict="not checkable here")
    unchecked_too = C(claim="CIFAR-100 ResNet-18 INTL, top-1 (%)", paper=70.88, ours=None, verdict="not checkable here")
    theorem = C(claim="The abstract’s theorem", paper="We theoretically prove ...", ours=None, verdict="not checkable here")
    checked = C(claim="CIFAR-100 ResNet-18 INTL, 5-NN accuracy (%)", paper=61.9, ours=61.47, verdict="consistent (reconstruction)")
    cifar = "the CIFAR files and about 1000 GPU-epochs"
    table = paper_claims_table([(unchecked, cifar), (theorem, "its hypotheses"), (unchecked_too, cifar), (checked, "")])
    # the verdict and its note in two columns, "note 1" as the reproduction page writes it (screenshot read 41:
    # "not checkable here (note 1)" wrapped in one cell), each on one line (no-break spaces)
    nb = lambda s: s.replace(" ", "\u00a0")  # noqa: E731
    assert table.columns == ["the paper’s claim", "paper", "on this page", "needs"]
    assert table.cells == [
        ["CIFAR-10 ResNet-18 INTL, 5-NN accuracy (%)", "90.03", nb("not checkable here"), nb("note 1")],
        ["The abstract’s theorem", "—", nb("not checkable here"), nb("note 2")],
        ["CIFAR-100 ResNet-18 INTL, top-1 (%)", "70.88", nb("not checkable here"), nb("note 1")],
        ["CIFAR-100 ResNet-18 INTL, 5-NN accuracy (%)", "61.9", "consistent (reconstruction): ours 61.47", "—"]]
    assert "(note" not in table._repr_html_()
    assert table.notes == ["Needs the CIFAR files and about 1000 GPU-epochs.", "Needs its hypotheses."]
    page = table._repr_html_()
    assert page.count("about 1000 GPU-epochs") == 1 and page.index("</table>") < page.index("Note 1: Needs the CIFAR")
    assert str(table).endswith("Note 2: Needs its hypotheses.")
    with pytest.raises(ValueError, match="need"):
        paper_claims_table([(unchecked, " ")])
    with pytest.raises(ValueError, match="math"):
        paper_claims_table([(C(claim="INTL ($T = 4$)", paper=1.0, ours=None, verdict="not checkable here"), "x")])
    with pytest.raises(TypeError):
        paper_claims_table([unchecked])


def test_an_error_column_has_one_style():
    """Screenshot read 35/36 (ch08 lab t04, chapter 8): one column and one glued list read "6×10⁻⁶, 4×10⁻⁵, 0.003, 0.8"
    by two rules. Read 42: "3×10⁻³, 0.8" still mixed two styles; read 48: "8×10⁻¹" is a power of ten for an ordinary
    number. error_column follows the rule of every other table of the book (significant): plain digits from 10⁻³
    up, a power of ten below."""
    assert error_column([6.2e-6, 4.0e-5, 3.1e-3, 0.81]) == ["6×10⁻⁶", "4×10⁻⁵", "0.003", "0.8"]
    assert error_column([1e-6, 0.0949, 0.096, 2.3, 0]) == ["10⁻⁶", "0.09", "0.1", "2", "0"]
    assert error_column([1.23e-4, 0.456], digits=2) == ["1.2×10⁻⁴", "0.46"]
    assert error_column(np.logspace(-12, 1, 40)) == [significant(v, 1) for v in np.logspace(-12, 1, 40)]
    assert all(("\u207b" in cell) == (float(v) < 9e-4)  # a negative power of ten below 10⁻³ only
               for v, cell in zip(np.logspace(-12, 1, 40), error_column(np.logspace(-12, 1, 40))))
    assert not any("e" in cell for cell in error_column(np.logspace(-12, 1, 40)))
    with pytest.raises(ValueError, match="not negative"):
        error_column([-1e-3])
    with pytest.raises(ValueError):
        error_column([float("nan")])
    with pytest.raises(ValueError, match="digits"):
        error_column([0.1], digits=0)


def test_a_range_of_the_chapters_table_has_no_break_after_its_dash():
    """Screenshot read 36: Table 8.2's 5-NN column read "0.88–" / "0.90" (a browser may break after an en dash, and the
    chapter's markdown table has no no-break span). The glued range has a word joiner right after the dash and reads the
    same as number_range's; equal ends give one value."""
    from lnbook.util.tables import RANGE_DASH, number_range

    text = unbroken_range(0.881, 0.903, ".2f")
    assert text == "0.88–\u20600.90" and text.replace("\u2060", "") == number_range(0.881, 0.903, ".2f")
    assert all(text[i + 1] == "\u2060" for i, c in enumerate(text) if c == RANGE_DASH)
    assert unbroken_range(-2.0, -1.0, ".1f") == "−2.0–\u2060−1.0" and unbroken_range(1.0, 1.0, ".3f") == "1.000"
    with pytest.raises(ValueError):
        unbroken_range(2.0, 1.0, ".1f")


def test_train_configurations_trains_every_configuration_and_seed_as_the_lab_did(monkeypatch, capsys):
    """The ch08 lab's training loop, moved out of its cell with its progress bar (screenshot read 48, items 4-5):
    one run per configuration and seed, keyed (method, T, axis, seed), seed 0 recording spectra, each the run
    train_ssl makes with the lab's setting; no bar under LNBOOK_PROGRESS=0."""
    from lnbook.ml.data import digits_split
    from lnbook.whitening.lab import train_configurations
    from lnbook.whitening.ssl import DIGITS_EMB, DIGITS_SETTING, train_ssl

    monkeypatch.setenv("LNBOOK_PROGRESS", "0")
    Xtr, ytr, Xte, yte = digits_split()
    data = (Xtr[:256], ytr[:256], Xte[:128], yte[:128])
    results, runs = train_configurations([("intl", 4, 0), ("mse", 4, 1)], (0, 1), data, epochs=1,
                                         unchecked={("mse", 4, 1)}, record_every=2, device="cpu")
    assert capsys.readouterr().err == ""
    assert list(runs) == [("intl", 4, 0, 0), ("intl", 4, 0, 1), ("mse", 4, 1, 0), ("mse", 4, 1, 1)]
    assert len(results) == 4 and runs[("intl", 4, 0, 0)].spectra and not runs[("intl", 4, 0, 1)].spectra
    alone = train_ssl(data[0], "intl", 4, 0, 1, **{**DIGITS_SETTING, "epochs": 1, "emb": DIGITS_EMB[0]}, device="cpu")
    assert alone.losses == runs[("intl", 4, 0, 1)].losses
