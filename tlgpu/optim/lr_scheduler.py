"""torch.optim.lr_scheduler's common schedules. Each writes group["lr"] from a closed form of the epoch
count (no drift from repeated multiplication); the optimizers read group["lr"] at every step()."""
import math


class LRScheduler:
    def __init__(self, optimizer, last_epoch=-1):
        if not hasattr(optimizer, "param_groups"):
            raise TypeError(f"{type(self).__name__}: {type(optimizer).__name__} is not an optimizer")
        self.optimizer = optimizer
        for g in optimizer.param_groups:
            if last_epoch == -1:
                g.setdefault("initial_lr", g["lr"])
            elif "initial_lr" not in g:
                raise KeyError(f"{type(self).__name__}: resuming (last_epoch={last_epoch}) needs 'initial_lr' in "
                               "every param group")
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def lr_at(self, base_lr, epoch):
        raise NotImplementedError

    def get_last_lr(self):
        return list(self._last_lr)

    def step(self):
        self.last_epoch += 1
        for g, base in zip(self.optimizer.param_groups, self.base_lrs):
            g["lr"] = self.lr_at(base, self.last_epoch)
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}

    def load_state_dict(self, state):
        self.__dict__.update(state)


class StepLR(LRScheduler):
    """lr = base * gamma ** (epoch // step_size)."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        if int(step_size) < 1:
            raise ValueError(f"StepLR: step_size must be >= 1, got {step_size}")
        self.step_size, self.gamma = int(step_size), gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base, epoch):
        return base * self.gamma ** (epoch // self.step_size)


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base - eta_min) * (1 + cos(pi * epoch / T_max)) / 2 (periodic past T_max, as torch)."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        if T_max <= 0:
            raise ValueError(f"CosineAnnealingLR: T_max must be > 0, got {T_max}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base, epoch):
        return self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * epoch / self.T_max)) / 2


class LambdaLR(LRScheduler):
    """lr = base * lr_lambda(epoch); one function, or one per param group."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        n = len(optimizer.param_groups)
        self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
        if len(self.lr_lambdas) != n:
            raise ValueError(f"LambdaLR: {len(self.lr_lambdas)} lambdas for {n} param groups")
        super().__init__(optimizer, last_epoch)

    def step(self):
        self.last_epoch += 1
        for g, base, fn in zip(self.optimizer.param_groups, self.base_lrs, self.lr_lambdas):
            g["lr"] = base * fn(self.last_epoch)
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]


class LinearLR(LRScheduler):
    """lr = base * (start_factor + (end_factor - start_factor) * min(epoch, total_iters) / total_iters)."""

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5, last_epoch=-1):
        if not (0 < start_factor <= 1 and 0 <= end_factor <= 1):
            raise ValueError("LinearLR: start_factor must be in (0, 1] and end_factor in [0, 1]")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base, epoch):
        frac = min(epoch, self.total_iters) / self.total_iters if self.total_iters > 0 else 1.0
        return base * (self.start_factor + (self.end_factor - self.start_factor) * frac)
