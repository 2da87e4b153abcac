"""Fit an MLP on a synthetic classification set (four interleaved spirals) on the default device.

python examples/train_mlp.py [--steps N]; prints the loss as it goes and the final accuracy (>= 95 %)."""
import os
import sys
import time

import numpy as np

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))    # the tree, after PYTHONPATH
import tlgpu  # noqa: E402
from tlgpu import nn  # noqa: E402
from tlgpu.nn import functional as F  # noqa: E402


def spirals(n_per_class=500, classes=4, noise=0.15, seed=0):
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for c in range(classes):
        r = np.linspace(0.1, 1.0, n_per_class)
        a = np.linspace(0, 3.5, n_per_class) + 2 * np.pi * c / classes + rng.normal(0, noise, n_per_class)
        xs.append(np.stack([r * np.sin(a), r * np.cos(a)], 1))
        ys.append(np.full(n_per_class, c))
    x, y = np.concatenate(xs).astype(np.float32), np.concatenate(ys).astype(np.int32)
    perm = rng.permutation(len(y))
    return x[perm], y[perm]


def main(steps=600):
    tlgpu.manual_seed(0)
    x_np, y_np = spirals()
    split = int(0.8 * len(y_np))
    x, y = tlgpu.tensor(x_np[:split]), tlgpu.tensor(y_np[:split])
    xt, yt = x_np[split:], y_np[split:]                 # numpy: modules and operators take it as is
    model = nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = tlgpu.optim.Adam(model.parameters(), lr=3e-3)
    print(f"device: {tlgpu.device().name}; {split} training points, {len(yt)} held out")
    t0 = time.perf_counter()
    for step in range(steps + 1):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step:5d}  loss {loss:.4f}")          # the only sync point in the loop
    with tlgpu.no_grad():
        acc = (model(xt).argmax(1) == yt).float().mean().item()   # int32 == int64 numpy: on the device
    print(f"held-out accuracy {100 * acc:.1f} % after {steps} steps ({time.perf_counter() - t0:.1f} s)")
    return acc


if __name__ == "__main__":
    n = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 600
    sys.exit(0 if main(n) >= 0.95 else 1)
