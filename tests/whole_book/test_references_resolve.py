"""Every ``lnbook.x.y`` that the book, the labs, the README or a docstring quotes names a real object."""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOTTED = re.compile(r"(?<![\w/.-])lnbook(?:\.[A-Za-z_]\w*)+")
NOT_CODE = {"lnbook.zip", "lnbook.generated_from"}  # a file name (the preface's Colab steps), a notebook metadata key


def resolve(dotted: str) -> bool:
    """True when ``dotted`` is a module, or an attribute path below the longest importable module."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def quoted_names() -> dict[str, str]:
    texts = {}
    for path in sorted((ROOT / "book").glob("*.md")) + [ROOT / "README.md"]:
        texts[str(path.relative_to(ROOT))] = path.read_text()
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "book").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        texts[str(path.relative_to(ROOT))] = "\n".join("".join(c["source"]) for c in cells)
    for path in sorted((ROOT / "lnbook").rglob("*.py")):
        tree = ast.parse(path.read_text())
        docs = [ast.get_docstring(n) or "" for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))]
        texts[str(path.relative_to(ROOT))] = "\n".join(docs)
    found = {}
    for where, text in texts.items():
        for name in DOTTED.findall(text):
            name = name.rstrip(".")
            if name not in NOT_CODE:
                found.setdefault(name, where)
    return found


def test_every_quoted_lnbook_name_resolves():
    names = quoted_names()
    assert len(names) > 100
    missing = sorted(f"{n} (in {w})" for n, w in names.items() if not resolve(n))
    assert not missing, "these names do not exist in lnbook:\n" + "\n".join(missing)


@pytest.mark.parametrize("name, real", [
    ("lnbook.core.norms.layer_norm", True),
    ("lnbook.core.norms.no_such_function", False),
    ("lnbook.norms.layer_norm", False),  # the flat layout before the move
    ("lnbook.capacity", True),
])
def test_resolve_tells_real_from_missing(name, real):
    assert resolve(name) is real
