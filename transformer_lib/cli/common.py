"""Generated from book/appendix_cli.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 7c87467fe18bafb0
# fmt: off

# [book/appendix_cli.ipynb, cell 8f7e9b6c]
from __future__ import annotations

import argparse
import sys
import time

import torch
from tqdm import tqdm

from transformer_lib.checks import resolve_device
from transformer_lib.training.batching import (PadCollate, PairDataset,
                                               TokenBucketSampler)
from transformer_lib.training.distributed import setup_distributed
from transformer_lib.training.evaluation import evaluate
from transformer_lib.decoding.config import GenerationConfig

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
    'device_option', 'start_processes', 'log_line', 'bucket_loader', 'Progress',
]
