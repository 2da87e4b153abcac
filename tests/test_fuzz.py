"""Property-based fuzzing of the public op surface against numpy (issue 11).

Each test draws cases (random shapes with zero-size dims and 0-d scalars, broadcasting, negative and
out-of-range indices and axes, NaN/inf, int32 where float32 is wanted) and runs the same case through
tlgpu and a numpy (float64 where precision matters) reference. Every case lands in one outcome class:

  matched numpy        both returned; same shape, values allclose with NaN == NaN
  both raised          numpy raised; tlgpu raised ValueError/TypeError/IndexError/OverflowError
  tlgpu refused: why   numpy returned, tlgpu raised one of those for a documented reason (`why`)

Where a refusal's reference still carries numpy's answer (int32 operands, say), a tlgpu that accepts the
case must match it ("matched numpy (accepted: why)"); without one it is counted as "tlgpu accepted".
Anything else fails the test: a numpy error that tlgpu answers with a value (a silent result), a value
that differs, tlgpu refusing without a documented reason, or any other exception type. A crash kills
pytest, which is visible too. Hypothesis runs derandomized (the same cases every run); the example count
per test is TLGPU_FUZZ_EXAMPLES (500 by default: about 20 s on a 2-core PoCL machine; `make fuzz` runs
5000, about 6 minutes). With -s a table of outcome counts is printed at the end.
"""
import math
import operator
import os
import warnings
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tlgpu
import tlgpu.nn.functional as F

EXAMPLES = int(os.environ.get("TLGPU_FUZZ_EXAMPLES", "500"))
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None, print_blob=False,
                suppress_health_check=list(HealthCheck))
OK_ERRORS = (ValueError, TypeError, IndexError, OverflowError)
OUTCOMES = Counter()
NAN, INF = float("nan"), float("inf")


class Refused(Exception):
    """The reference's way of saying: tlgpu may refuse this case, for this documented reason. With `value`,
    numpy's answer: a tlgpu that accepts the case (say, once int32 arithmetic lands) must match it."""

    def __init__(self, reason, value=None):
        super().__init__(reason)
        self.value = value


def np_result(r):
    """numpy's answer in tlgpu's dtypes: integers as int32, floats as float32, booleans as float32 masks."""
    r = np.asarray(r)
    return r.astype(np.int32) if r.dtype.kind in "iu" else r if r.dtype == np.bool_ else r.astype(np.float32)


@pytest.fixture(scope="module", autouse=True)
def outcome_summary():
    yield
    total = sum(OUTCOMES.values())
    classes = Counter()
    for (cls, _), n in OUTCOMES.items():
        classes[cls] += n
    print(f"\n\nfuzz outcomes ({total} cases, {EXAMPLES} examples per test): "
          + ", ".join(f"{n} {cls}" for cls, n in sorted(classes.items())))
    for key, n in sorted(OUTCOMES.items()):
        print(f"  {n:7d}  {key[0]:<14s} {key[1]}")


def assert_close(got, ref, rtol, atol, what):
    got = np.asarray(got)
    ref = np.asarray(ref)
    if ref.dtype == np.bool_:
        ref = ref.astype(np.float32)                 # comparisons give float32 masks (DESIGN)
    assert got.shape == ref.shape, f"{what}: shape {got.shape}, numpy {ref.shape}"
    want = np.int32 if ref.dtype.kind in "iu" else np.float32
    assert got.dtype == want, f"{what}: dtype {got.dtype}, expected {np.dtype(want)} (numpy {ref.dtype})"
    np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol,
                               equal_nan=True, err_msg=what)


def run_case(family, what, tl_fn, np_fn, rtol=2e-5, atol=1e-6):
    """Runs one case through numpy and tlgpu and records its outcome class; fails on a disagreement."""
    refused = None
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's "mean of empty slice": its NaN is the reference
        try:
            ref, np_exc = np_fn(), None
        except Refused as r:
            ref, np_exc, refused = r.value, None, str(r)
        except Exception as e:                       # numpy's own error, of any type
            ref, np_exc = None, e
    try:
        got, tl_exc = tl_fn(), None
        if isinstance(got, tlgpu.Tensor):
            got = got.numpy()
        elif isinstance(got, (list, tuple)):
            got = [g.numpy() if isinstance(g, tlgpu.Tensor) else g for g in got]
    except OK_ERRORS as e:
        got, tl_exc = None, e
    except Exception as e:                           # RuntimeError, DeviceError, SystemError: never for bad input
        raise AssertionError(f"{family}: {what}: tlgpu raised {type(e).__name__}: {e}") from e
    if tl_exc is not None:
        assert str(tl_exc), f"{family}: {what}: {type(tl_exc).__name__} without a message"
        if np_exc is not None:
            OUTCOMES[("both raised", family)] += 1
        elif refused is not None:
            OUTCOMES[("tlgpu refused", refused)] += 1
        else:
            raise AssertionError(f"{family}: {what}: tlgpu raised {type(tl_exc).__name__}: {tl_exc}; numpy "
                                 f"returned {np.asarray(ref)!r}")
        return
    if np_exc is not None:
        raise AssertionError(f"{family}: {what}: numpy raised {type(np_exc).__name__}: {np_exc}; tlgpu returned "
                             f"{got!r} (a silent result)")
    if refused is not None and ref is None:
        OUTCOMES[("tlgpu accepted", refused)] += 1   # allowed to refuse, accepted, and nothing to compare to
        return
    if refused is not None:
        family = f"{family} (accepted: {refused})"
    if isinstance(ref, list):
        assert isinstance(got, list) and len(got) == len(ref), f"{what}: {len(got)} pieces, numpy {len(ref)}"
        for g, r in zip(got, ref):
            assert_close(g, r, rtol, atol, f"{family}: {what}")
    else:
        assert_close(got, ref, rtol, atol, f"{family}: {what}")
    OUTCOMES[("matched numpy", family)] += 1


# ---- strategies ----

SPECIALS = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 1e-38, 3e38]
TAME = SPECIALS[:-1]           # no huge finite values: sums of them overflow float32 but not the float64 reference


# Shapes and values come from a numpy generator seeded by hypothesis: hypothesis alone steers toward its
# simplest examples (empty shapes, the first choice of every list), which would leave most cases size 0 or 1.
def seeded(draw):
    return np.random.default_rng(draw(st.integers(0, 2**32 - 1)))


@st.composite
def dims(draw, max_dims=4, max_size=6):
    rng = seeded(draw)
    nd = int(rng.choice([d for d in (0, 1, 1, 2, 2, 2, 3, 3, 4) if d <= max_dims]))
    return tuple(int(rng.choice([0, 1, 1] + list(range(2, max_size + 1)))) for _ in range(nd))


@st.composite
def float_arrays(draw, shape=None, specials=True, scale=None, huge=True):
    shape = draw(dims()) if shape is None else shape
    n = int(np.prod(shape, dtype=np.int64))
    rng = seeded(draw)
    s = scale if scale is not None else float(rng.choice([1.0, 3.0, 100.0]))
    a = (rng.standard_normal(n) * s).astype(np.float32)
    if specials and n and rng.random() < 0.5:
        k = int(rng.integers(1, n + 1))
        a[rng.integers(0, n, k)] = rng.choice(np.array(SPECIALS if huge else TAME, np.float32), k)
    return a.reshape(shape)


@st.composite
def int_arrays(draw, shape=None, lo=-50, hi=50):
    shape = draw(dims()) if shape is None else shape
    return seeded(draw).integers(lo, hi, size=shape).astype(np.int32)


@st.composite
def arrays(draw, shape=None, int_share=6, huge=True):
    """float32 mostly; int32 about one case in int_share."""
    if seeded(draw).integers(0, int_share) == 0:
        return draw(int_arrays(shape))
    return draw(float_arrays(shape, huge=huge))


def broadcast_partner(draw, shape):
    """A shape that broadcasts with `shape` most of the time, and one that does not otherwise."""
    kind = draw(st.sampled_from(["same", "same", "ones", "suffix", "lead", "random"]))
    if kind == "same":
        return shape
    if kind == "ones":
        return tuple(1 if draw(st.booleans()) else d for d in shape)
    if kind == "suffix":
        return shape[draw(st.integers(0, len(shape))):]
    if kind == "lead":
        return (draw(st.sampled_from([1, 2, 3])),) + shape
    return draw(dims())


def tensor(a):
    return tlgpu.tensor(a) if isinstance(a, np.ndarray) else a


def is_int(a):
    return isinstance(a, np.ndarray) and a.dtype == np.int32


def float_only(op, *arrs, value=None):
    """int32 operands where the op is float32-only: numpy computes, tlgpu refuses (DESIGN: float32 for math).
    value: a function giving numpy's answer on the int32 operands, held against a tlgpu that accepts them."""
    if any(is_int(a) for a in arrs):
        raise Refused(f"{op}: int32 operand of a float32-only op", np_result(value()) if value else None)


# ---- elementwise (owned by ops_elementwise.c; bugs found are listed, not fixed here) ----

def np_sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def np_gelu(x):
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0))) if x.size else x


UNARY = {
    "neg": (np.negative, 0), "exp": (np.exp, 1), "log": (np.log, 1), "sqrt": (np.sqrt, 1),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), 1), "tanh": (np.tanh, 1), "sigmoid": (np_sigmoid, 1),
    "relu": (lambda x: np.where(np.isnan(x), x, np.maximum(x, 0)), 0), "silu": (lambda x: x * np_sigmoid(x), 1),
    "gelu": (np_gelu, 2), "abs": (np.abs, 0), "sin": (np.sin, 1), "cos": (np.cos, 1), "square": (np.square, 0),
    "reciprocal": (lambda x: 1.0 / x, 0), "sign": (np.sign, 0),
}
TOL = {0: (2e-5, 1e-6), 1: (2e-4, 1e-5), 2: (1e-3, 1e-4)}   # exact / transcendental / approximated


@FUZZ
@given(st.data())
def test_fuzz_unary(data):
    op = data.draw(st.sampled_from(sorted(UNARY)))
    a = data.draw(arrays())
    if op in ("sin", "cos") and not is_int(a):
        a = np.where(np.abs(a) > 1e4, np.float32(7), a)   # OpenCL's sin of 3e38 has no float64 reference
    fn, tol = UNARY[op]

    def ref():
        float_only(op, a, value=lambda: fn(a))
        return fn(a.astype(np.float64)).astype(np.float32)
    run_case("unary", f"{op} {a.dtype}{a.shape}", lambda: getattr(tlgpu.tensor(a), op)(), ref, *TOL[tol])


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide, "pow": np.power,
    "maximum": np.maximum, "minimum": np.minimum, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal,
}


@FUZZ
@given(st.data())
def test_fuzz_binary(data):
    op = data.draw(st.sampled_from(sorted(BINARY)))
    a = data.draw(arrays())
    form = data.draw(st.sampled_from(["tt", "tt", "ts", "st"]))
    if form == "tt":
        b = data.draw(arrays(broadcast_partner(data.draw, a.shape)))
    else:
        b = data.draw(st.sampled_from([2, -3, 0.5, 0.0, NAN, INF, 2**31]))
    x, y = (a, b) if form != "st" else (b, a)

    def np_operand(v):
        return v.astype(np.float64) if isinstance(v, np.ndarray) else v

    def ref():
        arrs = [v for v in (x, y) if isinstance(v, np.ndarray)]
        if any(is_int(v) for v in arrs):
            np.broadcast_shapes(*[v.shape for v in arrs])          # a shape error outranks the dtype refusal
            value = None if op == "pow" else np_result(BINARY[op](x, y))   # int pow: semantics differ by design
            raise Refused(f"{op}: int32 tensor operands (int32 arithmetic not in this tree yet)", value)
        r = BINARY[op](np_operand(x), np_operand(y))
        return r if r.dtype == np.bool_ else np.asarray(r, np.float32)

    def run():
        fn = getattr(tlgpu, op) if op in ("maximum", "minimum") else getattr(operator, op)   # reflected forms too
        return fn(tensor(x), tensor(y))
    run_case("binary", f"{op}({type(x).__name__}{getattr(x, 'shape', '')}, {type(y).__name__}"
             f"{getattr(y, 'shape', '')})", run, ref, *((2e-4, 1e-5) if op == "pow" else (2e-5, 1e-6)))


INPLACE = {"add_": operator.iadd, "sub_": operator.isub, "mul_": operator.imul, "div_": operator.itruediv}


@FUZZ
@given(st.data())
def test_fuzz_inplace(data):
    """add_/sub_/mul_/div_/copy_/fill_ against numpy's `a op= b`: the result must keep a's shape."""
    a = data.draw(arrays(int_share=8))
    op = data.draw(st.sampled_from(sorted(INPLACE) + ["copy_", "fill_"]))
    if op == "fill_" or data.draw(st.integers(0, 4)) == 0:
        b = data.draw(st.sampled_from([2.5, -1, 0, NAN, INF]))
    else:
        b = data.draw(arrays(broadcast_partner(data.draw, a.shape), int_share=8))

    def ref():
        r = a.astype(np.float64) if a.dtype == np.float32 else a.copy()
        bb = b.astype(np.float64) if isinstance(b, np.ndarray) and b.dtype == np.float32 else b
        if op == "copy_" or op == "fill_":
            if isinstance(bb, np.ndarray):
                np.broadcast_to(bb, r.shape)
            if is_int(a) and op == "fill_" and not math.isfinite(b):
                raise Refused("fill_: NaN/inf into int32 (numpy writes INT32_MIN)")
            if isinstance(bb, np.ndarray) and bb.dtype != r.dtype and op == "copy_":
                raise Refused("copy_: a tensor source of another dtype (tlgpu does not cast between tensors)")
            r[...] = bb
            return r.astype(a.dtype)
        if is_int(a) or is_int(b):
            np.broadcast_to(np.empty(np.broadcast_shapes(r.shape, np.shape(bb))), r.shape)
            raise Refused(f"{op}: int32 operands (int32 arithmetic not in this tree yet)")
        return INPLACE[op](r, bb).astype(np.float32)    # numpy's own error when b does not fit a's shape

    def run():
        t = tlgpu.tensor(a)
        return getattr(t, op)(tensor(b))
    run_case("inplace", f"{a.dtype}{a.shape}.{op}({type(b).__name__}{getattr(b, 'shape', '')})", run, ref)


@FUZZ
@given(st.data())
def test_fuzz_where_clamp(data):
    a = data.draw(arrays())
    if data.draw(st.booleans()):
        lo, hi = data.draw(st.sampled_from([(-1.0, 1.0), (0.0, None), (None, 0.5), (2.0, -2.0)]))

        def ref():
            float_only("clamp", a, value=lambda: np.clip(a, lo, hi) if lo is None or hi is None or lo <= hi
                       else np.full(a.shape, hi, np.float32))   # float bounds: a float32 result, as torch
            r = a.astype(np.float64)
            if lo is not None:
                r = np.where(np.isnan(r), r, np.maximum(r, lo))
            if hi is not None:
                r = np.where(np.isnan(r), r, np.minimum(r, hi))
            return r.astype(np.float32)
        run_case("clamp", f"clamp({a.dtype}{a.shape}, {lo}, {hi})", lambda: tlgpu.tensor(a).clamp(lo, hi), ref)
        return
    c = data.draw(float_arrays(broadcast_partner(data.draw, a.shape), specials=False)) > 0
    b = data.draw(arrays(broadcast_partner(data.draw, a.shape)))

    def ref():
        float_only("where", a, b)
        return np.where(c, a, b).astype(np.float32)
    run_case("where", f"where(mask{c.shape}, {a.dtype}{a.shape}, {b.dtype}{b.shape})",
             lambda: tlgpu.where(tlgpu.tensor(c.astype(np.float32)), tlgpu.tensor(a), tlgpu.tensor(b)), ref)


# ---- reductions and softmax (ops_reduce.c) ----

def axis_arg(draw, ndim):
    kind = draw(st.sampled_from(["none", "int", "int", "neg", "tuple", "bad", "dup"]))
    if kind == "none":
        return None
    if kind in ("int", "neg"):
        if ndim == 0:
            return draw(st.sampled_from([0, -1]))
        k = draw(st.integers(0, ndim - 1))
        return k - ndim if kind == "neg" else k
    if kind == "tuple":
        return tuple(draw(st.permutations(range(ndim)))[: draw(st.integers(0, ndim))])
    if kind == "dup":
        return (0, 0) if ndim else (0,)
    return draw(st.sampled_from([ndim, -ndim - 1, 1.5, 2**70]))


def reduced_count(shape, axis):
    if axis is None:
        return int(np.prod(shape, dtype=np.int64))
    axes = axis if isinstance(axis, tuple) else (axis,)
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


@np.errstate(all="ignore")                           # log(0) = -inf is the answer over an empty axis
def np_logsumexp(x, axis, keepdims):
    m = np.max(x, axis=axis, keepdims=True) if reduced_count(x.shape, axis) else None
    if m is None:                                    # tlgpu: logsumexp over nothing is -inf (sum 0)
        return np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))
    m = np.where(np.isfinite(m), m, 0.0)
    r = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return r if keepdims else np.squeeze(r, axis=axis if axis is not None else tuple(range(x.ndim)))


REDUCE = {
    "sum": lambda x, ax, kd: np.sum(x, axis=ax, keepdims=kd),
    "mean": lambda x, ax, kd: np.mean(x, axis=ax, keepdims=kd),
    "max": lambda x, ax, kd: np.max(x, axis=ax, keepdims=kd),
    "min": lambda x, ax, kd: np.min(x, axis=ax, keepdims=kd),
    "argmax": lambda x, ax, kd: np.argmax(x, axis=ax, keepdims=kd),
    "argmin": lambda x, ax, kd: np.argmin(x, axis=ax, keepdims=kd),
    "logsumexp": np_logsumexp,
}


@FUZZ
@given(st.data())
def test_fuzz_reduce(data):
    op = data.draw(st.sampled_from(sorted(REDUCE)))
    # no huge finite values: float32 sums of them overflow where the float64 reference does not
    a = data.draw(arrays(huge=False) if data.draw(st.booleans()) else float_arrays(scale=1.0, huge=False))
    axis = axis_arg(data.draw, a.ndim)
    keepdims = data.draw(st.booleans())
    if op.startswith("arg") and isinstance(axis, tuple):
        axis = axis[0] if len(axis) == 1 else axis   # numpy refuses tuples for argmax: a both-raised case

    def ref():
        x = a.astype(np.float64)
        if isinstance(axis, tuple) and len(set(axis)) != len(axis):
            np.sum(x, axis=axis)                     # numpy's duplicate-axis error
        if a.ndim == 0 and isinstance(axis, int):
            raise Refused("an int axis on a 0-d tensor (numpy's sum/max accept 0 and -1 there, its mean does not)")
        float_only(op, a)
        r = REDUCE[op](x, axis, keepdims)
        return np.asarray(r, np.int32 if op.startswith("arg") else np.float32)
    try:
        n = max(reduced_count(a.shape, axis), 1)
    except (IndexError, TypeError):                  # a bad axis: the case is about the error
        n = 1
    run_case("reduce", f"{op}({a.dtype}{a.shape}, axis={axis}, keepdims={keepdims})",
             lambda: getattr(tlgpu.tensor(a), op)(axis=axis, keepdims=keepdims), ref, 1e-4, 1e-5 * n)


@FUZZ
@given(st.data())
def test_fuzz_softmax(data):
    log = data.draw(st.booleans())
    a = data.draw(arrays()) if data.draw(st.booleans()) else data.draw(float_arrays(scale=1.0))
    axis = data.draw(st.one_of(st.none(), st.integers(-a.ndim - 1, a.ndim)))

    def ref():
        x = a.astype(np.float64)
        if axis is not None:
            np.sum(x, axis=axis)                     # numpy's AxisError for a bad axis
        if a.ndim == 0 and axis is not None:
            raise Refused("an int axis on a 0-d tensor (numpy's sum/max accept 0 and -1 there, its mean does not)")
        float_only("softmax", a)
        m = np.max(x, axis=axis, keepdims=True) if x.size else 0.0
        e = np.exp(x - m)                            # torch semantics: no guard for inf rows (they give NaN)
        s = np.sum(e, axis=axis, keepdims=True)
        return ((x - m - np.log(s)) if log else e / s).astype(np.float32)
    op = "log_softmax" if log else "softmax"
    run_case("softmax", f"{op}({a.dtype}{a.shape}, axis={axis})", lambda: getattr(tlgpu.tensor(a), op)(axis), ref,
             1e-4, 1e-5)


# ---- shape ops (ops_shape.c) ----

@FUZZ
@given(st.data())
def test_fuzz_shape(data):
    a = data.draw(arrays(int_share=3))
    nd = a.ndim
    op = data.draw(st.sampled_from(["reshape", "transpose", "permute", "unsqueeze", "squeeze", "expand", "flatten",
                                    "T", "split", "chunk"]))
    dim = lambda: data.draw(st.integers(-nd - 1, nd))                      # noqa: E731  includes bad dims
    if op == "reshape":
        shape = list(data.draw(st.permutations(a.shape))) if data.draw(st.booleans()) else list(data.draw(dims()))
        if shape and data.draw(st.booleans()):
            shape[data.draw(st.integers(0, len(shape) - 1))] = -1
        tl_fn, np_fn, what = lambda t: t.reshape(*shape), lambda x: x.reshape(shape), f"reshape{tuple(shape)}"
    elif op == "transpose":
        i, j = dim(), dim()
        tl_fn, np_fn, what = lambda t: t.transpose(i, j), lambda x: np.swapaxes(x, i, j), f"transpose({i}, {j})"
    elif op == "permute":
        p = list(data.draw(st.permutations(range(nd))))
        if p and data.draw(st.integers(0, 3)) == 0:
            p[0] = p[-1] if len(p) > 1 else nd       # a repeated or out-of-range dim
        tl_fn, np_fn, what = lambda t: t.permute(*p), lambda x: np.transpose(x, p), f"permute{tuple(p)}"
    elif op == "unsqueeze":
        d = data.draw(st.integers(-nd - 2, nd + 1))
        tl_fn, np_fn, what = lambda t: t.unsqueeze(d), lambda x: np.expand_dims(x, d), f"unsqueeze({d})"
    elif op == "squeeze":
        d = data.draw(st.one_of(st.none(), st.integers(-nd - 1, nd)))
        def np_fn(x):
            if x.ndim == 0 and d is not None:
                raise Refused("squeeze(dim) of a 0-d tensor (numpy accepts dim 0 and -1 there)")
            return np.squeeze(x, d)
        tl_fn, what = (lambda t: t.squeeze(d)), f"squeeze({d})"
    elif op == "expand":
        shape = broadcast_partner(data.draw, a.shape)
        tl_fn, np_fn, what = lambda t: t.expand(*shape), lambda x: np.broadcast_to(x, shape), f"expand{shape}"
    elif op == "flatten":
        tl_fn, np_fn, what = lambda t: t.flatten(), lambda x: x.reshape(-1), "flatten()"
    elif op == "T":
        tl_fn, np_fn, what = lambda t: t.T, lambda x: x.T, "T"
    else:
        d = dim()
        k = data.draw(st.integers(-1, 4))

        def np_fn(x):
            size = x.shape[d]                        # numpy's IndexError for a bad dim
            if k <= 0:
                raise ValueError("chunk size/count must be positive")
            step = k if op == "split" else max(-(-size // k), 1)
            return [x[(slice(None),) * (d % nd) + (slice(i, i + step),)] for i in range(0, max(size, 1), step)]
        tl_fn, what = (lambda t: getattr(t, op)(k, d)), f"{op}({k}, dim={d})"

    run_case("shape", f"{what} of {a.dtype}{a.shape}", lambda: tl_fn(tlgpu.tensor(a)), lambda: np_fn(a))


@FUZZ
@given(st.data())
def test_fuzz_cat_stack(data):
    a = data.draw(arrays(int_share=4))
    n = data.draw(st.integers(0, 3))
    parts = [a] + [data.draw(arrays(broadcast_partner(data.draw, a.shape), int_share=8)) for _ in range(n)]
    stack = data.draw(st.booleans())
    d = data.draw(st.integers(-a.ndim - 2, a.ndim + 1))

    def ref():
        if len({p.dtype for p in parts}) > 1:
            (np.stack if stack else np.concatenate)([p.astype(np.float32) for p in parts], d)   # shape errors first
            raise Refused("cat/stack: mixed float32 and int32 tensors (tlgpu does not promote)")
        return (np.stack if stack else np.concatenate)(parts, d)
    fn = tlgpu.stack if stack else tlgpu.cat
    run_case("cat/stack", f"{fn.__name__}({[p.shape for p in parts]}, {d})",
             lambda: fn([tlgpu.tensor(p) for p in parts], d), ref)


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

