"""Generated from book/10c_training_plumbing.ipynb: edit the notebook, not this file.
Extended by book/appendix_training_run.ipynb.

Regenerate with ``python tools/export.py``."""
# digest: 66864367b757bedd
# fmt: off

# [book/10c_training_plumbing.ipynb, cell dfe2009d]
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from transformer_lib.training.checkpoint import capture_rng_state, restore_rng_state
from transformer_lib.training.checkpoint import CheckpointError


# [book/10c_training_plumbing.ipynb, cell bd7c4c73]
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

    # [book/appendix_training_run.ipynb, cell 2f269f38]
    @classmethod
    def from_checkpoint(cls, state: dict[str, Any], rank: int = 0,
                        world_size: int = 1) -> RunPosition:
        """The position in a checkpoint that ``train`` wrote (see
        :func:`load_checkpoint`), for process ``rank`` of ``world_size``: with that
        process's own random states when the checkpoint holds one entry per process
        (``extra["ranks"]``), else with those of the process that wrote it. A
        checkpoint of N processes raises :class:`CheckpointError` for another
        ``world_size``."""
        extra = state["extra"]
        if not {"epoch", "in_epoch", "epoch_rng"} <= extra.keys():
            raise CheckpointError("the checkpoint holds no position in an epoch: it "
                                  "was not written by train()")
        rng, epoch_rng, ranks = state["rng"], extra["epoch_rng"], extra.get("ranks")
        if ranks is not None:
            if not isinstance(ranks, list) or len(ranks) != world_size:
                n = len(ranks) if isinstance(ranks, list) else "?"
                raise CheckpointError(
                    f"the checkpoint holds the random states of {n} process(es), "
                    f"this run has {world_size}: it resumes exactly only with {n}")
            rng, epoch_rng = ranks[rank]["rng"], ranks[rank]["epoch_rng"]
        return cls(state["step"], extra["epoch"], extra["in_epoch"], epoch_rng,
                   resume_rng=rng)


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
    for used in range(position.in_epoch):            # resuming: skip the batches used
        if next(batches, None) is None:
            raise ValueError(
                f"cannot resume at batch {position.in_epoch} of epoch "
                f"{position.epoch}: the loader gives only {used} batches in that "
                "epoch (other data or another batch size than the run that was "
                "saved?)")
    if position.resume_rng is not None:              # ... and go on from the stop
        if position.in_epoch > 0:    # (at an epoch's start the replayed shuffle is it)
            restore_rng_state(position.resume_rng)
        position.resume_rng = None
    return batches


__all__ = ['RunPosition', 'epoch_batches']
