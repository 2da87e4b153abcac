"""GEMM tile-parameter sweep: GFLOP/s of tlgpu's tiled kernel (TLGPU_MATMUL_KERNEL=gemm: no small-problem
switch) for each parameter set, one subprocess per set (parameters are read once per process), plus
CLBlast on the same device once for reference. On NVIDIA the build also reports registers per work-item
(-cl-nv-verbose). Used to choose the table entries in csrc/gemm/gemm_params.c.

Usage: python3 benchmarks/tune_gemm.py [--sizes 512 1024 4096] [--seconds 0.3] [--nt] [PARAMS ...]
where PARAMS are TLGPU_GEMM_PARAMS strings ("MWG=64,NWG=64,...", optionally "|extra build options");
a built-in list when none are given.
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = [                                     # on top of the device's table entry
    "", "DBUF=1", "INTERIOR=1", "DBUF=1,INTERIOR=1", "KWG=8", "KWG=8,DBUF=1", "VW=2,DBUF=1",
    "MDIMC=32,NDIMC=16,DBUF=1", "MDIMC=16,NDIMC=32,DBUF=1",
    "MWG=128,NWG=64,DBUF=1", "MWG=64,NWG=128,DBUF=1", "MWG=64,NWG=64,PREFETCH=1,DBUF=0",
    "MWG=64,NWG=64,DBUF=1", "MWG=64,NWG=64,KWG=32,DBUF=1", "MWG=64,NWG=64,MDIMC=8,NDIMC=8,DBUF=1",
    "MWG=64,NWG=32,MDIMC=16,NDIMC=8,DBUF=1", "MWG=32,NWG=64,MDIMC=8,NDIMC=16,DBUF=1",
    "MWG=32,NWG=32,MDIMC=8,NDIMC=8,DBUF=1", "MWG=32,NWG=32,MDIMC=8,NDIMC=8,KWG=32,DBUF=1",
    "MWG=32,NWG=32,MDIMC=16,NDIMC=8,DBUF=1",
]

CHILD = r"""
import json, sys, numpy as np
sys.path.insert(0, {root!r}); sys.path.insert(0, {here!r})
import tlgpu
from bench_gemm import best_time, load_clblast
sizes, seconds, nt, ref = {sizes!r}, {seconds!r}, {nt!r}, {ref!r}
rng = np.random.default_rng(0)
out = {{"params": tlgpu._C._gemm_params(), "rows": []}}
cl = load_clblast() if ref else None
for n in sizes:
    for trans in ([False, True] if nt else [False]):
        a = tlgpu.tensor(rng.standard_normal((n, n), dtype=np.float32))
        b = tlgpu.tensor(rng.standard_normal((n, n), dtype=np.float32))
        bb = b.T if trans else b
        an, bn = a.numpy().astype(np.float64), bb.numpy().astype(np.float64)
        err = float(np.abs((a @ bb).numpy() - an @ bn).max() / np.abs(an @ bn).max())
        row = {{"n": n, "nt": trans, "err": err,
                "gflops": 2.0 * n ** 3 / best_time(lambda: a @ bb, seconds, tlgpu.synchronize) / 1e9}}
        if cl is not None:
            c = tlgpu.empty(n, n)
            row["clblast"] = 2.0 * n ** 3 / best_time(lambda: cl.gemm(a, b, c, trans), seconds,
                                                     tlgpu.synchronize) / 1e9
        out["rows"].append(row)
log = tlgpu._C._build_log("matmul")
lines = log.splitlines()
at = [i for i, m in enumerate(lines) if "function 'tl_gemm_f32'" in m]
out["regs"] = lines[at[0] + 1:at[0] + 4] if at else []
print("RESULT " + json.dumps(out))
"""


def run(params, sizes, seconds, nt, ref):
    params, _, opts = params.partition("|")
    env = dict(os.environ, TLGPU_GEMM_PARAMS=params, TLGPU_MATMUL_KERNEL="gemm", TLGPU_CACHE_DIR="",
               TLGPU_BUILD_OPTIONS=opts)
    if "nvidia" in env.get("TLGPU_DEVICE", "").lower():
        env["TLGPU_BUILD_OPTIONS"] += " -cl-nv-verbose"
    code = CHILD.format(root=os.path.dirname(HERE), here=HERE, sizes=sizes, seconds=seconds, nt=nt, ref=ref)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": (r.stderr or r.stdout).strip().splitlines()[-3:]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("params", nargs="*")
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    ap.add_argument("--seconds", type=float, default=0.3)
    ap.add_argument("--nt", action="store_true", help="also x @ w.T")
    args = ap.parse_args()
    sets = args.params or DEFAULT
    for i, p in enumerate(sets):
        res = run(p, args.sizes, args.seconds, args.nt, ref=i == 0)
        if "error" in res:
            print(f"{p or '(table)'}: FAILED {res['error']}", flush=True)
            continue
        cells = " ".join(f"{r['n']}{'t' if r['nt'] else ''}={r['gflops']:.0f}" +
                         (f"(clblast {r['clblast']:.0f})" if "clblast" in r else "") for r in res["rows"])
        bad = [r for r in res["rows"] if r["err"] > 1e-4]
        regs = "; ".join(re.sub(r"\s+", " ", m.replace("ptxas info    :", "")) for m in res["regs"]
                         if "Used" in m or "spill" in m)[:160]
        print(f"{p or '(table)'}: {cells}{' WRONG' if bad else ''} | {regs}", flush=True)


if __name__ == "__main__":
    main()
