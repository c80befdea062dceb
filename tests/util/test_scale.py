"""lnbook.util.scale (the ci/paper switch) and lnbook.util.device (CUDA when present, seeding).
"""

from __future__ import annotations

import pytest

from lnbook.util.scale import at_scale, current_scale, is_paper_scale


def test_scale_switch(monkeypatch):
    monkeypatch.delenv("LNBOOK_SCALE", raising=False)
    assert current_scale() == "ci" and at_scale(ci=1, paper=2) == 1 and not is_paper_scale()
    monkeypatch.setenv("LNBOOK_SCALE", " Paper ")
    assert current_scale() == "paper" and at_scale(ci=1, paper=2) == 2 and is_paper_scale()
    monkeypatch.setenv("LNBOOK_SCALE", "huge")
    with pytest.raises(ValueError, match="LNBOOK_SCALE must be one of"):
        current_scale()
