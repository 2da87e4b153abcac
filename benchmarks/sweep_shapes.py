"""GEMM rows on the shapes real models use (not only squares), for the size rules of csrc/gemm/gemm_tc.c and
csrc/gemm/gemm_sg.c: each shape (M x K x N, a layout: nn a @ b, nt a @ w.T, tn g.T @ x, tt, optionally batched)
timed with the row the size rule picks ("auto") and with each listed row forced, in TF32 and in float32,
beside PyTorch CUDA (TF32 off and on) when torch is importable. Rows that exist only in sweep builds need
TLGPU_BUILD_OPTIONS="-DTC_SWEEP -DSG_SWEEP". One table line and one JSON line per measurement.

Usage: TLGPU_DEVICE=nvidia python3 benchmarks/sweep_shapes.py [--tc wgb128x128x8s5,...] [--sg 128x64x16,...]
       [--shapes 512x4096x11008nt ...] [--seconds 0.2]"""
import argparse
import json
import os
import re
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import tlgpu  # noqa: E402
from bench_gemm import best_time, load_torch  # noqa: E402

SHAPES = ["1024x1024x1024nt", "1536x1536x1536nt", "2048x2048x2048nn", "2048x2048x2048nt", "4096x4096x4096nn",
          "256x4096x4096nt", "512x4096x4096nt", "4096x512x4096tn", "512x4096x4096nn", "512x4096x11008nt",
          "4096x1024x4096nt", "8x1024x1024x1024nn"]


def parse(s):
    m = re.fullmatch(r"(?:(\d+)x)?(\d+)x(\d+)x(\d+)(nn|nt|tn|tt)", s)
    if m is None:
        sys.exit(f"sweep_shapes: bad shape {s!r} (e.g. 512x4096x11008nt, 8x1024x1024x1024nn)")
    b, M, K, N, lay = m.groups()
    return (int(b) if b else 0), int(M), int(K), int(N), lay


def operands(rng, batch, M, K, N, lay):
    pre = (batch,) if batch else ()
    a = rng.standard_normal(pre + ((K, M) if lay == "tn" else (M, K)), dtype=np.float32)
    b = rng.standard_normal(pre + ((N, K) if lay in ("nt", "tt") else (K, N)), dtype=np.float32)
    return a, b


def product(x, y, lay):
    return (x.transpose(-1, -2) if lay[0] == "t" else x) @ (y.transpose(-1, -2) if lay[1] == "t" else y)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tc", default="wg128x128x16s3,wgb128x128x8s5,wgb64x128x16s3,wgb128x64x16s3")
    ap.add_argument("--sg", default="128x128x16t16x8,128x64x16,128x128x8")
    ap.add_argument("--shapes", nargs="+", default=SHAPES)
    ap.add_argument("--seconds", type=float, default=0.2)
    args = ap.parse_args()
    torch, rng = load_torch(), np.random.default_rng(0)
    tc = tlgpu._C._gemm_tc()["capability"] >= 80
    print(f"device: {tlgpu.device().name} ({tlgpu.device().platform})")
    print(f"| shape | mode | row | TFLOP/s | rel err |\n|---|---|---|---|---|")
    for s in args.shapes:
        batch, M, K, N, lay = parse(s)
        a, b = operands(rng, batch, M, K, N, lay)
        flops = 2.0 * M * N * K * max(batch, 1)
        ref = product(a.astype(np.float64), b.astype(np.float64), lay)
        ta = tlgpu.tensor(a)
        tb = tlgpu.tensor(b)

        def emit(mode, row, t, got):
            err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
            print(f"| {s} | {mode} | {row} | {flops / t / 1e12:.1f} | {err:.2e} |")
            print("JSON " + json.dumps({"shape": s, "mode": mode, "row": row, "tflops": flops / t / 1e12, "err": err}))

        if torch is not None:
            xa, xb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
            for tf32 in (False, True):
                torch.backends.cuda.matmul.allow_tf32 = tf32
                t = best_time(lambda: product(xa, xb, lay), args.seconds, torch.cuda.synchronize)
                emit("torch", "tf32" if tf32 else "fp32", t, product(xa, xb, lay).cpu().numpy())
            torch.backends.cuda.matmul.allow_tf32 = False
        for mode, rows, force in (("tf32", args.tc, tlgpu._C._gemm_tc), ("fp32", args.sg, tlgpu._C._gemm_sg)):
            if mode == "tf32" and not tc:
                continue
            tlgpu.set_matmul_precision("tf32" if mode == "tf32" else "highest")
            for row in ["auto"] + [r for r in rows.split(",") if r]:
                try:
                    force(None if row == "auto" else row)
                    t = best_time(lambda: product(ta, tb, lay), args.seconds, tlgpu.synchronize)
                    emit(mode, row, t, product(ta, tb, lay).numpy())
                except Exception as e:                 # a row that fails to build or launch
                    print(f"| {s} | {mode} | {row} | error: {type(e).__name__}: {str(e)[:200]} | |")
            force(None)
        tlgpu.set_matmul_precision("highest")


if __name__ == "__main__":
    main()
