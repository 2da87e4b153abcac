"""GFLOP/s of tlgpu's GEMM and mul_mv against CLBlast (same OpenCL device, same buffers and queue), numpy on
the host and PyTorch CUDA float32 (TF32 off), all measured in the same run. On CPU devices where matmul runs a host BLAS
in a native kernel (docs/cpu.md) the OpenCL kernels are measured too (tlgpu_opencl_gflops, the path off). On devices with tlgpu's TF32
tensor-core path (NVIDIA, compute capability >= 8.0) also tlgpu with set_matmul_precision("tf32") and
PyTorch with TF32 on (allow_tf32), with each TF32 result's relative Frobenius error against float64 and which
tensor-core kernel ran (tf32_kernel: wgmma packed [, split-K], wgmma or mma.sync). The tier column says "sg" where the NVIDIA float32
kernel (kernels/matmul_sg.cl) ran, else the GEMM tier (mv, blas: the other paths).

Usage: python3 benchmarks/bench_gemm.py [--quick] [--sizes 512 1024] [--seconds 1.0] [--skip-numpy] [--json]
       python3 benchmarks/bench_gemm.py --tc-sweep [--sizes ...] [--tc-tags a,b]: every tensor-core tile
       configuration (kernels/matmul_tc.cl and, on compute capability 9.0, the wgmma "wg" rows of
       kernels/matmul_wg.cl, built with -DTC_SWEEP plus TLGPU_BUILD_OPTIONS), or only the tags listed, each checked exact on integer operands in
       all four layouts (a wg row runs nt only; the others take the mma.sync rows), then timed nn and nt
       (x @ w.T), beside tlgpu float32 and PyTorch.

       python3 benchmarks/bench_gemm.py --quant [--seconds ...] [--impls old,dp4a,q8x,q8x8,mma,auto]: matrix-vector
       products x @ w.T with 1 and 8 rows of x on float32, q4_0 and q8_0 weights (tlgpu.quant), one row per
       (product, weights, mul_mv kernel of --impls, tlgpu.quant._MV_IMPL), each with its read bandwidth on the
       bytes of weights it reads (float32 4, q4_0 18/32, q8_0 34/32 bytes a weight), that bandwidth's share of
       float32's in the same run (issue 27's goal: 0.8 or more), its error against the float product, and the
       integer-dot kernels with the RMSNorm prologue. --quick: the first shape only.

       python3 benchmarks/bench_gemm.py --quant-prefill [--prefill-impls tiles,dequant] [--tile-sweep] [--rows 16 64]:
       prefill products x @ w.T with M = 16, 64, 256, 512 rows on [5632,2048] and [4096,4096] weights (issue
       27): float32, and q4_0 / q8_0 through each tlgpu.quant._PREFILL_IMPL of --prefill-impls ("tiles" the
       dequantize-on-the-fly GEMM, "dequant" dequantize + the float32 GEMM, "chunks" the old 8-row rule), us,
       with tiles' GFLOP/s and its time over dequant's; --tile-sweep adds the GPU tile kernel at each tile
       height (tlgpu._C._quant_gemm kernel=1, mwg=32/64, run on any device).

Square sizes default to 512-4096 on GPUs and 256-1024 on CPU devices (PoCL); the decoder shapes are
x @ w.T with w [out, in] (a linear layer): [1|8, 4096] x [4096, 4096]^T and [512, 4096] x [4096, 11008]^T
(that one divided by 4 on CPU devices). Rows with M <= 8 also report the weight-read bandwidth (GB/s) and its share
of the device's copy bandwidth (tlgpu._C._bench_raw(2, n, iters): a read+write copy kernel).
CLBlast is loaded with ctypes from libclblast (Debian libclblast-dev) when present; PyTorch when torch
and CUDA are importable. Each figure is the best of 5 rounds, each round long enough to time.
"""
import argparse
import ctypes
import ctypes.util
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tlgpu  # noqa: E402
from _util import bench_hook, report  # noqa: E402


def best_time(fn, seconds, sync=lambda: None):
    fn()
    sync()                                            # warm-up: kernel builds, pool, library init
    t = time.perf_counter()
    fn()
    sync()
    one = max(time.perf_counter() - t, 1e-6)
    reps = max(1, int(seconds / 5 / one))
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t) / reps)
    return best


class CLBlast:
    """CLBlastSgemm on tlgpu's own cl_mem buffers and compute queue (row-major)."""

    def __init__(self):
        name = ctypes.util.find_library("clblast") or "libclblast.so.1"
        self.lib = ctypes.CDLL(name)
        f = self.lib.CLBlastSgemm
        sz, vp = ctypes.c_size_t, ctypes.c_void_p
        f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, sz, sz, sz, ctypes.c_float, vp, sz, sz, vp, sz, sz,
                      ctypes.c_float, vp, sz, sz, ctypes.POINTER(vp), vp]
        f.restype = ctypes.c_int
        self.queue = ctypes.c_void_p(bench_hook("_cl_queue")()[0])

    def gemm(self, a, b, c, trans_b):
        """c = a @ b (trans_b False: b is [k, n]) or a @ b^T (trans_b: b is [n, k]); all contiguous."""
        m, k = a.shape
        n = b.shape[0] if trans_b else b.shape[1]
        (am, ao), (bm, bo), (cm, co) = (bench_hook("_cl_handles")(t) for t in (a, b, c))
        st = self.lib.CLBlastSgemm(101, 111, 112 if trans_b else 111, m, n, k, 1.0, am, ao, k, bm, bo,
                                   k if trans_b else n, 0.0, cm, co, n, ctypes.byref(self.queue), None)
        if st != 0:
            raise RuntimeError(f"CLBlastSgemm returned {st}")


def load_clblast():
    try:
        return CLBlast()
    except (OSError, AttributeError):
        return None


def load_torch():
    try:
        import torch
        if not torch.cuda.is_available():
            return None
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        return torch
    except ImportError:
        return None


def has_tc():
    return tlgpu._C._gemm_tc()["capability"] >= 80


def rel_fro(got, ref):
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def torch_gflops(torch, a, b, trans_b, flops, seconds, tf32):
    """PyTorch CUDA on the same data, TF32 off or on (cuBLAS), and the TF32 result's error against float64."""
    xa, xb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    f = (lambda: xa @ xb.T) if trans_b else (lambda: xa @ xb)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        return flops / best_time(f, seconds, torch.cuda.synchronize) / 1e9, f().cpu().numpy()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False


def blas_loaded():
    """True where matmul runs a host BLAS in a native kernel (CPU devices; TLGPU_BLAS=0 turns it off)."""
    return tlgpu.device().type == "cpu" and tlgpu._C._cpu_blas()["loaded"]


def copy_bandwidth():
    """Bytes/s of the raw copy kernel (read + write) over 64 MiB."""
    n = 16 << 20
    per = bench_hook("_bench_raw")(2, n, 20)
    return 8.0 * n / per


def bench_shape(m, n, k, trans_b, seconds, clblast, torch, rng, bw, skip_numpy=False):
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n), dtype=np.float32)
    ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
    tbb = tb.T if trans_b else tb                      # the transposed view: no copy
    ref = a.astype(np.float64) @ (b.T if trans_b else b).astype(np.float64)
    err = float(np.abs((ta @ tbb).numpy() - ref).max() / max(1.0, np.abs(ref).max()))
    flops = 2.0 * m * n * k
    row = {"shape": f"[{m},{k}]x[{k},{n}]" + ("^T" if trans_b else ""), "M": m, "N": n, "K": k}
    t = best_time(lambda: ta @ tbb, seconds, tlgpu.synchronize)
    row["tlgpu_gflops"] = round(flops / t / 1e9, 2)
    if blas_loaded():                                  # CPU device: the OpenCL kernels too (docs/cpu.md)
        tlgpu._C._cpu_blas(enable=False)
        try:
            row["tlgpu_opencl_gflops"] = round(flops / best_time(lambda: ta @ tbb, seconds, tlgpu.synchronize) / 1e9, 2)
        finally:
            tlgpu._C._cpu_blas(enable=True)
    sg = tlgpu._C._gemm_sg()["launches"]
    (ta @ tbb).numpy()                                 # which float32 kernel ran: the NVIDIA one counts its launches
    row["tier"] = ("mv" if m <= 8 else "blas" if blas_loaded() else
                   "sg" if tlgpu._C._gemm_sg()["launches"] > sg else tlgpu._C._gemm_tier(m, n))
    row["rel_err"] = err
    if m <= 8:
        row["tlgpu_GBps"] = round(4.0 * n * k / t / 1e9, 2)
        row["pct_copy_bw"] = round(100 * 4.0 * n * k / t / bw, 1)
    if clblast is not None:
        tc = tlgpu.empty(m, n)
        bb = tb if trans_b else tb
        try:
            clblast.gemm(ta, bb, tc, trans_b)
            tlgpu.synchronize()
            row["clblast_gflops"] = round(flops / best_time(lambda: clblast.gemm(ta, bb, tc, trans_b), seconds,
                                                            tlgpu.synchronize) / 1e9, 2)
        except RuntimeError as e:
            row["clblast_gflops"] = str(e)
    if not skip_numpy:
        time.sleep(0.1)                                # let the OpenCL runtime's workers go idle
        bn = np.ascontiguousarray(b)
        row["numpy_gflops"] = round(flops / best_time(lambda: a @ (bn.T if trans_b else bn), seconds) / 1e9, 2)
        row["tlgpu/numpy"] = round(row["tlgpu_gflops"] / row["numpy_gflops"], 2)
    if torch is not None:
        row["torch_cuda_gflops"] = round(torch_gflops(torch, a, b, trans_b, flops, seconds, False)[0], 2)
    if m > 8 and has_tc():                             # the TF32 paths, tlgpu's and cuBLAS's
        tlgpu.set_matmul_precision("tf32")
        try:
            row["tlgpu_tf32_gflops"] = round(flops / best_time(lambda: ta @ tbb, seconds, tlgpu.synchronize) / 1e9, 2)
            keys = ("wgmma_launches", "packed_launches", "packed_splits")
            before = [tlgpu._C._gemm_tc()[k] for k in keys]
            row["tlgpu_tf32_err"] = rel_fro((ta @ tbb).numpy(), ref)
            wg, pk, sp = (tlgpu._C._gemm_tc()[k] > b for k, b in zip(keys, before))
            row["tf32_kernel"] = ("wgmma packed, split-K" if sp else "wgmma packed" if pk else "wgmma" if wg
                                  else "mma.sync")
        finally:
            tlgpu.set_matmul_precision("highest")
        if torch is not None:
            g, out = torch_gflops(torch, a, b, trans_b, flops, seconds, True)
            row["torch_tf32_gflops"], row["torch_tf32_err"] = round(g, 2), rel_fro(out, ref)
            row["tf32_vs_torch"] = round(row["tlgpu_tf32_gflops"] / g, 3)
    return row


QUANT_INT = ("dp4a", "q8x", "q8x8", "mma")                 # the integer-dot kernels (tlgpu.quant._MV_IMPL)


def quant_rows(seconds, cpu, quick=False, impls=("old",) + QUANT_INT + ("auto",), mv_rows=(1, 8)):
    """The --quant table (issue 27), one row per (product, weights, kernel): float32, then q4_0 and q8_0 with each
    mul_mv kernel of impls (tlgpu.quant._MV_IMPL: "old" the float kernels, "dp4a" the one-launch integer-dot
    kernel, "q8x" / "q8x8" the two-launch one with 4 / 8 weight rows a warp, "mma" the tensor-core one, "auto"
    the device's default) in the same process, for each row count of mv_rows (1 and 8). us; GB/s on the weight
    bytes read (float32 4, q4_0 18/32, q8_0 34/32 a weight); f32_bw, that over float32's GB/s in this run (the
    goal: 0.8 or more); err, the largest difference from the float32 product of the dequantized weights over its
    largest value (the integer kernels quantize x: about 1e-3 expected); norm_us, an integer kernel with the
    RMSNorm prologue."""
    from tlgpu import quant
    rng = np.random.default_rng(0)
    shapes = [(65536, 8192), (5632, 2048), (4096, 4096)] if not cpu else [(4096, 4096), (5632, 2048)]
    if quick:
        shapes = shapes[:1]
    rows = []
    for n, k in shapes:
        w = rng.standard_normal((n, k), dtype=np.float32)
        tw = tlgpu.tensor(w)
        mats = {"q4_0": (quant.quantize_q4_0(w), 18 / 32), "q8_0": (quant.quantize_q8_0(w), 34 / 32)}
        del w
        norm = tlgpu.tensor(rng.standard_normal(k, dtype=np.float32))
        for m in mv_rows:
            x = tlgpu.tensor(rng.standard_normal((m, k), dtype=np.float32))
            shape = f"[{m},{k}]x[{n},{k}]^T"
            t = best_time(lambda: x @ tw.T, seconds, tlgpu.synchronize)
            f32 = 4.0 * n * k / t / 1e9
            rows.append({"shape": shape, "weights": "float32", "kernel": "mul_mv", "us": round(t * 1e6, 1),
                         "GBps": round(f32, 1), "f32_bw": 1.0})
            for name, (mat, per) in mats.items():
                ref = (x @ mat.dequantize().T).numpy()
                for impl in impls:
                    quant._MV_IMPL = impl
                    try:
                        t = best_time(lambda: quant.matmul(x, mat), seconds, tlgpu.synchronize)
                        err = np.abs(quant.matmul(x, mat).numpy() - ref).max() / np.abs(ref).max()
                        tn = (best_time(lambda: quant.matmul(x, mat, norm=norm), seconds, tlgpu.synchronize)
                              if impl in QUANT_INT else None)
                    finally:
                        quant._MV_IMPL = "auto"
                    gbps = per * n * k / t / 1e9
                    rows.append({"shape": shape, "weights": name, "kernel": impl, "us": round(t * 1e6, 1),
                                 "GBps": round(gbps, 1), "f32_bw": round(gbps / f32, 2), "err": float(f"{err:.2g}")})
                    if tn is not None:
                        rows[-1]["norm_us"] = round(tn * 1e6, 1)
        del mats, tw
    return rows


def prefill_rows(seconds, impls=("tiles", "dequant"), sweep=False, ms=(16, 64, 256, 512)):
    """The --quant-prefill table: [M, K] x [N, K]^T on float32, q4_0 and q8_0 weights, each quantized format through
    each _PREFILL_IMPL of impls (and with sweep the tile kernel at mwg 32, 64), in us; <fmt>_tiles_gflops and
    <fmt>_tiles/dequant (the time ratio: below 1, the tiles win) where both ran; <fmt>_tiles_err the largest
    difference from the dequantize path relative to its largest value (float32 sums in another order)."""
    from tlgpu import quant
    rng = np.random.default_rng(0)
    rows = []
    for n, k in [(5632, 2048), (4096, 4096)]:
        w = rng.standard_normal((n, k), dtype=np.float32)
        tw = tlgpu.tensor(w)
        mats = {"q4_0": quant.quantize_q4_0(w), "q8_0": quant.quantize_q8_0(w)}
        del w
        for m in ms:
            x = tlgpu.tensor(rng.standard_normal((m, k), dtype=np.float32))
            flops = 2.0 * m * n * k
            row = {"shape": f"[{m},{k}]x[{n},{k}]^T"}
            row["float32_us"] = round(best_time(lambda: x @ tw.T, seconds, tlgpu.synchronize) * 1e6, 1)
            for name, mat in mats.items():
                for impl in impls:
                    quant._PREFILL_IMPL = impl
                    try:
                        t = best_time(lambda: quant.matmul(x, mat), seconds, tlgpu.synchronize)
                    finally:
                        quant._PREFILL_IMPL = "auto"
                    row[f"{name}_{impl}_us"] = round(t * 1e6, 1)
                if "tiles" in impls:
                    row[f"{name}_tiles_gflops"] = round(flops / row[f"{name}_tiles_us"] / 1e3, 1)
                    if "dequant" in impls:
                        row[f"{name}_tiles/dequant"] = round(row[f"{name}_tiles_us"] / row[f"{name}_dequant_us"], 2)
                        ref = (x @ mat.dequantize().T).numpy()
                        got = tlgpu._C._quant_gemm(x, mat.qs, mat.d, n, k, name).numpy()
                        row[f"{name}_tiles_err"] = float(f"{np.abs(got - ref).max() / np.abs(ref).max():.2g}")
                for mwg in (32, 64) if sweep else ():
                    t = best_time(lambda: tlgpu._C._quant_gemm(x, mat.qs, mat.d, n, k, name, kernel=1, mwg=mwg),
                                  seconds, tlgpu.synchronize)
                    row[f"{name}_m{mwg}_us"] = round(t * 1e6, 1)
            rows.append(row)
        del mats, tw
    return rows


def tc_sweep(sizes, seconds, torch, tags=None):
    """Every tensor-core configuration (or those in tags): exact on integer operands (four layouts, edges),
    then GFLOP/s."""
    rng = np.random.default_rng(0)
    info = tlgpu._C._gemm_tc()
    rows = []
    for n in sizes:                                    # the references, once per size
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        flops = 2.0 * n ** 3
        ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
        row = {"config": "float32", "n": n,
               "nn": round(flops / best_time(lambda: ta @ tb, seconds, tlgpu.synchronize) / 1e9, 1)}
        rows.append(row)
        if torch is not None:
            for tf32 in (False, True):
                g, out = torch_gflops(torch, a, b, False, flops, seconds, tf32)
                gt = torch_gflops(torch, a, b, True, flops, seconds, tf32)[0]
                rows.append({"config": "torch_tf32" if tf32 else "torch_fp32", "n": n, "nn": round(g, 1),
                             "nt": round(gt, 1), "err": rel_fro(out, a.astype(np.float64) @ b) if n <= 2048 else None})
    tlgpu.set_matmul_precision("tf32")
    for tag in tags or info["configs"]:
        tlgpu._C._gemm_tc(tag)
        bad = []
        try:
            for m, k, n in [(131, 77, 65), (257, 64, 130), (64, 128, 64)]:
                ai = rng.integers(-3, 4, (m, k)).astype(np.float32)
                bi = rng.integers(-3, 4, (k, n)).astype(np.float32)
                tai, tbi = tlgpu.tensor(ai), tlgpu.tensor(bi)
                tat, tbt = tlgpu.tensor(np.ascontiguousarray(ai.T)).T, tlgpu.tensor(np.ascontiguousarray(bi.T)).T
                ref = ai.astype(np.float64) @ bi
                for lay, (x, y) in zip(["nn", "nt", "tn", "tt"], [(tai, tbi), (tai, tbt), (tat, tbi), (tat, tbt)]):
                    d = float(np.abs((x @ y).numpy() - ref).max())
                    if d != 0.0:
                        bad.append(f"{lay}{m}x{k}x{n}:{d:g}")
        except Exception as e:                          # a configuration that fails to build or launch
            rows.append({"config": tag, "error": f"{type(e).__name__}: {str(e)[:300]}"})
            continue
        for n in sizes:
            a = rng.standard_normal((n, n), dtype=np.float32)
            b = rng.standard_normal((n, n), dtype=np.float32)
            ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
            flops = 2.0 * n ** 3
            row = {"config": tag, "n": n, "exact": "yes" if not bad else " ".join(bad[:4])}
            row["nn"] = round(flops / best_time(lambda: ta @ tb, seconds, tlgpu.synchronize) / 1e9, 1)
            row["nt"] = round(flops / best_time(lambda: ta @ tb.T, seconds, tlgpu.synchronize) / 1e9, 1)
            if n <= 2048:
                row["err"] = rel_fro((ta @ tb).numpy(), a.astype(np.float64) @ b)
            rows.append(row)
    tlgpu._C._gemm_tc(None)
    tlgpu.set_matmul_precision("highest")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+")
    ap.add_argument("--seconds", type=float, default=1.0, help="rough time per measurement")
    ap.add_argument("--quick", action="store_true", help="fewer shapes, shorter measurements")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table (read by _util.report)")
    ap.add_argument("--skip-numpy", action="store_true", help="no host numpy column (slow at 4096)")
    ap.add_argument("--tc-sweep", action="store_true", help="time every tensor-core tile configuration")
    ap.add_argument("--tc-tags", help="--tc-sweep: only these configurations (comma-separated tags)")
    ap.add_argument("--quant", action="store_true", help="matrix-vector rows on float32, q4_0 and q8_0 weights")
    ap.add_argument("--impls", default="old,dp4a,q8x,q8x8,mma,auto", help="--quant: the mul_mv kernels timed "
                    "(tlgpu.quant._MV_IMPL values, comma-separated: old, dp4a, q8x, q8x8, mma, auto)")
    ap.add_argument("--quant-prefill", action="store_true", help="prefill rows (M > 8) on float32, q4_0 and q8_0 "
                    "weights: tiles against dequantize + GEMM")
    ap.add_argument("--mv-rows", type=int, nargs="+", default=[1, 8], help="--quant: rows of x (1-8)")
    ap.add_argument("--prefill-impls", default="tiles,dequant", help="--quant-prefill: tlgpu.quant._PREFILL_IMPL "
                    "values timed (comma-separated: tiles, dequant, chunks, auto)")
    ap.add_argument("--tile-sweep", action="store_true", help="--quant-prefill: the tile kernel at mwg 32 and 64")
    ap.add_argument("--rows", type=int, nargs="+", default=[16, 64, 256, 512], help="--quant-prefill: values of M")
    args = ap.parse_args()
    if args.quant_prefill:
        rows = prefill_rows(args.seconds, args.prefill_impls.split(","), args.tile_sweep, args.rows)
        cols = list(dict.fromkeys(c for r in rows for c in r))
        report("prefill, quantized weights (us)", rows, cols, {"device": tlgpu.device().name})
        return
    if args.quant:
        rows = quant_rows(args.seconds, tlgpu.device().type == "cpu", args.quick, args.impls.split(","),
                          args.mv_rows)
        report("matrix-vector, quantized weights", rows, ["shape", "weights", "kernel", "us", "GBps", "f32_bw", "err",
                                                          "norm_us"],
               {"copy_bandwidth_GBps": round(copy_bandwidth() / 1e9, 1), "device": tlgpu.device().name,
                "build_options": os.environ.get("TLGPU_BUILD_OPTIONS", "")})
        return
    if args.tc_sweep:
        os.environ["TLGPU_BUILD_OPTIONS"] = (os.environ.get("TLGPU_BUILD_OPTIONS", "") + " -DTC_SWEEP").strip()
        if not has_tc():
            sys.exit("bench_gemm --tc-sweep: this device has no TF32 tensor-core path")
        tags = args.tc_tags.split(",") if args.tc_tags else None
        unknown = [t for t in tags or [] if t not in tlgpu._C._gemm_tc()["configs"]]
        if unknown:
            sys.exit(f"bench_gemm --tc-tags: unknown {unknown}; known: {tlgpu._C._gemm_tc()['configs']}")
        rows = tc_sweep(args.sizes or [1024, 2048, 4096], args.seconds, load_torch(), tags)
        report("GEMM TF32 sweep", rows, ["config", "n", "exact", "nn", "nt", "err", "error"],
               {"device": tlgpu.device().name, "build_options": os.environ["TLGPU_BUILD_OPTIONS"]})
        return
    dev = tlgpu.device()
    cpu = dev.type == "cpu"
    sizes = args.sizes or ([256, 512, 1024] if cpu else [512, 1024, 2048, 4096])
    seconds = args.seconds
    if args.quick:
        sizes, seconds = sizes[::2], min(seconds, 0.3)
    s = 4 if cpu else 1
    dec = [(1, 4096, 4096), (8, 4096, 4096), (512 // s, 11008 // s, 4096 // s)]   # mul_mv: 64 MiB of weights
    if args.quick:
        dec = dec[::2]
    rng = np.random.default_rng(0)
    clblast, torch = load_clblast(), load_torch()
    bw = copy_bandwidth()
    rows = []
    for n in sizes:
        rows.append(bench_shape(n, n, n, False, seconds, clblast, torch, rng, bw, args.skip_numpy))
        rows.append(bench_shape(n, n, n, True, seconds, clblast, torch, rng, bw, args.skip_numpy))
    for m, n, k in dec:
        rows.append(bench_shape(m, n, k, True, seconds, clblast, torch, rng, bw, args.skip_numpy))
    cols = ["shape", "tier", "tlgpu_gflops", "tlgpu_opencl_gflops", "clblast_gflops", "numpy_gflops", "tlgpu/numpy",
            "torch_cuda_gflops", "tlgpu_GBps", "pct_copy_bw", "rel_err", "tlgpu_tf32_gflops", "tf32_kernel", "torch_tf32_gflops",
            "tf32_vs_torch", "tlgpu_tf32_err", "torch_tf32_err"]
    report("GEMM", rows, cols, {"copy_bandwidth_GBps": round(bw / 1e9, 2), "clblast": clblast is not None,
                                "torch_cuda": torch is not None, "host_threads": os.cpu_count(),
                                "cpu_blas": tlgpu._C._cpu_blas() if cpu else None,
                                "gemm_params": [tlgpu._C._gemm_params(t) for t in range(3)]})

if __name__ == "__main__":
    main()
