"""Generated from book/appendix_training_run.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 88777c53a9b14ebe
# fmt: off

# [book/appendix_training_run.ipynb, cell 372244a7]
from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from transformer_lib.checks import check_int
from transformer_lib.files import atomic_write, remove_stale_temporaries
from transformer_lib.training.checkpoint import CHECKPOINT_FORMAT, CheckpointError
from transformer_lib.training.checkpoint import checkpoint_step, load_checkpoint


# [book/appendix_training_run.ipynb, cell cf9aa6c0]
#: where keep_last keeps the weights: <run folder>/checkpoints/step-000600.pt
KEPT_DIR, KEPT_NAME = "checkpoints", re.compile(r"step-(\d+)\.pt")


def kept_checkpoints(run: str | os.PathLike) -> list[tuple[int, Path]]:
    """(step, file) of each checkpoint kept in the run folder ``run``, oldest first:
    the regular files of ``run/checkpoints`` named ``step-N.pt`` (no link)."""
    folder = Path(run) / KEPT_DIR
    if folder.is_symlink() or not folder.is_dir():
        return []
    with os.scandir(folder) as entries:
        return sorted((int(m.group(1)), folder / e.name) for e in entries
                      if (m := KEPT_NAME.fullmatch(e.name))
                      and e.is_file(follow_symlinks=False))


def remove_kept(run: str | os.PathLike) -> None:
    """Remove the checkpoints kept in ``run`` (and their folder, if then empty)."""
    for _, file in kept_checkpoints(run):
        os.unlink(file)
    try:
        (Path(run) / KEPT_DIR).rmdir()
    except OSError:                          # not empty, a link, or not there
        pass


# [book/appendix_training_run.ipynb, cell 2bf2ab7a]
class KeepLast:
    """The ``on_checkpoint`` hook of :func:`keep_last`."""

    def __init__(self, n: int, every: int = 0, last: int | None = None):
        self.n = check_int(n, "n")
        self.every = check_int(every, "every", minimum=0)
        self.last = None if last is None else check_int(last, "last")

    def due(self, step: int) -> bool:
        """Whether the checkpoint of ``step`` is one to keep."""
        return step > 0 and (self.every == 0 or step % self.every == 0
                             or step == self.last)

    def __call__(self, step: int, path: str) -> None:
        if self.due(step):
            self.keep(path)

    def owed(self, path: str | os.PathLike) -> Path | None:
        """On resume: keep the checkpoint at ``path`` if it is due and was not kept
        (the run was killed between the two writes); the kept file, or None."""
        step = checkpoint_step(path)
        if not self.due(step) or step in dict(kept_checkpoints(Path(path).parent)):
            return None
        return self.keep(path)

    def keep(self, path: str | os.PathLike) -> Path:
        """Write the weights of the checkpoint at ``path`` to ``checkpoints/`` beside
        it, then remove the kept files older than the last ``n``."""
        run = Path(path).parent
        folder = run / KEPT_DIR
        if folder.is_symlink():
            raise CheckpointError(f"{folder}: is a symbolic link: keep_last writes and "
                                  "removes files only inside the run's folder")
        folder.mkdir(exist_ok=True)
        state = load_checkpoint(path, mmap=True)         # the optimizer is not read
        step = state["step"]
        run_of = {"resume_keys": state["extra"].get("resume_keys")}  # whose run
        weights = {"format": CHECKPOINT_FORMAT, "model": state["model"],
                   "optimizer": None, "scheduler": None, "scaler": None, "step": step,
                   "rng": {}, "config": state.get("config"),
                   "extra": {"weights_only": True, **run_of}}
        out = folder / f"step-{step:06d}.pt"
        atomic_write(out, lambda tmp: torch.save(weights, tmp))
        # the older copies of this run: a file that does not hold the step its name
        # says (planted, or another run's) is neither counted nor removed
        ours = [(s, f) for s, f in kept_checkpoints(run) if _holds(f, s, run_of)]
        for old_step, old in ours[:-self.n]:
            if old_step != step:
                os.unlink(old)                   # a regular file of the folder
        for name in {m.group(1) for e in os.listdir(folder)
                     if (m := re.fullmatch(r"(step-\d+\.pt)\.tmp\d+(\.\w+)?", e))}:
            remove_stale_temporaries(folder / name)  # left by killed writes
        return out


def _holds(file: Path, step: int, run_of: dict) -> bool:
    """Whether the kept file ``file`` holds the weights of ``step`` of the run whose
    resume keys ``run_of`` gives (the keys both record agree)."""
    try:
        state = load_checkpoint(file, mmap=True)
    except (CheckpointError, OSError):
        return False
    theirs = state["extra"].get("resume_keys")
    theirs = theirs if isinstance(theirs, dict) else {}
    ours = run_of["resume_keys"] if isinstance(run_of["resume_keys"], dict) else {}
    return state["step"] == step and all(theirs[k] == ours[k]
                                         for k in theirs.keys() & ours.keys())


def keep_last(n: int, every: int = 0, last: int | None = None) -> KeepLast:
    """A hook for ``train(on_checkpoint=...)`` that keeps the weights (no optimizer
    or random state) of the last ``n`` checkpoints of the run, in
    ``checkpoints/step-NNNNNN.pt`` beside ``checkpoint_path``, for
    :func:`~transformer_lib.training.averaging.average_checkpoints`. With ``every``,
    only the checkpoints of steps that are multiples of it, and of step ``last``,
    are kept (0: every checkpoint after step 0). Old copies are removed after the new
    one is written, and only regular files of that folder: a link is never followed.
    ``n``, ``every`` and ``last`` are checked (a ``ValueError`` names a bad one)."""
    return KeepLast(n, every, last)


__all__ = [
    'KEPT_DIR', 'KEPT_NAME', 'kept_checkpoints', 'remove_kept', 'KeepLast', 'keep_last',
]
