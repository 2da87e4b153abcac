"""An RL actor's policy forward: latency of one no-grad forward (MLP 8-64-64-4 and the Nature CNN on 4x84x84
frames, batch 1 and 16), tlgpu eager and through tlgpu.jit, next to numpy and PyTorch CPU in the same run.

Each configuration runs in its own child process, so thread counts are set before anything starts:
- `threads=minimal` is how the RL examples' actors run (examples/rl_learner.py actor_env): PoCL's
  single-threaded driver (POCL_DEVICES=basic, "cpu-minimal" from PoCL 4.0), which runs every kernel on the
  calling thread when the queue is flushed, against torch.set_num_threads(1) and one OpenBLAS thread;
- `threads=1`: PoCL's threaded driver with one worker thread (POCL_MAX_PTHREAD_COUNT=1, POCL_CPU_MAX_CU_COUNT=1
  from PoCL 4.0), which hands each flush to that thread and waits for it;
- `threads=all` uses the whole machine.

The time per forward includes the upload of the observations and reading the result back (`numpy()`), as an
actor must before it picks an action; `commands` is the jitted forward's command count (kernels and native
BLAS calls). The numpy forward is checked against tlgpu's. On a GPU device the thread settings concern numpy
and PyTorch CPU only, except `minimal`, which runs on PoCL where it is installed (as the examples' actors do).
`--clock thread` times with the calling thread's CPU time (time.thread_time) instead of the wall clock: on a
shared, busy machine it leaves out the time other processes took the core, and it counts all the work only
where all of it runs on the calling thread: `threads=minimal` and PyTorch or numpy with one thread (not the
threaded PoCL driver's worker). `--policy mlp|cnn` runs one of the two networks.
Usage: python benchmarks/bench_actor.py [--json] [--iters N] [--repeat R] [--clock wall|thread]
                                       [--policy mlp|cnn] [--threads minimal 1 all]"""
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, ROOT, os.path.join(ROOT, "examples")]
from _util import report  # noqa: E402

CHILD = r'''
import json, os, sys, time
import numpy as np
sys.path.insert(0, {root!r})
which, batch, iters = {which!r}, {batch}, {iters}
clock = time.thread_time if {clock!r} == "thread" else time.perf_counter
rng = np.random.default_rng(0)
shape = (batch, 8) if which == "mlp" else (batch, 4, 84, 84)
obs = rng.random(shape, dtype=np.float32)
out = {{}}

def timed(fn):
    for _ in range(5):
        fn()
    best = []
    for _ in range(5):
        t0 = clock()
        for _ in range(iters):
            fn()
        best.append((clock() - t0) / iters)
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
out["tlgpu"] = timed(lambda: fwd(tlgpu.tensor(obs)).numpy())
out["jit"] = timed(lambda: jfwd(tlgpu.tensor(obs)).numpy())
out["commands"] = jfwd.memory_plan()["commands"]
out["device"] = tlgpu.device().name

# numpy: what the examples' actors ran before (examples/ppo_atari.py np_forward), on the same weights
w = {{k: v for k, v in net.state_dict().items()}}

def np_softmax(z):
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)
if which == "mlp":
    def npfwd():
        h = np.tanh(obs @ w["0.weight"].T + w["0.bias"])
        h = np.tanh(h @ w["2.weight"].T + w["2.bias"])
        return np_softmax(h @ w["4.weight"].T + w["4.bias"])
else:
    fc = w["7.weight"].reshape(512, 64, 7, 7).transpose(0, 2, 3, 1).reshape(512, -1)   # NCHW flatten -> NHWC

    def conv(x, k, s):
        win = np.lib.stride_tricks.sliding_window_view(x, w[k + ".weight"].shape[2:], axis=(1, 2))[:, ::s, ::s]
        return np.maximum(np.tensordot(win, w[k + ".weight"], axes=([3, 4, 5], [1, 2, 3])) + w[k + ".bias"], 0)

    def npfwd():
        x = conv(conv(conv(obs.transpose(0, 2, 3, 1), "0", 4), "2", 2), "4", 1)
        h = np.maximum(x.reshape(batch, -1) @ fc.T + w["7.bias"], 0)
        return np_softmax(h @ w["9.weight"].T + w["9.bias"])
np.testing.assert_allclose(npfwd(), jfwd(tlgpu.tensor(obs)).numpy(), rtol=1e-4, atol=1e-6)
out["numpy"] = timed(npfwd)
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

ONE_THREAD = {"POCL_MAX_PTHREAD_COUNT": "1", "POCL_CPU_MAX_CU_COUNT": "1", "OPENBLAS_NUM_THREADS": "1",
              "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def thread_env(th):
    """The child's extra environment for a threads mode (see the module doc)."""
    if th == "all":
        return {}
    if th == "1":
        return dict(ONE_THREAD)
    import tlgpu
    from rl_learner import actor_env
    env = actor_env("tlgpu", tlgpu.devices())
    if "POCL_DEVICES" not in env:
        return None                                      # no PoCL here: no single-threaded driver to measure
    return {**ONE_THREAD, **env}


def main():
    iters = int(sys.argv[sys.argv.index("--iters") + 1]) if "--iters" in sys.argv else 200
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 1
    clock = sys.argv[sys.argv.index("--clock") + 1] if "--clock" in sys.argv else "wall"
    threads = ["minimal", "1", "all"]
    if "--threads" in sys.argv:
        i = sys.argv.index("--threads") + 1
        threads = [t for t in sys.argv[i:i + 3] if t in ("minimal", "1", "all")] or threads
    policy = sys.argv[sys.argv.index("--policy") + 1] if "--policy" in sys.argv else None
    configs = [(th, which, batch) for th in threads for which, batch in (("mlp", 1), ("mlp", 16), ("cnn", 1),
                                                                          ("cnn", 16)) if policy in (None, which)]
    got = {c: [] for c in configs}
    for _ in range(repeat):                    # repeats take turns, so a busy spell touches every configuration
        for th, which, batch in configs:
            extra = thread_env(th)
            if extra is None:
                continue
            env = {**os.environ, **extra}
            code = CHILD.format(root=ROOT, which=which, batch=batch, clock=clock,
                                iters=iters if which == "mlp" else max(iters // 10, 10), one=th != "all")
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
            line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
            if not line:
                print(r.stderr[-2000:], file=sys.stderr)
                continue
            got[(th, which, batch)].append(json.loads(line[0][7:]))
    rows = []
    for (th, which, batch), ds in got.items():
        if not ds:
            continue
        med = {k: statistics.median(d[k] for d in ds) for k in ("tlgpu", "jit", "numpy", "torch") if k in ds[0]}
        row = {"policy": f"{which} batch {batch}", "threads": th, "device": ds[0]["device"].split("-")[0],
               "commands": ds[0]["commands"], "tlgpu ms": med["tlgpu"], "jit ms": med["jit"],
               "numpy ms": med["numpy"]}
        if "torch" in med:
            row.update({"torch ms": med["torch"], "jit / torch": med["jit"] / med["torch"]})
        rows.append(row)
    report("Actor forward (no grad, upload and read-back included)", rows,
           ["policy", "threads", "device", "commands", "tlgpu ms", "jit ms", "numpy ms", "torch ms", "jit / torch"],
           extra={"iters": iters, "repeat (median of)": repeat, "clock": clock})


if __name__ == "__main__":
    main()
