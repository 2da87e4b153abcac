"""tlgpu.save / tlgpu.load: state dicts in the safetensors format (an 8-byte little-endian header length, a
JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then the raw bytes), so the
`safetensors` package and PyTorch's safetensors files interoperate with tlgpu's.

- A module state_dict ({name: array or Tensor}) is stored key for key: float32 as F32, int32 as I32, float16 as
  F16, bfloat16 (ml_dtypes) as BF16, uint8 as U8.
- An optimizer state_dict ({"state": {i: {name: value}}, "param_groups": [...]}) stores each state
  tensor as "state.<i>.<name>"; its non-tensor parts (param_groups with their hyperparameters and the
  parameter numbering, per-parameter scalars such as Adam's step) go into __metadata__["tlgpu.optimizer"]
  as JSON, and load() rebuilds the same nested dict.
load() returns device tensors: F32, I32, F16, BF16 and U8 keep their dtype; F64 becomes float32, I64/I16/I8/BOOL
int32 (an I64 value outside int32 raises OverflowError). A truncated or inconsistent file raises ValueError; the write is atomic
(a temporary file renamed over the target)."""
import json
import os
import struct
from collections import OrderedDict

import numpy as np
from ml_dtypes import bfloat16 as _bf16

from . import _C
from ._device import check_device

_TO_CODE = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32", np.dtype(np.float16): "F16",
            np.dtype(_bf16): "BF16", np.dtype(np.uint8): "U8"}
_KEPT = ("F32", "I32", "F16", "BF16", "U8")           # tlgpu's storage dtypes: loaded as they are
_FROM_CODE = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "BF16": _bf16, "I64": np.int64,
              "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_OPTIM_KEY = "tlgpu.optimizer"


def _host(name, v):
    if isinstance(v, _C.Tensor):
        v = v.numpy()
    a = np.asarray(v)
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    elif a.dtype == np.int64:
        if a.size and (a.min() < -2**31 or a.max() >= 2**31):
            raise OverflowError(f"save: {name!r} has int64 values outside int32")
        a = a.astype(np.int32)
    if a.dtype not in _TO_CODE:
        raise TypeError(f"save: {name!r} has dtype {a.dtype}; tlgpu stores float32, int32, float16, bfloat16 and "
                        "uint8")
    return np.ascontiguousarray(a)


def _is_optimizer_state(obj):
    return isinstance(obj, dict) and set(obj) == {"state", "param_groups"}


def save(state_dict, path, metadata=None):
    """Write a module or optimizer state_dict (arrays or Tensors) to path in the safetensors format."""
    if not isinstance(state_dict, dict):
        raise TypeError(f"save: expected a state dict, got {type(state_dict).__name__}")
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    tensors = OrderedDict()
    if _is_optimizer_state(state_dict):
        scalars = {}
        for i, st in state_dict["state"].items():
            for k, v in st.items():
                if isinstance(v, (np.ndarray, _C.Tensor)):
                    tensors[f"state.{int(i)}.{k}"] = v
                else:
                    scalars.setdefault(str(int(i)), {})[k] = v
        meta[_OPTIM_KEY] = json.dumps({"param_groups": state_dict["param_groups"], "scalars": scalars})
    else:
        for k, v in state_dict.items():
            if not isinstance(k, str) or k == "__metadata__":
                raise ValueError(f"save: key {k!r} is not a usable tensor name")
            tensors[k] = v
    header, blobs, offset = {}, [], 0
    for k, v in tensors.items():
        a = _host(k, v)
        header[k] = {"dtype": _TO_CODE[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        blobs.append(a.tobytes())
        offset += a.nbytes
    if meta:
        header["__metadata__"] = meta
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)                        # the data starts 8-byte aligned, as safetensors writes
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for b in blobs:
                f.write(b)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _array(name, entry, buf):
    try:
        code, shape, (begin, end) = entry["dtype"], [int(d) for d in entry["shape"]], entry["data_offsets"]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"load: malformed header entry for {name!r}: {entry!r}") from exc
    if code not in _FROM_CODE:
        raise TypeError(f"load: {name!r} has dtype {code}, which tlgpu cannot hold")
    dt = np.dtype(_FROM_CODE[code])
    if any(d < 0 for d in shape) or not (0 <= begin <= end <= len(buf)) or \
            (end - begin) != int(np.prod(shape, dtype=np.int64)) * dt.itemsize:
        raise ValueError(f"load: {name!r}: offsets [{begin}, {end}) do not fit shape {shape} of {code} in a "
                         f"{len(buf)}-byte data section")
    a = np.frombuffer(buf, dtype=dt, count=(end - begin) // dt.itemsize, offset=begin).reshape(shape)
    if code in _KEPT:
        return a
    if a.dtype.kind == "f":
        return a.astype(np.float32)
    if code == "I64" and a.size and (a.min() < -2**31 or a.max() >= 2**31):
        raise OverflowError(f"load: {name!r} has int64 values outside int32")
    return a.astype(np.int32)


def _check_map_location(map_location):
    if isinstance(map_location, dict):
        for k, v in map_location.items():
            check_device(k, "load(map_location=)")
            check_device(v, "load(map_location=)")
    elif callable(map_location):
        raise TypeError("load: map_location as a function has no meaning in tlgpu (one device, where every "
                        "tensor is loaded); give a device ('cpu', 'cuda', tlgpu.device()) or None")
    else:
        check_device(map_location, "load(map_location=)")


def load(path, map_location=None, weights_only=None, mmap=None):
    """Read a safetensors file (a path or a binary file object): an OrderedDict name -> Tensor, or the optimizer
    state dict save() wrote. map_location names tlgpu's one device ('cpu', 'cuda', 'cuda:0', a Device, None, or
    a dict of such), where the tensors always go; weights_only and mmap are accepted as torch's are: a
    safetensors file holds tensors and strings only, never code."""
    _check_map_location(map_location)
    if hasattr(path, "read"):
        data = path.read()
    else:
        with open(path, "rb") as f:
            data = f.read()
    if len(data) < 8:
        raise ValueError(f"load: {path}: {len(data)} bytes is too short for a safetensors file")
    n = struct.unpack("<Q", data[:8])[0]
    if n > len(data) - 8:
        raise ValueError(f"load: {path}: header of {n} bytes in a {len(data)}-byte file")
    try:
        header = json.loads(data[8:8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"load: {path}: the header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise ValueError(f"load: {path}: the header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    buf = memoryview(data)[8 + n:]
    out = OrderedDict((k, _C.tensor(_array(k, e, buf))) for k, e in header.items())
    if _OPTIM_KEY not in meta:
        return out
    extra = json.loads(meta[_OPTIM_KEY])
    state = {}
    for k, t in out.items():
        _, i, name = k.split(".", 2)
        state.setdefault(int(i), {})[name] = t
    for i, st in extra["scalars"].items():
        state.setdefault(int(i), {}).update(st)
    return {"state": dict(sorted(state.items())), "param_groups": extra["param_groups"]}
