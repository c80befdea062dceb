"""A tiny book in a temporary folder, for the tests of the runner and of ``python -m lnbook``.

Its notebooks import only ``lnbook.book.reproduction`` (no setup cell, no figures), so each runs in a few
seconds; results go to ``<root>/results`` through ``LNBOOK_RESULTS_DIR``.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}


def compare_cell(key: str, ours: float, paper: float = 1.0, expect: str = "reproduced") -> str:
    return (
        "from lnbook.book.reproduction import compare\n"
        f"compare({key!r}, 'a planted number', source='planted', paper={paper}, ours={ours}, abs_tol=0.01, "
        f"expect={expect!r})"
    )


def write_notebook(path: Path, cells: list[str], metadata: dict | None = None) -> Path:
    nb = new_notebook(cells=[new_code_cell(c) for c in cells], metadata={"kernelspec": KERNELSPEC, **(metadata or {})})
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def make_book(root: Path, monkeypatch) -> Path:
    """``root`` with a toc naming ``notebooks/ch09_tiny`` (one comparison) and the generated page
    ``book/table`` (prints the recorded keys; made from ``results/*/*.json``)."""
    (root / "book").mkdir(parents=True)
    (root / "_config.yml").write_text("title: planted\nexecute:\n  timeout: 120\n")
    (root / "_toc.yml").write_text(
        "format: jb-book\nroot: book/index\nchapters:\n  - file: notebooks/ch09_tiny\n  - file: book/table\n"
    )
    (root / "book" / "index.md").write_text("# Planted\n")
    write_notebook(root / "notebooks" / "ch09_tiny.ipynb", ["print('lnbook scale=ci')", compare_cell("ch09-tiny", 1.0)])
    write_notebook(
        root / "book" / "table.ipynb",
        ["from lnbook.book.reproduction import load_comparisons\nprint('keys:', [c.key for c in load_comparisons('ci')])"],
        metadata={"lnbook": {"generated_from": ["results/*/*.json"]}},
    )
    monkeypatch.setenv("LNBOOK_RESULTS_DIR", str(root / "results"))
    monkeypatch.setenv("LNBOOK_SCALE", "ci")
    return root
