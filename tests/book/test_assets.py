"""lnbook.book.assets: the JavaScript of the offline book, fetched from the npm registry and checked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lnbook.book import assets as offline_assets
from lnbook.book.assets import ASSETS_DIR, PACKAGES, assets_ready, ensure_assets
from lnbook.book.toc import book_root

ROOT = book_root(Path(__file__).parent)


def test_the_book_points_at_the_local_copies():
    config = (ROOT / "_config.yml").read_text()
    assert f"- {ASSETS_DIR}" in config and "mathjax_path: ../vendor/mathjax/es5/tex-mml-chtml.js" in config
    assets = ensure_assets(ROOT, quiet=True)
    for line in config.splitlines():
        line = line.strip()
        if line.startswith(("mathjax_path: ../vendor/", "../vendor/")):
            path = line.split("../", 1)[1].split(":")[0].strip()
            assert (assets / path).is_file(), f"_config.yml names {path}, which the assets lack"
    # the HTML manager's fonts also where a page's folder asks for them before the public path is set
    fonts = sorted(f.name for f in (assets / "vendor" / "html-manager" / "dist").iterdir()
                   if f.suffix in offline_assets.FONT_SUFFIXES)
    assert fonts, "the HTML manager ships no fonts?"
    for folder in offline_assets.FALLBACK_FONT_FOLDERS:
        assert sorted(f.name for f in (assets / folder / "@jupyter-widgets").iterdir()) == fonts, folder
    # every .css/.js in _static/ is added to every page: only the book's own stylesheet and its small script (break
    # points in inline code) belong there (the vendored JavaScript is copied by html_extra_path and loaded where needed)
    static = sorted(p.name for p in (ROOT / "_static").iterdir()) if (ROOT / "_static").exists() else []
    assert set(static) <= {"lnbook.css", "lnbook.js"}, f"_static/ holds {static}: every file there would be added to every page"


def test_missing_npm_and_a_wrong_package_are_refused(tmp_path, monkeypatch):
    assert not assets_ready(tmp_path)
    monkeypatch.setattr(offline_assets.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="npm not found"):
        ensure_assets(tmp_path)
    monkeypatch.undo()
    spec, _, keep = PACKAGES["requirejs"]
    monkeypatch.setitem(PACKAGES, "requirejs", (spec, "sha512-not-the-real-one", keep))
    with pytest.raises(RuntimeError, match="is not the pinned"):
        ensure_assets(tmp_path, quiet=True)
    assert not (tmp_path / ASSETS_DIR).exists()
