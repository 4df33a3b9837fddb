"""Generated from book/appendix_cli.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: f17e5e4892d0bf05
# fmt: off

# [book/appendix_cli.ipynb, cell eb1cc6f2]
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from transformer_lib.training.files import atomic_write
from transformer_lib.translation.model_dir import TRAINING_FILE, ModelDirError
from transformer_lib.cli.common import UsageError


def fingerprint(pairs) -> str:
    """A short digest of a corpus: a resumed run must read the same pairs."""
    digest = hashlib.sha256()
    for pair in pairs:
        digest.update(f"{pair[0]}\t{pair[1]}\n".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:16]


def write_run_record(out: Path, record: dict) -> None:
    """training.json, written atomically (``atomic_write``)."""
    atomic_write(out / TRAINING_FILE, json.dumps(record, indent=2) + "\n")


def check_run_record(out: Path, args, corpus: str) -> None:
    """On ``--resume``: what training.json says about the run must match this command
    (the batches depend on the corpus, --batch-tokens and --seed); a run without the
    record is left to chapter 10's check of the batches per epoch."""
    file = out / TRAINING_FILE
    if not file.is_file():
        return
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
        saved, saved_corpus = record["args"], record.get("corpus")
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelDirError(f"{file}: damaged ({exc})") from None
    except RecursionError:
        raise ModelDirError(f"{file}: damaged (nested too deeply)") from None
    if saved_corpus is not None and saved_corpus != corpus:
        raise ModelDirError(f"{file}: the run was trained on another corpus than "
                            f"--train {' '.join(args.train)}: resume with its own")
    for name in ("batch_tokens", "accum_steps", "seed"):
        if name in saved and saved[name] != getattr(args, name):
            option = "--" + name.replace("_", "-")
            raise ModelDirError(
                f"{file}: the run was started with {option} {saved[name]}, this "
                f"command gives {getattr(args, name)}: resume with the same value")
    if args.warmup is None:
        args.warmup = saved.get("warmup")


def check_steps(args, steps: int, checkpoint: Path) -> None:
    """On ``--resume``: the run must be asked for more updates than it has made."""
    try:                          # already checked by load_resume_setup: a cheap look
        done = torch.load(checkpoint, map_location="cpu", weights_only=True,
                          mmap=True)["step"]
    except Exception:             # (a damaged file: chapter 10's loader says how)
        return
    if isinstance(done, int) and done >= steps:
        asked = (f"--steps {steps}" if args.steps else
                 f"--epochs {args.epochs} ({steps} steps)" if args.epochs else
                 f"the default {steps} steps")
        raise UsageError(f"{asked}: the run in {args.out} has already made {done} "
                         "updates, so nothing would be trained: ask for more to "
                         "continue it")


__all__ = []
