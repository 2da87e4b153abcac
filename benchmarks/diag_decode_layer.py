"""Diagnostic for tlgpu.decode_layer_ on a GPU: each case in its own process (a kernel fault ends a context):
the tiny decoder's logits through decode_layer_ against the six-launch step, with `groups` work-groups, and
the grid barrier's words. Usage: python3 benchmarks/diag_decode_layer.py [case ...]; a case is
"<groups>[:<build options>]", e.g. 1, 2, 0 (one a compute unit), 1:-DTL_NV_PTX=0, 1:-DDEC_PHASES=2 (phase 2
alone: which phase faults). DIAG_TIME="<case> ..." instead times one medium-sized layer (dim 2048, hidden 5632,
16 / 4 heads) per case and format (DIAG_FMTS), e.g. DIAG_TIME="0 66 0:-DDEC_PHASES=0". DIAG_STAMPS="<case> ..."
times the phases inside the kernel instead (NVIDIA; the program built with -DDEC_STAMPS=1, %globaltimer at each
phase's end and after each grid barrier): eight distinct medium layers run in turn (as in a decode step: the
weights do not stay in L2; "+" joins build options in a case, e.g. "0:-DDEC_UQ=4+-DDEC_UF=8"), and the
last launch's stamps give, in us from the first work-group's start, the
median over repeats of the slowest work-group's end of each phase and of each barrier, at positions DIAG_POS,
and the launch's whole time, and the staging of x before each product (its end less the phase's start, the slowest
work-group's); DIAG_STACKED=stacked runs the eight layers in one launch (decode_layer_(...,
layers=8)) and gives the last layer's phases; DIAG_STACKED=same runs one layer eight times (its weights in L2 from
the second launch: what the phases cost without memory's latency and bandwidth).
DIAG_FORCED="<model> ..." (tiny, medium): teacher-forced decode of bench_decode's model, Decoder(fuse="layer")
against the six-launch step on the same tokens, per format (DIAG_FMTS): the largest logits difference relative
to the largest logit, and how often and by how much the two argmaxes differ."""
import os
import subprocess
import sys

CHILD = r'''
import sys, numpy as np
sys.path.insert(0, "examples")
import tlgpu, tiny_decoder as td
g = int(sys.argv[1]); fmt = sys.argv[2]
cfg = td.Config()
w = td.make_weights(cfg, 0)
kw = {"q4_0": {"kind": "q4_0"}, "q8_0": {"kind": "q8_0"}, "float16": {"dtype": "float16"}}.get(fmt, {})
out = {}
for fuse in (True, "layer"):
    m = td.Decoder(cfg, w, fuse=fuse, **kw)
    m.groups = g
    out[fuse] = np.stack([m.step(t, i).numpy()[0] for i, t in enumerate([1, 5, 9])])
d = np.abs(out[True] - out["layer"]).max() / np.abs(out[True]).max()
print(f"groups={g} {fmt}: rel diff {d:.2e}, barrier {tlgpu._C._decode_barrier()}", flush=True)
'''

MODES = ("DIAG_TIME", "DIAG_STAMPS", "DIAG_FORCED")
for case in (sys.argv[1:] or ["1", "2", "0"]) if not any(os.environ.get(m) for m in MODES) else []:
    g, _, opts = case.partition(":")
    for fmt in ("float32", "q4_0"):
        env = dict(os.environ, TLGPU_BUILD_OPTIONS=opts) if opts else os.environ
        r = subprocess.run([sys.executable, "-c", CHILD, g, fmt], env=env, capture_output=True, text=True, timeout=120)
        print(f"[{case} {fmt}] rc={r.returncode}", r.stdout.strip(), r.stderr.strip()[-400:], flush=True)

SETUP = r'''
import sys, time, numpy as np
import tlgpu
from tlgpu import quant
g, fmt = int(sys.argv[1]), sys.argv[2]
dim, hid, nq, nkv, ml = 2048, 5632, 16, 4, 128
D = dim // nq
rng = np.random.default_rng(0)
def m(o, i):
    a = (rng.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)
    return {"q4_0": quant.quantize_q4_0, "q8_0": quant.quantize_q8_0}.get(fmt, lambda t: tlgpu.tensor(t).to(getattr(tlgpu, fmt)))(a)
def layer():
    return [m((nq + 2 * nkv) * D, dim), m(dim, dim), m(2 * hid, dim), m(dim, hid)]
x = tlgpu.tensor(rng.standard_normal((1, dim)).astype(np.float32))
kv = tlgpu.tensor(rng.standard_normal((2 * nkv, ml, D)).astype(np.float32))
n1 = tlgpu.ones(dim); n2 = tlgpu.ones(dim)
'''

TIME = SETUP + r'''
ws = layer()
def run(k):
    for _ in range(k):
        tlgpu.decode_layer_(x, 40, kv, n1, ws[0], ws[1], n2, ws[2], ws[3], nq, groups=g)
    tlgpu.synchronize()
run(5)
best = 1e9
for _ in range(5):
    t = time.perf_counter(); run(50); best = min(best, (time.perf_counter() - t) / 50)
print(f"groups={g} {fmt}: {best * 1e6:.1f} us a layer (dim {dim}, hidden {hid}, pos 40)", tlgpu._C._decode_barrier(),
      flush=True)
'''

STAMPS = SETUP + r'''
same = "same" in sys.argv[4:]                       # one layer eight times: its weights stay in L2
layers = [layer()] * 8 if same else [layer() for _ in range(8)]
names = ["qkv", "bar1", "attn", "bar2", "wo", "bar3", "w13", "bar4", "w2"]
stacked = "stacked" in sys.argv[4:]
if stacked:                                          # the 8 layers in one launch: stacked arguments
    def cat(ws):
        return type(ws[0]).cat_rows(ws) if quant.is_quantized(ws[0]) else tlgpu.stack(ws)
    st8 = [cat([ws[i] for ws in layers]) for i in range(4)]
    kv8, n18, n28 = tlgpu.stack([kv] * 8), tlgpu.stack([n1] * 8), tlgpu.stack([n2] * 8)
    del layers[1:]
for pos in [int(p) for p in sys.argv[3].split(",")]:
    rows, whole, stg = [], [], []
    for rep in range(12):
        if stacked:
            tlgpu.decode_layer_(x, pos, kv8, n18, st8[0], st8[1], n28, st8[2], st8[3], nq, groups=g, layers=8)
        else:
            for ws in layers:
                tlgpu.decode_layer_(x, pos, kv, n1, ws[0], ws[1], n2, ws[2], ws[3], nq, groups=g)
        st = np.array(tlgpu._C._decode_stamps(), dtype=np.uint32)
        if rep >= 2:
            whole.append((st[:, 11] - st[:, 10].min()).astype(np.int64).max() / 1e3)
        if rep >= 2:                                  # the staging of x before each product (stamps 12-15)
            pairs = ((12, 0), (14, 4), (15, 6), (13, 8))
            stg.append([(st[:, a] - st[:, b]).astype(np.int32).max() / 1e3 for a, b in pairs])
        st = st[:, :10]
        if rep >= 2:
            rel = (st - st[:, :1].min()).astype(np.int64)  # uint32 differences: the stamps lie within a few ms
            ends = rel.max(axis=0)
            rows.append(np.concatenate([[rel[:, 0].max() / 1e3], np.diff(ends) / 1e3]))
    r = np.median(np.array(rows), axis=0)
    bar = tlgpu._C._decode_barrier()
    print(f"groups={bar['groups']} x {bar['local_size']} {fmt} pos {pos}: start spread {r[0]:.2f} us; " +
          " ".join(f"{n} {v:.2f}" for n, v in zip(names, r[1:])) + f"; total {r.sum():.2f} us; the launch "
          f"{np.median(whole):.2f} us ({'8 layers' if stacked else 'the last of 8'}); gave_up {bar['gave_up']}; "
          "staging " +
          " ".join(f"{n} {v:.2f}" for n, v in zip(("qkv", "wo", "w13", "w2"), np.median(np.array(stg), axis=0))),
          flush=True)
'''

FORCED = r'''
import sys, numpy as np
sys.path[:0] = ["examples", "benchmarks"]
import tlgpu, tiny_decoder as td
from bench_decode import MODELS, FORMATS
cfg = MODELS[sys.argv[1]]
w = td.make_weights(cfg, 0)
for fmt in sys.argv[2].split(","):
    seq = td.Decoder(cfg, w, fuse=True, **FORMATS[fmt]).generate([1, 2, 3], 32)
    out = []
    for fuse in (True, "layer"):
        m = td.Decoder(cfg, w, fuse=fuse, **FORMATS[fmt])
        out.append(np.stack([m.step(t, p).numpy().ravel() for p, t in enumerate([1, 2, 3] + seq[:-1])]))
    a, b = out
    rel = np.abs(a - b).max() / np.abs(a).max()
    flips = [(i, float(np.sort(a[i])[-1] - np.sort(a[i])[-2])) for i in range(len(a)) if a[i].argmax() != b[i].argmax()]
    print(f"{sys.argv[1]} {fmt}: layer vs six launches, teacher-forced {len(a)} steps: max rel diff {rel:.2e}, "
          f"argmax differs at {len(flips)} steps (step, six-launch top-2 margin): {flips[:4]}", flush=True)
'''

if __name__ == "__main__" and os.environ.get("DIAG_FORCED"):
    for name in os.environ["DIAG_FORCED"].split():
        fmts = ",".join(os.environ.get("DIAG_FMTS", "q8_0 q4_0").split())
        r = subprocess.run([sys.executable, "-c", FORCED, name, fmts], capture_output=True, text=True, timeout=300)
        print(f"[forced {name}] rc={r.returncode}", r.stdout.strip(), r.stderr.strip()[-300:], flush=True)

if __name__ == "__main__" and os.environ.get("DIAG_STAMPS"):
    for case in os.environ["DIAG_STAMPS"].split():
        g, _, opts = case.partition(":")
        for fmt in os.environ.get("DIAG_FMTS", "q4_0 float16").split():
            env = dict(os.environ, TLGPU_BUILD_OPTIONS=("-DDEC_STAMPS=1 " + opts.replace("+", " ")).strip())
            pos = ",".join(os.environ.get("DIAG_POS", "40").split())
            r = subprocess.run([sys.executable, "-c", STAMPS, g, fmt, pos] + os.environ.get("DIAG_STACKED", "").split(),
                               env=env, capture_output=True, text=True, timeout=300)
            print(f"[{case} {fmt}] rc={r.returncode}", r.stdout.strip(), r.stderr.strip()[-300:], flush=True)

if __name__ == "__main__" and os.environ.get("DIAG_TIME"):
    for case in os.environ["DIAG_TIME"].split():
        g, _, opts = case.partition(":")
        for fmt in os.environ.get("DIAG_FMTS", "q4_0 float32").split():
            env = dict(os.environ, TLGPU_BUILD_OPTIONS=opts) if opts else os.environ
            r = subprocess.run([sys.executable, "-c", TIME, g, fmt], env=env, capture_output=True, text=True, timeout=120)
            print(f"[{case} {fmt}] rc={r.returncode}", r.stdout.strip(), r.stderr.strip()[-300:], flush=True)
