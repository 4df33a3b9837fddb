"""Generated from book/10c_training_plumbing.ipynb: edit the notebook, not this file.
Extended by book/appendix_training_run.ipynb.

Regenerate with ``python tools/export.py``."""
# digest: e021cc3a69c39b71
# fmt: off

# [book/10c_training_plumbing.ipynb, cell 94c0227a]
from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from transformer_lib.checks import default_device


# [book/10c_training_plumbing.ipynb, cell 0d4c1947]
def is_distributed() -> bool:
    """Whether this process belongs to a running process group (under ``torchrun``,
    after :func:`setup_distributed`)."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def rank() -> int:
    """This process's rank in its group; 0 without a group."""
    return torch.distributed.get_rank() if is_distributed() else 0


def world_size() -> int:
    """The number of processes in the group; 1 without a group."""
    return torch.distributed.get_world_size() if is_distributed() else 1


def unwrap_model(model: nn.Module) -> nn.Module:
    """The model inside a ``DistributedDataParallel`` (or ``DataParallel``) wrapper,
    else ``model`` itself: what a checkpoint stores, so that it loads with or without
    DDP."""
    wrappers = (nn.parallel.DistributedDataParallel, nn.DataParallel)
    return model.module if isinstance(model, wrappers) else model


# [book/appendix_training_run.ipynb, cell 4306c6a6]
def setup_distributed(backend: str | None = None) -> tuple[int, int, torch.device]:
    """Join the process group that ``torchrun`` describes in the environment (RANK,
    WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and return (rank, world_size,
    device). The backend is nccl when CUDA is present (each process takes GPU
    LOCAL_RANK), gloo on the CPU. Without torchrun's variables it returns (0, 1, default
    device) and starts nothing."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return 0, 1, default_device()
    dist = torch.distributed
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend or ("nccl" if cuda else "gloo"))
    return dist.get_rank(), dist.get_world_size(), device


def cleanup_distributed() -> None:
    """Leave the process group, if one was started."""
    if is_distributed():
        torch.distributed.destroy_process_group()


def gather_objects(obj: Any) -> list[Any]:
    """``obj`` of every rank, in rank order (``all_gather_object``: every rank of the
    group must call it); ``[obj]`` without a group."""
    if not is_distributed():
        return [obj]
    gathered: list[Any] = [None] * world_size()
    torch.distributed.all_gather_object(gathered, obj)
    return gathered


__all__ = [
    'is_distributed', 'rank', 'world_size', 'unwrap_model', 'setup_distributed',
    'cleanup_distributed', 'gather_objects',
]
