"""Generated from book/10c_training_plumbing.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 372cb10af3bfa3ae
# fmt: off

# [book/10c_training_plumbing.ipynb, cell 2135f1f2]
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from transformer_lib.training.checkpoint import NonFiniteError
from transformer_lib.training.config import TrainConfig, TrainHistory
from transformer_lib.training.distributed import is_distributed, unwrap_model
from transformer_lib.training.loss import LabelSmoothingLoss
from transformer_lib.precision import amp_dtype


# [book/10c_training_plumbing.ipynb, cell 13cc1439]
@dataclass
class Run:
    """The objects of one run of :func:`train`, handed to its pieces."""

    model: nn.Module          # what a step calls: the DDP wrapper under torchrun
    net: nn.Module            # the model itself: what is validated and saved
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: torch.amp.GradScaler | None
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    config: TrainConfig
    device: torch.device
    pad_id: int | None = 0             # what the loss counts as no target
    epoch_length: int | None = None    # batches per epoch, if the loader has a len()
    busy: bool = False                 # inside an update (its state is half-made)
    tokens: Any = 0                    # target tokens trained on here (int or tensor)
    on_record: Callable[[dict[str, Any]], None] | None = None   # the appendix's log

    @classmethod
    def start(cls, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
              loss_fn: Callable | None, config: TrainConfig) -> Run:
        net = unwrap_model(model)
        device = next(net.parameters()).device
        pad = getattr(getattr(net, "config", None), "pad_id", 0)
        if loss_fn is None:
            loss_fn = LabelSmoothingLoss(0.1, pad_id=pad)
        pad = getattr(loss_fn, "pad_id", pad)        # a loss that names its pad id
        fp16 = amp_dtype(config.amp) is torch.float16
        scaler = torch.amp.GradScaler(device.type) if fp16 else None
        if is_distributed() and model is net:
            ids = [device.index] if device.type == "cuda" else None
            model = nn.parallel.DistributedDataParallel(model, device_ids=ids)
        return cls(model, net, optimizer, scheduler, scaler, loss_fn, config, device,
                   pad)

    def note(self, kind: str, record: dict[str, Any]) -> None:
        """Hand a logged record (``kind``: "train" or "valid") to ``on_record``."""
        if self.on_record is not None:
            self.on_record({"kind": kind, **record})


# [book/10c_training_plumbing.ipynb, cell 51caf1f3]
class LossLog:
    """The training loss summed on the device over a logging interval; :meth:`write`
    reads it back (the interval's one host-device synchronisation) and records it."""

    def __init__(self, device: torch.device):
        self.total = torch.zeros((), device=device)
        self.count = 0

    def add(self, loss: torch.Tensor) -> None:
        self.total += loss                           # queued on the device, not read
        self.count += 1

    def check(self, step: int) -> float:
        """The mean loss of the interval (read back); NonFiniteError if not finite."""
        mean = float(self.total) / max(self.count, 1)
        if not math.isfinite(mean):
            first = step - self.count + 1
            raise NonFiniteError(f"the training loss is {mean} at step {step} (it "
                                 f"turned non-finite in the steps {first}-{step})")
        return mean

    def write(self, history: TrainHistory, bar: Any, step: int,
              lr: float) -> dict[str, Any]:
        mean = self.check(step)                      # the read-back
        self.total.zero_()
        self.count = 0
        history.step.append(step)
        history.loss.append(mean)
        history.lr.append(lr)
        if bar is not None:
            bar.set_postfix(loss=f"{mean:.4f}", lr=f"{lr:.3g}", refresh=False)
        return {"step": step, "loss": mean, "lr": lr}


__all__ = []
