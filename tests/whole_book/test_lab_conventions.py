"""The book's rules for labs, checked on the labs of chapters 1, 2 and 4: the one setup cell (the setup lines, then the
imports, collapsed in one cell), thin notebooks, no outputs committed. Every notebook of ``notebooks/`` follows them."""

from __future__ import annotations

import ast
import re
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LABS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
SETUP_CELL = "%matplotlib inline\nfrom lnbook.notebook import setup\n\ndevice = setup()"
MAX_HELPER_LINES = 15


def code_cells(name: str) -> list[str]:
    cells = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


@pytest.mark.parametrize("name", LABS)
def test_lab_starts_with_the_one_setup_cell(name):
    """The first code cell is the book's setup lines, then the lab's imports (one collapsed cell: issue 33, the reader's
    page opened with two empty "Show code cell content" bars in a row)."""
    cells = code_cells(name)
    assert cells[0].startswith(SETUP_CELL + "\n\n"), f"{name}: the first code cell must begin with the book's setup lines"
    assert sum(SETUP_CELL in c for c in cells) == 1
    rest = cells[0][len(SETUP_CELL):]
    for cell in [rest, *cells[1:]]:  # the setup is done once, by lnbook.notebook.setup
        assert "seed_everything(" not in cell and "use_book_style(" not in cell and "set_num_threads(" not in cell


@pytest.mark.parametrize("name", LABS)
def test_lab_helpers_are_short(name):
    """Notebook helper functions of more than ~15 lines belong in lnbook, where they are tested."""
    for cell in code_cells(name):
        source = "\n".join(line for line in cell.split("\n") if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef):
                length = node.end_lineno - node.lineno + 1
                assert length <= MAX_HELPER_LINES, f"{name}: {node.name} has {length} lines; move it to lnbook"


ALWAYS_ALLOWED = {"notebook", "core", "ml", "util"}
TOPICS = ("separability", "capacity", "isometry", "group_ln", "ln_activation", "folding", "whitening")


def own_topic(name: str) -> str | None:
    """The topic package whose docstring names the lab (``Labs: notebooks/<name>.ipynb``), if any."""
    import importlib

    owners = []
    for topic in TOPICS:
        try:
            doc = importlib.import_module(f"lnbook.{topic}").__doc__ or ""
        except ModuleNotFoundError:
            continue
        if name in doc:
            owners.append(topic)
    assert len(owners) <= 1, f"{name} is named by several topic packages: {owners}"
    return owners[0] if owners else None


def lnbook_parts(cells: list[str]) -> set[str]:
    """The parts of lnbook a lab imports: ``notebook``, ``core``, ... (``lnbook`` alone is ``<top>``)."""
    parts = set()
    for cell in cells:
        source = "\n".join(line for line in cell.split("\n") if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(source)):
            modules = []
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            for module in modules:
                bits = module.split(".")
                if bits[0] == "lnbook":
                    parts.add(bits[1] if len(bits) > 1 else "<top>")
    return parts


@pytest.mark.parametrize("name", LABS)
def test_lab_imports_only_the_facade_the_shared_layers_and_its_own_topic(name):
    allowed = ALWAYS_ALLOWED | ({own_topic(name)} - {None})
    extra = lnbook_parts(code_cells(name)) - allowed
    assert not extra, f"{name} imports lnbook.{sorted(extra)}; a lab imports only {sorted(allowed)}"


def test_the_import_rule_sees_a_foreign_topic():
    cells = ["from lnbook.notebook import setup", "import lnbook.capacity.vc as vc\nfrom lnbook import at_scale"]
    assert lnbook_parts(cells) == {"notebook", "capacity", "<top>"}
    assert own_topic("ch03_pma_pba_lab") == "capacity" and own_topic("ch01_geometry_lab") is None


# The labs already in the lab shape of the book's rules (the others follow as their chapters are reworked).
SHAPED_LABS = ("ch01_geometry_lab", "ch02_breaking_the_linear_bound", "ch03_pma_pba_lab", "ch04_isometry_lab",
               "ch05_drop_in_lab", "ch05_hessian_lab", "ch05_random_labels_lab", "ch06_width3_lab", "ch06_ln_mlp_lab",
               "ch06_sphere_digits_lab", "ch06_parallel_ln_lab", "ch07_folding_lab", "ch07_uniform_vector_lab",
               "ch08_whitening_lab")
MAX_EXPERIMENT_LINES = 15


def _cells(name: str) -> list[dict]:
    return json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())["cells"]


def lab_shape_problems(cells: list[dict]) -> list[str]:
    """What keeps a lab from the shape: an opening that names its code and checks, the setup cell with the lab's imports
    after the setup lines (collapsed: hide-cell), no two collapsed cells in a row (two empty bars), sections that state a claim with {prf:ref} (or {ref} to an exercise: sphinx-exercise labels are not prf
    targets), short untagged cells, glue/compare only in hide-input cells."""
    problems = []
    src = ["".join(c["source"]) for c in cells]
    if cells[0]["cell_type"] != "markdown" or not re.search(r"Code: `lnbook\.[a-z_.]+`.*; checks: `tests/[a-z_]+/`", src[0]):
        problems.append("the opening cell must say 'Code: `lnbook.<topic>`; checks: `tests/<topic>/`'")
    code = [(c, s) for c, s in zip(cells, src) if c["cell_type"] == "code"]
    if not code or not code[0][1].startswith(SETUP_CELL + "\n\n"):
        problems.append("the first code cell must be the setup cell")
        return problems
    if "hide-cell" not in code[0][0].get("metadata", {}).get("tags", []):
        problems.append("the setup cell must be collapsed (tag hide-cell): a reader opens it when curious")
    imports = ast.parse(code[0][1][len(SETUP_CELL):])
    if not imports.body or not isinstance(imports.body[0], (ast.Import, ast.ImportFrom)):
        problems.append("the setup cell must go on with the lab's imports")
    collapsed = ["hide-cell" in c.get("metadata", {}).get("tags", []) for c in cells]
    problems += [f"cells {i} and {i + 1} are both collapsed (hide-cell): two empty bars in a row; merge them"
                 for i in range(len(cells) - 1) if collapsed[i] and collapsed[i + 1]]
    for i, (cell, source) in enumerate(code[1:], start=1):
        tags = cell.get("metadata", {}).get("tags", [])
        tree = ast.parse("\n".join(l for l in source.split("\n") if not l.lstrip().startswith(("%", "!"))))
        if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(tree)):
            problems.append(f"code cell {i} imports: imports belong in the one imports cell")
        if re.search(r"\b(glue|compare)\(", source) and "hide-input" not in tags:
            problems.append(f"code cell {i} calls glue/compare but is not tagged hide-input")
        lines = [l for l in source.split("\n") if l.strip()]
        if "hide-input" not in tags and len(lines) > MAX_EXPERIMENT_LINES:
            problems.append(f"code cell {i} has {len(lines)} non-blank lines untagged (at most {MAX_EXPERIMENT_LINES})")
    for cell, source in zip(cells, src):
        for heading in re.findall(r"^#+ \d+[a-z]?\.? .*$", source, re.M) if cell["cell_type"] == "markdown" else []:
            problems.append(f"heading {heading!r} carries its own number: the numbered toc numbers it (5.10.1. 1.)")
        if cell["cell_type"] == "markdown" and source.startswith("## ") and not re.search(r"\{prf:ref\}|\{ref\}`ex-", source):
            problems.append(f"section {source.splitlines()[0]!r} does not name its claim with {{prf:ref}}")
    return problems


def test_every_lab_is_held_to_the_lab_shape():
    assert set(SHAPED_LABS) == set(LABS), f"labs not checked for the lab shape: {sorted(set(LABS) - set(SHAPED_LABS))}"


@pytest.mark.parametrize("name", SHAPED_LABS)
def test_lab_has_the_lab_shape(name):
    assert lab_shape_problems(_cells(name)) == []


def test_the_lab_shape_check_sees_a_long_untagged_cell_and_an_untagged_compare():
    cells = _cells("ch01_geometry_lab")
    long_cell = {"cell_type": "code", "metadata": {}, "source": ["x = 1\n"] * (MAX_EXPERIMENT_LINES + 1)}
    glue_cell = {"cell_type": "code", "metadata": {}, "source": ["glue('a', 1)"]}
    bare_section = {"cell_type": "markdown", "metadata": {}, "source": ["## A section without its claim"]}
    problems = lab_shape_problems(cells + [long_cell, glue_cell, bare_section])
    assert len(problems) == 3, problems


def test_the_lab_shape_check_sees_an_open_setup_cell():
    cells = _cells("ch01_geometry_lab")
    code = [c for c in cells if c["cell_type"] == "code"]
    assert lab_shape_problems(cells) == []
    code[0]["metadata"]["tags"] = []
    assert lab_shape_problems(cells) == ["the setup cell must be collapsed (tag hide-cell): a reader opens it when curious"]


def test_the_lab_shape_check_sees_two_collapsed_cells_in_a_row_and_a_setup_cell_without_imports():
    """Issue 33 (the reader's page): every lab opened with two empty "Show code cell content" bars, the setup cell and
    the imports cell. The old layout is refused; so is any other pair of collapsed cells in a row."""
    cells = _cells("ch01_geometry_lab")
    first = next(i for i, c in enumerate(cells) if c["cell_type"] == "code")
    setup_only, imports = dict(cells[first]), dict(cells[first])
    setup_only["source"], imports["source"] = [SETUP_CELL], ["".join(cells[first]["source"])[len(SETUP_CELL) + 2:]]
    assert lab_shape_problems(cells[:first] + [setup_only, imports] + cells[first + 1:]) == [
        "the first code cell must be the setup cell"]
    extra = {"cell_type": "code", "metadata": {"tags": ["hide-cell"]}, "source": ["x = 1"]}
    assert lab_shape_problems(cells[:first + 1] + [extra] + cells[first + 1:]) == [
        f"cells {first} and {first + 1} are both collapsed (hide-cell): two empty bars in a row; merge them"]


def test_the_lab_shape_check_sees_a_heading_numbered_by_hand():
    cells = _cells("ch01_geometry_lab")
    cells.append({"cell_type": "markdown", "metadata": {}, "source": ["## 2b. A section ({prf:ref}`thm-x`)\n"]})
    assert lab_shape_problems(cells) == [
        "heading '## 2b. A section ({prf:ref}`thm-x`)' carries its own number: the numbered toc numbers it (5.10.1. 1.)"
    ]


LAB_FIGURE_NAME = re.compile(r"^fig-lab-(ch\d\d)-[a-z0-9-]+$")
LAB_NUMREF = re.compile(r"\{numref\}`(?:[^`<]*<)?(fig-lab-[\w-]+)>?`")


GLUE_FIGURE = re.compile(r"^(`{3,}|:{3,})\{glue:figure\}[ \t]*\S+[ \t]*\n(.*?)^\1[ \t]*$", re.M | re.S)


def lab_glue_figures(text: str) -> list[tuple[str, str]]:
    """``(name, caption)`` of each ``{glue:figure}`` in a lab's markdown (how a lab numbers a js_animation player: the
    cell glues the player's HTML, the markdown pastes it as a figure); ``""`` for a missing name or caption."""
    found = []
    for match in GLUE_FIGURE.finditer(text):
        body = match.group(2).splitlines()
        options = [line for line in body if re.match(r"^:\w+:", line)]
        name = next((line.split(":", 2)[2].strip() for line in options if line.startswith(":name:")), "")
        found.append((name, " ".join(line for line in body if line not in options).strip()))
    return found


def lab_figure_problems(name: str, cells: list[dict]) -> list[str]:
    """A lab's own numbered figures (cell metadata ``mystnb.figure``, or a ``{glue:figure}`` in its text for a player): each named ``fig-lab-<its chapter>-...``, with a
    caption, referred to with {numref} in the lab's text; every {numref} to a lab figure names one of this lab's; no
    figure cell whose output is removed (it would be an empty numbered figure)."""
    problems, names = [], []
    chapter = name[:4]
    for i, cell in enumerate(cells):
        figure = cell.get("metadata", {}).get("mystnb", {}).get("figure")
        if figure is None:
            continue
        fig_name, caption = figure.get("name", ""), str(figure.get("caption", "")).strip()
        match = LAB_FIGURE_NAME.match(fig_name)
        if not match or match.group(1) != chapter:
            problems.append(f"cell {i}: figure name {fig_name!r} is not fig-lab-{chapter}-...")
        if not caption:
            problems.append(f"cell {i}: figure {fig_name!r} has no caption")
        if {"remove-output", "remove-cell"} & set(cell["metadata"].get("tags", [])):
            problems.append(f"cell {i}: figure {fig_name!r} is in a cell whose output is removed")
        names.append(fig_name)
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    for fig_name, caption in lab_glue_figures(text):  # a player (HTML) glued by the lab and pasted as a figure
        match = LAB_FIGURE_NAME.match(fig_name)
        if not match or match.group(1) != chapter:
            problems.append(f"{{glue:figure}}: figure name {fig_name!r} is not fig-lab-{chapter}-...")
        if not caption:
            problems.append(f"{{glue:figure}}: figure {fig_name!r} has no caption")
        names.append(fig_name)
    referred = set(LAB_NUMREF.findall(text))
    problems += [f"figure {n!r} is named twice" for n in sorted({n for n in names if names.count(n) > 1})]
    problems += [f"figure {n!r} is never referred to with {{numref}}" for n in names if n not in referred]
    problems += [f"{{numref}}`{n}` names no figure of this lab" for n in sorted(referred - set(names))]
    return problems


@pytest.mark.parametrize("name", LABS)
def test_lab_figures_are_named_captioned_and_referred_to(name):
    assert lab_figure_problems(name, _cells(name)) == []


def chapter_figures_of_labs() -> dict[tuple[str, str], str]:
    """``{(lab, glue key): figure name}`` of every ``{glue:figure}`` a page of ``book/`` pastes from a lab."""
    found = {}
    for page in sorted((ROOT / "book").glob("*.md")):
        for m in re.finditer(r"```\{glue:figure\} (\S+)\n:doc: \.\./notebooks/(\S+)\.ipynb\n:name: (\S+)", page.read_text()):
            found[(m[2], m[1])] = m[3]
    return found


def repeated_figure_problems(name: str, cells: list[dict], chapter_figures: dict[tuple[str, str], str]) -> list[str]:
    """A lab figure that is the very figure a chapter shows (its cell glues the key the chapter pastes) carries a
    second number; its caption must say so by naming the chapter's figure with {numref} (issue 33: "the chapter's
    Figure X, recomputed here")."""
    problems = []
    for i, cell in enumerate(cells):
        figure = cell.get("metadata", {}).get("mystnb", {}).get("figure")
        if cell["cell_type"] != "code" or figure is None:
            continue
        for key in re.findall(r"glue\(\s*f?[\"']([^\"']+)[\"']", "".join(cell["source"])):
            chapter_name = chapter_figures.get((name, key))
            if chapter_name and f"{{numref}}`{chapter_name}`" not in str(figure.get("caption", "")):
                problems.append(f"cell {i}: figure {figure.get('name')!r} is the book's {chapter_name!r}; its caption must "
                                f"begin \"The chapter's {{numref}}`{chapter_name}`, recomputed here.\"")
    return problems


@pytest.mark.parametrize("name", LABS)
def test_a_lab_figure_a_chapter_shows_names_the_chapters_figure(name):
    assert repeated_figure_problems(name, _cells(name), chapter_figures_of_labs()) == []


def test_the_repeated_figure_rule_sees_a_caption_that_does_not_name_the_chapters_figure():
    figures = chapter_figures_of_labs()
    assert ("ch01_geometry_lab", "ch01-circle") in figures and len(figures) >= 40
    cells = _cells("ch01_geometry_lab")
    circle = next(c for c in cells if c.get("metadata", {}).get("mystnb", {}).get("figure", {}).get("name") == "fig-lab-ch01-circle")
    circle["metadata"]["mystnb"]["figure"]["caption"] = "600 random inputs of R^3 and their LayerNorm outputs."
    (problem,) = repeated_figure_problems("ch01_geometry_lab", cells, figures)
    assert "fig-ch01-circle" in problem


def test_lab_figure_rules_see_a_bad_name_a_missing_caption_and_a_missing_reference():
    cells = _cells("ch02_breaking_the_linear_bound")
    assert lab_figure_problems("ch02_breaking_the_linear_bound", cells) == []
    figures = [c for c in cells if "mystnb" in c.get("metadata", {})]
    figures[0]["metadata"]["mystnb"]["figure"]["name"] = "fig-lab-ch03-xor"
    figures[1]["metadata"]["mystnb"]["figure"]["caption"] = " "
    figures[2]["metadata"]["tags"] = ["remove-output"]
    problems = lab_figure_problems("ch02_breaking_the_linear_bound", cells)
    assert [p.split(":")[-1].strip() for p in problems[:3]] == [
        "figure name 'fig-lab-ch03-xor' is not fig-lab-ch02-...", f"figure {figures[1]['metadata']['mystnb']['figure']['name']!r} has no caption",
        f"figure {figures[2]['metadata']['mystnb']['figure']['name']!r} is in a cell whose output is removed"], problems
    assert "figure 'fig-lab-ch03-xor' is never referred to with {numref}" in problems, problems
    assert "{numref}`fig-lab-ch02-xor` names no figure of this lab" in problems, problems


def code_cell_sources(cells: list[dict]) -> list[tuple[int, str]]:
    """``(index, Python source)`` of each code cell, without its IPython magics and shell lines (``%``, ``!``)."""
    return [(i, "\n".join(l for l in "".join(cell["source"]).split("\n") if not l.lstrip().startswith(("%", "!"))))
            for i, cell in enumerate(cells) if cell["cell_type"] == "code"]


def call_nodes(cells: list[dict]):
    """``(index, source, node)`` for every function call in the lab's code cells (:func:`code_cell_sources`)."""
    for i, source in code_cell_sources(cells):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call):
                yield i, source, node


def backticked_comparison_texts(cells: list[dict]) -> list[str]:
    """The string parts of each ``compare(...)`` call in a lab's code that hold a backtick: the lab page shows a
    comparison's claim and reason as text with its ``$...$`` typeset, so a Markdown backtick would show as itself."""
    found = []
    for i, _, node in call_nodes(cells):
        if getattr(node.func, "id", getattr(node.func, "attr", None)) != "compare":
            continue
        for part in ast.walk(node):
            if isinstance(part, ast.Constant) and isinstance(part.value, str) and "`" in part.value:
                found.append(f"cell {i}: {part.value[:80]!r}")
    return found


@pytest.mark.parametrize("name", LABS)
def test_lab_comparisons_write_no_markdown_backticks(name):
    assert backticked_comparison_texts(_cells(name)) == [], "write code as text or $...$ math: the page shows backticks raw"


def test_the_backtick_rule_sees_a_backticked_claim():
    cell = {"cell_type": "code", "metadata": {}, "source": ["compare('k', f\"the printout `beta` of {1}\", reason='ok')"]}
    assert backticked_comparison_texts([cell]) == ["cell 0: 'the printout `beta` of '"]


BUILD_CHECKS = re.compile(r"\b(legend_overlap_problems|math_text_problems|readability_problems|crowded_text_problems"
                          r"|text_overlap_problems|MIN_FONT_PT)\b")
HIDDEN_INPUT = {"hide-input", "remove-input", "hide-cell", "remove-cell"}


def shown_build_checks(cells: list[dict]) -> list[str]:
    """Code cells after the opening one whose code a reader sees unfolded and which use the build's own figure checks
    (``legend_overlap_problems``, ``math_text_problems``, ``readability_problems``, ``MIN_FONT_PT``): the book's
    quality machinery, not the experiment; such a cell is tagged hide-input (or its check moves to a hidden cell)."""
    code = [(i, c) for i, c in enumerate(cells) if c["cell_type"] == "code"]
    return [f"cell {i}: {sorted(set(BUILD_CHECKS.findall(''.join(c['source']))))}" for i, c in code[1:]
            if BUILD_CHECKS.search("".join(c["source"])) and not HIDDEN_INPUT & set(c.get("metadata", {}).get("tags", []))]


@pytest.mark.parametrize("name", LABS)
def test_lab_shows_no_build_figure_checks(name):
    assert shown_build_checks(_cells(name)) == [], "tag the cell hide-input: a reader should not read the build's checks"


def test_the_build_check_rule_sees_an_unfolded_assert():
    cells = _cells("ch05_hessian_lab")
    assert shown_build_checks(cells) == []
    figure = next(c for c in cells if "legend_overlap_problems(fig)" in "".join(c["source"]))
    figure["metadata"]["tags"] = []
    assert len(shown_build_checks(cells)) == 1


def test_lab_figure_rules_see_a_glued_player_without_caption_or_reference():
    """The js_animation players are numbered figures too (issue 33, the reader's page: they had no number or caption):
    a {glue:figure} in a lab's text counts as its figure, held to the same rules."""
    cells = _cells("ch01_geometry_lab")
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    players = [f for f in lab_glue_figures(text) if f[0].endswith("-player")]
    assert [n for n, _ in players] == ["fig-lab-ch01-stretch-player", "fig-lab-ch01-fold-player"]
    assert all(caption.startswith(("Stretching", "Folding")) for _, caption in players)
    bare = {"cell_type": "markdown", "metadata": {}, "source": ["```{glue:figure} ch01-x\n:name: fig-lab-ch01-x\n```\n"]}
    problems = lab_figure_problems("ch01_geometry_lab", cells + [bare])
    assert problems == ["{glue:figure}: figure 'fig-lab-ch01-x' has no caption",
                        "figure 'fig-lab-ch01-x' is never referred to with {numref}"], problems


def test_every_player_of_a_lab_is_a_numbered_figure():
    """Every cell that makes a js_animation or point-cloud player glues it (display=False) for a {glue:figure} of the
    lab's text, rather than displaying it bare (an unnumbered, uncaptioned picture)."""
    for name in LABS:
        cells = _cells(name)
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        pasted = {m.group(0).split("}", 1)[1].split()[0] for m in GLUE_FIGURE.finditer(text)}
        for i, cell in enumerate(cells):
            source = "".join(cell["source"])
            if cell["cell_type"] != "code" or not re.search(r"\b(js_animation|point_cloud_animation|player)\(", source):
                continue
            if re.search(r"def (js_animation|point_cloud_animation|player)\(", source) and "glue(" not in source:
                continue
            assert "display(HTML(" not in source and "display(player(" not in source, f"{name} cell {i}: a bare player"
            keys = re.findall(r"glue\(\"([\w-]+-player)\"", source)
            assert keys and set(keys) <= pasted, f"{name} cell {i}: glue each player and paste it with {{glue:figure}}"


RUN_LOG = re.compile(r"MB of HTML|\bframes\b|\bskipped\b|LNBOOK_SCALE|LNBOOK_\w+_DIR|ci scale|paper scale")


def printed_run_logs(cells: list[dict]) -> list[str]:
    """``print(...)`` calls of a lab whose text is bookkeeping of the run, not a fact for the reader: sizes of the
    page's HTML, frame counts, what was skipped at this scale and which variables to set (the lab's text says once
    what a paper-scale run needs)."""
    found = []
    for i, source, node in call_nodes(cells):
        if getattr(node.func, "id", None) == "print":
            text = ast.get_source_segment(source, node) or ""
            if RUN_LOG.search(text):
                found.append(f"cell {i}: {text[:80]}")
    return found


@pytest.mark.parametrize("name", LABS)
def test_labs_print_no_run_logs(name):
    assert printed_run_logs(_cells(name)) == [], "a reader needs the fact in a sentence, not the run's bookkeeping"


def test_the_run_log_rule_sees_a_frame_count_and_a_skip():
    cells = [{"cell_type": "code", "metadata": {}, "source": ['print(f"{n} frames, {m:.2f} MB of HTML")\n',
                                                             'print("cifar10: needs LNBOOK_SCALE=paper; skipped")']}]
    assert len(printed_run_logs(cells)) == 2
