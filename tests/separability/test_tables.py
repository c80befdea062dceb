"""The tables of chapter 2's lab (lnbook/separability/tables.py): rounding shown as such, points as the text writes them."""

from __future__ import annotations

import pytest
import torch

from lnbook.core.scatter_ratio import lssr, ssr
from lnbook.separability.ln_nets import xor_dataset, xor_ln_net
from lnbook.separability.tables import ROUNDING, ratio_text, stage_table, xor_output_table


def test_a_ratio_that_rounding_left_is_written_as_zero_from_rounding():
    assert ratio_text(0.0) == "0" and ratio_text(1.54e-33) == "0 (rounding)" and ratio_text(ROUNDING) == "0 (rounding)"
    assert ratio_text(2.47e-32) == "0 (rounding)" and ratio_text(0.6667) == "0.667" and ratio_text(1.0) == "1.00"


def test_the_xor_tables_of_the_lab():
    X, y = xor_dataset()
    net = xor_ln_net(eps=0.0)
    with torch.no_grad():
        normed, out = net[1](net[0](X)), net(X)
    stages = {"input": (ssr(X, y), lssr(X, y)), "after LN": (ssr(normed, y), lssr(normed, y))}
    table = stage_table(stages)
    assert table.columns == ["stage", "SSR", "LSSR"] and table.column("LSSR")[0] == "1.00"
    assert all(v in ("0", "0 (rounding)") for v in table.column("LSSR")[1:])  # the chapter: LSSR = 0 after LN
    points = xor_output_table(X, y, out)
    assert points.column("input point")[1] == "(\u22121, \u22121)" and points.column("class 1") == ["no", "no", "yes", "yes"]
    with pytest.raises(ValueError, match="one row per point"):
        xor_output_table(X, y[:3], out)


def test_the_eps_table_writes_a_rounding_zero_as_the_stage_table_does():
    """Screenshot read 48, item 15: the lab's table of the output's SSR against epsilon read 0 / 2.2×10⁻³² / 0; a
    value that rounding left in place of 0 reads "0 (rounding)", as in the stage table."""
    from lnbook.separability.tables import eps_ssr_table

    table = eps_ssr_table({0.0: 0.0, 1e-5: 2.2e-32, 1e-2: 0.25})
    assert table.columns == ["ε of the LayerNorm", "SSR of the output"]
    assert table.cells == [["0", "0"], ["10⁻⁵", "0 (rounding)"], ["10⁻²", "0.250"]]
