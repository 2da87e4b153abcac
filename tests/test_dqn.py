"""examples/dqn.py (CleanRL's DQN on tlgpu): its TD loss and gradients against a float64 numpy reference on
random data (Q(s, a) through gather's backward), the soft target update, and a short run end to end."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import tlgpu
from conftest import HANG_S, ROOT

sys.path.insert(0, os.path.join(ROOT, "examples"))
import dqn  # noqa: E402


def np_forward(params, x):
    """The Q-network in float64: returns the activations needed by the reference gradients."""
    (w1, b1), (w2, b2), (w3, b3) = params
    h1 = np.maximum(x @ w1.T + b1, 0)
    h2 = np.maximum(h1 @ w2.T + b2, 0)
    return h1, h2, h2 @ w3.T + b3


def test_td_loss_and_gradients_match_float64(rng):
    q_net, target = dqn.build_q_network(tlgpu, 4, 3), dqn.build_q_network(tlgpu, 4, 3)
    B, gamma = 32, 0.97
    batch = (rng.standard_normal((B, 4)).astype(np.float32), rng.standard_normal((B, 4)).astype(np.float32),
             rng.integers(0, 3, (B, 1)).astype(np.int32), rng.standard_normal(B).astype(np.float32),
             (rng.random(B) < 0.3).astype(np.float32))
    loss, old_val = dqn.dqn_loss(tlgpu, q_net, target, batch, gamma)
    loss.backward()
    lin = [m for m in q_net.modules() if isinstance(m, tlgpu.nn.Linear)]
    tlin = [m for m in target.modules() if isinstance(m, tlgpu.nn.Linear)]
    p = [(m.weight.numpy().astype(np.float64), m.bias.numpy().astype(np.float64)) for m in lin]
    tp = [(m.weight.numpy().astype(np.float64), m.bias.numpy().astype(np.float64)) for m in tlin]
    obs, next_obs, act, rew, done = (a.astype(np.float64) if a.dtype != np.int32 else a for a in batch)
    td = rew + gamma * np_forward(tp, next_obs)[2].max(1) * (1 - done)
    h1, h2, q = np_forward(p, obs)
    qa = q[np.arange(B), act[:, 0]]
    np.testing.assert_allclose(old_val.numpy(), qa, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(loss.item(), np.mean((td - qa) ** 2), rtol=1e-4)
    dq = np.zeros_like(q)                                   # gather's backward: the picked column only
    dq[np.arange(B), act[:, 0]] = 2 * (qa - td) / B
    dh2 = (dq @ p[2][0]) * (h2 > 0)
    dh1 = (dh2 @ p[1][0]) * (h1 > 0)
    want = [(dh1.T @ obs, dh1.sum(0)), (dh2.T @ h1, dh2.sum(0)), (dq.T @ h2, dq.sum(0))]
    for m, (gw, gb) in zip(lin, want):
        np.testing.assert_allclose(m.weight.grad.numpy(), gw, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(m.bias.grad.numpy(), gb, rtol=1e-4, atol=1e-5)
    assert all(m.weight.grad is None for m in tlin)        # the target is computed under no_grad


def test_soft_update(rng):
    q_net, target = dqn.build_q_network(tlgpu, 4, 2), dqn.build_q_network(tlgpu, 4, 2)
    want = [0.3 * q.numpy() + 0.7 * t.numpy() for q, t in zip(q_net.parameters(), target.parameters())]
    dqn.soft_update(tlgpu, target, q_net, 0.3)
    for t, w in zip(target.parameters(), want):
        np.testing.assert_allclose(t.numpy(), w, rtol=1e-6, atol=1e-7)


def test_short_run_end_to_end(tmp_path):
    pytest.importorskip("gymnasium", reason="examples/dqn.py needs gymnasium (make test installs it)")
    ckpt = tmp_path / "dqn.safetensors"
    env = dict(os.environ)
    if any("Portable Computing Language" in d["platform"] for d in tlgpu.devices()):
        env["TLGPU_DEVICE"] = "Portable Computing Language"   # the script's logic is under test (see test_publish)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "dqn.py"), "--total-timesteps", "1500",
                        "--learning-starts", "300", "--log-every", "500", "--checkpoint", str(ckpt)],
                       capture_output=True, text=True, timeout=HANG_S, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "summary: 1500 steps, 120 updates" in r.stdout, r.stdout
    losses = [float(x) for x in re.findall(r"td_loss ([0-9.eE+-]+)", r.stdout)]
    assert losses and all(np.isfinite(losses)), r.stdout
    assert "reloaded and verified" in r.stdout and ckpt.exists()
