"""nanoGPT in lockstep: the PyTorch original (nanogpt_char_torch.py) and the tlgpu port (examples/nanogpt_char.py)
from the same initial weights (torch's, copied) on the same batches (numpy's RNG), AdamW groups, the warmup +
cosine schedule and grad clipping of the runs: prints both losses and grad norms every 10 steps and the largest
weight difference at the end. python benchmarks/torch_ref/lockstep_nanogpt.py [steps=60]"""
import sys, numpy as np, math
import os
HERE = os.path.dirname(os.path.abspath(__file__)); ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [ROOT, os.path.join(ROOT, "examples"), HERE]
import tlgpu, torch
torch.set_num_threads(1)
import nanogpt_char as tg, nanogpt_char_torch as th
cfg = dict(n_layer=4, n_head=4, n_embd=128, block_size=64, bias=False, vocab_size=58, dropout=0.0)
torch.manual_seed(1338)
b = th.GPT(th.GPTConfig(**cfg)); a = tg.GPT(tg.GPTConfig(**cfg))
sd = {k: v.detach().numpy() for k, v in b.state_dict().items()}
a.load_state_dict({k: sd[k] for k in a.state_dict()})
oa = a.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu"); ob = b.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")
chars = sorted(set(tg.TEXT)); data = np.array([chars.index(c) for c in tg.TEXT[:int(len(tg.TEXT)*0.9)]])
rng = np.random.default_rng(0)
N = int(sys.argv[1]) if len(sys.argv) > 1 else 60
for it in range(N):
    lr = 1e-3 * (it + 1) / 21 if it < 20 else 1e-4 + 0.5 * (1 + math.cos(math.pi * (it - 20) / (N - 20))) * 9e-4
    for o in (oa, ob):
        for g in o.param_groups: g['lr'] = lr
    ix = rng.integers(0, len(data) - 64, 16)
    X = np.stack([data[i:i+64] for i in ix]); Y = np.stack([data[i+1:i+65] for i in ix])
    la = a(tlgpu.tensor(X), tlgpu.tensor(Y))[1]; lb = b(torch.tensor(X), torch.tensor(Y))[1]
    la.backward(); lb.backward()
    na = float(tlgpu.nn.utils.clip_grad_norm_(a.parameters(), 1.0)); nb = float(torch.nn.utils.clip_grad_norm_(b.parameters(), 1.0))
    oa.step(); ob.step(); oa.zero_grad(set_to_none=True); ob.zero_grad(set_to_none=True)
    if it % 10 == 0 or it == N - 1:
        print(f"iter {it}: loss tlgpu {la.item():.5f} torch {lb.item():.5f}  grad norm {na:.4f} {nb:.4f}", flush=True)
wa = {k: np.asarray(v) for k, v in a.state_dict().items()}
print("max |w_tlgpu - w_torch| after", N, "steps:", max(np.abs(wa[k] - b.state_dict()[k].detach().numpy()).max() for k in wa))
