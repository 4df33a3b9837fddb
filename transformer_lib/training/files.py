"""Generated from book/appendix_training_run.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: c82b57e102704902
# fmt: off

# [book/appendix_training_run.ipynb, cell 952841c8]
from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path


def remove_stale_temporaries(path: str | os.PathLike) -> None:
    """Delete the temporary files ``<path>.tmp<pid>`` that a killed write left
    behind (those of a process that is still running are left alone)."""
    folder, name = os.path.split(os.path.abspath(path))
    for entry in os.listdir(folder):
        match = re.fullmatch(re.escape(name) + r"\.tmp(\d+)", entry)
        if match is None or os.name != "posix":
            continue
        try:
            os.kill(int(match.group(1)), 0)      # signal 0: is that process alive?
            continue
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError):
            continue
        try:
            os.remove(os.path.join(folder, entry))
        except OSError:
            pass


def atomic_write(path: str | os.PathLike,
                 data: str | bytes | Callable[[str], object]) -> Path:
    """Write ``data`` (text as UTF-8, bytes, or a function that writes the file whose
    name it is given) to ``path`` atomically: into ``<path>.tmp<pid>`` in the same
    directory, flushed to disk, then renamed over ``path``. A write that fails or is
    killed leaves the old file whole; temporary files of killed writes are removed by
    the next write."""
    path = Path(path)
    remove_stale_temporaries(path)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        if callable(data):
            data(tmp)
        else:
            with open(tmp, "wb") as f:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)              # atomic: the old file or the new, not half
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


__all__ = []
