"""The RL examples' tlgpu actors (examples/rl_learner.py TlgpuPolicy, examples/ppo_atari.py TlgpuAgent): the
jitted forward on delivered weights gives the numpy forward's outputs and the same sampled actions, weights
loaded in place between replays are used without a new trace, and actor_env gives an actor process one
OpenCL thread of its own."""
import json
import os
import sys

import numpy as np
import pytest

from conftest import ROOT, run_python

sys.path.insert(0, os.path.join(ROOT, "examples"))


def random_weights(model, rng, scale):
    """A delivered version: {name: float32 array} with the model's names and shapes, as Subscriber gives."""
    return {k: (rng.standard_normal(v.shape) * scale).astype(np.float32) for k, v in model.state_dict().items()}


class FakeCartPoles:
    """n environments whose next observation depends on the actions (so a wrong action changes the rest of
    the rollout), with VecCartPole.step's return values."""

    def __init__(self, n, seed):
        self.rng, self.n = np.random.default_rng(seed), n

    def step(self, act):
        obs = self.rng.standard_normal((self.n, 4)).astype(np.float32) + act[:, None].astype(np.float32)
        done = self.rng.random(self.n) < 0.1
        return obs, np.ones(self.n, np.float32), done, done, []


def test_rl_learner_tlgpu_policy_matches_numpy_and_reloads_in_place():
    import rl_learner
    import tlgpu
    rng = np.random.default_rng(0)
    jp, npp = rl_learner.TlgpuPolicy(), rl_learner.NumpyPolicy()
    for version in range(3):                           # a new version each round, loaded between replays
        w = random_weights(jp.model, rng, 0.5)
        jp.load(w)
        npp.load(w)
        obs = rng.standard_normal((6, 4)).astype(np.float32)
        for _ in range(3):                             # eager, traced, replayed
            logits, value = jp(obs)
            ref_logits, ref_value = npp(obs)
            np.testing.assert_allclose(logits, ref_logits, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(value, ref_value, rtol=1e-5, atol=1e-5)
        trajs = []
        for policy in (jp, npp):                       # the same rollout: same observations, same actions
            traj, last = rl_learner.rollout(policy, FakeCartPoles(6, seed=version), obs, np.random.default_rng(9),
                                            6, 20)
            trajs.append(traj)
        np.testing.assert_array_equal(trajs[0]["act"], trajs[1]["act"])
        np.testing.assert_allclose(trajs[0]["logp"], trajs[1]["logp"], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(trajs[0]["last_val"], trajs[1]["last_val"], rtol=1e-4, atol=1e-5)
        assert 0 < trajs[0]["act"].mean() < 1                                   # both actions were taken
    assert jp.forward.traces() == 1                    # one batch size: one trace, kept across the loads
    assert jp.forward.memory_plan()["replays"] >= 3 * 21 - 2
    assert isinstance(jp.model.pi[0].weight, tlgpu.Tensor)


def test_ppo_atari_tlgpu_agent_matches_numpy_and_reloads_in_place():
    import ppo_atari
    rng = np.random.default_rng(1)
    ja, na = ppo_atari.TlgpuAgent(4), ppo_atari.NumpyAgent()
    for _ in range(2):
        w = random_weights(ja.model, rng, 0.05)
        ja.load(w)
        na.load(w)
        obs = rng.integers(0, 256, (3, 4, 84, 84), dtype=np.uint8)
        noise = rng.random((3, 4))
        for _ in range(3):                             # eager, traced, replayed
            logits, value = ja(obs)
            ref_logits, ref_value = na(obs)
            np.testing.assert_allclose(logits, ref_logits, rtol=1e-4, atol=1e-4 * np.abs(ref_logits).max())
            np.testing.assert_allclose(value, ref_value, rtol=1e-4, atol=1e-4 * np.abs(ref_value).max())
            gumbel = -np.log(-np.log(noise))           # the actor's Gumbel-max sampling, same noise
            np.testing.assert_array_equal((logits + 1e3 * gumbel).argmax(1), (ref_logits + 1e3 * gumbel).argmax(1))
            np.testing.assert_array_equal((logits + gumbel).argmax(1), (ref_logits + gumbel).argmax(1))
    assert ja.forward.traces() == 1
    assert ja.forward.memory_plan()["replays"] >= 4


def test_actor_env_names_pocl_single_thread_driver():
    import rl_learner
    assert rl_learner.actor_env("numpy", []) == {}
    dev = {"platform": "Portable Computing Language"}
    env3 = rl_learner.actor_env("tlgpu", [dict(dev, platform_version="OpenCL 3.0 PoCL 3.1+debian  Linux")])
    env5 = rl_learner.actor_env("tlgpu", [{"platform": "NVIDIA CUDA", "platform_version": "OpenCL 3.0 CUDA 13.0"},
                                          dict(dev, platform_version="OpenCL 3.0 PoCL 5.0+debian  Linux")])
    assert env3["POCL_DEVICES"] == "basic" and env5["POCL_DEVICES"] == "cpu-minimal"
    for env in (env3, env5):
        assert env["TLGPU_DEVICE"] == "Portable Computing Language"
        assert env["POCL_MAX_PTHREAD_COUNT"] == env["POCL_CPU_MAX_CU_COUNT"] == "1"
    nogpu = rl_learner.actor_env("tlgpu", [{"platform": "NVIDIA CUDA", "platform_version": "OpenCL 3.0 CUDA"}])
    assert "POCL_DEVICES" not in nogpu and "TLGPU_DEVICE" not in nogpu


def test_actor_env_check_falls_back_without_the_driver():
    """check=True starts tlgpu in a child with the variables: a driver this PoCL lacks is dropped (the threaded
    driver on one thread stays), one it has is kept."""
    import tlgpu
    import rl_learner
    unchecked = rl_learner.actor_env("tlgpu", tlgpu.devices())
    env = rl_learner.actor_env("tlgpu", tlgpu.devices(), check=True)
    if "POCL_DEVICES" not in unchecked:
        pytest.skip("no PoCL device of a known version here")
    assert env.get("POCL_DEVICES") in (None, unchecked["POCL_DEVICES"])    # Debian 12's PoCL 3.1: kept
    assert not rl_learner.device_starts(dict(env, POCL_DEVICES="no-such-driver"))
    assert rl_learner.device_starts({k: v for k, v in env.items() if k != "POCL_DEVICES"})


def test_actor_process_runs_on_one_pocl_thread():
    """An actor process started with actor_env's variables (set before tlgpu's import, as actor() does) runs
    on PoCL's single-threaded driver, one compute unit, and its jitted forward still matches numpy."""
    import tlgpu
    import rl_learner
    env = rl_learner.actor_env("tlgpu", tlgpu.devices(), check=True)
    if "POCL_DEVICES" not in env:
        pytest.skip("no PoCL device with its single-threaded driver here")
    code = (
        "import os, sys, json\n"
        f"os.environ.update({env!r})\n"
        f"sys.path.insert(0, {os.path.join(ROOT, 'examples')!r})\n"
        "import numpy as np, rl_learner, tlgpu\n"
        "p, q = rl_learner.TlgpuPolicy(), rl_learner.NumpyPolicy()\n"
        "rng = np.random.default_rng(2)\n"
        "w = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in p.model.state_dict().items()}\n"
        "p.load(w); q.load(w)\n"
        "obs = rng.standard_normal((5, 4)).astype(np.float32)\n"
        "err = max(float(np.abs(a - b).max()) for _ in range(3) for a, b in zip(p(obs), q(obs)))\n"
        "d = tlgpu.device()\n"
        "print(json.dumps({'name': d.name, 'cu': d.compute_units, 'err': err, 'traces': p.forward.traces()}))\n")
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["cu"] == 1 and got["traces"] == 1 and got["err"] < 1e-4, got
    assert got["name"].startswith(env["POCL_DEVICES"] + "-"), got
