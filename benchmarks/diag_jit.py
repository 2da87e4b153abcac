"""Where a jitted MLP step's time goes: host time per call (enqueue only, no sync) against the whole step
(synced every 50), eager and jitted, and the trace's command counts. Usage: python benchmarks/diag_jit.py"""
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
import tlgpu  # noqa: E402
from tlgpu import nn  # noqa: E402
from tlgpu.nn import functional as F  # noqa: E402


def main():
    rng = np.random.default_rng(0)
    x = tlgpu.tensor(rng.standard_normal((256, 784)).astype(np.float32))
    y = tlgpu.tensor(rng.integers(0, 10, 256).astype(np.int32))
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = tlgpu.optim.Adam(model.parameters(), lr=1e-3)

    def update(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
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
