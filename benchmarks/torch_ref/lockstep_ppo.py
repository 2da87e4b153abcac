"""PPO's update phase in lockstep: the PyTorch original's Agent (ppo_continuous_torch.py) and the tlgpu port's
(examples/ppo_continuous.py) from the same weights (torch's, copied), on the same rollout batch and the same
minibatch shuffles, running CleanRL's minibatch lines (clipped objective, clipped value loss, clip_grad_norm_, Adam
with eps 1e-5): prints both losses every 40 minibatch steps and the largest weight difference at the end.
The rollout itself is not compared: the two libraries' Normal.sample draw different numbers.
python benchmarks/torch_ref/lockstep_ppo.py [epochs=10]"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [ROOT, os.path.join(ROOT, "examples"), HERE]
import gymnasium as gym  # noqa: E402
import tlgpu  # noqa: E402
import torch  # noqa: E402

import ppo_continuous as tg  # noqa: E402
import ppo_continuous_torch as th  # noqa: E402


class Envs:
    single_observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    single_action_space = gym.spaces.Box(-2, 2, (1,), np.float32)


def minibatch_step(lib, nn, agent, optimizer, b, mb_inds, clip_coef=0.2, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5):
    b_obs, b_actions, b_logprobs, b_advantages, b_returns, b_values = b
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions[mb_inds])
    logratio = newlogprob - b_logprobs[mb_inds]
    ratio = logratio.exp()
    mb_advantages = b_advantages[mb_inds]
    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
    pg_loss1 = -mb_advantages * ratio
    pg_loss2 = -mb_advantages * lib.clamp(ratio, 1 - clip_coef, 1 + clip_coef)
    pg_loss = lib.max(pg_loss1, pg_loss2).mean()
    newvalue = newvalue.view(-1)
    v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
    v_clipped = b_values[mb_inds] + lib.clamp(newvalue - b_values[mb_inds], -clip_coef, clip_coef)
    v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
    v_loss = 0.5 * lib.max(v_loss_unclipped, v_loss_clipped).mean()
    loss = pg_loss - ent_coef * entropy.mean() + v_loss * vf_coef
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(agent.parameters(), max_grad_norm)
    optimizer.step()
    return loss.item()


def main(epochs=10):
    torch.manual_seed(1)
    b_agent = th.Agent(Envs())
    a_agent = tg.Agent(Envs())
    sd = {k: v.detach().numpy() for k, v in b_agent.state_dict().items()}
    a_agent.load_state_dict(sd)
    rng = np.random.default_rng(0)
    n = 4096
    obs = rng.standard_normal((n, 3)).astype(np.float32)
    with torch.no_grad():
        act, logp, _, val = b_agent.get_action_and_value(torch.tensor(obs))
    arrays = [obs, act.numpy(), logp.numpy(), rng.standard_normal(n).astype(np.float32),
              rng.standard_normal(n).astype(np.float32), val.numpy().reshape(-1)]
    tb = [torch.tensor(x) for x in arrays]
    ab = [tlgpu.tensor(x) for x in arrays]
    oa = tlgpu.optim.Adam(a_agent.parameters(), lr=1e-3, eps=1e-5)
    ob = torch.optim.Adam(b_agent.parameters(), lr=1e-3, eps=1e-5)
    b_inds, step = np.arange(n), 0
    for epoch in range(epochs):
        rng.shuffle(b_inds)
        for start in range(0, n, 128):
            mb = b_inds[start:start + 128]
            la = minibatch_step(tlgpu, tlgpu.nn, a_agent, oa, ab, mb)
            lb = minibatch_step(torch, torch.nn, b_agent, ob, tb, mb)
            if step % 40 == 0:
                print(f"minibatch step {step}: loss tlgpu {la:.6f} torch {lb:.6f}", flush=True)
            step += 1
    wa = {k: np.asarray(v) for k, v in a_agent.state_dict().items()}
    diff = max(np.abs(wa[k] - b_agent.state_dict()[k].detach().numpy()).max() for k in wa)
    print(f"max |w_tlgpu - w_torch| after {step} minibatch steps: {diff:.3g}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
