"""torch.distributions.independent: Independent(base_distribution, reinterpreted_batch_ndims) moves the base's
rightmost batch dims into the event, so log_prob and entropy are summed over them (a diagonal Gaussian policy
is Independent(Normal(mu, std), 1)). Sampling delegates to the base."""
from .distribution import Distribution, _sum_rightmost, kl_divergence, register_kl


class Independent(Distribution):
    def __init__(self, base_distribution, reinterpreted_batch_ndims, validate_args=None):
        n = int(reinterpreted_batch_ndims)
        shape = base_distribution.batch_shape + base_distribution.event_shape
        if not 0 <= n <= len(base_distribution.batch_shape):
            raise ValueError("Independent: expected 0 <= reinterpreted_batch_ndims <= "
                             f"len(base_distribution.batch_shape), actual {n} vs "
                             f"{len(base_distribution.batch_shape)}")
        event_dim = n + len(base_distribution.event_shape)
        self.base_dist, self.reinterpreted_batch_ndims = base_distribution, n
        self.has_rsample = base_distribution.has_rsample
        super().__init__(shape[:len(shape) - event_dim], shape[len(shape) - event_dim:], validate_args)

    @property
    def mean(self):
        return self.base_dist.mean

    @property
    def mode(self):
        return self.base_dist.mode

    @property
    def variance(self):
        return self.base_dist.variance

    @property
    def stddev(self):
        return self.base_dist.stddev

    def expand(self, batch_shape):
        tail = self.base_dist.batch_shape[len(self.base_dist.batch_shape) - self.reinterpreted_batch_ndims:]
        return Independent(self.base_dist.expand(tuple(batch_shape) + tail), self.reinterpreted_batch_ndims)

    def sample(self, sample_shape=()):
        return self.base_dist.sample(sample_shape)

    def rsample(self, sample_shape=()):
        return self.base_dist.rsample(sample_shape)

    def log_prob(self, value):
        return _sum_rightmost(self.base_dist.log_prob(value), self.reinterpreted_batch_ndims)

    def entropy(self):
        return _sum_rightmost(self.base_dist.entropy(), self.reinterpreted_batch_ndims)

    def __repr__(self):
        return f"Independent({self.base_dist!r}, {self.reinterpreted_batch_ndims})"


@register_kl(Independent, Independent)
def _kl_independent_independent(p, q):
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError("kl_divergence: Independents with different reinterpreted_batch_ndims "
                                  f"({p.reinterpreted_batch_ndims} and {q.reinterpreted_batch_ndims})")
    return _sum_rightmost(kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)
