"""torch.distributions.categorical's path: `from tlgpu.distributions.categorical import Categorical` ports as is."""
from . import Categorical  # noqa: F401

__all__ = ["Categorical"]
