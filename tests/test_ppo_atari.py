"""examples/ppo_atari.py: the actors' numpy Nature CNN matches the tlgpu agent, and the tiny configuration runs
end to end (actor process with the jitted tlgpu forward, publisher, PPO updates, checkpoint) in a subprocess.
tests/test_rl_actors.py compares the actors' tlgpu and numpy forwards."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import HANG_S, PKG_ROOT, ROOT

sys.path.insert(0, os.path.join(ROOT, "examples"))

CLEANRL_SHAPES = {
    "network.0.weight": (32, 4, 8, 8), "network.0.bias": (32,),
    "network.2.weight": (64, 32, 4, 4), "network.2.bias": (64,),
    "network.4.weight": (64, 64, 3, 3), "network.4.bias": (64,),
    "network.7.weight": (512, 3136), "network.7.bias": (512,),
    "actor.weight": (4, 512), "actor.bias": (4,),
    "critic.weight": (1, 512), "critic.bias": (1,),
}


def test_numpy_actor_matches_tlgpu_agent():
    import ppo_atari
    import tlgpu
    tlgpu.manual_seed(3)
    model = ppo_atari.build_agent(4)
    state = model.state_dict()
    assert {k: v.shape for k, v in state.items()} == CLEANRL_SHAPES
    rng = np.random.default_rng(0)
    model.load_state_dict({k: (rng.standard_normal(v.shape) * 0.05).astype(np.float32) for k, v in state.items()})
    obs = rng.integers(0, 256, (3, 4, 84, 84), dtype=np.uint8)
    logits, value = model(tlgpu.tensor(obs.astype(np.float32)))
    np_logits, np_value = ppo_atari.np_forward(ppo_atari.np_weights(model.state_dict()), obs)
    np.testing.assert_allclose(np_logits, logits.numpy(), rtol=1e-4, atol=1e-4 * np.abs(np_logits).max())
    np.testing.assert_allclose(np_value, value.numpy(), rtol=1e-4, atol=1e-4 * np.abs(np_value).max())


def test_update_gathers_minibatches_alike_on_host_and_device():
    import ppo_atari
    import tlgpu
    rng = np.random.default_rng(1)
    n = 24
    batch = {"obs": rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8), "act": rng.integers(0, 4, n).astype(np.int32),
             "logp": np.full(n, -1.3, np.float32), "val": rng.standard_normal(n).astype(np.float32),
             "adv": rng.standard_normal(n).astype(np.float32), "ret": rng.standard_normal(n).astype(np.float32)}
    results = []
    for gather in ("host", "device"):
        tlgpu.manual_seed(5)
        model = ppo_atari.build_agent(4)
        opt = tlgpu.optim.Adam(model.parameters(), lr=2.5e-4, eps=1e-5)
        losses = ppo_atari.ppo_update(tlgpu, model, opt, batch, 2, 3, np.random.default_rng(7), gather)
        results.append((losses, model.state_dict()))
    (l_host, s_host), (l_dev, s_dev) = results
    np.testing.assert_allclose(l_host, l_dev, rtol=1e-5, atol=1e-7)
    for k in s_host:
        np.testing.assert_allclose(s_host[k], s_dev[k], rtol=1e-5, atol=1e-7, err_msg=k)
    assert all(np.isfinite(v) for v in l_host)


def test_area_resize_averages_pixel_areas():
    import ppo_atari
    m = ppo_atari._area_matrix(210, 84)
    np.testing.assert_allclose(m.sum(1), 1.0, rtol=1e-6)             # each output pixel: a weighted mean
    assert np.allclose(m.sum(0), 84 / 210, rtol=1e-5)                  # each input pixel counted once in all
    img = np.arange(160 * 210, dtype=np.float32).reshape(210, 160)
    out = m @ img @ ppo_atari._area_matrix(160, 84).T
    assert out.shape == (84, 84) and abs(out.mean() - img.mean()) < 1e-2 * img.mean()


def test_tiny_configuration_end_to_end(tmp_path):
    try:
        import ale_py  # noqa: F401
        import gymnasium  # noqa: F401
    except ImportError as e:
        pytest.skip(f"ppo_atari needs gymnasium and ale-py (pip install 'tlgpu[atari]'): {e}")
    ckpt = tmp_path / "ppo_atari_tiny.safetensors"
    env = dict(os.environ)
    env["PYTHONPATH"] = PKG_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "ppo_atari.py"), "--tiny",
                           "--checkpoint", str(ckpt)], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=HANG_S)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    lines = [ln for ln in out.splitlines() if ln.startswith("update ")]
    assert [ln.split()[1] for ln in lines] == ["1/2", "2/2"], out
    for ln in lines:
        for field in ("env steps", "SPS", "return", "lag", "pg", "ent", "kl"):
            assert field in ln, ln
    assert "summary: 2 updates, 64 env steps" in out, out
    acked = re.search(r"actors acked \[([0-9, ]*)\]", out)
    assert acked and acked.group(1).strip(), out
    assert all(int(v) >= 1 for v in acked.group(1).split(",")), out        # the actor acked a published version
    assert "reloaded and verified" in out, out
    assert "actors' forward: tlgpu on " in out, out               # the default: the jitted tlgpu forward

    import tlgpu
    assert ckpt.exists()
    back = tlgpu.load(str(ckpt))
    assert {k: tuple(v.shape) for k, v in back.items()} == CLEANRL_SHAPES
    for k, v in back.items():
        assert np.isfinite(v.numpy()).all(), k
    # trained: the orthogonal init gives zero biases; two updates moved them
    assert np.abs(back["critic.bias"].numpy()).max() > 0
