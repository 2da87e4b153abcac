"""The one device, and PyTorch's device arguments read against it (issue 24: torch code ports by renaming).

tlgpu runs on one OpenCL device, chosen once per process by TLGPU_DEVICE. Every tensor lives there; there
are no host tensors (numpy arrays are the host side). So a device argument names a place only to say
"the device": "cpu", "cuda", "cpu:0", "cuda:0", 0, a Device and None all mean it, whatever kind of device
it is (a CPU under PoCL or a GPU), and `x.to(device)` / `x.cpu()` / `x.cuda()` return x. Anything else
("cuda:1", "mps", "xla", a typo) names a device tlgpu does not have: a ValueError saying how to choose
one (TLGPU_DEVICE), never a silent fallback.
"""
from dataclasses import dataclass

from . import _C


@dataclass(frozen=True)
class Device:
    """The OpenCL device tlgpu runs on (chosen by TLGPU_DEVICE). `type` is OpenCL's kind ('cpu', 'gpu',
    'accelerator'), not torch's 'cuda'/'cpu'."""
    name: str
    vendor: str
    platform: str
    platform_vendor: str
    platform_version: str
    type: str
    version: str
    driver: str
    global_mem_bytes: int
    max_alloc_bytes: int
    local_mem_bytes: int
    max_work_group_size: int
    compute_units: int
    unified_memory: bool
    index: int


_TORCH_TYPES = ("cpu", "cuda")


def _the_device():
    return Device(**_C._device())        # fresh: some fields (PoCL's global_mem_bytes) are read each time


def _same(a, b):
    return (a.platform, a.name, a.index) == (b.platform, b.name, b.index)


def _no_such_device(spec, op):
    d = _the_device()
    return ValueError(
        f"{op}: {spec!r} names a device tlgpu does not have. tlgpu has one device ({d.name}, platform "
        f"{d.platform!r}); 'cpu', 'cuda', 'cuda:0', 0, tlgpu.device() and None all name it, and every tensor "
        f"lives there. To run on another device, set TLGPU_DEVICE before starting Python (e.g. "
        f"TLGPU_DEVICE=nvidia:1 or TLGPU_DEVICE=pocl; `python -m tlgpu` lists the devices)")


def check_device(spec, op="device"):
    """Return if spec names tlgpu's device (see the module docstring), raise ValueError/TypeError otherwise."""
    if spec is None:
        return
    if isinstance(spec, Device):
        if not _same(spec, _the_device()):
            raise _no_such_device(spec, op)
        return
    if isinstance(spec, int) and not isinstance(spec, bool):
        if spec != 0:
            raise _no_such_device(spec, op)
        return
    if not isinstance(spec, str):
        raise TypeError(f"{op}: a device is 'cpu', 'cuda', 'cuda:0', 0, a tlgpu.Device or None, "
                        f"not {type(spec).__name__}")
    kind, _, index = spec.strip().partition(":")
    if kind not in _TORCH_TYPES or index not in ("", "0"):
        raise _no_such_device(spec, op)


def device(spec=None, index=None):
    """tlgpu.device() -> the current Device (initialises the runtime on first call). tlgpu.device("cuda"),
    device("cpu"), device("cuda:0"), device("cuda", 0): the same Device, since tlgpu has one (so
    `tlgpu.device("cuda" if tlgpu.cuda.is_available() else "cpu")` works); another name raises ValueError."""
    check_device(spec, "tlgpu.device")
    if index is not None:
        check_device(index, "tlgpu.device")
    return _the_device()


class _CudaNamespace:
    """tlgpu.cuda: the torch.cuda questions torch code asks before choosing a device."""

    @staticmethod
    def is_available():
        """True when tlgpu's device is a GPU (torch code then picks "cuda", which names that device)."""
        return _the_device().type == "gpu"

    @staticmethod
    def device_count():
        """1 when tlgpu's device is a GPU, else 0 (tlgpu uses one device; TLGPU_DEVICE picks it)."""
        return 1 if _CudaNamespace.is_available() else 0

    @staticmethod
    def current_device():
        return 0

    @staticmethod
    def get_device_name(device=None):
        check_device(device, "tlgpu.cuda.get_device_name")
        return _the_device().name

    @staticmethod
    def synchronize(device=None):
        """Wait for all enqueued work (tlgpu.synchronize())."""
        check_device(device, "tlgpu.cuda.synchronize")
        _C.synchronize()

    @staticmethod
    def is_bf16_supported():
        """False: tlgpu has no bfloat16 storage yet (float32 and int32 only)."""
        return False


cuda = _CudaNamespace()
