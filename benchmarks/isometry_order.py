"""Benchmark: the paper-scale configuration of the order experiment (chapter 4, experiment 2), on the CPU.

n = 10 samples, d = 1000, 30 layers, 10 repeats with their own inputs of degeneracy 100 (the official validation
configuration, ``lnbook.isometry.lab.OFFICIAL``), ReLU, LayerNorm, both orders (act_norm, norm_act).
Baseline: the reference sampler (a fresh d x d Gaussian W per layer and repeat, Python loop over repeats),
in float32 as in the official code and in float64. Fast: W X drawn as Z L^T (d x n Gaussians per layer),
batched over repeats, float64. Same law (see the chapter and tests/isometry/test_mlp_at_init.py). Prints the times
and the speed-up ratios in one run:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/isometry_order.py [--json PATH]

``--json PATH`` also writes the times, ratios and final isometries; the committed run is
``benchmarks/recorded/isometry_order_cpu.json`` (one thread), cited by chapter 4.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from lnbook.isometry.lab import OFFICIAL
from lnbook.isometry.mlp_at_init import make_inputs, simulate


def run(method: str, dtype, X0, depth: int, seed: int) -> tuple[float, list[float]]:
    gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    finals = []
    for order in ("act_norm", "norm_act"):
        res = simulate("relu", X0.to(dtype), depth, order=order, norm="layer", method=method, generator=gen)
        finals.append(float(res.isometry[:, -1].mean()))
    return time.perf_counter() - start, finals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=OFFICIAL["n"])
    parser.add_argument("--d", type=int, default=OFFICIAL["d"])
    parser.add_argument("--depth", type=int, default=OFFICIAL["depth"])
    parser.add_argument("--repeats", type=int, default=OFFICIAL["repeats"])
    parser.add_argument("--fast-rounds", type=int, default=5, help="timed rounds of the fast sampler (best is kept)")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args()
    X0 = make_inputs(args.n, args.d, repeats=args.repeats, degeneracy=OFFICIAL["degeneracy"],
                     generator=torch.Generator().manual_seed(0))
    print(f"config: n={args.n} d={args.d} depth={args.depth} repeats={args.repeats}, relu, LN, both orders; "
          f"torch threads={torch.get_num_threads()}")
    simulate("relu", X0[:1, :64], 2)  # warm-up
    t_ref32, f_ref32 = run("reference", torch.float32, X0, args.depth, 1)
    t_ref64, f_ref64 = run("reference", torch.float64, X0, args.depth, 2)
    t_fast = min(run("fast", torch.float64, X0, args.depth, 3 + r)[0] for r in range(args.fast_rounds))
    _, f_fast = run("fast", torch.float64, X0, args.depth, 3)
    per_cfg = lambda t: t / 2  # noqa: E731  (two orders = two configurations)
    print(f"reference float32: {t_ref32:7.3f} s  ({per_cfg(t_ref32):.3f} s per configuration)  final isometry {f_ref32}")
    print(f"reference float64: {t_ref64:7.3f} s  ({per_cfg(t_ref64):.3f} s per configuration)  final isometry {f_ref64}")
    print(f"fast      float64: {t_fast:7.3f} s  ({per_cfg(t_fast):.3f} s per configuration)  final isometry {f_fast}")
    print(f"speed-up vs reference float32: {t_ref32 / t_fast:6.1f}x   vs reference float64: {t_ref64 / t_fast:6.1f}x"
          "   (goal: >= 5x)")
    if args.json:
        record = {
            "device": "cpu", "torch": torch.__version__, "python": platform.python_version(),
            "threads": torch.get_num_threads(),
            "config": {"n": args.n, "d": args.d, "depth": args.depth, "repeats": args.repeats,
                       "degeneracy": OFFICIAL["degeneracy"], "activation": "relu", "norm": "layer",
                       "orders": ["act_norm", "norm_act"]},
            "statistic": "wall time of both orders; fast sampler: best of --fast-rounds rounds",
            "fast_rounds": args.fast_rounds,
            "seconds": {"reference_float32": t_ref32, "reference_float64": t_ref64, "fast_float64": t_fast},
            "speedup_vs_reference_float32": t_ref32 / t_fast,
            "speedup_vs_reference_float64": t_ref64 / t_fast,
            "final_isometry": {"reference_float32": f_ref32, "reference_float64": f_ref64, "fast_float64": f_fast},
        }
        with open(args.json, "w") as fh:
            json.dump(record, fh, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
