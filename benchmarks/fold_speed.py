"""Inference speed of LayerNorm against the folded RMSNorm (chapter 7), printed as ratios from one run.

Two measurements, each with PyTorch's eager kernels and (``--compile``) with ``torch.compile``:

1. **the norm alone**: ``F.layer_norm(x, w, b)`` against ``F.rms_norm(x, w) + b`` (affine kept) and
   ``F.rms_norm(x)`` (affine folded into the next layer), for ``x`` of shape ``(tokens, d)``;
2. **end to end**: the book's pre-LN ``TinyTransformer`` at several sizes against its folded copies
   (``fold_layernorms`` with ``affine="keep"`` and ``affine="fold"``), with the share of the
   original's time spent in LayerNorm (profiler) and the end-to-end speed-up that Amdahl's law
   predicts from it and the kernel speed-up.

Speed-up = t_LN / t_RMS - 1 (0.10: 10% faster; negative: slower). Times are the minimum over
interleaved repeats (lnbook.util.timing); on the CPU with one thread they are CPU times of the
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
import platform
import sys
import warnings

import torch
import torch.nn.functional as F

from lnbook.folding.fold import fold_layernorms
from lnbook.ml.models import TinyTransformer
from lnbook.util.timing import amdahl_speedup, interleaved_min_times, speedup

SIZES = {  # name: (d_model, n_heads, n_layers, batch, tokens)
    "small": (128, 4, 2, 8, 128),
    "medium": (256, 4, 4, 8, 128),
    "large": (512, 8, 6, 4, 128),
}
KERNEL_WIDTHS = (128, 256, 512, 768, 1024, 2048)


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


def kernels(device, repeats, compiled: bool, clock: str):
    rows = []
    for d in KERNEL_WIDTHS:
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
            t = interleaved_min_times(fns, repeats=repeats, inner=20, warmup=3, device=device, clock=clock)
        rows.append({"d": d, "tokens": 1024, "compiled": compiled, **{f"{k}_us": v * 1e6 for k, v in t.items()},
                     "speedup_aa": speedup(t["layer_norm"], t["layer_norm_again"]),
                     "speedup_keep": speedup(t["layer_norm"], t["rms_norm+bias"]),
                     "speedup_fold": speedup(t["layer_norm"], t["rms_norm"])})
    return rows


def end_to_end(device, repeats, compiled: bool, clock: str):
    rows = []
    for name, (d, heads, layers, batch, T) in SIZES.items():
        torch.manual_seed(0)
        model = TinyTransformer(256, d, heads, layers, max_len=T).to(device).eval()
        tokens = torch.randint(0, 256, (batch, T), device=device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            keep = fold_layernorms(model, tokens, affine="keep").eval()
            fold = fold_layernorms(model, tokens, affine="fold").eval()
        share = norm_share(model, tokens)
        models = {"original": model, "original_again": copy.deepcopy(model), "folded_keep": keep, "folded_fold": fold}
        if compiled:
            torch._dynamo.reset()
            models = {k: torch.compile(m, dynamic=False) for k, m in models.items()}
        fns = {k: (lambda m=m: m(tokens)) for k, m in models.items()}
        with torch.inference_mode():
            t = interleaved_min_times(fns, repeats=repeats, inner=3, warmup=2, device=device, clock=clock)
        rows.append({"size": name, "d_model": d, "n_layers": layers, "tokens": batch * T, "compiled": compiled,
                     **{f"{k}_ms": v * 1e3 for k, v in t.items()}, "ln_share": share,
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
    parser.add_argument("--clock", choices=["wall", "thread"], default=None,
                        help="thread: CPU time of this thread (default on the CPU with one thread); wall otherwise")
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.set_num_threads(args.threads)
    clock = args.clock or ("thread" if device.type == "cpu" and args.threads == 1 else "wall")
    torch._dynamo.config.recompile_limit = 64  # one compiled graph per model and size, not a fallback to eager
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{platform.processor() or 'cpu'}, {args.threads} thread(s)"
    print(f"torch {torch.__version__} on {device} ({where}); speed-up = t_LN / t_RMS - 1; min of {args.repeats} interleaved repeats, {clock} clock")
    result = {"device": device.type, "where": where, "torch": torch.__version__, "python": sys.version.split()[0],
              "threads": args.threads, "repeats": args.repeats, "clock": clock, "kernels": [], "end_to_end": []}
    for compiled in [False, True] if args.compile else [False]:
        mode = "torch.compile" if compiled else "eager"
        print(f"\n[{mode}] the norm alone, 1024 tokens")
        print(f"{'d':>6} {'LN us':>9} {'RMS+b us':>9} {'RMS us':>9} {'A/A':>8} {'keep':>8} {'fold':>8}")
        for r in kernels(device, args.repeats, compiled, clock):
            result["kernels"].append(r)
            print(f"{r['d']:6d} {r['layer_norm_us']:9.1f} {r['rms_norm+bias_us']:9.1f} {r['rms_norm_us']:9.1f} "
                  f"{r['speedup_aa']:+8.1%} {r['speedup_keep']:+8.1%} {r['speedup_fold']:+8.1%}")
        print(f"\n[{mode}] TinyTransformer end to end (original vs folded)")
        print(f"{'size':>7} {'d':>4} {'L':>2} {'orig ms':>8} {'keep ms':>8} {'fold ms':>8} {'A/A':>7} {'keep':>7} {'fold':>7} "
              f"{'LN share':>8} {'Amdahl':>7}")
        kern = {r["d"]: r for r in result["kernels"] if r["compiled"] == compiled}
        for r in end_to_end(device, args.repeats, compiled, clock):
            k = kern.get(r["d_model"])
            r["amdahl_fold"] = amdahl_speedup(r["ln_share"], k["speedup_fold"]) if k else None
            result["end_to_end"].append(r)
            print(f"{r['size']:>7} {r['d_model']:4d} {r['n_layers']:2d} {r['original_ms']:8.2f} {r['folded_keep_ms']:8.2f} "
                  f"{r['folded_fold_ms']:8.2f} {r['speedup_aa']:+7.1%} {r['speedup_keep']:+7.1%} {r['speedup_fold']:+7.1%} {r['ln_share']:8.1%} "
                  f"{r['amdahl_fold']:+7.1%}" if k else "")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
