"""The GEMM store epilogue (kernels/mm_epi.h) per product kernel: milliseconds of y = relu(x @ w.T * 0.5 + b + h)
(a linear layer's product, a scale, its bias, a residual, ReLU) jitted with the epilogue pass (one command
where the product's kernel takes all four steps) and jitted with fuse=False (the product, then four elementwise
commands), and of eager _C.linear(x, w, b, activation="relu") (one command where the kernel fuses the bias
and ReLU) against x @ w.T + b then relu; plus the plain product x @ w.T alone, the figure to compare between
a build without the epilogue and one with it (the epi == 0 path must not slow down). Precisions: "highest"
(float32: matmul_sg.cl on NVIDIA, matmul.cl elsewhere) and, where the device has the tensor-core path, "tf32"
(packed wgmma, wgmma or mma.sync by the size rule). The kernel column is the fused command's name.
Usage: python3 benchmarks/bench_epilogue.py [--sizes 1024 4096] [--json]"""
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
import tlgpu  # noqa: E402
from tlgpu import _C  # noqa: E402
from _util import median_time, report  # noqa: E402


def sizes():
    if "--sizes" in sys.argv:
        i = sys.argv.index("--sizes") + 1
        out = []
        while i < len(sys.argv) and sys.argv[i].isdigit():
            out.append(int(sys.argv[i]))
            i += 1
        return out
    return [1024, 4096] if tlgpu.device().type == "gpu" else [256, 512]


def timed(fn, seconds=0.2):
    """Milliseconds a call of fn: the median of rounds of enough calls to last about `seconds`."""
    fn()
    tlgpu.synchronize()
    t0 = time.perf_counter()
    fn()
    tlgpu.synchronize()
    reps = max(1, min(1000, int(seconds / max(time.perf_counter() - t0, 1e-6))))

    def run():
        for _ in range(reps):
            fn()
        tlgpu.synchronize()
    return median_time(run, reps=5, warmup=1) / reps * 1e3


def row(n, precision):
    tlgpu.set_matmul_precision(precision)
    rng = np.random.default_rng(0)
    x, w, h = (tlgpu.tensor(rng.standard_normal((n, n)).astype(np.float32)) for _ in range(3))
    b = tlgpu.tensor(rng.standard_normal(n).astype(np.float32))

    def f(x, w, b, h):
        return (x @ w.T * 0.5 + b + h).relu()
    fused, apart = tlgpu.jit(f), tlgpu.jit(f, fuse=False)
    with tlgpu.no_grad():
        r = {"n": n, "precision": precision,
             "plain_ms": timed(lambda: x @ w.T),
             "jit_fused_ms": timed(lambda: fused(x, w, b, h)),
             "jit_apart_ms": timed(lambda: apart(x, w, b, h)),
             "linear_act_ms": timed(lambda: _C.linear(x, w, b, activation="relu")),
             "linear_then_relu_ms": timed(lambda: (x @ w.T + b).relu())}
    gemm = [c for c in fused.commands() if c.startswith(("tl_gemm", "tl_matmul"))]
    r["kernel"] = gemm[0] if gemm else "?"
    r["commands"] = f"{len(fused.commands())} / {len(apart.commands())}"
    return r


def main():
    _C._cpu_blas(enable=False)                          # CPU devices: the OpenCL kernels, not the host BLAS
    precisions = ["highest"] + (["tf32"] if _C._gemm_tc()["capability"] >= 80 else [])
    rows = [row(n, p) for p in precisions for n in sizes()]
    report("GEMM store epilogue: relu(x @ w.T * 0.5 + b + h), square n", rows,
           ["n", "precision", "kernel", "commands", "plain_ms", "jit_fused_ms", "jit_apart_ms", "linear_act_ms",
            "linear_then_relu_ms"])


if __name__ == "__main__":
    main()
