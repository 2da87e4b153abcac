"""Diagnostic for tlgpu.decode_layer_ on a GPU: each case in its own process (a kernel fault ends a context):
the tiny decoder's logits through decode_layer_ against the six-launch step, with `groups` work-groups, and
the grid barrier's words. Usage: python3 benchmarks/diag_decode_layer.py [case ...]; a case is
"<groups>[:<build options>]", e.g. 1, 2, 0 (one a compute unit), 1:-DTL_NV_PTX=0, 1:-DDEC_PHASES=2 (phase 2
alone: which phase faults)."""
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

for case in sys.argv[1:] or ["1", "2", "0"]:
    g, _, opts = case.partition(":")
    for fmt in ("float32", "q4_0"):
        env = dict(os.environ, TLGPU_BUILD_OPTIONS=opts) if opts else os.environ
        r = subprocess.run([sys.executable, "-c", CHILD, g, fmt], env=env, capture_output=True, text=True, timeout=120)
        print(f"[{case} {fmt}] rc={r.returncode}", r.stdout.strip(), r.stderr.strip()[-400:], flush=True)
