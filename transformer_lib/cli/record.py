"""Generated from book/appendix_cli.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 86734a20ac6dd16e
# fmt: off

# [book/appendix_cli.ipynb, cell eb1cc6f2]
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from transformer_lib.files import atomic_write
from transformer_lib.model import TransformerConfig
from transformer_lib.training.checkpoint import CheckpointError, check_same_run
from transformer_lib.training.checkpoint import checkpoint_step, load_checkpoint
from transformer_lib.translation.model_dir import (
    CHECKPOINT_FILE, CONFIG_FILE, TRAINING_FILE, WEIGHTS_FILE, ModelDirError,
    check_weights_record, config_differences, load_config_and_tokenizer, own_file)
from transformer_lib.translation.tokenizer import BPETokenizer
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


#: how the resume rule's keys are called on the command line
RESUME_LABELS = {"corpus": "--train of digest",
                 "batch_tokens": "--batch-tokens", "seed": "--seed",
                 "accum_steps": "--accum-steps", "run_id": "the run id"}


def resume_keys(args, corpus: str) -> dict:
    """What a run's batches depend on, besides --accum-steps: a resumed run keeps it
    (chapter 10's ``check_same_run``, which ``train`` applies to the checkpoint)."""
    return {"corpus": corpus, "batch_tokens": args.batch_tokens, "seed": args.seed}


# [book/appendix_cli.ipynb, cell c5544d7e]
def run_keys(extra: dict | None) -> dict:
    """The keys that say which run a checkpoint (or a run record) belongs to: the run
    id ``train`` draws when a run starts and keeps across ``--resume``, and, for
    checkpoints older than it, the corpus digest, seed and batch size."""
    keys = (extra or {}).get("resume_keys") if isinstance(extra, dict) else None
    names = ("run_id", "corpus", "seed", "batch_tokens")
    return {k: keys[k] for k in names if isinstance(keys, dict) and k in keys}


def checkpoint_run_id(checkpoint: Path) -> str | None:
    """The run id the checkpoint at ``checkpoint`` records (None: none, or no file)."""
    try:
        state = load_checkpoint(checkpoint, mmap=True)
    except (FileNotFoundError, CheckpointError):   # load_resume_setup says how
        return None
    run_id = run_keys(state.get("extra")).get("run_id")
    return run_id if isinstance(run_id, str) else None


def check_run_record(out: Path, args, corpus: str) -> None:
    """On ``--resume``, before the corpus is encoded: the run must be the same run
    (the library's resume rule, asked of checkpoint.pt, naming this tool's options);
    the warm-up is the run's unless given."""
    try:
        check_same_run(own_file(out, CHECKPOINT_FILE), args.accum_steps,
                       resume_keys(args, corpus), labels=RESUME_LABELS)
    except FileNotFoundError:               # _check_out and load_resume_setup say so
        pass
    file = own_file(out, TRAINING_FILE)
    if not file.is_file():
        return
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
        saved = record["args"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelDirError(f"{file}: damaged ({exc})") from None
    except RecursionError:
        raise ModelDirError(f"{file}: damaged (nested too deeply)") from None
    if args.warmup is None:
        args.warmup = saved.get("warmup")


def check_steps(args, steps: int, checkpoint: Path) -> None:
    """On ``--resume``: the run must be asked for more updates than it has made, or
    for exactly as many when its model was never written (a Ctrl-C during the final
    write): ``train`` then makes no update and writes the model."""
    try:
        done = checkpoint_step(checkpoint)
    except (FileNotFoundError, CheckpointError):   # load_resume_setup says how
        return
    if done == steps and not (checkpoint.parent / WEIGHTS_FILE).is_file():
        return
    if done >= steps:
        asked = (f"--steps {steps}" if args.steps else
                 f"--epochs {args.epochs} ({steps} steps)" if args.epochs else
                 f"the default {steps} steps")
        raise UsageError(f"{asked}: the run in {args.out} has already made {done} "
                         "updates, so nothing would be trained: ask for more to "
                         "continue it")


# [book/appendix_cli.ipynb, cell 8b72a087]
def load_resume_setup(path) -> tuple[TransformerConfig, BPETokenizer]:
    """The config and tokenizer to resume the run of the model directory ``path``:
    ``config.json`` and ``tokenizer.json`` checked against ``checkpoint.pt`` (the
    config field by field, the tokenizer's size) and, when present, against the
    record in ``model.safetensors``. A difference raises :class:`ModelDirError`, a
    damaged checkpoint a ``CheckpointError``, each naming the file."""
    path = Path(path)
    checkpoint = own_file(path, CHECKPOINT_FILE)
    if not checkpoint.exists():          # a damaged one: load_checkpoint says how
        raise ModelDirError(f"{path}: nothing to resume (no {CHECKPOINT_FILE})")
    config, tokenizer = load_config_and_tokenizer(path)
    if not isinstance(tokenizer, BPETokenizer):    # a converted model: not trained here
        raise ModelDirError(f"{path}: its tokenizer is not a BPETokenizer: only a run "
                            "of the train command can be resumed")
    stored = load_checkpoint(checkpoint).get("config")
    if isinstance(stored, dict):
        config_differences(path / CONFIG_FILE, config, stored,
                           f"the {CHECKPOINT_FILE}")
    if (path / WEIGHTS_FILE).is_file():
        check_weights_record(path, config, path / WEIGHTS_FILE)
    return config, tokenizer


__all__ = []
