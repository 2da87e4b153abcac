"""A short tour of tlgpu on the default device: lazy vs eager execution and the memory pool.

Run with `make demo`. (The RL learner demo replaces this once the publisher exists.)"""
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))    # the tree, after PYTHONPATH
import tlgpu  # noqa: E402


def chain(x, n=200):
    for _ in range(n):
        x = (x * 0.999 + 0.001).tanh()
    return x


def timed_chain():
    x = tlgpu.tensor(np.random.default_rng(0).standard_normal(4096).astype(np.float32))
    chain(x, 20).numpy()                              # warm-up: builds and caches the kernels
    tlgpu.reset_stream_stats()
    t0 = time.perf_counter()
    out = chain(x).numpy()
    return time.perf_counter() - t0, tlgpu.stream_stats(), float(out.sum())


def main():
    if "--child" in sys.argv:
        print(json.dumps(timed_chain()))
        return
    dev = tlgpu.device()
    print(f"device: {dev.name} ({dev.platform}, {dev.type}, {dev.global_mem_bytes / 2**30:.1f} GiB)")
    lazy_s, stats, checksum = timed_chain()
    env = dict(os.environ, TLGPU_SYNC="1")
    eager = json.loads(subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True,
                                      text=True, check=True).stdout)
    print("\n600-op chain ((x*0.999 + 0.001).tanh() x 200) on 4096 floats, then one read:")
    print(f"  lazy : {lazy_s * 1e3:8.2f} ms  enqueued={stats['enqueued']} flushes={stats['flushes']} "
          f"waits={stats['waits']}")
    print(f"  eager: {eager[0] * 1e3:8.2f} ms  enqueued={eager[1]['enqueued']} waits={eager[1]['waits']} "
          f"(TLGPU_SYNC=1)")
    print(f"  lazy is {eager[0] / lazy_s:.1f}x faster; same result: {abs(eager[2] - checksum) < 1e-3}")

    tlgpu.reset_peak_memory_stats()
    w = tlgpu.tensor(np.random.default_rng(1).standard_normal((256, 256)).astype(np.float32))
    for _ in range(1000):
        w = (w * 0.5 + 0.25).relu()
    w.numpy()
    m = tlgpu.memory_stats()
    print("\nmemory pool after 2000 temporary 256x256 results:")
    print(f"  live={m['live'] / 1024:.0f} KiB  cached={m['cached'] / 1024:.0f} KiB  peak={m['peak'] / 1024:.0f} KiB  "
          f"allocations={m['allocations']}  hits={m['hits']} ({100 * m['hits'] / max(m['allocations'], 1):.1f} %)")


if __name__ == "__main__":
    main()
