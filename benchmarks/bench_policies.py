"""RL policy building blocks: a Nature-CNN training step (conv 32 8x8 s4, 64 4x4 s2, 64 3x3 s1, linear
3136->512, ->actions; forward + cross-entropy + backward + Adam on 4x84x84 frames), a GRU step, and short GRU and LSTM
sequences with backward over 64 sequences, Categorical sampling (+ log_prob) of 4096 rows, and a DQN-style
Q(s, a) gather with its backward (a device scatter-add) over 4096 rows. Each is timed
next to PyTorch on the same hardware class when torch is importable (CUDA when available, else CPU), in the
same run. Host waits per iteration are counted for tlgpu (they should be 0: one sync ends each timing).
The `jit` column runs each case through tlgpu.jit (one trace replayed from C; docs/jit.md).
The `autocast bfloat16` rows run the CNN step and the GRU/LSTM cases with their forward under
tlgpu.autocast(dtype=tlgpu.bfloat16) (float32 parameters; docs/precision.md) beside PyTorch's forward under
torch.autocast(dtype=torch.bfloat16), in the same run.
Usage: python benchmarks/bench_policies.py [--json] [--batch N] [--reps N]"""
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
import tlgpu  # noqa: E402
from tlgpu import nn  # noqa: E402
from tlgpu.distributions import Categorical  # noqa: E402
from tlgpu.nn import functional as F  # noqa: E402
from _util import report  # noqa: E402


def _arg(name, default):
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


BATCH, REPS = _arg("--batch", 256), _arg("--reps", 5)
ACTIONS, SEQS, GRU_IN, GRU_H, SEQ_LEN, ROWS, CATS = 6, 64, 512, 256, 16, 4096, 18


def timed(cases, iters):
    """Median over REPS of the mean seconds per call of each (fn, sync) in cases: iters calls then one sync.
    The cases take turns within each rep, so a busy machine slows them alike."""
    for fn, sync in cases:
        fn()
        sync()
    times = [[] for _ in cases]
    for _ in range(REPS):
        for k, (fn, sync) in enumerate(cases):
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            sync()
            times[k].append((time.perf_counter() - t0) / iters)
    return [sorted(t)[len(t) // 2] for t in times]


def tl_waits(fn, iters):
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    for _ in range(iters):
        fn()
    tlgpu.synchronize()
    return (tlgpu.stream_stats()["waits"] - 1) / iters


def data():
    rng = np.random.default_rng(0)
    frames = rng.random((BATCH, 4, 84, 84), dtype=np.float32)
    return frames, rng.integers(0, ACTIONS, BATCH).astype(np.int32)


def tlgpu_cases():
    frames, actions = data()
    x, y = tlgpu.tensor(frames), tlgpu.tensor(actions)
    net = nn.Sequential(nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
                        nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(),
                        nn.Linear(512, ACTIONS))
    opt = tlgpu.optim.Adam(net.parameters(), lr=2.5e-4)
    ac = lambda on: tlgpu.autocast(dtype=tlgpu.bfloat16, enabled=on)     # noqa: E731

    def cnn_step(on=False):
        with ac(on):
            loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    cell, gru = nn.GRUCell(GRU_IN, GRU_H), nn.GRU(GRU_IN, GRU_H)
    gx, gh, seq = tlgpu.randn(SEQS, GRU_IN), tlgpu.randn(SEQS, GRU_H), tlgpu.randn(SEQ_LEN, SEQS, GRU_IN)

    def gru_step(on=False):
        with tlgpu.no_grad(), ac(on):
            cell(gx, gh)

    def gru_seq(on=False):
        with ac(on):
            out, h = gru(seq)
        out.float().square().mean().backward()

    lstm = nn.LSTM(GRU_IN, GRU_H)

    def lstm_seq(on=False):
        with ac(on):
            out, (h, c) = lstm(seq)
        out.float().square().mean().backward()

    logits = tlgpu.randn(ROWS, CATS)

    def sample():
        d = Categorical(logits=logits)
        d.log_prob(d.sample())

    q = tlgpu.randn(ROWS, CATS, requires_grad=True)
    acts = tlgpu.tensor(np.random.default_rng(1).integers(0, CATS, (ROWS, 1)).astype(np.int32))

    def q_gather():
        q.gather(1, acts).square().mean().backward()

    return {"cnn": cnn_step, "gru_step": gru_step, "gru_seq": gru_seq, "lstm_seq": lstm_seq, "sample": sample,
            "q_gather": q_gather, **_autocast_cases(cnn_step, gru_step, gru_seq, lstm_seq)}


def _autocast_cases(cnn_step, gru_step, gru_seq, lstm_seq):
    """The `*_ac` cases: the same functions with their forward under autocast(bfloat16)."""
    return {f"{k}_ac": (lambda f=f: f(True)) for k, f in
            (("cnn", cnn_step), ("gru_step", gru_step), ("gru_seq", gru_seq), ("lstm_seq", lstm_seq))}


def torch_cases():
    try:
        import torch
    except ImportError:
        return None, None, None
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tnn = torch.nn
    frames, actions = data()
    x, y = torch.tensor(frames, device=dev), torch.tensor(actions, device=dev).long()
    net = tnn.Sequential(tnn.Conv2d(4, 32, 8, stride=4), tnn.ReLU(), tnn.Conv2d(32, 64, 4, stride=2), tnn.ReLU(),
                         tnn.Conv2d(64, 64, 3, stride=1), tnn.ReLU(), tnn.Flatten(), tnn.Linear(3136, 512),
                         tnn.ReLU(), tnn.Linear(512, ACTIONS)).to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=2.5e-4)
    ac = lambda on: torch.autocast(device_type=dev, dtype=torch.bfloat16, enabled=on)     # noqa: E731

    def cnn_step(on=False):
        with ac(on):
            loss = tnn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    cell, gru = tnn.GRUCell(GRU_IN, GRU_H).to(dev), tnn.GRU(GRU_IN, GRU_H).to(dev)
    gx, gh = torch.randn(SEQS, GRU_IN, device=dev), torch.randn(SEQS, GRU_H, device=dev)
    seq = torch.randn(SEQ_LEN, SEQS, GRU_IN, device=dev)

    def gru_step(on=False):
        with torch.no_grad(), ac(on):
            cell(gx, gh)

    def gru_seq(on=False):
        with ac(on):
            out, h = gru(seq)
        out.float().square().mean().backward()

    lstm = tnn.LSTM(GRU_IN, GRU_H).to(dev)

    def lstm_seq(on=False):
        with ac(on):
            out, (h, c) = lstm(seq)
        out.float().square().mean().backward()

    logits = torch.randn(ROWS, CATS, device=dev)

    def sample():
        d = torch.distributions.Categorical(logits=logits)
        d.log_prob(d.sample())

    q = torch.randn(ROWS, CATS, device=dev, requires_grad=True)
    acts = torch.tensor(np.random.default_rng(1).integers(0, CATS, (ROWS, 1)), device=dev)

    def q_gather():
        q.gather(1, acts).square().mean().backward()

    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    return {"cnn": cnn_step, "gru_step": gru_step, "gru_seq": gru_seq, "lstm_seq": lstm_seq, "sample": sample,
            "q_gather": q_gather, **_autocast_cases(cnn_step, gru_step, gru_seq, lstm_seq)}, \
        sync, \
        f"PyTorch {torch.__version__} {dev} ({torch.get_num_threads()} threads)" if dev == "cpu" else \
        f"PyTorch {torch.__version__} {dev}"


def main():
    what = {"cnn": (f"Nature-CNN train step (fwd+bwd+Adam), batch {BATCH}x4x84x84", 2),
            "gru_step": (f"GRUCell step {GRU_IN}->{GRU_H}, {SEQS} sequences, no grad", 50),
            "gru_seq": (f"GRU {SEQ_LEN} steps fwd+bwd, {SEQS} sequences", 3),
            "lstm_seq": (f"LSTM {SEQ_LEN} steps fwd+bwd, {SEQS} sequences", 3),
            "sample": (f"Categorical sample + log_prob, {ROWS} rows x {CATS}", 50),
            "q_gather": (f"Q(s, a) gather + backward (DQN), {ROWS} rows x {CATS}", 50)}
    what.update({f"{k}_ac": (f"{what[k][0]}, autocast bfloat16", what[k][1])
                 for k in ("cnn", "gru_step", "gru_seq", "lstm_seq")})
    tl = tlgpu_cases()
    tlj = {k: tlgpu.jit(f) for k, f in tl.items()}   # the same work replayed from one trace (docs/jit.md)
    th, th_sync, th_name = torch_cases()
    rows = []
    for key, (label, iters) in what.items():
        cases = [(tl[key], tlgpu.synchronize), (tlj[key], tlgpu.synchronize)]
        t = timed(cases + ([(th[key], th_sync)] if th is not None else []), iters)
        row = {"what": label, "tlgpu ms": t[0] * 1e3, "jit ms": t[1] * 1e3,
               "tlgpu waits/iter": tl_waits(tl[key], iters)}
        if th is not None:
            row.update({"torch ms": t[2] * 1e3, "tlgpu / torch": t[0] / t[2], "jit / torch": t[1] / t[2]})
        rows.append(row)
    report("RL policy blocks: conv, GRU, LSTM, Categorical, gather", rows,
           ["what", "tlgpu ms", "jit ms", "torch ms", "tlgpu / torch", "jit / torch", "tlgpu waits/iter"],
           extra={"reference": th_name or "torch not importable", "median of reps": REPS})


if __name__ == "__main__":
    main()
