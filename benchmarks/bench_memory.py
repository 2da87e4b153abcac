"""Host memory without sync points: peak RSS growth (/proc/self/statm) and ops/s of two loops that never
read back, with back-pressure on (defaults: TLGPU_MAX_INFLIGHT=16 batches, TLGPU_MAX_STAGING_MB=64) and off
(both 0): 200,000 `a.add_(1.0)` on 1024 floats, and 2,000 uploads of 1 MiB each added into an accumulator.
Each loop runs in a fresh child process; medians of --reps runs (and the worst growth). How far memory grows
without the bounds depends on how far the host outruns the device, so it varies from run to run.
Usage: python benchmarks/bench_memory.py [--json] [--reps N]"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # runs from a source checkout too
import tlgpu  # noqa: E402,F401
from _util import report  # noqa: E402

REPS = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 1

CHILD = """
import json, os, sys, time, numpy as np
sys.path.insert(0, %r)
import tlgpu
PAGE = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE
loop = %r
if loop == "add":
    n, every = 200000, 5000
    a = tlgpu.zeros(1024)
    step = lambda i: a.add_(1.0)
else:
    n, every = 2000, 50
    hs = [np.random.default_rng(i).integers(-8, 9, 1 << 18).astype(np.float32) for i in range(4)]
    a = tlgpu.zeros(1 << 18)
    step = lambda i: a.add_(tlgpu.tensor(hs[i %% 4]))
for i in range(200):
    step(i)
a.numpy()
tlgpu.reset_stream_stats()
base = peak = rss()
t0 = time.perf_counter()
for i in range(n):
    step(i)
    if i %% every == 0:
        peak = max(peak, rss())
peak = max(peak, rss())
dt = time.perf_counter() - t0          # host time of the loop: what a program that never reads sees
a.numpy()
total = time.perf_counter() - t0
print(json.dumps({"n": n, "growth": peak - base, "ops_s": n / dt, "total_s": total,
                  "bp": tlgpu.stream_stats().get("backpressure_waits", 0)}))
"""

SETTINGS = [("on (16 batches, 64 MiB)", {}),
            ("off (0, 0)", {"TLGPU_MAX_INFLIGHT": "0", "TLGPU_MAX_STAGING_MB": "0"})]
LOOPS = [("add", "200,000 a.add_(1.0), 1024 floats"), ("upload", "2,000 acc.add_(tensor(1 MiB array))")]


def run(loop, env):
    full = dict(os.environ, **env)
    out = subprocess.run([sys.executable, "-c", CHILD % (os.path.dirname(HERE), loop)], env=full,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    rows = []
    for loop, what in LOOPS:
        for name, env in SETTINGS:
            rs = [run(loop, env) for _ in range(REPS)]
            growth = sorted(r["growth"] for r in rs)[len(rs) // 2] / 2**20
            worst = max(r["growth"] for r in rs) / 2**20
            ops = sorted(r["ops_s"] for r in rs)[len(rs) // 2]
            done = sorted(r["total_s"] for r in rs)[len(rs) // 2]
            rows.append({"loop": what, "back-pressure": name, "RSS growth MiB": growth, "worst MiB": worst,
                         "ops/s (host)": ops,
                         "total s (to last result)": done, "backpressure waits": rs[len(rs) // 2]["bp"]})
    report("host memory without sync points", rows,
           ["loop", "back-pressure", "RSS growth MiB", "worst MiB", "ops/s (host)", "total s (to last result)",
            "backpressure waits"])


if __name__ == "__main__":
    main()
