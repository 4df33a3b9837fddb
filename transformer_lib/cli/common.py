"""Generated from book/appendix_cli.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 6fb466a3b8347f98
# fmt: off

# [book/appendix_cli.ipynb, cell 8f7e9b6c]
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path

import torch
from tqdm import tqdm

from transformer_lib.checks import resolve_device
from transformer_lib.training.batching import (PadCollate, PairDataset,
                                               TokenBucketSampler)
from transformer_lib.training.distributed import setup_distributed
from transformer_lib.training.evaluation import evaluate
from transformer_lib.decoding.config import GenerationConfig
from transformer_lib.translation.model_dir import ModelDirError

#: the defaults of the model options of ``train``; they are None when not given, so
#: that ``--resume`` can tell an option given (and refused if it differs from the run's
#: config.json) from one left out
MODEL_DEFAULTS = {"vocab_size": 8000, "d_model": 512, "n_heads": 8, "layers": 6,
                  "d_ff": 2048, "dropout": 0.1, "max_len": 256}
#: the smallest vocabulary: 256 byte tokens and 4 special tokens
MIN_VOCAB = 260
#: the library's decoding defaults (chapter 11's GenerationConfig), which ``translate``
#: applies when a model directory has no generation.json; its options are None when not
#: given, so that one given for a decoder that does not use it can be refused
DECODER_DEFAULTS = GenerationConfig().to_dict()


class UsageError(ValueError):
    """Options that do not fit together: exit status 2, like a bad option."""


class Interrupted(Exception):
    """Ctrl-C or SIGTERM; ``status`` is the exit status (128 + the signal)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that chapter 10's ``train`` saves the run."""


def on_sigterm(signum, frame) -> None:
    """The tool's SIGTERM handler (``python -m transformer_lib`` installs it)."""
    raise Terminated()


def interrupted(exc: KeyboardInterrupt, what: str = "") -> Interrupted:
    """Ctrl-C or SIGTERM as one line and the exit status a shell expects."""
    name, status = ("SIGTERM", 143) if isinstance(exc, Terminated) else \
        ("Ctrl-C", 130)
    return Interrupted(f"interrupted by {name} {what}".rstrip(), status)


# [book/appendix_cli.ipynb, cell c156385e]
#: the lock file of a run folder (``train --out``)
LOCK_FILE = ".lock"


def refuse_link(option: str, path: Path) -> None:
    """An output folder given as a symbolic link is refused, in every command."""
    if path.is_symlink():
        raise UsageError(f"{option} {path}: a symbolic link: give the folder itself "
                         f"({os.path.realpath(path)}) or a new path")


def check_output(option: str, out: Path, reads=(), folders=()) -> None:
    """Refuse an output ``out`` that is a file the command reads (``reads``) or lies
    inside a folder it reads (``folders``: model directories): writing it would
    destroy an input. Links are resolved, so a second name for an input is found."""
    target = Path(os.path.realpath(out))
    for file in reads:
        if target == Path(os.path.realpath(file)):
            raise UsageError(f"{option} {out}: is the input {file}: write the output "
                             "to another file")
    for folder in folders:
        if target.is_relative_to(os.path.realpath(folder)):
            raise UsageError(f"{option} {out}: inside {folder}, which this command "
                             "reads: write the output elsewhere")


@contextlib.contextmanager
def hold_lock(folder: Path, option: str, say):
    """Hold an exclusive lock on ``folder`` (its file ``.lock``, holding our process
    id) until the block ends; another holder is an error naming its process. A lock
    file left by a process that ended without removing it is taken over with a
    notice. Without ``fcntl`` (not POSIX) there is no lock."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    file = folder / LOCK_FILE
    while True:
        try:
            fd = os.open(file, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0),
                         0o644)
        except OSError as exc:
            raise ModelDirError(f"{option} {folder}: cannot lock it ({file}: "
                                f"{exc.strerror or type(exc).__name__})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise ModelDirError(f"{option} {folder}: in use by another run (process "
                                f"{holder}, which holds {file}): wait for it to end, "
                                f"or choose another {option}") from None
        try:                          # the file we locked is still the folder's
            if os.stat(file, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)                  # its holder removed it meanwhile: lock anew
    try:
        left = os.read(fd, 32).decode("ascii", "replace").strip()
        if left and left != str(os.getpid()):
            say(f"note: {file}: taking over the lock of process {left}, which ended "
                "without releasing it")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(file)
        os.close(fd)


# [book/appendix_cli.ipynb, cell held-code]
#: the signals that stop a command: Ctrl-C (SIGINT) and SIGTERM
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def take_signals() -> dict:
    """For one command, in the main thread: SIGTERM raised like Ctrl-C
    (:class:`Terminated`). Returns the handlers it replaces, for :func:`main` to put
    back (none in another thread, where Python cannot set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    saved = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    signal.signal(signal.SIGTERM, on_sigterm)
    return saved


def finished() -> None:
    """The command's output is complete: a Ctrl-C or SIGTERM from here has nothing
    left to stop, and is ignored until :func:`main` puts the handlers back."""
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


# [book/appendix_cli.ipynb, cell 62dfc84f]
class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad option gives one line on stderr, not the whole usage
    (benchmarks/gpu_check.py uses it too)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def number_option(kind, check, **limits):
    """An argparse type: text -> ``kind``, checked by one of the shared checks."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            message = f"expected {kind.__name__}, got {text!r}"
            raise argparse.ArgumentTypeError(message) from None
        try:
            return kind(check(value, "the value", **limits))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parse.__name__ = kind.__name__
    return parse


# [book/appendix_cli.ipynb, cell da3244be]
def device_option(name: str) -> torch.device:
    try:
        return resolve_device(name)
    except ValueError as exc:
        raise ValueError(f"--device: {exc}") from None


def start_processes(name: str, threads: int | None) -> tuple[int, int, torch.device]:
    """(rank, world size, device). Under torchrun, join the process group (chapter 10's
    ``setup_distributed``): each process takes the GPU of its LOCAL_RANK, or the CPU
    (gloo) with ``--device cpu``. Otherwise one process on ``--device``."""
    if threads:
        torch.set_num_threads(threads)
    rank, world, device = setup_distributed("gloo" if name == "cpu" else None)
    if not torch.distributed.is_initialized():           # not started by torchrun
        return 0, 1, device_option(name)
    if name not in ("auto", "cpu", "cuda"):
        raise ValueError(f"--device: under torchrun each process takes the GPU of its "
                         f"LOCAL_RANK; pass auto, cuda or cpu, got {name!r}")
    if name == "cuda" and device.type != "cuda":
        raise ValueError("--device cuda: CUDA is not available on this machine")
    return rank, world, torch.device("cpu") if name == "cpu" else device


def log_line(message: str) -> None:
    """Every message of the tool goes to stderr (stdout is for translations)."""
    tqdm.write(message, file=sys.stderr)


def bucket_loader(encoded, batch_tokens: int, seed: int, shuffle: bool = True):
    """Token buckets (chapter 10); under torchrun each rank gets its share."""
    dataset = PairDataset(encoded)
    sampler = TokenBucketSampler(dataset.lengths, batch_tokens, shuffle=shuffle,
                                 seed=seed)
    return torch.utils.data.DataLoader(dataset, batch_sampler=sampler,
                                       collate_fn=PadCollate())


# [book/appendix_cli.ipynb, cell 846b4c4f]
class Progress:
    """The run's report on stderr, fed by chapter 10's ``train`` through
    :meth:`on_step`: the first update prints ``header``; each logged update (the first,
    every ``log_every`` and the last) shows its mean loss and rate on a tqdm bar
    (``bar``) or as a line. The step is ``train``'s count, so a resumed run counts on
    from its checkpoint."""

    def __init__(self, steps: int, bar: bool, header: str, say):
        self.steps, self.header, self.say = steps, header, say
        self.use_bar, self.bar = bar, None
        self.step, self.t0 = 0, time.perf_counter()

    def on_step(self, step: int, record: dict | None) -> None:
        """``train``'s ``on_step``: after update ``step``; ``record`` holds ``loss``
        and ``lr`` at a logged update, else it is None."""
        if self.header:                            # the first update of this run
            resumed = f" (resumed at step {step - 1})" if step > 1 else ""
            self.say(self.header + resumed)
            self.header = ""
            if self.use_bar:
                self.bar = tqdm(total=self.steps, initial=step - 1, ncols=100,
                                mininterval=1.0, file=sys.stderr)
        self.step = step
        if record is not None:
            loss, lr = record["loss"], record["lr"]
            if self.bar is not None:
                self.bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.3g}", refresh=False)
            else:
                seconds = time.perf_counter() - self.t0
                self.say(f"step {step}/{self.steps}: loss {loss:.3f}, lr {lr:.3g}, "
                         f"{seconds:.0f} s")
        if self.bar is not None:
            self.bar.update(1)

    def validate(self, net, loader, loss_fn, amp: str) -> dict:
        """chapter 10's ``val_fn``: the validation loss, also written on stderr."""
        value = evaluate(net, loader, loss_fn, amp)
        self.say(f"step {self.step}/{self.steps}: validation loss {value:.3f}")
        return {"val_loss": value}

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


__all__ = [
    'MODEL_DEFAULTS', 'MIN_VOCAB', 'DECODER_DEFAULTS', 'UsageError', 'Interrupted',
    'Terminated', 'on_sigterm', 'interrupted', 'LOCK_FILE', 'refuse_link',
    'check_output', 'hold_lock', 'STOP_SIGNALS', 'take_signals', 'finished',
    'device_option', 'start_processes', 'log_line', 'bucket_loader', 'Progress',
]
