"""Chapter 7: the zero-mean analysis (lnbook.folding.zero_mean) has power: a planted unsound rule makes the
random-network checks of tests/folding/random_nets.py fail; buffers are writers only when their centring lasts."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from lnbook.folding.fold import find_foldable_layernorms, fold_layernorms
from tests.folding.random_nets import check_random_net, randomise_norms, relative_difference


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


class _BufferPositions(nn.Module):
    """``LayerNorm(linear(x) + pe[:T])`` with the position table ``pe`` a registered buffer."""

    def __init__(self, persistent: bool):
        super().__init__()
        self.lin, self.ln = nn.Linear(6, 6), nn.LayerNorm(6)
        self.register_buffer("pe", torch.randn(5, 6), persistent=persistent)

    def forward(self, x):
        return self.ln(self.lin(x) + self.pe[: x.shape[1]])


def test_a_persistent_buffer_is_a_writer_and_its_centring_survives_a_reload():
    """A buffer added to the stream is centred like a parameter, and the centred value is in state_dict():
    a freshly built model loaded from the folded model's state computes the same outputs."""
    torch.manual_seed(0)
    model = randomise_norms(_BufferPositions(persistent=True)).double().eval()
    x = torch.randn(2, 4, 6, dtype=torch.float64)
    report = find_foldable_layernorms(model, x)
    assert report.layer_norms[0].foldable and report.writers["b_pe"].kind == "buffer"
    assert report.writers["b_pe"].params == (("pe", -1),)
    folded = fold_layernorms(model, x, report=report)
    state = folded.state_dict()
    assert float(state["pe"].mean(-1).abs().max()) < 1e-15 < float(model.pe.mean(-1).abs().max())
    reloaded = copy.deepcopy(folded)
    with torch.no_grad():
        reloaded.pe.normal_()  # forget the buffer, then restore it from the saved state
    reloaded.load_state_dict(state)
    assert relative_difference(model, reloaded, torch.randn(3, 5, 6, dtype=torch.float64)) < 1e-12


def test_a_non_persistent_buffer_is_refused_because_its_centring_would_not_survive_a_reload():
    """A buffer registered with persistent=False is not in state_dict(): centring it in place would be lost on
    a save and reload, so the writer is not centrable and the LayerNorm it feeds is refused with that reason
    (and fold_layernorms refuses too, even with check=False)."""
    torch.manual_seed(0)
    model = randomise_norms(_BufferPositions(persistent=False)).double().eval()
    x = torch.randn(2, 4, 6, dtype=torch.float64)
    assert "pe" not in model.state_dict()  # why the refusal is needed
    report = find_foldable_layernorms(model, x)
    (verdict,) = report.layer_norms
    assert not verdict.foldable and "not persistent" in verdict.reason and "'pe'" in verdict.reason
    assert report.writers["b_pe"].kind == "buffer" and not report.writers["b_pe"].centrable
    with pytest.raises(ValueError, match="no LayerNorm"):
        fold_layernorms(model, x, report=report, check=False)
