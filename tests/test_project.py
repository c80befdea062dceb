"""Project-level checks: notebooks carry no outputs, the conda file mirrors pyproject, CI runs at ci scale."""

from __future__ import annotations

import json
import os
import tomllib

import pytest
import yaml

from notebook_runner import ROOT, NotebookFailed, execute_notebook, toc_files, toc_notebooks

from lnbook.scale import current_scale


def test_notebooks_have_no_committed_outputs():
    offenders = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count")):
                offenders.append(path.name)
                break
    assert not offenders, f"notebooks committed with outputs (clear them before committing): {offenders}"


def test_every_notebook_is_in_the_toc():
    in_toc = {p.name for p in toc_notebooks()}
    on_disk = {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert on_disk == in_toc, f"notebooks not in _toc.yml: {sorted(on_disk - in_toc)}"


def test_every_toc_entry_exists():
    missing = [f for f in toc_files() if not any((ROOT / f"{f}{ext}").exists() for ext in (".md", ".ipynb"))]
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
def test_ci_runs_at_ci_scale():
    assert current_scale() == "ci", "CI must run at LNBOOK_SCALE=ci"


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
