"""Chapter 7: the zero-mean analysis (lnbook.folding.zero_mean) has power: a planted unsound rule makes the
random-network checks of tests/folding/random_nets.py fail."""

from __future__ import annotations

import pytest

from tests.folding.random_nets import check_random_net


@pytest.mark.parametrize("planted", ["relu is the identity", "every factor is a per-row scalar"])
def test_the_catalogue_catches_unsound_rules(planted, monkeypatch):
    """Negative control for the soundness checks: with one unsound rule planted in the analysis,
    the catalogue of single operations between writers and norms fails."""
    import lnbook.folding.op_rules as rules

    if planted == "relu is the identity":
        monkeypatch.setattr(rules, "IDENTITY_OPS", rules.IDENTITY_OPS | {"aten.relu.default"})
        monkeypatch.setattr(rules, "RULE_OPS", rules.RULE_OPS | {"aten.relu.default"})
        cases = [["relu", "ln"], ["linear", "relu", "ln"]]
    else:
        monkeypatch.setattr(rules, "_constant_along", lambda operand, dim: True)
        cases = [["gain", "ln"], ["linear", "gain", "ln"]]
    failures = 0
    for blocks in cases:
        try:
            check_random_net(blocks, head=False, affine=[True], seed=0)
        except (AssertionError, RuntimeError):  # the comparison, or fold_layernorms' own float64 check
            failures += 1
    assert failures == len(cases)
