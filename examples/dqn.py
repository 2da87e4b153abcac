"""DQN on CartPole-v1: CleanRL's dqn.py ported to tlgpu, line for line where the APIs agree.

The Q-network (4 -> 120 -> 84 -> actions, ReLU) trains on minibatches from a numpy replay buffer:
Q(s, a) = q_network(s).gather(1, a) (a device scatter-add in backward, no host wait), the target
r + gamma * max_a' Q_target(s', a') (1 - done) under no_grad, F.mse_loss, Adam. The target network is a copy
refreshed every --target-network-frequency steps with tau (soft when tau < 1: target = tau q + (1 - tau)
target, in place under no_grad); the exploration rate decays linearly. Acting is one forward and one argmax
read per environment step (a sync point: the action is needed on the host). One progress line every
--log-every steps, a summary and a checkpoint (tlgpu.save, safetensors) at the end, reloaded to check it.

python examples/dqn.py [--total-timesteps 50000] [--learning-starts 1000] [--seed 1] [--checkpoint dqn.safetensors]
Needs gymnasium (pip install "tlgpu[rl]" or make test's dependencies).
"""
import argparse
import os
import sys
import time
from collections import deque

import numpy as np

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))    # the tree, after PYTHONPATH


def build_q_network(tlgpu, n_obs, n_actions):
    nn = tlgpu.nn
    return nn.Sequential(nn.Linear(n_obs, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, n_actions))


def linear_schedule(start_e, end_e, duration, t):
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


class ReplayBuffer:
    """A ring of the last `size` transitions in numpy; sample() returns a minibatch of arrays."""

    def __init__(self, size, n_obs, rng):
        self.obs = np.zeros((size, n_obs), np.float32)
        self.next_obs = np.zeros((size, n_obs), np.float32)
        self.act = np.zeros((size, 1), np.int32)
        self.rew = np.zeros(size, np.float32)
        self.done = np.zeros(size, np.float32)
        self.size, self.n, self.pos, self.rng = size, 0, 0, rng

    def add(self, obs, next_obs, act, rew, done):
        i = self.pos
        self.obs[i], self.next_obs[i], self.act[i, 0], self.rew[i], self.done[i] = obs, next_obs, act, rew, done
        self.pos = (i + 1) % self.size
        self.n = min(self.n + 1, self.size)

    def sample(self, batch):
        idx = self.rng.integers(0, self.n, batch)
        return self.obs[idx], self.next_obs[idx], self.act[idx], self.rew[idx], self.done[idx]


def dqn_loss(tlgpu, q_network, target_network, batch, gamma):
    """CleanRL's TD loss: mse(Q(s, a), r + gamma max_a' Q_target(s', a') (1 - done)); returns (loss, Q(s, a))."""
    F = tlgpu.nn.functional
    obs, next_obs, act, rew, done = batch
    with tlgpu.no_grad():
        target_max = target_network(next_obs).max(dim=1).values
        td_target = tlgpu.tensor(rew) + gamma * target_max * (1.0 - tlgpu.tensor(done))
    old_val = q_network(obs).gather(1, tlgpu.tensor(act)).squeeze()
    return F.mse_loss(td_target, old_val), old_val


def soft_update(tlgpu, target_network, q_network, tau):
    with tlgpu.no_grad():
        for t, q in zip(target_network.parameters(), q_network.parameters()):
            t.copy_(q * tau + t * (1.0 - tau))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--env", default="CartPole-v1")
    ap.add_argument("--total-timesteps", type=int, default=50000)
    ap.add_argument("--learning-rate", type=float, default=2.5e-4)
    ap.add_argument("--buffer-size", type=int, default=10000)
    ap.add_argument("--gamma", type=float, default=0.99)
    ap.add_argument("--tau", type=float, default=1.0)
    ap.add_argument("--target-network-frequency", type=int, default=500)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--start-e", type=float, default=1.0)
    ap.add_argument("--end-e", type=float, default=0.05)
    ap.add_argument("--exploration-fraction", type=float, default=0.5)
    ap.add_argument("--learning-starts", type=int, default=1000)
    ap.add_argument("--train-frequency", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--log-every", type=int, default=5000)
    ap.add_argument("--checkpoint", default="dqn.safetensors")
    args = ap.parse_args(argv)
    if args.total_timesteps < 1 or args.batch_size < 1 or args.buffer_size < 1 or args.train_frequency < 1:
        ap.error("--total-timesteps, --batch-size, --buffer-size and --train-frequency must be >= 1")

    import gymnasium as gym
    import tlgpu
    tlgpu.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    env = gym.wrappers.RecordEpisodeStatistics(gym.make(args.env))
    n_obs, n_actions = env.observation_space.shape[0], int(env.action_space.n)
    q_network = build_q_network(tlgpu, n_obs, n_actions)
    target_network = build_q_network(tlgpu, n_obs, n_actions)
    target_network.load_state_dict(q_network.state_dict())
    optimizer = tlgpu.optim.Adam(q_network.parameters(), lr=args.learning_rate)
    rb = ReplayBuffer(args.buffer_size, n_obs, rng)
    print(f"device: {tlgpu.device().name}; {args.env} ({n_actions} actions); {args.total_timesteps} steps, "
          f"learning from step {args.learning_starts} every {args.train_frequency}, batch {args.batch_size}")

    returns, losses, q_values, updates = deque(maxlen=20), [], [], 0
    obs, _ = env.reset(seed=args.seed)
    t0 = time.perf_counter()
    for step in range(args.total_timesteps):
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, step)
        if rng.random() < epsilon:
            action = int(rng.integers(n_actions))
        else:
            with tlgpu.no_grad():
                action = int(q_network(obs[None].astype(np.float32)).argmax(1).item())
        next_obs, reward, terminated, truncated, info = env.step(action)
        rb.add(obs, next_obs, action, reward, float(terminated))       # a truncation is not a terminal state
        obs = next_obs
        if terminated or truncated:
            returns.append(float(info["episode"]["r"]))
            obs, _ = env.reset()
        if step >= args.learning_starts and step % args.train_frequency == 0:
            loss, old_val = dqn_loss(tlgpu, q_network, target_network, rb.sample(args.batch_size), args.gamma)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            updates += 1
            if updates % 100 == 1:                       # read back now and then: each read is a sync point
                losses.append(loss.item())
                q_values.append(old_val.mean().item())
        if step >= args.learning_starts and step % args.target_network_frequency == 0:
            soft_update(tlgpu, target_network, q_network, args.tau)
        if (step + 1) % args.log_every == 0 or step + 1 == args.total_timesteps:
            sps = (step + 1) / (time.perf_counter() - t0)
            ret = f"{np.mean(returns):7.1f}" if returns else "      -"
            td = f"{losses[-1]:.4f}" if losses else "-"
            qv = f"{q_values[-1]:.2f}" if q_values else "-"
            print(f"step {step + 1:7d}  SPS {sps:6.0f}  return {ret} ({len(returns)} eps)  epsilon {epsilon:.3f}  "
                  f"updates {updates}  td_loss {td}  q {qv}", flush=True)
    elapsed = time.perf_counter() - t0
    print(f"summary: {args.total_timesteps} steps, {updates} updates in {elapsed:.1f} s; mean return of the last "
          f"{len(returns)} episodes {np.mean(returns) if returns else float('nan'):.1f}")
    if losses and not all(np.isfinite(losses)):
        sys.exit("dqn: the TD loss is not finite")
    tlgpu.save(q_network.state_dict(), args.checkpoint)
    back = tlgpu.load(args.checkpoint)
    assert all(np.array_equal(np.asarray(back[k]), np.asarray(v)) for k, v in q_network.state_dict().items())
    print(f"checkpoint: {args.checkpoint} ({len(back)} tensors), reloaded and verified")


if __name__ == "__main__":
    main()
