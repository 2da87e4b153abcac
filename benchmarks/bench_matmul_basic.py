"""GFLOP/s of tlgpu's basic tiled matmul kernel against numpy's BLAS on the host, in the same run.

Usage: python3 benchmarks/bench_matmul_basic.py [--sizes 256 512 1024] [--seconds 1.0] [--json]

Each figure is the best of several timed rounds (each round long enough to be timed reliably); the
tlgpu rounds end with tlgpu.synchronize(), so they time the kernels, not just the enqueues.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tlgpu  # noqa: E402


def best_rate(fn, flops, seconds, sync=lambda: None):
    fn()
    sync()                                           # warm-up: kernel build, pool, BLAS threads
    t = time.perf_counter()
    fn()
    sync()
    one = max(time.perf_counter() - t, 1e-6)
    reps = max(1, int(seconds / 5 / one))
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t) / reps)
    return flops / best / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
    ap.add_argument("--seconds", type=float, default=1.0, help="rough time per measurement")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    dev = tlgpu.device()
    rows = []
    for n in args.sizes:
        a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
        ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
        err = float(np.abs((ta @ tb).numpy() - a.astype(np.float64) @ b).max() / np.sqrt(n))
        flops = 2.0 * n ** 3
        g_tl = best_rate(lambda: ta @ tb, flops, args.seconds, tlgpu.synchronize)
        time.sleep(0.2)                              # let the OpenCL runtime's worker threads go idle
        g_np = best_rate(lambda: a @ b, flops, args.seconds)
        rows.append({"n": n, "tlgpu_gflops": round(g_tl, 2), "numpy_gflops": round(g_np, 2),
                     "ratio": round(g_tl / g_np, 4), "max_err_over_sqrt_n": err})
    out = {"device": dev.name, "platform": dev.platform, "host_threads": os.cpu_count(), "rows": rows}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"matmul (float32, square) on {dev.name} [{dev.platform}] vs numpy on the host ({os.cpu_count()} cpus)")
    print(f"{'n':>6} {'tlgpu GFLOP/s':>14} {'numpy GFLOP/s':>14} {'tlgpu/numpy':>12}")
    for r in rows:
        print(f"{r['n']:>6} {r['tlgpu_gflops']:>14.2f} {r['numpy_gflops']:>14.2f} {r['ratio']:>12.3f}")


if __name__ == "__main__":
    main()
