"""Reduction and softmax bandwidth against a raw copy kernel measured in the same run.

(a) sum over 16M floats: reads 4*n bytes; the raw copy kernel (tlgpu._C._bench_raw(2, n, iters), seconds
    per launch) moves 2*4*n bytes. Target: sum GB/s >= 70 % of copy GB/s.
(b) softmax / log_softmax over (4096, 4096) rows: read + write, 2*4*n bytes.
Medians over rounds; each op and the copy are timed in blocks of repeated launches (see main()).
Usage: python3 benchmarks/bench_reduce.py [--json] [--rounds R] [--n N] [--rows R --cols C]
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tlgpu  # noqa: E402
from _util import bench_hook  # noqa: E402


def time_op(fn, iters):
    """Seconds per call of fn with `iters` calls between two synchronize()s."""
    tlgpu.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    tlgpu.synchronize()
    return (time.perf_counter() - t0) / iters


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--n", type=int, default=1 << 24)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    a = ap.parse_args()

    rng = np.random.default_rng(0)
    x = tlgpu.tensor(rng.random(a.n, dtype=np.float32))
    s = tlgpu.tensor(rng.standard_normal((a.rows, a.cols)).astype(np.float32))
    ops = {
        "sum": (lambda: x.sum(), 4 * a.n, a.n),
        "mean": (lambda: x.mean(), 4 * a.n, a.n),
        "max": (lambda: x.max(), 4 * a.n, a.n),
        "argmax": (lambda: x.argmax(), 4 * a.n, a.n),
        "softmax": (lambda: s.softmax(axis=-1), 8 * a.rows * a.cols, a.rows * a.cols),
        "log_softmax": (lambda: s.log_softmax(axis=-1), 8 * a.rows * a.cols, a.rows * a.cols),
    }
    for fn, _, _ in ops.values():                     # warm-up: kernel builds, pool blocks
        for _ in range(2):
            fn()
    bench_hook("_bench_raw")(2, a.n, 2)

    # Each op is timed in its own block after settling calls, as _bench_raw times its copy: repeated
    # launches on the same buffers, so both see the same cache state (on a CPU with a large L3 that
    # matters more than anything). The copy is timed in a block before and one after the ops.
    copy_s, times = [], {k: [] for k in ops}
    copy_s += [bench_hook("_bench_raw")(2, a.n, a.iters) for _ in range(a.rounds)]
    for k, (fn, _, _) in ops.items():
        for _ in range(3):
            fn()
        times[k] = [time_op(fn, a.iters) for _ in range(a.rounds)]
    copy_s += [bench_hook("_bench_raw")(2, a.n, a.iters) for _ in range(a.rounds)]
    copy_med = statistics.median(copy_s)
    copy_gbs = 2 * 4 * a.n / copy_med / 1e9
    rows = [{"op": "raw copy", "elements": a.n, "bytes": 8 * a.n, "ms": copy_med * 1e3, "GB/s": copy_gbs,
             "pct_copy": 100.0}]
    for k, (_, nbytes, nel) in ops.items():
        med = statistics.median(times[k])
        gbs = nbytes / med / 1e9
        rows.append({"op": k, "elements": nel, "bytes": nbytes, "ms": med * 1e3, "GB/s": gbs,
                     "pct_copy": 100.0 * gbs / copy_gbs})
    dev = tlgpu.device()
    if a.json:
        print(json.dumps({"device": dev.name, "platform": dev.platform, "rounds": a.rounds, "iters": a.iters,
                          "target_sum_pct_copy": 70.0, "results": rows}, indent=2))
        return
    print(f"device: {dev.name} ({dev.platform}); medians of {a.rounds} rounds x {a.iters} calls")
    print(f"{'op':<12} {'shape':>14} {'ms':>9} {'GB/s':>8} {'% copy':>7}")
    for r in rows:
        shape = f"({a.rows}, {a.cols})" if r["op"] in ("softmax", "log_softmax") else f"({a.n},)"
        print(f"{r['op']:<12} {shape:>14} {r['ms']:9.3f} {r['GB/s']:8.1f} {r['pct_copy']:6.0f}%")
    sum_pct = rows[1]["pct_copy"]
    print(f"sum reaches {sum_pct:.0f}% of the raw copy bandwidth (target >= 70%)")


if __name__ == "__main__":
    main()
