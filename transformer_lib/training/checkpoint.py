"""Generated from book/10c_training_plumbing.ipynb: edit the notebook, not this file.
Extended by book/appendix_training_run.ipynb.

Regenerate with ``python tools/export.py``."""
# digest: 6cfd1c0013497ca4
# fmt: off

# [book/10c_training_plumbing.ipynb, cell f719df39]
from __future__ import annotations

import os
import pickle
import random
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from transformer_lib.files import atomic_write
from transformer_lib.training.distributed import unwrap_model


# [book/10c_training_plumbing.ipynb, cell 057c2b56]
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


# [book/10c_training_plumbing.ipynb, cell 587287c7]
class NonFiniteError(FloatingPointError, ValueError):
    """Non-finite values (NaN or inf) where a run needs finite ones: in the weights or
    optimizer state about to be saved, or in the training loss."""


# [book/appendix_training_run.ipynb, cell 2bc9efb5]
class CheckpointError(ValueError):
    """A file that is not a usable checkpoint: empty, truncated, not written by
    :func:`save_checkpoint`, refused by the safe loader, or for another model. The
    message names the file and what is wrong."""


def _non_finite(state: Any, prefix: str) -> list[str]:
    """The names of the floating-point tensors in ``state`` (nested dicts, lists)
    holding NaN or inf; one read-back per device."""
    found: list[tuple[str, torch.Tensor]] = []
    stack: list[tuple[str, Any]] = [(prefix, state)]
    while stack:
        name, value = stack.pop()
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            found.append((name, torch.isfinite(value).all()))
        elif isinstance(value, dict):
            stack += [(f"{name}.{k}", v) for k, v in value.items()]
        elif isinstance(value, (list, tuple)):
            stack += [(f"{name}[{i}]", v) for i, v in enumerate(value)]
    bad: list[str] = []
    for device in {flag.device for _, flag in found}:
        names = [name for name, flag in found if flag.device == device]
        flags = torch.stack([flag for _, flag in found if flag.device == device])
        bad += [n for n, ok in zip(names, flags.tolist()) if not ok]
    return sorted(bad)


# [book/appendix_training_run.ipynb, cell b75942ff]
def save_checkpoint(path: str | os.PathLike, model: nn.Module, optimizer: Any = None,
                    scheduler: Any = None, scaler: Any = None, step: int = 0,
                    **extra: Any) -> None:
    """Write model, optimizer, scheduler and GradScaler states, the step, the RNG states
    (torch, CUDA, Python, NumPy), the model's config (when it has a ``config`` with
    ``to_dict``) and any ``extra`` plain values (numbers, strings, lists, dicts,
    tensors) to ``path`` with ``torch.save``, atomically (``atomic_write``: a
    temporary file, flushed, then renamed). Weights or optimizer state holding NaN or
    inf raise :class:`NonFiniteError` and leave the file at ``path`` as it was.
    Temporary files of earlier writes that were killed are removed. Under DDP call it
    on one rank (``train`` uses rank 0)."""
    net = unwrap_model(model)
    path = os.fspath(path)
    bad = _non_finite(net.state_dict(), "model")
    if optimizer is not None:
        bad += _non_finite(optimizer.state_dict()["state"], "optimizer")
    if bad:
        raise NonFiniteError(f"not writing the checkpoint {path}: {', '.join(bad[:3])}"
                             f"{' ...' if len(bad) > 3 else ''} hold NaN or inf; the "
                             f"file at {path} is left as it was")
    to_dict = getattr(getattr(net, "config", None), "to_dict", None)
    state = {
        "format": CHECKPOINT_FORMAT,
        "model": net.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "step": int(step),
        "rng": capture_rng_state(),
        "config": to_dict() if callable(to_dict) else None,
        "extra": extra,
    }
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    atomic_write(path, lambda tmp: torch.save(state, tmp))


CHECKPOINT_FORMAT = "transformer_lib checkpoint 1"


# [book/appendix_training_run.ipynb, cell 08f2ac95]
def _read_checkpoint(path: str, map_location: Any,
                     mmap: bool = False, weights: bool = True) -> dict[str, Any]:
    """``torch.load(weights_only=True)`` of ``path``, with one clear error per way a
    file can fail to be a checkpoint of this library. ``mmap``: the file is mapped,
    and a tensor is read only when used; ``weights=False``: the weights are not
    checked for NaN and inf (with ``mmap``, no weight is read)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such checkpoint file")
    if os.path.isdir(path):
        raise CheckpointError(f"{path}: is a directory, not a checkpoint file")
    if os.path.getsize(path) == 0:
        raise CheckpointError(f"{path}: the file is empty (an interrupted write?), "
                              "not a checkpoint")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True,
                           mmap=mmap)
    except pickle.UnpicklingError:
        raise CheckpointError(
            f"{path}: refused: it holds objects other than tensors, numbers, strings "
            "and plain containers (the safe loader, weights_only=True); it is not a "
            "checkpoint of transformer_lib and may run code when unpickled") from None
    except Exception as exc:              # EOFError, OSError, RuntimeError, KeyError...
        raise CheckpointError(f"{path}: not a complete checkpoint: the file is "
                              f"truncated or not a torch.save file "
                              f"({type(exc).__name__})") from None
    keys = {"model", "step", "rng", "extra"}
    if (not isinstance(state, dict) or not keys <= state.keys()
            or not isinstance(state["model"], dict)
            or not isinstance(state["extra"], dict)
            or not isinstance(state["rng"], dict)
            or isinstance(state["step"], bool) or not isinstance(state["step"], int)
            or not all(isinstance(t, torch.Tensor) for t in state["model"].values())):
        held = sorted(map(str, state))[:6] if isinstance(state, dict) else [
            type(state).__name__]
        raise CheckpointError(f"{path}: not a checkpoint written by save_checkpoint "
                              f"(it holds {held}; a checkpoint holds model, optimizer, "
                              "scheduler, step, rng, config, extra)")
    bad = _non_finite(state["model"], "model") if weights else []
    if bad:
        raise CheckpointError(f"{path}: the weights {', '.join(bad[:3])} hold NaN or "
                              "inf")
    return state


def _check_fits(path: str, net: nn.Module, state: dict[str, Any]) -> None:
    """Refuse a checkpoint of another model: its config (every field but dropout),
    then the names and shapes of its tensors."""
    stored = state.get("config")
    to_dict = getattr(getattr(net, "config", None), "to_dict", None)
    if isinstance(stored, dict) and callable(to_dict):
        here = to_dict()
        names = sorted((here.keys() | stored.keys()) - {"dropout"})
        differ = [f"{k}={stored.get(k, '(none)')!r} in the file, "
                  f"{here.get(k, '(none)')!r} in the model"
                  for k in names if stored.get(k, "(none)") != here.get(k, "(none)")]
        if differ:
            raise CheckpointError(f"{path}: a checkpoint of another model: "
                                  + "; ".join(differ[:4]))
    own, theirs = net.state_dict(), state["model"]
    problems = [f"{k} missing" for k in sorted(own.keys() - theirs.keys())]
    problems += [f"unexpected {k}" for k in sorted(theirs.keys() - own.keys())]
    problems += [f"{k} has shape {tuple(theirs[k].shape)} in the file, "
                 f"{tuple(own[k].shape)} in the model"
                 for k in sorted(own.keys() & theirs.keys())
                 if theirs[k].shape != own[k].shape]
    if problems:
        raise CheckpointError(f"{path}: a checkpoint of another model: "
                              + "; ".join(problems[:4])
                              + (f" (and {len(problems) - 4} more)"
                                 if len(problems) > 4 else ""))


# [book/appendix_training_run.ipynb, cell 9a444c32]
def load_checkpoint(path: str | os.PathLike, model: nn.Module | None = None,
                    optimizer: Any = None, scheduler: Any = None, scaler: Any = None,
                    map_location: Any = "cpu",
                    restore_rng: bool = False, mmap: bool = False) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` with
    ``torch.load(weights_only=True)`` (plain tensors and containers only: no arbitrary
    object is unpickled), load the states into whichever of ``model``, ``optimizer``,
    ``scheduler``, ``scaler`` are given, restore the RNG states when ``restore_rng``,
    and return the whole checkpoint dict (``step``, ``config``, ``extra``, ...).

    A missing file raises ``FileNotFoundError``; an empty, truncated, foreign or unsafe
    file, non-finite weights, a checkpoint of another model (another config, or other
    tensor names or shapes) or a state that does not fit the optimizer, scheduler or
    scaler raise :class:`CheckpointError` naming the file, before ``model`` is
    changed.

    A ``LambdaLR`` scheduler keeps its own schedule: the checkpoint gives it the step
    count, and the optimizer's rate is set from the new schedule at once, so a run
    resumed with another learning-rate factor or warm-up uses it from its first
    update. ``mmap``: the file is mapped, and a tensor is read from it when used
    (what averaging and copying weights need: the optimizer state is never read)."""
    path = os.fspath(path)
    state = _read_checkpoint(path, map_location, mmap)
    if model is not None:
        net = unwrap_model(model)
        _check_fits(path, net, state)
        net.load_state_dict(state["model"])
    base_lrs = list(getattr(scheduler, "base_lrs", []))    # the new schedule's
    parts = {"optimizer": optimizer, "scheduler": scheduler, "scaler": scaler}
    for key, obj in parts.items():
        if obj is not None:
            if state.get(key) is None:
                raise CheckpointError(f"{path}: the checkpoint holds no {key} state")
            try:
                obj.load_state_dict(state[key])
            except (ValueError, KeyError, TypeError, RuntimeError) as exc:
                raise CheckpointError(f"{path}: its {key} state does not fit this "
                                      f"{key}: {exc}") from None
    if optimizer is not None and isinstance(scheduler, LambdaLR):
        _use_schedule(optimizer, scheduler, base_lrs)
    if restore_rng:
        try:
            restore_rng_state(state["rng"])
        except (ValueError, KeyError, TypeError, RuntimeError) as exc:
            raise CheckpointError(f"{path}: its random states cannot be restored: "
                                  f"{exc!r}") from None
    return state



def _use_schedule(optimizer: Any, scheduler: LambdaLR,
                  base_lrs: list[Any]) -> None:
    """Set each parameter group's rate from ``scheduler``'s own functions at its
    (loaded) step, on ``base_lrs``: the rate a new schedule gives the next update. With
    the checkpoint's schedule unchanged this is the rate the checkpoint holds."""
    scheduler.base_lrs = base_lrs
    for group, base, rate in zip(optimizer.param_groups, base_lrs,
                                 scheduler.lr_lambdas):
        group["initial_lr"] = base
        group["lr"] = base * rate(scheduler.last_epoch)


# [book/appendix_training_run.ipynb, cell 64b8ac43]
def checkpoint_step(path: str | os.PathLike) -> int:
    """The step (updates made) of the checkpoint at ``path``, read cheaply: the safe
    loader maps the file and reads no weight. A missing file raises
    ``FileNotFoundError``, a damaged one a one-line :class:`CheckpointError` naming
    it."""
    return _read_checkpoint(os.fspath(path), "cpu", mmap=True,
                            weights=False)["step"]


def check_same_run(path: str | os.PathLike, accum_steps: int,
                   resume_keys: dict | None = None, *,
                   labels: dict[str, str] | None = None,
                   state: dict[str, Any] | None = None) -> None:
    """The resume rule: a run continues the run of the checkpoint at ``path`` only
    with its ``accum_steps`` and, for every key of ``resume_keys`` the checkpoint
    also holds, its value (what the batches depend on: a digest of the corpus, the
    batch size, a seed; checkpoints older than a key pass). Another value raises
    :class:`CheckpointError` naming the file and the key, as ``labels`` calls it
    (``{"batch_tokens": "--batch-tokens"}``). ``state``: the checkpoint already
    read; else it is read cheaply (as :func:`checkpoint_step` does)."""
    path = os.fspath(path)
    read = state if state is not None else _read_checkpoint(path, "cpu", mmap=True,
                                                            weights=False)
    extra, names = read["extra"], labels or {}
    kept = dict(extra.get("resume_keys") or {})
    if "accum_steps" in extra:
        kept["accum_steps"] = extra["accum_steps"]
    here = {**(resume_keys or {}), "accum_steps": accum_steps}
    for key in sorted(kept.keys() & here.keys()):
        if kept[key] != here[key]:
            name = names.get(key, key)
            raise CheckpointError(
                f"{path}: the run was saved with {name} {kept[key]}, this one has "
                f"{here[key]}: resume it with the same")


__all__ = [
    'capture_rng_state', 'restore_rng_state', 'NonFiniteError', 'CheckpointError',
    'save_checkpoint', 'CHECKPOINT_FORMAT', 'load_checkpoint', 'checkpoint_step',
    'check_same_run',
]
