"""Project-level checks: notebooks carry no outputs, the conda file mirrors pyproject, CI runs at ci scale,
every statement of the book can be indexed and every test it names exists."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import tomllib
import yaml

from lnbook.book.runner import NotebookFailed, execute_notebook
from lnbook.book.site_check import SKIP_ENV_VAR
from lnbook.book.theorem_index import book_statements
from lnbook.book.toc import book_root, generated_inputs, toc_files, toc_notebooks
from lnbook.util.scale import current_scale

ROOT = book_root(Path(__file__).parent)
NOTEBOOK_FOLDERS = ("notebooks", "book")


def test_notebooks_have_no_committed_outputs():
    offenders = []
    for path in sorted(p for folder in NOTEBOOK_FOLDERS for p in (ROOT / folder).glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count")):
                offenders.append(path.name)
                break
    assert not offenders, f"notebooks committed with outputs (clear them before committing): {offenders}"


def test_every_notebook_is_in_the_toc():
    in_toc = {p.relative_to(ROOT) for p in toc_notebooks(ROOT)}
    on_disk = {p.relative_to(ROOT) for folder in NOTEBOOK_FOLDERS for p in (ROOT / folder).glob("*.ipynb")}
    assert on_disk == in_toc, f"notebooks not in _toc.yml: {sorted(map(str, on_disk - in_toc))}"


def test_generated_pages_name_existing_inputs():
    for path in toc_notebooks(ROOT):
        for pattern in generated_inputs(path) or []:
            assert "*" in pattern or (ROOT / pattern).exists(), f"{path.name}: generated_from names {pattern!r}"


def test_every_toc_entry_exists():
    missing = [f for f in toc_files(ROOT) if not any((ROOT / f"{f}{ext}").exists() for ext in (".md", ".ipynb"))]
    assert not missing, f"_toc.yml names files that do not exist: {missing}"


def test_environment_yml_mirrors_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = set(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        wanted |= set(extra)
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    listed = {p for p in pip_section if not p.startswith("-e")}
    assert listed == wanted, f"only in pyproject: {sorted(wanted - listed)}; only in environment.yml: {sorted(listed - wanted)}"


def test_torch_is_pinned():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "torch==2.13.0" in deps, "torch must stay pinned (an unpinned torch pulls a multi-GB CUDA build here)"


@pytest.mark.skipif(not os.environ.get("CI"), reason="only meaningful inside CI")
def test_ci_runs_at_ci_scale_and_in_the_browser():
    assert current_scale() == "ci", "CI must run at LNBOOK_SCALE=ci"
    assert os.environ.get(SKIP_ENV_VAR, "").strip() in ("", "0"), f"CI must not set {SKIP_ENV_VAR}"


def test_every_statement_of_the_book_has_a_label():
    """The index of theorems links every statement by its label."""
    unlabelled = [f"{s.docname}.md:{s.line} ({s.kind} {s.title!r})" for s in book_statements(ROOT) if not s.label]
    assert not unlabelled, "give these statements a :label: so that the index can link them: " + ", ".join(unlabelled)


PRF_TITLE = re.compile(r"^:{3,}\{prf:(\w+)\}[ \t]+(\S.*)$", re.M)


def prf_titles_with_parentheses(text: str) -> list[str]:
    """The titles of ``{prf:...}`` directives in ``text`` that hold a parenthesis: the book shows every title in
    parentheses ("Definition 2.2 (Sum of squares ratio)"), so a parenthesis in the title nests."""
    return [f"{kind} {title!r}" for kind, title in PRF_TITLE.findall(text) if "(" in title or ")" in title]


def test_the_title_check_finds_a_nested_parenthesis():
    page = ":::{prf:definition} Sum of squares ratio (our reconstruction)\n:label: d\n:::\n" \
           "::::{prf:remark} Fine, our reconstruction\n::::\n"
    assert prf_titles_with_parentheses(page) == ["definition 'Sum of squares ratio (our reconstruction)'"]


def test_no_statement_title_nests_parentheses():
    """A title such as "Linear SSR (our reconstruction)" reads "Definition 2.3 (Linear SSR (our reconstruction))":
    write "Linear SSR, our reconstruction" instead."""
    nested = [f"{path.relative_to(ROOT)}: {title}" for path in sorted((ROOT / "book").glob("*.md"))
              for title in prf_titles_with_parentheses(path.read_text())]
    assert not nested, ("these titles are shown inside parentheses, so their own parentheses nest; use a comma or "
                        "a colon instead: " + "; ".join(nested))


def notation_chapters(text: str) -> dict[int, int]:
    """``{chapter number: rows of its table}`` of the notation page: a ``## Chapter N...`` heading followed by a
    table of symbols (rows after the ``|---|`` line, up to the next heading)."""
    found = {}
    for match in re.finditer(r"^## Chapter (\d+)\b[^\n]*\n(.*?)(?=^#|\Z)", text, re.M | re.S):
        body = match.group(2)
        rows = body.split("|---|", 1)[1].splitlines()[1:] if "|---|" in body else []
        found[int(match.group(1))] = sum(1 for row in rows if row.startswith("| "))
    return found


def test_the_notation_check_counts_a_chapter_table():
    page = "## Chapter 1: x\n\n| symbol | meaning |\n|---|---|\n| $a$ | b |\n\n## Chapter 2: y\n\nprose only\n"
    assert notation_chapters(page) == {1: 1, 2: 0}


def test_every_chapter_of_the_toc_has_a_notation_table():
    """book/notation.md promises one table per chapter: each chapter page of _toc.yml has a ``## Chapter N`` section
    with at least one symbol."""
    chapters = sorted({int(match.group(1)) for name in toc_files(ROOT)
                       if (match := re.match(r"book/ch(\d+)_", name))})
    assert chapters, "no chapter pages found in _toc.yml"
    tables = notation_chapters((ROOT / "book" / "notation.md").read_text())
    missing = [n for n in chapters if tables.get(n, 0) < 1]
    assert not missing, f"book/notation.md has no table of symbols for chapter(s) {missing}: add a '## Chapter N' table"


def test_every_test_the_book_names_exists():
    """A machine check named in the prose is a test function in tests/; named with its file
    (`tests/<subpackage>/test_<module>.py::test_...`), it is defined in that file."""
    files = {str(p.relative_to(ROOT)): p.read_text() for p in (ROOT / "tests").rglob("*.py")}
    defined = set(re.findall(r"^\s*(?:async\s+)?def (test_\w+)", "\n".join(files.values()), re.MULTILINE))
    named, wrong_file = {}, []
    for path in sorted((ROOT / "book").glob("*.md")):
        for file, name in re.findall(r"`(?:(tests/[\w/]+\.py)::)?(test_\w+)`", path.read_text()):
            named.setdefault(name, path.name)
            if file and not re.search(rf"^\s*(?:async\s+)?def {name}\b", files.get(file, ""), re.MULTILINE):
                wrong_file.append(f"{file}::{name} ({path.name})")
    missing = sorted(f"{name} ({where})" for name, where in named.items() if name not in defined)
    assert named and not missing, f"the book names tests that do not exist: {missing}"
    assert not wrong_file, f"the book names tests in files that do not define them: {sorted(set(wrong_file))}"


def running_text_test_paths(text: str) -> list[tuple[int, str]]:
    """``(line, path)`` of each ``tests/...py`` path of a MyST page that stands in running text, not inside a
    dropdown (``{dropdown}`` or a directive with ``:class: dropdown``, such as a collapsed solution)."""
    found, stack = [], []  # stack: [fence, collapsed] of the open directives
    lines = text.splitlines()
    for i, line in enumerate(lines):
        s = line.strip()
        opened = re.match(r"^(:{3,}|`{3,})\{([\w:-]+)\}", s)
        if opened:
            options = [o.strip() for o in lines[i + 1:i + 6] if o.strip().startswith(":")]
            collapsed = opened[2] == "dropdown" or ":class: dropdown" in options
            stack.append([opened[1], collapsed])
            continue
        if stack and s == stack[-1][0]:
            stack.pop()
            continue
        if not any(collapsed for _, collapsed in stack):
            found += [(i + 1, m) for m in re.findall(r"tests/[\w/]+\.py(?:::\w+)?", line)]
    return found


def test_test_paths_stay_out_of_the_running_text():
    """A reader of a chapter meets what is checked in words; the tests that check it, by their paths, sit in the
    collapsed Machine check dropdowns (issue 33: long test paths in the running text of the appendix and chapter 2).
    The parser finds a planted path in running text and none in a dropdown or a collapsed solution."""
    planted = ("Text (`tests/core/test_norms.py::test_zero_variance_input`).\n\n:::{dropdown} Machine check\n"
               "`tests/core/test_norms.py::test_layer_norm_matches_torch`\n:::\n\n```{solution} ex-1\n:class: dropdown\n"
               "`tests/core/test_norms.py`\n```\n")
    assert running_text_test_paths(planted) == [(1, "tests/core/test_norms.py::test_zero_variance_input")]
    found = {path.name: running_text_test_paths(path.read_text()) for path in sorted((ROOT / "book").glob("*.md"))}
    found = {name: hits for name, hits in found.items() if hits}
    assert not found, f"say in words what is checked and name the tests in the Machine check dropdown: {found}"


def running_text_test_names(text: str) -> list[tuple[int, str]]:
    """``(line, name)`` of each test name (``test_...``) or test path (``tests/...py``) of a MyST page that stands
    outside every ``{dropdown}`` directive: in the running text, and also in a collapsed solution, where a test
    belongs in a Machine check dropdown nested in the solution, not in the solution's sentences."""
    found, stack = [], []  # stack: [fence, is a dropdown] of the open directives
    for i, line in enumerate(text.splitlines()):
        s = line.strip()
        opened = re.match(r"^(:{3,}|`{3,})\{([\w:-]+)\}", s)
        if opened:
            stack.append([opened[1], opened[2] == "dropdown"])
            continue
        if stack and s == stack[-1][0]:
            stack.pop()
            continue
        if not any(dropdown for _, dropdown in stack):
            found += [(i + 1, m) for m in re.findall(r"tests/[\w/]+\.py(?:::\w+)?|(?<![\w/])test_\w+", line)]
    return found


#: the reader's pages of issue 33: the chapters, the appendix, the index and the preface
READER_PAGES = sorted(["index.md", "preface.md", *(p.name for p in (ROOT / "book").glob("ch0*.md")),
                       *(p.name for p in (ROOT / "book").glob("appendix*.md"))])


def test_the_test_name_check_finds_a_name_in_text_and_in_a_solution():
    planted = ("Checked by `test_zero_variance_input`.\n\n```{solution} ex-1\n:class: dropdown\n\nSee `test_a`.\n\n"
               ":::{dropdown} Machine check\n`tests/core/test_norms.py::test_b`\n:::\n```\n\n"
               ":::{dropdown} In the code: x\n`test_c`\n:::\n")
    assert running_text_test_names(planted) == [(1, "test_zero_variance_input"), (6, "test_a")]


@pytest.mark.parametrize("page", READER_PAGES)
def test_test_names_stay_in_the_dropdowns(page):
    """Issue 33: a reader meets what is checked in words; test names and paths sit in the Machine check dropdowns
    (nested in a solution where the solution is what is checked), never in the running text."""
    found = running_text_test_names((ROOT / "book" / page).read_text())
    assert not found, f"{page}: say in words what is checked and name these tests in a Machine check dropdown: {found}"


@pytest.mark.parametrize("lab", sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_labs_name_tests_only_in_dropdowns(lab):
    """The same for the labs' text (their markdown cells): the opening cell's pointer to the topic's test folder
    (``checks: `tests/<topic>/` ``) is a folder, not a test, and stays."""
    cells = json.loads((ROOT / "notebooks" / lab).read_text())["cells"]
    found = [(n, hit) for n, cell in enumerate(cells) if cell["cell_type"] == "markdown"
             for hit in running_text_test_names("".join(cell["source"]))]
    assert not found, f"{lab}: (cell, (line, test)) outside a Machine check dropdown: {found}"


def reader_text(text: str) -> list[tuple[int, str]]:
    """``(line, text)`` of a MyST page without its plain code blocks (```` ```bash ````, ```` ```python ````): what
    the reader reads as sentences, directives (solutions, dropdowns, figures) included."""
    out, stack = [], []  # stack: (fence, is a code block) of the open fences
    for i, line in enumerate(text.splitlines()):
        s = line.strip()
        if stack and stack[-1][1]:
            if s == stack[-1][0]:
                stack.pop()
            continue
        directive = re.match(r"^(`{3,}|:{3,})\{", s)
        if directive:
            stack.append((directive[1], False))
            continue
        if stack and s == stack[-1][0]:  # closes the directive
            stack.pop()
            continue
        code = re.match(r"^(`{3,})[\w-]*\s*$", s)
        if code:
            stack.append((code[1], True))
            continue
        out.append((i + 1, line))
    return out


#: the scales as a reader meets them: "the small scale (`ci`)" once, then "small scale" and "paper scale";
#: not the switch's values used as adjectives ("at `ci` scale", "the ci run", "`paper`-scale")
SCALE_AS_CODE = re.compile(r"`(?:ci|paper)`[ -](?:scale|setting|lab|budget|run|build|ones?|shaped)")
BARE_CI = re.compile(r"(?<![\w`\"'-])ci(?![\w`\"'-])")


def scale_jargon(text: str) -> list[tuple[int, str]]:
    """``(line, words)`` where a page uses the scale switch's values as words (:data:`SCALE_AS_CODE`, or a bare ``ci``
    outside inline code)."""
    found = []
    for number, line in reader_text(text):
        found += [(number, m) for m in SCALE_AS_CODE.findall(line)]
        found += [(number, m) for m in BARE_CI.findall(re.sub(r"`[^`]*`", "", line))]
    return found


def test_the_scale_check_finds_jargon_and_passes_the_defined_terms():
    planted = ("At `ci` scale, and in the ci run; at `paper`-scale too.\nAt the small scale CI runs (`ci`), then at small "
               "scale and paper scale; `ch06-eps-steps-ci:s`.\n```python\nos.environ[\"LNBOOK_SCALE\"] = \"ci\"  # ci\n```\n")
    assert scale_jargon(planted) == [(1, "`ci` scale"), (1, "`paper`-scale"), (1, "ci")]


@pytest.mark.parametrize("page", READER_PAGES)
def test_pages_name_the_scales_for_a_reader(page):
    """Issue 33: "at `ci` scale", "the ci run" are the switch's values, not words; a page says "the small scale CI
    runs (`ci`)" once, then "small scale" and "paper scale"."""
    found = scale_jargon((ROOT / "book" / page).read_text())
    assert not found, f"{page}: write 'small scale' / 'paper scale' (the switch's values in brackets once): {found}"


@pytest.mark.parametrize("lab", sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_labs_name_the_scales_for_a_reader(lab):
    cells = json.loads((ROOT / "notebooks" / lab).read_text())["cells"]
    found = [(n, hit) for n, cell in enumerate(cells) if cell["cell_type"] == "markdown"
             for hit in scale_jargon("".join(cell["source"]))]
    assert not found, f"{lab}: write 'small scale' / 'paper scale' in its text: {found}"


E_NOTATION = re.compile(r"(?<![\w.])\d+(?:\.\d+)?e[-+]?\d+")
#: a glue call in a lab whose value is formatted in e-notation (f"{x:.1e}", number_range(..., ".0e"))
E_GLUE = re.compile(r"glue\(.*(?::\.?\d*e\}|[\"']\.\d+e[\"'])")


def e_notation(text: str) -> list[tuple[int, str]]:
    """``(line, number)`` of each number written in e-notation (``1e-5``, ``3.2e-13``) in the text of a MyST page,
    outside code blocks and inline code: the text writes $10^{-5}$, a glued number ``power_of_ten``'s 3.2×10⁻¹³."""
    return [(n, m) for n, line in reader_text(text) for m in E_NOTATION.findall(re.sub(r"`[^`]*`", "", line))]


def test_the_e_notation_check_finds_numbers_not_words_or_code():
    planted = ("An eps of 1e-5 and 3.2e-13, $10^{-5}$, `1e-5`, the e-mail, page2e-3x, glue `ch08-max-gap`.\n"
               "```python\nx = 1e-5\n```\n")
    assert e_notation(planted) == [(1, "1e-5"), (1, "3.2e-13")]
    assert E_GLUE.search('glue("k", f"{x:.0e}", display=False)') and E_GLUE.search('glue("k", number_range(a, b, ".0e"))')
    assert not E_GLUE.search('glue("k", power_of_ten(x, ".0p"), display=False)')


@pytest.mark.parametrize("page", READER_PAGES)
def test_pages_write_no_e_notation(page):
    """Issue 33: 1e-5 and 3.2e-13 are code, not text: the text writes $10^{-5}$ and $3.2\\times10^{-13}$."""
    found = e_notation((ROOT / "book" / page).read_text())
    assert not found, f"{page}: write these as math ($3.2\\times10^{{-13}}$): {found}"


@pytest.mark.parametrize("lab", sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_labs_write_and_glue_no_e_notation(lab):
    """The labs' text likewise, and the numbers they glue for the text: formatted by
    ``lnbook.util.tables.power_of_ten`` (spec ``".1p"``), not with an e spec."""
    cells = json.loads((ROOT / "notebooks" / lab).read_text())["cells"]
    text = [(n, hit) for n, c in enumerate(cells) if c["cell_type"] == "markdown" for hit in e_notation("".join(c["source"]))]
    glued = [(n, line.strip()) for n, c in enumerate(cells) if c["cell_type"] == "code"
             for line in "".join(c["source"]).splitlines() if E_GLUE.search(line)]
    assert not text, f"{lab}: e-notation in the text (cell, (line, number)): {text}"
    assert not glued, f"{lab}: glued in e-notation (use power_of_ten / a '.1p' spec): {glued}"


def test_machine_checks_name_their_tests_by_path():
    """Every test a machine check names carries its file, so the reader goes there in one hop."""
    bare = []
    for statement in book_statements(ROOT):
        if statement.check:
            bare += [f"{statement.label}: {n}" for n in re.findall(r"(?<![:\w])`(test_\w+)`", statement.check)]
    assert not bare, f"name these tests as tests/<subpackage>/test_<module>.py::test_...: {bare}"


def test_planted_failing_cell_fails_the_runner(tmp_path):
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(
        cells=[new_code_cell("x = 1"), new_code_cell("raise RuntimeError('planted failure')")],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )
    path = tmp_path / "nb" / "planted.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)
    with pytest.raises(NotebookFailed, match="planted failure"):
        execute_notebook(path, cache_dir=tmp_path / "cache")
    # a failed notebook is never cached
    from jupyter_cache import get_cache

    assert get_cache(str(tmp_path / "cache")).list_cache_records() == []


# Chapters whose main line names no code: package paths, function names and Class.method live in the
# "Machine check" and "In the code" dropdowns (and exercise solutions), not in the text, definitions or captions.
CODE_FREE_MAIN_LINE = ("ch06_layernorm_as_activation.md",)


def main_line_code_names(text: str) -> list[tuple[int, str]]:
    """(line, name) for every inline-code name of the package (``lnbook.x.y``, ``snake_case``, ``Class.method``)
    outside dropdowns, fenced blocks (figures' captions excepted: they are read in the main line) and solutions."""
    found, stack, fence = [], [], None
    for number, line in enumerate(text.split("\n"), 1):
        if fence is not None:
            if line.strip() == "```":
                fence = None
            elif fence.startswith("```{glue:figure}") and not line.startswith(":"):
                found += [(number, c) for c in re.findall(r"(?<![}\w])`([^`]+)`", line) if _is_code_name(c)]
            continue
        if line.startswith("```"):
            fence = line
            continue
        opening = re.match(r"^:{3,}\{?(\w[\w:-]*)\}?", line)
        if opening:
            stack.append(opening.group(1))
            continue
        if re.match(r"^:{3,}\s*$", line) and stack:
            stack.pop()
            continue
        if "dropdown" not in stack:
            found += [(number, c) for c in re.findall(r"(?<![}\w])`([^`]+)`", line) if _is_code_name(c)]
    return found


def _is_code_name(code: str) -> bool:
    return ("lnbook." in code or re.fullmatch(r"[a-z]+(_[a-z0-9]+)+", code) is not None
            or re.fullmatch(r"[A-Z]\w+\.\w+", code) is not None)


def test_main_line_code_names_are_found():
    text = ("Plain `Linear(1, k) -> ReLU` here.\nA `lnbook.core.norms.layer_norm` and `step_slope_for` and\n"
            "`DropSnapshot.critical_ratio`.\n:::{dropdown} Machine check\n`search_sector_apex`\n:::\n"
            "```{glue:figure} x\n:name: fig-x\n\nCaption with `step_slope_for`.\n```\n")
    assert main_line_code_names(text) == [(2, "lnbook.core.norms.layer_norm"), (2, "step_slope_for"),
                                          (3, "DropSnapshot.critical_ratio"), (10, "step_slope_for")]


@pytest.mark.parametrize("chapter", CODE_FREE_MAIN_LINE)
def test_chapter_main_line_names_no_code(chapter):
    """Chapter 6 (issue 32, third read): code names in the main line, a definition and a caption were moved into
    the Machine check / In the code dropdowns; this keeps them there."""
    found = main_line_code_names((ROOT / "book" / chapter).read_text())
    assert found == [], f"{chapter}: code names in the main line (move them into a dropdown): {found}"
