"""Generated from book/10c_training_plumbing.ipynb: edit the notebook, not this file.
Extended by book/appendix_training_run.ipynb.

Regenerate with ``python tools/export.py``."""
# digest: eeac97995d713b62
# fmt: off

# [book/10c_training_plumbing.ipynb, cell 6dc35bdc]
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
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


# [book/appendix_training_run.ipynb, cell 85d6286d]
class RunningMean:
    """The element-wise mean of state dicts of one model, added one at a time: a
    running sum in float32 (float64 stays float64), so one model's sum is held, not
    every dict. For the same dicts in the same order it equals
    :func:`average_state_dicts` (the same additions). Integer tensors (step counters)
    are taken from the last dict. ``add`` raises a ``ValueError`` naming the dict
    (its ``name``) whose names, shapes or dtypes differ from the first one's, and
    leaves the sum as it was."""

    def __init__(self) -> None:
        self.total: dict[str, torch.Tensor] = {}
        self.dtypes: dict[str, torch.dtype] = {}
        self.count, self.first = 0, ""

    def add(self, weights: Mapping[str, torch.Tensor],
            name: str = "a state dict") -> None:
        """Add ``weights`` to the sum."""
        if self.count == 0:
            self.first = name
            for key, t in weights.items():
                self.dtypes[key] = t.dtype
                acc = torch.float64 if t.dtype == torch.float64 else torch.float32
                self.total[key] = (torch.zeros(t.shape, dtype=acc, device=t.device)
                                   if t.is_floating_point() else t)
        if weights.keys() != self.dtypes.keys():
            missing = sorted(self.dtypes.keys() - weights.keys())[:3]
            unexpected = sorted(weights.keys() - self.dtypes.keys())[:3]
            raise ValueError(f"{name}: holds other tensors than {self.first}: missing "
                             f"{missing}, unexpected {unexpected}")
        for key, t in weights.items():
            if t.shape != self.total[key].shape or t.dtype != self.dtypes[key]:
                raise ValueError(
                    f"{name}: {key} has shape {tuple(t.shape)} and dtype {t.dtype}, in "
                    f"{self.first} {tuple(self.total[key].shape)} and "
                    f"{self.dtypes[key]}: not checkpoints of one model")
        for key, t in weights.items():
            if t.is_floating_point():
                self.total[key] += t.to(self.total[key].device, self.total[key].dtype)
            else:
                self.total[key] = t.clone()
        self.count += 1

    def mean(self) -> dict[str, torch.Tensor]:
        """The mean of the dicts added so far (a ValueError before the first)."""
        if self.count == 0:
            raise ValueError("RunningMean: no state dict was added")
        return {key: (t / self.count if t.is_floating_point() else t)
                .to(self.dtypes[key]) for key, t in self.total.items()}


# [book/appendix_training_run.ipynb, cell 2c7e53ca]
def average_checkpoints(paths: Sequence[str | os.PathLike],
                        model: nn.Module | None = None) -> dict[str, torch.Tensor]:
    """The mean of the model weights of the checkpoints at ``paths`` (written by
    :func:`~transformer_lib.training.checkpoint.save_checkpoint`, or kept by
    :func:`~transformer_lib.training.snapshots.keep_last`), equal to what
    :func:`average_state_dicts` gives, but summed file by file: the running sum and
    one mapped file are in memory, not every file. With ``model``, the average is
    also loaded into it, after the checkpoints are checked to fit it (a
    :class:`CheckpointError` otherwise, before the model is changed). Returns the
    averaged state dict (on the CPU)."""
    if isinstance(paths, (str, os.PathLike)) or not isinstance(paths, Sequence):
        raise TypeError("paths must be a sequence of checkpoint paths, got "
                        f"{type(paths).__name__}")
    if len(paths) == 0:
        raise ValueError("paths must name at least one checkpoint, got none")
    first, mean = os.fspath(paths[0]), RunningMean()
    for i, path in enumerate(os.fspath(p) for p in paths):
        state = load_checkpoint(path, mmap=True)            # checked, weights finite
        if i == 0:
            config = _shape(state.get("config"))
        elif _shape(state.get("config")) != config:
            raise CheckpointError(f"{path}: a checkpoint of another model than "
                                  f"{first} (their configs differ)")
        try:
            mean.add(state["model"], path)
        except ValueError as exc:
            raise CheckpointError(str(exc)) from None
        del state                                            # one file at a time
    averaged = mean.mean()
    if model is not None:
        load_checkpoint(paths[-1], model, mmap=True)     # checks that the files fit it
        unwrap_model(model).load_state_dict(averaged)
    return averaged


def _shape(config: Any) -> Any:
    """A stored config without its dropout, which changes no weight."""
    return ({k: v for k, v in config.items() if k != "dropout"}
            if isinstance(config, dict) else config)


__all__ = ['average_state_dicts', 'RunningMean', 'average_checkpoints']
