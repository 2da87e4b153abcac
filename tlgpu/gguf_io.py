"""GGUF files in and out (llama.cpp's model format), through the `gguf` package (llama.cpp's own reader and
writer; ``pip install gguf`` or tlgpu's ``gguf`` extra). Exposed as tlgpu.quant.load_gguf / save_gguf.

Tensor types: F32 (float32 Tensor), F16 (float16), BF16 (bfloat16), Q4_0 and Q8_0 (tlgpu.quant.Q4_0 /
Q8_0 of a 2-D weight). Any other type is refused by its GGML name. Shapes are numpy's order: GGUF stores
ggml's ne[] (fastest dimension first), the reverse; the gguf package's reader already reverses it and its
writer reverses it back, so a numpy (N, K) weight is ne = [K, N] in the file, as llama.cpp expects.
"""
import numpy as np

from . import _C
from ._C import Tensor

_META_SKIP = ("GGUF.",)          # the reader's pseudo-fields (version, counts): not metadata


def _gguf():
    try:
        import gguf
    except ImportError as e:       # an optional dependency
        raise ImportError("load_gguf/save_gguf need the gguf package: pip install gguf (or tlgpu[gguf])") from e
    return gguf


def _field_value(field, gguf):
    """A metadata field as a Python value: str, int, float, bool or a list of them."""
    vt = gguf.GGUFValueType
    main = field.types[0] if field.types else None
    if main == vt.ARRAY:
        sub = field.types[-1]
        if sub == vt.STRING:
            return [bytes(field.parts[i]).decode("utf-8") for i in field.data]
        return [field.parts[i].tolist()[0] for i in field.data]
    if main == vt.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    v = field.parts[field.data[0]].tolist()[0]
    return bool(v) if main == vt.BOOL else v


def load_gguf(path, formats):
    """(tensors, metadata) of a GGUF file: tensors a dict name -> device Tensor (F32, F16, BF16) or Q4_0/Q8_0
    matrix (formats: GGUF type name -> the class holding it, tlgpu.quant's), in the file's order; metadata a dict key -> value (str, int, float, bool or list). Raises
    ValueError for a corrupt or truncated file and for a tensor type tlgpu does not take (named)."""
    gguf = _gguf()
    T = gguf.GGMLQuantizationType
    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, IndexError, KeyError, TypeError, OverflowError, EOFError) as e:
        raise ValueError(f"load_gguf: {path}: not a readable GGUF file (corrupt or truncated): {e}") from e
    size = reader.data.nbytes
    meta = {}
    try:
        for key, field in reader.fields.items():
            if not key.startswith(_META_SKIP):
                meta[key] = _field_value(field, gguf)
    except (ValueError, IndexError, UnicodeDecodeError) as e:
        raise ValueError(f"load_gguf: {path}: corrupt metadata: {e}") from e
    out = {}
    for t in reader.tensors:
        shape = tuple(int(v) for v in reversed(t.shape.tolist()))
        kind = T(t.tensor_type)
        if t.data_offset + t.n_bytes > size or t.data.nbytes != t.n_bytes:
            raise ValueError(f"load_gguf: {path}: tensor {t.name!r} {shape} ({kind.name}) runs past the end of the "
                             f"file ({size} bytes): truncated")
        if kind == T.F32 or kind == T.F16:
            out[t.name] = _C.tensor(np.asarray(t.data).reshape(shape))
        elif kind == T.BF16:
            import ml_dtypes
            out[t.name] = _C.tensor(np.asarray(t.data).view(ml_dtypes.bfloat16).reshape(shape))
        elif kind in (T.Q4_0, T.Q8_0):
            if len(shape) != 2:
                raise ValueError(f"load_gguf: {path}: tensor {t.name!r} is {kind.name} of shape {shape}; tlgpu "
                                 f"takes quantized tensors as 2-D matrices only")
            cls = formats[kind.name]
            out[t.name] = cls.from_bytes(np.asarray(t.data).reshape(-1), shape)
        else:
            raise ValueError(f"load_gguf: {path}: tensor {t.name!r} {shape} has type {kind.name}, which tlgpu does "
                             f"not load (F32, F16, BF16, Q4_0 and Q8_0 only)")
    return out, meta


def _add_meta(writer, gguf, key, val):
    vt = gguf.GGUFValueType
    if isinstance(val, (list, tuple)):
        if not val:
            raise ValueError(f"save_gguf: metadata {key!r} is an empty list (GGUF arrays need an element type)")
        writer.add_array(key, list(val))
    elif isinstance(val, bool):
        writer.add_bool(key, val)
    elif isinstance(val, (int, np.integer)):
        val = int(val)
        writer.add_key_value(key, val, vt.INT32 if -2**31 <= val < 2**31 else vt.INT64 if val < 0 else vt.UINT64)
    elif isinstance(val, (float, np.floating)):
        writer.add_float32(key, float(val))
    elif isinstance(val, str):
        writer.add_key_value(key, val, vt.STRING)
    else:
        raise TypeError(f"save_gguf: metadata {key!r}: expected str, int, float, bool or a list, "
                        f"got {type(val).__name__}")


def _tensor_array(name, t, gguf, formats):
    """(numpy array, raw_dtype or None) to hand GGUFWriter.add_tensor for one value of save_gguf's dict."""
    T = gguf.GGMLQuantizationType
    fmt = next((f for f, cls in formats.items() if isinstance(t, cls)), None)
    if fmt is not None:
        kind = T[fmt]
        n, k = t.shape
        return np.frombuffer(t.to_bytes(), np.uint8).reshape(n, k // 32 * (2 + t.BYTES)), kind
    arr = t.numpy() if isinstance(t, Tensor) else np.asarray(t)
    if arr.dtype == np.float32 or arr.dtype == np.float16:
        return np.ascontiguousarray(arr), None
    if arr.dtype.name == "bfloat16":
        a = np.ascontiguousarray(arr)
        return a.view(np.uint8).reshape(a.shape[:-1] + (a.shape[-1] * 2,)) if a.ndim else a.view(np.uint8), T.BF16
    raise TypeError(f"save_gguf: tensor {name!r} {tuple(arr.shape)} has dtype {arr.dtype}; GGUF files from tlgpu "
                    f"take float32, float16, bfloat16, Q4_0 and Q8_0")


def save_gguf(path, tensors, formats, metadata=None):
    """Writes a GGUF file: tensors a dict name -> Tensor / numpy array (float32, float16, bfloat16) or
    Q4_0/Q8_0 (formats: GGUF type name -> class, tlgpu.quant's); metadata a dict key -> str, int, float, bool or list. general.architecture is
    metadata's if given, else "tlgpu"."""
    gguf = _gguf()
    metadata = dict(metadata or {})
    arch = metadata.pop("general.architecture", "tlgpu")
    items = [(name, *_tensor_array(name, t, gguf, formats)) for name, t in tensors.items()]   # check all before writing
    writer = gguf.GGUFWriter(str(path), arch)
    try:
        for key, val in metadata.items():
            _add_meta(writer, gguf, key, val)
        for name, arr, raw in items:
            if arr.ndim == 0:
                arr = arr.reshape(1)
            writer.add_tensor(name, arr, raw_dtype=raw)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
