"""Diagnostic: where a decode token's time goes outside the layers (GPU machine). For each model and format
(DIAG_MODELS, default medium; DIAG_FMTS, default "q4_0 float16"), Decoder(fuse="layer"), jit loop:
  bench      generate(32) as bench_decode times it (the prefill, the reset and the final read included), per step
  diff       (generate(96) - generate(32)) / 64: a decode step alone
  host       64 replays of the jitted step without a sync: the host's enqueue time a step
  layers     the layers-and-head launch alone (decode_layer_(..., layers=n, head=...)), 64 in a row, then a sync
  argmax / embed / posinc   each of the step's other launches alone, 64 in a row, then a sync
  prefill    generate(1) - one step: the prompt's pass, the reset and the read
Every figure in us, the best of DIAG_REPS (3) runs. Usage: python3 benchmarks/diag_decode_token.py"""
import os
import sys
import time

sys.path[:0] = [os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), d)
                for d in ("", "examples", "benchmarks")]
import tlgpu  # noqa: E402
import tiny_decoder as td  # noqa: E402
from bench_decode import MODELS, FORMATS  # noqa: E402


def best(fn, reps):
    out = []
    for _ in range(reps):
        tlgpu.synchronize()
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out) * 1e6


def loop(fn, n=64):
    def run():
        for _ in range(n):
            fn()
        tlgpu.synchronize()
    return run


def main():
    reps = int(os.environ.get("DIAG_REPS", "3"))
    for name in os.environ.get("DIAG_MODELS", "medium").split():
        cfg = MODELS[name]
        w = td.make_weights(cfg, 0)
        for fmt in os.environ.get("DIAG_FMTS", "q4_0 float16").split():
            m = td.Decoder(cfg, w, fuse="layer", **FORMATS[fmt])
            prompt = [1, 2, 3]
            m.generate(prompt, 4, jit=True)                              # builds and the trace
            r = {}
            g32 = best(lambda: m.generate(prompt, 32, jit=True), reps)
            g96 = best(lambda: m.generate(prompt, 96, jit=True), reps)
            g1 = best(lambda: m.generate(prompt, 1, jit=True), reps)
            r["bench"] = g32 / 34
            r["diff"] = (g96 - g32) / 64
            r["prefill"] = g1 - r["diff"]
            tok, pos = tlgpu.tensor([1], dtype=tlgpu.int32), tlgpu.tensor([40], dtype=tlgpu.int32)

            def host():
                pos.copy_(tlgpu.tensor([40], dtype=tlgpu.int32))
                tlgpu.synchronize()
                t = time.perf_counter()
                for _ in range(64):
                    m._jstep(tok, pos)
                h = time.perf_counter() - t
                tlgpu.synchronize()
                return h
            r["host"] = min(host() for _ in range(reps)) * 1e6 / 64
            s = m.stacked()
            head = {"head_norm": m.norm, "head": m.out} if td._format(m.out) == td._format(s["wqkv"]) else {}
            x = m.embedding(tok)
            c = cfg

            def layers():
                tlgpu.decode_layer_(x, pos, m.kv_all, s["attn_norm"], s["wqkv"], s["wo"], s["mlp_norm"], s["w13"],
                                    s["w2"], c.n_heads, eps=c.eps, theta=c.theta, groups=m.groups,
                                    layers=len(m.layers), **head)
            pos.copy_(tlgpu.tensor([40], dtype=tlgpu.int32))
            r["layers"] = best(loop(layers), reps) / 64
            logits = tlgpu.tensor(w["embed"][:1] @ w["out"].T)
            r["argmax"] = best(loop(lambda: logits.argmax(-1)), reps) / 64
            r["embed"] = best(loop(lambda: m.embedding(tok)), reps) / 64
            r["posinc"] = best(loop(lambda: pos.add_(0)), reps) / 64
            print(f"{name} {fmt} head_in_launch={bool(head)}: " + " ".join(f"{k} {v:.1f}" for k, v in r.items())
                  + " (us)", flush=True)


if __name__ == "__main__":
    main()
