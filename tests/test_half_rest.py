"""The op families issue 26 listed last for float16/bfloat16 (docs/precision.md): pooling, outer, index_add,
dropout, the random fills and creators, multinomial. They compute in float32 and round once to the input's
dtype, so each must equal its float32 run on the same (half-representable) values, rounded; the random ones
draw the float32 stream's numbers (same seed, same values, rounded). Gradients keep the input's dtype."""
import numpy as np
import pytest

import tlgpu
import tlgpu.nn.functional as F

BF16 = tlgpu.bfloat16
DTS = [np.dtype(np.float16), BF16]


def pair(rng, shape, dt):
    """Half-representable float32 values and their half tensor."""
    a = rng.standard_normal(shape).astype(np.float32).astype(dt).astype(np.float32)
    return a, tlgpu.tensor(a.astype(dt))


def rounded(t32, dt):
    return t32.numpy().astype(dt)


@pytest.mark.parametrize("dt", DTS, ids=str)
@pytest.mark.parametrize("op", ["max_pool2d", "avg_pool2d", "avg_pool2d_no_pad", "outer", "index_add", "index_add_"])
def test_float32_inside_rounded_once(rng, dt, op):
    a, ta = pair(rng, (2, 3, 7, 9), dt)
    s, ts = pair(rng, (2, 3, 7, 9), dt)
    idx = tlgpu.tensor(np.array([1, 0], np.int32))
    fns = {
        "max_pool2d": lambda x, y: F.max_pool2d(x, 3, stride=2, padding=1),
        "avg_pool2d": lambda x, y: F.avg_pool2d(x, 2),
        "avg_pool2d_no_pad": lambda x, y: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False),
        "outer": lambda x, y: x.reshape(-1)[:11].outer(y.reshape(-1)[5:18]),
        "index_add": lambda x, y: x.index_add(0, idx, y, alpha=0.5),
        "index_add_": lambda x, y: x.clone().index_add_(1, tlgpu.tensor(np.array([2, 2, 0], np.int32)), y),
    }
    got = fns[op](ta, ts)
    want = fns[op](tlgpu.tensor(a), tlgpu.tensor(s))
    assert got.dtype == dt and got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), rounded(want, dt))


@pytest.mark.parametrize("dt", DTS, ids=str)
def test_gradients_keep_the_dtype(rng, dt):
    a, _ = pair(rng, (1, 2, 6, 6), dt)
    up = rng.standard_normal((1, 2, 3, 3)).astype(np.float32).astype(dt).astype(np.float32)
    grads = []
    for d in (dt, np.float32):
        x = tlgpu.tensor(a.astype(d), requires_grad=True)
        (F.max_pool2d(x, 2) * tlgpu.tensor(up.astype(d))).sum().backward()
        assert x.grad.dtype == d
        grads.append(x.grad.numpy().astype(np.float32))
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dt", DTS, ids=str)
def test_random_fills_draw_the_float32_stream(dt):
    for make in (lambda d: tlgpu.rand(5, 7, dtype=d), lambda d: tlgpu.randn(5, 7, dtype=d),
                 lambda d: tlgpu.zeros(5, 7, dtype=d).uniform_(-2.0, 3.0),
                 lambda d: tlgpu.zeros(5, 7, dtype=d).normal_(1.0, 0.5),
                 lambda d: tlgpu.rand_like(tlgpu.zeros(5, 7, dtype=d))):
        tlgpu.manual_seed(1234)
        got = make(dt)
        tlgpu.manual_seed(1234)
        want = make(np.float32)
        assert got.dtype == dt
        np.testing.assert_array_equal(got.numpy(), rounded(want, dt))
        assert np.unique(want.numpy()).size > 30       # real draws, not a constant


@pytest.mark.parametrize("dt", DTS, ids=str)
def test_dropout_and_multinomial(rng, dt):
    a, ta = pair(rng, (6, 50), dt)
    tlgpu.manual_seed(7)
    got = F.dropout(ta, 0.3, training=True)
    tlgpu.manual_seed(7)
    want = F.dropout(tlgpu.tensor(a), 0.3, training=True)
    assert got.dtype == dt
    np.testing.assert_array_equal(got.numpy(), rounded(want, dt))
    assert 0 < (want.numpy() == 0).sum() < a.size
    assert F.dropout(ta, 0.3, training=False) is ta
    p = ta.softmax(axis=1)
    tlgpu.manual_seed(3)
    s = p.multinomial(4, replacement=True)
    tlgpu.manual_seed(3)
    s32 = p.float().multinomial(4, replacement=True)
    np.testing.assert_array_equal(s.numpy(), s32.numpy())


def test_integer_dtypes_still_refused():
    with pytest.raises(TypeError, match="uint8"):
        tlgpu.rand_like(tlgpu.zeros(3, dtype=tlgpu.uint8))
    with pytest.raises(TypeError, match="int32"):
        F.max_pool2d(tlgpu.zeros((1, 1, 4, 4), dtype=np.int32), 2)
