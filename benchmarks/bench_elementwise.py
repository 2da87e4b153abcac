"""Large elementwise bandwidth: 16M-float `a * b + a` (two kernels: 3 + 3 floats moved per element) as
effective GB/s, next to a raw copy kernel (2 floats per element) on the same buffers size in the same run.
Target: >= 80 % of the copy kernel's bandwidth. Usage: python benchmarks/bench_elementwise.py [--json] [--n N]"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # runs from a source checkout too
import tlgpu  # noqa: E402
from _util import bench_hook, median_time, report  # noqa: E402

N = int(sys.argv[sys.argv.index("--n") + 1]) if "--n" in sys.argv else 16 * 2**20


def main():
    rng = np.random.default_rng(0)
    a = tlgpu.tensor(rng.standard_normal(N).astype(np.float32))
    b = tlgpu.tensor(rng.standard_normal(N).astype(np.float32))
    reps = 10

    def expr():
        for _ in range(reps):
            c = a * b + a
        del c
        tlgpu.synchronize()

    t_expr = median_time(expr, reps=5) / reps
    t_copy = bench_hook("_bench_raw")(2, N, 20)
    t_mul = median_time(lambda: (a * b, tlgpu.synchronize()), reps=7)
    gbs_expr = 6 * 4 * N / t_expr / 1e9
    gbs_copy = 2 * 4 * N / t_copy / 1e9
    gbs_mul = 3 * 4 * N / t_mul / 1e9
    rows = [
        {"what": "raw copy kernel o[i] = a[i]", "ms": t_copy * 1e3, "GB/s": gbs_copy, "vs copy": 1.0},
        {"what": "tlgpu a * b + a (2 kernels)", "ms": t_expr * 1e3, "GB/s": gbs_expr, "vs copy": gbs_expr / gbs_copy},
        {"what": "tlgpu a * b (1 kernel, incl. sync)", "ms": t_mul * 1e3, "GB/s": gbs_mul, "vs copy": gbs_mul / gbs_copy},
    ]
    report(f"elementwise bandwidth, {N} floats", rows, ["what", "ms", "GB/s", "vs copy"],
           {"a*b+a vs copy (target >= 0.8)": gbs_expr / gbs_copy})


if __name__ == "__main__":
    main()
