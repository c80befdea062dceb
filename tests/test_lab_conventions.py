"""The book's rules for labs, checked on the labs of chapters 1, 2 and 4: the one setup cell, thin notebooks,
no outputs committed. Every notebook of ``notebooks/`` follows them."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LABS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
SETUP_CELL = "%matplotlib inline\nfrom lnbook.notebook import setup\n\ndevice = setup()"
MAX_HELPER_LINES = 15


def code_cells(name: str) -> list[str]:
    cells = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


@pytest.mark.parametrize("name", LABS)
def test_lab_starts_with_the_one_setup_cell(name):
    cells = code_cells(name)
    assert cells[0] == SETUP_CELL, f"{name}: the first code cell must be exactly the book's setup cell"
    assert sum(SETUP_CELL in c for c in cells) == 1
    for cell in cells[1:]:  # the setup is done once, by lnbook.notebook.setup
        assert "seed_everything(" not in cell and "use_book_style(" not in cell and "set_num_threads(" not in cell


@pytest.mark.parametrize("name", LABS)
def test_lab_helpers_are_short(name):
    """Notebook helper functions of more than ~15 lines belong in lnbook, where they are tested."""
    for cell in code_cells(name)[1:]:
        source = "\n".join(line for line in cell.split("\n") if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef):
                length = node.end_lineno - node.lineno + 1
                assert length <= MAX_HELPER_LINES, f"{name}: {node.name} has {length} lines; move it to lnbook"
