"""Generated from book/10_training.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 272a005e204d1f17
# fmt: off

# [book/10_training.ipynb, cell 63d0c339]
from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from transformer_lib.checks import check_float, check_int


# [book/10_training.ipynb, cell 21547958]
def noam_lambda(d_model: int, warmup_steps: int,
                factor: float = 1.0) -> Callable[[int], float]:
    """The paper's learning rate as a function of LambdaLR's step counter, for
    ``torch.optim.lr_scheduler.LambdaLR(optimizer, noam_lambda(d_model, warmup))`` with
    the optimizer's ``lr=1.0`` (LambdaLR multiplies the optimizer's lr by this value).

    LambdaLR's counter ``step`` is the number of updates already made, so the update it
    sets the rate for is the paper's ``n = step + 1`` (the paper counts from 1)::

        rate(step) = factor * d_model**-0.5 * min(n**-0.5, n * warmup_steps**-1.5)

    It is defined at step 0 (LambdaLR evaluates it there when it is built), rises
    linearly to its peak ``factor * (d_model * warmup_steps)**-0.5`` at ``step =
    warmup_steps - 1`` and then decays as n**-0.5. Call ``optimizer.step()`` before
    ``scheduler.step()``.
    """
    d_model = check_int(d_model, "d_model")
    warmup_steps = check_int(warmup_steps, "warmup_steps")
    factor = check_float(factor, "factor", 0.0, low_open=True)

    def rate(step: int) -> float:
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        n = step + 1
        return factor * d_model ** -0.5 * min(n ** -0.5, n * warmup_steps ** -1.5)

    return rate


# [book/10_training.ipynb, cell dfbaa11a]
def noam_optimizer(model: nn.Module | Iterable[nn.Parameter], d_model: int,
                   warmup_steps: int, factor: float | None = None, *,
                   peak_lr: float | None = None,
                   betas: tuple[float, float] = (0.9, 0.98), eps: float = 1e-9
                   ) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """The paper's optimiser: ``torch.optim.Adam`` with ``betas=(0.9, 0.98)`` and
    ``eps=1e-9`` over ``model``'s parameters (or the parameters given), and a
    ``LambdaLR`` scheduler that follows :func:`noam_lambda`. Step the optimizer,
    then the scheduler.

    The rate is ``factor * d_model**-0.5 * min(n**-0.5, n * warmup_steps**-1.5)``
    for update ``n``; give either ``factor`` (default 1.0, the paper's) or
    ``peak_lr``, the rate at the end of the warm-up (``factor = peak_lr *
    sqrt(d_model * warmup_steps)``). Returns ``(optimizer, scheduler)``."""
    if factor is not None and peak_lr is not None:
        raise ValueError("give factor or peak_lr, not both")
    if peak_lr is not None:
        peak_lr = check_float(peak_lr, "peak_lr", 0.0, low_open=True)
        factor = peak_lr * (check_int(d_model, "d_model")
                            * check_int(warmup_steps, "warmup_steps")) ** 0.5
    rate = noam_lambda(d_model, warmup_steps, 1.0 if factor is None else factor)
    params = model.parameters() if isinstance(model, nn.Module) else model
    optimizer = torch.optim.Adam(params, lr=1.0, betas=betas, eps=eps)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, rate)


__all__ = ['noam_lambda', 'noam_optimizer']
