"""tlgpu.jit replay through cl_khr_command_buffer against the command-by-command loop (docs/jit.md, "Command
buffers"): the same jitted function traced twice, command_buffer=True and False, timed in alternation (R rounds of
N calls each; host: enqueue time per call, whole: synced at the end of each round), medians and the best round.
Cases: an actor's MLP forward (8-64-64-4, batch 1 and 16), an 8-op elementwise chain kept unfused (fuse=False:
8 commands, [64, 64]), an LSTM cell training step (diag_jit's, Adam) and the tiny decoder's jitted device_step
(examples/tiny_decoder.py, float32). `segments`: the command-buffer trace's segments / commands inside them /
commands in all; `records/hits`: variants recorded (a new binding of a segment's slots) and segment enqueues that
found one; `record us`: host time to record one variant (clones, commands, finalize), against `host us/call`.
--envs runs the whole table again in child processes under each PoCL setting in ENVS (one worker thread, the
default, the single-threaded `basic` driver).
Usage: python benchmarks/bench_jit_cmdbuf.py [--json] [--calls N] [--rounds R] [--envs] [--cases a,b]"""
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE), os.path.join(os.path.dirname(HERE), "examples")]
import tlgpu  # noqa: E402
from _util import report  # noqa: E402


def _arg(name, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


CALLS, ROUNDS = _arg("--calls", 50), _arg("--rounds", 7)
ENVS = [("POCL_MAX_PTHREAD_COUNT=1",), ("default",), ("POCL_DEVICES=basic",)]


def make_mlp(batch):
    rng = np.random.default_rng(0)
    m = tlgpu.nn.Sequential(tlgpu.nn.Linear(8, 64), tlgpu.nn.Tanh(), tlgpu.nn.Linear(64, 64), tlgpu.nn.Tanh(),
                            tlgpu.nn.Linear(64, 4))

    def forward(x):
        with tlgpu.no_grad():
            return m(x).softmax(-1)
    x = tlgpu.tensor(rng.standard_normal((batch, 8)).astype(np.float32))
    return forward, lambda fn: fn(x), {}


def make_chain():
    rng = np.random.default_rng(0)

    def chain(x, y, b):
        return ((((x * y + 1.0).relu() - y) * 0.5).exp() + b).tanh() / 3.0 - x
    args = [tlgpu.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((64, 64), (64, 64), (64,))]
    return chain, lambda fn: fn(*args), {"fuse": False}


def make_lstm():
    from diag_jit import make_lstm as lstm
    step, args = lstm()
    return step, lambda fn: fn(*args), {}


def make_decoder():
    import tiny_decoder as td
    cfg = td.Config()
    cfg.max_len = CALLS + 16
    model = td.Decoder(cfg, td.make_weights(cfg))
    state = {}

    def call(fn):                                     # one decode step; the token fed back, the position advanced
        if state.get("fn") is not fn or state["left"] == 0:
            model.reset()
            state.update(fn=fn, left=CALLS, tok=model.prefill([1, 2, 3]).argmax(-1),
                         pos=tlgpu.tensor([3], dtype=tlgpu.int32))
        state["left"] -= 1
        logits, state["tok"] = fn(state["tok"], state["pos"])
        return logits
    return model.device_step, call, {}


CASES = {"mlp1": ("MLP forward 8-64-64-4, batch 1", lambda: make_mlp(1)),
         "mlp16": ("MLP forward 8-64-64-4, batch 16", lambda: make_mlp(16)),
         "chain": ("8-op chain [64, 64], fuse=False", make_chain),
         "lstm": ("LSTM cell step (Adam)", make_lstm),
         "decode": ("tiny decoder step (float32)", make_decoder)}


def measure(what, make):
    fn, call, kw = make()
    jits = {on: tlgpu.jit(fn, command_buffer=on, **kw) for on in (False, True)}
    host = {on: [] for on in jits}
    whole = {on: [] for on in jits}
    outs = {}
    for on, jf in jits.items():                       # eager call, trace, first replays
        for _ in range(3):
            outs[on] = call(jf)
    tlgpu.synchronize()
    for _ in range(ROUNDS):
        for on, jf in jits.items():
            t0 = time.perf_counter()
            for _ in range(CALLS):
                out = call(jf)
            t1 = time.perf_counter()
            tlgpu.synchronize()
            t2 = time.perf_counter()
            host[on].append((t1 - t0) / CALLS)
            whole[on].append((t2 - t0) / CALLS)
            del out
    cb = jits[True].memory_plan()["command_buffer"] or {}
    plan = jits[True].memory_plan()
    rows = []
    for on in (False, True):
        rows.append({"what": what, "replay": "command buffers" if on else "loop",
                     "host us/call": round(1e6 * statistics.median(host[on]), 1),
                     "us/call": round(1e6 * statistics.median(whole[on]), 1),
                     "best us/call": round(1e6 * min(whole[on]), 1),
                     "segments": f"{cb.get('segments', 0)} / {cb.get('commands', 0)} / {plan['commands']}" if on else "",
                     "records/hits": f"{cb.get('records', 0)}/{cb.get('hits', 0)}" if on else "",
                     "record us": round(1e6 * cb.get("record_s", 0) / max(cb.get("records", 0), 1), 1) if on else ""})
    rows[1]["ratio"] = round(rows[1]["us/call"] / rows[0]["us/call"], 3)
    return rows


def main():
    if "--envs" in sys.argv:
        argv = [a for a in sys.argv[1:] if a != "--envs"]
        for env in ENVS:
            e = dict(os.environ)
            for kv in env:
                if "=" in kv:
                    k, v = kv.split("=", 1)
                    e[k] = v
            print(f"## {' '.join(env)}", flush=True)
            subprocess.run([sys.executable, os.path.abspath(__file__), *argv], env=e, check=True)
        return
    why = tlgpu._C._jit_cmdbuf_device()
    if why is not None:
        sys.exit(f"bench_jit_cmdbuf: {why} ({tlgpu.device().name})")
    pick = _arg("--cases", ",".join(CASES)).split(",")
    rows = []
    for key in pick:
        rows += measure(*CASES[key])
    env = " ".join(f"{k}={os.environ[k]}" for k in ("POCL_MAX_PTHREAD_COUNT", "POCL_DEVICES") if k in os.environ)
    report(f"tlgpu.jit replay: command buffers against the loop ({tlgpu.device().name}; {env or 'default PoCL'}; "
           f"{ROUNDS} rounds of {CALLS} calls)", rows,
           ["what", "replay", "host us/call", "us/call", "best us/call", "ratio", "segments", "records/hits",
            "record us"])


if __name__ == "__main__":
    main()
