"""Benchmark: build and verify width-3 LN-Nets for random binary labels; fit the time-growth exponent.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/build_ln_net.py [m ...]`` (about a minute on
one core with the default sizes; add 5000 and 10000 by hand: one to several minutes each).
It prints, for each m, the build time, the verification time (the torch module run on all samples in
float64), the number of LN layers, the smallest separation between classes and the outcome, then
the exponent a of time ~ m^a fitted by least squares on log-log over the sizes that succeeded.
A size beyond the builder's float64 range would stop with a ``ConstructionError`` (none of 100 .. 10 000
does with the straightening blocks); its time to failure and layer would be printed but left out of the
fit. Goal: m = 1000 under 10 s on one core.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

from lnbook.capacity.build_float64 import ConstructionError, build_ln_net, verify_ln_net

torch.set_num_threads(1)
SIZES = [100, 200, 300, 500, 1000, 2000]


def one(m: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    X, y = rng.standard_normal((m, 3)), rng.integers(0, 2, m)
    t0 = time.perf_counter()
    try:
        net = build_ln_net(X, y, verify=False)
    except ConstructionError as err:
        return {"m": m, "ok": False, "build_s": time.perf_counter() - t0, "why": err.reason[:60], "layers": err.layer}
    t1 = time.perf_counter()
    report = verify_ln_net(net, X, y)
    t2 = time.perf_counter()
    return {
        "m": m,
        "ok": report["errors"] == 0,
        "build_s": t1 - t0,
        "verify_s": t2 - t1,
        "layers": net.n_ln_layers,
        "sep": net.min_separation,
        "errors": report["errors"],
        "why": f"{report['errors']} samples misclassified",
    }


def main(sizes=SIZES):
    rows = []
    for m in sizes:
        r = one(m)
        rows.append(r)
        if r["ok"]:
            print(f"m={m:6d}  build {r['build_s']:7.2f} s  verify {r['verify_s']:6.3f} s  "
                  f"LN layers {r['layers']:6d}  min separation {r['sep']:.2e} rad  ok", flush=True)
        else:
            print(f"m={m:6d}  stopped after {r['build_s']:7.2f} s at layer {r['layers']}: {r['why']}", flush=True)
    ok = [r for r in rows if r["ok"]]
    if len(ok) >= 2:
        ms = np.log([r["m"] for r in ok])
        ts = np.log([r["build_s"] + r["verify_s"] for r in ok])
        a, _ = np.polyfit(ms, ts, 1)
        print(f"fitted exponent (time ~ m^a over successful sizes {[r['m'] for r in ok]}): a = {a:.2f}")
    # cost per layer, measured on every size (also those that stopped): the construction's O(m^2)
    # is (number of layers ~ m) x (cost per layer ~ m)
    ms = np.array([r["m"] for r in rows], dtype=float)
    per_layer = np.array([r["build_s"] / max(r["layers"], 1) for r in rows])
    big = ms >= 300
    if big.sum() >= 2:
        a, _ = np.polyfit(np.log(ms[big]), np.log(per_layer[big]), 1)
        print("seconds per layer: " + ", ".join(f"m={int(m)}: {t * 1e3:.2f} ms" for m, t in zip(ms, per_layer)))
        print(f"cost per layer ~ m^{a:.2f} for m >= 300; projected total for m - 1 layers ~ m^{1 + a:.2f}; "
              f"m = 10 000 about {per_layer[-1] * (1e4 / ms[-1]) ** a * 1e4 / 60:.0f} min")


if __name__ == "__main__":
    main([int(s) for s in sys.argv[1:]] or SIZES)
