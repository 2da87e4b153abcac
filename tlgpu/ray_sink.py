"""Weight delivery through Ray's object store (docs/publish.md, "Ray"): actors on any node of a Ray cluster.

    pub = WeightPublisher(model, sinks=[RaySink("policy")])          # in the learner (the Ray driver)

    @ray.remote
    class Actor:
        def run(self):
            sub = RaySubscriber("policy")                             # on any node
            v = 0
            while True:
                r = sub.wait(v, timeout=1.0)                          # (version, step, {name: ndarray}) or None
                if r is not None:
                    v, step, weights = r
                    sub.ack(v)                                        # the learner's stats()["subscribers"]

No transport of our own: `RaySink.deliver()` runs on the publisher's thread (never the learner's), puts the
version's `{name: ndarray}` into the object store with one `ray.put` and posts the object ref to a small
named *registry* actor without waiting for it. The registry holds only the newest ref (latest-only: posting
a newer one drops the older, and Ray frees a version nobody fetched), the subscribers' acks, and answers
`wait()` by long poll (an asyncio.Event per version), so waiting subscribers neither spin nor poll.

Ray objects are immutable, so a subscriber can never read a torn version; a subscriber that got a ref is a
borrower, so the version stays readable after a newer one replaced it in the registry. Arrays come back
zero-copy from the node's object store (read-only; the object stays pinned while they are alive), in the
publisher's dtype (WeightPublisher(dtype=...): float32, float16 or bfloat16). bfloat16 travels as uint16
views: numpy pickles a user dtype's (ml_dtypes') data in-band, which would cost a copy into the pickle under
the GIL on the publisher thread and another out of it at every read.

The registry is an ordinary (non-detached) actor owned by the learner's process: if the learner dies, so do
the registry and its objects, and a subscriber's wait() raises PublisherClosed. A subscriber that dies
(its actor killed, its node lost) is noticed by a liveness probe of its actor and leaves the subscriber
list; nothing else is disturbed. Ray is an optional dependency (`pip install tlgpu[ray]`); importing
`tlgpu` or `tlgpu.publish` does not import it.
"""
import asyncio
import os
import time
import uuid

import numpy as np
from ml_dtypes import bfloat16 as _bf16

from ._C import PublisherClosed                       # not from .publish, which imports this module lazily

try:
    import ray
except ImportError:                                    # optional: pip install tlgpu[ray]
    ray = None

__all__ = ["RaySink", "RaySubscriber", "registry_name"]

_PREFIX = "tlgpu.publish:"
_BF16 = np.dtype(_bf16)
NAMESPACE = "tlgpu"     # registries live here by default, so any driver, task or actor of the cluster finds them


def registry_name(name):
    """The Ray actor name of RaySink(name)'s registry (in the Ray namespace NAMESPACE unless given another)."""
    return _PREFIX + name


def _to_store(arrays):
    """What ray.put stores for a version: the arrays dict itself, or, when some are bfloat16, (the dict with
    those as uint16 views, their names), so that every array goes out of band (zero-copy into the store)."""
    bf = [k for k, a in arrays.items() if a.dtype == _BF16]
    if not bf:
        return arrays
    return {k: a.view(np.uint16) if a.dtype == _BF16 else a for k, a in arrays.items()}, bf


def _from_store(obj):
    """_to_store's inverse on the reading side: zero-copy bfloat16 views of the store's uint16 arrays."""
    if not isinstance(obj, tuple):
        return obj
    arrays, bf = obj
    for k in bf:
        arrays[k] = arrays[k].view(_BF16)
    return arrays


def _check_name(who, name):
    if ray is None:
        raise ImportError(f"{who} needs Ray, an optional dependency: pip install tlgpu[ray]")
    if not isinstance(name, str):
        raise TypeError(f"{who}: name must be a str, got {type(name).__name__}")
    if not name or len(name) > 200:
        raise ValueError(f"{who}: name must be 1-200 characters, got {len(name)}")


class _Registry:
    """The named actor behind one RaySink: the newest version's object ref, the subscribers and their acks.
    Async (one event loop, no locks needed); every method is short, wait() is a long poll."""

    PROBE_S = 0.2          # how long subscribers() waits for liveness probes of subscriber actors

    def __init__(self, name):
        self.name = name
        self.version, self.step, self.refs = 0, 0, None   # refs: [ObjectRef] (a list: Ray must not resolve it)
        self.posted = 0
        self.closed = False
        self.event = asyncio.Event()                       # set (and replaced) when a version arrives or at close
        self.subs = {}                                     # id -> dict(info), "handle", "probe"

    def ready(self):
        return True

    def post(self, version, step, refs):
        """The sink's only call per delivery (not awaited by the sink). Versions only go up: Ray keeps a
        caller's order only for synchronous actors, so on this async one an older version may arrive after a
        newer one and is then ignored; `posted` counts the versions that were the newest on arrival."""
        if self.closed or version <= self.version:
            return
        self.version, self.step, self.refs = version, step, refs   # the older ref is dropped: latest-only
        self.posted += 1
        self._wake()

    def _wake(self):
        ev, self.event = self.event, asyncio.Event()
        ev.set()

    def close(self):
        self.closed = True
        self._wake()

    async def wait(self, sid, newer_than, timeout):
        """(version, step, [ref]) for the newest version when it is newer than newer_than; None on timeout;
        "closed" once the sink closed with nothing newer."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        self._seen(sid)
        while self.version <= newer_than:
            if self.closed:
                return "closed"
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            try:
                await asyncio.wait_for(self.event.wait(), left)
            except asyncio.TimeoutError:
                return None
        self._seen(sid)
        return self.version, self.step, self.refs

    def latest(self, sid):
        self._seen(sid)
        return None if self.refs is None else (self.version, self.step, self.refs)

    def _seen(self, sid):
        s = self.subs.get(sid)
        if s is not None:
            s["last_seen"] = time.time()

    def register(self, sid, info, handle):
        self.subs[sid] = dict(info, acked=0, alive=True, last_seen=time.time(), handle=handle, probe=None)

    def ack(self, sid, version):
        s = self.subs.get(sid)
        if s is not None:
            s["acked"] = max(s["acked"], int(version))
            s["last_seen"] = time.time()

    def unregister(self, sid):
        self.subs.pop(sid, None)

    async def subscribers(self, include_dead=False):
        """One dict per subscriber. A subscriber inside an actor is probed (its built-in __ray_ready__ task):
        a probe that fails marks it dead; one still pending (the actor is busy) leaves it alive."""
        probes = []
        for s in self.subs.values():
            if s["alive"] and s["handle"] is not None:
                if s["probe"] is None:
                    s["probe"] = asyncio.ensure_future(_alive(s["handle"].__ray_ready__.remote()))
                probes.append(s)
        if probes:
            await asyncio.wait([s["probe"] for s in probes], timeout=self.PROBE_S)
        for s in probes:
            if s["probe"].done():
                if s["probe"].result():
                    s["probe"] = None                       # alive: probe again next time
                else:                                       # RayActorError, node lost, ...
                    s["alive"], s["handle"], s["probe"] = False, None, None
        now = time.time()
        return [{k: v for k, v in dict(s, last_seen_s=now - s["last_seen"]).items()
                 if k not in ("handle", "probe", "last_seen")}
                for s in self.subs.values() if include_dead or s["alive"]]

    def info(self):
        return {"name": self.name, "version": self.version, "step": self.step, "posted": self.posted,
                "closed": self.closed, "subscribers": len(self.subs), "has_ref": self.refs is not None}


async def _alive(ref):
    try:
        await ref
        return True
    except Exception:
        return False


class RaySink:
    """RaySink(name, namespace="tlgpu"): a WeightPublisher sink that delivers each version through Ray's
    object store to RaySubscriber(name) on any node of the cluster.

    Creating it starts the registry actor (named registry_name(name), on this node, num_cpus=0), so Ray must
    be initialised here (ray.init(...) first; otherwise Ray starts a local instance). A name already in use
    by a live RaySink raises ValueError. Pass it to WeightPublisher(params, sinks=[RaySink(name), ...]).

    deliver(version, step, arrays) is called by the publisher thread: one ray.put of the arrays dict and a
    registry call that is not waited for. subscribers() lists the live subscribers with their acks
    (WeightPublisher.stats()["subscribers"] includes them). close() (also when the sink is garbage
    collected, e.g. after the publisher closed) stops the registry: subscribers' wait() raises
    PublisherClosed once they hold the last version.
    """

    def __init__(self, name, namespace=NAMESPACE):
        _check_name("RaySink", name)
        if not ray.is_initialized():
            ray.init()
        self.name, self.namespace = name, namespace
        self.delivered = self.skipped = 0                # skipped: versions that came after close() or ray.shutdown()
        self._subs_cache = []
        self._closed = False
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        cls = ray.remote(_Registry)
        try:
            self._registry = cls.options(
                name=registry_name(name), namespace=namespace, num_cpus=0, max_concurrency=1000,
                max_restarts=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
                    ray.get_runtime_context().get_node_id(), soft=True)).remote(name)
        except ValueError as e:
            raise ValueError(f"RaySink: the name {name!r} is in use by another live RaySink ({e})") from None
        ray.get(self._registry.ready.remote())

    def deliver(self, version, step, arrays):
        """Publisher thread, GIL held: keep it short. The registry gets the ref inside a list, so Ray passes
        the ref rather than the value; the local ref dies on return, the registry's is the only one."""
        if self._closed or not ray.is_initialized():    # after ray.shutdown(), ray.put would start a new Ray
            self.skipped += 1
            return
        ref = ray.put(_to_store(arrays))
        self._registry.post.remote(version, step, [ref])
        self.delivered += 1

    def subscribers(self, include_dead=False, timeout=5.0):
        """[{"sink": "ray", "id", "node_id", "pid", "actor_id", "acked", "alive", "last_seen_s"}, ...] for the
        live subscribers (all, with include_dead=True). After close(), the last list seen."""
        if self._closed or not ray.is_initialized():
            return list(self._subs_cache)
        try:
            subs = ray.get(self._registry.subscribers.remote(include_dead), timeout=timeout)
        except Exception:
            return list(self._subs_cache)
        for s in subs:
            s["sink"] = "ray"
        if not include_dead:
            self._subs_cache = subs
        return subs

    def info(self, timeout=5.0):
        """The registry's view: version, step, posted, closed, subscribers, has_ref."""
        return ray.get(self._registry.info.remote(), timeout=timeout)

    def close(self):
        if self._closed:
            return
        self._closed = True
        try:
            ray.get(self._registry.close.remote(), timeout=5.0)
        except Exception:
            pass
        try:
            ray.kill(self._registry, no_restart=True)
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            if not self._closed and ray.is_initialized():
                self.close()
        except Exception:
            pass

    def __repr__(self):
        return f"RaySink({self.name!r})"


class RaySubscriber:
    """RaySubscriber(name, namespace="tlgpu", timeout=0.0): reads the versions RaySink(name) delivers, in any Ray
    task or actor on any node (or the driver).

    wait(newer_than, timeout=None) -> (version, step, {name: ndarray}) for the newest version when it is
    newer than newer_than, or None on timeout (a long poll: no spinning); PublisherClosed once no newer
    version can come (the sink closed, or the learner died). latest() -> the newest version or None.
    ack(version) tells the learner which version this subscriber acts with (not waited for). close() leaves
    the subscriber list; also a context manager. The arrays are read-only views of the object in this node's
    object store (never torn: Ray objects are immutable); copy them to modify them.
    The registry is looked up for up to `timeout` seconds (the learner may not have started it yet);
    ValueError if it is not there.
    """

    def __init__(self, name, namespace=NAMESPACE, timeout=0.0):
        _check_name("RaySubscriber", name)
        self.name, self._closed = name, True
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._registry = ray.get_actor(registry_name(name), namespace=namespace)
                break
            except ValueError:
                if time.monotonic() >= deadline:
                    raise ValueError(f"RaySubscriber: no RaySink named {name!r} in the Ray namespace "
                                     f"{namespace!r}") from None
                time.sleep(0.05)
        ctx = ray.get_runtime_context()
        actor_id = ctx.get_actor_id()
        handle = ctx.current_actor if actor_id is not None else None   # probed by the registry for liveness
        self.id = uuid.uuid4().hex
        info = {"id": self.id, "node_id": ctx.get_node_id(), "pid": os.getpid(), "actor_id": actor_id}
        self._closed = False
        self._call(self._registry.register.remote(self.id, info, handle), None)

    def _call(self, ref, timeout):
        try:
            return ray.get(ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise
        except (ray.exceptions.RayActorError, ray.exceptions.OwnerDiedError, ray.exceptions.ObjectLostError) as e:
            raise PublisherClosed(f"RaySubscriber({self.name!r}): the learner's sink is gone ({type(e).__name__})") \
                from None

    def _fetch(self, r):
        if r is None:
            return None
        if isinstance(r, str):
            raise PublisherClosed(f"RaySubscriber({self.name!r}): the sink closed")
        version, step, refs = r
        return version, step, _from_store(self._call(refs[0], None))

    def wait(self, newer_than, timeout=None):
        if self._closed:
            raise PublisherClosed(f"RaySubscriber({self.name!r}) is closed")
        # the registry answers by its own deadline; the margin only covers the call itself
        r = self._call(self._registry.wait.remote(self.id, int(newer_than), timeout),
                       None if timeout is None else timeout + 60.0)
        return self._fetch(r)

    def latest(self):
        if self._closed:
            raise PublisherClosed(f"RaySubscriber({self.name!r}) is closed")
        return self._fetch(self._call(self._registry.latest.remote(self.id), None))

    def ack(self, version):
        if not self._closed:
            self._registry.ack.remote(self.id, int(version))

    def close(self):
        if self._closed:
            return
        self._closed = True
        try:
            ray.get(self._registry.unregister.remote(self.id), timeout=5.0)
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return f"<RaySubscriber {self.name!r} {self.id[:8]}>"
