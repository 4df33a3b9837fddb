"""Generated from book/appendix_serving.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 7906b47dea86cfd6
# fmt: off

# [book/appendix_serving.ipynb, cell 9069ed7b]
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from transformer_lib.translation.model_dir import ModelDirError

#: the folder of an exported model that holds the book's config and tokenizer
BOOK_FOLDER = "book"
#: the export's record of its files, in its ``book`` folder: each file's SHA-256
MANIFEST_FILE = "manifest.json"


def _sha256_file(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(root: Path) -> None:
    """``book/manifest.json``: the SHA-256 of every file of the export ``root``
    (CTranslate2's model.bin, config.json and vocabularies, the book's files)."""
    files = [p for p in sorted(root.rglob("*")) if p.is_file()]
    record = {p.relative_to(root).as_posix(): _sha256_file(p) for p in files}
    (root / BOOK_FOLDER / MANIFEST_FILE).write_text(
        json.dumps({"sha256": record}, indent=1) + "\n", encoding="utf-8")


# [book/appendix_serving.ipynb, cell 12878feb]
def check_export(path: Any) -> None:
    """Raise :class:`~transformer_lib.translation.model_dir.ModelDirError`, one line
    naming the file, unless the export ``path`` holds what
    :func:`~transformer_lib.serving.export_ctranslate2` wrote: a ``book`` folder of
    its own (no link in it) whose ``manifest.json`` records every file in it, and
    every file it records (model.bin too) a regular file with the recorded SHA-256
    (the whole file is hashed)."""
    root, again = Path(path), "export the model again"
    book, manifest = root / BOOK_FOLDER, root / BOOK_FOLDER / MANIFEST_FILE
    if book.is_symlink():
        raise ModelDirError(f"{book}: a symbolic link; an export's {BOOK_FOLDER} "
                            f"folder is its own ({again})")
    if not book.is_dir():
        raise ModelDirError(f"{root}: no {BOOK_FOLDER} folder (exported without a "
                            f"tokenizer?): {again} with its tokenizer")
    found = set()
    for where, folders, files in os.walk(book):          # links are not followed
        for entry in [Path(where, name) for name in folders + files]:
            if entry.is_symlink() or not (entry.is_file() or entry.is_dir()):
                raise ModelDirError(f"{entry}: a link or a special file; the files of "
                                    f"an export are its own ({again})")
        found |= {Path(where, name).relative_to(root).as_posix() for name in files}
    if not manifest.is_file():
        raise ModelDirError(f"{manifest}: missing, so nothing ties {book} to "
                            f"{root / 'model.bin'}: {again}")
    try:
        record = json.loads(manifest.read_text(encoding="utf-8"))["sha256"]
        if "model.bin" not in record or not all(
                isinstance(v, str) and ".." not in Path(k).parts
                and not Path(k).is_absolute() for k, v in record.items()):
            raise ValueError("not a record of the export's files")
    except (ValueError, UnicodeDecodeError, RecursionError, KeyError, TypeError,
            AttributeError) as exc:
        raise ModelDirError(f"{manifest}: damaged ({str(exc)[:120]}): {again}"
                            ) from None
    extra = sorted(found - set(record) - {manifest.relative_to(root).as_posix()})
    if extra:
        raise ModelDirError(f"{root / extra[0]}: not a file of the export (not in "
                            f"{MANIFEST_FILE}): remove it, or {again}")
    for name in sorted(record, key=lambda name: name == "model.bin"):  # weights last
        file = root / name
        if file.is_symlink() or not file.is_file():
            raise ModelDirError(f"{file}: missing, a link or not a file, but "
                                f"{MANIFEST_FILE} records it ({again})")
        if _sha256_file(file) != record[name]:
            raise ModelDirError(f"{file}: does not match {manifest} (its SHA-256 "
                                "differs): the export's files were changed, or mixed "
                                f"from two exports; {again}")


__all__ = ['BOOK_FOLDER', 'MANIFEST_FILE', 'write_manifest', 'check_export']
