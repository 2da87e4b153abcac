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

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import tlgpu
from fuzzlib import (  # noqa: F401  (outcome_summary: the autouse fixture that prints the outcomes)
    FUZZ, INF, NAN, Refused, arrays, broadcast_partner, dims, float_arrays, float_only, is_int,
    np_result, run_case, tensor, axis_arg, reduced_count, np_logsumexp,
    outcome_summary,
)


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
