"""torch.distributions.kl's path: `from tlgpu.distributions.kl import kl_divergence` ports as is."""
from . import kl_divergence, register_kl  # noqa: F401

__all__ = ["kl_divergence", "register_kl"]
