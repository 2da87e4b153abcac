"""Still more of PyTorch's tensor-level names that ports call (a probe of CleanRL, nanoGPT and Stable-Baselines3
code), composed from tlgpu's C ops. Filled in by the fourteenth session."""
from . import _C

Tensor = _C.Tensor
METHODS = {}                                         # name -> function, set on Tensor
EXTRA = {}                                           # name -> function, tlgpu.<name>


def install():
    """Attach the methods to Tensor and return the module functions, leaving alone any name the C layer has."""
    for name, fn in METHODS.items():
        if not hasattr(Tensor, name):
            setattr(Tensor, name, fn)
    return {name: fn for name, fn in EXTRA.items() if not hasattr(_C, name)}
