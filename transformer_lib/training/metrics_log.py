"""Generated from book/appendix_training_run.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 2321c100b1c184c2
# fmt: off

# [book/appendix_training_run.ipynb, cell 6a21972a]
from __future__ import annotations

import json
import os
from typing import Any

from transformer_lib.files import atomic_write


# [book/appendix_training_run.ipynb, cell fa0f6330]
#: the name of the record in a run directory (the command line's)
METRICS_FILE = "metrics.jsonl"


def append_metrics(path: str | os.PathLike, record: dict[str, Any]) -> None:
    """Append ``record`` to the JSON-lines file ``path`` as one complete line, in one
    ``write`` to the file opened with ``O_APPEND`` (a write cut short by a full disk
    is taken back, and raises ``OSError`` naming the file)."""
    data = (json.dumps(record, default=_plain) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        end = os.lseek(fd, 0, os.SEEK_END)
        written = os.write(fd, data)
        if written != len(data):
            os.ftruncate(fd, end)
            raise OSError(f"{os.fspath(path)}: only {written} of the {len(data)} "
                          "bytes of a line could be written (is the disk full?)")
    finally:
        os.close(fd)


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of the metrics file ``path`` (written by :func:`train` with
    ``metrics_path``), in order. A last line without its newline (a write cut by a
    crash) is dropped; another line that is not a JSON object raises ``ValueError``
    naming the file and the line."""
    with open(path, "rb") as f:
        *lines, torn = f.read().split(b"\n")     # torn: b"" after a complete line
    records = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line.decode("utf-8"))
        except ValueError:
            record = None
        if not isinstance(record, dict):
            raise ValueError(f"{os.fspath(path)}:{number}: not a JSON object (a "
                             "damaged metrics file)")
        records.append(record)
    return records


def keep_metrics_until(path: str | os.PathLike, step: int) -> None:
    """Drop the records of steps after ``step`` (and a torn last line) from the
    metrics file ``path``, by an atomic rewrite: a run resumed at ``step`` logs them
    again. A missing file stays missing."""
    if not os.path.exists(path):
        return
    with open(path, "rb") as f:
        old = f.read()
    kept = [r for r in read_metrics(path) if r.get("step", 0) <= step]
    text = "".join(json.dumps(r, default=_plain) + "\n" for r in kept)
    if text.encode("utf-8") != old:
        atomic_write(path, text)


def _plain(value: Any) -> Any:
    """A value JSON cannot write (a 0-d tensor, a NumPy number) as a plain one."""
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)


__all__ = ['METRICS_FILE', 'append_metrics', 'read_metrics', 'keep_metrics_until']
