"""Generated from book/10c_training_plumbing.ipynb: edit the notebook, not this file.
Extended by book/appendix_training_run.ipynb.

Regenerate with ``python tools/export.py``."""
# digest: fc68c1be5b72cd58
# fmt: off

# [book/10c_training_plumbing.ipynb, cell 1ae85b79]
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

import torch

from transformer_lib.training.checkpoint import CheckpointError, NonFiniteError
from transformer_lib.training.checkpoint import capture_rng_state, check_same_run
from transformer_lib.training.checkpoint import load_checkpoint, save_checkpoint
from transformer_lib.training.distributed import gather_objects, is_distributed, rank
from transformer_lib.training.distributed import world_size
from transformer_lib.training.interrupts import Interrupts
from transformer_lib.training.metrics_log import append_metrics, keep_metrics_until
from transformer_lib.training.position import RunPosition
from transformer_lib.training.run import LossLog, Run


# [book/10c_training_plumbing.ipynb, cell 09b65e47]
class Keeper:
    """What keeps a run of :func:`train` across interruptions. This one keeps nothing:
    the run starts at step 0, writes no checkpoint and leaves Ctrl-C alone. The
    appendix "A training run that survives" subclasses it with checkpoints, resuming
    and signal handling, and the library's ``train`` uses that one."""

    @property
    def signum(self) -> int | None:
        """A noted Ctrl-C or SIGTERM (the loop stops after the update); None here."""
        return None

    def __init__(self, run: Run):
        if run.config.checkpoint_path or run.config.resume_from is not None:
            raise ValueError("checkpoint_path and resume_from need the keeper of the "
                             "appendix (import train from transformer_lib)")
        self.run = run

    def start(self, losses: LossLog) -> RunPosition:
        """Where the run starts: step 0 (the appendix: where a checkpoint stopped)."""
        return RunPosition()

    def guard(self, pos: RunPosition, losses: LossLog) -> Any:
        """A context around the updates (the appendix notes signals in it)."""
        return contextlib.nullcontext()

    def after_update(self, pos: RunPosition, losses: LossLog) -> None:
        """Called after each update (the appendix: a checkpoint, when one is due)."""

    def finish(self, pos: RunPosition, losses: LossLog) -> None:
        """Called at the end of the run (the appendix writes the last checkpoint)."""

    def deliver(self) -> None:
        """Called last (the appendix hands a noted signal on)."""


# [book/appendix_training_run.ipynb, cell e70db9bd]
class FileKeeper(Keeper):
    """The keeper of a run with ``checkpoint_path`` or ``resume_from``: it resumes,
    writes checkpoints (at the start, every ``checkpoint_every`` steps, at the end, and
    on Ctrl-C or SIGTERM), names the last good checkpoint when the run fails, and
    writes the run's record to ``metrics_path``."""

    def __init__(self, run: Run):
        self.run = run
        self.saved_step: int | None = None           # the step of the last checkpoint
        self.first_save = False                      # the step-0 checkpoint is due
        self.interrupts = Interrupts(bool(run.config.checkpoint_path))
        self.clock = (0.0, 0.0)           # (seconds, CPU seconds) of the earlier parts
        self.unlogged: list | None = None     # a resumed run's losses not yet logged
        self.started = (time.perf_counter(), time.process_time())

    @property
    def signum(self) -> int | None:
        return self.interrupts.signum

    def start(self, losses: LossLog) -> RunPosition:
        pos = self.resume()
        if self.unlogged is not None:                # so the next logged mean is exact
            losses.total.fill_(self.unlogged[0])
            losses.count = int(self.unlogged[1])
        # resumable from step 0: the guard writes that checkpoint, with signals noted
        self.first_save = pos.step == 0 and bool(self.run.config.checkpoint_path)
        if self.first_save:
            pos.epoch_rng = capture_rng_state()      # (what the epoch would record)
        metrics = self.run.config.metrics_path
        if metrics is not None:
            if rank() == 0:                  # the lines after pos.step: logged again
                os.makedirs(os.path.dirname(os.path.abspath(metrics)), exist_ok=True)
                keep_metrics_until(metrics, pos.step)
            self.run.on_record = self.record
        self.started = (time.perf_counter(), time.process_time())
        return pos

    def after_update(self, pos: RunPosition, losses: LossLog) -> None:
        if self.run.config.due(self.run.config.checkpoint_every, pos.step):
            self.save(pos, losses)

    def finish(self, pos: RunPosition, losses: LossLog) -> None:
        self.save(pos, losses, barrier=self.signum is None)

    def deliver(self) -> None:
        self.interrupts.deliver()                     # the signal goes on

    # [book/appendix_training_run.ipynb, cell 2822ea7a]
    @contextlib.contextmanager
    def guard(self, pos: RunPosition, losses: LossLog) -> Iterator[None]:
        """Signals noted while the updates run; an interrupt between two updates saves
        that step; a non-finite run says which checkpoint still holds a good state."""
        with self.interrupts:
            try:
                if self.first_save:                  # a Ctrl-C here waits for it
                    self.save(pos, losses)
                yield
            except KeyboardInterrupt:                # between two updates: save
                if self.run.config.checkpoint_path and not self.run.busy:
                    self.save(pos, losses, barrier=False)
                raise
            except NonFiniteError as exc:
                raise NonFiniteError(f"{exc}; {self.kept()}") from None

    def kept(self) -> str:
        """What the checkpoint file holds after a run failed."""
        path = self.run.config.checkpoint_path
        if not path:
            return "no checkpoint_path was given"
        if self.saved_step is None:
            return f"{os.fspath(path)} was not written by this run"
        return (f"{os.fspath(path)} holds step {self.saved_step}, the last checkpoint "
                "written with finite weights and losses: resume from it (a lower "
                "learning rate or a longer warm-up may avoid the blow-up)")

    # [book/appendix_training_run.ipynb, cell 6a86d045]
    def save(self, pos: RunPosition, losses: LossLog, barrier: bool = True) -> None:
        """Checkpoint the run at ``pos`` to ``checkpoint_path``, if there is one, after
        checking the losses not yet logged (save_checkpoint checks the weights). It
        holds the random states of every rank, except after an interrupt under DDP (no
        ``barrier``: the ranks may not all be here), where it holds rank 0's only.
        Rank 0 then calls ``on_checkpoint(step, path)``, if the run has one."""
        run, path = self.run, self.run.config.checkpoint_path
        if not path:
            return
        losses.check(pos.step)
        ranks = None
        if barrier or not is_distributed():          # a collective: all ranks are here
            here = {"rng": capture_rng_state(), "epoch_rng": pos.epoch_rng,
                    "tokens": int(run.tokens),     # and the losses not yet logged:
                    "losses": [float(losses.total), losses.count]}
            ranks = gather_objects(here)
        if rank() == 0:
            seconds, cpu_seconds = self.elapsed()
            save_checkpoint(path, run.net, run.optimizer, run.scheduler, run.scaler,
                            pos.step, epoch=pos.epoch, in_epoch=pos.in_epoch,
                            epoch_rng=pos.epoch_rng,
                            batches_per_epoch=run.epoch_length, ranks=ranks,
                            accum_steps=run.config.accum_steps,
                            resume_keys=run.config.resume_keys, tokens=int(run.tokens),
                            seconds=seconds, cpu_seconds=cpu_seconds)
            self.saved_step = pos.step
            if run.config.on_checkpoint is not None:     # e.g. keep a copy of the file
                run.config.on_checkpoint(pos.step, os.fspath(path))
        if barrier and is_distributed():
            torch.distributed.barrier()

    # [book/appendix_training_run.ipynb, cell 55eaff00]
    def resume(self) -> RunPosition:
        """The position in ``resume_from`` with every state loaded, or the start (no
        file). Everything is checked before anything is loaded."""
        run, path = self.run, self.run.config.resume_from
        if path is None or not os.path.exists(path):
            return RunPosition()
        state = load_checkpoint(path, map_location=run.device)     # read and checked
        try:
            position = RunPosition.from_checkpoint(state, rank(), world_size())
        except CheckpointError as exc:
            raise CheckpointError(f"{os.fspath(path)}: {exc}") from None
        extra, steps = state["extra"], run.config.steps
        saved, here = extra.get("batches_per_epoch"), run.epoch_length
        if saved is not None and here is not None and saved != here:
            raise CheckpointError(
                f"{os.fspath(path)}: the run was saved with {saved} batches per epoch, "
                f"this train_loader gives {here} (other data, another batch size or "
                "another number of processes): it cannot be resumed exactly")
        check_same_run(path, run.config.accum_steps, run.config.resume_keys,
                       state=state)
        if position.step > steps:
            raise CheckpointError(f"{os.fspath(path)}: the run has already made "
                                  f"{position.step} updates, more than steps={steps}: "
                                  "ask for more steps to continue it")
        load_checkpoint(path, run.net, run.optimizer, run.scheduler, run.scaler,
                        map_location=run.device)
        ranks = extra.get("ranks")
        mine = ranks[rank()] if isinstance(ranks, list) else extra
        run.tokens = int(mine.get("tokens", extra.get("tokens", 0)))
        self.unlogged = mine.get("losses")           # the log's sum since its last line
        self.clock = (extra.get("seconds", 0.0), extra.get("cpu_seconds", 0.0))
        return position

    # [book/appendix_training_run.ipynb, cell 7493ea55]
    def record(self, record: dict[str, Any]) -> None:
        """A logged record (from ``Run.note``) with the target tokens of every process,
        the seconds and the CPU seconds of rank 0 since the run began (a resumed
        run's earlier parts included), appended to ``metrics_path`` by rank 0."""
        tokens = int(self.run.tokens)                # read back: a logged step
        if is_distributed():                         # every rank logs this step
            total = torch.tensor(tokens, device=self.run.device)
            torch.distributed.all_reduce(total)
            tokens = int(total)
        seconds, cpu_seconds = self.elapsed()
        if rank() == 0 and self.run.config.metrics_path is not None:
            append_metrics(self.run.config.metrics_path,
                           {**record, "tokens": tokens, "seconds": round(seconds, 3),
                            "cpu_seconds": round(cpu_seconds, 3)})

    def elapsed(self) -> tuple[float, float]:
        """(seconds, CPU seconds) of this run, its resumed parts included."""
        wall, cpu = self.clock
        return (wall + time.perf_counter() - self.started[0],
                cpu + time.process_time() - self.started[1])


__all__ = []
