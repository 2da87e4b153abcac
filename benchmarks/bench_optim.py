"""One optimizer step over bench_train's MLP parameters (784-256-256-10: six tensors, 269,322 values) and a
small policy's (8-64-64-4: six tensors, 4,996 values, where launches are the cost), each launch mode in the
same run (tlgpu/optim's _launch_mode): "chunked" (every parameter of a step in one launch,
each work-item a 4096-element chunk of one parameter: the CPU devices' default), "multi" (tl_adam8: Adam over 8
parameters a launch, an element a work-item: the GPUs' default for Adam without amsgrad) and "per_param" (one
launch a parameter). us per step (50 steps, then a sync; median of 7) and launches per step.
Usage: python benchmarks/bench_optim.py [--json] [--steps N] [--dtypes float32,float16,bfloat16]"""
import os
import sys
import time

import ml_dtypes
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
import tlgpu  # noqa: E402
import tlgpu.optim as optim  # noqa: E402
from _util import report  # noqa: E402

STEPS = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 50
DTYPES = sys.argv[sys.argv.index("--dtypes") + 1].split(",") if "--dtypes" in sys.argv else ["float32"]
NP = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
NETS = {"MLP 784-256-256-10": [(256, 784), (256,), (256, 256), (256,), (10, 256), (10,)],
        "policy 8-64-64-4": [(64, 8), (64,), (64, 64), (64,), (4, 64), (4,)]}
CASES = [("Adam", lambda ps: optim.Adam(ps, lr=1e-3), ("chunked", "multi", "per_param")),
         ("Adam amsgrad", lambda ps: optim.Adam(ps, lr=1e-3, amsgrad=True), ("chunked", "per_param")),
         ("AdamW", lambda ps: optim.AdamW(ps, lr=1e-3), ("chunked", "multi", "per_param")),
         ("SGD momentum", lambda ps: optim.SGD(ps, lr=1e-2, momentum=0.9), ("chunked", "per_param")),
         ("RAdam", lambda ps: optim.RAdam(ps, lr=1e-3), ("chunked", "per_param")),
         ("RMSprop (A2C's)", lambda ps: optim.RMSprop(ps, lr=7e-4, alpha=0.99, eps=1e-5), ("chunked", "per_param"))]


def run(make, mode, dtype, shapes):
    rng = np.random.default_rng(0)
    ps = [tlgpu.tensor(rng.standard_normal(s).astype(dtype), requires_grad=True) for s in shapes]
    for p in ps:
        p.grad = tlgpu.tensor(rng.standard_normal(p.shape).astype(dtype))
    opt = make(ps)
    optim._MODE = mode
    for _ in range(3):
        opt.step()
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    opt.step()
    launches = tlgpu.stream_stats()["enqueued"]
    times = []
    for _ in range(7):
        tlgpu.synchronize()
        t0 = time.perf_counter()
        for _ in range(STEPS):
            opt.step()
        tlgpu.synchronize()
        times.append((time.perf_counter() - t0) / STEPS)
    return float(np.median(times)) * 1e6, launches


def main():
    saved = optim._MODE
    rows = []
    for net, shapes in NETS.items():
        for dtype in DTYPES:
            for what, make, modes in CASES:
                for mode in modes:
                    us, launches = run(make, mode, NP[dtype], shapes)
                    rows.append({"parameters": net, "optimizer": what, "dtype": dtype, "mode": mode, "us/step": us,
                                 "launches": launches})
    optim._MODE = saved
    report(f"Optimizer step over 6 parameters, by launch mode ({tlgpu.device().name})", rows,
           ["parameters", "optimizer", "dtype", "mode", "us/step", "launches"])


if __name__ == "__main__":
    main()
