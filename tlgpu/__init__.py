"""tlgpu: float32 tensors in OpenCL device memory.

Operations enqueue kernels and return at once; the host waits only at sync points
(to_numpy/numpy, np.asarray, tolist, item, float/int/bool, repr, synchronize).
See docs/ for the design and the environment variables.
"""
import operator as _operator
import sys as _sys

import numpy as _np

from ._version import __version__  # noqa: F401

try:
    from . import _C
except ImportError as _exc:  # the extension links libOpenCL.so.1: say which package provides it
    import glob as _glob
    import os as _os
    _built = [p for p in _glob.glob(_os.path.join(_os.path.dirname(__file__), "_C.*")) if not p.endswith(".pyi")]
    if not _built:                                    # a source checkout never built (_C.pyi: the stubs)
        raise ImportError("tlgpu's C extension (tlgpu/_C) is not built: in the source checkout run `make` "
                          "(or `python3 setup.py build_ext --inplace`), or install the package with "
                          "`pip install .`") from None
    if "libOpenCL" not in str(_exc):
        raise
    _msg = (f"tlgpu needs an OpenCL ICD loader ({_exc}); on Debian/Ubuntu: "
            "apt-get install ocl-icd-libopencl1 pocl-opencl-icd (or a GPU vendor's ICD)")
    if _sys.argv[:1] == ["-m"] and "tlgpu" in _sys.orig_argv:  # `python -m tlgpu`: a message, not a traceback
        print(f"tlgpu: {_msg}", file=_sys.stderr)
        raise SystemExit(2)
    raise ImportError(_msg) from None
from ._C import *  # noqa: F401,F403  every public C function: each op family registers its own
from ._C import DeviceError, KernelBuildError, OutOfMemoryError, Tensor
from .autograd import enable_grad, inference_mode, no_grad, set_grad_enabled  # noqa: F401
from . import nn, optim, publish, quant  # noqa: F401,E402
from . import distributions  # noqa: F401,E402
from ._jit import jit  # noqa: F401,E402
from . import amp  # noqa: F401,E402
from .amp import autocast, get_autocast_dtype, is_autocast_enabled  # noqa: F401,E402


def _blas_paths():
    """Where the CPU BLAS path (docs/cpu.md) may find a CBLAS sgemm: TLGPU_BLAS (a path; '0' or '' turns the
    path off), else numpy's bundled OpenBLAS, then the system's. Only names here: C dlopens them at the first
    product on a CPU device, never on a GPU."""
    import os
    env = _C.settings()["TLGPU_BLAS"]["value"]        # csrc/core/settings.c is the one reader of the environment
    if env is not None:
        return [] if env in ("", "0") else [env]
    import glob
    libs = os.path.normpath(os.path.join(os.path.dirname(_np.__file__), os.pardir, "numpy.libs"))
    return sorted(glob.glob(os.path.join(libs, "libscipy_openblas*.so*"))) + ["libopenblas.so.0", "libopenblas64_.so.0"]


_C._cpu_blas(paths=_blas_paths())
from .serialization import load, save  # noqa: F401,E402

# numpy defers its binary operators to a type of higher priority that defines the reflected method, so
# `ndarray * t`, `ndarray - t`, `ndarray < t` and `ndarray @ t` run on the device through Tensor.__rmul__ etc.
# and keep the graph (torch's choice; __array_ufunc__ = None would also break np.exp(t) on a tensor).
Tensor.__array_priority__ = 1000

# Binary ops whose functional form takes a scalar first, as torch.add(2, t) does: Python's operator then
# reaches the Tensor's reflected method.
_BINARY_OPERATORS = {"add": _operator.add, "sub": _operator.sub, "mul": _operator.mul, "div": _operator.truediv,
                     "pow": _operator.pow, "floor_divide": _operator.floordiv, "remainder": _operator.mod,
                     "lt": _operator.lt, "le": _operator.le, "gt": _operator.gt, "ge": _operator.ge,
                     "eq": _operator.eq, "ne": _operator.ne}


def _method_alias(name):
    method = getattr(Tensor, name)

    def fn(x, *args, **kwargs):
        if not isinstance(x, Tensor):
            if name in _BINARY_OPERATORS and len(args) == 1 and not kwargs and isinstance(args[0], Tensor):
                return _BINARY_OPERATORS[name](x, args[0])
            raise TypeError(f"{name}: expected a Tensor, got {type(x).__name__}")
        return method(x, *args, **kwargs)
    fn.__name__ = name
    fn.__doc__ = method.__doc__
    return fn


for _name in _C._aliases().split() + ["var", "std", "repeat", "masked_fill"]:
    globals()[_name] = _method_alias(_name)   # after autograd.py replaced max/min: the torch forms too
del _name

_c_matmul = Tensor.matmul


def _device_operand(x):
    return tensor(x) if isinstance(x, (_np.ndarray, _np.generic)) else x  # noqa: F405


def matmul(a, b):
    """a @ b with numpy semantics (float32); a numpy operand on either side is uploaded first."""
    a, b = _device_operand(a), _device_operand(b)
    if not isinstance(a, Tensor):
        raise TypeError(f"matmul: expected a Tensor or a numpy array, got {type(a).__name__}")
    return _c_matmul(a, b)


def _rmatmul(self, other):
    if not isinstance(other, (_np.ndarray, _np.generic)):
        return NotImplemented
    return _c_matmul(tensor(other), self)  # noqa: F405


# Set on the type, these replace the C slot: numpy operands of @ stay on the device and keep the graph.
Tensor.__matmul__ = Tensor.matmul = matmul
Tensor.__rmatmul__ = _rmatmul


# PyTorch's spellings (docs/porting.md): device arguments, creation with device=, legacy constructors, Tensor.to
# and friends. The creation wrappers replace the C functions of the same names in this namespace.
from . import _torch_compat  # noqa: E402
from ._device import Device, cuda, device  # noqa: E402,F401
from ._torch_compat import (FloatTensor, IntTensor, LongTensor, as_tensor, equal, normal, randint,  # noqa: E402,F401,E501
                            float32, int32, float16, bfloat16, uint8, float64)
globals().update(_torch_compat.CREATORS)
globals().update(_torch_compat.LIKE)
globals().update(_torch_compat.PORTED)           # tlgpu.flip(x, dims), amax, any, isnan, bmm, ...: the methods
_torch_compat.install()
from . import _indexing  # noqa: E402
_indexing.install()
from . import _torch_more  # noqa: E402
globals().update(_torch_more.install())         # randperm, einsum, scatter, median, ...; their methods on Tensor
from . import _torch_extra  # noqa: E402
globals().update(_torch_extra.install())        # eye, hstack, logical_and, compile, ...; their methods on Tensor
from . import backends  # noqa: E402,F401
norm = _method_alias("norm")
clip = _method_alias("clip")
set_float32_matmul_precision, get_float32_matmul_precision = set_matmul_precision, get_matmul_precision  # noqa: F405
# torch's other dtype names. Last in this file: `float`, `int` and `bool` shadow the builtins in this module's
# namespace, so no code of this module may run after them expecting the builtins.
half, double, bool = float16, float64, _torch_compat.bool_
long = int64 = int = int32
float = float32
# `from tlgpu import *` must not shadow the caller's builtins
__all__ = [_n for _n in globals()
           if not _n.startswith("_") and _n not in ("float", "int", "bool", "any", "all", "compile")]
