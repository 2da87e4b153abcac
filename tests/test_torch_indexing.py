"""PyTorch indexing forms composed in tlgpu/_indexing.py (what nanoGPT's generate() and get_batch use), and the
torch.distributions submodule paths, against numpy on random inputs."""
import numpy as np
import pytest

import tlgpu
from gradcheck import check


@pytest.fixture
def a(rng):
    return rng.standard_normal((3, 5, 4)).astype(np.float32)


@pytest.mark.parametrize("key", [(slice(None), [-1], slice(None)), (0, [1, 3]), (slice(None), slice(None), [2, 0, 2]),
                                 (None, slice(1, 3), [0]), ([2, 0], slice(None), 1), (slice(None), np.array([4, 1]))])
def test_one_integer_list_in_a_tuple(a, key):
    x = tlgpu.tensor(a)
    np.testing.assert_array_equal(x[key].numpy(), a[key])
    tkey = tuple(tlgpu.tensor(np.asarray(k, np.int32)) if isinstance(k, list) else k for k in key)
    np.testing.assert_array_equal(x[tkey].numpy(), a[key])


def test_list_in_a_tuple_is_differentiable(a):
    check(lambda t: t[:, [-1, 0], :] * 2.0, lambda t: t[:, [-1, 0], :] * 2.0, [a])


def test_boolean_mask_assignment_is_masked_fill(a, rng):
    x = tlgpu.tensor(a)
    v = tlgpu.tensor(a[:, :, :1])                         # nanoGPT's top-k cut: logits[logits < v[:, [-1]]] = -inf
    y = x.clone()
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    y[y < v] = -float("inf")
    assert tlgpu.stream_stats()["waits"] == 0            # no host wait: masked_fill_ on the device
    ref = a.copy()
    ref[a < a[:, :, :1]] = -np.inf
    np.testing.assert_array_equal(y.numpy(), ref)
    rows = rng.random(3) < 0.5                            # a numpy bool mask over the leading dim, a tensor value
    y = x.clone()
    y[rows] = tlgpu.tensor(2.5)
    ref = a.copy()
    ref[rows] = 2.5
    np.testing.assert_array_equal(y.numpy(), ref)
    with pytest.raises(IndexError, match="leading dims"):
        y[np.ones((5,), bool)] = 0.0


def test_boolean_mask_selection_reads_back_and_keeps_the_graph(a, rng):
    x = tlgpu.tensor(a)
    np.testing.assert_array_equal(x[x > 0.2].numpy(), a[a > 0.2])
    rows = rng.random(3) < 0.6
    np.testing.assert_array_equal(x[rows].numpy(), a[rows])
    np.testing.assert_array_equal(x[tlgpu.tensor(rows)].numpy(), a[rows])
    check(lambda t: t[a > 0] ** 2, lambda t: t[a > 0] ** 2, [a])


def test_one_element_int_tensor_is_an_index(rng):
    data = rng.standard_normal(50).astype(np.float32)
    i = tlgpu.randint(0, 40, ())
    j = int(i)
    np.testing.assert_array_equal(data[i:i + 5], data[j:j + 5])
    assert list(range(10))[tlgpu.tensor(np.int32(3))] == 3
    ix = tlgpu.randint(0, 40, (4,))
    got = [data[k:k + 3] for k in ix]                     # nanoGPT's get_batch: a slice per sampled offset
    np.testing.assert_array_equal(np.stack(got), np.stack([data[k:k + 3] for k in ix.numpy()]))
    with pytest.raises(TypeError, match="int32"):
        [0, 1][tlgpu.tensor(1.0)]
    with pytest.raises(TypeError, match="one-element"):
        [0, 1][tlgpu.tensor(np.array([0, 1], np.int32))]


def test_distribution_submodule_paths():
    from tlgpu.distributions.categorical import Categorical
    from tlgpu.distributions.kl import kl_divergence
    from tlgpu.distributions.normal import Normal
    p = Normal(tlgpu.tensor([0.0, 1.0]), tlgpu.tensor([1.0, 2.0]))
    q = Normal(tlgpu.tensor([0.5, 1.0]), tlgpu.tensor([1.0, 1.0]))
    ref = np.log(np.array([1.0, 1.0]) / [1.0, 2.0]) + (np.array([1.0, 4.0]) + np.array([0.25, 0.0])) / 2 - 0.5
    np.testing.assert_allclose(kl_divergence(p, q).numpy(), ref, rtol=1e-5, atol=1e-6)
    assert Categorical is tlgpu.distributions.Categorical and Normal is tlgpu.distributions.Normal
