"""Shared machinery of the op fuzz tests (test_fuzz.py, test_fuzz_ops.py): outcome classes, the
case runner, hypothesis strategies. See test_fuzz.py for what is fuzzed and how outcomes are classed."""
import os
import warnings
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import tlgpu

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
