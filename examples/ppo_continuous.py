"""PPO with a Gaussian policy on Pendulum-v1 (4 environments): CleanRL's ppo_continuous_action.py ported to tlgpu
by renaming torch to tlgpu. benchmarks/torch_ref/ppo_continuous_torch.py is the PyTorch original it was made from;
`diff benchmarks/torch_ref/ppo_continuous_torch.py examples/ppo_continuous.py` shows every change: the name torch
-> tlgpu and the device/logging lines (tlgpu has no
set_num_threads: PoCL uses every core). Everything else is CleanRL's code as written for PyTorch: storage tensors
filled by `obs[step] = next_obs`, `torch.Tensor(next_done)` of a numpy bool array, GAE under no_grad, minibatches
by numpy index arrays, the clipped objective with torch.max of two tensors, clip_grad_norm_, lr annealing.

python examples/ppo_continuous.py [--total-timesteps 163840] [--seed 1] [--num-envs 4] [--num-steps 1024]
Needs gymnasium (pip install "tlgpu[rl]").
"""
import argparse
import os
import random
import sys
import time
from dataclasses import dataclass, fields

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))    # the tree, after PYTHONPATH

import gymnasium as gym
import numpy as np
import tlgpu
import tlgpu.nn as nn
import tlgpu.optim as optim
from tlgpu.distributions.normal import Normal


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
    """the id of the environment"""
    total_timesteps: int = 163840
    """total timesteps of the experiments"""
    learning_rate: float = 1e-3
    """the learning rate of the optimizer"""
    num_envs: int = 4
    """the number of parallel game environments"""
    num_steps: int = 1024
    """the number of steps to run in each environment per policy rollout"""
    anneal_lr: bool = True
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.9
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 32
    """the number of mini-batches"""
    update_epochs: int = 10
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.0
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: float = None
    """the target KL divergence threshold"""
    verbose: bool = False
    """print every episode's return (CleanRL does); otherwise one line per iteration"""

    # to be filled in runtime
    batch_size: int = 0
    """the batch size (computed in runtime)"""
    minibatch_size: int = 0
    """the mini-batch size (computed in runtime)"""
    num_iterations: int = 0
    """the number of iterations (computed in runtime)"""


def parse_args(argv=None):
    """tyro.cli(Args) without tyro: --field-name value, booleans as --flag / --no-flag."""
    ap = argparse.ArgumentParser()
    for f in fields(Args):
        name = "--" + f.name.replace("_", "-")
        if f.type is bool or f.type == "bool":
            ap.add_argument(name, action=argparse.BooleanOptionalAction, default=f.default)
        else:
            typ = {"int": int, "float": float, "str": str}.get(f.type, f.type) if isinstance(f.type, str) else f.type
            ap.add_argument(name, type=float if f.name == "target_kl" else typ, default=f.default)
    return Args(**vars(ap.parse_args(argv)))


def make_env(env_id, idx, capture_video, run_name, gamma):
    def thunk():
        env = gym.make(env_id)
        env = gym.wrappers.FlattenObservation(env)  # deal with dm_control's Dict observation space
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env = gym.wrappers.ClipAction(env)
        env = gym.wrappers.NormalizeObservation(env)
        env = gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -10, 10), env.observation_space)
        env = gym.wrappers.NormalizeReward(env, gamma=gamma)
        env = gym.wrappers.TransformReward(env, lambda reward: np.clip(reward, -10, 10))
        return env

    return thunk


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    tlgpu.nn.init.orthogonal_(layer.weight, std)
    tlgpu.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, envs):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(np.array(envs.single_observation_space.shape).prod(), 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor_mean = nn.Sequential(
            layer_init(nn.Linear(np.array(envs.single_observation_space.shape).prod(), 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, np.prod(envs.single_action_space.shape)), std=0.01),
        )
        self.actor_logstd = nn.Parameter(tlgpu.zeros(1, np.prod(envs.single_action_space.shape)))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        action_mean = self.actor_mean(x)
        action_logstd = self.actor_logstd.expand_as(action_mean)
        action_std = tlgpu.exp(action_logstd)
        probs = Normal(action_mean, action_std)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action).sum(1), probs.entropy().sum(1), self.critic(x)


def main(argv=None):
    args = parse_args(argv)
    args.batch_size = int(args.num_envs * args.num_steps)
    args.minibatch_size = int(args.batch_size // args.num_minibatches)
    args.num_iterations = args.total_timesteps // args.batch_size
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
        [make_env(args.env_id, i, False, run_name, args.gamma) for i in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    assert isinstance(envs.single_action_space, gym.spaces.Box), "only continuous action space is supported"

    agent = Agent(envs).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    # ALGO Logic: Storage setup
    obs = tlgpu.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape).to(device)
    actions = tlgpu.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape).to(device)
    logprobs = tlgpu.zeros((args.num_steps, args.num_envs)).to(device)
    rewards = tlgpu.zeros((args.num_steps, args.num_envs)).to(device)
    dones = tlgpu.zeros((args.num_steps, args.num_envs)).to(device)
    values = tlgpu.zeros((args.num_steps, args.num_envs)).to(device)

    # TRY NOT TO MODIFY: start the game
    global_step = 0
    start_time = time.time()
    next_obs, _ = envs.reset(seed=args.seed)
    next_obs = tlgpu.Tensor(next_obs).to(device)
    next_done = tlgpu.zeros(args.num_envs).to(device)
    all_returns, update_time, grad_steps = [], 0.0, 0

    for iteration in range(1, args.num_iterations + 1):
        # Annealing the rate if instructed to do so.
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            lrnow = frac * args.learning_rate
            optimizer.param_groups[0]["lr"] = lrnow

        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done

            # ALGO LOGIC: action logic
            with tlgpu.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob

            # TRY NOT TO MODIFY: execute the game and log data.
            next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
            next_done = np.logical_or(terminations, truncations)
            rewards[step] = tlgpu.tensor(reward).to(device).view(-1)
            next_obs, next_done = tlgpu.Tensor(next_obs).to(device), tlgpu.Tensor(next_done).to(device)

            if "final_info" in infos:
                episodes_over = np.nonzero(infos["final_info"]["_episode"])[0]
                episodic_returns = infos["final_info"]["episode"]["r"][episodes_over]
                episodic_lengths = infos["final_info"]["episode"]["l"][episodes_over]
                for episodic_return, episodic_length in zip(episodic_returns, episodic_lengths):
                    all_returns.append(float(episodic_return))
                    if args.verbose:
                        print(f"global_step={global_step}, episodic_return={episodic_return}")

        t_update = time.time()
        # bootstrap value if not done
        with tlgpu.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = tlgpu.zeros_like(rewards).to(device)
            lastgaelam = 0
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    nextnonterminal = 1.0 - next_done
                    nextvalues = next_value
                else:
                    nextnonterminal = 1.0 - dones[t + 1]
                    nextvalues = values[t + 1]
                delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
            returns = advantages + values

        # flatten the batch
        b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape((-1,) + envs.single_action_space.shape)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)

        # Optimizing the policy and value network
        b_inds = np.arange(args.batch_size)
        clipfracs = []
        for epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, args.batch_size, args.minibatch_size):
                end = start + args.minibatch_size
                mb_inds = b_inds[start:end]

                _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb_inds], b_actions[mb_inds])
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()

                with tlgpu.no_grad():
                    # calculate approx_kl http://joschu.net/blog/kl-approx.html
                    old_approx_kl = (-logratio).mean()
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs += [((ratio - 1.0).abs() > args.clip_coef).float().mean().item()]

                mb_advantages = b_advantages[mb_inds]
                if args.norm_adv:
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

                # Policy loss
                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * tlgpu.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = tlgpu.max(pg_loss1, pg_loss2).mean()

                # Value loss
                newvalue = newvalue.view(-1)
                if args.clip_vloss:
                    v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                    v_clipped = b_values[mb_inds] + tlgpu.clamp(
                        newvalue - b_values[mb_inds],
                        -args.clip_coef,
                        args.clip_coef,
                    )
                    v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                    v_loss_max = tlgpu.max(v_loss_unclipped, v_loss_clipped)
                    v_loss = 0.5 * v_loss_max.mean()
                else:
                    v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()

                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()
                grad_steps += 1

            if args.target_kl is not None and approx_kl > args.target_kl:
                break

        y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y
        update_time += time.time() - t_update

        # TRY NOT TO MODIFY: record rewards for plotting purposes
        recent = np.mean(all_returns[-20:]) if all_returns else float("nan")
        print(f"iteration {iteration}/{args.num_iterations} global_step={global_step} return(last 20)={recent:.1f} "
              f"v_loss={v_loss.item():.4f} pg_loss={pg_loss.item():.4f} entropy={entropy_loss.item():.4f} "
              f"approx_kl={approx_kl.item():.4f} clipfrac={np.mean(clipfracs):.3f} explained_var={explained_var:.3f} "
              f"SPS: {int(global_step / (time.time() - start_time))}", flush=True)

    elapsed = time.time() - start_time
    print(f"summary: {global_step} steps, {args.num_iterations} iterations, {grad_steps} gradient steps in "
          f"{elapsed:.1f} s; mean return of the last 20 episodes {np.mean(all_returns[-20:]):.1f}; "
          f"update phase {1000 * update_time / max(grad_steps, 1):.3f} ms per gradient step, "
          f"{update_time / max(args.num_iterations, 1):.2f} s per iteration")
    envs.close()
    return float(np.mean(all_returns[-20:]))


if __name__ == "__main__":
    main()
