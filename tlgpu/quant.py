"""q4_0 weights on the device: llama.cpp's 4.5-bit format (blocks of 32 weights: one fp16 scale d and 16
bytes of nibbles; byte j holds element j in its low nibble and element j+16 in its high nibble; the
value is d*(q-8)).

Quantization runs once on the host in numpy, exactly as llama.cpp's reference quantizer
(``quantize_row_q4_0_ref``: d = the element of largest magnitude / -8, q = min(15, trunc(x/d + 8.5))),
so it is bit-exact with it. On the device a ``Q4_0`` keeps the "flat" layout of ggml's _flat kernels:
the nibbles as int32 words (4 per block, little-endian) and the fp16 scales packed two to an int32
word, both row-major by (row, block). ``to_bytes()``/``from_bytes()`` convert to and from llama.cpp's
interleaved ``block_q4_0`` array (18 bytes per block).

    w = tlgpu.quant.quantize_q4_0(np_weights)          # (N, K), K % 32 == 0
    y = tlgpu.quant.matmul(x, w)                       # x @ dequantize(w).T, x (..., K) -> (..., N)
    e = tlgpu.quant.embedding(w, ids)                  # dequantized rows w[ids]

These are inference ops: no autograd.
"""
import numpy as np

from . import _C
from ._C import Tensor

QK4_0 = 32
MV_MAX_ROWS = 8            # activation rows one mul_mv launch takes
MV_CHUNK_ROWS = 64         # up to this many rows of a big weight: mul_mv launches of 8 rows
MV_CHUNK_MIN = 1 << 20     # weights of at least this many elements (smaller: launches cost more than dequantizing)


def quantize_q4_0_numpy(w):
    """(qs uint8 (N, K/32, 16), d float16 (N, K/32)) of a float array (N, K): llama.cpp's reference rounding."""
    w = np.asarray(w, dtype=np.float32)
    if w.ndim != 2 or w.shape[1] % QK4_0 != 0:
        raise ValueError(f"quantize_q4_0: expected a 2-D array whose rows are a multiple of {QK4_0} long, "
                         f"got shape {w.shape}")
    if not np.isfinite(w).all():                          # a NaN or inf scale would corrupt its whole block
        raise ValueError(f"quantize_q4_0: the weights (shape {w.shape}) hold NaN or inf")
    n, k = w.shape
    x = w.reshape(n, k // QK4_0, QK4_0)
    idx = np.abs(x).argmax(-1)[..., None]                 # first element of largest magnitude, as llama.cpp
    mx = np.take_along_axis(x, idx, -1)[..., 0]
    d = mx / np.float32(-8.0)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1.0) / d, np.float32(0.0)).astype(np.float32)
    xs = x * inv[..., None]
    q = np.minimum(15, (xs + np.float32(8.5)).astype(np.int8)).astype(np.uint8)   # C's truncating cast
    qs = q[..., :16] | (q[..., 16:] << 4)
    return qs.astype(np.uint8), d.astype(np.float16)


class Q4_0:
    """A q4_0 matrix of `shape` (N, K) in device memory (see the module docstring for the layout)."""

    def __init__(self, qs, d, shape):
        n, k = shape
        nblk = n * (k // QK4_0)
        qs = np.ascontiguousarray(qs, dtype=np.uint8).reshape(nblk * 16)
        d16 = np.ascontiguousarray(d, dtype=np.float16).reshape(nblk)
        if nblk % 2:
            d16 = np.concatenate([d16, np.zeros(1, np.float16)])
        self.shape = (int(n), int(k))
        self.qs = _C.tensor(qs.view("<u4").view(np.int32))
        self.d = _C.tensor(d16.view(np.int32))

    @property
    def nbytes(self):
        """Bytes of weight data (18 per block of 32, as in llama.cpp)."""
        return self.shape[0] * self.shape[1] // QK4_0 * 18

    def dequantize(self):
        """float32 Tensor (N, K)."""
        return _C._q4_0_dequantize(self.qs, self.d, *self.shape)

    def numpy_blocks(self):
        """(qs uint8 (N, K/32, 16), d float16 (N, K/32)) read back from the device."""
        n, k = self.shape
        nb = k // QK4_0
        qs = self.qs.numpy().view(np.uint8).reshape(n, nb, 16)
        d = self.d.numpy().view(np.float16)[: n * nb].reshape(n, nb)
        return qs, d

    def to_bytes(self):
        """llama.cpp's block_q4_0 array: per block the fp16 d then 16 bytes of nibbles."""
        qs, d = self.numpy_blocks()
        blocks = np.empty(qs.shape[:2] + (18,), np.uint8)
        blocks[..., :2] = d[..., None].view(np.uint8)
        blocks[..., 2:] = qs
        return blocks.tobytes()

    @classmethod
    def from_bytes(cls, data, shape):
        n, k = shape
        if k % QK4_0 != 0 or len(data) != n * k // QK4_0 * 18:
            raise ValueError(f"Q4_0.from_bytes: {len(data)} bytes do not hold a q4_0 matrix of shape {shape}")
        blocks = np.frombuffer(data, np.uint8).reshape(n, k // QK4_0, 18)
        return cls(blocks[..., 2:], blocks[..., :2].copy().view(np.float16)[..., 0], shape)

    def __repr__(self):
        return f"Q4_0(shape={self.shape}, nbytes={self.nbytes})"


def quantize_q4_0(array):
    """A Q4_0 of a float (N, K) array (numpy or Tensor), K a multiple of 32."""
    if isinstance(array, Tensor):
        array = array.numpy()
    w = np.asarray(array, dtype=np.float32)
    qs, d = quantize_q4_0_numpy(w)
    return Q4_0(qs, d, w.shape)


def dequantize(q):
    """float32 Tensor of a Q4_0."""
    return _check(q, "dequantize").dequantize()


def _check(q, op):
    if not isinstance(q, Q4_0):
        raise TypeError(f"{op}: expected a Q4_0 (from tlgpu.quant.quantize_q4_0), got {type(q).__name__}")
    return q


def matmul(x, w):
    """x @ w.T for float32 x (..., K) and a q4_0 w (N, K) (the layout of a linear layer's weight): (..., N).
    Up to 8 rows run one mul_mv launch (each weight byte read once); up to 64 rows of a weight of 1M
    elements or more, one per 8 rows (the q4_0 weights read rows/8 times: less traffic than a float32 copy
    of them; on an H200 a 64-token prefill of the 1.7 GB decoder went from 13.1 to 8.2 ms, while the tiny
    decoder's small weights were 4 x slower that way); otherwise w is dequantized once for the GEMM."""
    w = _check(w, "matmul")
    if isinstance(w, Q4_0) and isinstance(x, Q4_0):
        raise TypeError("matmul: the activations must be float32")
    if not isinstance(x, Tensor):
        x = _C.tensor(np.asarray(x, dtype=np.float32))
    n, k = w.shape
    if x.ndim == 0 or x.shape[-1] != k:
        raise ValueError(f"matmul (q4_0): x {tuple(x.shape)} and weights {w.shape}: last dims differ")
    lead = tuple(x.shape[:-1])
    rows = int(np.prod(lead)) if lead else 1
    x2 = x.reshape(rows, k)
    if rows <= MV_MAX_ROWS:
        y = _C._q4_0_mul_mv(x2, w.qs, w.d, n, k)
    elif rows <= MV_CHUNK_ROWS and n * k >= MV_CHUNK_MIN:
        y = _C.cat([_C._q4_0_mul_mv(x2[i:i + MV_MAX_ROWS], w.qs, w.d, n, k) for i in range(0, rows, MV_MAX_ROWS)])
    else:
        y = x2 @ w.dequantize().T
    return y.reshape(lead + (n,))


def addmm(input, x, w):
    """input + matmul(x, w), i.e. input + x @ w.T for a q4_0 w (N, K). With up to 8 rows, input a contiguous
    float32 Tensor of the result's shape that does not require grad: one launch, the mul_mv kernel adding
    input as it stores (a decoder's residual). Otherwise the product and an add."""
    w = _check(w, "addmm")
    n, k = w.shape
    if (isinstance(x, Tensor) and isinstance(input, Tensor) and x.ndim == 2 and x.shape[0] <= MV_MAX_ROWS
            and x.shape[1] == k and k > 0 and tuple(input.shape) == (x.shape[0], n) and input.dtype == "float32"
            and input.is_contiguous() and not input.requires_grad):
        return _C._q4_0_mul_mv(x, w.qs, w.d, n, k, input)
    return input + matmul(x, w)


def embedding(table, ids):
    """Rows table[ids] of a Q4_0 (dequantized) or float32 Tensor table; ids: int32 Tensor, ints, or one int
    (a (1, D) result, passed to the kernel without an upload)."""
    if isinstance(table, Tensor):
        return _C.get_rows(table, ids)
    table = _check(table, "embedding")
    if isinstance(ids, (int, np.integer)) and not isinstance(ids, bool):     # one id: no upload
        return _C._q4_0_get_rows(table.qs, table.d, *table.shape, int(ids))
    if not isinstance(ids, Tensor):
        arr = np.asarray(ids)
        if arr.size and arr.dtype.kind not in "iu":       # 1.7 must not become row 1
            raise IndexError(f"embedding: ids must be integers, got an array of {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() >= table.shape[0]):
            raise IndexError(f"embedding: ids outside the table's {table.shape[0]} rows")
        ids = _C.tensor(arr.astype(np.int32))
    return _C._q4_0_get_rows(table.qs, table.d, *table.shape, ids)
