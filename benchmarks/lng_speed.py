"""Benchmark: LN-G forward+backward against LayerNorm at the same width and batch (issue 12).

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lng_speed.py [--batch 256] [--threads 1] [--json PATH]``
(about two minutes on one CPU core; on CUDA when a GPU is visible). ``--json PATH`` writes the results;
the committed run ``benchmarks/recorded/lng_speed_cpu.json`` is shown by chapter 5's drop-in lab.

For each width d in 256 .. 4096 and group counts G it times one forward and one backward pass of

* ``LN``: ``F.layer_norm`` over the width (the baseline, = ``nn.LayerNorm`` without affine);
* ``LN-G module``: :class:`lnbook.core.norms.GroupLayerNorm` (its fast path: on the CPU the fused kernel of
  :mod:`lnbook.core.group_norm_kernel`, on CUDA one reshape and ``F.layer_norm`` over the groups' axis);
* ``grouped F.layer_norm``: one reshape and ``F.layer_norm`` over the groups' axis (the module's path on
  CUDA, and its CPU path before the fused kernel);
* ``naive loop``: ``F.layer_norm`` on each group's slice, then ``torch.cat``;
* ``checked``: :func:`lnbook.core.norms.group_layer_norm` (the validating functional form);

and prints each one's time divided by LN's. On the CPU it also prints ``kernel G=1 / LN``, the fused
kernel run with one group (plain LN) against ``F.layer_norm``, so that a reader can tell how much of
LN-G's ratio is the grouping and how much is the kernel. Timings alternate between the variants, block by block,
and each ratio is the median over blocks of (variant time / LN time in the same block), so that
load from other processes cancels as possible. Goal from issue 12: LN-G module <= 1.1 x LN.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch
import torch.nn.functional as F

from lnbook.util.device import get_device
from lnbook.core import group_norm_kernel as fused_group_norm
from lnbook.core.norms import GroupLayerNorm, group_layer_norm

WIDTHS = (256, 512, 1024, 2048, 4096)
GROUPS = (2, 8, 32)


def naive_loop(x: torch.Tensor, groups: int, eps: float = 1e-5) -> torch.Tensor:
    m = x.shape[-1] // groups
    return torch.cat([F.layer_norm(x[..., i * m : (i + 1) * m], (m,), eps=eps) for i in range(groups)], dim=-1)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def fwd_bwd_seconds(fn, x: torch.Tensor, grad: torch.Tensor, reps: int) -> float:
    """Seconds per forward+backward pass, averaged over ``reps`` calls."""
    _sync(x.device)
    start = time.perf_counter()
    for _ in range(reps):
        x.grad = None
        fn(x).backward(grad)
    _sync(x.device)
    return (time.perf_counter() - start) / reps


def compare(width: int, groups: int, batch: int, device, blocks: int = 9, budget_s: float = 0.02) -> dict[str, float]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, width, generator=gen).to(device).requires_grad_(True)
    grad = torch.randn(batch, width, generator=gen).to(device)
    module = GroupLayerNorm(groups)
    variants = {
        "LN": lambda t: F.layer_norm(t, (width,)),
        "LN-G module": module,
        "grouped F.layer_norm": lambda t: F.layer_norm(t.unflatten(-1, (groups, -1)), (width // groups,)).flatten(-2),
        "naive loop": lambda t: naive_loop(t, groups),
        "checked": lambda t: group_layer_norm(t, groups),
    }
    if fused_group_norm.applies(x):
        variants["kernel G=1"] = lambda t: fused_group_norm.fused_group_layer_norm(t, 1)
    for fn in variants.values():  # warm up, and choose repetitions that take about budget_s
        fwd_bwd_seconds(fn, x, grad, 3)
    reps = max(3, int(budget_s / max(fwd_bwd_seconds(variants["LN"], x, grad, 5), 1e-7)))
    ratios: dict[str, list[float]] = {k: [] for k in variants if k != "LN"}
    base_times = []
    for _ in range(blocks):
        base = fwd_bwd_seconds(variants["LN"], x, grad, reps)
        base_times.append(base)
        for name in ratios:
            ratios[name].append(fwd_bwd_seconds(variants[name], x, grad, reps) / base)
    out = {"LN us": 1e6 * statistics.median(base_times)}
    out.update({name: statistics.median(r) for name, r in ratios.items()})
    if "kernel G=1" in ratios:
        out["LN-G / kernel G=1"] = statistics.median(a / b for a, b in zip(ratios["LN-G module"], ratios["kernel G=1"]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256, help="rows per pass (default 256)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    parser.add_argument("--widths", type=int, nargs="*", default=list(WIDTHS))
    parser.add_argument("--groups", type=int, nargs="*", default=list(GROUPS))
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = get_device()
    print(f"device {device.type}, torch {torch.__version__}, batch {args.batch}, {args.threads} CPU thread(s)")
    if device.type == "cpu":
        print(f"fused LN-G kernel: {fused_group_norm.kernel_status()}")
    columns = ("LN-G module", "grouped F.layer_norm", "naive loop", "checked", "kernel G=1", "LN-G / kernel G=1")
    print(f"{'width':>6} {'G':>4} {'m=d/G':>6} {'LN fwd+bwd':>11} " + " ".join(f"{c:>{max(len(c), 8)}}" for c in columns))
    worst = 0.0
    rows = []
    for d in args.widths:
        for g in args.groups:
            if d % g or d // g < 2:
                continue
            r = compare(d, g, args.batch, device)
            rows.append({"d": d, "groups": g, "m": d // g, **r})
            worst = max(worst, r["LN-G module"])
            cells = " ".join(f"{r[c]:{max(len(c), 8) - 1}.2f}x" if c in r else f"{'-':>{max(len(c), 8)}}" for c in columns)
            print(f"{d:6d} {g:4d} {d // g:6d} {r['LN us']:9.1f}us {cells}", flush=True)
    verdict = "meets" if worst <= 1.1 else "misses"
    print(f"worst LN-G module / LN ratio: {worst:.2f}x ({verdict} the 1.1x goal)")
    if args.json:
        record = {
            "device": device.type,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "batch": args.batch,
            "threads": args.threads,
            "kernel": fused_group_norm.kernel_status().split(":")[0] if device.type == "cpu" else None,
            "goal": 1.1,
            "worst_module_ratio": worst,
            "rows": rows,
        }
        with open(args.json, "w") as fh:
            json.dump(record, fh, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
