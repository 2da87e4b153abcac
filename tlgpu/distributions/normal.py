"""torch.distributions.normal's path: `from tlgpu.distributions.normal import Normal` ports as is."""
from . import Normal  # noqa: F401

__all__ = ["Normal"]
