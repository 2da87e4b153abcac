"""PyTorch's spellings in tlgpu's Python layer (issue 24): device arguments against the one device, dtype names,
legacy constructors, Tensor.to/cpu/cuda/type/long/view_as/ravel/clip/norm/data, inference_mode,
set_grad_enabled, equal, load(map_location=), Module.to/cpu/cuda/float, nn.LeakyReLU. Values against numpy on
random inputs, gradients by central differences (gradcheck.check)."""
import io
import math

import numpy as np
import pytest

import tlgpu
from gradcheck import check

SAME = ["cpu", "cuda", "cuda:0", "cpu:0", " cuda ", 0, None]
OTHER = ["cuda:1", "mps", "xla", "meta", "garbage", "cuda:x", "", 1, -1]


def f32(a):
    return np.asarray(a, dtype=np.float32)


# ---- devices ----

@pytest.mark.parametrize("spec", SAME)
def test_device_names_the_one_device(spec):
    d = tlgpu.device()
    assert tlgpu.device(spec) == d
    assert tlgpu.device(d) == d
    x = tlgpu.randn(3)
    assert x.to(spec) is x and x.cuda(spec) is x
    assert x.device == d


def test_device_with_index_and_the_torch_idiom():
    assert tlgpu.device("cuda", 0) == tlgpu.device()
    dev = tlgpu.device("cuda" if tlgpu.cuda.is_available() else "cpu")
    assert dev == tlgpu.device()
    assert tlgpu.cuda.is_available() == (tlgpu.device().type == "gpu")
    assert tlgpu.cuda.device_count() == int(tlgpu.cuda.is_available())
    assert tlgpu.cuda.is_bf16_supported() is False
    with pytest.raises(ValueError, match="TLGPU_DEVICE"):
        tlgpu.device("cuda", 1)


@pytest.mark.parametrize("spec", OTHER)
def test_other_devices_are_errors_that_say_how_to_choose(spec):
    x = tlgpu.zeros(2)
    for call in (lambda: tlgpu.device(spec), lambda: x.to(spec), lambda: x.cuda(spec),
                 lambda: tlgpu.zeros(2, device=spec), lambda: tlgpu.tensor([1.0], device=spec),
                 lambda: tlgpu.nn.Linear(2, 2).to(spec), lambda: tlgpu.zeros_like(x, device=spec)):
        with pytest.raises(ValueError, match="one device.*TLGPU_DEVICE"):
            call()


def test_device_arguments_of_other_types():
    with pytest.raises(TypeError, match="a device is"):
        tlgpu.zeros(2, device=1.5)
    with pytest.raises(TypeError, match="a device is"):
        tlgpu.device(True)
    other = tlgpu.Device(**{**tlgpu._C._device(), "name": "another"})
    with pytest.raises(ValueError, match="does not have"):
        tlgpu.zeros(2).to(other)


def test_cpu_numpy_is_a_sync_point_and_pin_memory_is_self(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    t = tlgpu.tensor(a) * 2
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    c = t.cpu().pin_memory()
    assert c is t and tlgpu.stream_stats()["waits"] == 0       # .cpu() itself waits for nothing
    np.testing.assert_array_equal(c.numpy(), a * 2)
    assert tlgpu.stream_stats()["waits"] == 1


# ---- creation with device= ----

CREATE = {
    "zeros": (lambda **k: tlgpu.zeros(2, 3, **k), lambda: np.zeros((2, 3))),
    "ones": (lambda **k: tlgpu.ones((2, 3), **k), lambda: np.ones((2, 3))),
    "full": (lambda **k: tlgpu.full((2, 3), 1.5, **k), lambda: np.full((2, 3), 1.5)),
    "tensor": (lambda **k: tlgpu.tensor([[1.0, 2.0]], **k), lambda: np.array([[1.0, 2.0]])),
    "as_tensor": (lambda **k: tlgpu.as_tensor(np.arange(4.0), **k), lambda: np.arange(4.0)),
    "arange": (lambda **k: tlgpu.arange(0.0, 2.0, 0.5, **k), lambda: np.arange(0.0, 2.0, 0.5)),
    "zeros_like": (lambda **k: tlgpu.zeros_like(tlgpu.ones(2, 2), **k), lambda: np.zeros((2, 2))),
    "ones_like": (lambda **k: tlgpu.ones_like(tlgpu.zeros(2, 2), **k), lambda: np.ones((2, 2))),
    "full_like": (lambda **k: tlgpu.full_like(tlgpu.zeros(2), 7.0, **k), lambda: np.full(2, 7.0)),
}


@pytest.mark.parametrize("name", sorted(CREATE))
@pytest.mark.parametrize("spec", ["cpu", "cuda", "cuda:0", None])
def test_creation_takes_device(name, spec):
    make, want = CREATE[name]
    t = make(device=spec)
    np.testing.assert_array_equal(t.numpy(), want().astype(np.float32))
    assert t.dtype == np.float32 and t.device == tlgpu.device()


def test_random_creation_takes_device():
    tlgpu.manual_seed(3)
    a = tlgpu.rand(1000, device="cuda").numpy()
    b = tlgpu.randn(1000, device="cpu").numpy()
    assert 0 <= a.min() and a.max() < 1 and abs(a.mean() - 0.5) < 0.05
    assert abs(b.mean()) < 0.15 and abs(b.std() - 1) < 0.1
    t = tlgpu.zeros(500)
    for fn in (tlgpu.rand_like, tlgpu.randn_like, tlgpu.empty_like):
        assert fn(t, device="cuda").shape == (500,)
    assert tlgpu.empty(2, 3, device="cuda").shape == (2, 3)
    r = tlgpu.randint(5, (2000,), device="cuda").numpy()          # torch's randint(high, size)
    assert r.dtype == np.int32 and r.min() == 0 and r.max() == 4
    r = tlgpu.randint(-3, 3, size=(2000,), device="cpu").numpy()
    assert r.min() == -3 and r.max() == 2


def test_creation_requires_grad_and_dtype_names():
    for t in (tlgpu.zeros(3, requires_grad=True), tlgpu.ones(3, requires_grad=True),
              tlgpu.randn(3, requires_grad=True), tlgpu.tensor([1.0, 2.0], requires_grad=True),
              tlgpu.zeros_like(tlgpu.ones(3), requires_grad=True)):
        assert t.requires_grad and t.is_leaf
    t = tlgpu.zeros(3, requires_grad=True)
    (t * t + t).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), np.ones(3, np.float32))
    for name in ("long", "int64", "int", "int32"):
        x = tlgpu.tensor([1, -2, 3], dtype=getattr(tlgpu, name))
        assert x.dtype == np.int32 and x.tolist() == [1, -2, 3]
    assert tlgpu.zeros(2, dtype=tlgpu.float).dtype == np.float32
    assert tlgpu.arange(4, dtype=tlgpu.long).dtype == np.int32
    assert tlgpu.zeros_like(np.zeros(3, np.int64)).dtype == np.int32      # numpy input: tlgpu's dtype for it
    with pytest.raises(OverflowError, match="int32"):
        tlgpu.tensor(np.array([2**40]), dtype=tlgpu.long)


@pytest.mark.parametrize("name,hint", [("float64", "float32"), ("double", "float32"), ("bool", "float32 masks")])
def test_unsupported_dtype_names_raise(name, hint):
    dt = getattr(tlgpu, name)
    x = tlgpu.ones(2)
    for call in (lambda: tlgpu.zeros(2, dtype=dt), lambda: tlgpu.tensor([1.0], dtype=dt), lambda: x.to(dt),
                 lambda: x.to("cuda", dt), lambda: tlgpu.zeros_like(x, dtype=dt), lambda: x.type(dt)):
        with pytest.raises(TypeError, match=hint):
            call()


# ---- legacy constructors ----

def test_tensor_constructor_is_torchs_float_tensor(rng):
    done = rng.random(8) < 0.5                                   # CleanRL: torch.Tensor(next_done)
    t = tlgpu.Tensor(done)
    assert t.dtype == np.float32 and isinstance(t, tlgpu.Tensor)
    np.testing.assert_array_equal(t.numpy(), done.astype(np.float32))
    ints = rng.integers(-5, 5, (3, 4))
    np.testing.assert_array_equal(tlgpu.Tensor(ints).numpy(), ints.astype(np.float32))
    np.testing.assert_array_equal(tlgpu.Tensor([1, 2]).numpy(), f32([1, 2]))
    np.testing.assert_array_equal(tlgpu.Tensor((2, 3)).numpy(), f32([2, 3]))   # a tuple is data, as in torch
    assert tlgpu.Tensor(2, 3).shape == (2, 3) and tlgpu.Tensor(4).shape == (4,)
    assert tlgpu.Tensor().shape == (0,)
    assert tlgpu.Tensor(np.array(2.5)).shape == () and tlgpu.Tensor(np.array(2.5)).item() == 2.5
    with pytest.raises(TypeError, match="float32"):
        tlgpu.Tensor([1], dtype=tlgpu.int32)


def test_legacy_typed_constructors(rng):
    a = rng.standard_normal(5) * 4
    np.testing.assert_array_equal(tlgpu.FloatTensor(a).numpy(), a.astype(np.float32))
    lt = tlgpu.LongTensor(np.array([3, -1, 7], dtype=np.int64))
    assert lt.dtype == np.int32 and lt.tolist() == [3, -1, 7]
    assert tlgpu.IntTensor(2, 2).dtype == np.int32 and tlgpu.LongTensor(3).shape == (3,)
    assert isinstance(tlgpu.ones(2), tlgpu.FloatTensor) and not isinstance(tlgpu.ones(2), tlgpu.LongTensor)
    assert isinstance(lt, tlgpu.LongTensor) and isinstance(lt, tlgpu.Tensor)


# ---- Tensor methods ----

def test_to_forms_and_type(rng):
    a = (rng.standard_normal(6) * 5).astype(np.float32)
    x = tlgpu.tensor(a)
    i = x.to(tlgpu.long)
    assert i.dtype == np.int32 and i.tolist() == a.astype(np.int32).tolist()       # truncation, like torch
    assert x.to("cuda", tlgpu.int64).dtype == np.int32
    assert x.to(device="cpu", dtype=tlgpu.int32).dtype == np.int32
    assert x.to(i).dtype == np.int32 and i.to(x).dtype == np.float32
    assert x.to(tlgpu.float32) is x and x.to(x) is x
    c = x.to("cuda", copy=True, non_blocking=True)
    assert c is not x
    c.add_(1.0)
    np.testing.assert_array_equal(x.numpy(), a)
    assert x.long().tolist() == a.astype(np.int32).tolist()
    assert x.type() == "tlgpu.FloatTensor" and i.type() == "tlgpu.IntTensor"
    assert x.type(tlgpu.int32).dtype == np.int32 and x.type("torch.LongTensor").dtype == np.int32
    assert x.type(tlgpu.LongTensor).dtype == np.int32 and i.type(tlgpu.FloatTensor).dtype == np.float32
    assert i.type("torch.cuda.FloatTensor").dtype == np.float32
    with pytest.raises(TypeError, match="unknown tensor type"):
        x.type("torch.HalfTensor")
    with pytest.raises(TypeError, match="at most"):
        x.to("cuda", tlgpu.float, "cpu")


def test_view_as_ravel_clip(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    x = tlgpu.tensor(a)
    np.testing.assert_array_equal(x.view_as(tlgpu.zeros(4, 3)).numpy(), a.reshape(4, 3))
    np.testing.assert_array_equal(x.T.ravel().numpy(), a.T.ravel())
    np.testing.assert_array_equal(x.clip(-0.5, 0.5).numpy(), np.clip(a, -0.5, 0.5))
    np.testing.assert_array_equal(tlgpu.clip(x, min=0.0).numpy(), np.maximum(a, 0))
    y = tlgpu.tensor(a)
    y.clip_(-0.1, 0.2)
    np.testing.assert_array_equal(y.numpy(), np.clip(a, -0.1, 0.2))
    check(lambda t: t.view_as(tlgpu.zeros(12)) * t.ravel(), lambda t: t.reshape(12) ** 2, [a])
    check(lambda t: t.clip(-0.5, 0.5), lambda t: np.clip(t, -0.5, 0.5), [a])


@pytest.mark.parametrize("p,ref", [(2, lambda a, ax, kd: np.sqrt((a * a).sum(axis=ax, keepdims=kd))),
                                   ("fro", lambda a, ax, kd: np.sqrt((a * a).sum(axis=ax, keepdims=kd))),
                                   (1, lambda a, ax, kd: np.abs(a).sum(axis=ax, keepdims=kd)),
                                   (math.inf, lambda a, ax, kd: np.abs(a).max(axis=ax, keepdims=kd)),
                                   (-math.inf, lambda a, ax, kd: np.abs(a).min(axis=ax, keepdims=kd))])
@pytest.mark.parametrize("dim,keepdim", [(None, False), (1, False), (0, True), ((0, 1), False)])
def test_norm_values_and_gradients(rng, p, ref, dim, keepdim):
    a = rng.standard_normal((3, 5))
    check(lambda t: t.norm(p=p, dim=dim, keepdim=keepdim), lambda t: ref(t, dim, keepdim), [a])
    check(lambda t: tlgpu.norm(t, p, dim, keepdim), lambda t: ref(t, dim, keepdim), [a])


def test_norm_at_zero_nan_and_errors():
    z = tlgpu.zeros(4, requires_grad=True)
    n = z.norm()
    n.backward()
    assert n.item() == 0.0 and np.array_equal(z.grad.numpy(), np.zeros(4, np.float32))   # torch's 0 gradient
    assert math.isnan(tlgpu.tensor([1.0, np.nan]).norm().item())
    assert tlgpu.tensor([3, 4]).norm().item() == 5.0                                     # int32: in float32
    with pytest.raises(ValueError, match="p=3"):
        tlgpu.ones(2).norm(p=3)


def test_data_shares_storage_and_the_target_network_idiom(rng):
    tau = 0.005
    q, target = tlgpu.nn.Linear(4, 3), tlgpu.nn.Linear(4, 3)
    want = {k: tau * q.state_dict()[k] + (1 - tau) * v for k, v in target.state_dict().items()}
    for target_param, param in zip(target.parameters(), q.parameters()):      # CleanRL's DQN / SAC update
        target_param.data.copy_(tau * param.data + (1 - tau) * target_param.data)
    for k, v in target.state_dict().items():
        np.testing.assert_allclose(v, want[k], rtol=1e-6, atol=1e-7)
    w = q.weight
    d = w.data
    assert not d.requires_grad and d.is_leaf and w.requires_grad
    d.mul_(2.0)                                                               # writes through to w
    np.testing.assert_array_equal(w.numpy(), d.numpy())
    new = rng.standard_normal((3, 4)).astype(np.float32)
    w.data = tlgpu.tensor(new)                                                # same shape: copies
    np.testing.assert_array_equal(w.numpy(), new)
    assert w.requires_grad and w.is_leaf
    with pytest.raises(ValueError, match="shapes and dtypes must match"):
        w.data = tlgpu.zeros(2)
    with pytest.raises(TypeError, match="assign a Tensor"):
        w.data = new


def test_data_write_after_save_refuses_backward():
    w = tlgpu.ones(3, requires_grad=True)
    y = (w * w).sum()
    w.data.add_(1.0)
    with pytest.raises(RuntimeError, match="modified in place"):
        y.backward()


# ---- grad modes, equal, load ----

def test_inference_mode_and_set_grad_enabled():
    w = tlgpu.ones(2, requires_grad=True)
    with tlgpu.inference_mode():
        assert not tlgpu.is_grad_enabled() and not (w * 2).requires_grad
    assert tlgpu.is_grad_enabled()
    with tlgpu.inference_mode(False):
        assert tlgpu.is_grad_enabled() and (w * 2).requires_grad

    @tlgpu.inference_mode()
    def f(x):
        return x * 2

    @tlgpu.inference_mode
    def g(x):
        return x * 3

    @tlgpu.no_grad
    def h(x):
        return x * 4
    assert not f(w).requires_grad and not g(w).requires_grad and not h(w).requires_grad
    np.testing.assert_array_equal(g(w).numpy(), f32([3, 3]))
    assert tlgpu.is_grad_enabled()
    tlgpu.set_grad_enabled(False)
    assert not tlgpu.is_grad_enabled()
    tlgpu.set_grad_enabled(True)
    with tlgpu.set_grad_enabled(False):
        assert not (w * 2).requires_grad
    assert tlgpu.is_grad_enabled()

    @tlgpu.set_grad_enabled(False)
    def k(x):
        return x * 2
    assert tlgpu.is_grad_enabled() and not k(w).requires_grad and tlgpu.is_grad_enabled()


def test_equal(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    x = tlgpu.tensor(a)
    assert tlgpu.equal(x, tlgpu.tensor(a.copy())) is True
    b = a.copy()
    b[2, 3] += 1
    assert tlgpu.equal(x, tlgpu.tensor(b)) is False
    assert tlgpu.equal(x, x.reshape(4, 3)) is False
    assert tlgpu.equal(tlgpu.tensor([1, 2]), tlgpu.tensor([1.0, 2.0])) is True
    assert tlgpu.equal(tlgpu.zeros(0, 3), tlgpu.zeros(0, 3)) is True
    assert tlgpu.equal(tlgpu.tensor([np.nan]), tlgpu.tensor([np.nan])) is False


@pytest.mark.parametrize("loc", ["cpu", "cuda", "cuda:0", None, {"cuda:0": "cpu"}])
def test_load_map_location(tmp_path, rng, loc):
    sd = {"w": rng.standard_normal((3, 2)).astype(np.float32), "i": np.arange(4, dtype=np.int32)}
    path = tmp_path / "m.safetensors"
    tlgpu.save(sd, path)
    out = tlgpu.load(path, map_location=loc, weights_only=True)
    assert out["w"].dtype == np.float32 and out["i"].dtype == np.int32
    np.testing.assert_array_equal(out["w"].numpy(), sd["w"])
    np.testing.assert_array_equal(out["i"].numpy(), sd["i"])
    with open(path, "rb") as f:
        np.testing.assert_array_equal(tlgpu.load(f)["w"].numpy(), sd["w"])
    np.testing.assert_array_equal(tlgpu.load(io.BytesIO(path.read_bytes()))["i"].numpy(), sd["i"])


def test_load_map_location_errors(tmp_path):
    path = tmp_path / "m.safetensors"
    tlgpu.save({"w": np.zeros(2, np.float32)}, path)
    with pytest.raises(ValueError, match="TLGPU_DEVICE"):
        tlgpu.load(path, map_location="cuda:1")
    with pytest.raises(TypeError, match="function"):
        tlgpu.load(path, map_location=lambda storage, loc: storage)


# ---- modules ----

def test_module_device_and_dtype_moves(rng):
    m = tlgpu.nn.Sequential(tlgpu.nn.Linear(4, 3), tlgpu.nn.Tanh())
    m.register_buffer("steps", tlgpu.zeros(1, dtype=tlgpu.int32))
    before = m.state_dict()
    for r in (m.to("cuda"), m.to(tlgpu.device()), m.to("cpu", tlgpu.float32), m.to(tlgpu.float),
              m.to(tlgpu.zeros(1)), m.to(device="cuda:0", dtype=tlgpu.float32), m.cpu(), m.cuda(), m.cuda(0),
              m.float()):
        assert r is m
    assert m.steps.dtype == np.int32
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v, before[k])
    x = rng.standard_normal((5, 4)).astype(np.float32)
    w, b = before["0.weight"], before["0.bias"]
    np.testing.assert_allclose(m(x.copy()).numpy(), np.tanh(x @ w.T + b), rtol=1e-5, atol=1e-6)
    for call in (m.double, lambda: m.to(tlgpu.int32), lambda: m.to(tlgpu.long)):
        with pytest.raises(TypeError):
            call()


def leaky_np(a, s):
    return np.where(a > 0, a, a * s)


@pytest.mark.parametrize("slope", [0.01, 0.2])
def test_leaky_relu_module(rng, slope):
    a = rng.standard_normal((4, 6))
    mod = tlgpu.nn.LeakyReLU(slope) if slope != 0.01 else tlgpu.nn.LeakyReLU()
    check(lambda t: mod(t), lambda t: leaky_np(t, slope), [a])
    out = mod(tlgpu.tensor(f32([np.nan, -np.inf, 0.0, -2.0, 3.0]))).numpy()
    assert np.isnan(out[0]) and out[1] == -np.inf and out[2] == 0.0
    np.testing.assert_allclose(out[3:], f32([-2 * slope, 3.0]), rtol=1e-6)
    assert "negative_slope" in repr(mod)


def test_inplace_activations_write_their_input_and_keep_gradients(rng):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    lin = tlgpu.nn.Linear(6, 6)
    w, b = lin.weight.numpy(), lin.bias.numpy()
    for mod, ref in ((tlgpu.nn.LeakyReLU(0.1, inplace=True), lambda h: leaky_np(h, 0.1)),
                     (tlgpu.nn.ReLU(inplace=True), lambda h: np.maximum(h, 0))):
        x = tlgpu.tensor(a, requires_grad=True)
        h = lin(x)
        out = mod(h)
        assert out is h
        want = ref(a @ w.T + b)
        np.testing.assert_allclose(h.numpy(), want, rtol=1e-5, atol=1e-6)
        out.sum().backward()
        slope = (a @ w.T + b > 0) + (0.1 if isinstance(mod, tlgpu.nn.LeakyReLU) else 0.0) * (a @ w.T + b <= 0)
        np.testing.assert_allclose(x.grad.numpy(), slope @ w, rtol=1e-4, atol=1e-5)
        lin.zero_grad()
    t = tlgpu.tensor(a)                                  # no graph: written in place directly
    assert tlgpu.nn.ReLU(inplace=True)(t) is t
    np.testing.assert_array_equal(t.numpy(), np.maximum(a, 0))


def test_backends_switches():
    cudnn = tlgpu.backends.cudnn
    cudnn.deterministic, cudnn.benchmark = True, True
    assert cudnn.deterministic is True and cudnn.benchmark is True
    cudnn.deterministic, cudnn.benchmark = False, False
    with pytest.raises(AttributeError, match="no setting"):
        cudnn.determinstic = True                                  # a typo is an error, not a new attribute
    assert cudnn.allow_tf32 is True                               # torch's default
    try:
        tlgpu.backends.cuda.matmul.allow_tf32 = True              # nanoGPT's two lines
        cudnn.allow_tf32 = True
        assert tlgpu.get_matmul_precision() == "high"
        with pytest.raises(ValueError, match="matmul.allow_tf32 = False first"):
            cudnn.allow_tf32 = False                              # the convolutions would still use TF32
        tlgpu.backends.cuda.matmul.allow_tf32 = False
        cudnn.allow_tf32 = False
        with pytest.raises(ValueError, match="cudnn.allow_tf32 is False"):
            tlgpu.backends.cuda.matmul.allow_tf32 = True
        assert tlgpu.get_matmul_precision() == "highest"
    finally:
        tlgpu.backends.cuda.matmul.allow_tf32 = False
        cudnn.allow_tf32 = True
    assert tlgpu.get_matmul_precision() == "highest"


def test_star_import_keeps_the_builtins():
    ns = {}
    exec("from tlgpu import *", ns)
    assert "float" not in ns and "int" not in ns and "bool" not in ns
    assert ns["long"] == np.int32 and ns["zeros"] is tlgpu.zeros and ns["Tensor"] is tlgpu.Tensor
    assert tlgpu.float is tlgpu.float32 and tlgpu.int is tlgpu.int32 and tlgpu.bool == np.bool_
