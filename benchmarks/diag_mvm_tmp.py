import os, subprocess, sys, json
code = r'''
import numpy as np, tlgpu
from tlgpu import quant
rng = np.random.default_rng(1)
out = []
for kind in ("q4_0", "q8_0"):
    for (m, n, k) in [(1, 5, 32), (2, 9, 64), (8, 70, 4096), (7, 129, 256), (5, 300, 96)]:
        w = rng.standard_normal((n, k)).astype(np.float32); x = tlgpu.tensor(rng.standard_normal((m, k)).astype(np.float32))
        q = getattr(quant, "quantize_" + kind)(w)
        quant._MV_IMPL = "q8x8"; ref = quant.matmul(x, q).numpy()
        quant._MV_IMPL = "mma"; got = quant.matmul(x, q).numpy()
        out.append((kind, m, n, k, bool(np.array_equal(ref, got)), float(np.abs(ref - got).max())))
print(out)
'''
for opt in ["", "-DMVM_SCALAR=1", "-DTL_NV_PTX=0"]:
    env = dict(os.environ, TLGPU_BUILD_OPTIONS=opt)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    print("OPT", repr(opt), "rc", r.returncode, r.stdout.strip()[-1500:], r.stderr.strip()[-600:])
