"""Where a Nature-CNN training step spends its time: each GEMM of the step at its real shape and operand
layout (forward W @ cols, weight gradient g @ cols.T, input gradient W.T @ g, the linear layers), each conv
layer forward (with autograd recording, and under no_grad: an actor's forward, which on a CPU device with the
BLAS path is one native command, docs/cpu.md) and forward+backward, and the whole step, for tlgpu and (when
importable) PyTorch on the same device. Usage: python benchmarks/profile_cnn.py [--batch N]"""
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
import tlgpu  # noqa: E402
from tlgpu import nn  # noqa: E402
from tlgpu.nn import functional as F  # noqa: E402

B = int(sys.argv[sys.argv.index("--batch") + 1]) if "--batch" in sys.argv else 256
LAYERS = [(4, 32, 8, 4, 84), (32, 64, 4, 2, 20), (64, 64, 3, 1, 9)]   # C, O, k, stride, input side


def ms(fn, sync, iters=10):
    fn()
    sync()
    best = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        sync()
        best.append((time.perf_counter() - t0) / iters * 1e3)
    return min(best)


def products():
    """(name, M, K, N, a_t, b_t): a is [M, K] (stored [K, M] if a_t), b is [K, N] (stored [N, K] if b_t)."""
    out = []
    for C, O, k, s, H in LAYERS:
        OH = (H - k) // s + 1
        CKK, NL = C * k * k, B * OH * OH
        out += [(f"conv{C}->{O} fwd W@cols", O, CKK, NL, 0, 0), (f"conv{C}->{O} dW g@cols.T", O, NL, CKK, 0, 1),
                (f"conv{C}->{O} dcols W.T@g", CKK, O, NL, 1, 0)]
    out += [("fc1 fwd x@W.T", B, 3136, 512, 0, 1), ("fc1 dW g.T@x", 512, B, 3136, 1, 0),
            ("fc1 dx g@W", B, 512, 3136, 0, 0)]
    return out


def main():
    rng = np.random.default_rng(0)
    try:
        import torch
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        tsync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    except ImportError:
        torch = None
    print(f"device: {tlgpu.device()}  batch {B}" + (f"  torch {torch.__version__} {dev}" if torch else ""))
    print(f"{'product':28s} {'M':>6s} {'K':>7s} {'N':>7s} {'tlgpu ms':>9s} {'GFLOP/s':>8s} {'torch ms':>9s}")
    for name, M, K, N, at, bt in products():
        a = rng.standard_normal((K, M) if at else (M, K), dtype=np.float32)
        b = rng.standard_normal((N, K) if bt else (K, N), dtype=np.float32)
        ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
        ta, tb = ta.T if at else ta, tb.T if bt else tb
        t = ms(lambda: ta @ tb, tlgpu.synchronize)
        line = f"{name:28s} {M:6d} {K:7d} {N:7d} {t:9.3f} {2 * M * K * N / t / 1e6:8.0f}"
        if torch:
            xa, xb = torch.tensor(a, device=dev), torch.tensor(b, device=dev)
            xa, xb = xa.T if at else xa, xb.T if bt else xb
            line += f" {ms(lambda: xa @ xb, tsync):9.3f}"
        print(line)
    print(f"{'layer':28s} {'fwd ms':>9s} {'no_grad ms':>11s} {'fwd+bwd ms':>11s} {'torch fwd':>10s} {'torch f+b':>10s}")
    for C, O, k, s, H in LAYERS:
        x = rng.standard_normal((B, C, H, H), dtype=np.float32)
        conv = nn.Conv2d(C, O, k, stride=s)
        tx = tlgpu.tensor(x)
        tx.requires_grad = C != 4                      # the first layer's input is the frames: no grad

        def fb():
            y = conv(tx)
            y.sum().backward()

        def nograd():
            with tlgpu.no_grad():
                conv(tx)
        line = f"conv {C}->{O} k{k} s{s} on {H}x{H}{'':6s} {ms(lambda: conv(tx), tlgpu.synchronize):9.3f} " \
               f"{ms(nograd, tlgpu.synchronize):11.3f} {ms(fb, tlgpu.synchronize):11.3f}"
        if torch:
            tc = torch.nn.Conv2d(C, O, k, stride=s).to(dev)
            xx = torch.tensor(x, device=dev, requires_grad=C != 4)

            def tfb():
                tc(xx).sum().backward()
            line += f" {ms(lambda: tc(xx), tsync):10.3f} {ms(tfb, tsync):10.3f}"
        print(line)
    net = nn.Sequential(nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
                        nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(),
                        nn.Linear(512, 6))
    opt = tlgpu.optim.Adam(net.parameters(), lr=2.5e-4)
    x = tlgpu.tensor(rng.random((B, 4, 84, 84), dtype=np.float32))
    y = tlgpu.tensor(rng.integers(0, 6, B).astype(np.int32))

    def fwd():
        with tlgpu.no_grad():
            net(x)

    def fwdbwd():
        F.cross_entropy(net(x), y).backward()

    def step():
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    tlgpu.reset_stream_stats()
    step()
    tlgpu.synchronize()
    n = tlgpu.stream_stats()["enqueued"]
    print(f"step: fwd {ms(fwd, tlgpu.synchronize):.3f} ms, fwd+bwd {ms(fwdbwd, tlgpu.synchronize):.3f} ms, "
          f"fwd+bwd+Adam {ms(step, tlgpu.synchronize):.3f} ms, {n} commands enqueued per step")


if __name__ == "__main__":
    main()
