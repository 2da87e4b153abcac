"""tlgpu.backends: the torch.backends switches that CleanRL's and nanoGPT's scripts set, with their tlgpu meaning.

- cudnn.deterministic: tlgpu's kernels are deterministic already (the same program gives bit-identical results
  run after run), so True is satisfied and False allows nothing more; the value is kept for reading back.
- cudnn.benchmark: tlgpu does not autotune per shape (its GEMM tiles come from per-device tables), so the flag
  changes no result and no kernel choice; kept for reading back.
- cuda.matmul.allow_tf32: tlgpu.set_matmul_precision('high' if True else 'highest'), read back from
  get_matmul_precision(): TF32 tensor cores for matmul, addmm, Linear and the convolutions' GEMMs on NVIDIA
  devices that have them (ignored elsewhere).
- cudnn.allow_tf32 (torch: convolutions; True by default): tlgpu's convolutions are GEMMs under the matmul
  precision, so it has no switch of its own. True (nanoGPT sets it) permits what the matmul switch does; False
  is refused while matmul.allow_tf32 is on, and matmul.allow_tf32 = True is refused while it is False, since
  the convolutions would then use the TF32 that was forbidden to them.
"""
from . import _C


_SETTINGS = ("deterministic", "benchmark", "enabled", "allow_tf32")


class _Cudnn:
    def __init__(self):
        for name, value in zip(_SETTINGS, (False, False, True, True)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        if name not in _SETTINGS:
            raise AttributeError(f"tlgpu.backends.cudnn has no setting {name!r}")
        if name == "allow_tf32" and not value and _C.get_matmul_precision() != "highest":
            raise ValueError("tlgpu.backends.cudnn.allow_tf32 = False: tlgpu's convolutions are GEMMs under the "
                             "matmul precision, which allows TF32 now; set tlgpu.backends.cuda.matmul.allow_tf32 "
                             "= False first")
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
        if value and not cudnn.allow_tf32:
            raise ValueError("tlgpu.backends.cuda.matmul.allow_tf32 = True: tlgpu's convolutions are GEMMs under "
                             "the same switch, and cudnn.allow_tf32 is False; set it True first")
        _C.set_matmul_precision("high" if value else "highest")


class _Cuda:
    def __init__(self):
        self.matmul = _Matmul()


cudnn = _Cudnn()
cuda = _Cuda()
