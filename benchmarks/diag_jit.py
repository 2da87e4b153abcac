"""Where a jitted MLP step's time goes: host time per call (enqueue only, no sync) against the whole step
(synced every 50), eager and jitted, and the trace's command counts. Usage: python benchmarks/diag_jit.py"""
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
import tlgpu  # noqa: E402
from bench_train import make_update  # noqa: E402


def main():
    update, x, y = make_update()
    for name, fn in (("eager", update), ("jit", tlgpu.jit(update))):
        for _ in range(5):
            fn(x, y)
        tlgpu.synchronize()
        host, total = [], []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(50):
                fn(x, y)
            t1 = time.perf_counter()
            tlgpu.synchronize()
            t2 = time.perf_counter()
            host.append((t1 - t0) / 50)
            total.append((t2 - t0) / 50)
        print(f"{name}: host {np.median(host) * 1e6:.1f} us/step, whole {np.median(total) * 1e6:.1f} us/step")
        if name == "jit":
            print(fn.memory_plan())
            print(fn.commands())
    print(tlgpu.device().name)


if __name__ == "__main__":
    main()
