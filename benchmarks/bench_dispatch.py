"""Small-op dispatch cost: `c = a + b` on 1024 floats through tlgpu (lazy, and eager with TLGPU_SYNC=1 in a
child process), next to a raw C loop of clEnqueueNDRangeKernel of the same kernel (args set once) measured in
the same run; plus a 200-op chain lazy vs eager. Targets: tlgpu lazy <= 1.3x raw; chain lazy >= 8x eager (PoCL).
Usage: python benchmarks/bench_dispatch.py [--json] [--iters N]"""
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # runs from a source checkout too
import tlgpu  # noqa: E402
from _util import bench_hook, median_time, report  # noqa: E402

N = 1024
ITERS = int(sys.argv[sys.argv.index("--iters") + 1]) if "--iters" in sys.argv else 20000


def per_op_add(iters):
    a = tlgpu.tensor(np.random.default_rng(0).standard_normal(N).astype(np.float32))
    b = tlgpu.tensor(np.random.default_rng(1).standard_normal(N).astype(np.float32))

    def run():
        for _ in range(iters):
            c = a + b
        del c
        tlgpu.synchronize()
    return median_time(run, reps=5, warmup=1) / iters


def chain_200():
    a = tlgpu.tensor(np.random.default_rng(0).standard_normal(N).astype(np.float32))

    def run():
        x = a
        for _ in range(200):
            x = x + 1.0
        x.numpy()
    return median_time(run, reps=7, warmup=2)


def child():
    """Measurements in this process's mode (TLGPU_SYNC decides lazy or eager); prints JSON."""
    print(json.dumps({"add": per_op_add(max(ITERS // 10, 200)), "chain": chain_200()}))


def main():
    lazy_add = per_op_add(ITERS)
    lazy_chain = chain_200()
    raw = bench_hook("_bench_raw")(0, N, ITERS)
    raw_sync = bench_hook("_bench_raw")(1, N, max(ITERS // 10, 200))
    env = dict(os.environ, TLGPU_SYNC="1")
    out = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, check=True)
    eager = json.loads(out.stdout)
    rows = [
        {"what": "raw clEnqueueNDRangeKernel (C loop, args set once)", "us/op": raw * 1e6, "vs raw": 1.0},
        {"what": "tlgpu c = a + b, lazy", "us/op": lazy_add * 1e6, "vs raw": lazy_add / raw},
        {"what": "raw enqueue + clFinish each", "us/op": raw_sync * 1e6, "vs raw": raw_sync / raw},
        {"what": "tlgpu c = a + b, TLGPU_SYNC=1", "us/op": eager["add"] * 1e6, "vs raw": eager["add"] / raw},
        {"what": "200-op chain + read, lazy (total)", "us/op": lazy_chain * 1e6 / 200, "vs raw": lazy_chain / 200 / raw},
        {"what": "200-op chain + read, TLGPU_SYNC=1 (total)", "us/op": eager["chain"] * 1e6 / 200,
         "vs raw": eager["chain"] / 200 / raw},
    ]
    report("dispatch: 1024-float add", rows, ["what", "us/op", "vs raw"],
           {"tlgpu lazy / raw (target <= 1.3)": lazy_add / raw,
            "200-op chain eager / lazy (target >= 8 on PoCL)": eager["chain"] / lazy_chain})


if __name__ == "__main__":
    child() if "--child" in sys.argv else main()
