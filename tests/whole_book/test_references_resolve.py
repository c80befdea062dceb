"""Every ``lnbook.x.y`` that the book, the labs, the README or a docstring quotes names a real object, and every
Machine check of the book names the code that computes or constructs its statement (one hop from a theorem
to its code)."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOTTED = re.compile(r"(?<![\w/.-])lnbook(?:\.[A-Za-z_]\w*)+")
NOT_CODE = {"lnbook.zip", "lnbook.generated_from"}  # a file name (the preface's Colab steps), a notebook metadata key


_MISSING = object()


def lookup(dotted: str):
    """The object ``dotted`` names (a module, or an attribute path below the longest importable module), else ``_MISSING``."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return _MISSING
            obj = getattr(obj, name)
        return obj
    return _MISSING


def resolve(dotted: str) -> bool:
    """True when ``dotted`` is a module, or an attribute path below the longest importable module."""
    return lookup(dotted) is not _MISSING


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


MACHINE_CHECK = re.compile(r"^:::\{dropdown\} Machine check\n(.*?)^:::$", re.M | re.S)
TEST_FILE = re.compile(r"tests/[\w/]+\.py")


def machine_check_defects(where: str, text: str) -> list[str]:
    """Each Machine check dropdown of ``text`` must name an ``lnbook.`` callable that resolves; when the dropdown
    names test files, at least one such callable must appear in one of them (the code the tests exercise)."""
    defects = []
    for match in MACHINE_CHECK.finditer(text):
        block, line = match.group(1), text.count("\n", 0, match.start()) + 1
        named = [n.rstrip(".") for n in DOTTED.findall(block)]
        code = [n for n in named if (obj := lookup(n)) is not _MISSING and callable(obj) and not inspect.ismodule(obj)]
        tests = sorted(set(TEST_FILE.findall(block)))
        sources = [(ROOT / t).read_text() for t in tests if (ROOT / t).is_file()]
        if not code:
            defects.append(f"{where}:{line}: the Machine check names no lnbook function or class that resolves "
                           f"(add 'Code: `lnbook.<package>.<module>.<function>`.'); it names {named or 'nothing'}")
        elif sources and not any(re.search(rf"\b{n.rsplit('.', 1)[-1]}\b", s) for n in code for s in sources):
            defects.append(f"{where}:{line}: none of {code} appears in the tests it names ({', '.join(tests)})")
    return defects


def test_every_machine_check_names_the_code_of_its_statement():
    defects, blocks = [], 0
    for path in sorted((ROOT / "book").glob("*.md")):
        text = path.read_text()
        blocks += len(MACHINE_CHECK.findall(text))
        defects += machine_check_defects(path.name, text)
    assert blocks >= 96, blocks
    assert not defects, "\n".join(defects)


def test_machine_check_defects_are_found_in_a_planted_chapter():
    planted = (
        "Text.\n\n:::{dropdown} Machine check\n`tests/core/test_norms.py::test_layer_norm_matches_torch`.\nCode: `lnbook.core.norms.layer_norm`.\n:::\n\n"
        ":::{dropdown} Machine check\n`tests/core/test_norms.py::test_layer_norm_matches_torch`, no code named.\n:::\n\n"
        ":::{dropdown} Machine check\nCode: `lnbook.core.norms.no_such_function`, `lnbook.core.norms` (a module).\n:::\n\n"
        ":::{dropdown} Machine check\n`tests/util/test_timing.py`. Code: `lnbook.whitening.trace_loss.trace_loss`.\n:::\n"
    )
    defects = machine_check_defects("ch09.md", planted)
    assert len(defects) == 3, defects
    assert defects[0].startswith("ch09.md:8: the Machine check names no lnbook function") and "nothing" in defects[0]
    assert defects[1].startswith("ch09.md:12: the Machine check names no lnbook function") and "no_such_function" in defects[1]
    assert defects[2] == ("ch09.md:16: none of ['lnbook.whitening.trace_loss.trace_loss'] appears in the tests it names "
                          "(tests/util/test_timing.py)")


_PRF_OPEN = re.compile(r"^\s*(?::{3,}|`{3,})\{prf:[a-z]+\}")
_PRF_REF = re.compile(r"\{prf:ref\}`([^`]*)`")


def prf_labels(text: str) -> set[str]:
    """The labels of the ``prf`` directives (theorems, definitions, ...) of a MyST page: the ``:label:`` option
    right after a ``{prf:...}`` opening line."""
    labels, lines = set(), text.splitlines()
    for i, line in enumerate(lines):
        if _PRF_OPEN.match(line):
            for option in lines[i + 1:i + 6]:
                found = re.match(r"\s*:label:\s*(\S+)", option)
                if found:
                    labels.add(found.group(1))
                    break
                if not option.strip().startswith(":"):
                    break
    return labels


def prf_ref_problems(pages: dict[str, str]) -> list[str]:
    """Every ``{prf:ref}`` whose target is not the label of a ``prf`` directive of the book (an exercise's label
    needs ``{ref}``: Sphinx warns, and the strict build fails, only at build time)."""
    labels = set().union(*(prf_labels(t) for t in pages.values()))
    problems = []
    for name, text in pages.items():
        for n, line in enumerate(text.splitlines(), 1):
            for target in _PRF_REF.findall(line):
                label = re.search(r"<([^>]+)>\s*$", target)
                label = label.group(1) if label else target.strip()
                if label not in labels:
                    problems.append(f"{name}:{n}: {{prf:ref}}`{target}` is not a theorem-like label (use {{ref}} for exercises)")
    return problems


def test_every_prf_ref_targets_a_prf_directive():
    """A {prf:ref} to an exercise label (ex-ch7-tied) passed every fast test and failed the strict book build."""
    pages = {p.name: p.read_text() for p in sorted((ROOT / "book").glob("*.md"))}
    assert prf_ref_problems(pages) == []
    planted = {"a.md": ":::{prf:theorem} T\n:label: thm-a\nx\n:::\n\n```{exercise}\n:label: ex-a\n```\n"
                       "See {prf:ref}`thm-a`, {prf:ref}`the theorem <thm-a>` and {prf:ref}`ex-a`.\n"}
    assert prf_ref_problems(planted) == ["a.md:9: {prf:ref}`ex-a` is not a theorem-like label (use {ref} for exercises)"]
