"""Regenerate chapter 6's paper-scale CPU record, ``results/paper/recorded/ch06_cpu_runs.json``.

Run: ``OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/ch06_cpu_runs.py --part width3`` (and ``--part sphere``,
``--part pln_eps``, ``--part ln_mlp``; the parts may run at once in separate processes, each rewriting only its own part). Each part is the
computation its lab makes at paper scale (:mod:`lnbook.ln_activation.paper_runs`, sizes ``PAPER_SIZES``); ``--seeds``
runs fewer seeds and ``--eps`` fewer eps of
the pln_eps grid (the record says which). The record keeps the command, the commit, the date, torch's version, its
thread count, the device and the sizes beside the per-seed numbers; the labs glue what it says at every scale.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

from lnbook.ln_activation.paper_runs import (PAPER_SIZES, PARTS, run_ln_mlp, run_pln_eps, run_sphere, run_width3,
                                             store_part)

ROOT = Path(__file__).resolve().parents[1]


def _commit() -> str:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    # the record itself is not code: a part stored by an earlier run of this script leaves it modified
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                            ":(exclude)results/paper/recorded"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return head + (" (with uncommitted changes)" if dirty else "")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", required=True, choices=PARTS)
    parser.add_argument("--seeds", type=int, default=None, help="number of seeds, 0 .. n-1 (default: the lab's paper scale)")
    parser.add_argument("--eps", type=float, nargs="+", default=None,
                        help="pln_eps only: the eps to run, a part of the paper grid (default: the whole grid)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "paper", help="the paper-scale results folder")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sizes = dict(PAPER_SIZES[args.part])
    if args.seeds is not None:
        if args.seeds < 1:
            parser.error("--seeds must be at least 1")
        sizes["seeds"] = args.seeds
    if args.eps is not None:
        if args.part != "pln_eps" or not set(args.eps) <= set(sizes["eps_grid"]):
            parser.error(f"--eps is for --part pln_eps and takes eps of the paper grid {sizes.get('eps_grid')}")
        sizes["eps_grid"] = tuple(e for e in sizes["eps_grid"] if e in args.eps)
    seeds = range(sizes["seeds"])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    commit = _commit()  # the code that runs: read before the run, not after it
    start = time.time()
    if args.part == "width3":
        result = run_width3(seeds, steps=sizes["steps"], grid=sizes["grid"], device=device)
    elif args.part == "sphere":
        result = run_sphere(seeds, steps=sizes["steps"], n=sizes["n"], device=device)
    elif args.part == "ln_mlp":
        result = run_ln_mlp(seeds, steps=sizes["steps"], device=device)
    else:
        result = run_pln_eps(seeds, steps=sizes["steps"], eps_grid=sizes["eps_grid"], device=device)
    provenance = {
        "command": "OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/ch06_cpu_runs.py " + " ".join(sys.argv[1:]),
        "commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": str(device) + ("" if device.type == "cuda" else f" ({platform.processor() or platform.machine()})"),
        "python": platform.python_version(),
        "sizes": sizes,
        "wall_seconds": round(time.time() - start, 1),
    }
    path = store_part(args.out, args.part, result, provenance)
    print(f"{args.part}: stored in {path} after {provenance['wall_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
