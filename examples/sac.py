"""SAC on Pendulum-v1: CleanRL's sac_continuous_action.py ported to tlgpu by renaming torch to tlgpu.
benchmarks/torch_ref/sac_torch.py is the PyTorch original it was made from; `diff benchmarks/torch_ref/sac_torch.py
examples/sac.py` shows every change: the name torch -> tlgpu and the device/logging lines (tlgpu has no
set_num_threads: PoCL uses every core). Everything else is CleanRL's code as written for PyTorch: twin soft
Q-networks and their targets refreshed by `target_param.data.copy_(tau * param.data + (1 - tau) *
target_param.data)`, the tanh-squashed Gaussian actor (Normal.rsample, `log_prob -= ...`, register_buffer'd action
scale), automatic entropy tuning through log_alpha (`torch.zeros(1, requires_grad=True, device=device)`,
`-torch.prod(torch.Tensor(shape)).item()`), the replay buffer's `torch.tensor(array).to(device)`.

python examples/sac.py [--total-timesteps 8000] [--learning-starts 1000] [--seed 1]
Needs gymnasium (pip install "tlgpu[rl]").
"""
import argparse
import os
import random
import sys
import time
from dataclasses import dataclass, fields
from typing import NamedTuple

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))    # the tree, after PYTHONPATH

import gymnasium as gym
import numpy as np
import tlgpu
import tlgpu.nn as nn
import tlgpu.nn.functional as F
import tlgpu.optim as optim


@dataclass
class Args:
    exp_name: str = os.path.basename(__file__)[: -len(".py")]
    """the name of this experiment"""
    seed: int = 1
    """seed of the experiment"""
    torch_deterministic: bool = True
    """if toggled, `tlgpu.backends.cudnn.deterministic=False`"""
    cuda: bool = True
    """if toggled, cuda will be enabled by default"""

    # Algorithm specific arguments
    env_id: str = "Pendulum-v1"
    """the environment id of the task"""
    total_timesteps: int = 8000
    """total timesteps of the experiments"""
    num_envs: int = 1
    """the number of parallel game environments"""
    buffer_size: int = int(1e6)
    """the replay memory buffer size"""
    gamma: float = 0.99
    """the discount factor gamma"""
    tau: float = 0.005
    """target smoothing coefficient (default: 0.005)"""
    batch_size: int = 256
    """the batch size of sample from the reply memory"""
    learning_starts: int = 1000
    """timestep to start learning"""
    policy_lr: float = 3e-4
    """the learning rate of the policy network optimizer"""
    q_lr: float = 1e-3
    """the learning rate of the Q network network optimizer"""
    policy_frequency: int = 2
    """the frequency of training policy (delayed)"""
    target_network_frequency: int = 1  # Denis Yarats' implementation delays this by 2.
    """the frequency of updates for the target nerworks"""
    alpha: float = 0.2
    """Entropy regularization coefficient."""
    autotune: bool = True
    """automatic tuning of the entropy coefficient"""
    log_every: int = 1000
    """print losses every this many steps"""


def parse_args(argv=None):
    """tyro.cli(Args) without tyro: --field-name value, booleans as --flag / --no-flag."""
    ap = argparse.ArgumentParser()
    for f in fields(Args):
        name = "--" + f.name.replace("_", "-")
        typ = {"int": int, "float": float, "str": str, "bool": bool}.get(f.type, f.type) if isinstance(f.type, str) else f.type
        if typ is bool:
            ap.add_argument(name, action=argparse.BooleanOptionalAction, default=f.default)
        else:
            ap.add_argument(name, type=typ, default=f.default)
    return Args(**vars(ap.parse_args(argv)))


class ReplayBufferSamples(NamedTuple):
    observations: tlgpu.Tensor
    actions: tlgpu.Tensor
    next_observations: tlgpu.Tensor
    dones: tlgpu.Tensor
    rewards: tlgpu.Tensor


class ReplayBuffer:
    """stable_baselines3.common.buffers.ReplayBuffer's interface and sampling, numpy storage."""

    def __init__(self, buffer_size, observation_space, action_space, device, n_envs=1, handle_timeout_termination=False):
        self.buffer_size = max(buffer_size // n_envs, 1)
        self.device, self.n_envs, self.pos, self.full = device, n_envs, 0, False
        self.observations = np.zeros((self.buffer_size, n_envs) + observation_space.shape, dtype=observation_space.dtype)
        self.next_observations = np.zeros_like(self.observations)
        self.actions = np.zeros((self.buffer_size, n_envs) + action_space.shape, dtype=np.float32)
        self.rewards = np.zeros((self.buffer_size, n_envs), dtype=np.float32)
        self.dones = np.zeros((self.buffer_size, n_envs), dtype=np.float32)

    def add(self, obs, next_obs, action, reward, done, infos):
        self.observations[self.pos] = np.array(obs)
        self.next_observations[self.pos] = np.array(next_obs)
        self.actions[self.pos] = np.array(action).reshape(self.actions.shape[1:])
        self.rewards[self.pos] = np.array(reward)
        self.dones[self.pos] = np.array(done)
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full, self.pos = True, 0

    def sample(self, batch_size):
        upper_bound = self.buffer_size if self.full else self.pos
        batch_inds = np.random.randint(0, upper_bound, size=batch_size)
        env_indices = np.random.randint(0, high=self.n_envs, size=(len(batch_inds),))
        data = (
            self.observations[batch_inds, env_indices, :],
            self.actions[batch_inds, env_indices, :],
            self.next_observations[batch_inds, env_indices, :],
            self.dones[batch_inds, env_indices].reshape(-1, 1),
            self.rewards[batch_inds, env_indices].reshape(-1, 1),
        )
        return ReplayBufferSamples(*tuple(map(self.to_torch, data)))

    def to_torch(self, array):
        return tlgpu.tensor(array).to(self.device)


def make_env(env_id, seed, idx, capture_video, run_name):
    def thunk():
        env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env.action_space.seed(seed)
        return env

    return thunk


# ALGO LOGIC: initialize agent here:
class SoftQNetwork(nn.Module):
    def __init__(self, env):
        super().__init__()
        self.fc1 = nn.Linear(
            np.array(env.single_observation_space.shape).prod() + np.prod(env.single_action_space.shape),
            256,
        )
        self.fc2 = nn.Linear(256, 256)
        self.fc3 = nn.Linear(256, 1)

    def forward(self, x, a):
        x = tlgpu.cat([x, a], 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x


LOG_STD_MAX = 2
LOG_STD_MIN = -5


class Actor(nn.Module):
    def __init__(self, env):
        super().__init__()
        self.fc1 = nn.Linear(np.array(env.single_observation_space.shape).prod(), 256)
        self.fc2 = nn.Linear(256, 256)
        self.fc_mean = nn.Linear(256, np.prod(env.single_action_space.shape))
        self.fc_logstd = nn.Linear(256, np.prod(env.single_action_space.shape))
        # action rescaling
        self.register_buffer(
            "action_scale",
            tlgpu.tensor(
                (env.single_action_space.high - env.single_action_space.low) / 2.0,
                dtype=tlgpu.float32,
            ),
        )
        self.register_buffer(
            "action_bias",
            tlgpu.tensor(
                (env.single_action_space.high + env.single_action_space.low) / 2.0,
                dtype=tlgpu.float32,
            ),
        )

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        mean = self.fc_mean(x)
        log_std = self.fc_logstd(x)
        log_std = tlgpu.tanh(log_std)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)  # From SpinUp / Denis Yarats

        return mean, log_std

    def get_action(self, x):
        mean, log_std = self(x)
        std = log_std.exp()
        normal = tlgpu.distributions.Normal(mean, std)
        x_t = normal.rsample()  # for reparameterization trick (mean + std * N(0,1))
        y_t = tlgpu.tanh(x_t)
        action = y_t * self.action_scale + self.action_bias
        log_prob = normal.log_prob(x_t)
        # Enforcing Action Bound
        log_prob -= tlgpu.log(self.action_scale * (1 - y_t.pow(2)) + 1e-6)
        log_prob = log_prob.sum(1, keepdim=True)
        mean = tlgpu.tanh(mean) * self.action_scale + self.action_bias
        return action, log_prob, mean


def main(argv=None):
    args = parse_args(argv)
    run_name = f"{args.env_id}__{args.exp_name}__{args.seed}__{int(time.time())}"

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    tlgpu.manual_seed(args.seed)
    tlgpu.backends.cudnn.deterministic = args.torch_deterministic

    device = tlgpu.device("cuda" if tlgpu.cuda.is_available() and args.cuda else "cpu")
    print(f"device: {device.name} (tlgpu {tlgpu.__version__}); {run_name}")

    # env setup
    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, args.seed + i, i, False, run_name) for i in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    assert isinstance(envs.single_action_space, gym.spaces.Box), "only continuous action space is supported"

    max_action = float(envs.single_action_space.high[0])

    actor = Actor(envs).to(device)
    qf1 = SoftQNetwork(envs).to(device)
    qf2 = SoftQNetwork(envs).to(device)
    qf1_target = SoftQNetwork(envs).to(device)
    qf2_target = SoftQNetwork(envs).to(device)
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    q_optimizer = optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=args.q_lr)
    actor_optimizer = optim.Adam(list(actor.parameters()), lr=args.policy_lr)

    # Automatic entropy tuning
    if args.autotune:
        target_entropy = -tlgpu.prod(tlgpu.Tensor(envs.single_action_space.shape).to(device)).item()
        log_alpha = tlgpu.zeros(1, requires_grad=True, device=device)
        alpha = log_alpha.exp().item()
        a_optimizer = optim.Adam([log_alpha], lr=args.q_lr)
    else:
        alpha = args.alpha

    envs.single_observation_space.dtype = np.float32
    rb = ReplayBuffer(
        args.buffer_size,
        envs.single_observation_space,
        envs.single_action_space,
        device,
        n_envs=args.num_envs,
        handle_timeout_termination=False,
    )
    start_time = time.time()
    all_returns, train_time, train_steps = [], 0.0, 0

    # TRY NOT TO MODIFY: start the game
    obs, _ = envs.reset(seed=args.seed)
    for global_step in range(args.total_timesteps):
        # ALGO LOGIC: put action logic here
        if global_step < args.learning_starts:
            actions = np.array([envs.single_action_space.sample() for _ in range(envs.num_envs)])
        else:
            actions, _, _ = actor.get_action(tlgpu.Tensor(obs).to(device))
            actions = actions.detach().cpu().numpy()

        # TRY NOT TO MODIFY: execute the game and log data.
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        if "final_info" in infos:
            for i in np.nonzero(infos["final_info"]["_episode"])[0]:
                all_returns.append(float(infos["final_info"]["episode"]["r"][i]))
                print(f"global_step={global_step}, episodic_return={all_returns[-1]:.1f}", flush=True)

        # TRY NOT TO MODIFY: save data to reply buffer; handle `final_obs`
        real_next_obs = next_obs.copy()
        for idx, trunc in enumerate(truncations):
            if trunc:
                real_next_obs[idx] = infos["final_obs"][idx]
        rb.add(obs, real_next_obs, actions, rewards, terminations, infos)

        # TRY NOT TO MODIFY: CRUCIAL step easy to overlook
        obs = next_obs

        # ALGO LOGIC: training.
        if global_step > args.learning_starts:
            t_train = time.time()
            data = rb.sample(args.batch_size)
            with tlgpu.no_grad():
                next_state_actions, next_state_log_pi, _ = actor.get_action(data.next_observations)
                qf1_next_target = qf1_target(data.next_observations, next_state_actions)
                qf2_next_target = qf2_target(data.next_observations, next_state_actions)
                min_qf_next_target = tlgpu.min(qf1_next_target, qf2_next_target) - alpha * next_state_log_pi
                next_q_value = data.rewards.flatten() + (1 - data.dones.flatten()) * args.gamma * (min_qf_next_target).view(-1)

            qf1_a_values = qf1(data.observations, data.actions).view(-1)
            qf2_a_values = qf2(data.observations, data.actions).view(-1)
            qf1_loss = F.mse_loss(qf1_a_values, next_q_value)
            qf2_loss = F.mse_loss(qf2_a_values, next_q_value)
            qf_loss = qf1_loss + qf2_loss

            # optimize the model
            q_optimizer.zero_grad()
            qf_loss.backward()
            q_optimizer.step()

            if global_step % args.policy_frequency == 0:  # TD 3 Delayed update support
                for _ in range(
                    args.policy_frequency
                ):  # compensate for the delay by doing 'actor_update_interval' instead of 1
                    pi, log_pi, _ = actor.get_action(data.observations)
                    qf1_pi = qf1(data.observations, pi)
                    qf2_pi = qf2(data.observations, pi)
                    min_qf_pi = tlgpu.min(qf1_pi, qf2_pi)
                    actor_loss = ((alpha * log_pi) - min_qf_pi).mean()

                    actor_optimizer.zero_grad()
                    actor_loss.backward()
                    actor_optimizer.step()

                    if args.autotune:
                        with tlgpu.no_grad():
                            _, log_pi, _ = actor.get_action(data.observations)
                        alpha_loss = (-log_alpha.exp() * (log_pi + target_entropy)).mean()

                        a_optimizer.zero_grad()
                        alpha_loss.backward()
                        a_optimizer.step()
                        alpha = log_alpha.exp().item()

            # update the target networks
            if global_step % args.target_network_frequency == 0:
                for param, target_param in zip(qf1.parameters(), qf1_target.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
                for param, target_param in zip(qf2.parameters(), qf2_target.parameters()):
                    target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
            train_time += time.time() - t_train
            train_steps += 1

            if global_step % args.log_every == 0:
                print(f"step {global_step} qf1_values={qf1_a_values.mean().item():.3f} qf1_loss={qf1_loss.item():.4f} "
                      f"qf_loss={qf_loss.item() / 2.0:.4f} actor_loss={actor_loss.item():.4f} alpha={alpha:.4f} "
                      f"alpha_loss={alpha_loss.item() if args.autotune else 0.0:.4f} "
                      f"SPS: {int(global_step / (time.time() - start_time))}", flush=True)

    elapsed = time.time() - start_time
    print(f"summary: {args.total_timesteps} steps, {train_steps} training steps in {elapsed:.1f} s; mean return of "
          f"the last 5 episodes {np.mean(all_returns[-5:]):.1f}; first 5 episodes {np.mean(all_returns[:5]):.1f}; "
          f"{1000 * train_time / max(train_steps, 1):.3f} ms per training step; final qf_loss "
          f"{qf_loss.item() / 2.0:.4f}")
    envs.close()
    return float(np.mean(all_returns[-5:]))


if __name__ == "__main__":
    main()
