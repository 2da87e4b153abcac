"""Grad-mode switches. Grad mode is per thread (kept in C); these only flip it and restore it."""
import functools

from . import _C


class _GradMode:
    _enabled = True

    def __enter__(self):
        self._prev = _C._set_grad_enabled(self._enabled)
        return self

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._prev)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with type(self)():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_GradMode):
    """Context manager and decorator: ops inside record no graph (this thread only)."""
    _enabled = False


class enable_grad(_GradMode):
    """Context manager and decorator: turn grad mode back on inside a no_grad region."""
    _enabled = True
