"""RL learner demo: PPO on CartPole with actor processes fed by tlgpu's asynchronous weight publisher.

The learner trains a small policy/value MLP on the default device and publishes the weights after every
update (publish() only enqueues a device snapshot: the learner does not wait for the copy). N actor
processes step gymnasium's CartPole-v1 vector environments with the newest policy they can read from shared memory
(tlgpu.publish.Subscriber), ack the version they use, and send trajectories back. The learner prints a live
progress line and a summary; the run ends when the mean return of the last 100 episodes passes 195. Each PPO
minibatch update is a tlgpu.jit function (make_minibatch_step): traced once per minibatch size, then
replayed from C.

The actors run the policy with tlgpu too (--actor-forward tlgpu, the default): the learner's networks
(build_model) in each actor process, the delivered weights copied into their parameters in place, the
forward a tlgpu.jit function (TlgpuPolicy). Each actor process runs its OpenCL work on one thread of its own
(actor_env: PoCL's single-threaded driver, or its threaded driver limited to one thread), as RL actors run.
--actor-forward numpy runs the numpy copy of the networks instead (np_policy), for comparison.

With --ray the actors are Ray actors on another node of a local two-node Ray cluster (the head runs the
learner; the actors require the second node's custom resource "remote"), fed by tlgpu.publish.RaySink
through Ray's object store; --ray-address joins an existing cluster instead (its actors' node must offer
the resource "remote"). Needs `pip install tlgpu[ray]`.

python examples/rl_learner.py [--actors 2] [--envs 16] [--horizon 128] [--max-updates 200] [--time-limit 300]
                              [--actor-forward tlgpu|numpy] [--ray [--ray-address ADDR]]
"""
import argparse
import multiprocessing as mp
import os
import queue
import re
import subprocess
import sys
import time
from collections import deque

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.append(ROOT)                                   # the tree, after PYTHONPATH


class VecCartPole:
    """gymnasium's CartPole-v1, n copies in one synchronous vector env. Same-step autoreset: the step that
    ends an episode returns the next episode's first observation, so a rollout has no dead steps; episode
    returns are summed here."""

    def __init__(self, n, seed):
        import gymnasium as gym
        self.envs = gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="sync",
                                 vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
        self.seed, self.returns = seed, np.zeros(n)

    def reset(self):
        obs, _ = self.envs.reset(seed=self.seed)
        return obs.astype(np.float32)

    def step(self, action):
        obs, rew, term, trunc, _ = self.envs.step(action.astype(np.int64))
        self.returns += rew
        done = term | trunc
        finished = self.returns[done].tolist()
        self.returns[done] = 0.0
        return obs.astype(np.float32), rew.astype(np.float32), done, term, finished   # term: no bootstrap


def np_mlp(w, prefix, x):
    h = np.tanh(x @ w[prefix + ".0.weight"].T + w[prefix + ".0.bias"])
    h = np.tanh(h @ w[prefix + ".2.weight"].T + w[prefix + ".2.bias"])
    return h @ w[prefix + ".4.weight"].T + w[prefix + ".4.bias"]


def np_policy(w, obs):
    """The actors' copy of the networks, in numpy: (logits, value)."""
    return np_mlp(w, "pi", obs), np_mlp(w, "v", obs)[:, 0]


class NumpyPolicy:
    """--actor-forward numpy: np_policy on the newest delivered weights."""

    device = "the host"

    def load(self, w):
        self.w = w

    def __call__(self, obs):
        return np_policy(self.w, obs)


class TlgpuPolicy:
    """--actor-forward tlgpu: the learner's networks (build_model) on this process's tlgpu device. load(w) copies
    a delivered version into the existing parameters in place (load_state_dict: copy_ into each parameter's
    buffer), so the jitted forward keeps its trace: a replay reads the parameters' buffers, whatever was
    written into them since (docs/jit.md). The forward is a tlgpu.jit function of the observations: the first
    call per batch size runs eagerly, the second is traced, later ones replay from C. Returns numpy (logits,
    value), as np_policy does: the actor samples on the host either way."""

    def __init__(self):
        import tlgpu
        self.tlgpu, self.model, self.device = tlgpu, build_model(tlgpu), tlgpu.device().name

        @tlgpu.jit
        def forward(obs):
            with tlgpu.no_grad():
                return self.model(obs)
        self.forward = forward

    def load(self, w):
        self.model.load_state_dict(w)

    def __call__(self, obs):
        logits, value = self.forward(self.tlgpu.tensor(obs))
        return logits.numpy(), value.numpy()


def make_policy(forward):
    return TlgpuPolicy() if forward == "tlgpu" else NumpyPolicy()


def device_starts(env):
    """Whether tlgpu finds its device in a fresh process with env added (a PoCL build may lack a driver)."""
    code = f"import sys; sys.path.append({ROOT!r}); import tlgpu; tlgpu.device()"
    safe = ["-P"] if sys.version_info >= (3, 11) else []     # the cwd not first: PYTHONPATH's tlgpu, then the tree
    r = subprocess.run([sys.executable, *safe, "-c", code], env={**os.environ, **env}, capture_output=True,
                       timeout=300)
    return r.returncode == 0


def actor_env(forward, devices=None, check=False):
    """Environment variables for an actor process, to be set before it imports tlgpu: PoCL reads them once, when
    OpenCL initialises. For forward="tlgpu" the actor's device is the CPU's OpenCL driver (PoCL) where there is
    one, on one thread: RL actors run one process per actor, each on one core.
    - POCL_DEVICES=basic (PoCL 3.x; "cpu-minimal" from PoCL 4.0): PoCL's single-threaded driver, which runs
      each kernel on the calling thread when the queue is flushed. The threaded driver ("pthread", "cpu" from
      4.0) hands every flush, upload and read to a worker thread and waits for it: 10-60 us more per small
      forward on a 2-core machine (benchmarks/bench_actor.py, threads "minimal" against "1").
    - POCL_MAX_PTHREAD_COUNT=1 and POCL_CPU_MAX_CU_COUNT=1: the threaded driver's thread count (the first name
      up to PoCL 3.x, the second from 4.0, where the first still works but is deprecated), for a PoCL whose
      version is not known here; the device then reports one compute unit, so tlgpu's CPU BLAS path runs
      its products in one part (TLGPU_BLAS_THREADS defaults to the compute units).
    - TLGPU_DEVICE names PoCL's platform, so on a GPU host the actors run on the CPU beside the learner.
    devices: tlgpu.devices() of the learner (the PoCL version is read from it); check: start tlgpu once in a
    child process with these variables and, where that fails (a PoCL built without its single-threaded
    driver), keep the threaded driver on one thread instead. forward="numpy": nothing."""
    if forward != "tlgpu":
        return {}
    env = {"POCL_MAX_PTHREAD_COUNT": "1", "POCL_CPU_MAX_CU_COUNT": "1"}
    pocl = [d for d in devices or () if "Portable Computing Language" in d["platform"]]
    if pocl:
        env["TLGPU_DEVICE"] = "Portable Computing Language"
        m = re.search(r"PoCL (\d+)\.", pocl[0]["platform_version"])
        if m:
            env["POCL_DEVICES"] = "basic" if int(m.group(1)) < 4 else "cpu-minimal"
        if check and "POCL_DEVICES" in env and not device_starts(env):
            del env["POCL_DEVICES"]
    return env


def rollout(policy, env, obs, rng, n_envs, horizon):
    """horizon steps of n_envs environments with policy(obs) -> (logits, value): (trajectory dict, the next
    observation)."""
    buf = {k: [] for k in ("obs", "act", "logp", "val", "rew", "done", "term")}
    finished = []
    for _ in range(horizon):
        logits, val = policy(obs)
        z = logits - logits.max(1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
        act = (rng.random(n_envs) < p[:, 1]).astype(np.int32)
        logp = np.log(p[np.arange(n_envs), act] + 1e-12)
        nobs, rew, done, term, fin = env.step(act)
        for k, v in zip(buf, (obs, act, logp, val, rew, done, term)):
            buf[k].append(v)
        finished += fin
        obs = nobs
    _, last_val = policy(obs)
    traj = {k: np.stack(v) for k, v in buf.items()}
    traj.update(last_val=last_val, finished=finished)
    return traj, obs


def actor(idx, name, out_q, stop, n_envs, horizon, forward="tlgpu", env_vars=None):
    os.environ.update(env_vars or {})            # before tlgpu's import: PoCL reads them as OpenCL initialises
    from tlgpu.publish import Subscriber
    sub = None
    while sub is None and not stop.is_set():
        try:
            sub = Subscriber(name)
        except FileNotFoundError:
            time.sleep(0.01)
    if sub is None:
        return
    rng = np.random.default_rng(1000 + idx)
    env = VecCartPole(n_envs, seed=idx)
    obs = env.reset()
    policy = make_policy(forward)
    got = sub.wait(0, timeout=30.0)
    while got is not None and not stop.is_set():
        version, _, w = sub.latest()
        sub.ack(version)
        policy.load(w)
        traj, obs = rollout(policy, env, obs, rng, n_envs, horizon)
        traj.update(version=version, actor=idx, device=policy.device)
        try:
            out_q.put(traj, timeout=5.0)
        except queue.Full:
            continue
    sub.close()


class RayActor:
    """--ray: one actor as a Ray actor (ray.remote(RayActor) in main) on the node with the "remote" resource.
    rollout() takes the newest version RaySink delivered (waiting only for the first), acks it and returns a
    trajectory; the learner keeps one rollout in flight per actor."""

    def __init__(self, idx, name, n_envs, horizon, forward="tlgpu"):
        import ray
        from tlgpu.publish import RaySubscriber
        self.sub = RaySubscriber(name, timeout=60)
        self.idx, self.n_envs, self.horizon = idx, n_envs, horizon
        self.rng = np.random.default_rng(1000 + idx)
        self.env = VecCartPole(n_envs, seed=idx)
        self.obs = self.env.reset()
        self.policy = make_policy(forward)
        self.version, self.w = 0, None
        self.node = ray.get_runtime_context().get_node_id()

    def where(self):
        return self.node, os.getpid()

    def rollout(self):
        got = self.sub.wait(self.version, timeout=60.0 if self.w is None else 0.0)
        if got is not None:
            self.version, _, self.w = got
            self.policy.load(self.w)
        if self.w is None:
            raise RuntimeError("no weights from the learner within 60 s")
        self.sub.ack(self.version)
        traj, self.obs = rollout(self.policy, self.env, self.obs, self.rng, self.n_envs, self.horizon)
        traj.update(version=self.version, actor=self.idx, device=self.policy.device)
        return traj


def start_ray(args):
    """ray.init on a local two-node cluster (or --ray-address): returns what shuts it down."""
    import ray
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ["PYTHONPATH"] = root + os.pathsep + os.environ.get("PYTHONPATH", "")   # the actors import tlgpu
    if args.ray_address:
        ray.init(address=args.ray_address, log_to_driver=False)
        return ray.shutdown
    from ray.cluster_utils import Cluster
    mb = 2 ** 20
    c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=1, object_store_memory=200 * mb,
                                                          include_dashboard=False))
    c.add_node(num_cpus=args.actors, resources={"remote": args.actors}, object_store_memory=200 * mb)
    ray.init(address=c.address, log_to_driver=False)
    c.wait_for_nodes()

    def stop():
        ray.shutdown()
        c.shutdown()
    return stop


def gae(traj, gamma=0.99, lam=0.95):
    """Generalised advantage estimation over a [T, E] rollout (numpy)."""
    rew, val, done, term = traj["rew"], traj["val"], traj["done"], traj["term"]
    T = rew.shape[0]
    adv = np.zeros_like(rew)
    last = np.zeros(rew.shape[1], np.float32)
    for t in reversed(range(T)):
        nxt = traj["last_val"] if t == T - 1 else val[t + 1]
        nxt = np.where(term[t], 0.0, nxt)                      # fell: no future value
        delta = rew[t] + gamma * nxt - val[t]
        last = delta + gamma * lam * np.where(done[t], 0.0, last)
        adv[t] = last
    return adv, adv + val


def build_model(tlgpu):
    from tlgpu import nn

    def mlp(out):
        return nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, out))

    class ActorCritic(nn.Module):
        """Separate policy and value networks (a shared body lets the value loss swamp the policy)."""

        def __init__(self):
            super().__init__()
            self.pi, self.v = mlp(2), mlp(1)

        def forward(self, x):
            return self.pi(x), self.v(x).reshape(-1)
    return ActorCritic()


def make_minibatch_step(tlgpu, model, opt, clip=0.2):
    """One PPO minibatch update as a tlgpu.jit function (docs/jit.md): its first call per minibatch size
    runs eagerly, its second is traced, later ones replay from C. The minibatch arrives as an int32 index
    tensor, which index_select reads on the device (a numpy index would be uploaded inside the trace)."""
    from tlgpu.nn import functional as F

    @tlgpu.jit
    def step(obs, act, old_logp, adv, ret, i):
        logits, value = model(obs.index_select(0, i))
        logp_all = logits.log_softmax(-1)
        logp = -F.cross_entropy(logits, act.index_select(0, i), reduction="none")
        ratio = (logp - old_logp.index_select(0, i)).exp()
        a = adv.index_select(0, i)
        pg = -tlgpu.minimum(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a).mean()
        vloss = (value - ret.index_select(0, i)).square().mean()
        entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
        loss = pg + 0.5 * vloss - 0.01 * entropy
        opt.zero_grad()
        loss.backward()
        tlgpu.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        return loss
    return step


def ppo_update(tlgpu, model, opt, batch, epochs=4, minibatches=4, step=None):
    """PPO epochs over one batch; step: make_minibatch_step's function (made here if None)."""
    step = step or make_minibatch_step(tlgpu, model, opt)
    n = batch["obs"].shape[0]
    obs, act = tlgpu.tensor(batch["obs"]), tlgpu.tensor(batch["act"])
    old_logp, adv, ret = (tlgpu.tensor(batch[k]) for k in ("logp", "adv", "ret"))
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)       # unbiased std, as torch's (CleanRL's normalisation)
    rng = np.random.default_rng()
    for _ in range(epochs):
        perm = rng.permutation(n).astype(np.int32)
        for idx in np.array_split(perm, minibatches):
            step(obs, act, old_logp, adv, ret, tlgpu.tensor(idx))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--envs", type=int, default=16)
    ap.add_argument("--horizon", type=int, default=128)
    ap.add_argument("--max-updates", type=int, default=300)
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--target", type=float, default=195.0)
    ap.add_argument("--actor-forward", choices=("tlgpu", "numpy"), default="tlgpu",
                    help="the actors' policy forward: tlgpu (jitted, one OpenCL thread per actor) or numpy")
    ap.add_argument("--ray", action="store_true", help="actors as Ray actors on a local two-node cluster")
    ap.add_argument("--ray-address", default=None, help="with --ray: join this cluster instead")
    args = ap.parse_args(argv)

    import tlgpu
    tlgpu.manual_seed(0)
    model = build_model(tlgpu)
    opt = tlgpu.optim.Adam(model.parameters(), lr=1e-3)
    step = make_minibatch_step(tlgpu, model, opt)
    name = f"tlgpu_rl_{os.getpid()}"
    returns, t0, steps, update, blocking, devices = deque(maxlen=100), time.perf_counter(), 0, 0, [], set()
    env_vars = actor_env(args.actor_forward, tlgpu.devices(), check=True)
    print(f"device: {tlgpu.device().name}; {args.actors} actors x {args.envs} envs, horizon {args.horizon}"
          + (" (Ray)" if args.ray else "") + f"; actor forward: {args.actor_forward}"
          + "".join(f" {k}={v}" for k, v in env_vars.items() if k == "POCL_DEVICES"))
    stop_ray = start_ray(args) if args.ray else None
    try:
        if args.ray:
            import ray
            sink = tlgpu.publish.RaySink(name)
            pub = tlgpu.publish.WeightPublisher(model, sinks=[sink])
        else:
            pub = tlgpu.publish.WeightPublisher(model, name=name)
        with pub:
            pub.publish(0)
            if args.ray:
                cls = ray.remote(num_cpus=0, resources={"remote": 1},
                                 runtime_env={"env_vars": env_vars} if env_vars else None)(RayActor)
                actors = [cls.remote(i, name, args.envs, args.horizon, args.actor_forward) for i in range(args.actors)]
                where = ray.get([a.where.remote() for a in actors])
                here = ray.get_runtime_context().get_node_id()
                print(f"ray actors on node {sorted({n for n, _ in where})} (pids {[p for _, p in where]}); "
                      f"the learner on node {here}")
                pending = [a.rollout.remote() for a in actors]

                def collect():
                    nonlocal pending
                    trajs = ray.get(pending, timeout=120)
                    pending = [a.rollout.remote() for a in actors]   # in flight while the learner trains
                    return trajs

                def finish():
                    for a in actors:
                        ray.kill(a)
            else:
                ctx = mp.get_context("spawn")
                out_q, stop = ctx.Queue(maxsize=args.actors), ctx.Event()   # small queue: little policy lag
                procs = [ctx.Process(target=actor, args=(i, name, out_q, stop, args.envs, args.horizon,
                                                         args.actor_forward, env_vars),
                                     daemon=True) for i in range(args.actors)]
                for p in procs:
                    p.start()

                def collect():
                    return [out_q.get(timeout=120) for _ in range(args.actors)]

                def finish():
                    stop.set()
                    for p in procs:
                        p.join(timeout=10)
                        if p.is_alive():
                            p.terminate()
            try:
                while update < args.max_updates and time.perf_counter() - t0 < args.time_limit:
                    trajs = collect()
                    lag = np.mean([update + 1 - t["version"] for t in trajs])   # version = publishes so far
                    for t in trajs:
                        returns.extend(t["finished"])
                        devices.add(t["device"])
                        t["adv"], t["ret"] = gae(t)
                    batch = {k: np.concatenate([t[k].reshape(-1, *t[k].shape[2:]) for t in trajs])
                             for k in ("obs", "act", "logp", "adv", "ret")}
                    steps += batch["obs"].shape[0]
                    ppo_update(tlgpu, model, opt, batch, step=step)
                    update += 1
                    b0 = time.perf_counter()
                    pub.publish(update)
                    blocking.append(time.perf_counter() - b0)
                    mean_ret = float(np.mean(returns)) if returns else 0.0
                    el = time.perf_counter() - t0
                    acked = pub.stats()["acked"]
                    print(f"\rupdate {update:4d}  env steps {steps:7d}  {steps / el:6.0f} steps/s  mean return "
                          f"{mean_ret:6.1f}  policy lag {lag:4.2f}  publish {1e6 * blocking[-1]:6.1f} us  "
                          f"acked {acked}   ", end="", flush=True)
                    if len(returns) >= 20 and mean_ret > args.target:
                        break
                stats = pub.stats()                        # while the actors are still subscribed
            finally:
                finish()
    finally:
        if stop_ray is not None:
            stop_ray()
    el = time.perf_counter() - t0
    mean_ret = float(np.mean(returns)) if returns else 0.0
    print(f"\n\nsummary: {update} updates, {steps} env steps in {el:.1f} s ({steps / el:.0f} steps/s); "
          f"mean return of the last {len(returns)} episodes {mean_ret:.1f} (target {args.target})")
    print(f"publisher: published {stats['published']}, delivered {stats['delivered']}, skipped "
          f"{stats['skipped']}, dropped {stats['dropped']}; learner blocked {1e6 * np.mean(blocking):.1f} us "
          f"mean / {1e6 * np.median(blocking):.1f} us median / {1e6 * np.max(blocking):.1f} us max per publish")
    print("subscribers: " + ", ".join(f"{s['sink']} pid {s['pid']} acked {s['acked']}" for s in stats["subscribers"]))
    print(f"actors' policy forward: {args.actor_forward} on {', '.join(sorted(devices))}")
    return mean_ret


if __name__ == "__main__":
    sys.exit(0 if main() > 195.0 else 1)
