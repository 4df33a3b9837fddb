"""Generated from book/appendix_training_run.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 5bd277402a5769ed
# fmt: off

# [book/appendix_training_run.ipynb, cell 952841c8]
from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def remove_stale_temporaries(path: str | os.PathLike) -> None:
    """Delete the temporaries ``<path>.tmp<pid>[.<random>]`` (files, or the private
    folders of :func:`atomic_write`) that a killed write left behind; those of a
    process that is still running are left alone, and a link is removed, never
    followed."""
    folder, name = os.path.split(os.path.abspath(path))
    for entry in os.listdir(folder):
        match = re.fullmatch(re.escape(name) + r"\.tmp(\d+)(\.\w+)?", entry)
        if match is None or os.name != "posix":
            continue
        try:
            os.kill(int(match.group(1)), 0)      # signal 0: is that process alive?
            continue
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError):
            continue
        where = os.path.join(folder, entry)
        try:
            if os.path.isdir(where) and not os.path.islink(where):
                shutil.rmtree(where)
            else:
                os.remove(where)
        except OSError:
            pass


# [book/appendix_training_run.ipynb, cell b5db4adf]
#: the errno values of a write that ran out of room: a full disk, a file-size limit
#: (``ulimit -f``), a quota
NO_ROOM = (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC))


def no_room(exc: BaseException) -> bool:
    """Whether a failed write ran out of room: an ``OSError``'s errno, or the text
    safetensors gives for it (Rust's "... (os error 28)")."""
    return getattr(exc, "errno", None) in NO_ROOM or any(
        f"(os error {number})" in str(exc) for number in NO_ROOM)


def write_failed(path: Path, exc: BaseException, written: int = 0) -> OSError:
    """The one-line error of a write that failed: it names the file, says why (a full
    disk and a file-size limit say what to do; torch's own text for them, about an
    "unexpected pos", is not repeated) and that the file was left as it was."""
    reason = getattr(exc, "strerror", None) or (
        f"the write stopped after {written:,} bytes" if isinstance(exc, RuntimeError)
        else " ".join(str(exc).split())[:160])
    full = isinstance(exc, RuntimeError) or no_room(exc)
    size = path.stat().st_size if path.is_file() else 0    # the file it replaces
    amount = (f"{size / 1e6:.1f} MB" if size >= 1e6
              else f"{max(1, round(size / 1e3))} kB")
    need = f" (about {amount}, the size of the file now there)" if size else ""
    hint = (f"is the disk full, or a file-size limit reached? Free some space{need} "
            "and try again; " if full else "")
    return OSError(f"{path}: could not write it ({reason or type(exc).__name__}); "
                   f"{hint}the file at {path} was left as it was")


def current_umask() -> int:
    """The process's umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike,
                 data: str | bytes | Callable[[str], object]) -> Path:
    """Write ``data`` (text as UTF-8, bytes, or a function that writes the file whose
    name it is given) to ``path`` atomically: into a new private folder
    ``<path>.tmp<pid>.<random>`` beside it (made exclusively, so no planted file or
    link is ever written through), flushed to disk, given the permissions a new file
    gets (the umask), then renamed over ``path``. A write that fails or is killed leaves
    the old file whole, and a failure is one ``OSError`` naming ``path``; temporaries
    of killed writes are removed by the next write."""
    path = Path(path)
    remove_stale_temporaries(path)
    folder, tmp = None, ""
    try:
        folder = tempfile.mkdtemp(prefix=f"{path.name}.tmp{os.getpid()}.",
                                  dir=path.parent)
        tmp = os.path.join(folder, path.name)
        if callable(data):
            data(tmp)
        else:
            with open(tmp, "xb") as f:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~current_umask())   # as open() would (0600 otherwise)
        os.replace(tmp, path)              # atomic: the old file or the new, not half
    except (OSError, RuntimeError) as exc:           # torch.save's errors are these
        written = os.path.getsize(tmp) if os.path.isfile(tmp) else 0
        raise write_failed(path, exc, written) from None
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    return path


__all__ = []
