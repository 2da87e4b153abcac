"""Weight publisher sinks (docs/publish.md, "Sinks"): a Python sink receives every delivered version whole
(numpy on random data, incremental and skipped publishes), next to shared memory named by name= or
ShmSink(...); its exception reaches the learner; stats() lists each subscriber with the version it acked."""
import os
import threading

import numpy as np
import pytest

import tlgpu
from tlgpu.publish import ShmSink, Subscriber, WeightPublisher


def shm_name(tag):
    return f"tlgpu_test_{tag}_{os.getpid()}"


class Recorder:
    """A trivial Python sink: keeps what it is given, and on which thread."""

    def __init__(self):
        self.got, self.threads = [], set()

    def deliver(self, version, step, arrays):
        self.threads.add(threading.get_ident())
        self.got.append((version, step, arrays))


def check_equal(got, want):
    assert set(got) == set(want)
    for k in want:
        assert got[k].shape == want[k].shape and got[k].dtype == np.float32, k
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_python_sink_receives_every_delivered_version(rng):
    shapes = {"w1": (17, 9), "b1": (9,), "w2": (9, 3), "empty": (0, 4)}
    arrs = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    params = {k: tlgpu.tensor(v) for k, v in arrs.items()}
    rec = Recorder()
    want = []
    with WeightPublisher(params, threshold=1e-3, sinks=[rec]) as pub:
        for step in range(6):
            if step == 3:                                   # a change below the threshold: skipped
                params["b1"].add_(1e-4)
                arrs["b1"] = arrs["b1"] + np.float32(1e-4)
            elif step > 0:                                  # incremental: one tensor changes
                k = ["w1", "b1", "w2"][step % 3]
                arrs[k] = rng.standard_normal(shapes[k]).astype(np.float32)
                params[k].copy_(tlgpu.tensor(arrs[k]))
            pub.publish(10 * step - 5)
            assert pub.drain(30)
            if step != 3:
                want.append((step + 1, 10 * step - 5, {k: v.copy() for k, v in arrs.items()}))
        s = pub.stats()
    assert s["skipped"] == 1 and s["delivered"] == len(want) == len(rec.got)
    for (v, st, a), (gv, gst, ga) in zip(want, rec.got):  # the skipped drift of b1 is overwritten at step 4
        assert (gv, gst) == (v, st)
        check_equal(ga, a)
    assert rec.threads and threading.get_ident() not in rec.threads   # the publisher thread called it


def test_sinks_side_by_side_and_subscriber_stats(rng):
    arrs = {"a": rng.standard_normal(1000).astype(np.float32), "b": rng.standard_normal(33).astype(np.float32)}
    params = {k: tlgpu.tensor(v) for k, v in arrs.items()}
    rec1, rec2 = Recorder(), Recorder()
    n1, n2 = shm_name("sink1"), shm_name("sink2")
    with WeightPublisher(params, name=n1, sinks=[rec1, ShmSink(n2), rec2]) as pub:
        assert pub.stats()["subscribers"] == []
        subs = [Subscriber(n1), Subscriber(n2), Subscriber(n2)]
        pub.publish(7)
        for i, sub in enumerate(subs):
            v, step, got = sub.wait(0, timeout=30)
            assert (v, step) == (1, 7)
            check_equal(got, arrs)
            sub.ack(v + i)                                  # distinct versions: which subscriber is which
        assert pub.drain(30)
        for rec in (rec1, rec2):
            assert [(v, st) for v, st, _ in rec.got] == [(1, 7)]
            check_equal(rec.got[0][2], arrs)
        s = pub.stats()
        entries = sorted((d["acked"], d["pid"], d["sink"]) for d in s["subscribers"])
        assert entries == [(1, os.getpid(), "shm"), (2, os.getpid(), "shm"), (3, os.getpid(), "shm")]
        assert sorted(s["acked"]) == [1, 2, 3]
        subs[1].close()
        assert sorted(d["acked"] for d in pub.stats()["subscribers"]) == [1, 3]
        for sub in (subs[0], subs[2]):
            sub.close()
    assert not os.path.exists(f"/dev/shm/{n1}") and not os.path.exists(f"/dev/shm/{n2}")


class Boom(Exception):
    pass


class Failing:
    def __init__(self, fail_at):
        self.fail_at, self.seen = fail_at, []

    def deliver(self, version, step, arrays):
        self.seen.append(version)
        if version == self.fail_at:
            raise Boom(f"sink failed at version {version}")


class SlowSink:
    """A sink that takes its time: the mailbox (always first) has made the version visible meanwhile."""

    def __init__(self):
        self.entered = threading.Event()

    def deliver(self, version, step, arrays):
        self.entered.set()
        threading.Event().wait(0.3)


def test_stats_count_a_version_before_any_reader_sees_it(rng):
    # wait() returns as soon as the mailbox has the version; the slow sink is still delivering it. The
    # counters must already count it (CI once read bytes_moved == 0 here, right after wait()).
    arrs = {"w": rng.standard_normal((33, 7)).astype(np.float32), "b": rng.standard_normal(65).astype(np.float32)}
    params = {k: tlgpu.tensor(v) for k, v in arrs.items()}
    slow = SlowSink()
    with WeightPublisher(params, sinks=[slow]) as pub:
        pub.publish(3)
        version, step, got = pub.wait(0, timeout=30)
        s = pub.stats()
        assert slow.entered.wait(30)
        assert (version, step) == (1, 3) and (s["version"], s["step"], s["delivered"]) == (1, 3, 1)
        assert s["bytes_moved"] == sum(a.nbytes for a in arrs.values())
        check_equal(got, arrs)


def test_python_sink_exception_is_raised_by_the_learner(rng):
    params = {"w": tlgpu.tensor(rng.standard_normal(64).astype(np.float32))}
    sink = Failing(fail_at=2)
    pub = WeightPublisher(params, sinks=[sink])
    pub.publish(0)
    assert pub.drain(30)
    params["w"].add_(1.0)
    pub.publish(1)
    with pytest.raises(Boom, match="version 2"):            # the sink's own exception, raised once
        pub.drain(30)
    with pytest.raises(RuntimeError, match="stopped after an error"):
        pub.publish(2)
    pub.close()
    assert sink.seen == [1, 2]

    sink = Failing(fail_at=1)                               # not seen before close(): close() raises it
    pub = WeightPublisher(params, sinks=[sink])
    pub.publish(0)
    with pytest.raises(Boom):
        pub.close()
    assert pub.closed


def test_bad_sinks_are_refused():
    params = {"w": tlgpu.zeros(4)}
    with pytest.raises(TypeError, match="deliver"):
        WeightPublisher(params, sinks=[object()])
    with pytest.raises(TypeError):
        WeightPublisher(params, sinks=3)
    with pytest.raises(ValueError):
        WeightPublisher(params, sinks=[ShmSink("a/b")])
    with pytest.raises(TypeError):
        ShmSink(5)
    name = shm_name("dupsink")
    with WeightPublisher(params, name=name):
        with pytest.raises(FileExistsError, match=str(os.getpid())):
            WeightPublisher(params, sinks=[Recorder(), ShmSink(name)])   # the Recorder made first is let go
    assert not os.path.exists(f"/dev/shm/{name}")
