"""Diagnoses the wgmma TF32 rows (kernels/matmul_wg.cl) on an NVIDIA device of compute capability 9.0: builds
the family (patched PTX, ptx_patch.h), then for each row runs x @ w.T on one-hot rows of x against w[n, k] =
16n + k, so each output names the (n, k) the hardware used for it, and prints how many outputs are right
and the first wrong ones decoded; then random integer products at tile edges. Exit status 1 when a row is
wrong or fails (benchmarks/sweep_wg.sh keeps only the rows that pass). Usage:
TLGPU_PTX_DUMP=dir python3 benchmarks/diag_wg.py [tags...]"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tlgpu  # noqa: E402


def one_hot(tag, K=16):
    tlgpu._C._gemm_tc(tag)
    M = N = 128
    a = np.zeros((M, K), np.float32)
    a[np.arange(M), np.arange(M) % K] = 1
    w = (16 * np.arange(N)[:, None] + np.arange(K)[None, :]).astype(np.float32)
    got = (tlgpu.tensor(a) @ tlgpu.tensor(w).T).numpy()
    ref = a.astype(np.float64) @ w.T
    bad = np.argwhere(got != ref)
    out = {"tag": tag, "right": int((got == ref).sum()), "of": M * N}
    out["first_wrong"] = [(int(m), int(n), float(got[m, n]), divmod(int(got[m, n]), 16) if got[m, n] == int(got[m, n])
                           else None) for m, n in bad[:12]]
    return out


def edges(tag, rng):
    tlgpu._C._gemm_tc(tag)
    res = []
    for m, k, n in [(131, 77, 65), (256, 64, 256), (270, 8, 260), (1024, 1000, 1000)]:
        a = rng.integers(-3, 4, (m, k)).astype(np.float32)
        w = rng.integers(-3, 4, (n, k)).astype(np.float32)
        got = (tlgpu.tensor(a) @ tlgpu.tensor(w).T).numpy()
        res.append(f"{m}x{k}x{n}:{float(np.abs(got - a.astype(np.float64) @ w.T).max()):g}")
    return res


def main():
    info = tlgpu._C._gemm_tc()
    print(json.dumps({k: info[k] for k in ("capability", "wgmma", "wgmma_error")}))
    tlgpu.set_matmul_precision("tf32")
    rng = np.random.default_rng(0)
    failed, tags = 0, sys.argv[1:] or [t for t in info["configs"] if t.startswith("wg")]
    for tag in tags:
        try:
            r = one_hot(tag)
            r["edges"] = edges(tag, rng)
            failed += r["right"] != r["of"] or any(not e.endswith(":0") for e in r["edges"])
        except Exception as e:
            r = {"tag": tag, "error": f"{type(e).__name__}: {str(e)[:1500]}"}
            failed += 1
        print(json.dumps(r), flush=True)
    for fam in sorted({"matmul_wgb" if t.startswith(("wgb", "wgc")) else "matmul_wg" for t in tags}):
        log = tlgpu._C._build_log(fam)
        print(fam, "\n".join(line for line in log.splitlines()
                              if "registers" in line or "spill" in line or "error" in line or "C75" in line)[:6000])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
