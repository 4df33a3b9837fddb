"""Generated from book/appendix_cli.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: f8f6fc1767df162d
# fmt: off

# [book/appendix_cli.ipynb, cell bc585d87]
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors import SafetensorError

from transformer_lib.checks import check_int
from transformer_lib.model import Transformer
from transformer_lib.training.averaging import RunningMean
from transformer_lib.training.metrics_log import METRICS_FILE
from transformer_lib.training.checkpoint import load_checkpoint
from transformer_lib.training.snapshots import KEPT_DIR, KeepLast, keep_last
from transformer_lib.training.snapshots import KEPT_NAME, kept_checkpoints
from transformer_lib.training.snapshots import remove_kept as remove_kept_checkpoints
from transformer_lib.files import atomic_write, no_room
from transformer_lib.translation.model_dir import (
    CHECKPOINT_FILE, CONFIG_FILE, TOKENIZER_FILE, TOKENIZER_KIND_FILE, TRAINING_FILE,
    ModelDirError, load_config_and_tokenizer, load_generation_config, load_model_dir,
    own_file, save_generation_config, save_model_dir)
from transformer_lib.translation.tokenizer import BPETokenizer
from transformer_lib.cli.common import UsageError, check_output, log_line
from transformer_lib.cli.common import LOCK_FILE, finished, hold_lock, refuse_link
from transformer_lib.cli.record import run_keys, write_run_record

#: the record of what an averaged model directory averaged (the kept checkpoints
#: themselves, checkpoints/step-NNNNNN.pt, are chapter 10's ``keep_last``)
AVERAGED_FILE = "averaged.json"


# [book/appendix_cli.ipynb, cell fcd50cf7]
def keep_checkpoints_option(args, out: Path, steps: int, rank: int) -> KeepLast | None:
    """``--keep-checkpoints N`` as the ``on_checkpoint`` of chapter 10's ``train``:
    the library's ``keep_last``, which keeps the weights of the last N checkpoints
    (None for N = 0, and on the ranks other than 0, which write no file). A resumed
    run keeps its run's N unless the option is given, and then records the new N in
    training.json for the next resume; a copy that a killed run still owed is made
    now."""
    if rank != 0:
        return None
    record = _read_json(out / TRAINING_FILE) if args.resume else None
    saved = record["args"].get("keep_checkpoints") if record else None
    if saved is not None:                # checked as the option is: an int >= 0
        try:
            check_int(saved, "keep_checkpoints", minimum=0)
        except ValueError as exc:
            raise ModelDirError(f"{out / TRAINING_FILE}: {exc}") from None
    if args.keep_checkpoints is None:
        args.keep_checkpoints = saved or 0
    elif record and (saved or 0) != args.keep_checkpoints:
        record["args"]["keep_checkpoints"] = args.keep_checkpoints
        write_run_record(out, record)
    if not args.keep_checkpoints:
        return None
    folder = out / KEPT_DIR              # refused before training, not at its end
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        what = "a symbolic link" if folder.is_symlink() else "not a folder"
        raise ModelDirError(f"{folder}: {what}: --keep-checkpoints writes and removes "
                            "files only in a folder of the run's own; move it away")
    if args.resume:           # checkpoint.pt written, its copy not: the run was killed
        last = (record or {}).get("steps")    # the step the earlier command ended at
        last = last if isinstance(last, int) and last > 0 else None
        keep_last(args.keep_checkpoints, args.checkpoint_every or last or steps,
                  last).owed(out / CHECKPOINT_FILE)
    # --checkpoint-every 0: only the last step's checkpoint is kept (not a Ctrl-C one)
    return keep_last(args.keep_checkpoints, args.checkpoint_every or steps, steps)


def _read_json(file: Path) -> dict | None:
    """A run's record (a dict holding a dict ``args``), or None if it has none."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    ok = isinstance(data, dict) and isinstance(data.get("args"), dict)
    return data if ok else None


def remove_kept(out: Path) -> None:
    """``--force``: the kept checkpoints and the averaging record of the model that was
    in ``out`` go with it (they would be taken for the new model's)."""
    remove_kept_checkpoints(out)
    (out / AVERAGED_FILE).unlink(missing_ok=True)


# [book/appendix_cli.ipynb, cell 40c5abce]
def _locate(name: str) -> tuple[Path, Path | None]:
    """An input of ``average`` -> (the model directory it belongs to, the checkpoint
    file; None for the directory's own model.safetensors). A checkpoint file belongs to
    the directory that holds it, or to the run around its checkpoints/ folder."""
    path = Path(name)
    if path.is_dir():
        return path, None
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such model directory or checkpoint file")
    homes = [path.parent, *([path.parent.parent] if path.parent.name == KEPT_DIR
                            else [])]
    for home in homes:
        if (home / CONFIG_FILE).is_file():
            return home, path
    raise ModelDirError(f"{path}: no {CONFIG_FILE} beside it: a checkpoint file is "
                        "averaged in the model directory that holds it")


def _inputs(args) -> list[tuple[Path, Path | None]]:
    """The inputs, checked: they exist, none is named twice, and ``--last N`` finds N
    checkpoints kept by its run."""
    if args.last is None:
        found = [_locate(name) for name in args.inputs]
    else:
        if len(args.inputs) != 1:
            raise UsageError(f"--last {args.last}: takes one run directory, got "
                             f"{len(args.inputs)} inputs")
        run = Path(args.inputs[0])
        if not run.is_dir():
            what = "not a directory" if run.exists() else "no such run directory"
            raise FileNotFoundError(f"--last {args.last}: {run}: {what}")
        kept = kept_checkpoints(run)
        if len(kept) < args.last:
            steps = ", ".join(str(step) for step, _ in kept) or "none"
            raise ValueError(f"--last {args.last}: {run / KEPT_DIR} holds {len(kept)} "
                             f"checkpoints (steps: {steps}); train with "
                             f"--keep-checkpoints {args.last} or more to keep them")
        found = [(run, file) for _, file in kept[-args.last:]]
    seen: set[Path] = set()
    for home, file in found:
        where = (file or home).resolve()
        if where in seen:
            raise UsageError(f"{file or home}: given twice (it would count twice in "
                             "the mean)")
        seen.add(where)
    return found


def _check_average_out(out: Path, found, force: bool,
                       held: contextlib.ExitStack) -> Path:
    """``--out``: not a link, not inside the directory of an input, not a run that a
    training writes (its lock is taken, in ``held``), and new or empty unless
    ``--force``. Returns a private folder beside it, made now (so that a path that
    cannot be written is found before anything is read), where the model is written
    before it is moved into place."""
    refuse_link("--out", out)
    check_output("--out", out, folders=[home for home, _ in found])
    if out.exists() and not out.is_dir():
        raise ModelDirError(f"--out {out}: a file, not a directory")
    if out.is_dir():
        held.enter_context(hold_lock(out, "--out", log_line))
    if out.is_dir() and any(f.name != LOCK_FILE for f in out.iterdir()) and not force:
        raise ModelDirError(f"--out {out}: is not empty: choose a new directory, or "
                            "pass --force to replace the model there")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f"{out.name}.tmp{os.getpid()}.",
                                     dir=out.parent))
    except OSError as exc:
        raise ModelDirError(f"--out {out}: cannot write there "
                            f"({exc.strerror or type(exc).__name__})") from None


# [book/appendix_cli.ipynb, cell 06b447d2]
def _same_model(home: Path, first: Path, config, tokenizer) -> None:
    """Refuse an input of another model than the first one: its config.json (every
    field but the dropout) or its tokenizer differs. The message names the file."""
    other, other_tokenizer = load_config_and_tokenizer(home)
    mine, theirs = config.to_dict(), other.to_dict()
    differ = [f"{k}={theirs.get(k)!r}, not {mine.get(k)!r}"
              for k in sorted(mine.keys() | theirs.keys())
              if k != "dropout" and mine.get(k) != theirs.get(k)]
    why = "only checkpoints of one model can be averaged"
    if differ:
        raise ModelDirError(f"{home / CONFIG_FILE}: another model than "
                            f"{first / CONFIG_FILE} ({'; '.join(differ[:3])}): {why}")
    if not (isinstance(other_tokenizer, BPETokenizer)
            and other_tokenizer.to_json() == tokenizer.to_json()):
        raise ModelDirError(f"{home / TOKENIZER_FILE}: another tokenizer than "
                            f"{first / TOKENIZER_FILE}: {why}")


def _weights(home: Path, file: Path | None, model) -> tuple[dict, int | None, dict]:
    """One input's weights, step and run keys (``run_keys``): a checkpoint file's,
    checked against ``model`` by chapter 10's ``load_checkpoint`` (a kept copy must
    hold the step its name says), or the directory's model.safetensors, with the step
    and run of its training.json."""
    if file is not None:
        state = load_checkpoint(file, model, mmap=True)     # the optimizer is not read
        named = KEPT_NAME.fullmatch(file.name) if file.parent.name == KEPT_DIR else None
        if named and int(named.group(1)) != state["step"]:
            raise ModelDirError(f"{file}: named step {int(named.group(1))} but holds "
                                f"step {state['step']}: not a copy its run kept")
        return state["model"], state["step"], run_keys(state.get("extra"))
    record = _read_json(own_file(home, TRAINING_FILE)) or {}
    step = record.get("steps")
    keys = run_keys({"resume_keys": {**record.get("args", {}), **record}})
    weights = load_model_dir(home, "cpu")[0].state_dict()
    return weights, step if isinstance(step, int) else None, keys


# [book/appendix_cli.ipynb, cell a4dab855]
def _digest(weights: dict) -> str:
    """A SHA-256 of a state dict's tensors: equal for the same weights."""
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(name.encode())
        digest.update(weights[name].detach().cpu().contiguous().view(-1).view(
            torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _one_run(seen: list[tuple[str, dict, int | None, str]], allow_mixed: bool) -> None:
    """Averaging is defined along one run: refuse an input of another run than the
    first (or of no known run) unless ``--allow-mixed``, and the same weights twice
    (one step of one run under two names, or equal tensors)."""
    name, keys, step, digest = seen[-1]
    if len(seen) == 1:
        return
    for other, other_keys, other_step, other_digest in seen[:-1]:
        if digest == other_digest or (step is not None and step == other_step
                                      and keys and keys == other_keys):
            raise UsageError(f"{name}: the same weights as {other} (step {step} of "
                             "one run): give each checkpoint once")
    first, first_keys = seen[0][0], seen[0][1]
    shared = keys.keys() & first_keys.keys()
    if allow_mixed or (shared and all(keys[k] == first_keys[k] for k in shared)):
        return
    differ = [f"{k} {keys[k]!r}, not {first_keys[k]!r}" for k in sorted(shared)
              if keys[k] != first_keys[k]] or ["no record of its run"]
    raise UsageError(f"{name}: another run than {first} ({'; '.join(differ[:2])}): "
                     "averaging is defined along one run (the weights of two runs are "
                     "not aligned); pass --allow-mixed if you mean it")


# [book/appendix_cli.ipynb, cell 64e32f04]
def _write_average(tmp: Path, out: Path) -> None:
    """Move the model written in the private folder ``tmp`` into ``out``: a rename, or
    into a folder that exists (locked, and empty or given with ``--force``) one file at
    a time, after the files of the model that was there are removed."""
    if not out.exists():
        os.replace(tmp, out)
        return
    for name in (CHECKPOINT_FILE, TRAINING_FILE, TOKENIZER_KIND_FILE, METRICS_FILE):
        (out / name).unlink(missing_ok=True)
    remove_kept(out)
    for file in sorted(tmp.iterdir()):
        os.replace(file, out / file.name)


def run_average(args) -> int:
    """``average``: the mean of the weights of several checkpoints of one run
    (chapter 10's ``RunningMean``: one input in memory at a time), written as a model
    directory that ``translate`` reads, with averaged.json, which names each input
    (relative to ``--out``) and its step, and the first input's decoding defaults
    (generation.json). The directory appears whole or not at all."""
    out = Path(args.out)
    found = _inputs(args)
    with contextlib.ExitStack() as held:            # --out's lock, while it is used
        tmp = _check_average_out(out, found, args.force, held)
        try:
            model, tokenizer, generation, text, steps = _average(
                found, args.allow_mixed, out)
            try:
                save_model_dir(tmp, model, tokenizer)
                save_generation_config(tmp, generation)
                atomic_write(tmp / AVERAGED_FILE, text)
                _write_average(tmp, out)
            except (OSError, RuntimeError, SafetensorError) as exc:
                why = ("is the disk full, or a file-size limit reached? Free some "
                       "space and try again" if no_room(exc) or "disk full" in str(exc)
                       else getattr(exc, "strerror", None) or type(exc).__name__)
                raise OSError(f"--out {out}: could not write the averaged model "
                              f"({why}); nothing was written there") from None
            finished()                    # the model is in place: nothing to stop
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    log_line(f"averaged {len(found)} checkpoints (steps {steps}) into {out}")
    return 0


def _average(found, allow_mixed: bool, out: Path):
    """The inputs ``found`` averaged: the model, its tokenizer and decoding defaults,
    the text of averaged.json and the steps, as the final line names them."""
    first = found[0][0]
    config, tokenizer = load_config_and_tokenizer(first)
    if not isinstance(tokenizer, BPETokenizer):
        raise ModelDirError(f"{first}: its tokenizer is not a BPETokenizer: only "
                            "models trained by the train command can be averaged")
    for home in {home.resolve(): home for home, _ in found}.values():
        if home.resolve() != first.resolve():          # each other directory, once
            _same_model(home, first, config, tokenizer)
    model = Transformer(config)
    mean, inputs, seen = RunningMean(), [], []
    for home, file in found:                       # one input in memory at a time
        weights, step, keys = _weights(home, file, model)
        seen.append((str(file or home), keys, step, _digest(weights)))
        _one_run(seen, allow_mixed)
        mean.add(weights, str(file or home))
        inputs.append({"path": os.path.relpath(file or home, out), "step": step})
    model.load_state_dict(mean.mean())
    text = json.dumps({"averaged": inputs}, indent=2) + "\n"
    steps = ", ".join("?" if i["step"] is None else str(i["step"]) for i in inputs)
    return model, tokenizer, load_generation_config(first), text, steps


__all__ = ['run_average']
