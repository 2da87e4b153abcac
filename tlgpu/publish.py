"""Asynchronous weight publishing for RL learners (docs/publish.md).

    pub = tlgpu.publish.WeightPublisher(model_params, threshold=0.0, name="policy")
    for step in range(...):
        train_step()
        pub.publish(step)              # returns at once: a device-side snapshot plus a mailbox post
    pub.close()

`publish()` enqueues a device-to-device snapshot of every parameter on the compute queue and hands it to a
background C thread (latest-only: a snapshot not yet taken is replaced and counted as dropped). The thread
compares the snapshot with the last delivered version on the device, skips it when nothing changed by
more than `threshold`, moves only the changed tensors (`incremental=True`) into pinned host staging and
then makes the version visible to `latest()` / `wait()` and, with `name=...`, to `Subscriber(name)` in
other processes through POSIX shared memory. With `dtype=tlgpu.bfloat16` (or float16) the thread converts the
moved tensors on the device before the copy, so everything past the device holds half the bytes; the compare
still decides on the float32 parameters.
"""
import weakref

from ._C import Publisher as _Publisher, PublisherClosed, Subscriber as _Subscriber

__all__ = ["WeightPublisher", "Subscriber", "PublisherClosed", "ShmSink", "RaySink", "RaySubscriber"]


def __getattr__(name):
    """RaySink / RaySubscriber come from .ray_sink on first use, so importing tlgpu never imports ray."""
    if name in ("RaySink", "RaySubscriber"):
        from . import ray_sink
        return getattr(ray_sink, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ShmSink:
    """ShmSink(name): a sink for WeightPublisher(..., sinks=[...]) that delivers into POSIX shared memory
    /dev/shm/<name>, for Subscriber(name) in other processes (name=... is the shortcut for one).

    Any other object with a ``deliver(version, step, arrays)`` method is a Python sink: the publisher thread
    calls it, with the GIL taken, after each delivery, with arrays a fresh {name: ndarray} it may keep.
    """

    def __init__(self, name):
        if not isinstance(name, str):
            raise TypeError(f"ShmSink: name must be a str, got {type(name).__name__}")
        self.name = name

    @property
    def _tlgpu_shm_name(self):
        return self.name

    def __repr__(self):
        return f"ShmSink({self.name!r})"


def _weak(obj):
    try:
        return weakref.ref(obj)
    except TypeError:                                 # no __weakref__ slot: held strongly
        return lambda: obj


class WeightPublisher(_Publisher):
    """WeightPublisher(params, threshold=0.0, incremental=True, force_every=None, name=None, sinks=None,
    dtype=None)

    params: a dict name -> Tensor (float32, float16 or bfloat16; contiguous), or an object whose
        ``named_parameters()`` yields (name, Tensor) pairs (a Module). The tensors are fixed at construction:
        publishing after one of them changed shape, storage or dtype raises ValueError.
    threshold: a publish is skipped when the largest absolute change of any element since the last
        delivered version is <= threshold. A tensor counts as *changed* when its largest absolute change
        is > threshold (so with threshold=0, any nonzero change); NaN always counts as changed.
    incremental: move only the changed tensors to the host (otherwise every tensor, every delivery).
    force_every: K >= 1: a snapshot taken K or more publishes after the last delivered one is delivered
        whatever the change (moving every tensor with any nonzero change, so it is exact).
    name: also deliver into POSIX shared memory under this name for ``Subscriber(name)``. A dead
        learner's leftover segment of that name is reclaimed; a live one's raises FileExistsError.
    sinks: more destinations for each delivered version, in order after the in-process one: ShmSink(name),
        or any object with deliver(version, step, arrays) (called on the publisher thread with the GIL;
        an exception it raises is raised by the learner's next call and stops the publisher).
    dtype: the dtype delivered to every reader: tlgpu.float32, tlgpu.float16 or tlgpu.bfloat16 (numpy
        float16 / ml_dtypes.bfloat16 arrays), converted on the device with round to nearest even (inf and
        NaN kept, as numpy / ml_dtypes). None: the parameters' own (float32 where they mix dtypes).
        threshold and "changed" are decided on the parameters' values (float32), not the rounded ones.

    Methods: publish(step), latest(), wait(newer_than, timeout=None), drain(timeout=None), stats(),
    close(cancel=False); also a context manager (leaving on an exception cancels the pending snapshot).
    A version is the 1-based number of the publish() call that produced it; versions only go up.
    An error on the background thread is raised by the next publish()/latest()/wait()/drain()/close().
    """

    def __init__(self, params, threshold=0.0, incremental=True, force_every=None, name=None, sinks=None,
                 dtype=None):
        # everything happens in the C type's __new__; this signature is for help() and IDEs.
        # Python sinks that list subscribers (RaySink) are held weakly: the C core owns the sinks until close().
        self._sub_sinks = [_weak(s) for s in (sinks or ()) if callable(getattr(s, "subscribers", None))]

    def stats(self):
        """The C core's stats, with the subscribers of Python sinks that have subscribers() appended."""
        s = super().stats()
        for ref in getattr(self, "_sub_sinks", ()):
            sink = ref()
            if sink is not None:
                extra = sink.subscribers()
                s["subscribers"] += extra
                s["acked"] += [e["acked"] for e in extra]
        return s

    def __repr__(self):
        state = "closed" if self.closed else "open"
        return f"<WeightPublisher {len(self.names)} tensors, {self.dtype}, {state}>"


class Subscriber(_Subscriber):
    """Subscriber(name): reads the versions a WeightPublisher(name=...) writes into shared memory.

    latest() -> (version, step, {name: ndarray}) or None; wait(newer_than, timeout=None) -> the first
    version newer than newer_than, or None on timeout; it raises PublisherClosed once no newer version can
    come (the publisher closed, or its process died: checked at least every 100 ms). ack(version) tells the
    publisher which version this process holds (its stats()["acked"]); close() releases the ack slot.
    Never returns a torn version: reads are checked with a seqlock and retried. A segment that is not a
    sound tlgpu segment (any field out of place against its real size) raises ValueError.
    The arrays have the publisher's dtype (``dtype``: float32, float16 or ml_dtypes.bfloat16), which the
    segment records.
    """

    def __init__(self, name):
        pass

    def __repr__(self):
        return f"<Subscriber {len(self.names)} tensors>"
