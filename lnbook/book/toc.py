"""The book's layout, read from ``_toc.yml``: its pages, its notebooks, its chapters and experiments.

Everything that walks the book (the notebook runner, ``python -m lnbook``, the theorem index and the
reproduction table) asks this module, so a chapter added to ``_toc.yml`` is picked up everywhere
with no other edit. Conventions:

* a **chapter id** is ``chNN`` (or ``appX`` for an appendix), the part of a file's stem before the
  first ``_``: ``book/ch04_isometry_at_initialisation.md`` and ``notebooks/ch04_isometry_lab.ipynb``
  both belong to ``ch04``;
* a **generated page** is a notebook whose metadata has ``lnbook.generated_from``: a list of globs
  (relative to the book's root) of the files it is made from. Such a page reads the book itself
  (the theorem index reads the chapters, the reproduction table reads ``results/``), so the runner
  executes it after every other notebook, and again whenever one of those files changes;
* an **experiment** is what ``python -m lnbook run`` accepts: a chapter id (all of its notebooks) or
  one notebook's stem. Generated pages are not experiments.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

__all__ = [
    "book_root",
    "toc_files",
    "toc_notebooks",
    "chapter_id",
    "chapter_docs",
    "generated_inputs",
    "Experiment",
    "experiments",
    "find_experiment",
]

_CHAPTER = re.compile(r"^(ch\d\d|app[a-z0-9]*)_")


def book_root(start: Path | None = None) -> Path:
    """The folder holding ``_toc.yml`` and ``_config.yml``: searched upwards from ``start`` (default:
    the working directory), then from this package's own location (an editable install)."""
    candidates = [Path.cwd() if start is None else Path(start)] + [Path(__file__).resolve().parent]
    for begin in candidates:
        begin = begin.resolve()
        for folder in (begin, *begin.parents):
            if (folder / "_toc.yml").is_file() and (folder / "_config.yml").is_file():
                return folder
    raise FileNotFoundError(
        "no book found: run this from inside the lnbook repository (the folder with _toc.yml), "
        "where `pip install -e .` installed it"
    )


def toc_files(root: Path) -> list[str]:
    """Every ``root:`` and ``file:`` entry of ``root/_toc.yml`` (no extension), in reading order."""
    toc = yaml.safe_load((Path(root) / "_toc.yml").read_text())
    found: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            for key in ("root", "file"):
                if isinstance(node.get(key), str):
                    found.append(node[key])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(toc)
    return found


def _metadata(path: Path) -> dict:
    return json.loads(path.read_text()).get("metadata", {}).get("lnbook", {})


def generated_inputs(path: Path) -> list[str] | None:
    """The globs a generated page is made from (its ``lnbook.generated_from`` metadata), else ``None``."""
    globs = _metadata(Path(path)).get("generated_from")
    if globs is None:
        return None
    if not isinstance(globs, list) or not all(isinstance(g, str) and g for g in globs):
        raise ValueError(f"{path}: metadata lnbook.generated_from must be a list of globs, got {globs!r}")
    return globs


def toc_notebooks(root: Path) -> list[Path]:
    """The ``.ipynb`` files named in the table of contents: the experiments in reading order, then
    the generated pages (which read the others' results), in reading order too."""
    root = Path(root)
    paths = [root / f"{name}.ipynb" for name in toc_files(root) if (root / f"{name}.ipynb").is_file()]
    generated = [p for p in paths if generated_inputs(p) is not None]
    return [p for p in paths if p not in generated] + generated


def chapter_id(name: str) -> str | None:
    """``ch04`` for ``ch04_isometry_lab`` (any path or stem), ``None`` for pages outside the chapters.

    >>> chapter_id("notebooks/ch04_isometry_lab.ipynb"), chapter_id("book/preface")
    ('ch04', None)
    """
    match = _CHAPTER.match(Path(name).name)
    return match.group(1) if match else None


def chapter_docs(root: Path) -> dict[str, str]:
    """``{chapter id: docname}`` of each chapter's prose page (the first toc entry under ``book/``
    with that id), e.g. ``{"ch04": "book/ch04_isometry_at_initialisation"}``."""
    docs: dict[str, str] = {}
    for name in toc_files(root):
        cid = chapter_id(name)
        if cid and name.startswith("book/") and cid not in docs:
            docs[cid] = name
    return docs


@dataclass(frozen=True)
class Experiment:
    """A chapter id or a notebook stem, and the notebooks it runs."""

    name: str
    notebooks: tuple[Path, ...] = field(default_factory=tuple)


def experiments(root: Path) -> list[Experiment]:
    """Every chapter with notebooks (``ch04``), then every notebook on its own (its stem)."""
    notebooks = [p for p in toc_notebooks(root) if generated_inputs(p) is None]
    chapters: dict[str, list[Path]] = {}
    for path in notebooks:
        cid = chapter_id(path.name)
        if cid:
            chapters.setdefault(cid, []).append(path)
    return [Experiment(cid, tuple(paths)) for cid, paths in chapters.items()] + [
        Experiment(p.stem, (p,)) for p in notebooks
    ]


def find_experiment(root: Path, name: str) -> Experiment:
    """The experiment called ``name`` (``all`` runs every notebook); a clear error for an unknown name."""
    found = experiments(root)
    if name == "all":
        return Experiment("all", tuple(p for p in toc_notebooks(root) if generated_inputs(p) is None))
    for exp in found:
        if exp.name == name:
            return exp
    names = ", ".join(e.name for e in found)
    raise ValueError(f"no experiment called {name!r}; `python -m lnbook list` shows them: all, {names}")
