"""torch.distributions.constraints: the sets parameters and values live in. check(value) returns a float32 0/1
mask (tlgpu has no bool dtype) of value's shape less the constraint's event_dim rightmost dims, computed on the
device (nothing is read back)."""
import numpy as np

from .. import _C

__all__ = ["Constraint", "boolean", "greater_than", "greater_than_eq", "integer_interval", "interval", "nonnegative",
           "nonnegative_integer", "positive", "positive_integer", "real", "simplex", "unit_interval"]


def _t(value):
    if isinstance(value, _C.Tensor):
        return value
    return _C.tensor(np.asarray(value, dtype=np.float32))


class Constraint:
    """A region: check(value) is 1.0 where value lies in it; is_discrete and event_dim as torch's."""
    is_discrete = False
    event_dim = 0

    def check(self, value):
        raise NotImplementedError

    def __repr__(self):
        return type(self).__name__[1:] + "()"


class _Real(Constraint):
    def check(self, value):
        value = _t(value)
        return value == value                                    # NaN is not real


class _Boolean(Constraint):
    is_discrete = True

    def check(self, value):
        value = _t(value)
        return ((value == 0) + (value == 1)) > 0


class _GreaterThan(Constraint):
    def __init__(self, lower_bound):
        self.lower_bound = lower_bound

    def check(self, value):
        return _t(value) > self.lower_bound

    def __repr__(self):
        return f"GreaterThan(lower_bound={self.lower_bound})"


class _GreaterThanEq(_GreaterThan):
    def check(self, value):
        return _t(value) >= self.lower_bound

    def __repr__(self):
        return f"GreaterThanEq(lower_bound={self.lower_bound})"


class _Interval(Constraint):
    def __init__(self, lower_bound, upper_bound):
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value):
        value = _t(value)
        return (value >= self.lower_bound) * (value <= self.upper_bound)

    def __repr__(self):
        return f"Interval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _IntegerInterval(_Interval):
    is_discrete = True

    def check(self, value):
        value = _t(value)
        return (value % 1 == 0) * (value >= self.lower_bound) * (value <= self.upper_bound)

    def __repr__(self):
        return f"IntegerInterval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _IntegerGreaterThan(_GreaterThan):
    is_discrete = True

    def check(self, value):
        value = _t(value)
        return (value % 1 == 0) * (value >= self.lower_bound)

    def __repr__(self):
        return f"IntegerGreaterThan(lower_bound={self.lower_bound})"


class _Simplex(Constraint):
    """Nonnegative entries summing to 1 (within 1e-6, torch's tolerance) over the last dim."""
    event_dim = 1

    def check(self, value):
        value = _t(value)
        nonneg = (value >= 0).sum(-1) == value.shape[-1]
        return nonneg * ((value.sum(-1) - 1.0).abs() < 1e-6)


real = _Real()
boolean = _Boolean()
positive = _GreaterThan(0.0)
nonnegative = _GreaterThanEq(0.0)
unit_interval = _Interval(0.0, 1.0)
simplex = _Simplex()
nonnegative_integer = _IntegerGreaterThan(0)
positive_integer = _IntegerGreaterThan(1)
greater_than = _GreaterThan
greater_than_eq = _GreaterThanEq
interval = _Interval
integer_interval = _IntegerInterval
