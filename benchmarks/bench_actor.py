"""An RL actor's policy forward: latency of one no-grad forward (MLP 8-64-64-4 and the Nature CNN on 4x84x84
frames, batch 1 and 16), tlgpu eager and through tlgpu.jit, next to PyTorch CPU in the same run.

Each configuration runs in its own child process, so thread counts are set before anything starts:
- `threads=1` is how RL actors run, one process per actor: PoCL with one worker thread
  (POCL_MAX_PTHREAD_COUNT=1) against torch.set_num_threads(1);
- `threads=all` uses the whole machine.

The time per forward includes reading the result back (`numpy()`), as an actor must before it picks
an action. On a GPU device the thread settings concern PyTorch CPU only.
Usage: python benchmarks/bench_actor.py [--json] [--iters N] [--threads 1 all]"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
from _util import report  # noqa: E402

CHILD = r'''
import json, os, sys, time
import numpy as np
sys.path.insert(0, {root!r})
which, batch, iters = {which!r}, {batch}, {iters}
rng = np.random.default_rng(0)
shape = (batch, 8) if which == "mlp" else (batch, 4, 84, 84)
obs = rng.random(shape, dtype=np.float32)
out = {{}}

def timed(fn):
    for _ in range(5):
        fn()
    best = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        best.append((time.perf_counter() - t0) / iters)
    return sorted(best)[2] * 1e3

import tlgpu
from tlgpu import nn
tlgpu.manual_seed(0)
if which == "mlp":
    net = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4))
else:
    net = nn.Sequential(nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
                        nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(),
                        nn.Linear(512, 6))

def fwd(x):
    with tlgpu.no_grad():
        return net(x).softmax(-1)
jfwd = tlgpu.jit(fwd)
x = tlgpu.tensor(obs)
out["tlgpu"] = timed(lambda: fwd(tlgpu.tensor(obs)).numpy())
out["jit"] = timed(lambda: jfwd(tlgpu.tensor(obs)).numpy())
out["device"] = tlgpu.device().name
try:
    import torch
    if {one!r}:
        torch.set_num_threads(1)
    if which == "mlp":
        tnet = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                   torch.nn.Linear(64, 4))
    else:
        tnet = torch.nn.Sequential(torch.nn.Conv2d(4, 32, 8, stride=4), torch.nn.ReLU(),
                                   torch.nn.Conv2d(32, 64, 4, stride=2), torch.nn.ReLU(),
                                   torch.nn.Conv2d(64, 64, 3, stride=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                   torch.nn.Linear(3136, 512), torch.nn.ReLU(), torch.nn.Linear(512, 6))

    def tfwd():
        with torch.no_grad():
            return tnet(torch.from_numpy(obs)).softmax(-1).numpy()
    out["torch"] = timed(tfwd)
    out["torch_threads"] = torch.get_num_threads()
except ImportError:
    pass
print("RESULT " + json.dumps(out))
'''


def main():
    iters = int(sys.argv[sys.argv.index("--iters") + 1]) if "--iters" in sys.argv else 200
    threads = ["1", "all"]
    if "--threads" in sys.argv:
        i = sys.argv.index("--threads") + 1
        threads = [t for t in sys.argv[i:] if not t.startswith("--")][:2] or threads
    rows = []
    for th in threads:
        for which, batch in (("mlp", 1), ("mlp", 16), ("cnn", 1), ("cnn", 16)):
            env = dict(os.environ)
            if th == "1":
                env["POCL_MAX_PTHREAD_COUNT"] = "1"
            code = CHILD.format(root=os.path.dirname(HERE), which=which, batch=batch,
                                iters=iters if which == "mlp" else max(iters // 10, 10), one=th == "1")
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
            line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
            if not line:
                print(r.stderr[-2000:], file=sys.stderr)
                continue
            d = json.loads(line[0][7:])
            row = {"policy": f"{which} batch {batch}", "threads": th, "tlgpu ms": d["tlgpu"], "jit ms": d["jit"]}
            if "torch" in d:
                row.update({"torch ms": d["torch"], "jit / torch": d["jit"] / d["torch"]})
            rows.append(row)
    report("Actor forward (no grad, result read back)", rows,
           ["policy", "threads", "tlgpu ms", "jit ms", "torch ms", "jit / torch"], extra={"iters": iters})


if __name__ == "__main__":
    main()
