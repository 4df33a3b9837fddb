"""Generated from book/10_training.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 1cba38f9350b514b
# fmt: off

# [book/10_training.ipynb, cell 11]
from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from transformer_lib.checks import check_float, check_int, default_device
from transformer_lib.batching import Batch
from transformer_lib.checkpoint import RunPosition, epoch_batches, unwrap_model
from transformer_lib.checkpoint import capture_rng_state, restore_rng_state
from transformer_lib.checkpoint import load_checkpoint, save_checkpoint
from transformer_lib.checkpoint import CheckpointError, NonFiniteError
from transformer_lib.evaluation import amp_dtype, evaluate
from transformer_lib.loss import LabelSmoothingLoss


# [book/10_training.ipynb, cell 29]
def noam_lambda(d_model: int, warmup_steps: int,
                factor: float = 1.0) -> Callable[[int], float]:
    """The paper's learning rate as a function of LambdaLR's step counter, for
    ``torch.optim.lr_scheduler.LambdaLR(optimizer, noam_lambda(d_model, warmup))`` with
    the optimizer's ``lr=1.0`` (LambdaLR multiplies the optimizer's lr by this value).

    LambdaLR's counter ``step`` is the number of updates already made, so the update it
    sets the rate for is the paper's ``n = step + 1`` (the paper counts from 1)::

        rate(step) = factor * d_model**-0.5 * min(n**-0.5, n * warmup_steps**-1.5)

    It is defined at step 0 (LambdaLR evaluates it there when it is built), rises
    linearly to its peak ``factor * (d_model * warmup_steps)**-0.5`` at ``step =
    warmup_steps - 1`` and then decays as n**-0.5. Call ``optimizer.step()`` before
    ``scheduler.step()``.
    """
    d_model = check_int(d_model, "d_model")
    warmup_steps = check_int(warmup_steps, "warmup_steps")
    factor = check_float(factor, "factor", 0.0, low_open=True)

    def rate(step: int) -> float:
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        n = step + 1
        return factor * d_model ** -0.5 * min(n ** -0.5, n * warmup_steps ** -1.5)

    return rate


# [book/10_training.ipynb, cell 68]
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
    if _dist_on():
        torch.distributed.destroy_process_group()


def _dist_on() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _rank() -> int:
    return torch.distributed.get_rank() if _dist_on() else 0


# [book/10_training.ipynb, cell 72]
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


@dataclass
class TrainConfig:
    """The settings of a run of :func:`train` (see there), checked when built:
    ``train(..., config=TrainConfig(steps=100, val_every=10))`` is
    ``train(..., steps=100, val_every=10)``."""

    steps: int
    val_loader: Iterable | None = None
    val_every: int = 0
    val_fn: Callable[[nn.Module], dict] | None = None
    stop_fn: Callable[[dict], bool] | None = None
    clip_norm: float | None = 1.0
    amp: str | None = None
    log_every: int = 10
    checkpoint_path: str | os.PathLike | None = None
    checkpoint_every: int = 0
    resume_from: str | os.PathLike | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        self.steps = check_int(self.steps, "steps", minimum=0)
        self.val_every = check_int(self.val_every, "val_every", minimum=0)
        self.log_every = check_int(self.log_every, "log_every")
        self.checkpoint_every = check_int(self.checkpoint_every, "checkpoint_every", 0)
        if self.clip_norm is not None:
            self.clip_norm = check_float(self.clip_norm, "clip_norm", 0, low_open=True)
        amp_dtype(self.amp)                          # a ValueError names a bad amp

    def due(self, every: int, step: int) -> bool:
        """Whether a task done every ``every`` steps falls after update ``step``."""
        return every > 0 and step % every == 0 and step < self.steps


# [book/10_training.ipynb, cell 74]
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
    epoch_length: int | None = None    # batches per epoch, if the loader has a len()
    saved_step: int | None = None      # the step of the last checkpoint written
    busy: bool = False                 # inside an update (its state is half-made)

    @classmethod
    def start(cls, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
              loss_fn: Callable | None, config: TrainConfig) -> _Run:
        net = unwrap_model(model)
        device = next(net.parameters()).device
        if loss_fn is None:
            pad = getattr(getattr(net, "config", None), "pad_id", 0)
            loss_fn = LabelSmoothingLoss(0.1, pad_id=pad)
        fp16 = amp_dtype(config.amp) is torch.float16
        scaler = torch.amp.GradScaler(device.type) if fp16 else None
        if _dist_on() and model is net:
            ids = [device.index] if device.type == "cuda" else None
            model = nn.parallel.DistributedDataParallel(model, device_ids=ids)
        return cls(model, net, optimizer, scheduler, scaler, loss_fn, config, device)


# [book/10_training.ipynb, cell 76]
def _update(run: _Run, batch: Batch) -> tuple[torch.Tensor, float]:
    """One update on ``batch`` -> (its loss, on the device; the learning rate)."""
    src, tgt_in, tgt_out = Batch(*batch).to(run.device, non_blocking=True)
    dtype = amp_dtype(run.config.amp)
    with torch.autocast(run.device.type, dtype=dtype, enabled=dtype is not None):
        logits = run.model(src, tgt_in)                              # (B, T, V)
    loss = run.loss_fn(logits.float(), tgt_out)
    run.optimizer.zero_grad(set_to_none=True)
    if run.scaler is None:
        loss.backward()
    else:
        run.scaler.scale(loss).backward()
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
    return loss.detach(), lr


# [book/10_training.ipynb, cell 78]
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


# [book/10_training.ipynb, cell 80]
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


def _save(run: _Run, pos: RunPosition, losses: _LossLog, barrier: bool = True) -> None:
    """Checkpoint the run at ``pos`` to ``checkpoint_path``, if there is one, after
    checking the losses not yet logged (save_checkpoint checks the weights)."""
    path = run.config.checkpoint_path
    if not path:
        return
    losses.check(pos.step)
    if _rank() == 0:
        save_checkpoint(path, run.net, run.optimizer, run.scheduler, run.scaler,
                        pos.step, epoch=pos.epoch, in_epoch=pos.in_epoch,
                        epoch_rng=pos.epoch_rng, batches_per_epoch=run.epoch_length)
        run.saved_step = pos.step
    if barrier and _dist_on():
        torch.distributed.barrier()


def _resume(run: _Run) -> RunPosition:
    """The position in ``resume_from`` with every state loaded, or the start (no
    file). Everything is checked before anything is loaded."""
    path = run.config.resume_from
    if path is None or not os.path.exists(path):
        return RunPosition()
    state = load_checkpoint(path, map_location=run.device)     # read and checked
    try:
        position = RunPosition.from_checkpoint(state)
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


# [book/10_training.ipynb, cell 82]
class _Interrupts:
    """Ctrl-C and SIGTERM noted (in the main thread, the one that receives signals)
    while ``enabled``; :meth:`deliver` hands a noted signal to the previous handler."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.signum: int | None = None
        self.previous: dict[int, Any] = {}
        self.installed = False

    def __enter__(self) -> _Interrupts:
        if self.enabled and threading.current_thread() is threading.main_thread():
            for name in ("SIGINT", "SIGTERM"):
                sig: int | None = getattr(signal, name, None)
                if sig is None:
                    continue
                handler = signal.getsignal(sig)
                if handler is not None and handler is not signal.SIG_IGN:
                    self.previous[sig] = handler
                    signal.signal(sig, self._note)
            self.installed = True
        return self

    def _note(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum                     # acted on after this update
        else:
            self.restore()                           # a second one: at once
            self._hand_over(signum)

    def restore(self) -> None:
        if self.installed:
            for sig, handler in self.previous.items():
                signal.signal(sig, handler)
            self.installed = False

    def __exit__(self, *exc: Any) -> None:
        self.restore()

    def deliver(self) -> None:
        if self.signum is not None:
            self._hand_over(self.signum)

    def _hand_over(self, signum: int) -> None:
        handler = self.previous.get(signum)
        if callable(handler):
            handler(signum, None)       # e.g. Python's own: raises KeyboardInterrupt
        else:
            signal.raise_signal(signum)              # the default action


# [book/10_training.ipynb, cell 84]
def _loop(run: _Run, loader: Iterable, pos: RunPosition, history: TrainHistory,
          losses: _LossLog, bar: Any, interrupts: _Interrupts) -> bool:
    """Updates from ``pos`` (moved along in place) to ``steps``; True if stopped by
    ``stop_fn``."""
    cfg = run.config
    run.model.train()
    while pos.step < cfg.steps and interrupts.signum is None:
        for batch in epoch_batches(loader, pos):
            run.busy = True
            loss, lr = _update(run, batch)
            pos.step, pos.in_epoch = pos.step + 1, pos.in_epoch + 1
            run.busy = False
            losses.add(loss)
            if pos.step % cfg.log_every == 0 or pos.step == cfg.steps:
                losses.write(history, bar, pos.step, lr)
            if bar is not None:
                bar.update(1)
            if cfg.due(cfg.val_every, pos.step) and _validate(run, pos.step, history,
                                                               bar):
                return True
            if cfg.due(cfg.checkpoint_every, pos.step):
                _save(run, pos, losses)
            if pos.step >= cfg.steps or interrupts.signum is not None:
                return False
        if pos.in_epoch == 0:                        # the epoch is over: the next one
            raise ValueError("train_loader yielded no batch")
        pos.epoch, pos.in_epoch, pos.epoch_rng = pos.epoch + 1, 0, None
    return False


def _kept(run: _Run) -> str:
    """What the checkpoint file holds after a run failed."""
    path = run.config.checkpoint_path
    if not path:
        return "no checkpoint_path was given"
    if run.saved_step is None:
        return f"{os.fspath(path)} was not written by this run"
    return (f"{os.fspath(path)} holds step {run.saved_step}, the last checkpoint "
            "written with finite weights and losses: resume from it (a lower learning "
            "rate or a longer warm-up may avoid the blow-up)")


# [book/10_training.ipynb, cell 86]
def train(model: nn.Module, train_loader: Iterable, optimizer: torch.optim.Optimizer,
          scheduler: Any = None, loss_fn: Callable | None = None, *,
          steps: int | None = None, val_loader: Iterable | None = None,
          val_every: int = 0, val_fn: Callable[[nn.Module], dict] | None = None,
          stop_fn: Callable[[dict], bool] | None = None, clip_norm: float | None = 1.0,
          amp: str | None = None, log_every: int = 10,
          checkpoint_path: str | os.PathLike | None = None, checkpoint_every: int = 0,
          resume_from: str | os.PathLike | None = None, progress: bool = True,
          config: TrainConfig | None = None) -> TrainHistory:
    """Train ``model`` for ``steps`` optimizer updates (in total, counting those of a
    resumed run); the settings come as keyword arguments or as ``config``, a
    :class:`TrainConfig`. Returns a :class:`TrainHistory`.

    An update: a batch (``src, tgt_in, tgt_out``, see :class:`PadCollate`) on the
    model's device; ``loss_fn(model(src, tgt_in), tgt_out)`` (default
    ``LabelSmoothingLoss(0.1, pad_id)``) under ``torch.autocast`` if ``amp`` is
    ``"bf16"`` or ``"fp16"`` (with a ``GradScaler``); backward;
    ``clip_grad_norm_(clip_norm)``; ``optimizer.step()``, then ``scheduler.step()``. The
    loader is iterated epoch after epoch (calling its sampler's ``set_epoch``).

    Every ``val_every`` steps and at the end: the loss on ``val_loader`` and the dict of
    ``val_fn(model)``; training stops if ``stop_fn(that dict)`` is true. At the start,
    every ``checkpoint_every`` steps and at the end, rank 0 writes a checkpoint to
    ``checkpoint_path``; ``resume_from`` (if the file exists) continues a run exactly
    (a checkpoint of another model or of a loader with another number of batches per
    epoch raises :class:`CheckpointError`). With a ``checkpoint_path``, Ctrl-C and
    SIGTERM write a checkpoint of the last finished update, then go on to their previous
    handler (KeyboardInterrupt, the end of the process). A non-finite loss (read every
    ``log_every`` steps and before each checkpoint) or non-finite weights raise
    :class:`NonFiniteError` (a FloatingPointError); the checkpoint file keeps the last
    finite state. Under ``torchrun`` (after :func:`setup_distributed`) the model is
    wrapped in ``DistributedDataParallel``; the loader's sampler must split the data by
    rank (:class:`TokenBucketSampler` does). ``progress`` shows a tqdm bar on rank 0.
    """
    cfg = _settings(config, steps, val_loader=val_loader, val_every=val_every,
                    val_fn=val_fn, stop_fn=stop_fn, clip_norm=clip_norm, amp=amp,
                    log_every=log_every, checkpoint_path=checkpoint_path,
                    checkpoint_every=checkpoint_every, resume_from=resume_from,
                    progress=progress)
    run = _Run.start(model, optimizer, scheduler, loss_fn, cfg)
    run.epoch_length = _length(train_loader)
    pos, history, losses = _resume(run), TrainHistory(), _LossLog(run.device)
    if pos.step == 0 and cfg.checkpoint_path:        # resumable from the very start
        pos.epoch_rng = capture_rng_state()          # (what the epoch would record)
        _save(run, pos, losses)
    bar = None
    if cfg.progress and _rank() == 0:                # a progress bar on rank 0
        bar = tqdm(total=cfg.steps, initial=pos.step, ncols=100, mininterval=1.0,
                   file=sys.stderr)
    t0 = time.perf_counter()
    with _Interrupts(bool(cfg.checkpoint_path)) as interrupts:
        try:
            stopped = _loop(run, train_loader, pos, history, losses, bar, interrupts)
            if not stopped and interrupts.signum is None:
                _validate(run, pos.step, history, bar)
            _save(run, pos, losses, barrier=interrupts.signum is None)
        except KeyboardInterrupt:                    # between two updates: save
            if cfg.checkpoint_path and not run.busy:
                _save(run, pos, losses, barrier=False)
            raise
        except NonFiniteError as exc:
            raise NonFiniteError(f"{exc}; {_kept(run)}") from None
        finally:
            if bar is not None:
                bar.close()
    history.seconds, history.last_step = time.perf_counter() - t0, pos.step
    history.interrupted = interrupts.signum is not None
    interrupts.deliver()                             # the signal goes on
    return history


# [book/10_training.ipynb, cell 88]
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


__all__ = [
    'noam_lambda',
    'setup_distributed',
    'cleanup_distributed',
    'TrainHistory',
    'TrainConfig',
    'train',
]
