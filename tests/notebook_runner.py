"""Execute the book's notebooks exactly as ``jupyter-book build`` would, and feed its cache.

A notebook executed here is stored in the book's jupyter-cache (``_build/.jupyter_cache``) under
the same key that myst-nb computes, so the strict book build that follows finds every notebook
cached and executes nothing a second time.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import yaml
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn
from jupyter_cache.executors.utils import single_nb_execution

ROOT = Path(__file__).resolve().parents[1]
CACHE_DIR = ROOT / "_build" / ".jupyter_cache"
# per cell; at ci scale no cell needs a minute, so a hung kernel fails the test instead of CI
CELL_TIMEOUT_S = 600 if os.environ.get("LNBOOK_SCALE", "ci") == "ci" else 3600


class NotebookFailed(AssertionError):
    """A cell of a notebook raised; the message carries the notebook path and the traceback."""


def toc_files(toc_path: Path = ROOT / "_toc.yml") -> list[str]:
    """Every ``file:`` entry of the table of contents, in reading order."""
    toc = yaml.safe_load(toc_path.read_text())
    found: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            for key in ("root", "file"):
                if key in node and isinstance(node[key], str):
                    found.append(node[key])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(toc)
    return found


def toc_notebooks(root: Path = ROOT) -> list[Path]:
    """The ``.ipynb`` files that the table of contents names."""
    return [root / f"{name}.ipynb" for name in toc_files(root / "_toc.yml") if (root / f"{name}.ipynb").exists()]


def image_outputs(nb) -> int:
    """How many image outputs (PNG or SVG) an executed notebook has, glued ones included."""
    return sum(
        1
        for cell in nb.cells
        for out in cell.get("outputs", [])
        if any(k in out.get("data", {}) for k in ("image/png", "image/svg+xml"))
    )


def execute_notebook(path: Path, cache_dir: Path | None = CACHE_DIR, timeout: int = CELL_TIMEOUT_S):
    """Execute ``path`` in its own folder; raise :class:`NotebookFailed` on the first failing cell.

    On success the executed notebook is stored in ``cache_dir`` (unless it is ``None``) and
    ``(notebook, seconds)`` is returned.
    """
    path = Path(path).resolve()
    nb = nbformat.read(path, as_version=4)
    os.environ.pop("MPLBACKEND", None)  # kernels inherit it; the inline backend must stay the default
    result = single_nb_execution(nb, cwd=str(path.parent), allow_errors=False, timeout=timeout, meta_override=True)
    if result.err is not None:
        raise NotebookFailed(f"{path.relative_to(path.parents[1])} failed:\n{result.exc_string}")
    if cache_dir is not None:
        cache = get_cache(str(cache_dir))
        cache.cache_notebook_bundle(
            CacheBundleIn(nb, str(path), data={"execution_seconds": result.time}),
            check_validity=False,
            overwrite=True,
        )
    return nb, result.time


def text_outputs(nb) -> str:
    """All stream and plain-text outputs of an executed notebook, concatenated."""
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                parts.append(out.get("text", ""))
            elif "data" in out and "text/plain" in out["data"]:
                parts.append(out["data"]["text/plain"])
    return "\n".join(parts)
