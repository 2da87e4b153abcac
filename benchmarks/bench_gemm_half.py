"""TFLOP/s of tlgpu's bfloat16 and float16 GEMM (tensor cores, float32 accumulation; docs/precision.md) beside
PyTorch CUDA's bfloat16/float16 matmul and tlgpu's own TF32 GEMM, all in the same run, with each half result's
relative Frobenius error against float64 on the same (rounded) operands and which path ran (tensor cores, or
the float32 fallback where the device has no 16-bit tensor-core path). Issue 26's goal at 4096 on the H100/
H200: at least 0.7x PyTorch's bfloat16 matmul and at least 1.8x tlgpu's TF32.

Usage: python3 benchmarks/bench_gemm_half.py [--sizes 1024 4096] [--seconds 1.0] [--mma] [--json]
       --mma: each size also on the mma.sync rows (TLGPU_TC_WGMMA=0 for those rows: the compute capability 8.x
       path, kernels/matmul_tc.cl's TC_HALF builds), beside the packed wgmma rows.
       python3 benchmarks/bench_gemm_half.py --tags wgb128x128x8s5,wgb256x128x8s3 [--sizes ...]: each packed
       row forced in turn (built with -DTC_SWEEP, so the sweep rows exist), bfloat16 x @ w.T and a @ b.
Square a @ b and a @ b.T (x @ w.T, a linear layer) per size; sizes default to 1024-8192 on GPUs, 256-512 on
CPU devices (PoCL: the float32 fallback, for the record only).
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tlgpu  # noqa: E402
from _util import report  # noqa: E402
from bench_gemm import best_time, load_torch, rel_fro  # noqa: E402


def row_for(n, trans_b, dt, seconds, torch, rng):
    import ml_dtypes
    npdt = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[dt]
    a = rng.standard_normal((n, n), dtype=np.float32).astype(npdt)
    b = rng.standard_normal((n, n), dtype=np.float32).astype(npdt)
    ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
    tbb = tb.T if trans_b else tb
    ref = a.astype(np.float64) @ (b.T if trans_b else b).astype(np.float64)
    flops = 2.0 * n ** 3
    row = {"shape": f"{n}" + (" x@w.T" if trans_b else " a@b"), "dtype": dt}
    info0 = tlgpu._C._gemm_tc()
    got = (ta @ tbb).numpy().astype(np.float64)
    info = tlgpu._C._gemm_tc()
    row["path"] = ("tensor cores (wgmma)" if info["half_launches"] > info0["half_launches"] else
                   "tensor cores (mma.sync)" if info["mma_half_launches"] > info0["mma_half_launches"] else
                   "float32 fallback")
    row["err"] = round(rel_fro(got, ref), 6)
    row["tlgpu_tflops"] = round(flops / best_time(lambda: ta @ tbb, seconds, tlgpu.synchronize) / 1e12, 1)
    if torch is not None:
        tdt = getattr(torch, dt)
        xa = torch.from_numpy(a.astype(np.float32)).cuda().to(tdt)
        xb = torch.from_numpy(b.astype(np.float32)).cuda().to(tdt)
        f = (lambda: xa @ xb.T) if trans_b else (lambda: xa @ xb)
        row["torch_tflops"] = round(flops / best_time(f, seconds, torch.cuda.synchronize) / 1e12, 1)
        row["torch_err"] = round(rel_fro(f().float().cpu().numpy().astype(np.float64), ref), 6)
        row["vs_torch"] = round(row["tlgpu_tflops"] / row["torch_tflops"], 3)
    if tlgpu._C._gemm_tc()["capability"] >= 80 and tlgpu._C._gemm_tc()["forced"] is None:
        fa, fb = tlgpu.tensor(a.astype(np.float32)), tlgpu.tensor(b.astype(np.float32))
        fbb = fb.T if trans_b else fb
        tlgpu.set_matmul_precision("tf32")
        try:
            row["tf32_tflops"] = round(flops / best_time(lambda: fa @ fbb, seconds, tlgpu.synchronize) / 1e12, 1)
        finally:
            tlgpu.set_matmul_precision("highest")
        row["vs_tf32"] = round(row["tlgpu_tflops"] / row["tf32_tflops"], 2)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+")
    ap.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"])
    ap.add_argument("--seconds", type=float, default=1.0, help="rough time per measurement")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table (read by _util.report)")
    ap.add_argument("--tags", help="force each of these packed rows in turn (comma-separated)")
    ap.add_argument("--mma", action="store_true", help="each size also on the mma.sync rows (TLGPU_TC_WGMMA=0)")
    args = ap.parse_args()
    if args.tags:
        rows, torch, rng = [], load_torch(), np.random.default_rng(0)
        for tag in args.tags.split(","):
            tlgpu._C._gemm_tc(tag)
            for n in args.sizes or [4096, 8192]:
                for t in (False, True):
                    rows.append({"tag": tag, **row_for(n, t, args.dtypes[0], args.seconds, torch, rng)})
        tlgpu._C._gemm_tc(None)
        report("GEMM half rows", rows, ["tag", "shape", "dtype", "path", "tlgpu_tflops", "torch_tflops", "vs_torch",
                                        "err"], {"build_options": os.environ.get("TLGPU_BUILD_OPTIONS")})
        return
    cpu = tlgpu.device().type == "cpu"
    sizes = args.sizes or ([256, 512] if cpu else [1024, 2048, 4096, 8192])
    torch = None if cpu else load_torch()
    rng = np.random.default_rng(0)
    rows = []
    for dt in args.dtypes:
        for n in sizes:
            for t in (False, True):
                rows.append(row_for(n, t, dt, args.seconds, torch, rng))
                if args.mma:                              # read at each product (an EACH setting)
                    prev = os.environ.get("TLGPU_TC_WGMMA")
                    os.environ["TLGPU_TC_WGMMA"] = "0"
                    try:
                        rows.append(row_for(n, t, dt, args.seconds, torch, rng))
                    finally:
                        if prev is None:
                            del os.environ["TLGPU_TC_WGMMA"]
                        else:
                            os.environ["TLGPU_TC_WGMMA"] = prev
    report("GEMM bfloat16/float16", rows, ["shape", "dtype", "path", "tlgpu_tflops", "torch_tflops", "vs_torch",
                                           "tf32_tflops", "vs_tf32", "err", "torch_err"],
           {"torch_cuda": torch is not None, "gemm_tc": {k: v for k, v in tlgpu._C._gemm_tc().items() if k != "configs"}})


if __name__ == "__main__":
    main()
