"""torch.nn's ConvTranspose1d / ConvTranspose2d and Upsample / UpsamplingNearest2d / UpsamplingBilinear2d: torch's
parameters, init, attributes and reprs over the functional forms in nn/_conv_transpose.py (a separate file because
functional.py, which re-exports those, is imported before Module exists). nn/__init__.py re-exports __all__."""
import math

from ..autograd import _is_int
from . import Module, _uniform
from ._conv_transpose import _conv_transpose, _ints, _shape, interpolate
from ._fbase import _check_tensor

__all__ = ["ConvTranspose1d", "ConvTranspose2d", "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d"]


class _ConvTransposeNd(Module):
    """weight (in, out / groups, *k) and bias (out,), both U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in =
    out / groups * prod(k) (torch's kaiming-uniform a=sqrt(5) on this weight); padding_mode 'zeros' only, as torch's
    ConvTranspose. forward(input, output_size=None): output_size picks the output_padding, as torch's."""
    _dims = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros"):
        super().__init__()
        name, n = type(self).__name__, self._dims
        if not _is_int(groups) or groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(f"{name}: in_channels ({in_channels}) and out_channels ({out_channels}) must be "
                             f"divisible by groups ({groups})")
        if padding_mode != "zeros":
            raise ValueError(f"{name}: only 'zeros' padding mode is supported (as torch's), got {padding_mode!r}")
        self.in_channels, self.out_channels, self.groups = int(in_channels), int(out_channels), int(groups)
        self.kernel_size = _ints(kernel_size, n, name, "kernel_size", 1)
        self.stride, self.padding = _ints(stride, n, name, "stride", 1), _ints(padding, n, name, "padding", 0)
        self.output_padding = _ints(output_padding, n, name, "output_padding", 0)
        self.dilation = _ints(dilation, n, name, "dilation", 1)
        self.padding_mode, self.transposed = padding_mode, True
        fan_in = self.out_channels // self.groups * math.prod(self.kernel_size)
        bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        self.weight = _uniform((self.in_channels, self.out_channels // self.groups, *self.kernel_size), bound)
        self.bias = _uniform((self.out_channels,), bound) if bias else None

    def _output_padding(self, input, output_size):
        if output_size is None:
            return self.output_padding
        name, n = type(self).__name__, self._dims
        _check_tensor(input, name)
        size = [int(v) for v in (output_size if isinstance(output_size, (tuple, list)) else (output_size,))]
        lead = 2 if input.ndim == n + 2 else 1
        if len(size) == lead + n:
            size = size[lead:]
        if len(size) != n:
            raise ValueError(f"{name}: for {input.ndim}-D input, output_size must have {n} or {lead + n} elements "
                             f"(got {len(size)})")
        lo = [(input.shape[lead + i] - 1) * self.stride[i] - 2 * self.padding[i] +
              self.dilation[i] * (self.kernel_size[i] - 1) + 1 for i in range(n)]
        hi = [lo[i] + self.stride[i] - 1 for i in range(n)]
        if any(not lo[i] <= size[i] <= hi[i] for i in range(n)):
            raise ValueError(f"{name}: requested an output size of {size}, but valid sizes range from {lo} to {hi} "
                             f"(for an input of {list(_shape(input)[lead:])})")
        return tuple(size[i] - lo[i] for i in range(n))

    def forward(self, input, output_size=None):
        return _conv_transpose(input, self.weight, self.bias, self.stride, self.padding,
                               self._output_padding(input, output_size), self.groups, self.dilation, self._dims,
                               type(self).__name__)

    def extra_repr(self):
        n = self._dims
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * n:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * n:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * n:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        return s + ("" if self.bias is not None else ", bias=False")


class ConvTranspose2d(_ConvTransposeNd):
    """F.conv_transpose2d with torch's parameters, init and repr."""
    _dims = 2


class ConvTranspose1d(_ConvTransposeNd):
    """F.conv_transpose1d with torch's parameters, init and repr."""
    _dims = 1


class Upsample(Module):
    """F.interpolate with the module's size / scale_factor / mode / align_corners / recompute_scale_factor;
    torch's attributes and repr."""

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.name = type(self).__name__
        self.size = size
        if isinstance(scale_factor, tuple):
            self.scale_factor = tuple(float(f) for f in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor else None
        self.mode, self.align_corners, self.recompute_scale_factor = mode, align_corners, recompute_scale_factor

    def forward(self, input):
        return interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                           recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self):
        info = f"scale_factor={self.scale_factor!r}" if self.scale_factor is not None else f"size={self.size!r}"
        return info + f", mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)
