"""The op fuzz, part two (see test_fuzz.py): indexing, creation, matmul, nn and inference ops, gradients."""
import math
import operator

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tlgpu
import tlgpu.nn.functional as F
from fuzzlib import (  # noqa: F401  (outcome_summary: the autouse fixture that prints the outcomes)
    FUZZ, INF, NAN, OUTCOMES, Refused, arrays, axis_arg, broadcast_partner, dims, float_arrays,
    float_only, np_logsumexp, reduced_count, run_case, seeded,
    outcome_summary,
)


# ---- indexing (ops_index.c) ----

EMPTY_TAKE = ("an out-of-range index whose result is empty (numpy's take reads nothing and returns it; "
              "tlgpu checks every index, as numpy's t[[5]] does)")

@st.composite
def basic_key(draw, shape):
    items = []
    for _ in range(draw(st.integers(0, len(shape) + 1))):
        kind = draw(st.sampled_from(["int", "slice", "slice", "none", "ellipsis"]))
        size = shape[len([i for i in items if i is not None and i is not Ellipsis])] if len(items) < len(shape) else 3
        if kind == "int":
            items.append(draw(st.integers(-size - 2, size + 1)))
        elif kind == "slice":
            bound = st.one_of(st.none(), st.integers(-size - 3, size + 3))
            step = draw(st.one_of(st.none(), st.sampled_from([1, 2, -1, -3, 0])))
            items.append(slice(draw(bound), draw(bound), step))
        else:
            items.append(None if kind == "none" else Ellipsis)
    return tuple(items) if draw(st.booleans()) or len(items) != 1 else items[0]


@FUZZ
@given(st.data())
def test_fuzz_getitem(data):
    a = data.draw(arrays(int_share=3))
    if data.draw(st.booleans()):
        key = data.draw(basic_key(a.shape))
        what = f"[{key!r}]"
    else:
        size = a.shape[0] if a.ndim else 2
        key = data.draw(st.lists(st.integers(-size - 2, size + 1) | st.sampled_from([2**40, -2**40]), max_size=4))
        if data.draw(st.booleans()) and all(abs(k) < 2**31 for k in key):
            key = tlgpu.tensor(np.array(key, np.int32))
        what = f"[{key!r}]"

    def ref():
        k = key.numpy() if isinstance(key, tlgpu.Tensor) else key
        if isinstance(k, tuple) and k.count(Ellipsis) > 1:
            a[k]                                      # numpy's error for two ellipses
        if isinstance(k, list) and not k:
            return a[np.array([], np.int64)]
        return a[k]
    run_case("getitem", f"{a.dtype}{a.shape}{what}", lambda: tlgpu.tensor(a)[key], ref)


@FUZZ
@given(st.data())
def test_fuzz_setitem(data):
    a = data.draw(arrays(int_share=3))
    key = data.draw(basic_key(a.shape))
    kind = data.draw(st.sampled_from(["scalar", "scalar", "array", "bigint"]))
    if kind == "scalar":
        value = data.draw(st.sampled_from([1.5, -2, 0, NAN, INF]))
    elif kind == "bigint":
        value = data.draw(st.sampled_from([2**31, -2**31 - 1, 2**31 - 1]))
    else:
        try:
            vshape = np.empty(a.shape)[key].shape
        except Exception:
            vshape = (2,)
        value = data.draw(float_arrays(broadcast_partner(data.draw, vshape), specials=False)).astype(a.dtype)

    def ref():
        b = a.copy()
        if a.dtype == np.int32 and isinstance(value, float) and not math.isfinite(value):
            b[key]                                   # an index error outranks the value error
            raise Refused("__setitem__: NaN/inf into int32 (numpy writes INT32_MIN)")
        b[key] = value
        return b

    def run():
        t = tlgpu.tensor(a)
        t[key] = tlgpu.tensor(value) if isinstance(value, np.ndarray) else value
        return t
    run_case("setitem", f"{a.dtype}{a.shape}[{key!r}] = {type(value).__name__}{getattr(value, 'shape', value)}",
             run, ref)


@FUZZ
@given(st.data())
def test_fuzz_index_select_gather(data):
    a = data.draw(arrays(int_share=4))
    d = data.draw(st.integers(-a.ndim - 1, a.ndim))
    size = a.shape[d] if -a.ndim <= d < a.ndim else 2
    if data.draw(st.booleans()):
        idx = data.draw(st.lists(st.integers(-size - 2, size + 1), max_size=5))

        def ref():
            if a.ndim == 0:
                raise Refused("index_select on a 0-d tensor (numpy's take treats it as 1-D)")
            r = np.take(a, np.array(idx, np.int64), axis=d, mode="raise")
            if r.size == 0 and any(not -size <= i < size for i in idx):
                raise Refused(EMPTY_TAKE)
            return r
        run_case("index_select", f"{a.dtype}{a.shape}.index_select({d}, {idx})",
                 lambda: tlgpu.tensor(a).index_select(d, tlgpu.tensor(np.array(idx, np.int32))), ref)
        return
    ishape = tuple(data.draw(st.sampled_from([1, n, 2])) if k != d % max(a.ndim, 1) else data.draw(st.integers(0, 3))
                   for k, n in enumerate(a.shape))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    idx = rng.integers(-size - 1, size + 1, size=ishape).astype(np.int32)

    def ref():
        np.take(a, idx.reshape(-1)[:0], axis=d)      # numpy's AxisError for a bad dim
        if idx.size and np.prod(np.broadcast_shapes(a.shape[:d % a.ndim] + (1,) + a.shape[d % a.ndim + 1:],
                                                    idx.shape)) == 0:
            bad = (idx < -size) | (idx >= size)
            if bad.any():
                raise Refused(EMPTY_TAKE)
        return np.take_along_axis(a, idx.astype(np.int64), axis=d)
    run_case("gather", f"{a.dtype}{a.shape}.gather({d}, idx{idx.shape})",
             lambda: tlgpu.tensor(a).gather(d, tlgpu.tensor(idx)), ref)


# ---- creation (ops_create.c) ----

@FUZZ
@given(st.data())
def test_fuzz_creation(data):
    kind = data.draw(st.sampled_from(["tensor", "full", "arange", "zeros"]))
    dtype = data.draw(st.sampled_from([None, tlgpu.float32, tlgpu.int32]))
    if kind == "tensor":
        vals = data.draw(st.lists(st.one_of(st.integers(-2**33, 2**33), st.sampled_from([NAN, INF, 1.5, -2.5, 2**31])),
                                  max_size=4))
        all_int = all(isinstance(v, int) for v in vals)

        def ref():
            want = dtype or (np.int32 if all_int and vals else np.float32)
            if want == np.int32:
                f = np.array(vals, np.float64)
                if np.isnan(f).any():
                    raise ValueError("NaN to int32")
                if (np.abs(f) >= 2**31).any() and not ((f >= -2**31) & (f < 2**31)).all():
                    raise OverflowError("out of int32 range")
            return np.array(vals, np.float64).astype(want)
        run_case("creation", f"tensor({vals}, dtype={dtype})", lambda: tlgpu.tensor(vals, dtype=dtype), ref)
    elif kind == "full":
        shape = data.draw(dims(3))
        v = data.draw(st.sampled_from([3, -7, 2.5, NAN, INF, 2**31, -2**31, 2**31 - 1, 2**40]))

        def ref():
            want = dtype or (np.int32 if isinstance(v, int) else np.float32)
            if want == np.int32:
                if isinstance(v, float) and math.isnan(v):
                    raise ValueError("NaN to int32")
                if not -2**31 <= v < 2**31:
                    raise OverflowError("out of int32 range")
            return np.full(shape, v, np.float64).astype(want)
        run_case("creation", f"full({shape}, {v}, dtype={dtype})", lambda: tlgpu.full(shape, v, dtype=dtype), ref)
    elif kind == "arange":
        if data.draw(st.integers(0, 3)) == 0:      # near the int32 limits, a few elements long
            edge = data.draw(st.sampled_from([2**31, -2**31]))
            args = [edge + data.draw(st.integers(-4, 0)), edge + data.draw(st.integers(-1, 2))]
            args = args if edge > 0 else [args[1], args[0], -1]
        else:
            args = data.draw(st.lists(st.one_of(st.integers(-10, 10), st.sampled_from([0.5, -1.5, 2.0, NAN, INF])),
                                      min_size=1, max_size=3))
        all_int = all(isinstance(v, int) for v in args)

        def ref():
            r = np.arange(*args, dtype=np.float64)
            if not all(math.isfinite(v) for v in args):
                raise Refused("arange: a non-finite bound or step (numpy returns a length-0 or -1 range)")
            want = dtype or (np.int32 if all_int else np.float32)
            start, step = (args[0] if len(args) > 1 else 0), (args[2] if len(args) > 2 else 1)
            if want == np.int32 and (start != int(start) or step != int(step)):
                raise ValueError("arange: int32 needs integer start and step (numpy's float steps truncate)")
            if len(r) and want == np.int32 and ((r < -2**31) | (r >= 2**31)).any():
                raise OverflowError("out of int32 range")
            return r.astype(want)
        run_case("creation", f"arange{tuple(args)} dtype={dtype}", lambda: tlgpu.arange(*args, dtype=dtype), ref)
    else:
        shape = tuple(data.draw(st.lists(st.integers(-2, 4), max_size=4)))
        run_case("creation", f"zeros({shape}, dtype={dtype})", lambda: tlgpu.zeros(*shape, dtype=dtype),
                 lambda: np.zeros(shape, dtype or np.float32))


# ---- matmul (ops_matmul.c) ----

@FUZZ
@given(st.data())
def test_fuzz_matmul(data):
    m, k, n, k2 = (data.draw(st.sampled_from([0, 1, 2, 3, 9])) for _ in range(4))
    k2 = k if data.draw(st.integers(0, 4)) else k2
    sa = data.draw(st.sampled_from([(k,), (m, k), (2, m, k), (1, m, k), ()]))
    sb = data.draw(st.sampled_from([(k2,), (k2, n), (2, k2, n), (3, k2, n), ()]))
    a = data.draw(float_arrays(sa, specials=data.draw(st.integers(0, 4)) == 0, scale=1.0, huge=False))
    b = data.draw(arrays(sb, int_share=10, huge=False))

    def ref():
        if a.ndim == 0 or b.ndim == 0:
            np.matmul(a, b)                          # numpy's own error
        r = np.matmul(a.astype(np.float64), b.astype(np.float64))
        float_only("matmul", b)
        return np.asarray(r, np.float32)
    run_case("matmul", f"{sa} @ {b.dtype}{sb}", lambda: tlgpu.tensor(a) @ tlgpu.tensor(b), ref, 1e-4,
             1e-5 * max(k, 1))


# ---- nn and inference ops (ops_nn.c, ops_llm.c) ----

@FUZZ
@given(st.data())
def test_fuzz_cross_entropy(data):
    n, c = data.draw(st.integers(0, 5)), data.draw(st.integers(0, 5))
    x = data.draw(float_arrays((n, c), specials=data.draw(st.integers(0, 5)) == 0, scale=2.0, huge=False))
    t = np.array(data.draw(st.lists(st.integers(-2, c + 1) | st.just(-100), min_size=n, max_size=n)), np.int32)
    red = data.draw(st.sampled_from(["mean", "sum", "none", "avg"]))
    if data.draw(st.integers(0, 5)) == 0:
        t = t[: max(n - 1, 0)] if n else np.zeros(1, np.int32)   # wrong length

    def ref():
        if red not in ("mean", "sum", "none") or t.shape != (n,):
            raise ValueError("bad reduction or targets")
        if c == 0 and n > 0:
            raise ValueError("no classes")
        xd = x.astype(np.float64)
        lse = np.log(np.exp(xd - xd.max(1, keepdims=True)).sum(1)) + xd.max(1) if c else np.zeros(n)
        keep = t != -100
        ok = keep & (t >= 0) & (t < c)
        pick = np.where(ok, xd[np.arange(n), np.clip(t, 0, max(c - 1, 0))] if c else 0.0, 0.0)
        loss = np.where(keep, np.where(ok, lse - pick, np.nan), 0.0)   # DESIGN: a bad target is NaN
        w = np.where(keep, np.where(ok, 1.0, np.nan), 0.0)
        if red == "none":
            return loss.astype(np.float32)
        s = loss.sum()
        return np.float32(s if red == "sum" else s / w.sum())
    run_case("cross_entropy", f"({n}, {c}) targets {t.tolist()} {red}",
             lambda: F.cross_entropy(tlgpu.tensor(x), tlgpu.tensor(t), reduction=red), ref, 1e-4, 1e-5)


@FUZZ
@given(st.data())
def test_fuzz_inference_ops(data):
    op = data.draw(st.sampled_from(["rms_norm", "softmax_rows", "silu_mul", "get_rows", "get_rows_dev"]))
    # no huge finite values: rms_norm's float32 sum of squares overflows at |x| > 1.8e19 (as torch's does)
    a = data.draw(arrays(data.draw(dims(3)), int_share=8, huge=False)) if op != "get_rows_dev" else None
    if op == "rms_norm":
        wshape = data.draw(st.sampled_from([None, a.shape[-1:] if a.ndim else (1,), (7,)]))
        w = None if wshape is None else data.draw(float_arrays(wshape, specials=False))

        def ref():
            if a.ndim == 0 or (w is not None and w.shape != a.shape[-1:]):
                raise ValueError("bad shapes")
            float_only("rms_norm", a)
            x = a.astype(np.float64)
            r = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) if x.size else x
            return (r if w is None else r * w).astype(np.float32)
        run_case("llm", f"rms_norm({a.dtype}{a.shape}, w={wshape})",
                 lambda: tlgpu.rms_norm(tlgpu.tensor(a), None if w is None else tlgpu.tensor(w)), ref, 1e-4, 1e-5)
    elif op == "softmax_rows":
        def ref():
            if a.ndim == 0:
                raise ValueError("needs a dim")
            float_only("softmax_rows", a)
            x = a.astype(np.float64)
            m = x.max(-1, keepdims=True) if x.size else 0.0
            e = np.exp(x - m)
            return (e / e.sum(-1, keepdims=True)).astype(np.float32)
        run_case("llm", f"softmax_rows({a.dtype}{a.shape})", lambda: tlgpu.softmax_rows(tlgpu.tensor(a)), ref, 1e-4,
                 1e-6)
    elif op == "silu_mul":
        b = data.draw(float_arrays(broadcast_partner(data.draw, a.shape)))

        def ref():
            if a.shape != b.shape:
                raise ValueError("silu_mul needs equal shapes")
            float_only("silu_mul", a)
            # in float32, as the kernel: silu(-89) underflows to -0 there, and -0 * inf is NaN, not -inf
            return (a / (np.float32(1) + np.exp(-a)) * b).astype(np.float32)
        run_case("llm", f"silu_mul({a.dtype}{a.shape}, {b.shape})",
                 lambda: tlgpu.silu_mul(tlgpu.tensor(a), tlgpu.tensor(b)), ref, 2e-4, 1e-5)
    else:
        v, dcols = data.draw(st.integers(0, 4)), data.draw(st.integers(0, 3))
        table = data.draw(float_arrays((v, dcols), specials=False))
        ids = data.draw(st.lists(st.integers(-2, v + 1), max_size=4))
        dev = op == "get_rows_dev"

        def ref():
            arr = np.array(ids, np.int64)
            bad = (arr < 0) | (arr >= v)
            if not dev and bad.any():
                if ((arr >= v) | (arr < -v)).any():
                    table[arr]                       # numpy's IndexError
                raise Refused("get_rows: negative ids are refused (no wrap-around)")
            if dev and bad.any() and v == 0:
                raise IndexError("empty table")
            out = table[np.where(bad, 0, arr)] if v else np.zeros((len(ids), dcols), np.float32)
            out[bad] = np.nan                        # DESIGN: a device id out of range gives a NaN row
            return out.astype(np.float32)
        run_case("llm", f"get_rows(({v}, {dcols}), {ids}, device={dev})",
                 lambda: tlgpu.get_rows(tlgpu.tensor(table), tlgpu.tensor(np.array(ids, np.int32)) if dev else ids),
                 ref)


@FUZZ
@given(st.data())
def test_fuzz_kv_cache(data):
    """kv_write and attention against numpy: random (grouped) heads, lengths and positions, in range or not."""
    rng = seeded(data.draw)
    hkv, g, ml, d = (0 if rng.random() < 0.08 else int(rng.integers(lo, hi)) for lo, hi in
                     ((1, 3), (1, 3), (1, 6), (1, 5)))             # now and then a zero-size dim
    g = max(g, 1)
    h = hkv * g if rng.random() < 0.9 else hkv * g + 1     # sometimes not a multiple of Hkv
    t = int(rng.integers(0, 3))
    cache = rng.standard_normal((hkv, ml, d)).astype(np.float32)
    if data.draw(st.booleans()):
        x = rng.standard_normal((hkv, t, d) if t != 1 or rng.random() < 0.5 else (hkv, d)).astype(np.float32)
        nt = x.shape[1] if x.ndim == 3 else 1
        pos = int(rng.integers(0, max(ml - nt, 0) + 1)) if rng.random() < 0.8 else data.draw(
            st.integers(-2, ml + 1) | st.just(2**40))

        def ref():
            xt = x if x.ndim == 3 else x[:, None]
            if not 0 <= pos <= ml - xt.shape[1]:
                raise IndexError("positions outside the cache")
            out = cache.copy()
            out[:, pos:pos + xt.shape[1]] = xt
            return out
        run_case("kv_cache", f"kv_write(cache{cache.shape}, x{x.shape}, {pos})",
                 lambda: tlgpu.kv_write(tlgpu.tensor(cache), tlgpu.tensor(x), pos), ref)
        return
    vcache = rng.standard_normal((hkv, ml, d)).astype(np.float32)
    q = rng.standard_normal((t, h, d) if t != 1 or rng.random() < 0.5 else (h, d)).astype(np.float32)
    tq = q.shape[0] if q.ndim == 3 else 1
    length = int(rng.integers(max(1, tq), ml + 1)) if rng.random() < 0.8 and ml >= max(1, tq) else data.draw(
        st.integers(-1, ml + 1))

    def ref():
        qt = q if q.ndim == 3 else q[None]
        tq = qt.shape[0]
        if hkv == 0 or h % hkv or not max(1, tq) <= length <= ml:
            raise ValueError("bad heads or length")
        out = np.zeros(qt.shape)
        for ti in range(tq):
            for hi in range(h):
                kv = hi // (h // hkv)
                keys = length - tq + ti + 1              # causal: the queries are the last tq positions
                s = cache[kv, :keys].astype(np.float64) @ qt[ti, hi] / math.sqrt(max(d, 1))
                p = np.exp(s - s.max())
                out[ti, hi] = (p / p.sum()) @ vcache[kv, :keys]
        return out.reshape(q.shape).astype(np.float32)
    run_case("kv_cache", f"attention(q{q.shape}, caches{cache.shape}, {length})",
             lambda: tlgpu.attention(tlgpu.tensor(q), tlgpu.tensor(cache), tlgpu.tensor(vcache), length), ref,
             1e-4, 1e-5)


# ---- gradients (autograd.c and each family's backward) ----

def grad_case(data):
    """(name, tlgpu function, float64 numpy function, input arrays) of a differentiable op on finite inputs."""
    rng = seeded(data.draw)
    shape = data.draw(dims(3, 4))
    a = rng.standard_normal(shape)
    nd = len(shape)
    op = data.draw(st.sampled_from(["binary", "reduce", "softmax", "view", "getitem", "index_select", "matmul",
                                    "cat", "cross_entropy"]))
    if op == "binary":
        b = rng.standard_normal(broadcast_partner(data.draw, shape))
        try:
            np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            b = rng.standard_normal(shape[1:])
        f = data.draw(st.sampled_from(["add", "sub", "mul", "truediv"]))
        if f == "truediv":
            b = np.sign(b) * (np.abs(b) + 0.5)       # away from 0: finite differences stay meaningful
        return f, getattr(operator, f), getattr(operator, f), [a, b]
    if op == "reduce":
        f = data.draw(st.sampled_from(["sum", "mean", "max", "min", "logsumexp"]))
        axis = axis_arg(data.draw, nd)
        try:
            np.sum(np.empty(shape), axis=axis)
            assert nd or axis is None                # a 0-d tensor takes axis=None only
        except Exception:
            axis = None                              # bad axes are fuzzed in test_fuzz_reduce
        keep = data.draw(st.booleans())
        if f in ("max", "min") and (a.size == 0 or reduced_count(shape, axis) == 0):
            f = "sum"                                # no identity: the error is fuzzed elsewhere
        npf = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min,
               "logsumexp": lambda x, axis, keepdims: np_logsumexp(x, axis, keepdims)}[f]
        if f == "mean" and reduced_count(shape, axis) == 0:
            f, npf = "sum", np.sum                   # mean of nothing is NaN: no gradient to check
        return (f"{f}(axis={axis}, keepdims={keep})", lambda x: getattr(x, f)(axis=axis, keepdims=keep),
                lambda x: npf(x, axis=axis, keepdims=keep), [a])
    if op == "softmax" and nd:
        axis = data.draw(st.integers(-nd, nd - 1))
        log = data.draw(st.booleans())

        def np_sm(x):
            if x.size == 0:
                return x
            m = x.max(axis, keepdims=True)
            s = np.exp(x - m).sum(axis, keepdims=True)
            return (x - m - np.log(s)) if log else np.exp(x - m) / s
        return f"softmax(log={log}, axis={axis})", lambda x: (x.log_softmax if log else x.softmax)(axis), np_sm, [a]
    if op == "view" and nd:
        p = tuple(data.draw(st.permutations(range(nd))))
        lead = data.draw(st.integers(1, 2))
        return (f"permute{p}.reshape(-1).expand", lambda x: x.permute(*p).reshape(-1).unsqueeze(0).expand(lead, -1),
                lambda x: np.broadcast_to(np.transpose(x, p).reshape(1, -1), (lead, x.size)), [a])
    if op == "getitem" and nd:
        key = data.draw(basic_key(shape))
        try:
            np.empty(shape)[key]
        except (IndexError, ValueError, TypeError):
            key = (slice(None, None, -1),)
        return f"[{key!r}]", lambda x: x[key] * 1.0, lambda x: np.asarray(x[key]) * 1.0, [a]
    if op == "index_select" and nd:
        d = data.draw(st.integers(-nd, nd - 1))
        n = shape[d]
        idx = [int(i) for i in rng.integers(-n, n, size=int(rng.integers(0, 5)))] if n else []
        return (f"index_select({d}, {idx})", lambda x: x.index_select(d, tlgpu.tensor(np.array(idx, np.int32))),
                lambda x: np.take(x, np.array(idx, np.int64), axis=d), [a])
    if op == "matmul":
        m, k, n = (int(rng.choice([0, 1, 2, 3, 5])) for _ in range(3))
        sa = [(k,), (m, k), (2, m, k)][int(rng.integers(0, 3))]
        sb = [(k,), (k, n), (2, k, n), (1, k, n)][int(rng.integers(0, 4))]
        return f"{sa} @ {sb}", operator.matmul, np.matmul, [rng.standard_normal(sa), rng.standard_normal(sb)]
    if op == "cat" and nd:
        d = data.draw(st.integers(-nd, nd - 1))
        other = list(shape)
        other[d] = int(rng.integers(0, 3))
        b = rng.standard_normal(other)
        return (f"cat(axis={d}) with {tuple(other)}", lambda x, y: tlgpu.cat([x, y], d),
                lambda x, y: np.concatenate([x, y], d), [a, b])
    n, c = int(rng.integers(0, 4)), int(rng.integers(1, 5))
    t = rng.integers(0, c, size=n).astype(np.int32)
    t[rng.random(n) < 0.2] = -100
    red = data.draw(st.sampled_from(["sum", "none"] + (["mean"] if (t != -100).any() else [])))

    def np_ce(x):
        lse = np.log(np.exp(x - x.max(1, keepdims=True)).sum(1)) + x.max(1) if n else np.zeros(0)
        loss = np.where(t != -100, lse - x[np.arange(n), np.maximum(t, 0)] if n else 0.0, 0.0)
        return loss if red == "none" else loss.sum() if red == "sum" else loss.sum() / (t != -100).sum()
    return (f"cross_entropy(({n}, {c}), {t.tolist()}, {red})",
            lambda x: F.cross_entropy(x, tlgpu.tensor(t), reduction=red), np_ce, [rng.standard_normal((n, c))])


@FUZZ
@given(st.data())
def test_fuzz_grad(data):
    """Analytic gradients against central differences of the float64 numpy function (tests/gradcheck.py)."""
    from gradcheck import check
    name, fn_t, fn_np, arrays = grad_case(data)
    try:
        check(fn_t, fn_np, arrays, rtol=5e-3, atol=5e-4)
    except AssertionError as e:
        raise AssertionError(f"grad: {name} of {[a.shape for a in arrays]}: {e}") from None
    OUTCOMES[("matched numpy", "gradients")] += 1


def test_outcome_classifier_catches_silent_results():
    """run_case must fail a silent result and a value mismatch, or the fuzz tests above cannot fail."""
    with pytest.raises(AssertionError, match="silent"):
        run_case("self-test", "numpy raises", lambda: tlgpu.zeros(2), lambda: np.zeros(2)[5])
    with pytest.raises(AssertionError, match="self-test"):
        run_case("self-test", "values differ", lambda: tlgpu.zeros(2), lambda: np.ones(2, np.float32))
    with pytest.raises(AssertionError, match="numpy returned"):
        run_case("self-test", "undocumented refusal", lambda: tlgpu.zeros(2)[9], lambda: np.zeros(2, np.float32))
    OUTCOMES.pop(("matched numpy", "self-test"), None)
