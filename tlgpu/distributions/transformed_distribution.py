"""torch.distributions.transformed_distribution: TransformedDistribution(base_distribution, transforms), the
law of y = t_n(...t_1(x)) for x from the base. sample/rsample push a base draw through the transforms;
log_prob(y) walks back through each inverse and subtracts each log|det J| (summed over the event dims), as
torch. SAC's squashed Gaussian is TransformedDistribution(Normal(mu, std), [TanhTransform(cache_size=1)]):
with the cache, log_prob of the action rsample just returned uses the pre-tanh value itself, never atanh."""
from ..autograd import no_grad
from .distribution import Distribution, _sum_rightmost
from .transforms import Transform


class TransformedDistribution(Distribution):
    def __init__(self, base_distribution, transforms, validate_args=None):
        if isinstance(transforms, Transform):
            transforms = [transforms]
        elif isinstance(transforms, (list, tuple)) and all(isinstance(t, Transform) for t in transforms):
            transforms = list(transforms)
        else:
            raise ValueError("TransformedDistribution: transforms must be a Transform or a list of Transforms, "
                             f"got {type(transforms).__name__}")
        self.base_dist, self.transforms = base_distribution, transforms
        self.has_rsample = base_distribution.has_rsample
        shape = base_distribution.batch_shape + base_distribution.event_shape
        event_dim = max([len(base_distribution.event_shape)] + [t.event_dim for t in transforms])
        if event_dim > len(shape):
            raise ValueError(f"TransformedDistribution: base_distribution needs at least {event_dim} dims, "
                             f"got shape {shape}")
        super().__init__(shape[:len(shape) - event_dim], shape[len(shape) - event_dim:], validate_args)

    def expand(self, batch_shape):
        return TransformedDistribution(self.base_dist.expand(tuple(batch_shape) +
                                                             self.base_dist.batch_shape[len(self._batch_shape):]),
                                       self.transforms)

    def sample(self, sample_shape=()):
        with no_grad():
            x = self.base_dist.sample(sample_shape)
            for t in self.transforms:
                x = t(x)
            return x

    def rsample(self, sample_shape=()):
        x = self.base_dist.rsample(sample_shape)
        for t in self.transforms:
            x = t(x)
        return x

    def log_prob(self, value):
        event_dim = len(self._event_shape)
        lp, y = 0.0, value
        for t in reversed(self.transforms):
            x = t.inv(y)
            lp = lp - _sum_rightmost(t.log_abs_det_jacobian(x, y), event_dim - t.event_dim)
            y = x
        return lp + _sum_rightmost(self.base_dist.log_prob(y), event_dim - len(self.base_dist.event_shape))

    def __repr__(self):
        return f"TransformedDistribution({self.base_dist!r}, {self.transforms!r})"
