"""Generated from book/10_training.ipynb: edit the notebook, not this file.
Extended by book/10c_training_plumbing.ipynb.

Regenerate with ``python tools/export.py``."""
# digest: 39adecd4340540b0
# fmt: off

# [book/10_training.ipynb, cell 4bdf88f1]
from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from transformer_lib.training.batching import Batch
from transformer_lib.training.checkpoint import capture_rng_state, restore_rng_state
from transformer_lib.training.position import RunPosition, epoch_batches
from transformer_lib.training.evaluation import evaluate
from transformer_lib.precision import amp_dtype
from transformer_lib.training.distributed import is_distributed, rank, world_size
from transformer_lib.training.config import TrainConfig, TrainHistory
from transformer_lib.training.keeper import FileKeeper, Keeper
from transformer_lib.training.run import LossLog, Run


# [book/10_training.ipynb, cell db12398f]
def train(model: nn.Module, train_loader: Iterable, optimizer: torch.optim.Optimizer,
          scheduler: Any = None, loss_fn: Callable | None = None, *,
          steps: int | None = None, val_loader: Iterable | None = None,
          val_every: int = 0, val_fn: Callable[[nn.Module], dict] | None = None,
          stop_fn: Callable[[dict], bool] | None = None, clip_norm: float | None = 1.0,
          accum_steps: int = 1, amp: str | None = None, log_every: int = 10,
          checkpoint_path: str | os.PathLike | None = None, checkpoint_every: int = 0,
          resume_from: str | os.PathLike | None = None, progress: bool = True,
          on_step: Callable[[int, dict | None], None] | None = None,
          resume_keys: dict | None = None,
          on_checkpoint: Callable[[int, str], None] | None = None,
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
    the end: the loss on ``val_loader`` and ``val_fn(model)``; ``stop_fn(record)`` stops
    early. ``on_step(step, record)`` is called after every update (``record``: the
    logged ``{"step", "loss", "lr"}``, else None). A non-finite loss or non-finite
    weights raise :class:`NonFiniteError` (the checkpoint file keeps the last finite
    state). The settings, checkpoints and resuming included: :class:`TrainConfig`. Under
    ``torchrun`` (after :func:`setup_distributed`) the model is wrapped in
    ``DistributedDataParallel``, and the loader's sampler must split the data by rank
    (:class:`TokenBucketSampler` does)."""
    cfg = _settings(config, steps, val_loader=val_loader, val_every=val_every,
                    val_fn=val_fn, stop_fn=stop_fn, clip_norm=clip_norm,
                    accum_steps=accum_steps, amp=amp, log_every=log_every,
                    checkpoint_path=checkpoint_path, checkpoint_every=checkpoint_every,
                    resume_from=resume_from, progress=progress, on_step=on_step,
                    resume_keys=resume_keys, on_checkpoint=on_checkpoint)
    run = Run.start(model, optimizer, scheduler, loss_fn, cfg)
    run.epoch_length = _length(train_loader)
    keeper, history, losses = FileKeeper(run), TrainHistory(), LossLog(run.device)
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


def _update(run: Run, batches: list[Batch]) -> tuple[torch.Tensor, float]:
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


# [book/10c_training_plumbing.ipynb, cell edb236d5]
def _validate(run: Run, step: int, history: TrainHistory, bar: Any) -> bool:
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
    run.note("valid", record)
    if bar is not None:
        bar.write(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in record.items()))
    return bool(cfg.stop_fn is not None and cfg.stop_fn(record))


# [book/10c_training_plumbing.ipynb, cell d3c31d48]
def _loop(run: Run, loader: Iterable, pos: RunPosition, history: TrainHistory,
          losses: LossLog, bar: Any, keeper: Keeper) -> bool:
    """Updates from ``pos`` (moved along in place) to ``steps``; True if stopped by
    ``stop_fn``."""
    cfg, first = run.config, pos.step + 1
    run.model.train()
    while pos.step < cfg.steps and keeper.signum is None:
        for group in _groups(epoch_batches(loader, pos), cfg.accum_steps):
            run.busy = True
            loss, lr = _update(run, group)
            pos.step, pos.in_epoch = pos.step + 1, pos.in_epoch + len(group)
            run.busy = False
            run.tokens = run.tokens + _target_tokens(group, run.pad_id)   # not read
            losses.add(loss)
            record = None
            if pos.step % cfg.log_every == 0 or pos.step == cfg.steps:
                record = losses.write(history, bar, pos.step, lr)
                run.note("train", record)
            elif pos.step == first and cfg.on_step is not None:   # an early sign
                record = {"step": pos.step, "loss": losses.check(pos.step), "lr": lr}
            if cfg.on_step is not None:
                cfg.on_step(pos.step, record)
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


def _target_tokens(group: list, pad_id: int | None) -> Any:
    """The target tokens (not padding) of an update's batches: a tensor, counted where
    the batches are and not read back (``int()`` reads it when it is logged)."""
    return sum(b[2].numel() if pad_id is None else (b[2] != pad_id).sum()
               for b in group)


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


# [book/10c_training_plumbing.ipynb, cell 0fedf3eb]
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


__all__ = ['train', 'accumulate_gradients']
