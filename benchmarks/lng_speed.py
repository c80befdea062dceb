"""Benchmark: LN-G forward+backward against the same kernel with one group and against ``nn.LayerNorm``.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/lng_speed.py [--threads 1] [--blocks 15] [--json PATH]``
(a few minutes on one CPU core; on CUDA when a GPU is visible). ``--json PATH`` writes the results; the
committed run ``benchmarks/recorded/lng_speed_cpu.json`` is shown by chapter 5's drop-in lab.

Every variant has the per-feature affine map that the book's networks use. For each (batch, width, G) it
times one forward and one backward pass of

* ``LN-G``: :class:`lnbook.core.norms.GroupLayerNorm` with ``affine=True`` (on the CPU the operator
  ``torch.ops.lnbook.group_layer_norm``, the fused kernel with the affine map inside);
* ``kernel G=1``: the same module and operator with one group (plain LN): the fair baseline, since it
  differs from LN-G only in the grouping;
* ``nn.LayerNorm``: PyTorch's LayerNorm of the whole width (ATen's kernel);
* ``decomposition``: ``F.layer_norm`` over the grouped view, then ``* weight + bias`` (what the module runs
  under ``torch.func`` transforms and on CUDA).

The variants run interleaved: in each of ``--blocks`` blocks every variant is timed once, in an order that
rotates from block to block and is reversed in every other block (so every variant follows every other
equally often), each timed run preceded by one untimed call of the same variant (so that a variant's
allocations and page faults are not charged to the one after it); each printed ratio is the **median over
blocks** of the ratio of two times measured in the same block, so that load from other processes cancels
as far as it can, and the quartiles of the per-block LN-G / kernel G=1 ratios show the spread. Goal (issue 22):
LN-G / kernel G=1 <= 1.1 at every benchmarked size.

**Allocator.** With glibc's default settings a tensor of 128 KiB or more is a fresh ``mmap`` whose pages fault
in on first touch, and freed heap memory is trimmed back to the system: at width 1024 and above (1 MiB per
tensor at batch 256) the time of a pass then depends on what the previous variant left in the heap, and the
per-block ratios scattered from 0.5 to 1.5 between runs. The benchmark therefore runs every variant under the
same settings, :data:`ALLOCATOR` (no ``mmap`` below 256 MiB, no trimming): it re-executes itself with them
unless ``--default-allocator`` is given, and records them in the JSON. The settings are identical for every
variant, so they favour none; chapter 7's benchmark measures the allocator's own effect.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch
from torch import nn

from lnbook.core import group_norm_kernel as fused_group_norm
from lnbook.core.norms import GroupLayerNorm
from lnbook.util.device import get_device

# (batch, width): the labs' size (batch 128, width 128) and wider layers at batch 256
SHAPES = ((128, 128), (256, 256), (256, 1024), (256, 4096))
GROUPS = (2, 8, 32, 64)
GOAL = 1.1
#: glibc malloc settings the benchmark runs under (see the module docstring), read by glibc at process start.
ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": "268435456", "MALLOC_TRIM_THRESHOLD_": "1073741824",
             "MALLOC_TOP_PAD_": "268435456"}


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def fwd_bwd_seconds(fn, x: torch.Tensor, grad: torch.Tensor, reps: int) -> float:
    """Seconds per forward+backward pass, averaged over ``reps`` calls: this process's CPU time on the CPU
    (one thread: time spent waiting for a core shared with other processes does not count), wall-clock
    time on CUDA."""
    clock = time.perf_counter if x.device.type == "cuda" else time.process_time
    _sync(x.device)
    start = clock()
    for _ in range(reps):
        x.grad = None
        fn(x).backward(grad)
    _sync(x.device)
    return (clock() - start) / reps


def variants(width: int, groups: int, device) -> dict:
    lng = GroupLayerNorm(groups, affine=True, width=width).to(device)
    one = GroupLayerNorm(1, affine=True, width=width).to(device)
    ln = nn.LayerNorm(width).to(device)
    w, b = lng.weight, lng.bias
    return {
        "LN-G": lng,
        "kernel G=1": one,
        "nn.LayerNorm": ln,
        "decomposition": lambda t: fused_group_norm.reference_group_layer_norm(t, groups, 1e-5, w, b),
    }


def compare(batch: int, width: int, groups: int, device, blocks: int = 15, budget_s: float = 0.03) -> dict:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, width, generator=gen).to(device).requires_grad_(True)
    grad = torch.randn(batch, width, generator=gen).to(device)
    fns = variants(width, groups, device)
    for fn in fns.values():  # warm up
        fwd_bwd_seconds(fn, x, grad, 3)
    reps = max(3, int(budget_s / max(fwd_bwd_seconds(fns["LN-G"], x, grad, 5), 1e-7)))
    names = list(fns)
    times: dict[str, list[float]] = {k: [] for k in names}
    for block in range(blocks):
        order = names[block % len(names):] + names[:block % len(names)]
        if block % 2:  # every variant follows every other one equally often
            order.reverse()
        for name in order:
            fwd_bwd_seconds(fns[name], x, grad, 1)  # untimed: its own buffers and caches, not its predecessor's
            times[name].append(fwd_bwd_seconds(fns[name], x, grad, reps))

    def ratios(a: str, b: str) -> list[float]:
        return [p / q for p, q in zip(times[a], times[b])]

    row = {"LN-G us": 1e6 * statistics.median(times["LN-G"])}
    for a, b in (("LN-G", "kernel G=1"), ("LN-G", "nn.LayerNorm"), ("kernel G=1", "nn.LayerNorm"),
                 ("decomposition", "nn.LayerNorm")):
        row[f"{a} / {b}"] = statistics.median(ratios(a, b))
    quartiles = statistics.quantiles(ratios("LN-G", "kernel G=1"), n=4)
    row["LN-G / kernel G=1 quartiles"] = [quartiles[0], quartiles[2]]
    return row


COLUMNS = ("LN-G / kernel G=1", "LN-G / nn.LayerNorm", "kernel G=1 / nn.LayerNorm", "decomposition / nn.LayerNorm")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    parser.add_argument("--blocks", type=int, default=15, help="interleaved repeats per size (default 15)")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    parser.add_argument("--default-allocator", action="store_true",
                        help="keep glibc's default malloc settings (timings at width >= 1024 then scatter)")
    args = parser.parse_args()
    if not args.default_allocator and any(os.environ.get(k) != v for k, v in ALLOCATOR.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **ALLOCATOR})
    allocator = "glibc defaults" if args.default_allocator else " ".join(f"{k}={v}" for k, v in ALLOCATOR.items())
    torch.set_num_threads(args.threads)
    device = get_device()
    print(f"device {device.type}, torch {torch.__version__}, {args.threads} CPU thread(s), {args.blocks} blocks")
    print(f"allocator: {allocator}")
    if device.type == "cpu":
        print(f"fused LN-G kernel: {fused_group_norm.kernel_status()}")
    print(f"{'batch':>5} {'width':>5} {'G':>3} {'m':>4} {'LN-G fwd+bwd':>12} " + " ".join(f"{c:>{len(c)}}" for c in COLUMNS))
    rows = []
    for batch, d in SHAPES:
        for g in GROUPS:
            if d % g or d // g < 2:
                continue
            r = compare(batch, d, g, device, blocks=args.blocks)
            rows.append({"batch": batch, "d": d, "groups": g, "m": d // g, **r})
            cells = " ".join(f"{r[c]:{len(c) - 1}.2f}x" for c in COLUMNS)
            q1, q3 = r["LN-G / kernel G=1 quartiles"]
            print(f"{batch:5d} {d:5d} {g:3d} {d // g:4d} {r['LN-G us']:10.1f}us {cells}  (G=1 ratio IQR {q1:.2f}-{q3:.2f})",
                  flush=True)
    worst = max(r["LN-G / kernel G=1"] for r in rows)
    worst_ln = max(r["LN-G / nn.LayerNorm"] for r in rows)
    missed = [f"batch {r['batch']} width {r['d']} G={r['groups']}" for r in rows if r["LN-G / kernel G=1"] > GOAL]
    print(f"worst LN-G / kernel G=1: {worst:.2f}x ({'meets' if not missed else 'misses'} the {GOAL}x goal"
          f"{': ' + ', '.join(missed) if missed else ''}); worst LN-G / nn.LayerNorm: {worst_ln:.2f}x")
    if args.json:
        record = {
            "device": device.type,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "threads": args.threads,
            "blocks": args.blocks,
            "statistic": "median over interleaved blocks of the ratio of times in the same block; quartiles of "
                         "the per-block LN-G / kernel G=1 ratios",
            "protocol": "order rotated and reversed in alternate blocks; one untimed call of each variant "
                        "right before its timed repeats",
            "affine": True,
            "allocator": allocator,
            "kernel": fused_group_norm.kernel_status().split(":")[0] if device.type == "cpu" else None,
            "goal": GOAL,
            "worst_vs_one_group": worst,
            "worst_vs_layer_norm": worst_ln,
            "missed": missed,
            "rows": rows,
        }
        with open(args.json, "w") as fh:
            json.dump(record, fh, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
