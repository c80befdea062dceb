"""Every number in the prose of chapters 1, 2 and 4 is glued from a notebook or asserted here.

The scan reads the chapter's markdown, drops code blocks, proofs, inline code and glue roles (glued numbers
are computed by the notebook that builds the page) and LaTeX command names, and collects every decimal
number that is left. Each one must have an entry in :data:`ASSERTED` that says where it comes from:

* :class:`Value` — a quantity computed here that must round to the printed digits;
* :class:`InSource` — a configuration value, a test bound or a figure quoted from a source, which must appear
  as a numeric literal (to the printed digits) in the named file, where the code uses it;
* :class:`Given` — a number that is data of an exercise or example (its consequences are ``Value`` entries).

A number that appears in the prose without an entry fails the test, and so does an entry whose number has
left the prose (it would check nothing). The same file also checks that every test and every reproduction
key the prose cites exists.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from lnbook.hermite import nonlinearity_strength
from lnbook.mlp_at_init import finite_width_gap_floor
from lnbook.separability import ssr

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = {
    "ch01": ROOT / "book" / "ch01_what_layernorm_computes.md",
    "ch02": ROOT / "book" / "ch02_layernorm_is_nonlinear.md",
    "ch04": ROOT / "book" / "ch04_isometry_at_initialisation.md",
}
NOTEBOOKS = {
    "ch01": ROOT / "notebooks" / "ch01_geometry_lab.ipynb",
    "ch02": ROOT / "notebooks" / "ch02_breaking_the_linear_bound.ipynb",
    "ch04": ROOT / "notebooks" / "ch04_isometry_lab.ipynb",
}

_FENCE = re.compile(r"^(```+|:::+)\s*(\{[^}]*\})?")
_DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?!\w)(?!\.\d)")
_LITERAL = re.compile(r"(?<![\w.])-?\d+\.\d+(?:e-?\d+)?")


def prose(markdown: str) -> str:
    """The chapter without code blocks, proofs, inline code, glue roles and LaTeX command names."""
    kept, stack = [], []
    for line in markdown.split("\n"):
        m = _FENCE.match(line.strip())
        if m:
            if stack and line.strip() == stack[-1][0]:
                stack.pop()
                continue
            marker, directive = m.group(1), m.group(2) or ""
            if directive or line.strip() != marker:
                stack.append((marker, directive))
                continue
        if any(d == "{prf:proof}" or (d == "" and mk.startswith("```")) for mk, d in stack):
            continue
        kept.append(line)
    text = "\n".join(kept)
    text = re.sub(r"\{glue:[a-z]+\}`[^`]*`", " ", text)
    text = re.sub(r"`[^`]*`", " ", text)
    return re.sub(r"\\[a-zA-Z]+", " ", text)


def decimals(chapter: str) -> set[str]:
    return set(_DECIMAL.findall(prose(CHAPTERS[chapter].read_text())))


def _digits(number: str) -> int:
    return len(number.split(".")[1])


@dataclass(frozen=True)
class Value:
    compute: Callable[[], float]
    what: str

    def check(self, number: str) -> None:
        value = self.compute()
        assert round(value, _digits(number)) == pytest.approx(float(number), abs=1e-12), (
            f"{number} ({self.what}) is {value!r} when computed"
        )


@dataclass(frozen=True)
class InSource:
    path: str
    what: str

    def check(self, number: str) -> None:
        text = (ROOT / self.path).read_text()
        literals = {float(v) for v in _LITERAL.findall(text)}
        assert any(round(v, _digits(number)) == float(number) for v in literals), (
            f"{number} ({self.what}) is not a numeric literal of {self.path}: prose and code disagree"
        )


@dataclass(frozen=True)
class Given:
    what: str

    def check(self, number: str) -> None:
        assert self.what


# the four points of the anisotropic-scaling example of chapter 2 (prop-ssr-invariance, ex-ch2-anisotropic)
_POINTS = np.array([[0.0, 0.0], [0.0, 3.0], [1.0, 0.0], [1.0, 3.0]])
_LABELS = np.array([0, 0, 1, 1])
_SCALED = _POINTS @ np.diag([1.0, 0.1])


def _within(X: np.ndarray) -> float:
    return float(sum(((X[_LABELS == c] - X[_LABELS == c].mean(0)) ** 2).sum() for c in (0, 1)))


def _total(X: np.ndarray) -> float:
    return float(((X - X.mean(0)) ** 2).sum())


def _relu_beta0() -> float:
    return nonlinearity_strength("relu")


ASSERTED: dict[str, dict[str, Value | InSource | Given]] = {
    "ch01": {
        "0.04": Value(lambda: 4096 * 1e-5, "d eps for d = 4096, eps = 1e-5"),
        "0.2": Value(lambda: math.sqrt(4096 * 1e-5), "the centred norm at which d eps matters"),
        "0.5": InSource("notebooks/ch01_geometry_lab.ipynb", "a fold shift of the figure"),
    },
    "ch02": {
        "1.5": Value(lambda: _POINTS[_LABELS == 0].mean(0)[1], "second coordinate of the class means"),
        "2.25": Value(lambda: (_POINTS[0, 1] - _POINTS[_LABELS == 0].mean(0)[1]) ** 2, "squared distance to a class mean"),
        "0.25": Value(lambda: (_POINTS[0, 0] - _POINTS.mean(0)[0]) ** 2, "squared first coordinate about the mean"),
        "0.9": Value(lambda: ssr(_POINTS, _LABELS), "SSR before the anisotropic scaling"),
        "0.3": Value(lambda: _SCALED[1, 1], "second coordinate after diag(1, 1/10)"),
        "0.15": Value(lambda: _SCALED[_LABELS == 0].mean(0)[1], "class mean after the scaling"),
        "0.0225": Value(lambda: _SCALED[_LABELS == 0].mean(0)[1] ** 2, "its square"),
        "0.09": Value(lambda: _within(_SCALED), "within-class sum of squares after the scaling"),
        "1.09": Value(lambda: _total(_SCALED), "total sum of squares after the scaling"),
        "0.083": Value(lambda: ssr(_SCALED, _LABELS), "SSR after the scaling"),
        "0.5": InSource("notebooks/ch02_breaking_the_linear_bound.ipynb", "a shift s of the one-layer figure"),
    },
    "ch04": {
        "0.7335": Value(_relu_beta0, "beta_0 of ReLU"),
        "0.7233": Value(lambda: nonlinearity_strength("gelu"), "beta_0 of GELU"),
        "1.266529": Value(lambda: 2 - math.pi / (2 * (math.pi - 1)), "2 - beta_0 of ReLU, exactly"),
        "1.26757": InSource("notebooks/ch04_isometry_lab.ipynb", "2 - beta_0 printed by the official notebook"),
        "0.018": InSource("notebooks/ch04_isometry_lab.ipynb", "the official gap at layer 30, low end"),
        "0.020": InSource("notebooks/ch04_isometry_lab.ipynb", "the official gap at layer 30, high end"),
        "0.5": InSource("lnbook/isometry_experiments.py", "the smallest official gain"),
        "0.85": InSource("tests/test_isometry.py", "lower bound of the floor test"),
        "1.2": InSource("tests/test_isometry.py", "upper bound of the floor test"),
        "0.9": Given("the starting correlation -0.9 of exercise ex-ch4-even"),
        "0.81": Value(lambda: 0.9**2, "rho_1 = rho_0^2 in exercise ex-ch4-even"),
        "0.656": Value(lambda: 0.9**4, "rho_2 in exercise ex-ch4-even"),
        "0.538": Value(lambda: _relu_beta0() ** 2, "beta_0^2 of ReLU"),
        "0.462": Value(lambda: 1 - _relu_beta0() ** 2, "1 - beta_0^2 of ReLU"),
        "0.0097": Value(lambda: finite_width_gap_floor(_relu_beta0(), 10, 1000), "the floor for n = 10, d = 1000"),
        "0.990": Value(lambda: math.exp(-finite_width_gap_floor(_relu_beta0(), 10, 1000)), "the isometry at that floor"),
        "0.999": Given("the target isometry of exercise ex-ch4-floor"),
        "0.001": Value(lambda: -math.log(0.999), "the gap of isometry 0.999"),
    },
}


@pytest.mark.parametrize("chapter", sorted(CHAPTERS))
def test_every_decimal_in_the_prose_is_glued_or_asserted(chapter):
    found = decimals(chapter)
    listed = set(ASSERTED[chapter])
    assert not found - listed, f"{chapter}: numbers in the prose that are neither glued nor asserted: {sorted(found - listed)}"
    assert not listed - found, f"{chapter}: asserted numbers no longer in the prose (remove them): {sorted(listed - found)}"
    for number, source in ASSERTED[chapter].items():
        source.check(number)


def test_the_scan_sees_numbers_and_skips_code_proofs_and_glue():
    """The scanner itself: a number in prose or math is found; in code, inline code, a proof or a glue role it is not."""
    sample = "\n".join([
        "Text 0.25 and $x \\approx0.75$.",
        "```python", "y = 0.125", "```",
        ":::{prf:proof}", "Here 0.375.", ":::",
        "Inline `0.5` and {glue:text}`nb.ipynb::key:.3f` and 1.5.",
    ])
    assert set(_DECIMAL.findall(prose(sample))) == {"0.25", "0.75", "1.5"}


@pytest.mark.parametrize("chapter", sorted(CHAPTERS))
def test_cited_tests_and_reproduction_keys_exist(chapter):
    text = CHAPTERS[chapter].read_text()
    sources = "\n".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py"))
    defined = set(re.findall(r"^def (test_\w+)", sources, flags=re.M))
    cited = set(re.findall(r"`(test_\w+)(?:\[[^\]]*\])?`", text))
    assert cited, f"{chapter} cites no test"
    assert not cited - defined, f"{chapter} cites tests that do not exist: {sorted(cited - defined)}"
    cells = json.loads(NOTEBOOKS[chapter].read_text())["cells"]
    notebook = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    keys = set(re.findall(r"`(ch\d\d-[a-z0-9-]+)`", text))
    missing = [k for k in keys if f'"{k}"' not in notebook]
    assert not missing, f"{chapter} names reproduction keys that its notebook never records: {missing}"
