"""Where a jitted step's time goes: host time per call (enqueue only, no sync) against the whole step (synced
every 50), eager, jitted without fusion (fuse=False) and jitted with fusion (elementwise runs as generated
kernels, docs/jit.md), and each trace's command count. Steps: bench_train's MLP (784-256-256-10, batch 256,
Adam) and an LSTM cell written with elementwise ops (batch 64, 128 features, hidden 256, Adam), and a chain of
8 elementwise ops over [256, 256] and [1024, 1024].
Usage: python benchmarks/diag_jit.py [--json] [--steps N] [--commands]"""
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
import tlgpu  # noqa: E402
from _util import report  # noqa: E402
from bench_train import make_update  # noqa: E402

STEPS = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 50


def make_lstm(batch=64, feat=128, hidden=256):
    """(step, args): one training step of an LSTM cell written with elementwise ops (gates as slices of one
    product, the cell and hidden updates, a squared-error head), Adam over its four parameters."""
    rng = np.random.default_rng(0)
    p = {"wx": rng.standard_normal((feat, 4 * hidden)) * 0.05, "wh": rng.standard_normal((hidden, 4 * hidden)) * 0.05,
         "b": np.zeros(4 * hidden), "wo": rng.standard_normal((hidden, 1)) * 0.05}
    p = {k: tlgpu.tensor(v.astype(np.float32), requires_grad=True) for k, v in p.items()}
    opt = tlgpu.optim.Adam(list(p.values()), lr=1e-3)
    H = hidden

    def step(x, h, c, target):
        g = x @ p["wx"] + h @ p["wh"] + p["b"]
        i, f, u, o = g[:, :H].sigmoid(), g[:, H:2 * H].sigmoid(), g[:, 2 * H:3 * H].tanh(), g[:, 3 * H:].sigmoid()
        c2 = f * c + i * u
        h2 = o * c2.tanh()
        loss = ((h2 @ p["wo"] - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    args = [tlgpu.tensor(rng.standard_normal(s).astype(np.float32)) for s in
            ((batch, feat), (batch, hidden), (batch, hidden), (batch, 1))]
    return step, args


def make_chain(shape):
    rng = np.random.default_rng(0)

    def chain(x, y, b):
        return ((((x * y + 1.0).relu() - y) * 0.5).exp() + b).tanh() / 3.0 - x
    return chain, [tlgpu.tensor(rng.standard_normal(s).astype(np.float32)) for s in (shape, shape, shape[1:])]


def measure(fn, args):
    for _ in range(5):
        fn(*args)
    tlgpu.synchronize()
    host, total = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(STEPS):
            fn(*args)
        t1 = time.perf_counter()
        tlgpu.synchronize()
        t2 = time.perf_counter()
        host.append((t1 - t0) / STEPS)
        total.append((t2 - t0) / STEPS)
    return np.median(host), np.median(total)


def make_mlp():
    update, x, y = make_update()
    return update, [x, y]


CASES = [("MLP Adam step", make_mlp), ("LSTM cell step", make_lstm),
         ("8-op chain [256, 256]", lambda: make_chain((256, 256))),
         ("8-op chain [1024, 1024]", lambda: make_chain((1024, 1024)))]


def main():
    rows = []
    for what, make in CASES:
        for mode in ("eager", "jit, fuse=False", "jit"):
            fn, args = make()
            if mode != "eager":
                fn = tlgpu.jit(fn, fuse=mode == "jit")
            host, total = measure(fn, args)
            row = {"what": what, "mode": mode, "host us/step": host * 1e6, "us/step": total * 1e6}
            if mode != "eager":
                row["commands"] = fn.memory_plan()["commands"]
                if "--commands" in sys.argv:
                    print(what, mode, fn.commands())
            rows.append(row)
    report(f"tlgpu.jit: host time and whole step, with and without fusion ({tlgpu.device().name})", rows,
           ["what", "mode", "host us/step", "us/step", "commands"])


if __name__ == "__main__":
    main()
