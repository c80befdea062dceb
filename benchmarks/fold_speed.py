"""Inference speed of LayerNorm against the folded RMSNorm (chapter 7), printed as ratios from one run.

Two measurements, each with PyTorch's eager kernels and (``--compile``) with ``torch.compile``:

1. **the norm alone**: ``F.layer_norm(x, w, b)`` against ``F.rms_norm(x, w) + b`` (affine kept) and
   ``F.rms_norm(x)`` (affine folded into the next layer), for ``x`` of shape ``(tokens, d)``;
2. **end to end**: the book's pre-LN ``TinyTransformer`` at several sizes against its folded copies
   (``fold_layernorms`` with ``affine="keep"`` and ``affine="fold"``), with the share of the
   original's time spent in LayerNorm (profiler) and the end-to-end speed-up that Amdahl's law
   predicts from it and the kernel speed-up.

Three more, printed as ratios in the same run:

3. **best kernel against best kernel**: for each norm the faster of its eager and compiled kernels, so
   that no compiled LayerNorm slower than eager LayerNorm serves as the baseline;
4. **the norms' share of the compiled model**, measured on the compiled model itself: the compiled
   model timed again with every norm replaced by the identity (``lnbook.folding.speed.without_norms``);
5. **the allocator at d >= 1024**: the eager norms timed in two fresh processes, with glibc's default
   ``mmap`` threshold and with ``MALLOC_MMAP_THRESHOLD_`` fixed at 16 MiB, meant to keep the temporaries of
   RMSNorm plus a bias add on the heap; it also switches off glibc's dynamic threshold and keeps the default trim
   threshold, so it does not isolate page faults (``lnbook.folding.speed.MMAP_THRESHOLD_ENV``; chapter 7).

The folded models are timed without the input-shape guard that ``fold_layernorms`` attaches (a Python
pre-hook that the original has not; ``lnbook.folding.speed.without_shape_guards``), and the guard is timed
alone (``guard_ms``); the committed runs in benchmarks/recorded/ were recorded so.

Speed-up = t_LN / t_RMS - 1 (0.10: 10% faster; negative: slower). Times are the median over
interleaved repeats (lnbook.folding.speed); on the CPU with one thread they are CPU times of the
calling thread (``--clock thread``, the default there), which leave out the time the process
waited for a core on a busy machine. Every table has an A/A control: the same LayerNorm (or the
same original model, deep-copied) timed as a separate candidate; its "speed-up" is the noise floor
of that run. Runs on CUDA when torch sees a GPU (``--device cpu`` forces
the CPU). ``--json PATH`` writes the results (the book's lab reads benchmarks/recorded/*.json).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/fold_speed.py --threads 1 --compile --json out.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import subprocess
import sys
import warnings

import torch
import torch.nn.functional as F

from lnbook.folding.fold import fold_layernorms
from lnbook.ml.models import TinyTransformer
from lnbook.folding.speed import (MMAP_THRESHOLD_ENV, ablation_share, best_kernels, guard_seconds, without_norms,
                                 without_shape_guards)
from lnbook.folding.speed import interleaved_median_times as _median_times
from lnbook.util.timing import amdahl_speedup, speedup


def median_times(fns, *, repeats, inner, warmup, device, clock):
    """Medians of interleaved repeats; CUDA work is synchronised inside each call."""
    if device.type == "cuda":
        fns = {k: (lambda f=f: (f(), torch.cuda.synchronize(device))) for k, f in fns.items()}
    return _median_times(fns, repeats=repeats, inner=inner, warmup=warmup, clock=clock)

SIZES = {  # name: (d_model, n_heads, n_layers, batch, tokens)
    "small": (128, 4, 2, 8, 128),
    "medium": (256, 4, 4, 8, 128),
    "large": (512, 8, 6, 4, 128),
}
KERNEL_WIDTHS = (128, 256, 512, 768, 1024, 2048)
ALLOCATOR_WIDTHS = (1024, 2048)


def norm_share(model, tokens) -> float:
    """Share of the model's self time spent in LayerNorm ops (torch.profiler, one call after warm-up)."""
    with torch.inference_mode():
        model(tokens)
        with torch.profiler.profile() as prof:
            model(tokens)
    events = prof.key_averages()
    total = sum(e.self_device_time_total if tokens.is_cuda else e.self_cpu_time_total for e in events)
    ln = sum(
        (e.self_device_time_total if tokens.is_cuda else e.self_cpu_time_total)
        for e in events
        if "layer_norm" in e.key
    )
    return ln / total if total else float("nan")


def kernels(device, repeats, compiled: bool, clock: str, widths=KERNEL_WIDTHS):
    rows = []
    for d in widths:
        g = torch.Generator().manual_seed(d)
        x = torch.randn(1024, d, generator=g).to(device)
        w, b = torch.randn(d, generator=g).to(device), torch.randn(d, generator=g).to(device)
        fns = {
            "layer_norm": lambda x=x, w=w, b=b, d=d: F.layer_norm(x, (d,), w, b, 1e-5),
            "layer_norm_again": lambda x=x, w=w, b=b, d=d: F.layer_norm(x, (d,), w, b, 1e-5),
            "rms_norm+bias": lambda x=x, w=w, b=b, d=d: F.rms_norm(x, (d,), w, 1e-5) + b,
            "rms_norm": lambda x=x, d=d: F.rms_norm(x, (d,), None, 1e-5),
        }
        if compiled:
            torch._dynamo.reset()
            fns = {k: torch.compile(f, dynamic=False) for k, f in fns.items()}
        with torch.inference_mode():
            t = median_times(fns, repeats=repeats, inner=20, warmup=3, device=device, clock=clock)
        rows.append({"d": d, "tokens": 1024, "compiled": compiled, **{f"{k}_us": v * 1e6 for k, v in t.items()},
                     "speedup_aa": speedup(t["layer_norm"], t["layer_norm_again"]),
                     "speedup_keep": speedup(t["layer_norm"], t["rms_norm+bias"]),
                     "speedup_fold": speedup(t["layer_norm"], t["rms_norm"])})
    return rows


def end_to_end(device, repeats, compiled: bool, clock: str, sizes=tuple(SIZES)):
    rows = []
    for name, (d, heads, layers, batch, T) in ((n, SIZES[n]) for n in sizes):
        torch.manual_seed(0)
        model = TinyTransformer(256, d, heads, layers, max_len=T).to(device).eval()
        tokens = torch.randint(0, 256, (batch, T), device=device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            keep = fold_layernorms(model, tokens, affine="keep").eval()
            fold = fold_layernorms(model, tokens, affine="fold").eval()
        share = norm_share(model, tokens)
        guard_ms = 1e3 * guard_seconds(fold, tokens, clock=clock)  # timed alone; the timed folded models lack it
        keep, fold = without_shape_guards(keep)[0], without_shape_guards(fold)[0]
        models = {"original": model, "original_again": copy.deepcopy(model), "folded_keep": keep, "folded_fold": fold,
                  "no_norms": without_norms(model)}
        if compiled:
            torch._dynamo.reset()
            models = {k: torch.compile(m, dynamic=False) for k, m in models.items()}
        fns = {k: (lambda m=m: m(tokens)) for k, m in models.items()}
        with torch.inference_mode():
            t = median_times(fns, repeats=repeats, inner=3, warmup=2, device=device, clock=clock)
        rows.append({"size": name, "d_model": d, "n_layers": layers, "tokens": batch * T, "compiled": compiled,
                     **{f"{k}_ms": v * 1e3 for k, v in t.items()}, "guard_ms": guard_ms, "ln_share": share,
                     "ln_share_ablation": ablation_share(t["original"], t["no_norms"]),
                     "speedup_aa": speedup(t["original"], t["original_again"]),
                     "speedup_keep": speedup(t["original"], t["folded_keep"]),
                     "speedup_fold": speedup(t["original"], t["folded_fold"])})
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--compile", action="store_true", help="also measure torch.compile'd kernels and models")
    parser.add_argument("--json", default=None)
    parser.add_argument("--allocator-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--widths", type=int, nargs="+", default=list(KERNEL_WIDTHS), help="widths of the kernel table")
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES), help="model sizes end to end")
    parser.add_argument("--clock", choices=["wall", "thread"], default=None,
                        help="thread: CPU time of this thread (default on the CPU with one thread); wall otherwise")
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.set_num_threads(args.threads)
    clock = args.clock or ("thread" if device.type == "cpu" and args.threads == 1 else "wall")
    torch._dynamo.config.recompile_limit = 64  # one compiled graph per model and size, not a fallback to eager
    if args.allocator_child:  # one fresh process per allocator setting: the eager kernels at large widths
        print(json.dumps(kernels(device, args.repeats, False, clock, ALLOCATOR_WIDTHS)))
        return
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{platform.processor() or 'cpu'}, {args.threads} thread(s)"
    print(f"torch {torch.__version__} on {device} ({where}); speed-up = t_LN / t_RMS - 1; median of {args.repeats} interleaved repeats, {clock} clock")
    result = {"device": device.type, "where": where, "torch": torch.__version__, "python": sys.version.split()[0],
              "threads": args.threads, "repeats": args.repeats, "clock": clock, "statistic": "median",
              "widths": args.widths, "sizes": args.sizes, "kernels": [], "end_to_end": []}
    for compiled in [False, True] if args.compile else [False]:
        mode = "torch.compile" if compiled else "eager"
        print(f"\n[{mode}] the norm alone, 1024 tokens")
        print(f"{'d':>6} {'LN us':>9} {'RMS+b us':>9} {'RMS us':>9} {'A/A':>8} {'keep':>8} {'fold':>8}")
        for r in kernels(device, args.repeats, compiled, clock, tuple(args.widths)):
            result["kernels"].append(r)
            print(f"{r['d']:6d} {r['layer_norm_us']:9.1f} {r['rms_norm+bias_us']:9.1f} {r['rms_norm_us']:9.1f} "
                  f"{r['speedup_aa']:+8.1%} {r['speedup_keep']:+8.1%} {r['speedup_fold']:+8.1%}")
        print(f"\n[{mode}] TinyTransformer end to end (original vs folded)")
        print(f"{'size':>7} {'d':>4} {'L':>2} {'orig ms':>8} {'keep ms':>8} {'fold ms':>8} {'A/A':>7} {'keep':>7} {'fold':>7} "
              f"{'LN share':>8} {'Amdahl':>7}")
        kern = {r["d"]: r for r in result["kernels"] if r["compiled"] == compiled}
        for r in end_to_end(device, args.repeats, compiled, clock, tuple(args.sizes)):
            k = kern.get(r["d_model"])
            r["amdahl_fold"] = amdahl_speedup(r["ln_share"], k["speedup_fold"]) if k else None
            result["end_to_end"].append(r)
            print(f"{r['size']:>7} {r['d_model']:4d} {r['n_layers']:2d} {r['original_ms']:8.2f} {r['folded_keep_ms']:8.2f} "
                  f"{r['folded_fold_ms']:8.2f} {r['speedup_aa']:+7.1%} {r['speedup_keep']:+7.1%} {r['speedup_fold']:+7.1%} {r['ln_share']:8.1%} "
                  + (f"{r['amdahl_fold']:+7.1%}" if k else f"{'n/a':>7}") + f"  guard {r['guard_ms']:.2f} ms")
    if args.compile:
        print("\n[best kernel of each norm] eager or compiled, whichever is faster, 1024 tokens")
        print(f"{'d':>6} {'LN':>14} {'RMS+b':>14} {'RMS':>14} {'keep':>8} {'fold':>8}")
        eager = {r["d"]: r for r in result["kernels"] if not r["compiled"]}
        comp = {r["d"]: r for r in result["kernels"] if r["compiled"]}
        names = ("layer_norm", "rms_norm+bias", "rms_norm")
        for d in args.widths:
            best = best_kernels({n: eager[d][f"{n}_us"] for n in names}, {n: comp[d][f"{n}_us"] for n in names})
            row = {"d": d, **{f"{n}_us": best[n][0] for n in names}, **{f"{n}_from": best[n][1] for n in names},
                   "speedup_keep": speedup(best["layer_norm"][0], best["rms_norm+bias"][0]),
                   "speedup_fold": speedup(best["layer_norm"][0], best["rms_norm"][0])}
            result.setdefault("best_kernels", []).append(row)
            print(f"{d:6d} " + " ".join(f"{row[n + '_us']:7.1f} {row[n + '_from'][:5]:>6}" for n in names)
                  + f" {row['speedup_keep']:+8.1%} {row['speedup_fold']:+8.1%}")
        print("\n[norm share of the model] profiler (eager) and ablation (norms -> identity), per mode")
        for r in result["end_to_end"]:
            print(f"{r['size']:>7} {'compiled' if r['compiled'] else 'eager':>8}  profiler {r['ln_share']:6.1%}  "
                  f"ablation {r['ln_share_ablation']:+6.1%}")
    if device.type == "cpu":
        print(f"\n[allocator] eager norms at d >= 1024 in fresh processes, default malloc vs {MMAP_THRESHOLD_ENV}")
        base = dict(os.environ)
        runs = {}
        for label, extra in [("default", {}), ("heap", MMAP_THRESHOLD_ENV)]:
            env = {k: v for k, v in base.items() if k != "MALLOC_MMAP_THRESHOLD_"}
            env.update(extra)
            out = subprocess.run([sys.executable, __file__, "--allocator-child", "--device", "cpu", "--threads",
                                  str(args.threads), "--repeats", str(args.repeats)], env=env, check=True,
                                 capture_output=True, text=True).stdout
            runs[label] = json.loads(out.strip().splitlines()[-1])
        result["allocator"] = []
        print(f"{'d':>6} {'keep (default)':>15} {'keep (heap)':>12} {'fold (default)':>15} {'fold (heap)':>12}")
        for a, b in zip(runs["default"], runs["heap"]):
            row = {"d": a["d"], "speedup_keep_default": a["speedup_keep"], "speedup_keep_heap": b["speedup_keep"],
                   "speedup_fold_default": a["speedup_fold"], "speedup_fold_heap": b["speedup_fold"],
                   "default": a, "heap": b}
            result["allocator"].append(row)
            print(f"{a['d']:6d} {a['speedup_keep']:+15.1%} {b['speedup_keep']:+12.1%} {a['speedup_fold']:+15.1%} "
                  f"{b['speedup_fold']:+12.1%}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
