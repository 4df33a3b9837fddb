"""Generated from book/10c_training_plumbing.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 1678f74891b9d8d0
# fmt: off

# [book/10c_training_plumbing.ipynb, cell 18265bcd]
from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from transformer_lib.checks import check_float, check_int
from transformer_lib.precision import amp_dtype


# [book/10c_training_plumbing.ipynb, cell b1d8d4cf]
@dataclass
class TrainHistory:
    """What :func:`train` measured. ``loss`` and ``lr`` are logged every ``log_every``
    steps at ``step`` (the training loss averaged over those steps, the learning rate of
    the last one); ``val`` holds one dict per validation (``step``, ``val_loss`` and
    what ``val_fn`` returned). ``interrupted`` is True when Ctrl-C or SIGTERM stopped
    the run and its handler let ``train`` return."""

    step: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    val: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    last_step: int = 0
    interrupted: bool = False


# [book/10c_training_plumbing.ipynb, cell a652515f]
@dataclass
class TrainConfig:
    """The settings of a run of :func:`train`, checked when built:
    ``train(..., config=TrainConfig(steps=100, val_every=10))`` is
    ``train(..., steps=100, val_every=10)``.

    ``steps`` updates in all (counting those of a resumed run); every ``val_every``
    steps and at the end, the loss on ``val_loader`` and the dict of ``val_fn(model)``,
    and a stop when ``stop_fn(that dict)`` is true; gradients clipped to ``clip_norm``
    (None: not clipped); ``accum_steps`` batches per update; ``amp`` ``"bf16"`` or
    ``"fp16"`` (with a GradScaler); the loss logged every ``log_every`` steps; a tqdm
    bar on rank 0 when ``progress``; ``on_step(step, record)`` called after every update
    on every rank, with the update's step number (counting those of a resumed run) and,
    when the update is logged (every ``log_every`` steps, the first update of the run
    and the last), the record ``{"step": int, "loss": float, "lr": float}`` (the mean
    training loss since the last log, the learning rate of the update), else None (the
    record of the first update is not added to the history). At the start, every
    ``checkpoint_every`` steps and at the end, rank 0 writes a checkpoint to
    ``checkpoint_path``, with every rank's random states; with a ``checkpoint_path``,
    Ctrl-C and SIGTERM write one of the last finished update, then go on to their
    previous handler; ``resume_from`` (if the file exists) continues a run exactly, and
    refuses a checkpoint of another model, of a loader with another number of batches
    per epoch, of another ``accum_steps`` or number of processes, or whose
    ``resume_keys`` differ (:class:`CheckpointError`). ``resume_keys``: plain values a
    resumed run must keep (a digest of the data, the batch size, a seed), written into
    every checkpoint; rank 0 calls ``on_checkpoint(step, path)`` after writing one.
    ``metrics_path``: rank 0 appends one JSON line per logged step and per validation
    there (:func:`~transformer_lib.training.metrics_log.read_metrics` reads it back),
    kept across a resume (give it to every process, as ``checkpoint_path``)."""

    steps: int
    val_loader: Iterable | None = None
    val_every: int = 0
    val_fn: Callable[[nn.Module], dict] | None = None
    stop_fn: Callable[[dict], bool] | None = None
    clip_norm: float | None = 1.0
    accum_steps: int = 1
    amp: str | None = None
    log_every: int = 10
    checkpoint_path: str | os.PathLike | None = None
    checkpoint_every: int = 0
    resume_from: str | os.PathLike | None = None
    progress: bool = True
    on_step: Callable[[int, dict | None], None] | None = None
    resume_keys: dict | None = None
    on_checkpoint: Callable[[int, str], None] | None = None
    metrics_path: str | os.PathLike | None = None

    def __post_init__(self) -> None:
        self.steps = check_int(self.steps, "steps", minimum=0)
        self.val_every = check_int(self.val_every, "val_every", minimum=0)
        self.log_every = check_int(self.log_every, "log_every")
        self.accum_steps = check_int(self.accum_steps, "accum_steps")
        self.checkpoint_every = check_int(self.checkpoint_every, "checkpoint_every", 0)
        if self.clip_norm is not None:
            self.clip_norm = check_float(self.clip_norm, "clip_norm", 0, low_open=True)
        amp_dtype(self.amp, "amp")                   # a ValueError names a bad amp
        for name in ("on_step", "on_checkpoint"):        # None or a function
            hook = getattr(self, name)
            if hook is not None and not callable(hook):
                raise TypeError(f"{name} must be callable, got {hook!r}")
        for name in ("checkpoint_path", "resume_from", "metrics_path"):
            path = getattr(self, name)
            if path is not None and not isinstance(path, (str, os.PathLike)):
                raise TypeError(f"{name} must be a path (str or os.PathLike), got "
                                f"{path!r}")
        if self.resume_keys is not None and not isinstance(self.resume_keys, dict):
            raise TypeError(f"resume_keys must be a dict, got {self.resume_keys!r}")

    def due(self, every: int, step: int) -> bool:
        """Whether a task done every ``every`` steps falls after update ``step``."""
        return every > 0 and step % every == 0 and step < self.steps


__all__ = ['TrainHistory', 'TrainConfig']
