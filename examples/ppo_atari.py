"""PPO on Atari with the Nature CNN: a CleanRL-style learner on tlgpu, actor processes fed by the weight publisher.

The learner trains CleanRL's ppo_atari.py agent (Nature CNN: conv 32 8x8/4, 64 4x4/2, 64 3x3/1, linear
3136->512, actor and critic heads, orthogonal init) on the default device and publishes the weights after every
update (WeightPublisher(model, name=...): publish() only enqueues a device snapshot). Each actor is a separate
process (multiprocessing spawn) stepping its own set of gymnasium ALE environments with CleanRL's wrappers
(NoopReset 30, MaxAndSkip 4, EpisodicLife, FireReset, ClipReward, 84x84 grayscale, FrameStack 4); it reads
the newest weights from shared memory (tlgpu.publish.Subscriber), acks the version, runs the CNN forward, and
sends its rollout (uint8 frames, actions, log-probabilities, rewards, dones, values) back over a queue. The
forward is the learner's agent on tlgpu by default (--actor-forward tlgpu: build_agent's network with the
delivered weights copied into its parameters in place, a tlgpu.jit forward, one OpenCL thread per actor process:
rl_learner.actor_env), or a numpy copy of it (--actor-forward numpy).
The learner computes GAE (gamma 0.99, lambda 0.95) and runs the PPO update (clip 0.1, entropy 0.01, value 0.5
with value clipping, max grad norm 0.5, Adam 2.5e-4 eps 1e-5 annealed linearly, 4 epochs x 4 minibatches).
It prints one progress line per update and saves a checkpoint (tlgpu.save, safetensors) at the end.

python examples/ppo_atari.py [--env ALE/Breakout-v5] [--actors 2] [--envs-per-actor 4] [--steps 128]
                             [--updates 100] [--checkpoint ppo_atari.safetensors] [--time-limit 3600]
                             [--actor-forward tlgpu|numpy] [--tiny]
Needs gymnasium>=1.1 and ale-py (pip install "tlgpu[atari]"; the ROMs ship with ale-py).
"""
import argparse
import multiprocessing as mp
import os
import queue
import sys
import time
from collections import deque

# One BLAS thread for this process and the actors it spawns (they inherit the environment): the host's numpy
# work is small (the actors' CNN forward at a few frames, GAE, the orthogonal init's QR), the cores are shared
# with the OpenCL device and the games, and oversubscribed OpenBLAS threads made the 3136x512 QR of the init
# take 7 s instead of 0.4 s on a busy 2-core machine. Set the variables yourself to override.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))    # the tree, after PYTHONPATH

FRAME = 84           # observation: FRAME x FRAME grayscale, 4 stacked frames


# ----------------------------------------------------------------------------------------------- environments

def _area_matrix(n_in, n_out):
    """Rows of weights that average the input pixels each output pixel covers (by overlap length): OpenCV's
    INTER_AREA for a downscale, as a matrix, so a frame resizes with two small matmuls (no cv2 needed)."""
    m = np.zeros((n_out, n_in), np.float32)
    s = n_in / n_out
    for i in range(n_out):
        lo, hi = i * s, (i + 1) * s
        for j in range(int(np.floor(lo)), min(int(np.ceil(hi)), n_in)):
            m[i, j] = min(hi, j + 1) - max(lo, j)
    return m / s


def make_env(env_id, seed):
    """One Atari game with CleanRL's wrappers: AtariFrames (NoopReset(30), MaxAndSkip(4), 84x84 grayscale: what
    gymnasium's AtariPreprocessing does, without OpenCV), EpisodicLife, FireReset and ClipReward as CleanRL
    writes them (AtariPreprocessing's terminal_on_life_loss resets the whole game at a life loss, CleanRL's
    EpisodicLife does not), and gymnasium's FrameStackObservation for the 4-frame stack."""
    import ale_py
    import gymnasium as gym
    gym.register_envs(ale_py)

    class AtariFrames(gym.Wrapper):
        """gymnasium's AtariPreprocessing(noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True,
        terminal_on_life_loss=False), step for step: NoopReset (1-30 no-ops after a reset), MaxAndSkip (repeat
        the action 4 frames, sum the rewards, max-pool the last two grayscale screens), and an area resize to
        84x84. AtariPreprocessing needs OpenCV for the resize; here it is OpenCV's INTER_AREA written as two
        small matmuls, so the example needs only gymnasium and ale-py."""

        def __init__(self, env, noop_max=30, frame_skip=4):
            super().__init__(env)
            self.noop_max, self.frame_skip, self.ale = noop_max, frame_skip, env.unwrapped.ale
            h, w = env.observation_space.shape[:2]
            self.buf = [np.zeros((h, w), np.uint8), np.zeros((h, w), np.uint8)]
            self.rows, self.cols = _area_matrix(h, FRAME), _area_matrix(w, FRAME).T.copy()
            self.observation_space = gym.spaces.Box(0, 255, (FRAME, FRAME), np.uint8)

        def _obs(self):
            np.maximum(self.buf[0], self.buf[1], out=self.buf[0])
            return np.rint(self.rows @ self.buf[0].astype(np.float32) @ self.cols).astype(np.uint8)

        def step(self, action):
            total, term, trunc, info = 0.0, False, False, {}
            for t in range(self.frame_skip):
                _, rew, term, trunc, info = self.env.step(action)
                total += rew
                if term or trunc:
                    break
                if t == self.frame_skip - 2:
                    self.ale.getScreenGrayscale(self.buf[1])
                elif t == self.frame_skip - 1:
                    self.ale.getScreenGrayscale(self.buf[0])
            return self._obs(), total, term, trunc, info

        def reset(self, **kwargs):
            _, info = self.env.reset(**kwargs)
            for _ in range(self.env.unwrapped.np_random.integers(1, self.noop_max + 1) if self.noop_max else 0):
                _, _, term, trunc, info = self.env.step(0)
                if term or trunc:
                    _, info = self.env.reset(**kwargs)
            self.ale.getScreenGrayscale(self.buf[0])
            self.buf[1].fill(0)
            return self._obs(), info

    class EpisodicLife(gym.Wrapper):
        """A life loss ends the episode for the learner (terminated), but only a real game over resets."""

        def __init__(self, env):
            super().__init__(env)
            self.lives, self.real_done = 0, True

        def step(self, action):
            obs, rew, term, trunc, info = self.env.step(action)
            self.real_done = term or trunc
            lives = self.env.unwrapped.ale.lives()
            if 0 < lives < self.lives:
                term = True
            self.lives = lives
            return obs, rew, term, trunc, info

        def reset(self, **kwargs):
            if self.real_done:
                obs, info = self.env.reset(**kwargs)
            else:
                obs, _, term, trunc, info = self.env.step(0)       # no-op step from the lost-life state
                if term or trunc:
                    obs, info = self.env.reset(**kwargs)
            self.lives = self.env.unwrapped.ale.lives()
            return obs, info

    class FireReset(gym.Wrapper):
        """Press FIRE (and then action 2) after a reset, for games that wait for it."""

        def reset(self, **kwargs):
            obs, info = self.env.reset(**kwargs)
            for a in (1, 2):
                obs, _, term, trunc, _ = self.env.step(a)
                if term or trunc:
                    obs, info = self.env.reset(**kwargs)
            return obs, info

    env = gym.make(env_id, frameskip=1)          # AtariFrames skips frames (and max-pools the last two)
    env = gym.wrappers.RecordEpisodeStatistics(env)                  # true game returns, across lives
    env = AtariFrames(env, noop_max=30, frame_skip=4)
    env = EpisodicLife(env)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireReset(env)
    env = gym.wrappers.TransformReward(env, lambda r: float(np.sign(r)))     # ClipReward
    env = gym.wrappers.FrameStackObservation(env, 4)
    env.action_space.seed(seed)
    return env


class VecAtari:
    """n games stepped in turn in this process, same-step autoreset (the step that ends an episode returns the
    next episode's first frame stack); finished game returns come from RecordEpisodeStatistics."""

    def __init__(self, env_id, n, seed):
        self.envs = [make_env(env_id, seed + i) for i in range(n)]
        self.seed = seed
        self.n_actions = int(self.envs[0].action_space.n)

    def reset(self):
        return np.stack([np.asarray(e.reset(seed=self.seed + i)[0]) for i, e in enumerate(self.envs)])

    def step(self, actions):
        obs, rew, done, finished = [], np.zeros(len(self.envs), np.float32), np.zeros(len(self.envs), bool), []
        for i, (e, a) in enumerate(zip(self.envs, actions)):
            o, r, term, trunc, info = e.step(int(a))
            if "episode" in info:
                finished.append(float(info["episode"]["r"]))
            if term or trunc:
                o, _ = e.reset()
            obs.append(np.asarray(o))
            rew[i], done[i] = r, term or trunc
        return np.stack(obs), rew, done, finished

    def close(self):
        for e in self.envs:
            e.close()


# ----------------------------------------------------------------------------------------------- actor

def _np_conv(x, w, b, stride):
    """NHWC conv, no padding: windows are a strided view (sliding_window_view), the product one tensordot."""
    kh, kw = w.shape[2:]
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(1, 2))[:, ::stride, ::stride]
    return np.tensordot(win, w, axes=([3, 4, 5], [1, 2, 3])) + b          # (N, OH, OW, O)


def np_weights(w):
    """The published weights, rearranged once per version for the numpy forward: the first linear layer reads
    torch's NCHW flatten order, the numpy convs produce NHWC."""
    out = dict(w)
    fc = w["network.7.weight"]
    out["network.7.weight"] = fc.reshape(fc.shape[0], 64, 7, 7).transpose(0, 2, 3, 1).reshape(fc.shape[0], -1)
    return out


def np_forward(w, obs):
    """The actor's copy of the agent: uint8 frames (N, 4, 84, 84) -> (logits, values)."""
    x = obs.transpose(0, 2, 3, 1).astype(np.float32) * np.float32(1 / 255)
    for i, s in ((0, 4), (2, 2), (4, 1)):
        x = np.maximum(_np_conv(x, w[f"network.{i}.weight"], w[f"network.{i}.bias"], s), 0)
    h = np.maximum(x.reshape(x.shape[0], -1) @ w["network.7.weight"].T + w["network.7.bias"], 0)
    return h @ w["actor.weight"].T + w["actor.bias"], (h @ w["critic.weight"].T + w["critic.bias"])[:, 0]


class NumpyAgent:
    """--actor-forward numpy: np_forward on the newest delivered weights (rearranged once per version)."""

    device = "the host"

    def load(self, w):
        self.w = np_weights(w)

    def __call__(self, obs):
        return np_forward(self.w, obs)


class TlgpuAgent:
    """--actor-forward tlgpu: build_agent's network on this process's tlgpu device (no initialisation: every
    version is loaded). load(w) copies a delivered version into the existing parameters in place
    (load_state_dict), so the jitted forward keeps its trace: a replay reads the parameters' buffers, whatever
    was written into them since (docs/jit.md). The frames are converted to float32 on the host (the agent
    divides by 255 on the device). Returns numpy (logits, values), as np_forward does."""

    def __init__(self, n_actions):
        import tlgpu
        self.tlgpu, self.model, self.device = tlgpu, build_agent(n_actions, init=False), tlgpu.device().name

        @tlgpu.jit
        def forward(x):
            with tlgpu.no_grad():
                return self.model(x)
        self.forward = forward

    def load(self, w):
        self.model.load_state_dict(w)

    def __call__(self, obs):
        logits, value = self.forward(self.tlgpu.tensor(obs.astype(np.float32)))
        return logits.numpy(), value.numpy()


def actor(idx, name, out_q, stop, env_id, n_envs, steps, seed, forward="tlgpu", env_vars=None):
    os.environ.update(env_vars or {})            # before tlgpu's import: PoCL reads them as OpenCL initialises
    from tlgpu.publish import PublisherClosed, Subscriber
    sub = None
    while sub is None and not stop.is_set():
        try:
            sub = Subscriber(name)
        except FileNotFoundError:
            time.sleep(0.01)
    if sub is None:
        return
    rng = np.random.default_rng(seed + 1000 * (idx + 1))
    env = VecAtari(env_id, n_envs, seed + 100 * idx)
    obs = env.reset()
    try:
        policy = TlgpuAgent(env.n_actions) if forward == "tlgpu" else NumpyAgent()
        got = sub.wait(0, timeout=60.0)
        while got is not None and not stop.is_set():
            version, _, w = sub.latest()
            sub.ack(version)
            policy.load(w)
            buf = {k: [] for k in ("obs", "act", "logp", "val", "rew", "done")}
            finished, t_env, t_net = [], 0.0, 0.0
            for _ in range(steps):
                t0 = time.perf_counter()
                logits, val = policy(obs)
                z = logits - logits.max(1, keepdims=True)
                logp_all = z - np.log(np.exp(z).sum(1, keepdims=True))
                act = (logp_all - np.log(-np.log(rng.random(logits.shape)))).argmax(1).astype(np.int32)   # Gumbel-max
                t1 = time.perf_counter()
                nobs, rew, done, fin = env.step(act)
                t_env += time.perf_counter() - t1
                t_net += t1 - t0
                for k, v in zip(buf, (obs, act, logp_all[np.arange(n_envs), act].astype(np.float32),
                                      val.astype(np.float32), rew, done)):
                    buf[k].append(v)
                finished += fin
                obs = nobs
            _, last_val = policy(obs)
            traj = {k: np.stack(v) for k, v in buf.items()}
            traj.update(last_val=last_val.astype(np.float32), version=version, finished=finished, actor=idx,
                        t_env=t_env, t_net=t_net, device=policy.device)
            while not stop.is_set():
                try:
                    out_q.put(traj, timeout=1.0)
                    break
                except queue.Full:
                    continue
    except PublisherClosed:
        pass
    finally:
        env.close()
        sub.close()


# ----------------------------------------------------------------------------------------------- learner (tlgpu)

def build_agent(n_actions, init=True):
    """CleanRL's Agent: the same module names (network.0 ... network.7, actor, critic), so the checkpoint's
    keys and shapes are the torch agent's. init=False skips CleanRL's orthogonal initialisation (the actors
    load every version they use)."""
    import math

    from tlgpu import nn

    def layer_init(layer, std=math.sqrt(2), bias_const=0.0):
        if init:
            nn.init.orthogonal_(layer.weight, std)
            nn.init.constant_(layer.bias, bias_const)
        return layer

    class Agent(nn.Module):
        def __init__(self):
            super().__init__()
            self.network = nn.Sequential(
                layer_init(nn.Conv2d(4, 32, 8, stride=4)), nn.ReLU(),
                layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
                layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
                nn.Flatten(),
                layer_init(nn.Linear(64 * 7 * 7, 512)), nn.ReLU())
            self.actor = layer_init(nn.Linear(512, n_actions), std=0.01)
            self.critic = layer_init(nn.Linear(512, 1), std=1)

        def forward(self, x):
            h = self.network(x * (1.0 / 255.0))
            return self.actor(h), self.critic(h).reshape(-1)
    return Agent()


def gae(traj, gamma=0.99, lam=0.95):
    """Generalised advantage estimation over a [T, E] rollout; done[t]: the step t ended the episode (a life
    loss included), so nothing is bootstrapped across it (CleanRL's convention)."""
    rew, val, done = traj["rew"], traj["val"], traj["done"]
    T = rew.shape[0]
    adv = np.zeros_like(rew)
    last = np.zeros(rew.shape[1], np.float32)
    for t in reversed(range(T)):
        nxt = traj["last_val"] if t == T - 1 else val[t + 1]
        nonterminal = 1.0 - done[t].astype(np.float32)
        delta = rew[t] + gamma * nxt * nonterminal - val[t]
        last = delta + gamma * lam * nonterminal * last
        adv[t] = last
    return adv, adv + val


def make_minibatch_step(tlgpu, model, opt, clip=0.1, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5):
    """CleanRL's minibatch update (clipped surrogate, clipped value loss, entropy bonus, grad-norm clip, Adam)
    as a tlgpu.jit function of the minibatch's tensors (docs/jit.md): traced on its second call per minibatch
    size, replayed from C after. Returns (pg, v_loss, entropy, approx_kl, clipfrac) as 0-d tensors."""
    from tlgpu.distributions import Categorical

    @tlgpu.jit
    def step(x, act, old_logp, old_v, ret, adv):
        logits, value = model(x)
        dist = Categorical(logits=logits)
        logratio = dist.log_prob(act) - old_logp
        ratio = logratio.exp()
        pg = tlgpu.maximum(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip)).mean()
        v_clipped = old_v + (value - old_v).clamp(-clip, clip)
        v_loss = 0.5 * tlgpu.maximum((value - ret).square(), (v_clipped - ret).square()).mean()
        entropy = dist.entropy().mean()
        loss = pg - ent_coef * entropy + vf_coef * v_loss
        opt.zero_grad()
        loss.backward()
        tlgpu.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        opt.step()
        with tlgpu.no_grad():
            kl = ((ratio - 1) - logratio).mean()
            clipfrac = ((ratio - 1).abs() > clip).mean()
        return pg, v_loss, entropy, kl, clipfrac
    return step


def ppo_update(tlgpu, model, opt, batch, epochs, minibatches, rng, gather="host", step=None):
    """CleanRL's update: per-minibatch advantage normalisation, then make_minibatch_step's step (made here if
    None). Returns the last minibatch's (pg, v, entropy, approx_kl) and the clip fraction (one host wait per
    update for the numbers). gather="host": each minibatch's frames are picked and converted to float32 on
    the host and uploaded (cheapest where the device is the CPU); "device": the whole batch is uploaded once
    per update and each minibatch picked with index_select on the device (for a GPU)."""
    step = step or make_minibatch_step(tlgpu, model, opt)
    n = batch["obs"].shape[0]
    stats = []
    all_obs = tlgpu.tensor(batch["obs"].astype(np.float32)) if gather == "device" else None
    for _ in range(epochs):
        perm = rng.permutation(n)
        for idx in np.array_split(perm, minibatches):
            a = batch["adv"][idx]
            a = (a - a.mean()) / (a.std(ddof=1 if len(a) > 1 else 0) + 1e-8)
            if all_obs is not None:
                x = all_obs.index_select(0, idx)   # a host index: checked here, no wait
            else:
                x = tlgpu.tensor(batch["obs"][idx].astype(np.float32))         # uint8 -> float32, /255 in the model
            act, old_logp, old_v, ret, adv = (tlgpu.tensor(v) for v in (
                batch["act"][idx], batch["logp"][idx], batch["val"][idx], batch["ret"][idx], a.astype(np.float32)))
            stats.append(step(x, act, old_logp, old_v, ret, adv))
    pg, v_loss, entropy, kl, _ = (float(t.item()) for t in stats[-1])
    clipfrac = float(np.mean([float(s[4].item()) for s in stats]))
    return pg, v_loss, entropy, kl, clipfrac


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="ALE/Breakout-v5")
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--envs-per-actor", type=int, default=4)
    ap.add_argument("--steps", type=int, default=128, help="rollout length per env")
    ap.add_argument("--updates", type=int, default=100)
    ap.add_argument("--minibatches", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--lr", type=float, default=2.5e-4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--checkpoint", default="ppo_atari.safetensors")
    ap.add_argument("--gather", choices=("auto", "host", "device"), default="auto",
                    help="where minibatches are picked: host (upload each), device (upload the batch once, "
                         "index_select); auto: host on a CPU device, device otherwise")
    ap.add_argument("--time-limit", type=float, default=3600.0, help="seconds; stop after the update that passes it")
    ap.add_argument("--actor-forward", choices=("tlgpu", "numpy"), default="tlgpu",
                    help="the actors' CNN forward: tlgpu (jitted, one OpenCL thread per actor) or numpy")
    ap.add_argument("--tiny", action="store_true",
                    help="the test's configuration: 1 actor x 2 envs, 16 steps, 2 updates, 2 minibatches, 2 epochs")
    args = ap.parse_args(argv)
    if args.tiny:
        given = {a.split("=")[0] for a in (argv if argv is not None else sys.argv[1:])}
        for k, v in (("actors", 1), ("envs_per_actor", 2), ("steps", 16), ("updates", 2), ("minibatches", 2),
                     ("epochs", 2)):
            if "--" + k.replace("_", "-") not in given:
                setattr(args, k, v)
    for k in ("actors", "envs_per_actor", "steps", "updates", "minibatches", "epochs"):
        if getattr(args, k) < 1:
            ap.error(f"--{k.replace('_', '-')} must be at least 1, got {getattr(args, k)}")
    if args.minibatches > args.actors * args.envs_per_actor * args.steps:
        ap.error(f"--minibatches {args.minibatches} is more than the {args.actors * args.envs_per_actor * args.steps} "
                 f"frames of an update")
    return args


def main(argv=None):
    args = parse_args(argv)
    import gymnasium as gym
    import ale_py

    import tlgpu
    from rl_learner import actor_env
    gym.register_envs(ale_py)
    probe = gym.make(args.env)
    n_actions = int(probe.action_space.n)
    probe.close()

    tlgpu.manual_seed(args.seed)
    gather = args.gather if args.gather != "auto" else ("host" if tlgpu.device().type == "cpu" else "device")
    rng = np.random.default_rng(args.seed)
    model = build_agent(n_actions)
    opt = tlgpu.optim.Adam(model.parameters(), lr=args.lr, eps=1e-5)
    step = make_minibatch_step(tlgpu, model, opt)      # tlgpu.jit: replayed from C after its trace
    name = f"tlgpu_ppo_atari_{os.getpid()}"
    ctx = mp.get_context("spawn")
    out_q, stop = ctx.Queue(maxsize=args.actors), ctx.Event()
    batch_size = args.actors * args.envs_per_actor * args.steps
    env_vars = actor_env(args.actor_forward, tlgpu.devices(), check=True)
    print(f"device: {tlgpu.device().name}; {args.env} ({n_actions} actions); {args.actors} actors x "
          f"{args.envs_per_actor} envs x {args.steps} steps = {batch_size} frames per update, "
          f"{args.minibatches} minibatches x {args.epochs} epochs, minibatches gathered on the {gather}; actor "
          f"forward: {args.actor_forward}" + "".join(f" {k}={v}" for k, v in env_vars.items() if k == "POCL_DEVICES"),
          flush=True)

    returns, steps, update, acked_seen, devices = deque(maxlen=20), 0, 0, [], set()
    t0 = time.perf_counter()
    with tlgpu.publish.WeightPublisher(model, name=name) as pub:
        pub.publish(0)
        procs = [ctx.Process(target=actor, args=(i, name, out_q, stop, args.env, args.envs_per_actor, args.steps,
                                                 args.seed, args.actor_forward, env_vars), daemon=True)
                 for i in range(args.actors)]
        for p in procs:
            p.start()
        try:
            while update < args.updates:
                tw = time.perf_counter()
                trajs = []
                while len(trajs) < args.actors:
                    try:
                        trajs.append(out_q.get(timeout=5.0))
                    except queue.Empty:
                        dead = [p.exitcode for p in procs if not p.is_alive()]
                        if dead:
                            raise RuntimeError(f"an actor exited (exit codes {dead})") from None
                        if time.perf_counter() - tw > 300:
                            raise RuntimeError("no trajectory from the actors in 300 s") from None
                wait_s = time.perf_counter() - tw
                for t in trajs:
                    returns.extend(t["finished"])
                    devices.add(t["device"])
                    t["adv"], t["ret"] = gae(t)
                batch = {k: np.concatenate([t[k].reshape(-1, *t[k].shape[2:]) for t in trajs])
                         for k in ("obs", "act", "logp", "val", "adv", "ret")}
                steps += batch["obs"].shape[0]
                opt.param_groups[0]["lr"] = (1.0 - update / args.updates) * args.lr        # linear annealing
                tu = time.perf_counter()
                pg, vl, ent, kl, cf = ppo_update(tlgpu, model, opt, batch, args.epochs, args.minibatches, rng, gather,
                                                 step=step)
                update_s = time.perf_counter() - tu
                update += 1
                pub.publish(update)
                st = pub.stats()
                acked = st["acked"]
                if acked:
                    acked_seen = list(acked)
                lag = st["published"] - float(np.mean(acked)) if acked else float("nan")
                el = time.perf_counter() - t0
                ret = f"{np.mean(returns):7.2f} ({len(returns)} eps)" if returns else "    n/a (0 eps)"
                print(f"update {update}/{args.updates}  env steps {steps}  SPS {steps / el:.0f}  return {ret}  "
                      f"lag {lag:.2f}  pg {pg:+.4f}  v {vl:.4f}  ent {ent:.3f}  kl {kl:.4f}  clipfrac {cf:.3f}  "
                      f"update {update_s:.2f} s  wait {wait_s:.2f} s  actor env/net "
                      f"{np.mean([t['t_env'] for t in trajs]):.2f}/{np.mean([t['t_net'] for t in trajs]):.2f} s",
                      flush=True)
                if el > args.time_limit:
                    print(f"time limit {args.time_limit:.0f} s reached", flush=True)
                    break
        finally:
            stop.set()
            deadline = time.perf_counter() + 20
            for p in procs:                      # drain the queue so actors blocked in put() can exit
                while p.is_alive() and time.perf_counter() < deadline:
                    try:
                        out_q.get(timeout=0.1)
                    except queue.Empty:
                        pass
                    p.join(timeout=0.1)
                if p.is_alive():
                    p.terminate()
                    p.join()
        stats = pub.stats()
    el = time.perf_counter() - t0
    state = model.state_dict()
    tlgpu.save(state, args.checkpoint)
    back = tlgpu.load(args.checkpoint)
    same = list(back) == list(state) and all(np.array_equal(back[k].numpy(), v) for k, v in state.items())
    if not same:
        raise RuntimeError(f"checkpoint {args.checkpoint}: reloaded weights differ from the model's")
    n_params = sum(v.size for v in state.values())
    mean_ret = f"{np.mean(returns):.2f}" if returns else "n/a"
    print(f"summary: {update} updates, {steps} env steps in {el:.1f} s ({steps / el:.0f} SPS); mean return of the "
          f"last {len(returns)} episodes {mean_ret}")
    print(f"publisher: published {stats['published']}, delivered {stats['delivered']}, skipped {stats['skipped']}, "
          f"dropped {stats['dropped']}; blocking {1e6 * stats['blocking_mean_s']:.0f} us mean; "
          f"actors acked {acked_seen} (last seen)")
    print(f"checkpoint: {args.checkpoint} ({len(state)} tensors, {n_params} parameters), reloaded and verified")
    print(f"actors' forward: {args.actor_forward} on {', '.join(sorted(devices))}")
    return update


if __name__ == "__main__":
    main()
