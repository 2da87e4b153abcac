"""Sweep of the NVIDIA float32 GEMM (kernels/matmul_sg.cl): every tile configuration, forced in turn with
tlgpu._C._gemm_sg(tag), timed on a @ b (nn) and a @ w.T (nt) at each size, beside tlgpu's other float32 path
(TLGPU_SG=off, same process) and PyTorch CUDA float32 (TF32 off) when torch is importable, with each result's
max relative error against a float64 numpy reference (sizes <= --check, 2048 by default).

Each build variant (--variants: extra build options, e.g. -DSG_PAD=0, -DSG_LN=4, -DSG_GROUP=4, -DSG_RDB=1,
-DSG_T4=1, -DSG_GEN=1, optionally followed by @tag,tag to time only those rows) runs in a child process
with TLGPU_BUILD_OPTIONS="-DSG_SWEEP <variant>" (all the tags built), plus -cl-nv-verbose on NVIDIA so the
registers and spills of each kernel (ptxas lines of tlgpu._C._build_log("matmul_sg")) are printed. The
baseline and PyTorch run in the first variant's child only. One table line and one JSON line per row.
The default: every row at 2048 and 4096 (checked against float64 at 2048), then the knobs of the
generalised body (SG_RDB, SG_T4, SG_LN=4 on the two production rows and the bigger work-item tiles, SG_GEN
on the production rows); SG_PAD=0 and SG_GROUP 4 / 16 were within 2 % on the H100 and are left out.

Usage: TLGPU_DEVICE=nvidia python3 benchmarks/sweep_sgemm.py [--sizes 2048 4096] [--tags a,b]
       [--variants=';-DSG_PAD=0;-DSG_RDB=1@128x128x8'] [--seconds 0.3] [--check 2048]
On a device other than NVIDIA (PoCL) the kernel runs only with the test hooks (TLGPU_SG=force, a
TLGPU_TEST_HOOKS=1 build): e.g. python3 benchmarks/sweep_sgemm.py --sizes 128 256 --variants=''.
"""
import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
BIG = "128x128x8t16x8,128x128x8t8x16,128x128x16t16x8,256x128x8t16x8,128x256x8t8x16"
DEFAULT_VARIANTS = ["", f"-DSG_RDB=1@128x64x16,128x128x8,{BIG}", f"-DSG_T4=1@128x64x16,128x128x8,{BIG}",
                    f"-DSG_LN=4@128x64x16,128x128x8,{BIG}", "-DSG_GEN=1@128x64x16,128x128x8",
                    # 168-189 registers locally for the 8x8 rows: one 256-item work-group an SM; 128, two
                    "-DSG_MAXNREG=128@128x64x16,128x128x8,128x64x8",
                    # cp.async for nn's B and tt's A (on by default on NVIDIA sm_80+): without it, and for both of tn's
                    "-DSG_ASYNC=0@128x128x16t16x8", "-DSG_ASYNC=2@128x128x16t16x8"]


def regs_lines(log, names):
    """{kernel: 'N registers, S spill stores, L spill loads'} from an NVIDIA -cl-nv-verbose build log."""
    lines, out = log.splitlines(), {}
    for name in names:
        at = [i for i, m in enumerate(lines) if f"'{name}'" in m and "ompiling" in m]
        if not at:
            continue
        got = [re.sub(r"\s+", " ", m.replace("ptxas info    :", "")).strip() for m in lines[at[0] + 1:at[0] + 5]
               if "Used" in m or "spill" in m]
        out[name] = "; ".join(got)
    return out


def rel_max(got, ref):
    return float(np.abs(got - ref).max() / np.abs(ref).max())


def child(args):
    import tlgpu
    from bench_gemm import best_time, load_torch, torch_gflops
    C = tlgpu._C
    info = C._gemm_sg()
    if not info["nvidia"]:
        os.environ["TLGPU_SG"] = "force"          # test builds only; elsewhere the kernel never runs
    tags = [c["tag"] for c in info["configs"]]
    if args.tags:
        tags = [t for t in tags if t in args.tags.split(",")]
    torch = load_torch() if args.baseline else None
    rng = np.random.default_rng(0)
    for n in args.sizes:
        a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
        ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
        flops = 2.0 * n ** 3
        for lay in ("nn", "nt"):
            bb = tb.T if lay == "nt" else tb
            ref = (a.astype(np.float64) @ (b.T if lay == "nt" else b).astype(np.float64)) if n <= args.check else None
            base = {"n": n, "layout": lay, "variant": args.variant}
            if args.baseline:
                saved = os.environ.get("TLGPU_SG")
                os.environ["TLGPU_SG"] = "off"
                row = dict(base, kernel="old", gflops=flops / best_time(lambda: ta @ bb, args.seconds,
                                                                         tlgpu.synchronize) / 1e9)
                if ref is not None:
                    row["err"] = rel_max((ta @ bb).numpy(), ref)
                emit(row)
                if saved is None:
                    del os.environ["TLGPU_SG"]
                else:
                    os.environ["TLGPU_SG"] = saved
                if torch is not None:
                    g, out = torch_gflops(torch, a, b, lay == "nt", flops, args.seconds, False)
                    row = dict(base, kernel="torch", gflops=g)
                    if ref is not None:
                        row["err"] = rel_max(out, ref)
                    emit(row)
            for tag in tags:
                C._gemm_sg(tag)
                row = dict(base, kernel=tag)
                try:
                    before = C._gemm_sg()["launches"]
                    out = (ta @ bb).numpy()
                    row["ran"] = C._gemm_sg()["launches"] > before
                    if ref is not None:
                        row["err"] = rel_max(out, ref)
                    row["gflops"] = flops / best_time(lambda: ta @ bb, args.seconds, tlgpu.synchronize) / 1e9
                except Exception as e:              # a kernel that fails to build or launch: report, go on
                    row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
                emit(row)
            C._gemm_sg(None)
    names = [f"tl_gemm_sg_{lay}_{t}_f32" for t in tags for lay in ("nn", "nt", "tn", "tt")]
    try:
        regs = regs_lines(C._build_log("matmul_sg"), names)
    except Exception as e:
        regs = {"error": str(e)[:200]}
    for k, v in regs.items():
        print(f"REGS {args.variant or '(default)'} {k}: {v}", flush=True)
    print("JSON " + json.dumps({"variant": args.variant, "regs": regs}), flush=True)


def emit(row):
    cells = f"{row['kernel']:>15} {row['layout']} n={row['n']:<5} {row['variant'] or '(default)':<14}"
    if "error" in row:
        print(f"{cells} ERROR {row['error']}", flush=True)
    else:
        bad = "" if row.get("ran", True) else " (DID NOT RUN matmul_sg)"
        err = f" err={row['err']:.2e}" if "err" in row else ""
        print(f"{cells} {row['gflops']:10.1f} GFLOP/s{err}{bad}", flush=True)
    print("JSON " + json.dumps(row), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096])
    ap.add_argument("--tags", default="", help="comma-separated configuration tags (default: all)")
    ap.add_argument("--variants", default=None, help="';'-separated extra build options, one child each "
                    "(an empty item: the default build), e.g. --variants=';-DSG_PAD=0'")
    ap.add_argument("--seconds", type=float, default=0.3)
    ap.add_argument("--check", type=int, default=2048, help="check results against float64 up to this size")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--variant", default="", help=argparse.SUPPRESS)
    ap.add_argument("--baseline", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    variants = DEFAULT_VARIANTS if args.variants is None else args.variants.split(";")
    nv = "nvidia" in os.environ.get("TLGPU_DEVICE", "").lower()
    for i, item in enumerate(variants):
        v, _, only = item.partition("@")                 # "options@tag,tag": time only those rows
        v = v.strip()
        tags = [t for t in only.split(",") if t and (not args.tags or t in args.tags.split(","))] if only else []
        if only and not tags:
            continue
        opts = " ".join(x for x in (os.environ.get("TLGPU_BUILD_OPTIONS", ""), "-DSG_SWEEP", v,
                                    "-cl-nv-verbose" if nv else "") if x)
        env = dict(os.environ, TLGPU_BUILD_OPTIONS=opts, TLGPU_CACHE_DIR="")
        cmd = [sys.executable, os.path.abspath(__file__), "--child", f"--variant={v}", f"--seconds={args.seconds}",
               f"--check={args.check}", f"--tags={','.join(tags) or args.tags}", "--sizes", *map(str, args.sizes)]
        print(f"# variant {v or '(default)'}: TLGPU_BUILD_OPTIONS={opts!r}", flush=True)
        r = subprocess.run(cmd + (["--baseline"] if i == 0 else []), env=env, timeout=1800)
        if r.returncode != 0:
            print(f"# variant {v or '(default)'} FAILED (exit {r.returncode})", flush=True)


if __name__ == "__main__":
    main()
