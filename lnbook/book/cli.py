"""``python -m lnbook``: run the book's experiments at either scale, and the steps of ``make book``.

::

    python -m lnbook list                          the experiments: chapters (ch04) and notebook stems
    python -m lnbook run ch04 [--scale paper]      run an experiment (or `all`) through the notebook runner
    python -m lnbook execute [--scale paper]       run every notebook not yet in the build's cache
    python -m lnbook assets                        fetch the offline JavaScript of the HTML book (npm)
    python -m lnbook check-site [--scale paper]    open every page of the built book in headless Chromium

``run`` shows a progress bar over the cells and what they print, records the comparisons in
``results/<scale>/`` and stores the executed notebooks in the scale's build cache, where the next
``make book [SCALE=paper]`` finds them. Exit status: 0 when every notebook ran and every verdict is
the one the book claims, 1 when a notebook failed, 2 for a usage error, 3 when the notebooks ran but a
verdict differs from the book's claim (the result is recorded all the same).
"""

from __future__ import annotations

import argparse
import os
import sys

from lnbook.util.scale import ENV_VAR as SCALE_ENV_VAR
from lnbook.util.scale import SCALES, current_scale

EXIT_FAILED, EXIT_USAGE, EXIT_MISMATCH = 1, 2, 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m lnbook",
        description="Run the book's experiments at either scale (ci or paper), and the steps of `make book`.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the experiments")
    run = sub.add_parser("run", help="run an experiment: a chapter id (ch04), a notebook stem, or all")
    run.add_argument("experiment")
    execute = sub.add_parser("execute", help="execute every notebook of the book that the cache lacks")
    check = sub.add_parser("check-site", help="open every page of the built book in headless Chromium")
    check.add_argument("--screenshots", default=None, help="folder for the screenshots (default: next to the site)")
    for p in (run, execute, check):
        p.add_argument("--scale", choices=SCALES, default=None, help="ci or paper (default: $LNBOOK_SCALE, else ci)")
    sub.add_parser("assets", help="fetch MathJax, RequireJS and the widget manager for the offline HTML")
    return parser


def _list(root) -> int:
    from lnbook.book.toc import experiments

    for exp in experiments(root):
        print(f"{exp.name:<40} " + " ".join(str(p.relative_to(root)) for p in exp.notebooks))
    return 0


def _report(runs) -> int:
    """Print the comparisons of ``runs`` and their mismatches; the exit status."""
    from lnbook.book.reproduction_table import verdict_counts

    comparisons = [c for r in runs for c in r.comparisons]
    for c in comparisons:
        print(f"  {c.key}: {c.line()}")
    counts = ", ".join(f"{n} {v}" for v, n in verdict_counts(comparisons).items())
    print(f"{len(runs)} notebook(s), {len(comparisons)} comparison(s): {counts}")
    mismatches = [line for r in runs for line in r.mismatches]
    for line in mismatches:
        print(line)
    return EXIT_MISMATCH if mismatches else 0


def run_experiment(root, name: str, scale: str, progress: bool = True, jobs: int | None = None) -> list:
    """What ``python -m lnbook run NAME --scale SCALE`` executes: every notebook of the experiment
    through :class:`lnbook.book.runner.ExperimentPool` (``jobs`` at a time, default
    :func:`lnbook.book.runner.notebook_jobs`; one notebook runs in this process with a progress bar)
    into the scale's cache; returns the executions in order. The notebook tests call this too, so CI
    runs every experiment through the command's own path (at ci scale). Raises
    :class:`lnbook.book.runner.NotebookFailed` on a failing cell."""
    from lnbook.book.runner import ExperimentPool, cache_dir
    from lnbook.book.toc import find_experiment

    exp = find_experiment(root, name)
    folder = cache_dir(root, scale)
    if progress:
        print(f"lnbook run {exp.name} --scale {scale}: {len(exp.notebooks)} notebook(s); cache {folder.relative_to(root)}")
    runs = []
    with ExperimentPool(exp.notebooks, folder, root, jobs=jobs) as pool:
        for path in exp.notebooks:
            run = pool.result(path, progress=progress)
            if progress:
                print(f"{path.relative_to(root)}: {run.seconds:.1f} s")
            runs.append(run)
    return runs


def _run(root, name: str, scale: str) -> int:
    from lnbook.book.runner import NotebookFailed

    try:
        runs = run_experiment(root, name, scale)
    except NotebookFailed as err:
        print(err, file=sys.stderr)
        return EXIT_FAILED
    return _report(runs)


def _execute(root, scale: str) -> int:
    from lnbook.book.runner import NotebookFailed, ensure_executed

    try:
        runs = ensure_executed(root, scale, progress=True)
    except NotebookFailed as err:
        print(err, file=sys.stderr)
        return EXIT_FAILED
    for run in runs:
        how = "cached" if run.from_cache else f"executed in {run.seconds:.1f} s"
        print(f"{run.path.relative_to(root)}: {how}")
    status = _report(runs)
    if status == EXIT_MISMATCH:  # the book still builds and its table shows the verdict
        print("warning: verdicts differ from the book's claims (the tests fail on them)", file=sys.stderr)
    return 0


def _check_site(root, scale: str, screenshots) -> int:
    from pathlib import Path

    from lnbook.book.site_check import BrowserMissing, check_site, site_dir

    site = site_dir(root, scale)
    try:
        report = check_site(site, screenshots=Path(screenshots) if screenshots else None, toc_root=root)
    except BrowserMissing as err:
        print(err, file=sys.stderr)
        return EXIT_FAILED
    print(report.summary())
    return 0 if report.ok else EXIT_FAILED


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from lnbook.book.toc import book_root

    try:
        root = book_root()
        scale = getattr(args, "scale", None) or current_scale()
        os.environ[SCALE_ENV_VAR] = scale
        if args.command == "list":
            return _list(root)
        if args.command == "run":
            return _run(root, args.experiment, scale)
        if args.command == "execute":
            return _execute(root, scale)
        if args.command == "check-site":
            return _check_site(root, scale, args.screenshots)
        from lnbook.book.assets import ensure_assets

        ensure_assets(root)
        return 0
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        print(f"python -m lnbook: {err}", file=sys.stderr)
        return EXIT_USAGE

