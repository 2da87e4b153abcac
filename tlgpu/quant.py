"""q4_0 and q8_0 weights on the device. q4_0 is llama.cpp's 4.5-bit format (blocks of 32 weights: one
fp16 scale d and 16 bytes of nibbles; byte j holds element j in its low nibble and element j+16 in its
high nibble; the value is d*(q-8)).

Quantization runs once on the host in numpy, exactly as llama.cpp's reference quantizer
(``quantize_row_q4_0_ref``: d = the element of largest magnitude / -8, q = min(15, trunc(x/d + 8.5))),
so it is bit-exact with it. On the device a ``Q4_0`` keeps the "flat" layout of ggml's _flat kernels:
the nibbles as int32 words (4 per block, little-endian) and the fp16 scales packed two to an int32
word, both row-major by (row, block). ``to_bytes()``/``from_bytes()`` convert to and from llama.cpp's
interleaved ``block_q4_0`` array (18 bytes per block).

q8_0 is llama.cpp's 8.5-bit ``block_q8_0``: per block of 32 an fp16 scale d = amax/127 and 32 int8
q = roundf(x/d) (``quantize_row_q8_0_ref``, bit-exact here too); on the device ``Q8_0`` keeps the same
two arrays (8 int32 words of int8 per block, the scales two to a word); its bytes are 34 per block.

    w = tlgpu.quant.quantize_q4_0(np_weights)          # (N, K), K % 32 == 0 (or quantize_q8_0)
    y = tlgpu.quant.matmul(x, w)                       # x @ dequantize(w).T, x (..., K) -> (..., N)
    e = tlgpu.quant.embedding(w, ids)                  # dequantized rows w[ids]

These are inference ops: no autograd. ``F.linear``/``nn.Linear`` take a Q4_0/Q8_0 weight (linear below);
``quantize_linears(model)`` quantizes every Linear of a model; GGUF files: load_gguf/save_gguf (tlgpu/gguf_io.py).
"""
import numpy as np

from . import _C, gguf_io
from ._C import Tensor

QK4_0 = QK8_0 = 32
MV_MAX_ROWS = 8            # activation rows one mul_mv launch takes
MV_CHUNK_ROWS = 64         # up to this many rows of a big weight: mul_mv launches of 8 rows
MV_CHUNK_MIN = 1 << 20     # weights of at least this many elements (smaller: launches cost more than dequantizing)


def quantize_q4_0_numpy(w):
    """(qs uint8 (N, K/32, 16), d float16 (N, K/32)) of a float array (N, K): llama.cpp's reference rounding."""
    w = _check_weights(w, "quantize_q4_0")
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


def _check_weights(w, op):
    w = np.asarray(w, dtype=np.float32)
    if w.ndim != 2 or w.shape[1] % QK8_0 != 0:
        raise ValueError(f"{op}: expected a 2-D array whose rows are a multiple of {QK8_0} long, "
                         f"got shape {w.shape}")
    if not np.isfinite(w).all():                          # a NaN or inf scale would corrupt its whole block
        raise ValueError(f"{op}: the weights (shape {w.shape}) hold NaN or inf")
    return w


def quantize_q8_0_numpy(w):
    """(qs int8 (N, K/32, 32), d float16 (N, K/32)) of a float array (N, K): llama.cpp's quantize_row_q8_0_ref
    (d = amax / 127 in float32, q = roundf(x * (1/d)), halves away from zero)."""
    w = _check_weights(w, "quantize_q8_0")
    n, k = w.shape
    x = w.reshape(n, k // QK8_0, QK8_0)
    d = np.abs(x).max(-1) / np.float32(127.0)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1.0) / d, np.float32(0.0)).astype(np.float32)
    xs = (x * inv[..., None]).astype(np.float64)          # float32 products; rounding exact in float64
    q = np.trunc(xs + np.copysign(0.5, xs))               # C's roundf
    return q.astype(np.int8), d.astype(np.float16)


class _Quantized:
    """Shared by Q4_0 and Q8_0: a quantized matrix of `shape` (N, K) in device memory, as two int32 Tensors
    qs (BYTES bytes per block) and d (the fp16 scales two to a word)."""
    BYTES = 16
    KIND = ""

    def __init__(self, qs, d, shape):
        n, k = shape
        nblk = n * (k // QK4_0)
        qs = np.ascontiguousarray(qs).view(np.uint8).reshape(nblk * self.BYTES)
        d16 = np.ascontiguousarray(d, dtype=np.float16).reshape(nblk)
        if nblk % 2:
            d16 = np.concatenate([d16, np.zeros(1, np.float16)])
        self.shape = (int(n), int(k))
        self.qs = _C.tensor(qs.view("<u4").view(np.int32))
        self.d = _C.tensor(d16.view(np.int32))

    @property
    def nbytes(self):
        """Bytes of weight data (18 (q4_0) or 34 (q8_0) per block of 32, as in llama.cpp)."""
        return self.shape[0] * self.shape[1] // QK4_0 * (2 + self.BYTES)

    @property
    def dtype(self):
        return self.KIND

    def _fn(self, name):
        return getattr(_C, f"_{self.KIND}_{name}")

    def dequantize(self):
        """float32 Tensor (N, K)."""
        return self._fn("dequantize")(self.qs, self.d, *self.shape)

    def numpy_blocks(self):
        """(qs uint8 (N, K/32, BYTES), d float16 (N, K/32)) read back from the device."""
        n, k = self.shape
        nb = k // QK4_0
        qs = self.qs.numpy().view(np.uint8).reshape(n, nb, self.BYTES)
        d = self.d.numpy().view(np.float16)[: n * nb].reshape(n, nb)
        return qs, d

    def to_bytes(self):
        """llama.cpp's block array: per block the fp16 d then the BYTES bytes of quants."""
        qs, d = self.numpy_blocks()
        blocks = np.empty(qs.shape[:2] + (2 + self.BYTES,), np.uint8)
        blocks[..., :2] = d[..., None].view(np.uint8)
        blocks[..., 2:] = qs
        return blocks.tobytes()

    @classmethod
    def from_bytes(cls, data, shape):
        n, k = (int(v) for v in shape)
        bb = 2 + cls.BYTES
        if n < 0 or k % QK4_0 != 0 or len(data) != n * k // QK4_0 * bb:
            raise ValueError(f"{cls.__name__}.from_bytes: {len(data)} bytes do not hold a {cls.KIND} matrix of "
                             f"shape {tuple(shape)}")
        blocks = np.frombuffer(data, np.uint8).reshape(n, k // QK4_0, bb)
        return cls(blocks[..., 2:], blocks[..., :2].copy().view(np.float16)[..., 0], (n, k))

    @classmethod
    def cat_rows(cls, mats):
        """One matrix of the rows of `mats` (all of this kind, one K) in order, built on the device: their qs and
        d arrays joined (through the host when a matrix's block count is odd: its scales' last word is half
        padding)."""
        k = mats[0].shape[1]
        if any(type(m) is not cls or m.shape[1] != k for m in mats):
            raise ValueError(f"{cls.__name__}.cat_rows: matrices of one kind and one row length, got "
                             f"{[(type(m).__name__, m.shape) for m in mats]}")
        shape = (sum(m.shape[0] for m in mats), k)
        if any(m.shape[0] * (k // QK4_0) % 2 for m in mats):
            return cls.from_bytes(b"".join(m.to_bytes() for m in mats), shape)
        out = cls.__new__(cls)
        out.shape = shape
        out.qs, out.d = (_C.cat([getattr(m, a) for m in mats], 0) for a in ("qs", "d"))
        return out

    def __repr__(self):
        return f"{type(self).__name__}(shape={self.shape}, nbytes={self.nbytes})"


class Q4_0(_Quantized):
    """A q4_0 matrix of `shape` (N, K) in device memory (see the module docstring for the layout)."""
    BYTES = 16
    KIND = "q4_0"


class Q8_0(_Quantized):
    """A q8_0 matrix of `shape` (N, K) in device memory: 32 int8 (8 words) per block in qs."""
    BYTES = 32
    KIND = "q8_0"


def _quantize(array, encode, cls):
    """cls of a float (N, K) array (numpy or Tensor) through encode (the numpy quantizer)."""
    if isinstance(array, Tensor):
        array = array.numpy()
    w = np.asarray(array, dtype=np.float32)
    qs, d = encode(w)
    return cls(qs, d, w.shape)


def quantize_q4_0(array):
    """A Q4_0 of a float (N, K) array (numpy or Tensor), K a multiple of 32."""
    return _quantize(array, quantize_q4_0_numpy, Q4_0)


def quantize_q8_0(array):
    """A Q8_0 of a float (N, K) array (numpy or Tensor), K a multiple of 32."""
    return _quantize(array, quantize_q8_0_numpy, Q8_0)


def dequantize(q):
    """float32 Tensor of a Q4_0 or Q8_0."""
    return _check(q, "dequantize").dequantize()


def is_quantized(w):
    return isinstance(w, _Quantized)


def _check(q, op):
    if not isinstance(q, _Quantized):
        raise TypeError(f"{op}: expected a Q4_0 or Q8_0 (from tlgpu.quant.quantize_q4_0/_q8_0), "
                        f"got {type(q).__name__}")
    return q


# Which mul_mv kernel runs (a switch for benchmarks and tests, read at each call): "auto" the device's
# default (on GPUs one of the integer-dot kernels by the product's size, ops_quant.c's auto_impl; the float
# row kernel on CPUs), "old" the float kernels (work-group tree on GPUs, rows on CPUs), and anywhere the
# integer-dot kernels: "dp4a" in one launch (kernels/quant_mvq.h: x quantized by every work-group), "q8x"
# and "q8x8" in two (kernels/quant_mvx.h: x quantized once into a scratch, then 4 or 8 weight rows a warp), "mma"
# in two (kernels/quant_mvm.cl: the same scratch, then tensor-core int8 products of 16 weight rows by 8 activation
# rows; emulated where the device has no mma.sync). The integer-dot kernels give the same bits as each other.
_MV_IMPL = "auto"
_MV_IMPLS = {"auto": 0, "old": 1, "dp4a": 2, "q8x": 3, "q8x8": 4, "mma": 5}


def _prologue(op, w, x, norm, eps, glu):
    """Checks matmul/addmm's x and prologue arguments; returns (x as a Tensor, norm Tensor or None, eps, glu 0/1,
    impl)."""
    if isinstance(x, _Quantized):
        raise TypeError(f"{op}: the activations must be float32")
    if not isinstance(x, Tensor):
        x = _C.tensor(np.asarray(x, dtype=np.float32))
    if x.dtype != "float32":
        raise TypeError(f"{op} ({w.KIND}): x must be float32, got {x.dtype} of shape {tuple(x.shape)}")
    n, k = w.shape
    width = 2 * k if glu else k
    if x.ndim == 0 or x.shape[-1] != width:
        if glu and x.ndim and x.shape[-1] % 2:
            raise ValueError(f"{op} ({w.KIND}): glu takes x of an even width (2 x {k}), got {tuple(x.shape)}")
        raise ValueError(f"{op} ({w.KIND}): x {tuple(x.shape)} and weights {w.shape}: last dims differ"
                         + (f" (glu: x's last dim must be 2 x {k})" if glu else ""))
    if norm is not None:
        if not isinstance(norm, Tensor):
            norm = _C.tensor(np.asarray(norm, dtype=np.float32))
        if norm.dtype != "float32":
            raise TypeError(f"{op} ({w.KIND}): norm must be float32, got {norm.dtype} of shape {tuple(norm.shape)}")
        if tuple(norm.shape) != (k,):
            raise ValueError(f"{op} ({w.KIND}): norm {tuple(norm.shape)} must be a vector of the row length {k}")
    if _MV_IMPL not in _MV_IMPLS:
        raise ValueError(f"{op}: tlgpu.quant._MV_IMPL must be one of {sorted(_MV_IMPLS)}, got {_MV_IMPL!r}")
    return x, norm, float(eps), int(bool(glu)), _MV_IMPLS[_MV_IMPL]


def matmul(x, w, *, norm=None, eps=1e-5, glu=False):
    """x @ w.T for float32 x (..., K) and a q4_0 or q8_0 w (N, K) (the layout of a linear layer's weight): (..., N).
    Up to 8 rows run one mul_mv launch (each weight byte read once); up to 64 rows of a weight of 1M
    elements or more, one per 8 rows (the q4_0 weights read rows/8 times: less traffic than a float32 copy
    of them; on an H200 a 64-token prefill of the 1.7 GB decoder went from 13.1 to 8.2 ms, while the tiny
    decoder's small weights were 4 x slower that way); otherwise w is dequantized once for the GEMM. That was
    the many-rows rule before _PREFILL_IMPL (below, "chunks"); by default more than 8 rows now run the
    dequantize-on-the-fly GEMM tiles (exact float products of the dequantized weights).
    On GPUs mul_mv quantizes x's rows to int8 blocks of 32 (llama.cpp's mmvq): results differ from the float
    product by at most sum |w| * amax(x block) / 254 (docs/inference.md).
    Prologue, applied to x's rows before the product (inside the mul_mv launch on GPUs): glu=True takes x
    (..., 2K) and uses silu(x[..., :K]) * x[..., K:]; norm, a float32 (K,) weight, then uses
    x * rsqrt(mean(x^2) + eps) * norm (RMSNorm)."""
    w = _check(w, "matmul")
    x, norm, eps, glu, impl = _prologue("matmul", w, x, norm, eps, glu)
    n, k = w.shape
    lead = tuple(x.shape[:-1])
    rows = int(np.prod(lead)) if lead else 1
    x2 = x.reshape(rows, x.shape[-1])
    mv = w._fn("mul_mv")
    if rows <= MV_MAX_ROWS:
        y = mv(x2, w.qs, w.d, n, k, None, norm, eps, glu, impl)
    else:
        y = _prefill(x2, w, rows, norm, eps, glu, impl)
    return y.reshape(lead + (n,))


# How matmul runs more than MV_MAX_ROWS rows (a switch for benchmarks and tests, read at each call): "tiles" the
# dequantize-on-the-fly GEMM (kernels/quant_gemm.cl: w's blocks dequantized into the kernel's tiles, never a
# float32 copy of w); "dequant" w dequantized to float32, then the float32 GEMM (a host BLAS on CPU devices);
# "chunks" the previous rule (mul_mv launches of 8 rows up to MV_CHUNK_ROWS rows of a weight of MV_CHUNK_MIN
# elements or more, else "dequant"); "auto" the device's default: on GPUs "chunks" up to PREFILL_GPU_CHUNK_ROWS
# rows, "tiles" up to PREFILL_GPU_TILE_ROWS, else "dequant"; on CPUs "tiles" up to
# PREFILL_CPU_TILE_ROWS rows, else "dequant" (PoCL measurements, benchmarks/NOTES.md). An x that requires grad
# (grad mode on) always takes "dequant", the float GEMM's autograd giving x its gradient.
_PREFILL_IMPL = "auto"
_PREFILL_IMPLS = ("auto", "tiles", "dequant", "chunks")
PREFILL_CPU_TILE_ROWS = 16
# GPUs (H200, benchmarks/NOTES.md fourth session call 4): 16 rows as two mul_mv launches 63-65 us against the tiles'
# 82-163; 64 rows tiles 142-172 against 169-175; from 256 rows dequantize + GEMM 404-664 against 385-1019.
PREFILL_GPU_CHUNK_ROWS = 16
PREFILL_GPU_TILE_ROWS = 128


_IS_CPU = []


def _device_is_cpu():
    if not _IS_CPU:                                     # one device a process
        _IS_CPU.append(_C._device()["type"] == "cpu")
    return _IS_CPU[0]


def _prefill(x2, w, rows, norm, eps, glu, impl):
    """matmul's many-rows product of x2 (rows > MV_MAX_ROWS, K or 2K columns) by w, as _PREFILL_IMPL says."""
    n, k = w.shape
    how = _PREFILL_IMPL
    if how not in _PREFILL_IMPLS:
        raise ValueError(f"matmul: tlgpu.quant._PREFILL_IMPL must be one of {_PREFILL_IMPLS}, got {how!r}")
    if x2.requires_grad and _C.is_grad_enabled():
        how = "dequant"
    elif how == "auto" and _device_is_cpu():
        how = "dequant" if rows > PREFILL_CPU_TILE_ROWS else "tiles"
    elif how == "auto":                                # GPUs, from the H200's bench_gemm --quant-prefill
        how = "chunks" if rows <= PREFILL_GPU_CHUNK_ROWS else "tiles" if rows <= PREFILL_GPU_TILE_ROWS else "dequant"
    if how == "chunks" and rows <= MV_CHUNK_ROWS and n * k >= MV_CHUNK_MIN:
        return _C.cat([w._fn("mul_mv")(x2[i:i + MV_MAX_ROWS], w.qs, w.d, n, k, None, norm, eps, glu, impl)
                       for i in range(0, rows, MV_MAX_ROWS)])
    if norm is not None or glu:
        x2 = _C._quant_mv_prologue(x2, norm, eps, glu)
    if how == "tiles":
        return _C._quant_gemm(x2, w.qs, w.d, n, k, w.KIND)
    return x2 @ w.dequantize().T


def addmm(input, x, w, *, norm=None, eps=1e-5, glu=False):
    """input + matmul(x, w, norm=norm, eps=eps, glu=glu), i.e. input + p(x) @ w.T for a q4_0 or q8_0 w (N, K).
    With up to 8 rows, input a contiguous float32 Tensor of the result's shape that does not require grad:
    one launch, the mul_mv kernel adding input as it stores (a decoder's residual). Otherwise the product and
    an add."""
    w = _check(w, "addmm")
    n, k = w.shape
    x, norm, eps, glu, impl = _prologue("addmm", w, x, norm, eps, glu)
    if (isinstance(input, Tensor) and x.ndim == 2 and x.shape[0] <= MV_MAX_ROWS and k > 0
            and tuple(input.shape) == (x.shape[0], n) and input.dtype == "float32"
            and input.is_contiguous() and not input.requires_grad):
        return w._fn("mul_mv")(x, w.qs, w.d, n, k, input, norm, eps, glu, impl)
    return input + matmul(x, w, norm=norm, eps=eps, glu=bool(glu))


def embedding(table, ids):
    """Rows table[ids] of a Q4_0 or Q8_0 (dequantized) or float32 Tensor table; ids: int32 Tensor, ints, or one int
    (a (1, D) result, passed to the kernel without an upload)."""
    if isinstance(table, Tensor):
        return _C.get_rows(table, ids)
    table = _check(table, "embedding")
    if isinstance(ids, (int, np.integer)) and not isinstance(ids, bool):     # one id: no upload
        return table._fn("get_rows")(table.qs, table.d, *table.shape, int(ids))
    if not isinstance(ids, Tensor):
        arr = np.asarray(ids)
        if arr.size and arr.dtype.kind not in "iu":       # 1.7 must not become row 1
            raise IndexError(f"embedding: ids must be integers, got an array of {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() >= table.shape[0]):
            raise IndexError(f"embedding: ids outside the table's {table.shape[0]} rows")
        ids = _C.tensor(arr.astype(np.int32))
    return table._fn("get_rows")(table.qs, table.d, *table.shape, ids)


def linear(x, w, bias=None):
    """F.linear with a Q4_0/Q8_0 weight (N, K): x (..., K) float32 -> x @ dequantize(w).T (+ bias). Inference
    only for the weight: it gets no gradient. With grad mode on and an x that requires grad, x's gradient
    flows (the product runs as x @ dequantize(w).T, a float32 GEMM with its autograd node); a bias that
    requires grad gets its gradient (a plain add)."""
    w = _check(w, "linear")
    for name, t in (("input", x), ("bias", bias)):
        if isinstance(t, Tensor) and t.dtype != "float32":
            raise TypeError(f"linear ({w.KIND} weight {w.shape}): {name} {tuple(t.shape)} must be float32, "
                            f"got {t.dtype}")
    if bias is not None and (not isinstance(bias, Tensor) or tuple(bias.shape) != (w.shape[0],)):
        shape = tuple(bias.shape) if isinstance(bias, Tensor) else type(bias).__name__
        raise ValueError(f"linear ({w.KIND} weight {w.shape}): bias must be a float32 Tensor of shape "
                         f"({w.shape[0]},), got {shape}")
    if isinstance(x, Tensor) and x.requires_grad and _C.is_grad_enabled():
        if x.ndim == 0 or x.shape[-1] != w.shape[1]:
            raise ValueError(f"linear ({w.KIND}): x {tuple(x.shape)} and weights {w.shape}: last dims differ")
        y = x @ w.dequantize().T
    else:
        y = matmul(x, w)
    return y if bias is None else y + bias


_QUANTIZERS = {"q4_0": quantize_q4_0, "q8_0": quantize_q8_0}


def quantize_linears(module, kind="q8_0"):
    """Replaces the weight of every nn.Linear in module (itself included) whose in_features is a multiple of 32
    with its Q4_0 or Q8_0 (kind); the others, and weights already quantized, are left as they are. The layers
    then run through quant.linear (inference only); their weights leave parameters() and state_dict().
    Returns the names of the layers quantized (named_modules' names, "" for module itself)."""
    from .nn import Linear
    if kind not in _QUANTIZERS:
        raise ValueError(f"quantize_linears: kind must be one of {sorted(_QUANTIZERS)}, got {kind!r}")
    done = []
    for name, m in module.named_modules():
        if isinstance(m, Linear) and isinstance(m.weight, Tensor) and m.weight.ndim == 2 \
                and m.weight.shape[1] % QK8_0 == 0:
            m.weight = _QUANTIZERS[kind](m.weight.float().numpy() if m.weight.dtype != "float32"
                                         else m.weight.numpy())
            done.append(name)
    return done


_GGUF_FORMATS = {"Q4_0": Q4_0, "Q8_0": Q8_0}        # GGUF's type names -> the classes that hold them


def load_gguf(path):
    """(tensors, metadata) of a GGUF file: tlgpu/gguf_io.py's load_gguf (needs the gguf package)."""
    return gguf_io.load_gguf(path, _GGUF_FORMATS)


def save_gguf(path, tensors, metadata=None):
    """Writes a GGUF file of Tensors / Q4_0 / Q8_0: tlgpu/gguf_io.py's save_gguf (needs the gguf package)."""
    return gguf_io.save_gguf(path, tensors, _GGUF_FORMATS, metadata)
