"""Decode tokens/s of examples/tiny_decoder.py (float32, q4_0, q8_0, float16 and bfloat16 weights) next to the
bytes-moved floor.

Usage: python3 benchmarks/bench_decode.py [--quick] [--models tiny medium] [--tokens 32] [--fusion both] [--json]

The floor is the weight bytes one token reads (every linear layer and the head once, one embedding
row) divided by the device's copy bandwidth measured in the same run (tlgpu._C._bench_raw(2, n, iters):
a read+write copy kernel over 64 MiB, counted as 8 bytes per element). `pct_of_floor` = floor time /
measured time per token: 100 % would be a decoder limited only by reading its weights. Prefill: the time
to feed a --prompt-token prompt in one pass (Decoder.prefill: GEMMs over all rows, causal attention).
ms_per_token is a whole generate() (a 3-token prompt's pass, the reset, 32 steps, the final read) over its
steps, as earlier sessions reported it; step_ms is a decode step alone, (generate(2 n) - generate(n)) / n
(tiny_decoder.step_seconds: the prompt's pass and the read cancel; llama-bench's tg counts the same), and
step_pct_of_floor its share of the floor. Models: tiny
(dim 256, 4 layers, 8 heads / 2 KV heads, vocab 1000; the default everywhere) and medium (dim 2048,
8 layers, 16 / 4 heads, hidden 5632, vocab 32000, 1.7 GB float32; the default on GPUs too). On CPU devices with
the BLAS path (docs/cpu.md) each model runs with it and without it (the OpenCL GEMM kernels) in the same run;
blas_products counts the products it ran in the decode runs / in the prefill measurement (decode-shaped
products keep the mul_mv kernel: 0 in decode). `loop`: sync (a host read of each token, the greedy choice
on the host), device (token and position stay on the device, one read at the end) or jit (that loop's step
replayed through tlgpu.jit, docs/jit.md); all three must produce the same tokens. float16 / bfloat16 rows:
half weights read as stored by the half matrix-vector kernel (kernels/mv_half.cl), float32 activations, a KV
cache of the weights' dtype (`kv`); `--formats` picks rows. `fused`: the decode step with each rms_norm and the
silu_mul folded into the projection after it (tlgpu.rms_norm_linear / silu_mul_linear, Decoder(fuse=True): 6
launches a layer) or not (fuse=False: 9), the same model in the same process (`--fusion both`, the default;
q4_0 / q8_0 rows run fused only: their step is the separate ops either way for now); `layer`: every layer in
one launch (tlgpu.decode_layer_(..., layers=n), Decoder(fuse="layer"); `--fusion layer` or `all`), `layer1`: one
launch a layer (Decoder.layers_per_launch = 1); `launches` counts the
commands one device_step enqueues (tlgpu.stream_stats(); jit rows add the trace's count); `same_tokens`: the
row's tokens equal the format's first row's (sync, fused); prefill is measured on the fused sync rows only
(prefill does not use the fused ops).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import tlgpu  # noqa: E402
from tlgpu import quant  # noqa: E402
from _util import bench_hook, report  # noqa: E402
import tiny_decoder as td  # noqa: E402

# weight formats: (name, Decoder keyword arguments)
FORMATS = {"float32": {}, "q4_0": {"kind": "q4_0"}, "q8_0": {"kind": "q8_0"}, "float16": {"dtype": "float16"},
           "bfloat16": {"dtype": "bfloat16"}}
MODELS = {
    "tiny": td.Config(),
    "medium": td.Config(dim=2048, n_layers=8, n_heads=16, n_kv_heads=4, vocab=32000, hidden=5632, max_len=128),
}


def prefill(model, n, vocab):
    """Best of 3: ms to feed an n-token prompt in one pass (Decoder.prefill), and tokens/s."""
    prompt = [(7 * i + 1) % vocab for i in range(n)]
    best = float("inf")
    for _ in range(4):                                    # the first: warm-up (kernel builds)
        model.reset()
        tlgpu.synchronize()
        t = time.perf_counter()
        model.prefill(prompt).numpy()
        best = min(best, time.perf_counter() - t) if _ else best
    return {"prefill_ms": round(1e3 * best, 2), "prefill_tokens_per_s": round(n / best, 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", choices=sorted(MODELS))
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="tiny model only, 16 tokens, 2 runs")
    ap.add_argument("--prompt", type=int, default=64, help="prompt length of the prefill measurement")
    ap.add_argument("--formats", nargs="+", choices=list(FORMATS), default=list(FORMATS))
    ap.add_argument("--fusion", choices=("both", "fused", "unfused", "layer", "fused+layer", "all", "layer1",
                                         "layer+layer1", "fused+layer+layer1"), default="both",
                    help="the decode step with the norms and silu_mul fused into the projections, without, both; "
                         "every layer in one launch (tlgpu.decode_layer_), a launch a layer (layer1), or all")
    ap.add_argument("--mv", nargs="+", choices=("auto", "old", "dp4a"), default=["auto"],
                    help="quantized formats: tlgpu.quant's mul_mv kernel(s) to run (quant._MV_IMPL), each a row")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    dev = tlgpu.device()
    models = args.models or (["tiny"] if dev.type == "cpu" or args.quick else ["tiny", "medium"])
    tokens, runs = (16, 2) if args.quick else (args.tokens, args.runs)
    n = 16 << 20
    bw = 8.0 * n / bench_hook("_bench_raw")(2, n, 20)
    rows = []
    modes = [True, False] if dev.type == "cpu" and tlgpu._C._cpu_blas()["loaded"] else [None]
    for name in models:
        cfg = MODELS[name]
        cfg.max_len = max(cfg.max_len, 2 * tokens + 8, args.prompt)
        fusions = {"both": (True, False), "fused": (True,), "unfused": (False,), "layer": ("layer",),
                   "fused+layer": (True, "layer"), "all": (True, False, "layer", "layer1"), "layer1": ("layer1",),
                   "layer+layer1": ("layer", "layer1"), "fused+layer+layer1": (True, "layer", "layer1")}[args.fusion]
        for fmt, blas, mv in [(fmt, blas, mv) for fmt in args.formats for blas in modes
                              for mv in (args.mv if fmt.startswith("q") else ["auto"])]:
            quant._MV_IMPL = mv
            if blas is not None:                          # CPU BLAS path on / off (docs/cpu.md), same run
                tlgpu._C._cpu_blas(enable=blas)
            model = first = None
            for fz, mode in [(fz, mode) for fz in fusions for mode in ("sync", "device", "jit")]:
                fuse = "layer" if fz == "layer1" else fz
                l0 = tlgpu._C._cpu_blas()["launches"]
                toks, tps, model = td.run(cfg, False, tokens, runs, mode=mode, fuse=fuse, model=model,
                                          layers_per_launch=int(fz == "layer1"), **FORMATS[fmt])
                step = td.step_seconds(model, tokens, runs, mode)
                per_tok = model.bytes_per_token()
                floor_s = per_tok / bw
                l1 = tlgpu._C._cpu_blas()["launches"]
                launches = td.launches_per_token(model)   # eager device_step; jit: its trace's commands
                if mode == "jit":
                    launches = f"{launches} (trace {len(model._jstep.commands())})"
                first = toks if first is None else first
                pre = prefill(model, args.prompt, cfg.vocab) if fuse is True and mode == "sync" else {}
                rows.append({"model": name, "weights": fmt + ("" if mv == "auto" else f" ({mv} mul_mv)") +
                             ("" if blas is None else ", BLAS" if blas else ", OpenCL GEMM"), "loop": mode,
                             "fused": fz if fuse == "layer" else "yes" if fuse else "no", "launches": launches,
                             "kv": model.kv_dtype.name,
                             "tokens_per_s": round(tps, 1),
                             "ms_per_token": round(1e3 / tps, 3), "MB_per_token": round(per_tok / 1e6, 2),
                             "floor_ms": round(1e3 * floor_s, 3), "pct_of_floor": round(100 * floor_s * tps, 1),
                             "step_ms": round(1e3 * step, 3), "step_pct_of_floor": round(100 * floor_s / step, 1),
                             "same_tokens": "yes" if toks == first else "NO", "identical_runs": runs, **pre,
                             "blas_products": f"{l1 - l0} / {tlgpu._C._cpu_blas()['launches'] - l1}"})
            del model
            quant._MV_IMPL = "auto"
        if modes != [None]:
            tlgpu._C._cpu_blas(enable=True)
    cols = ["model", "weights", "kv", "loop", "fused", "launches", "same_tokens", "tokens_per_s", "ms_per_token",
            "MB_per_token", "floor_ms", "pct_of_floor", "step_ms", "step_pct_of_floor", "prefill_ms",
            "prefill_tokens_per_s"]
    cols += ["blas_products"] if modes != [None] else []
    report("Decode", rows, cols, {"copy_bandwidth_GBps": round(bw / 1e9, 2), "tokens": tokens,
                                  "identical_runs (best of)": runs, "prefill_prompt_tokens (best of 3)": args.prompt})

if __name__ == "__main__":
    main()
