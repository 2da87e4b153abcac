"""Training step of an MLP 784-256-256-10, batch 256, Adam: ms/step after warm-up and host waits per step,
with and without reading the loss; next to PyTorch on the same hardware class when torch is importable
(CUDA when available, else CPU), in the same run. On CPU devices with the BLAS path (docs/cpu.md) the step
also runs on the OpenCL GEMM kernels (the path off), in the same run; there each nn.Linear is one command
forward (the fused linear: bias written into C, then sgemm) and one for its weight and bias gradients.
Where tlgpu has its TF32 tensor-core path (NVIDIA, compute capability >= 8.0) also a TF32 row each:
tlgpu.set_matmul_precision("tf32") and PyTorch with allow_tf32.
The `jit` rows run the same update through tlgpu.jit (docs/jit.md): one trace replayed from C.
The `autocast bfloat16` rows run the forward under tlgpu.autocast(dtype=tlgpu.bfloat16) (float32 parameters,
Adam in float32; docs/precision.md) beside PyTorch under torch.autocast(dtype=torch.bfloat16), same run. The
`bfloat16 model` rows: the model and the batch in bfloat16 (`model.to(bfloat16)`, Adam on bfloat16
parameters), beside PyTorch's `model.to(torch.bfloat16)`.
Usage: python benchmarks/bench_train.py [--json] [--steps N]"""
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
import tlgpu  # noqa: E402
from tlgpu import nn  # noqa: E402
from tlgpu.nn import functional as F  # noqa: E402
from _util import report  # noqa: E402

STEPS = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 50
BATCH, SIZES = 256, (784, 256, 256, 10)


def data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((BATCH, SIZES[0])).astype(np.float32), rng.integers(0, 10, BATCH).astype(np.int32)


def make_update(autocast=False, half=False):
    """(update, x, y): the benchmark's MLP, Adam and one batch; update(x, y) is one training step -> loss
    (autocast: the forward and the loss under tlgpu.autocast(bfloat16); half: model and batch in bfloat16)."""
    x_np, y_np = data()
    x, y = tlgpu.tensor(x_np), tlgpu.tensor(y_np)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    if half:
        model, x = model.to(tlgpu.bfloat16), x.to(tlgpu.bfloat16)
    opt = tlgpu.optim.Adam(model.parameters(), lr=1e-3)

    def update(x, y):
        with tlgpu.autocast(dtype=tlgpu.bfloat16, enabled=autocast):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return update, x, y


def bench_tlgpu(read_loss, jit=False, autocast=False, half=False):
    update, x, y = make_update(autocast, half)
    update = tlgpu.jit(update) if jit else update       # docs/jit.md: call 1 eager, 2 traced, then replays

    def step():
        loss = update(x, y)
        return float(loss) if read_loss else None

    for _ in range(5):
        step()
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    t0 = time.perf_counter()
    for _ in range(STEPS):
        step()
    tlgpu.synchronize()
    dt = (time.perf_counter() - t0) / STEPS
    s = tlgpu.stream_stats()
    return dt, (s["waits"] - 1) / STEPS, s["enqueued"] / STEPS


def bench_torch(read_loss, tf32=False, autocast=False, half=False):
    try:
        import torch
    except ImportError:
        return None
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    x_np, y_np = data()
    x, y = torch.tensor(x_np, device=dev), torch.tensor(y_np, device=dev).long()
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10)).to(dev)
    if half:
        model, x = model.to(torch.bfloat16), x.to(torch.bfloat16)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        with torch.autocast(device_type=dev, dtype=torch.bfloat16, enabled=autocast):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item() if read_loss else None

    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    for _ in range(5):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(STEPS):
        step()
    sync()
    return (time.perf_counter() - t0) / STEPS, dev


def main():
    rows = []
    blas = tlgpu.device().type == "cpu" and tlgpu._C._cpu_blas()["loaded"]   # docs/cpu.md
    for read in (False, True):
        for jit in (False, True):
            dt, waits, enq = bench_tlgpu(read, jit)
            rows.append({"what": f"tlgpu{', BLAS' if blas else ''}{', jit' if jit else ''}, loss "
                                 f"{'read' if read else 'not read'}",
                         "ms/step": dt * 1e3, "waits/step": waits, "enqueues/step": enq})
        if blas:                                       # the same step on the OpenCL GEMM kernels
            tlgpu._C._cpu_blas(enable=False)
            dt, waits, enq = bench_tlgpu(read)
            tlgpu._C._cpu_blas(enable=True)
            rows.append({"what": f"tlgpu, OpenCL kernels, loss {'read' if read else 'not read'}",
                         "ms/step": dt * 1e3, "waits/step": waits, "enqueues/step": enq})
        t = bench_torch(read)
        if t is not None:
            rows.append({"what": f"PyTorch {t[1]}, loss {'read' if read else 'not read'}", "ms/step": t[0] * 1e3})
    for jit in (False, True):                          # mixed precision: bfloat16 products on both sides
        dt, waits, enq = bench_tlgpu(False, jit, autocast=True)
        rows.append({"what": f"tlgpu{', BLAS' if blas else ''}, autocast bfloat16{', jit' if jit else ''}, loss not "
                             f"read", "ms/step": dt * 1e3, "waits/step": waits, "enqueues/step": enq})
    t = bench_torch(False, autocast=True)
    if t is not None:
        rows.append({"what": f"PyTorch {t[1]} autocast bfloat16, loss not read", "ms/step": t[0] * 1e3})
    for jit in (False, True):                          # bfloat16 parameters and batch on both sides
        dt, waits, enq = bench_tlgpu(False, jit, half=True)
        rows.append({"what": f"tlgpu{', BLAS' if blas else ''}, bfloat16 model{', jit' if jit else ''}, loss not read",
                     "ms/step": dt * 1e3, "waits/step": waits, "enqueues/step": enq})
    t = bench_torch(False, half=True)
    if t is not None:
        rows.append({"what": f"PyTorch {t[1]} bfloat16 model, loss not read", "ms/step": t[0] * 1e3})
    if tlgpu._C._gemm_tc()["capability"] >= 80:         # the TF32 rows: tensor cores on both sides
        tlgpu.set_matmul_precision("tf32")
        for jit in (False, True):
            dt, waits, enq = bench_tlgpu(False, jit)
            rows.append({"what": f"tlgpu TF32{', jit' if jit else ''}, loss not read", "ms/step": dt * 1e3,
                         "waits/step": waits, "enqueues/step": enq})
        tlgpu.set_matmul_precision("highest")
        t = bench_torch(False, tf32=True)
        if t is not None:
            rows.append({"what": f"PyTorch {t[1]} TF32, loss not read", "ms/step": t[0] * 1e3})
    report(f"MLP 784-256-256-10 training step, batch {BATCH}, Adam ({STEPS} steps)", rows,
           ["what", "ms/step", "waits/step", "enqueues/step"])


if __name__ == "__main__":
    main()
