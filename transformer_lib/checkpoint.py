"""Generated from book/10_training.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 8738396e2c688e65
# fmt: off

# [book/10_training.ipynb, cell 10]
from __future__ import annotations

import os
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn


# [book/10_training.ipynb, cell 54]
def unwrap_model(model: nn.Module) -> nn.Module:
    """The model inside a ``DistributedDataParallel`` (or ``DataParallel``) wrapper,
    else ``model`` itself: what a checkpoint stores, so that it loads with or without
    DDP."""
    wrappers = (nn.parallel.DistributedDataParallel, nn.DataParallel)
    return model.module if isinstance(model, wrappers) else model


def capture_rng_state() -> dict[str, Any]:
    """The states of every random number generator a run draws from (torch, CUDA,
    Python, NumPy), as tensors and plain values only, so that
    ``torch.load(weights_only=True)`` reads them back."""
    name, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": (name, torch.from_numpy(np.asarray(keys).astype(np.int64)), int(pos),
                  int(has_gauss), float(gauss)),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put back the generators' states from :func:`capture_rng_state` (the CUDA ones
    only on a machine with as many GPUs)."""
    torch.set_rng_state(state["torch"].cpu())
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    cuda = state.get("cuda")
    if cuda is not None and len(cuda) == torch.cuda.device_count() > 0:
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda])


# [book/10_training.ipynb, cell 56]
def save_checkpoint(path: str | os.PathLike, model: nn.Module, optimizer: Any = None,
                    scheduler: Any = None, scaler: Any = None, step: int = 0,
                    **extra: Any) -> None:
    """Write model, optimizer, scheduler and GradScaler states, the step, the RNG states
    (torch, CUDA, Python, NumPy), the model's config (when it has a ``config`` with
    ``to_dict``) and any ``extra`` plain values (numbers, strings, lists, dicts,
    tensors) to ``path`` with ``torch.save``, atomically (a temporary file, then a
    rename). Under DDP call it on one rank (``train`` uses rank 0)."""
    net = unwrap_model(model)
    to_dict = getattr(getattr(net, "config", None), "to_dict", None)
    state = {
        "model": net.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "step": int(step),
        "rng": capture_rng_state(),
        "config": to_dict() if callable(to_dict) else None,
        "extra": extra,
    }
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)                # atomic: the old file or the new, not half
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load_checkpoint(path: str | os.PathLike, model: nn.Module | None = None,
                    optimizer: Any = None, scheduler: Any = None, scaler: Any = None,
                    map_location: Any = "cpu",
                    restore_rng: bool = False) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` with
    ``torch.load(weights_only=True)`` (plain tensors and containers only: no arbitrary
    object is unpickled), load the states into whichever of ``model``, ``optimizer``,
    ``scheduler``, ``scaler`` are given, restore the RNG states when ``restore_rng``,
    and return the whole checkpoint dict (``step``, ``config``, ``extra``, ...)."""
    state = torch.load(os.fspath(path), map_location=map_location, weights_only=True)
    if model is not None:
        unwrap_model(model).load_state_dict(state["model"])
    parts = {"optimizer": optimizer, "scheduler": scheduler, "scaler": scaler}
    for key, obj in parts.items():
        if obj is not None:
            if state.get(key) is None:
                raise ValueError(f"the checkpoint {path} holds no {key} state")
            obj.load_state_dict(state[key])
    if restore_rng:
        restore_rng_state(state["rng"])
    return state


# [book/10_training.ipynb, cell 58]
@dataclass
class RunPosition:
    """Where a training run stands: ``step`` (updates made), ``epoch``, ``in_epoch``
    (batches of the epoch used), ``epoch_rng`` (the RNG state the epoch's shuffle
    started from) and, right after a resume, ``resume_rng`` (the RNG state to go on
    from)."""

    step: int = 0
    epoch: int = 0
    in_epoch: int = 0
    epoch_rng: dict[str, Any] | None = None
    resume_rng: dict[str, Any] | None = None

    @classmethod
    def from_checkpoint(cls, state: dict[str, Any]) -> RunPosition:
        """The position in a checkpoint that ``train`` wrote (see
        :func:`load_checkpoint`)."""
        extra = state["extra"]
        if not {"epoch", "in_epoch", "epoch_rng"} <= extra.keys():
            raise ValueError("the checkpoint holds no position in an epoch: it was not "
                             "written by train()")
        return cls(state["step"], extra["epoch"], extra["in_epoch"], extra["epoch_rng"],
                   resume_rng=state["rng"])


def epoch_batches(loader: Iterable, position: RunPosition) -> Iterator:
    """The batches of epoch ``position.epoch`` of ``loader``, from ``position.in_epoch``
    on, in the order an uninterrupted run saw them."""
    if position.epoch_rng is None:
        position.epoch_rng = capture_rng_state()     # the state the shuffle starts from
    else:
        restore_rng_state(position.epoch_rng)        # resuming: replay the shuffle
    for name in ("batch_sampler", "sampler"):
        set_epoch = getattr(getattr(loader, name, None), "set_epoch", None)
        if callable(set_epoch):
            set_epoch(position.epoch)
    batches = iter(loader)
    for _ in range(position.in_epoch):               # resuming: skip the batches used
        next(batches)
    if position.resume_rng is not None:              # ... and go on from the stop
        restore_rng_state(position.resume_rng)
        position.resume_rng = None
    return batches


__all__ = [
    'unwrap_model',
    'capture_rng_state',
    'restore_rng_state',
    'save_checkpoint',
    'load_checkpoint',
    'RunPosition',
    'epoch_batches',
]
