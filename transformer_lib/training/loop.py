"""Generated from book/10_training.ipynb: edit the notebook, not this file.
Extended by book/appendix_training_run.ipynb.

Regenerate with ``python tools/export.py``."""
# digest: dc31d3b5e7673f63
# fmt: off

# [book/10_training.ipynb, cell 4bdf88f1]
from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from transformer_lib.training.batching import Batch
from transformer_lib.training.checkpoint import NonFiniteError, RunPosition, epoch_batches
from transformer_lib.training.checkpoint import capture_rng_state, restore_rng_state
from transformer_lib.training.checkpoint import unwrap_model
from transformer_lib.training.evaluation import amp_dtype, evaluate
from transformer_lib.training.loss import LabelSmoothingLoss
from transformer_lib.training.distributed import is_distributed, rank, world_size
from transformer_lib.training.config import TrainConfig, TrainHistory


# [book/appendix_training_run.ipynb, cell 1b1bfd1d]
from transformer_lib.training.checkpoint import CheckpointError, load_checkpoint
from transformer_lib.training.checkpoint import save_checkpoint
from transformer_lib.training.distributed import gather_objects
from transformer_lib.training.interrupts import Interrupts


# [book/10_training.ipynb, cell db12398f]
def train(model: nn.Module, train_loader: Iterable, optimizer: torch.optim.Optimizer,
          scheduler: Any = None, loss_fn: Callable | None = None, *,
          steps: int | None = None, val_loader: Iterable | None = None,
          val_every: int = 0, val_fn: Callable[[nn.Module], dict] | None = None,
          stop_fn: Callable[[dict], bool] | None = None, clip_norm: float | None = 1.0,
          accum_steps: int = 1, amp: str | None = None, log_every: int = 10,
          checkpoint_path: str | os.PathLike | None = None, checkpoint_every: int = 0,
          resume_from: str | os.PathLike | None = None, progress: bool = True,
          config: TrainConfig | None = None) -> TrainHistory:
    """Train ``model`` for ``steps`` optimizer updates (in total, counting those of a
    resumed run) on the batches of ``train_loader`` (``src, tgt_in, tgt_out``, see
    :class:`PadCollate`), epoch after epoch; return a :class:`TrainHistory`. The
    settings come as keyword arguments or as ``config``: see :class:`TrainConfig`.

    An update: ``loss_fn(model(src, tgt_in), tgt_out)`` (default
    ``LabelSmoothingLoss(0.1, pad_id)``) under ``torch.autocast`` for ``amp``, over
    ``accum_steps`` batches weighted by their target tokens
    (:func:`accumulate_gradients`); ``clip_grad_norm_(clip_norm)``;
    ``optimizer.step()``, then ``scheduler.step()``. Every ``val_every`` steps and at
    the end: the loss on ``val_loader`` and ``val_fn(model)``; ``stop_fn(record)``
    stops early. A non-finite loss or non-finite weights raise
    :class:`NonFiniteError` (the checkpoint file keeps the last finite state). The
    settings, checkpoints and resuming included: :class:`TrainConfig`. Under
    ``torchrun`` (after :func:`setup_distributed`) the model is wrapped in
    ``DistributedDataParallel``, and the loader's sampler must split the data by rank
    (:class:`TokenBucketSampler` does)."""
    cfg = _settings(config, steps, val_loader=val_loader, val_every=val_every,
                    val_fn=val_fn, stop_fn=stop_fn, clip_norm=clip_norm,
                    accum_steps=accum_steps, amp=amp, log_every=log_every,
                    checkpoint_path=checkpoint_path, checkpoint_every=checkpoint_every,
                    resume_from=resume_from, progress=progress)
    run = _Run.start(model, optimizer, scheduler, loss_fn, cfg)
    run.epoch_length = _length(train_loader)
    keeper, history, losses = _KEEPER(run), TrainHistory(), _LossLog(run.device)
    pos = keeper.start(losses)                       # step 0, or where a run stopped
    t0 = time.perf_counter()
    with keeper.guard(pos, losses), _progress(cfg, pos.step) as bar:
        stopped = _loop(run, train_loader, pos, history, losses, bar, keeper)
        if not stopped and keeper.signum is None:
            _validate(run, pos.step, history, bar)   # the final validation
        keeper.finish(pos, losses)
    history.seconds, history.last_step = time.perf_counter() - t0, pos.step
    history.interrupted = keeper.signum is not None
    keeper.deliver()
    return history


# [book/10_training.ipynb, cell 13cc1439]
@dataclass
class _Run:
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

    @classmethod
    def start(cls, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
              loss_fn: Callable | None, config: TrainConfig) -> _Run:
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


# [book/10_training.ipynb, cell e2eb7979]
def accumulate_gradients(model: nn.Module, batches: Sequence[Batch], loss_fn: Callable,
                         pad_id: int | None = 0, amp: str | None = None,
                         scaler: torch.amp.GradScaler | None = None) -> torch.Tensor:
    """Add to the ``.grad`` of ``model``'s parameters the gradient of the loss of
    ``batches`` (micro-batches on the model's device) taken as one batch: each
    ``loss_fn(logits, tgt_out)`` (a mean over the batch's real target tokens, those not
    ``pad_id``; every position when ``pad_id`` is None) weighted by its count of real
    tokens, divided by the count of all the batches, summed over every process under
    DDP (ranks weighted by their tokens). Returns this process's token-weighted mean
    loss (on the device, detached). Does not zero the gradients."""
    if len(batches) == 0:
        raise ValueError("batches must hold at least one batch")
    dtype = amp_dtype(amp)
    device = batches[0].tgt_out.device
    counts = torch.stack([(b.tgt_out != pad_id).sum() if pad_id is not None
                          else torch.tensor(b.tgt_out.numel(), device=device)
                          for b in batches]).float()                # (k,)
    local = counts.sum()
    total = local.clone()
    ddp = model if isinstance(model, nn.parallel.DistributedDataParallel) else None
    if is_distributed():
        torch.distributed.all_reduce(total)          # tokens of every rank
    simple = len(batches) == 1 and not is_distributed()
    scale = world_size() / total.clamp(min=1)        # DDP averages over the ranks
    logged = torch.zeros((), device=device)
    for i, (batch, n) in enumerate(zip(batches, counts)):
        last = i == len(batches) - 1
        quiet = ddp.no_sync() if ddp is not None and not last else None
        with quiet or contextlib.nullcontext():      # DDP: sync the last
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                logits = model(batch.src, batch.tgt_in)                  # (B, T, V)
            mean = loss_fn(logits.float(), batch.tgt_out)
            loss = mean if simple else mean * n * scale
            (loss if scaler is None else scaler.scale(loss)).backward()
        logged += mean.detach() * n
    return logged / local.clamp(min=1)


def _update(run: _Run, batches: list[Batch]) -> tuple[torch.Tensor, float]:
    """One update on ``batches`` (accum_steps micro-batches) -> (their token-weighted
    loss, on the device; the learning rate)."""
    moved = [Batch(*b).to(run.device, non_blocking=True) for b in batches]
    run.optimizer.zero_grad(set_to_none=True)
    loss = accumulate_gradients(run.model, moved, run.loss_fn, run.pad_id,
                                run.config.amp, run.scaler)
    if run.scaler is not None:
        run.scaler.unscale_(run.optimizer)       # clipping must see the true gradients
    if run.config.clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(run.model.parameters(), run.config.clip_norm)
    if run.scaler is None:
        run.optimizer.step()
    else:
        run.scaler.step(run.optimizer)           # skipped if the gradients overflowed
        run.scaler.update()
    lr = run.optimizer.param_groups[0]["lr"]         # the rate this update used
    if run.scheduler is not None:
        run.scheduler.step()
    return loss, lr


# [book/10_training.ipynb, cell 51caf1f3]
class _LossLog:
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

    def write(self, history: TrainHistory, bar: Any, step: int, lr: float) -> None:
        mean = self.check(step)                      # the read-back
        self.total.zero_()
        self.count = 0
        history.step.append(step)
        history.loss.append(mean)
        history.lr.append(lr)
        if bar is not None:
            bar.set_postfix(loss=f"{mean:.4f}", lr=f"{lr:.3g}", refresh=False)


# [book/10_training.ipynb, cell edb236d5]
def _validate(run: _Run, step: int, history: TrainHistory, bar: Any) -> bool:
    """Validate after update ``step`` into ``history``; True if ``stop_fn`` says
    stop."""
    cfg = run.config
    if cfg.val_loader is None and cfg.val_fn is None:
        return False
    saved = capture_rng_state()
    record: dict[str, Any] = {"step": step}
    try:
        if cfg.val_loader is not None:
            record["val_loss"] = evaluate(run.net, cfg.val_loader, run.loss_fn, cfg.amp)
        if cfg.val_fn is not None:
            record.update(cfg.val_fn(run.net))
    finally:
        restore_rng_state(saved)
    history.val.append(record)
    if bar is not None:
        bar.write(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in record.items()))
    return bool(cfg.stop_fn is not None and cfg.stop_fn(record))


# [book/10_training.ipynb, cell d3c31d48]
def _loop(run: _Run, loader: Iterable, pos: RunPosition, history: TrainHistory,
          losses: _LossLog, bar: Any, keeper: _Keeper) -> bool:
    """Updates from ``pos`` (moved along in place) to ``steps``; True if stopped by
    ``stop_fn``."""
    cfg = run.config
    run.model.train()
    while pos.step < cfg.steps and keeper.signum is None:
        for group in _groups(epoch_batches(loader, pos), cfg.accum_steps):
            run.busy = True
            loss, lr = _update(run, group)
            pos.step, pos.in_epoch = pos.step + 1, pos.in_epoch + len(group)
            run.busy = False
            losses.add(loss)
            if pos.step % cfg.log_every == 0 or pos.step == cfg.steps:
                losses.write(history, bar, pos.step, lr)
            if bar is not None:
                bar.update(1)
            if cfg.due(cfg.val_every, pos.step) and _validate(run, pos.step, history,
                                                               bar):
                return True
            keeper.after_update(pos, losses)         # a checkpoint, when one is due
            if pos.step >= cfg.steps or keeper.signum is not None:
                return False
        if pos.in_epoch == 0:                        # the epoch is over: the next one
            raise ValueError("train_loader yielded no batch")
        pos.epoch, pos.in_epoch, pos.epoch_rng = pos.epoch + 1, 0, None
    return False


def _groups(batches: Iterable, k: int) -> Iterator[list]:
    """The batches in groups of ``k``, one group per update; the epoch's last group
    may be shorter (an update never spans two epochs)."""
    group: list = []
    for batch in batches:
        group.append(batch)
        if len(group) == k:
            yield group
            group = []
    if group:
        yield group


# [book/10_training.ipynb, cell 09b65e47]
class _Keeper:
    """What keeps a run of :func:`train` across interruptions. This one keeps nothing:
    the run starts at step 0, writes no checkpoint and leaves Ctrl-C alone. The
    appendix "A training run that survives" subclasses it with checkpoints, resuming
    and signal handling, and installs its keeper as ``_KEEPER``."""

    @property
    def signum(self) -> int | None:
        """A noted Ctrl-C or SIGTERM (the loop stops after the update); None here."""
        return None

    def __init__(self, run: _Run):
        if run.config.checkpoint_path or run.config.resume_from is not None:
            raise ValueError("checkpoint_path and resume_from need the keeper of the "
                             "appendix (import train from transformer_lib)")
        self.run = run

    def start(self, losses: _LossLog) -> RunPosition:
        """Where the run starts: step 0 (the appendix: where a checkpoint stopped)."""
        return RunPosition()

    def guard(self, pos: RunPosition, losses: _LossLog) -> Any:
        """A context around the updates (the appendix notes signals in it)."""
        return contextlib.nullcontext()

    def after_update(self, pos: RunPosition, losses: _LossLog) -> None:
        """Called after each update (the appendix: a checkpoint, when one is due)."""

    def finish(self, pos: RunPosition, losses: _LossLog) -> None:
        """Called at the end of the run (the appendix writes the last checkpoint)."""

    def deliver(self) -> None:
        """Called last (the appendix hands a noted signal on)."""


_KEEPER: type[_Keeper] = _Keeper     # the appendix sets its own


# [book/10_training.ipynb, cell 0fedf3eb]
def _settings(config: TrainConfig | None, steps: int | None,
              **keywords: Any) -> TrainConfig:
    if config is None:
        if steps is None:
            raise TypeError("train() needs steps=N or config=TrainConfig(steps=N)")
        return TrainConfig(steps, **keywords)
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    if steps is not None or TrainConfig(0, **keywords) != TrainConfig(0):
        raise TypeError("give train() its settings as config=TrainConfig(...) or as "
                        "keyword arguments, not both")
    return config


def _length(loader: Iterable) -> int | None:
    """``len(loader)``, or None for a loader without one."""
    try:
        return len(loader)  # type: ignore[arg-type]
    except TypeError:
        return None


@contextlib.contextmanager
def _progress(cfg: TrainConfig, start: int) -> Iterator[Any]:
    """A tqdm bar on rank 0 when ``progress`` (else None), closed at the end."""
    bar = None
    if cfg.progress and rank() == 0:
        bar = tqdm(total=cfg.steps, initial=start, ncols=100, mininterval=1.0,
                   file=sys.stderr)
    try:
        yield bar
    finally:
        if bar is not None:
            bar.close()


# [book/appendix_training_run.ipynb, cell e70db9bd]
class _FileKeeper(_Keeper):
    """The keeper of a run with ``checkpoint_path`` or ``resume_from``: it resumes,
    writes checkpoints (at the start, every ``checkpoint_every`` steps, at the end, and
    on Ctrl-C or SIGTERM), and names the last good checkpoint when the run fails."""

    def __init__(self, run: _Run):
        self.run = run
        self.saved_step: int | None = None           # the step of the last checkpoint
        self.interrupts = Interrupts(bool(run.config.checkpoint_path))

    @property
    def signum(self) -> int | None:
        return self.interrupts.signum

    def start(self, losses: _LossLog) -> RunPosition:
        pos = self.resume()
        if pos.step == 0 and self.run.config.checkpoint_path:  # resumable from step 0
            pos.epoch_rng = capture_rng_state()      # (what the epoch would record)
            self.save(pos, losses)
        return pos

    def after_update(self, pos: RunPosition, losses: _LossLog) -> None:
        if self.run.config.due(self.run.config.checkpoint_every, pos.step):
            self.save(pos, losses)

    def finish(self, pos: RunPosition, losses: _LossLog) -> None:
        self.save(pos, losses, barrier=self.signum is None)

    def deliver(self) -> None:
        self.interrupts.deliver()                     # the signal goes on

    # [book/appendix_training_run.ipynb, cell 2822ea7a]
    @contextlib.contextmanager
    def guard(self, pos: RunPosition, losses: _LossLog) -> Iterator[None]:
        """Signals noted while the updates run; an interrupt between two updates saves
        that step; a non-finite run says which checkpoint still holds a good state."""
        with self.interrupts:
            try:
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
    def save(self, pos: RunPosition, losses: _LossLog, barrier: bool = True) -> None:
        """Checkpoint the run at ``pos`` to ``checkpoint_path``, if there is one, after
        checking the losses not yet logged (save_checkpoint checks the weights). It
        holds the random states of every rank, except after an interrupt under DDP (no
        ``barrier``: the ranks may not all be here), where it holds rank 0's only."""
        run, path = self.run, self.run.config.checkpoint_path
        if not path:
            return
        losses.check(pos.step)
        ranks = None
        if barrier or not is_distributed():          # a collective: all ranks are here
            here = {"rng": capture_rng_state(), "epoch_rng": pos.epoch_rng}
            ranks = gather_objects(here)
        if rank() == 0:
            save_checkpoint(path, run.net, run.optimizer, run.scheduler, run.scaler,
                            pos.step, epoch=pos.epoch, in_epoch=pos.in_epoch,
                            epoch_rng=pos.epoch_rng,
                            batches_per_epoch=run.epoch_length, ranks=ranks)
            self.saved_step = pos.step
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
        saved, here = state["extra"].get("batches_per_epoch"), run.epoch_length
        if saved is not None and here is not None and saved != here:
            raise CheckpointError(
                f"{os.fspath(path)}: the run was saved with {saved} batches per epoch, "
                f"this train_loader gives {here} (other data, another batch size or "
                "another number of processes): it cannot be resumed exactly")
        load_checkpoint(path, run.net, run.optimizer, run.scheduler, run.scaler,
                        map_location=run.device)
        return position


# [book/appendix_training_run.ipynb, cell 7c4178a0]
_KEEPER = _FileKeeper                # train keeps every run with this keeper


__all__ = ['train', 'accumulate_gradients']
