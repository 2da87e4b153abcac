"""The three PyTorch programs ported by renaming torch to tlgpu (examples/ppo_continuous.py, sac.py,
nanogpt_char.py; their originals in benchmarks/torch_ref/): the pieces against float64 numpy (the Gaussian
policy's log-probability and entropy, SAC's tanh-squashed log-probability and soft target update, the GPT's weight
tying and AdamW groups), against the PyTorch original where torch is installed (same weights: same loss and
gradients), and short runs end to end that must learn something: PPO's value loss falls, SAC's losses stay finite
while alpha is tuned down, nanoGPT's loss falls and its sample uses only the vocabulary. Each run is bounded to a
few thousand environment steps or a few dozen iterations; the subprocess timeouts are hang guards only."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import tlgpu
from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "examples"))
HANG_GUARD_S = 1800


def _run(script, *args):
    env = dict(os.environ)
    if any("Portable Computing Language" in d["platform"] for d in tlgpu.devices()):
        env["TLGPU_DEVICE"] = "Portable Computing Language"    # the script's logic is under test (see test_dqn)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", script), *args], capture_output=True,
                       text=True, timeout=HANG_GUARD_S, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


class _Spaces:
    """The two attributes of a vector env that the networks read."""

    def __init__(self, n_obs, n_act, high=2.0):
        import gymnasium as gym
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (n_obs,), np.float32)
        self.single_action_space = gym.spaces.Box(-high, high, (n_act,), np.float32)


# ---------------------------------------------------------------- PPO (CleanRL ppo_continuous_action.py)

def test_ppo_gaussian_policy_matches_float64(rng):
    pytest.importorskip("gymnasium")
    import ppo_continuous
    tlgpu.manual_seed(0)
    agent = ppo_continuous.Agent(_Spaces(3, 2))
    with tlgpu.no_grad():
        agent.actor_logstd.copy_(tlgpu.tensor([[-0.3, 0.4]]))
    x = rng.standard_normal((5, 3)).astype(np.float32)
    a = rng.standard_normal((5, 2)).astype(np.float32)
    _, logp, ent, value = agent.get_action_and_value(tlgpu.tensor(x), tlgpu.tensor(a))
    mean = agent.actor_mean(tlgpu.tensor(x)).numpy().astype(np.float64)
    logstd = np.array([-0.3, 0.4])
    want = (-0.5 * ((a - mean) / np.exp(logstd)) ** 2 - logstd - 0.5 * np.log(2 * np.pi)).sum(1)
    np.testing.assert_allclose(logp.numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ent.numpy(), np.full(5, (0.5 + 0.5 * np.log(2 * np.pi) + logstd).sum()), rtol=1e-5)
    assert value.shape == (5, 1)
    # the orthogonal init CleanRL asks for: rows of the first layer orthogonal with gain sqrt(2)
    w = agent.critic[0].weight.numpy().astype(np.float64)
    np.testing.assert_allclose(w.T @ w, 2 * np.eye(3), atol=1e-5)
    action, logp, _, _ = agent.get_action_and_value(tlgpu.tensor(x))     # sampled: a fresh draw per call
    assert action.shape == (5, 2) and np.isfinite(logp.numpy()).all()


def test_ppo_short_run_fits_the_value_function():
    pytest.importorskip("gymnasium", reason="examples/ppo_continuous.py needs gymnasium")
    out = _run("ppo_continuous.py", "--total-timesteps", "8192", "--num-steps", "256", "--num-minibatches", "4",
               "--update-epochs", "4")
    lines = [ln for ln in out.splitlines() if ln.startswith("iteration ")]
    assert [ln.split()[1] for ln in lines] == [f"{i}/8" for i in range(1, 9)], out
    v_loss = [float(re.search(r"v_loss=([0-9.eE+-]+)", ln).group(1)) for ln in lines]
    ev = [float(re.search(r"explained_var=(-?[0-9.]+|nan)", ln).group(1)) for ln in lines]
    assert all(np.isfinite(v_loss)), out
    assert np.mean(v_loss[-3:]) < 0.7 * np.mean(v_loss[:2]), v_loss        # the critic learns the returns
    assert max(ev[-3:]) > max(ev[:2]), ev                               # and explains more of them
    assert "summary: 8192 steps, 8 iterations, 128 gradient steps" in out, out


# ---------------------------------------------------------------- SAC (CleanRL sac_continuous_action.py)

def test_sac_squashed_log_prob_matches_float64(rng):
    pytest.importorskip("gymnasium")
    import sac
    tlgpu.manual_seed(1)
    actor = sac.Actor(_Spaces(3, 2, high=2.0))
    x = tlgpu.tensor(rng.standard_normal((6, 3)).astype(np.float32))
    action, log_prob, mean_action = actor.get_action(x)
    mean, log_std = (t.numpy().astype(np.float64) for t in actor(x))
    assert np.all(log_std >= sac.LOG_STD_MIN) and np.all(log_std <= sac.LOG_STD_MAX)
    y = action.numpy().astype(np.float64) / 2.0                       # action_scale 2, action_bias 0
    x_t = np.arctanh(np.clip(y, -1 + 1e-6, 1 - 1e-6))
    want = (-0.5 * ((x_t - mean) / np.exp(log_std)) ** 2 - log_std - 0.5 * np.log(2 * np.pi)
            - np.log(2.0 * (1 - y ** 2) + 1e-6)).sum(1, keepdims=True)
    np.testing.assert_allclose(log_prob.numpy(), want, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(mean_action.numpy(), 2.0 * np.tanh(mean), rtol=1e-5, atol=1e-6)
    log_prob.sum().backward()                                          # rsample: differentiable in mean and std
    assert actor.fc_mean.weight.grad is not None and actor.fc_logstd.weight.grad is not None


def test_sac_soft_update_through_data():
    pytest.importorskip("gymnasium")
    import sac
    env = _Spaces(3, 1)
    qf, target = sac.SoftQNetwork(env), sac.SoftQNetwork(env)
    want = [0.005 * p.numpy() + 0.995 * t.numpy() for p, t in zip(qf.parameters(), target.parameters())]
    for param, target_param in zip(qf.parameters(), target.parameters()):      # CleanRL's lines
        target_param.data.copy_(0.005 * param.data + (1 - 0.005) * target_param.data)
    for t, w in zip(target.parameters(), want):
        np.testing.assert_allclose(t.numpy(), w, rtol=1e-6, atol=1e-7)
        assert t.grad_fn is None and t.requires_grad


def test_sac_short_run_losses_finite_and_alpha_tuned():
    pytest.importorskip("gymnasium", reason="examples/sac.py needs gymnasium")
    out = _run("sac.py", "--total-timesteps", "900", "--learning-starts", "300", "--batch-size", "64",
               "--log-every", "100")
    logs = [ln for ln in out.splitlines() if ln.startswith("step ")]
    assert len(logs) == 5, out
    alpha = [float(re.search(r"alpha=([0-9.eE+-]+)", ln).group(1)) for ln in logs]
    qf = [float(re.search(r"qf_loss=([0-9.eE+-]+)", ln).group(1)) for ln in logs]
    assert all(np.isfinite(qf)) and all(np.isfinite(alpha)), out
    assert alpha[-1] < alpha[0] < 1.0, alpha                           # log_alpha starts at 0 and is tuned down
    assert re.search(r"summary: 900 steps, 599 training steps", out), out
    rets = [float(v) for v in re.findall(r"episodic_return=(-?[0-9.]+)", out)]
    assert len(rets) == 4 and all(-2000 < r <= 0 for r in rets), out


# ---------------------------------------------------------------- nanoGPT (model.py + train.py's loop)

def _gpt(nanogpt_char, **kw):
    cfg = dict(n_layer=2, n_head=4, n_embd=64, block_size=32, bias=False, vocab_size=40, dropout=0.0)
    cfg.update(kw)
    return nanogpt_char.GPT(nanogpt_char.GPTConfig(**cfg))


def test_gpt_weight_tying_and_adamw_groups():
    import nanogpt_char
    model = _gpt(nanogpt_char)
    assert model.transformer.wte.weight is model.lm_head.weight
    names = [n for n, _ in model.named_parameters()]
    assert "lm_head.weight" not in names and names.count("transformer.wte.weight") == 1
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")
    decay, nodecay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and nodecay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in nodecay["params"])
    assert len(decay["params"]) + len(nodecay["params"]) == len(names)
    # the GPT-2 init: c_proj weights get 0.02 / sqrt(2 n_layer)
    c_proj = model.transformer.h[0].mlp.c_proj.weight.numpy()
    assert abs(c_proj.std() - 0.02 / np.sqrt(4)) < 0.002


def test_gpt_matches_pytorch_original(rng):
    torch = pytest.importorskip("torch", reason="the comparison needs PyTorch (pip install torch)")
    sys.path.insert(0, os.path.join(ROOT, "benchmarks", "torch_ref"))
    import nanogpt_char
    import nanogpt_char_torch
    ours = _gpt(nanogpt_char)
    theirs = nanogpt_char_torch.GPT(nanogpt_char_torch.GPTConfig(n_layer=2, n_head=4, n_embd=64, block_size=32,
                                                                 bias=False, vocab_size=40, dropout=0.0))
    sd = {k: np.asarray(v) for k, v in ours.state_dict().items()}
    theirs.load_state_dict({k: torch.tensor(sd.get(k, sd["transformer.wte.weight"])) for k in theirs.state_dict()})
    x, y = rng.integers(0, 40, (3, 32)), rng.integers(0, 40, (3, 32))
    y[0, :5] = -1                                                        # ignore_index=-1
    loss = ours(tlgpu.tensor(x), tlgpu.tensor(y))[1]
    ref = theirs(torch.tensor(x), torch.tensor(y))[1]
    np.testing.assert_allclose(loss.item(), ref.item(), rtol=1e-5)
    loss.backward()
    ref.backward()
    grads = {n: p.grad.numpy() for n, p in ours.named_parameters()}
    for n, p in theirs.named_parameters():
        g = p.grad.numpy()
        np.testing.assert_allclose(grads[n], g, rtol=1e-3, atol=1e-4 * np.abs(g).max() + 1e-7, err_msg=n)
    logits, _ = ours(tlgpu.tensor(x))                                   # inference: the last position only
    np.testing.assert_allclose(logits.numpy(), theirs(torch.tensor(x))[0].detach().numpy(), rtol=1e-4, atol=1e-5)


def test_gpt_short_training_learns_and_samples_the_vocabulary():
    import nanogpt_char
    train, val, sample = nanogpt_char.main(["--max-iters", "80", "--eval-interval", "40", "--eval-iters", "2",
                                            "--n-layer", "2", "--n-embd", "64", "--block-size", "32",
                                            "--batch-size", "16", "--warmup-iters", "5", "--learning-rate", "3e-3",
                                            "--sample-tokens", "60"])
    vocab = set(nanogpt_char.TEXT)
    # from ln(vocab) ~ 4.06 past the unigram plateau (~3.2; 2.6 after 80 iterations in the runs here)
    assert train < 3.0, train
    assert np.isfinite(val)
    assert len(sample) == 61 and set(sample) <= vocab, repr(sample)
