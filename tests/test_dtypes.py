"""float16, bfloat16 (ml_dtypes) and uint8 storage (issue 26): numpy in and out bit for bit, creation with
dtype=, shape and view ops, and the conversions on the device against numpy's and ml_dtypes' rounding (all
65,536 half patterns, float32s over the whole range, rounding ties, subnormals, inf and NaN)."""
import warnings

import ml_dtypes
import numpy as np
import pytest

import tlgpu

BF16 = np.dtype(ml_dtypes.bfloat16)
HALVES = [np.dtype(np.float16), BF16]
STORAGE = HALVES + [np.dtype(np.uint8)]


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def cast(a, dt):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return a.astype(dt)


def sample(dt, shape, rng):
    return cast(rng.standard_normal(shape).astype(np.float32) * 20, dt)


@pytest.mark.parametrize("dt", STORAGE, ids=str)
def test_numpy_round_trip_keeps_dtype_and_bits(dt):
    rng = np.random.default_rng(1)
    x = sample(dt, (5, 7), rng)
    for t in (tlgpu.tensor(x), tlgpu.from_numpy(x), tlgpu.tensor(x.astype(np.float32), dtype=dt)):
        assert t.dtype == dt
        assert np.array_equal(bits(t.numpy()), bits(x))
    assert tlgpu.tensor(x).tolist() == x.tolist()
    assert tlgpu.tensor(x[2, 3]).item() == x[2, 3].item()


@pytest.mark.parametrize("dt", STORAGE, ids=str)
def test_creation_with_dtype(dt):
    assert tlgpu.zeros(3, 2, dtype=dt).dtype == dt
    assert np.array_equal(tlgpu.zeros(3, 2, dtype=dt).numpy(), np.zeros((3, 2), dt))
    assert np.array_equal(tlgpu.ones(4, dtype=dt).numpy(), np.ones(4, dt))
    assert tlgpu.empty(2, dtype=dt).dtype == dt
    for v in (2.5, -1.0, 300.7, 1e-7, 70000.0):
        got = tlgpu.full((3,), v, dtype=dt).numpy()
        want = np.full(3, np.float32(v)).astype(np.int64).astype(dt) if dt == np.uint8 else \
            cast(np.full(3, np.float32(v)), dt)
        assert np.array_equal(bits(got), bits(want)), (v, got, want)
    assert tlgpu.zeros_like(tlgpu.ones(2, dtype=dt)).dtype == dt


@pytest.mark.parametrize("dt", STORAGE, ids=str)
def test_shape_and_view_ops_move_bits(dt):
    rng = np.random.default_rng(2)
    x = sample(dt, (4, 6, 5), rng)
    t = tlgpu.tensor(x)
    cases = [
        (t.reshape(6, 20), x.reshape(6, 20)), (t.view(24, 5), x.reshape(24, 5)),
        (t.transpose(0, 2).contiguous(), x.transpose(2, 1, 0)), (t.permute(1, 2, 0), x.transpose(1, 2, 0)),
        (t[1:3, ::2, None, 4], x[1:3, ::2, None, 4]), (t.T, x.T), (t[:, 1:].clone(), x[:, 1:]),
        (t[:1].expand(3, 6, 5), np.broadcast_to(x[:1], (3, 6, 5))),
        (tlgpu.cat([t, t[:2]], 0), np.concatenate([x, x[:2]], 0)), (tlgpu.cat([t, t], 2), np.concatenate([x, x], 2)),
        (tlgpu.stack([t[0], t[1]], 1), np.stack([x[0], x[1]], 1)), (t.unsqueeze(1).squeeze(1), x),
        (t.transpose(1, 2), x.transpose(0, 2, 1)),
    ]
    for got, want in cases:
        assert got.dtype == dt
        assert np.array_equal(bits(got.numpy()), bits(want))
    y = tlgpu.zeros(4, 6, 5, dtype=dt)
    y[1:3].copy_(t[:2])
    want = np.zeros_like(x)
    want[1:3] = x[:2]
    assert np.array_equal(bits(y.numpy()), bits(want))


def test_cat_refuses_mixed_dtypes():
    with pytest.raises(TypeError, match="cat"):
        tlgpu.cat([tlgpu.ones(2, dtype=np.float16), tlgpu.ones(2)])


# ---- conversions on the device ----

def convert(x, dt):
    """x (numpy) uploaded, converted on the device, read back."""
    return tlgpu.tensor(x).to(dt).numpy()


def check_float_bits(got, want):
    """Bit-exact, except that NaN may come back with another payload (devices' float16 conversions): NaN
    stays NaN with its sign."""
    gb, wb = bits(got), bits(want)
    nan = np.isnan(want.astype(np.float32))
    assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
    bad = np.nonzero((gb != wb) & ~nan)[0]
    assert bad.size == 0, [(hex(int(bits(want)[i])), hex(int(gb[i])), hex(int(wb[i]))) for i in bad[:8]]


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_all_half_patterns_to_float32_and_back(dt):
    x = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(dt)
    t = tlgpu.tensor(x)
    f = t.float()
    check_float_bits(f.numpy(), x.astype(np.float32))
    back = f.to(dt).numpy()
    check_float_bits(back, x)
    assert np.array_equal(bits(back)[~np.isnan(x.astype(np.float32))], bits(x)[~np.isnan(x.astype(np.float32))])


def float32_patterns(rng):
    """Random bit patterns (every exponent, subnormals, inf, NaN), float16 and bfloat16 ties and their
    neighbours, the overflow and underflow edges."""
    u = rng.integers(0, 2**32, 400_000, dtype=np.uint64).astype(np.uint32)
    exp = rng.integers(0, 256, 40_000).astype(np.uint32) << 23
    ties16 = exp | (rng.integers(0, 2**10, 40_000).astype(np.uint32) << 13) | 0x1000
    ties_bf = exp | (rng.integers(0, 2**7, 40_000).astype(np.uint32) << 16) | 0x8000
    edges = np.array([0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffbfffff, 0x00000001,
                      0x007fffff, 0x00800000, 0x477fe000, 0x477fefff, 0x477ff000, 0x33000000, 0x33000001,
                      0x387fe000, 0x387ff000, 0x38800000, 0x7f7fffff, 0x7f7f8000, 0x7f7f7fff], np.uint32)
    allu = np.concatenate([u, ties16, ties16 - 1, ties16 + 1, ties_bf, ties_bf - 1, ties_bf + 1, edges])
    return np.concatenate([allu, allu ^ 0x80000000]).view(np.float32)


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_float32_rounds_like_numpy_and_ml_dtypes(dt):
    x = float32_patterns(np.random.default_rng(3))
    check_float_bits(convert(x, dt), cast(x, dt))
    n = tlgpu.tensor(x).half() if dt == np.float16 else tlgpu.tensor(x).bfloat16()
    check_float_bits(n.numpy(), cast(x, dt))


def test_bfloat16_nan_is_quiet_like_ml_dtypes():
    x = np.array([0x7f800001, 0xff800001, 0x7fa12345, 0xffffffff], np.uint32).view(np.float32)
    assert np.array_equal(bits(convert(x, BF16)), bits(cast(x, BF16)))


def test_between_halves_and_to_int_and_uint8():
    rng = np.random.default_rng(4)
    f = np.concatenate([rng.standard_normal(5000).astype(np.float32) * 300, np.float32([-0.5, 0.99, 255.9, 256.5,
                                                                                         -1.5, -300.7, 65504])])
    for dt in HALVES:
        h = cast(f, dt)
        other = BF16 if dt == np.float16 else np.dtype(np.float16)
        check_float_bits(convert(h, other), cast(h.astype(np.float32), other))
        assert np.array_equal(convert(h, np.int32), h.astype(np.float32).astype(np.int32))
        assert np.array_equal(convert(h, np.uint8), h.astype(np.float32).astype(np.int64).astype(np.uint8))
        assert np.array_equal(tlgpu.tensor(h).int().numpy(), h.astype(np.float32).astype(np.int32))
    # float32 -> uint8 truncates toward zero and wraps (torch on CPU); int32 -> uint8 wraps the integer
    assert np.array_equal(tlgpu.tensor(f).byte().numpy(), f.astype(np.int64).astype(np.uint8))
    i = rng.integers(-2**31, 2**31, 5000).astype(np.int32)
    assert np.array_equal(tlgpu.tensor(i).byte().numpy(), i.astype(np.uint8))
    u = rng.integers(0, 256, 5000).astype(np.uint8)
    t = tlgpu.tensor(u)
    assert np.array_equal(t.int().numpy(), u.astype(np.int32)) and np.array_equal(t.long().numpy(), u)
    assert np.array_equal(t.float().numpy(), u.astype(np.float32))
    for dt in HALVES:
        assert np.array_equal(bits(t.to(dt).numpy()), bits(u.astype(dt)))
    assert np.array_equal(tlgpu.tensor(i).half().numpy(), cast(i.astype(np.float32), np.float16))


def test_conversion_of_strided_views():
    x = np.random.default_rng(5).standard_normal((6, 8)).astype(np.float32)
    t = tlgpu.tensor(x)
    assert np.array_equal(bits(t.T.half().numpy()), bits(x.T.astype(np.float16)))
    assert np.array_equal(bits(t[::2, 1:].bfloat16().numpy()), bits(cast(x[::2, 1:], BF16)))


def test_contiguous_conversions_tails_and_offsets():
    """The contiguous conversion kernel (CPU devices: vector loops of 4 elements, the rest one by one) for every
    pair it takes, at sizes around its groups of 4 and from views that start past the storage's first element,
    against numpy's / ml_dtypes' rounding."""
    rng = np.random.default_rng(8)
    srcs = [np.dtype(np.float32), np.dtype(np.float16), BF16, np.dtype(np.uint8)]
    for src in srcs:
        for dst in [np.dtype(np.float32), np.dtype(np.float16), BF16]:
            if src == dst:
                continue
            for n in (1, 3, 4, 5, 17, 1031):
                full = (rng.integers(0, 256, n + 7).astype(np.uint8) if src == np.uint8
                        else sample(src, n + 7, rng))
                t = tlgpu.tensor(full)
                for got, x in ((t[:n].to(dst), full[:n]), (t[7:].to(dst), full[7:]),
                               (t[3:3 + n].to(dst), full[3:3 + n])):
                    want = cast(x.astype(np.float32), dst)
                    check_float_bits(got.numpy(), want)
            m = sample(src, (5, 6), rng) if src != np.uint8 else rng.integers(0, 256, (5, 6)).astype(np.uint8)
            check_float_bits(tlgpu.tensor(m)[1:4].to(dst).numpy(), cast(m[1:4].astype(np.float32), dst))


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_conversions_are_differentiable(dt):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    a = tlgpu.tensor(x, requires_grad=True)
    h = a.to(dt)
    assert h.requires_grad and h.grad_fn is not None
    (h.float() * tlgpu.tensor(w)).sum().backward()
    assert a.grad.dtype == np.float32                # through the half tensor: rounded to it, as in torch
    assert np.array_equal(a.grad.numpy(), cast(w, dt).astype(np.float32))
    b = tlgpu.tensor(x.astype(dt), requires_grad=True)                  # a float16 leaf: its grad is float16
    (b.float() * tlgpu.tensor(w)).sum().backward()
    assert b.grad.dtype == dt
    assert np.array_equal(bits(b.grad.numpy()), bits(cast(w, dt)))


def test_integer_outputs_do_not_require_grad():
    a = tlgpu.tensor([1.5, -2.0], requires_grad=True)
    assert not a.int().requires_grad and not a.byte().requires_grad
    with pytest.raises(TypeError, match="uint8"):
        tlgpu.zeros(2, dtype=np.uint8).requires_grad_()


def test_unsupported_dtypes_are_refused():
    with pytest.raises(TypeError, match="float64"):
        tlgpu.zeros(2, dtype=tlgpu.float64)
    with pytest.raises(TypeError, match="int16"):
        tlgpu.tensor(np.zeros(2, np.int16))


# ---- safetensors and modules ----

def test_save_load_keeps_f16_bf16_u8(tmp_path):
    rng = np.random.default_rng(7)
    state = {"h": sample(np.float16, (3, 4), rng), "b": sample(BF16, (5,), rng),
             "u": rng.integers(0, 256, (2, 3)).astype(np.uint8), "f": rng.standard_normal(2).astype(np.float32)}
    tlgpu.save({k: tlgpu.tensor(v) for k, v in state.items()}, tmp_path / "m.safetensors")
    got = tlgpu.load(tmp_path / "m.safetensors")
    for k, v in state.items():
        assert got[k].dtype == v.dtype, k
        assert np.array_equal(bits(got[k].numpy()), bits(v)), k
    header = (tmp_path / "m.safetensors").read_bytes()[8:400]
    for code in (b'"F16"', b'"BF16"', b'"U8"'):
        assert code in header
    st = pytest.importorskip("safetensors.numpy")
    theirs = st.load_file(str(tmp_path / "m.safetensors"))
    for k in ("h", "u"):
        assert theirs[k].dtype == state[k].dtype and np.array_equal(theirs[k], state[k])
    assert np.array_equal(theirs["b"].view(np.uint16), bits(state["b"]))   # BF16 bits, whatever numpy type


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_module_to_half_converts_floating_parameters(dt):
    m = tlgpu.nn.Sequential(tlgpu.nn.Linear(3, 4), tlgpu.nn.Linear(4, 2))
    m.register_buffer("count", tlgpu.tensor(np.array([3, 4], np.int32)))
    before = m.state_dict()
    assert (m.half() if dt == np.float16 else m.bfloat16()) is m
    for name, p in m.named_parameters():
        assert p.dtype == dt and p.requires_grad and p.is_leaf
        assert np.array_equal(bits(p.numpy()), bits(cast(before[name], dt)))
    assert m.count.dtype == np.int32                                  # integer buffers stay as they are
    assert m.to(tlgpu.float32) is m
    for name, p in m.named_parameters():
        assert p.dtype == np.float32
        assert np.array_equal(p.numpy(), cast(before[name], dt).astype(np.float32))
    with pytest.raises(TypeError, match="floating"):
        m.to(tlgpu.uint8)


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_contiguous_half_elementwise_matches_strided(dt):
    """Elementwise ops on contiguous half operands (CPU devices: a vector kernel, with loops of their own for the
    hot ops) give the strided kernel's bits and the float32 result rounded once: each hot op, a division,
    scalars, a float32 operand (float32 out), uint8 operands, sizes around the groups of 4, views at an offset; a
    transcendental (exp) the contiguous float32 kernel's result rounded (both compute float4 builtins)."""
    rng = np.random.default_rng(9)
    ops = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
           "relu": lambda x, y: x.relu(), "exp": lambda x, y: (x * 0.25).exp(), "div": lambda x, y: x / y,
           "scalar": lambda x, y: 3.0 - x * 0.5, "relu_grad": None}
    for n in (1, 5, 17, 1031):
        a32, b32 = (cast(rng.standard_normal((2, n + 3)).astype(np.float32) * 4 + k, dt).astype(np.float32)
                    for k in (0, 9))                           # b away from 0: a divisor
        ta, tb = tlgpu.tensor(a32.astype(dt)), tlgpu.tensor(b32.astype(dt))
        for name, fn in ops.items():
            if fn is None:                                     # relu's backward: its mask times the gradient
                x = tlgpu.tensor(a32.astype(dt)[1, 3:], requires_grad=True)
                x.relu().backward(tb[0, 3:])
                want = np.where(a32[1, 3:] > 0, b32[0, 3:], 0).astype(dt)
                assert np.array_equal(bits(x.grad.numpy()), bits(want)), (name, n)
                continue
            got = fn(ta[1, 3:], tb[0, 3:])                     # contiguous, at an offset
            strided = fn(ta.T[3:, 1], tb.T[3:, 0])             # the same values through the strided kernel
            ref = fn(tlgpu.tensor(a32[1, 3:]), tlgpu.tensor(b32[0, 3:]))
            assert got.dtype == dt, (name, n)
            if tlgpu.device().type == "cpu" or name not in ("exp", "div"):
                assert np.array_equal(bits(got.numpy()), bits(cast(ref.numpy(), dt))), (name, n)
            else:                                              # GPUs: the strided kernel's builtins, not float32's
                np.testing.assert_allclose(got.numpy().astype(np.float32), ref.numpy(), rtol=2 ** -7)
            if name != "exp":                                  # exp's float4 form may round unlike its scalar one
                assert np.array_equal(bits(got.numpy()), bits(strided.numpy())), (name, n)
            else:
                np.testing.assert_allclose(got.numpy().astype(np.float32), strided.numpy().astype(np.float32),
                                           rtol=2 ** -7)
        mixed = ta[1, 3:] * tlgpu.tensor(b32[0, 3:])           # half with float32: a float32 result
        assert mixed.dtype == np.float32 and np.array_equal(mixed.numpy(), a32[1, 3:] * b32[0, 3:])
        u8 = rng.integers(0, 256, (2, n + 3)).astype(np.uint8)  # frames / 255: uint8 in, float32 out
        tu = tlgpu.tensor(u8)
        for got, want in ((tu[1, 3:] / 255.0, u8[1, 3:] / np.float32(255.0)),
                          (tu[1, 3:] * ta[0, 3:], cast(u8[1, 3:] * a32[0, 3:], dt))):
            assert got.dtype == want.dtype, n
            if tlgpu.device().type == "cpu" or want.dtype != np.float32:
                assert np.array_equal(bits(got.numpy()), bits(want)), n
            else:                                              # GPUs: OpenCL's division (2.5 ulp, NVIDIA's 1)
                np.testing.assert_allclose(got.numpy(), want, rtol=3e-7, atol=0)
