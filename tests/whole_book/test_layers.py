"""The package's layers, read from the imports of every module (lazy imports inside functions included).

``util <- core <- ml <- topic packages <- notebook / book``: a module imports only from its own layer
or below; a topic package never imports another topic package (shared mathematics lives in
``core``); the module graph has no circle. A lab imports only ``lnbook.notebook``, ``core``, ``ml``,
``util`` and its own topic package (``test_lab_conventions.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import lnbook

PACKAGE = Path(lnbook.__file__).parent
LAYER = {"util": 0, "core": 1, "ml": 2, "notebook": 4, "book": 4, "__init__": 4, "__main__": 4}
TOPICS = ("separability", "capacity", "isometry", "group_ln", "ln_activation", "folding", "whitening")
LAYER.update({t: 3 for t in TOPICS})


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def lnbook_imports(path: Path) -> set[str]:
    """Every ``lnbook`` module a file imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.split(".")[0] == "lnbook":
            for alias in node.names:  # `from lnbook.core import norms` imports the module lnbook.core.norms
                sub = f"{node.module}.{alias.name}"
                found.add(sub if (PACKAGE.parent / (sub.replace(".", "/") + ".py")).exists() else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "lnbook")
    return found


def part(module: str) -> str:
    """The layer key of a module: its subpackage, or the top-level module's name."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return parts[1]


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
GRAPH = {m: {i for i in lnbook_imports(p) if i != m} for m, p in MODULES.items()}


def test_every_part_of_the_package_has_a_layer():
    assert {part(m) for m in MODULES} <= set(LAYER), sorted({part(m) for m in MODULES} - set(LAYER))


def test_imports_go_down_the_layers_only():
    wrong = sorted(
        f"{m} (layer {LAYER[part(m)]}) imports {i} (layer {LAYER[part(i)]})"
        for m, deps in GRAPH.items() for i in deps
        if part(i) in LAYER and LAYER[part(i)] > LAYER[part(m)] and part(m) != "__init__"
    )
    assert not wrong, "\n".join(wrong)


def test_topic_packages_do_not_import_each_other():
    wrong = sorted(f"{m} imports {i}" for m, deps in GRAPH.items() for i in deps
                   if part(m) in TOPICS and part(i) in TOPICS and part(i) != part(m))
    assert not wrong, "shared mathematics belongs in lnbook.core:\n" + "\n".join(wrong)


def test_the_top_level_package_imports_only_util():
    assert {part(i) for i in GRAPH["lnbook"]} <= {"util"}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` as a list of nodes, or None (depth-first search)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_circle():
    # a package's __init__ imports its modules by design; the circle that matters is between modules
    modules = {m: {i for i in deps if i in MODULES and not MODULES[i].name == "__init__.py"}
               for m, deps in GRAPH.items() if MODULES[m].name != "__init__.py"}
    cycle = find_cycle(modules)
    assert cycle is None, " -> ".join(cycle)


def test_the_checks_catch_a_planted_violation():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert LAYER[part("lnbook.capacity.circle")] > LAYER[part("lnbook.core.norms")]
    assert part("lnbook.folding.fold") in TOPICS and part("lnbook.capacity.vc") != part("lnbook.folding.fold")
