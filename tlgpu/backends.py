"""tlgpu.backends: the torch.backends switches that CleanRL's and nanoGPT's scripts set, with their tlgpu meaning.

- cudnn.deterministic: tlgpu's kernels are deterministic already (the same program gives bit-identical results
  run after run), so True is satisfied and False allows nothing more; the value is kept for reading back.
- cudnn.benchmark: tlgpu does not autotune per shape (its GEMM tiles come from per-device tables), so the flag
  changes no result and no kernel choice; kept for reading back.
- cuda.matmul.allow_tf32: tlgpu.set_matmul_precision('high' if True else 'highest'), read back from
  get_matmul_precision(): TF32 tensor cores for matmul, addmm, Linear and the convolutions' GEMMs on NVIDIA
  devices that have them (ignored elsewhere).
- cudnn.allow_tf32 (torch: convolutions only): tlgpu's convolutions are GEMMs under the matmul precision, so
  there is no separate switch: setting it raises, saying to use cuda.matmul.allow_tf32.
"""
from . import _C


class _Cudnn:
    def __init__(self):
        object.__setattr__(self, "deterministic", False)
        object.__setattr__(self, "benchmark", False)
        object.__setattr__(self, "enabled", True)

    def __setattr__(self, name, value):
        if name == "allow_tf32":
            raise AttributeError("tlgpu.backends.cudnn.allow_tf32: tlgpu's convolutions run as GEMMs under the "
                                 "matmul precision; set tlgpu.backends.cuda.matmul.allow_tf32 (or "
                                 "tlgpu.set_matmul_precision) instead")
        if name not in ("deterministic", "benchmark", "enabled"):
            raise AttributeError(f"tlgpu.backends.cudnn has no setting {name!r}")
        object.__setattr__(self, name, bool(value))

    @staticmethod
    def is_available():
        return False


class _Matmul:
    @property
    def allow_tf32(self):
        return _C.get_matmul_precision() != "highest"

    @allow_tf32.setter
    def allow_tf32(self, value):
        _C.set_matmul_precision("high" if value else "highest")


class _Cuda:
    def __init__(self):
        self.matmul = _Matmul()


cudnn = _Cudnn()
cuda = _Cuda()
