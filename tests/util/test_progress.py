"""lnbook.util.progress: bars draw interactively, not under LNBOOK_PROGRESS=0 (the book's runner sets it)."""

from __future__ import annotations

import io

import pytest

from lnbook.util.progress import ENV_VAR, progress_bar, progress_enabled


def drawn(monkeypatch, value, enabled=True) -> str:
    if value is None:
        monkeypatch.delenv(ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(ENV_VAR, value)
    out = io.StringIO()
    items = list(progress_bar(range(5), enabled=enabled, desc="planted", file=out, mininterval=0))
    assert items == [0, 1, 2, 3, 4]  # on or off, the bar iterates the same items
    return out.getvalue()


def test_bars_draw_unless_turned_off(monkeypatch):
    assert "planted" in drawn(monkeypatch, None) and "5/5" in drawn(monkeypatch, None)
    assert "5/5" in drawn(monkeypatch, "1")
    assert drawn(monkeypatch, "0") == ""
    assert drawn(monkeypatch, "off") == ""
    assert drawn(monkeypatch, None, enabled=False) == ""


def test_bad_settings_are_refused(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "maybe")
    with pytest.raises(ValueError, match="LNBOOK_PROGRESS must be 1"):
        progress_enabled()
    monkeypatch.delenv(ENV_VAR)
    with pytest.raises(TypeError, match="enabled="):
        progress_bar(range(3), disable=True)
    with pytest.raises(TypeError, match="enabled must be True or False"):
        progress_bar(range(3), enabled="yes")
