"""Teacher-forced decode of examples/tiny_decoder.py's tiny model: the sync step (token and position as ints)
against device_step (int32 tensors) on the same tokens, max |logits difference| per step, for q8_0, q4_0 and
float32 weights and each tlgpu.quant._MV_IMPL. Both loops must give the same bits (the attention length fix,
benchmarks/NOTES.md fourth session, call 4). Usage, from the repository root: python3 benchmarks/diag_decode_loops.py"""
import sys
sys.path[:0] = ['examples', '.']
import numpy as np
import tlgpu
from tlgpu import quant
import tiny_decoder as td

cfg = td.Config()
for kind in ("q8_0", "q4_0", None):
    model = td.Decoder(cfg, td.make_weights(cfg, 0), q4=False, kind=kind)
    for impl in ("old", "dp4a", "q8x", "q8x8", "auto"):
        quant._MV_IMPL = impl
        ref = model.generate([1, 2, 3], 20)
        seq = [1, 2, 3] + ref
        worst = []
        for use_dev in (False, True):
            model.reset()
            outs = []
            for p, t in enumerate(seq[:-1]):
                if use_dev:
                    lg, _ = model.device_step(tlgpu.tensor([t], dtype=tlgpu.int32), tlgpu.tensor([p], dtype=tlgpu.int32))
                else:
                    lg = model.step(t, p)
                outs.append(lg.numpy().ravel())
            worst.append(np.array(outs))
        d = np.abs(worst[0] - worst[1]).max(axis=1)
        print(kind, impl, "max |sync - device| per step:", np.array2string(d, precision=2), flush=True)
