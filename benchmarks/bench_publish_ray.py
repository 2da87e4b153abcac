"""Weight publisher with a Ray sink (tlgpu.publish.RaySink), on a local two-node Ray cluster whose second
node runs the actor: at 1M, 10M and 100M parameters split into ~50 tensors,
  - learner blocking: time inside publish() (median, max) with the Ray sink attached, rapid publishes
    between small device updates (latest-only drops happen), as bench_publish.py measures it;
  - learner stall per delivery: the longest time the learner's Python thread could not run while one
    version was delivered (the publisher thread holds the GIL to copy a version out of staging for a Python
    sink, and while ray.put serialises it): with no Python sink, with a Python sink that does nothing, with
    the Ray sink; and the Ray sink's deliver() time itself (ray.put + the registry call);
  - end to end: every tensor changed, the remote actor parked in RaySubscriber.wait(); publish() entry ->
    the actor holds the arrays (same host, one clock);
  - reference in the same run: ray.put of the same {name: ndarray} on the learner, then ray.get of it in the
    same remote actor (the call included) -> the actor holds the arrays.
Usage: python benchmarks/bench_publish_ray.py [--json] [--sizes 1e6,1e7,1e8] [--tensors 50]"""
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # runs from a source checkout too
os.environ["PYTHONPATH"] = os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", "")  # Ray workers
import tlgpu  # noqa: E402
from _util import report  # noqa: E402
from bench_publish import make_params, touch_all  # noqa: E402
from tlgpu.publish import WeightPublisher  # noqa: E402


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


SIZES = [int(float(s)) for s in arg("--sizes", "1e6,1e7,1e8").split(",")]
MB = 2 ** 20


class NullSink:
    """A Python sink that does nothing: what the C glue costs the learner (the copy out of staging)."""

    def deliver(self, version, step, arrays):
        pass


def stall_per_delivery(pub, params, reps, step0):
    """The learner's longest pause per delivery: the learner thread runs Python (timing its own loop) while
    one version, every tensor changed, is delivered; a pause is a time it could not run (the publisher
    thread held the GIL). Median over reps of the longest pause, in seconds."""
    worst = []
    for r in range(reps):
        touch_all(params)
        pub.publish(step0 + r)
        gap, prev, i = 0.0, time.perf_counter(), 0
        while True:
            t = time.perf_counter()
            gap, prev = max(gap, t - prev), t
            i += 1
            if i % 512 == 0 and pub.drain(0):
                break
        worst.append(gap)
    return statistics.median(worst)


def note(*a):
    print(*a, file=sys.stderr, flush=True)


def main():
    import ray
    from ray.cluster_utils import Cluster
    from tlgpu.publish import RaySink, RaySubscriber

    class TimedRaySink(RaySink):
        def deliver(self, version, step, arrays):
            t0 = time.perf_counter()
            super().deliver(version, step, arrays)
            self.times.append(time.perf_counter() - t0)

    @ray.remote(num_cpus=0, resources={"remote": 1})
    class Actor:
        def __init__(self, name):
            self.sub = RaySubscriber(name, timeout=30) if name else None

        def node(self):
            return ray.get_runtime_context().get_node_id()

        def wait(self, v):
            r = self.sub.wait(v, timeout=120)
            t = time.time()
            assert r is not None and r[0] > v
            self.sub.ack(r[0])
            return r[0], t

        def get(self, refs):
            _ = ray.get(refs[0])
            return time.time()

    big = max(SIZES) * 4
    store = int(min(max(300 * MB, 2.5 * big), 2600 * MB))
    c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=1, object_store_memory=store,
                                                          include_dashboard=False))
    rows = []
    try:
        c.add_node(num_cpus=1, resources={"remote": 4}, object_store_memory=store)
        ray.init(address=c.address, log_to_driver=False)
        c.wait_for_nodes()
        rng = np.random.default_rng(0)
        for n in SIZES:
            rows.append(bench_size(n, rng, ray, TimedRaySink, Actor))
            tlgpu.empty_cache()
    finally:
        ray.shutdown()
        c.shutdown()
    cols = ["params", "block med us", "block max us", "deliver ms", "stall ms (C only)", "stall ms (null Py sink)",
            "stall ms (Ray)", "e2e remote ms", "ray.put+get ms", "e2e/ray",
            "delivered", "dropped"]
    report("weight publisher with a Ray sink (remote actor on a second local node)", rows, cols,
           {"targets": "block med < 1 ms with the Ray sink; e2e close to ray.put + ray.get"})


def bench_size(n, rng, ray, TimedRaySink, Actor):
    params = make_params(n, rng)
    tlgpu.synchronize()
    row = {"params": f"{n / 1e6:g}M"}
    name = f"bench_{os.getpid()}_{n}"
    reps = 3 if n >= 5e7 else 7
    stall = {}
    for label, sinks in (("C only", []), ("null Python sink", [NullSink()])):
        with WeightPublisher(params, sinks=sinks) as pub0:
            pub0.publish(0)
            pub0.drain()
            stall[label] = stall_per_delivery(pub0, params, reps, 1)
        note(f"{n:g}: stall {label}: {stall[label] * 1e3:.2f} ms")
    one = next(iter(params.values()))
    sink = TimedRaySink(name)
    sink.times = []
    pub = WeightPublisher(params, sinks=[sink])
    actor = Actor.remote(name)
    try:
        assert ray.get(actor.node.remote()) != ray.get_runtime_context().get_node_id()
        pub.publish(0)
        pub.drain()
        v, _ = ray.get(actor.wait.remote(0))
        block = []
        for step in range(1, 101):                       # learner blocking, as bench_publish.py
            one.add_(1e-3)
            t0 = time.perf_counter()
            pub.publish(step)
            block.append(time.perf_counter() - t0)
        pub.drain()
        stall["Ray"] = stall_per_delivery(pub, params, reps, 200)
        note(f"{n:g}: stall with Ray: {stall['Ray'] * 1e3:.2f} ms")
        v = pub.stats()["version"]
        e2e, ref_t = [], []
        arrays = {key: rng.standard_normal(t.shape).astype(np.float32) for key, t in params.items()}
        for step in range(reps):
            touch_all(params)
            w = actor.wait.remote(v)
            time.sleep(0.3)                              # the actor is parked in wait()
            t0 = time.time()
            pub.publish(10_000 + step)
            v, t1 = ray.get(w)
            e2e.append(t1 - t0)
            pub.drain()
            t0 = time.time()                             # reference: ray.put + remote ray.get, same dict size
            ref = ray.put(arrays)
            t1 = ray.get(actor.get.remote([ref]))
            ref_t.append(t1 - t0)
            del ref
        st = pub.stats()
    finally:
        pub.close()
        sink.close()
        ray.kill(actor)
    row.update({
        "block med us": statistics.median(block) * 1e6, "block max us": max(block) * 1e6,
        "deliver ms": statistics.median(sink.times) * 1e3,
        "stall ms (C only)": stall["C only"] * 1e3, "stall ms (null Py sink)": stall["null Python sink"] * 1e3,
        "stall ms (Ray)": stall["Ray"] * 1e3,
        "e2e remote ms": statistics.median(e2e) * 1e3, "ray.put+get ms": statistics.median(ref_t) * 1e3,
        "e2e/ray": statistics.median(e2e) / statistics.median(ref_t),
        "delivered": st["delivered"], "dropped": st["dropped"],
    })
    del params, arrays
    return row


if __name__ == "__main__":
    main()
