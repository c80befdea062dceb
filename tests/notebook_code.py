"""The code of a lab, for the tests that check what a lab computes or asserts: ``lab_code("ch06_ln_mlp_lab")`` is the
source of every code cell of ``notebooks/ch06_ln_mlp_lab.ipynb``, joined by newlines."""

from __future__ import annotations

import json
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def lab_code(name: str) -> str:
    """The code cells of ``notebooks/<name>.ipynb``, in order, joined by newlines."""
    cells = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
