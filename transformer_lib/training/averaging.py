"""Generated from book/10c_training_plumbing.ipynb: edit the notebook, not this file.
Extended by book/appendix_training_run.ipynb.

Regenerate with ``python tools/export.py``."""
# digest: b9a0d76434901c38
# fmt: off

# [book/10c_training_plumbing.ipynb, cell 6dc35bdc]
from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch


# [book/appendix_training_run.ipynb, cell 9df76606]
import os
from typing import Any

from torch import nn

from transformer_lib.training.checkpoint import CheckpointError, load_checkpoint
from transformer_lib.training.distributed import unwrap_model


# [book/10c_training_plumbing.ipynb, cell d66eb254]
def average_state_dicts(
        state_dicts: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean of several state dicts of one model: floating-point tensors
    are averaged in float32 (float64 stays float64) and cast back to their dtype; other
    tensors (integer buffers, such as step counters) are taken from the last one. The
    dicts must hold the same names with the same shapes and dtypes; otherwise a
    ValueError names the first difference."""
    if isinstance(state_dicts, Mapping) or not isinstance(state_dicts, Sequence):
        raise TypeError("state_dicts must be a sequence (list, tuple) of state dicts, "
                        f"got {type(state_dicts).__name__}")
    if len(state_dicts) == 0:
        raise ValueError("state_dicts must hold at least one state dict, got none")
    first = state_dicts[0]
    for i, sd in enumerate(state_dicts):
        if not isinstance(sd, Mapping) or not all(
                isinstance(t, torch.Tensor) for t in sd.values()):
            raise TypeError(f"state_dicts[{i}] must map names to tensors, got "
                            f"{type(sd).__name__}")
        if sd.keys() != first.keys():
            extra = sorted(sd.keys() - first.keys())[:3]
            missing = sorted(first.keys() - sd.keys())[:3]
            raise ValueError(f"state_dicts[{i}] holds other names than state_dicts[0]:"
                             f" missing {missing}, unexpected {extra}")
        for name, t in sd.items():
            if t.shape != first[name].shape or t.dtype != first[name].dtype:
                raise ValueError(
                    f"state_dicts[{i}][{name!r}] has shape {tuple(t.shape)} and dtype "
                    f"{t.dtype}, state_dicts[0] has {tuple(first[name].shape)} and "
                    f"{first[name].dtype}: not checkpoints of one model")
    averaged: dict[str, torch.Tensor] = {}
    for name, t0 in first.items():
        if not t0.is_floating_point():
            averaged[name] = state_dicts[-1][name].clone()
            continue
        acc = torch.float64 if t0.dtype == torch.float64 else torch.float32
        total = torch.zeros(t0.shape, dtype=acc, device=t0.device)
        for sd in state_dicts:
            total += sd[name].to(device=t0.device, dtype=acc)
        averaged[name] = (total / len(state_dicts)).to(t0.dtype)
    return averaged


# [book/appendix_training_run.ipynb, cell 2c7e53ca]
def average_checkpoints(paths: Sequence[str | os.PathLike],
                        model: nn.Module | None = None) -> dict[str, torch.Tensor]:
    """The mean of the model weights of the checkpoints at ``paths`` (written by
    :func:`~transformer_lib.training.checkpoint.save_checkpoint`), see
    :func:`average_state_dicts`. With ``model``, the average is also loaded into it,
    after the checkpoint is checked to fit it (a :class:`CheckpointError` otherwise,
    before the model is changed). Returns the averaged state dict (on the CPU)."""
    if isinstance(paths, (str, os.PathLike)) or not isinstance(paths, Sequence):
        raise TypeError("paths must be a sequence of checkpoint paths, got "
                        f"{type(paths).__name__}")
    if len(paths) == 0:
        raise ValueError("paths must name at least one checkpoint, got none")
    states = [load_checkpoint(p, map_location="cpu") for p in paths]

    def shape(config: Any) -> Any:
        return {k: v for k, v in config.items() if k != "dropout"} if isinstance(
            config, dict) else config

    for p, s in zip(paths[1:], states[1:]):
        if shape(s.get("config")) != shape(states[0].get("config")):
            raise CheckpointError(f"{os.fspath(p)}: a checkpoint of another model "
                                  f"than {os.fspath(paths[0])} (their configs differ)")
    try:
        averaged = average_state_dicts([s["model"] for s in states])
    except ValueError as exc:
        raise CheckpointError(f"cannot average {[os.fspath(p) for p in paths]}: "
                              f"{exc}") from None
    if model is not None:
        load_checkpoint(paths[-1], model)        # checks that the files fit the model
        unwrap_model(model).load_state_dict(averaged)
    return averaged


__all__ = ['average_state_dicts', 'average_checkpoints']
