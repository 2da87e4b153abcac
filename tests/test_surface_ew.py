"""PyTorch names for the CleanRL / nanoGPT ports: ceil/floor/round, leaky_relu, uniform_/normal_ in place,
normal, linspace, tril/triu and multinomial, against float64 numpy references on random inputs."""
import os

import numpy as np
import pytest

import tlgpu
from gradcheck import check


def as_np(t):
    return np.asarray(t.numpy())


# ---- ceil / floor / round ----

ROUNDERS = [("ceil", np.ceil), ("floor", np.floor), ("round", np.round)]


@pytest.mark.parametrize("name,ref", ROUNDERS)
def test_rounding_matches_numpy(rng, name, ref):
    x = (rng.standard_normal((37, 29)) * 10).astype(np.float32)
    x[0, :6] = [0.5, 1.5, 2.5, -0.5, -2.5, -1.5]          # halves: numpy and torch round them to even
    t = tlgpu.tensor(x)
    np.testing.assert_array_equal(as_np(getattr(t, name)()), ref(x))
    np.testing.assert_array_equal(as_np(getattr(tlgpu, name)(t)), ref(x))
    v = t.T[::2]                                            # a strided view
    np.testing.assert_array_equal(as_np(getattr(v, name)()), ref(x.T[::2]))


@pytest.mark.parametrize("name,ref", ROUNDERS)
def test_rounding_int32_unchanged(rng, name, ref):
    x = rng.integers(-1000, 1000, (5, 7)).astype(np.int32)
    r = getattr(tlgpu.tensor(x), name)()
    assert r.dtype == tlgpu.int32
    np.testing.assert_array_equal(as_np(r), x)


@pytest.mark.parametrize("name,ref", ROUNDERS)
def test_rounding_gradient_is_zero(rng, name, ref):
    x = tlgpu.tensor(rng.standard_normal((4, 5)).astype(np.float32), requires_grad=True)
    y = getattr(x, name)() * 3.0 + x
    assert y.requires_grad
    y.backward(tlgpu.tensor(rng.standard_normal((4, 5)).astype(np.float32)))
    g = tlgpu.tensor(np.zeros((4, 5), np.float32), requires_grad=True)
    getattr(g, name)().sum().backward()
    np.testing.assert_array_equal(as_np(g.grad), np.zeros((4, 5)))


def test_rounding_zero_size():
    for name, _ in ROUNDERS:
        assert getattr(tlgpu.zeros(0, 3), name)().shape == (0, 3)


# ---- leaky_relu ----

@pytest.mark.parametrize("slope", [None, 0.2, -0.5])
def test_leaky_relu_forward_backward(rng, slope):
    x = rng.standard_normal((6, 9))
    kw = {} if slope is None else {"negative_slope": slope}
    s = 0.01 if slope is None else slope
    out = check(lambda t: tlgpu.leaky_relu(t, **kw), lambda a: np.where(a > 0, a, s * a), [x])
    assert out.shape == (6, 9)
    t = tlgpu.tensor(x.astype(np.float32))
    np.testing.assert_allclose(as_np(t.leaky_relu(**kw)), np.where(x > 0, x, s * x), rtol=1e-6, atol=1e-7)


def test_leaky_relu_positional_view_and_errors(rng):
    x = rng.standard_normal((8, 8)).astype(np.float32)
    v = tlgpu.tensor(x)[1::2, ::3]
    np.testing.assert_allclose(as_np(v.leaky_relu(0.3)), np.where(x[1::2, ::3] > 0, x[1::2, ::3], 0.3 * x[1::2, ::3]),
                               rtol=1e-6)
    assert tlgpu.leaky_relu(tlgpu.zeros(0, 4)).shape == (0, 4)
    with pytest.raises(TypeError, match="leaky_relu"):
        tlgpu.tensor(x).leaky_relu(negative_slope="a")
    i = tlgpu.tensor(np.array([-3, 4], np.int32)).leaky_relu(0.5)  # int32 computes in float32, like exp
    np.testing.assert_allclose(as_np(i), [-1.5, 4.0])


def test_leaky_relu_gradient_at_zero_takes_the_slope():
    x = tlgpu.tensor(np.array([0.0, 1.0, -1.0], np.float32), requires_grad=True)
    tlgpu.leaky_relu(x, 0.25).sum().backward()
    np.testing.assert_array_equal(as_np(x.grad), [0.25, 1.0, 0.25])


# ---- uniform_ / normal_ ----

def test_uniform_normal_contiguous_equal_rand_randn():
    tlgpu.manual_seed(7)
    u = as_np(tlgpu.rand(33, 5))
    z = as_np(tlgpu.randn(33, 5))
    tlgpu.manual_seed(7)
    t = tlgpu.empty(33, 5)
    assert t.uniform_() is t
    np.testing.assert_array_equal(as_np(t), u)
    assert t.normal_() is t
    np.testing.assert_array_equal(as_np(t), z)
    tlgpu.manual_seed(7)
    np.testing.assert_allclose(as_np(tlgpu.empty(33, 5).uniform_(-2.0, 3.0)), -2.0 + 5.0 * u, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(as_np(tlgpu.empty(33, 5).normal_(mean=4.0, std=0.5)), 4.0 + 0.5 * z, rtol=1e-6,
                               atol=1e-6)


def test_uniform_normal_repeatable_and_advance():
    tlgpu.manual_seed(3)
    a = as_np(tlgpu.empty(1001).uniform_(1, 2))
    b = as_np(tlgpu.empty(1001).uniform_(1, 2))
    tlgpu.manual_seed(3)
    np.testing.assert_array_equal(as_np(tlgpu.empty(1001).uniform_(1, 2)), a)
    assert not np.array_equal(a, b)


def test_fill_through_strided_views(rng):
    base = rng.standard_normal((12, 10)).astype(np.float32)
    t = tlgpu.tensor(base)
    view = t.T[2:9:3]                                         # non-contiguous, offset
    tlgpu.manual_seed(11)
    view.uniform_(5.0, 6.0)
    got = as_np(t)
    mask = np.zeros((12, 10), bool)
    mask.T[2:9:3] = True
    np.testing.assert_array_equal(got[~mask], base[~mask])   # nothing outside the view is touched
    vals = got.T[2:9:3]
    assert vals.min() >= 5.0 and vals.max() < 6.0
    tlgpu.manual_seed(11)
    np.testing.assert_allclose(vals, 5.0 + as_np(tlgpu.rand(*vals.shape)), rtol=1e-6)   # row-major order
    view.normal_(0.0, 2.0)
    got2 = as_np(t)
    np.testing.assert_array_equal(got2[~mask], base[~mask])
    assert np.all(got2.T[2:9:3] != vals)


def test_fill_statistics():
    tlgpu.manual_seed(5)
    u = as_np(tlgpu.empty(200, 500).uniform_(-1.0, 3.0)).astype(np.float64)
    assert u.min() >= -1.0 and u.max() < 3.0
    assert abs(u.mean() - 1.0) < 0.02 and abs(u.var() - 16 / 12) < 0.02
    z = as_np(tlgpu.empty(200, 500).normal_(2.0, 3.0)).astype(np.float64)
    assert abs(z.mean() - 2.0) < 0.03 and abs(z.std() - 3.0) < 0.03


def test_fill_refusals_and_rules():
    with pytest.raises(TypeError, match="uniform_.*float32.*int32"):
        tlgpu.zeros(3, dtype=tlgpu.int32).uniform_()
    with pytest.raises(TypeError, match="normal_"):
        tlgpu.zeros(3, dtype=tlgpu.int32).normal_()
    w = tlgpu.zeros(4, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="normal_"):
        w.normal_()
    with pytest.raises(RuntimeError, match="uniform_"):
        w.uniform_()
    with tlgpu.no_grad():
        assert w.uniform_(-0.1, 0.1) is w
    assert w.requires_grad and w.is_leaf
    assert np.abs(as_np(w)).max() <= 0.1
    with pytest.raises(ValueError, match="uniform_"):
        tlgpu.zeros(3).uniform_(2.0, 1.0)
    with pytest.raises(ValueError, match="normal_"):
        tlgpu.zeros(3).normal_(0.0, -1.0)
    with pytest.raises((ValueError, RuntimeError), match="uniform_"):
        tlgpu.zeros(3).expand(2, 3).uniform_()
    state = tlgpu.get_rng_state()
    assert tlgpu.zeros(0, 5).uniform_().shape == (0, 5)      # zero-size: enqueues and consumes nothing
    assert tlgpu.get_rng_state() == state


def test_fill_of_recorded_non_leaf_passes_zero_gradient(rng):
    x = tlgpu.tensor(rng.standard_normal(6).astype(np.float32), requires_grad=True)
    y = x * 2.0
    y.normal_()
    (y * 1.0).sum().backward()
    np.testing.assert_array_equal(as_np(x.grad), np.zeros(6))


# ---- normal ----

def test_normal_forms(rng):
    tlgpu.manual_seed(9)
    r = tlgpu.normal(0.5, 2.0, size=(400, 300))
    assert r.shape == (400, 300)
    a = as_np(r).astype(np.float64)
    assert abs(a.mean() - 0.5) < 0.03 and abs(a.std() - 2.0) < 0.03
    assert tlgpu.normal(0.0, 1.0, size=7).shape == (7,)
    mean = rng.standard_normal((1, 500)).astype(np.float32) * 10
    std = np.abs(rng.standard_normal((300, 1))).astype(np.float32) + 0.1
    z = as_np(tlgpu.normal(tlgpu.tensor(mean), tlgpu.tensor(std))).astype(np.float64)
    assert z.shape == (300, 500)
    u = (z - mean) / std                                      # standard normal if mean and std broadcast right
    assert abs(u.mean()) < 0.02 and abs(u.std() - 1.0) < 0.02
    z = as_np(tlgpu.normal(tlgpu.tensor(mean), 0.001))
    np.testing.assert_allclose(z, np.broadcast_to(mean, z.shape), atol=0.01)
    z = as_np(tlgpu.normal(3.0, tlgpu.tensor(std)))
    assert z.shape == (300, 1)


def test_normal_gradients(rng):
    m = tlgpu.tensor(rng.standard_normal(5).astype(np.float32), requires_grad=True)
    s = tlgpu.tensor(np.abs(rng.standard_normal(5)).astype(np.float32) + 0.5, requires_grad=True)
    out = tlgpu.normal(m, s)
    out.sum().backward()
    np.testing.assert_allclose(as_np(m.grad), np.ones(5))
    z = (as_np(out) - as_np(m)) / as_np(s)
    np.testing.assert_allclose(as_np(s.grad), z, rtol=1e-4, atol=1e-5)


def test_normal_errors():
    with pytest.raises(TypeError, match="normal.*size"):
        tlgpu.normal(0.0, 1.0)
    with pytest.raises(ValueError, match="normal: std"):
        tlgpu.normal(0.0, -1.0, size=3)
    with pytest.raises(ValueError, match=r"normal.*\(3,\).*\(4,\)"):
        tlgpu.normal(tlgpu.zeros(3), tlgpu.ones(4))
    with pytest.raises(TypeError, match="normal"):
        tlgpu.normal(tlgpu.zeros(3), 1.0, size=3)
    with pytest.raises(TypeError, match="normal: mean.*float32"):
        tlgpu.normal(tlgpu.zeros(3, dtype=tlgpu.int32), 1.0)


# ---- linspace ----

@pytest.mark.parametrize("start,end,steps", [(0, 1, 5), (-3.5, 7.25, 1000), (10, -10, 33), (2.0, 2.0, 4),
                                             (1e4, 1e4 + 1, 101), (-1, 1, 2), (5, 9, 1), (0, 1, 0)])
def test_linspace_matches_numpy(start, end, steps):
    t = tlgpu.linspace(start, end, steps)
    assert t.dtype == tlgpu.float32 and t.shape == (steps,)
    ref = np.linspace(start, end, steps)
    got = as_np(t)
    scale = max(abs(start), abs(end), 1e-30)
    np.testing.assert_allclose(got, ref, rtol=0, atol=4 * np.finfo(np.float32).eps * scale)
    if steps >= 1:
        assert got[0] == np.float32(start)
    if steps >= 2:
        assert got[-1] == np.float32(end)


def test_linspace_args():
    np.testing.assert_allclose(as_np(tlgpu.linspace(start=1.0, end=2.0, steps=3, dtype=tlgpu.float32)),
                               [1.0, 1.5, 2.0])
    with pytest.raises(ValueError, match="linspace"):
        tlgpu.linspace(0, 1, -1)
    with pytest.raises(TypeError, match="linspace"):
        tlgpu.linspace(0, 1, 3, dtype=tlgpu.int32)


# ---- tril / triu ----

@pytest.mark.parametrize("shape", [(5, 5), (4, 7), (7, 3), (2, 3, 6, 4), (1, 1)])
@pytest.mark.parametrize("diagonal", [-2, -1, 0, 1, 3])
def test_tril_triu_match_numpy(rng, shape, diagonal):
    x = rng.standard_normal(shape).astype(np.float32)
    t = tlgpu.tensor(x)
    np.testing.assert_array_equal(as_np(t.tril(diagonal)), np.tril(x, diagonal))
    np.testing.assert_array_equal(as_np(tlgpu.triu(t, diagonal=diagonal)), np.triu(x, diagonal))
    np.testing.assert_array_equal(as_np(tlgpu.tril(t, diagonal=diagonal)), np.tril(x, diagonal))


def test_tril_triu_views_int32_and_inf(rng):
    x = rng.standard_normal((3, 8, 6)).astype(np.float32)
    v = tlgpu.tensor(x).permute(0, 2, 1)[:, ::2]                # non-contiguous
    ref = x.transpose(0, 2, 1)[:, ::2]
    np.testing.assert_array_equal(as_np(v.triu(-1)), np.triu(ref, -1))
    i = rng.integers(-2**31, 2**31 - 1, (4, 5), dtype=np.int64).astype(np.int32)
    r = tlgpu.tensor(i).tril()
    assert r.dtype == tlgpu.int32
    np.testing.assert_array_equal(as_np(r), np.tril(i))
    inf = np.full((3, 3), np.inf, np.float32)
    np.testing.assert_array_equal(as_np(tlgpu.tensor(inf).tril()), np.tril(inf))   # zeros, not inf * 0
    assert tlgpu.ones(0, 4, 4).tril().shape == (0, 4, 4)
    assert tlgpu.ones(3, 0).triu().shape == (3, 0)


@pytest.mark.parametrize("upper", [False, True])
def test_tril_triu_backward(rng, upper):
    x = rng.standard_normal((2, 4, 5))
    fn = (lambda t: t.triu(1)) if upper else (lambda t: tlgpu.tril(t, -1))
    ref = (lambda a: np.triu(a, 1)) if upper else (lambda a: np.tril(a, -1))
    check(lambda t: fn(t) * t, lambda a: ref(a) * a, [x])


def test_tril_errors():
    with pytest.raises(ValueError, match=r"tril.*\(5,\)"):
        tlgpu.ones(5).tril()
    with pytest.raises(ValueError, match="triu"):
        tlgpu.triu(tlgpu.tensor(1.0))
    with pytest.raises(TypeError, match="tril"):
        tlgpu.ones(3, 3).tril("a")


# ---- multinomial ----

def chi2(counts, p):
    exp = counts.sum() * p / p.sum()
    nz = exp > 0
    assert np.all(counts[~nz] == 0)
    return float(np.sum((counts[nz] - exp[nz]) ** 2 / exp[nz])), int(nz.sum()) - 1


def test_multinomial_with_replacement_frequencies(rng):
    w = np.array([0.5, 0.0, 2.0, 1.0, 0.0, 3.5, 0.25], np.float32)     # unnormalised, with zeros
    tlgpu.manual_seed(1)
    s = tlgpu.tensor(w).multinomial(40000, replacement=True)
    assert s.dtype == tlgpu.int32 and s.shape == (40000,)
    a = as_np(s)
    assert a.min() >= 0 and a.max() < 7
    stat, df = chi2(np.bincount(a, minlength=7), w.astype(np.float64))
    assert stat < 30, (stat, df)                                          # df = 4: p < 1e-5


def test_multinomial_rows_with_replacement(rng):
    w = rng.random((3, 50)).astype(np.float32) ** 3
    w[1, ::2] = 0
    a = as_np(tlgpu.multinomial(tlgpu.tensor(w), 20000, replacement=True))
    assert a.shape == (3, 20000)
    for r in range(3):
        stat, df = chi2(np.bincount(a[r], minlength=50), w[r].astype(np.float64))
        assert stat < df + 8 * np.sqrt(2 * df), (r, stat, df)


def test_multinomial_without_replacement(rng):
    w = np.array([[1.0, 0.0, 2.0, 3.0, 0.0, 4.0],
                  [0.0, 5.0, 0.0, 1.0, 1.0, 0.5]], np.float32)
    draws = 6000
    tlgpu.manual_seed(2)
    big = np.repeat(w, draws // 2, axis=0)                                # many rows: one sample set each
    a = as_np(tlgpu.tensor(big).multinomial(3))
    assert a.shape == (draws, 3)
    for r, row in enumerate(a):
        assert len(set(row.tolist())) == 3
        assert np.all(big[r][row] > 0)                                     # zero weights never appear
    for r in range(2):
        rows = a[r * (draws // 2):(r + 1) * (draws // 2)]
        p = w[r].astype(np.float64) / w[r].sum()
        stat, df = chi2(np.bincount(rows[:, 0], minlength=6), p)           # the first draw: proportional to p
        assert stat < 30, (stat, df)
        second = np.array([sum(p[j] * p[i] / (1 - p[j]) for j in range(6) if j != i and p[j] > 0)
                           for i in range(6)])                             # P(i drawn second)
        stat, df = chi2(np.bincount(rows[:, 1], minlength=6), second)
        assert stat < 30, (stat, df)


def test_multinomial_without_replacement_all_categories_and_views(rng):
    w = rng.random((9, 4)).astype(np.float32) + 0.1
    t = tlgpu.tensor(w).T                                                  # (4, 9), non-contiguous
    a = as_np(t.multinomial(9))
    for row in a:
        assert sorted(row.tolist()) == list(range(9))
    one = as_np(tlgpu.tensor(w[0]).multinomial(1))
    assert one.shape == (1,) and 0 <= one[0] < 4


def test_multinomial_repeatable_and_lazy():
    w = tlgpu.tensor(np.array([[0.2, 0.3, 0.5], [0.6, 0.0, 0.4]], np.float32))
    tlgpu.manual_seed(4)
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    a = [w.multinomial(2), w.multinomial(5, replacement=True), w.multinomial(1)]
    if os.environ.get("TLGPU_SYNC") != "1":                               # (that mode waits after every op)
        assert tlgpu.stream_stats()["waits"] == 0                         # no host sync
    a = [as_np(x) for x in a]
    tlgpu.manual_seed(4)
    b = [as_np(w.multinomial(2)), as_np(w.multinomial(5, replacement=True)), as_np(w.multinomial(1))]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_multinomial_unreachable_samples_are_minus_one():
    w = tlgpu.tensor(np.array([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0]], np.float32))
    np.testing.assert_array_equal(as_np(w.multinomial(2, replacement=True))[0], [-1, -1])
    np.testing.assert_array_equal(as_np(w.multinomial(2)), [[-1, -1], [1, -1]])


def test_multinomial_errors():
    w = tlgpu.ones(2, 3)
    with pytest.raises(ValueError, match=r"multinomial.*4 > 3.*\(2, 3\).*without replacement"):
        w.multinomial(4)
    assert w.multinomial(4, replacement=True).shape == (2, 4)
    with pytest.raises(ValueError, match="multinomial"):
        w.multinomial(0)
    with pytest.raises(ValueError, match=r"multinomial.*\(2, 3, 1\)"):
        tlgpu.ones(2, 3, 1).multinomial(1)
    with pytest.raises(ValueError, match="multinomial"):
        tlgpu.ones(0).multinomial(1)
    with pytest.raises(TypeError, match="multinomial.*float32"):
        tlgpu.ones(3, dtype=tlgpu.int32).multinomial(1)
    assert tlgpu.ones(0, 3).multinomial(2).shape == (0, 2)


def test_argument_errors_name_the_op():
    with pytest.raises(TypeError, match="uniform_: b must be a number"):
        tlgpu.zeros(3).uniform_(0.0, "x")
    with pytest.raises(TypeError, match="normal_: mean"):
        tlgpu.zeros(3).normal_(mean=None)
    with pytest.raises(TypeError, match="linspace.*steps"):
        tlgpu.linspace(0, 1, 2.5)
    with pytest.raises(TypeError, match="linspace.*start and end"):
        tlgpu.linspace("a", 1, 2)
    with pytest.raises(TypeError, match="multinomial"):
        tlgpu.ones(3).multinomial("2")
