"""Generated from book/appendix_marian.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: b7e13a831befc481
# fmt: off

# [book/appendix_marian.ipynb, cell 50912a8b]
from __future__ import annotations

import json
import pickle
import re
import warnings
from pathlib import Path
from typing import Any

from safetensors import SafetensorError

from transformer_lib.translation.model_dir import CONFIG_FILE

#: a Marian tokenizer's files (target_vocab.json too, with separate vocabularies)
TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")
#: the weights files transformers reads, in the order it prefers them
WEIGHTS_FILES = ("model.safetensors", "model.safetensors.index.json",
                 "pytorch_model.bin", "pytorch_model.bin.index.json")


def first_line(exc: BaseException) -> str:
    """An exception's message: its first line, at most 200 characters."""
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:200]


def read_json_object(file: Path) -> dict:
    """The JSON object in ``file``; a damaged one raises a ValueError naming it."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{file}: damaged, not JSON ({first_line(exc)})") from None
    except RecursionError:
        raise ValueError(f"{file}: damaged (nested too deeply)") from None
    if not isinstance(data, dict):
        raise ValueError(f"{file}: damaged (not a JSON object)")
    return data


def check_tokenizer_files(path: Path, what: str) -> None:
    """Refuse a directory without Marian's tokenizer files, naming the missing ones,
    or with damaged JSON files, naming them (``transformers`` would say ``expected
    str, bytes or os.PathLike object, not NoneType``)."""
    missing = [name for name in TOKENIZER_FILES if not (path / name).is_file()]
    settings = path / "tokenizer_config.json"
    if settings.is_file() and read_json_object(settings).get("separate_vocabs"):
        missing += [name for name in ["target_vocab.json"]
                    if not (path / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{path}: not a Marian {what} directory (no "
                                f"{', '.join(missing)})")
    for name in ("vocab.json", "target_vocab.json"):
        if (path / name).is_file():
            read_json_object(path / name)


# [book/appendix_marian.ipynb, cell 51bfe992]
def _listed(names: list[str], shown: int = 3) -> str:
    """``a, b, c, ... (12 in all)``: the first few of a long list."""
    more = f", ... ({len(names)} in all)" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _resized(item: Any) -> str:
    """One of transformers' mismatched keys, (name, checkpoint shape, model shape)."""
    if not (isinstance(item, tuple) and len(item) == 3):
        return str(item)
    name, theirs, ours = item
    shape = ["x".join(map(str, s)) for s in (theirs, ours)]
    return f"{name} ({shape[0]} in the checkpoint, {shape[1]} in {CONFIG_FILE})"


def load_marian_checked(src: Path, weights: Path) -> Any:
    """The ``MarianMTModel`` of ``src``, read with transformers' load report silenced,
    and refused unless ``weights`` holds exactly the tensors that config.json
    describes: ``from_pretrained`` would fill missing ones at random."""
    from transformers import MarianMTModel
    from transformers.utils import logging as hf_logging
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()             # no LOAD REPORT: the list is ours
    hf_logging.disable_progress_bar()            # the tool reports in one line
    try:
        with warnings.catch_warnings():          # torch's too: one line is the report
            warnings.simplefilter("ignore")
            loaded: Any = MarianMTModel.from_pretrained(
                str(src), local_files_only=True, output_loading_info=True,
                ignore_mismatched_sizes=True)    # listed in info, refused below
    except pickle.UnpicklingError as exc:        # torch's text advises unsafe loading
        found = re.search(r"GLOBAL ([\w.]+)", str(exc))     # what it would import
        if found is None:                        # torch stopped before it could tell
            raise ValueError(f"{weights}: refused as unsafe or damaged (not a plain "
                             "pickle of tensors, the only kind loaded)") from None
        raise ValueError(f"{weights}: refused as unsafe (it holds {found[1]}, not only "
                         "tensors, and loading it could run code)") from None
    except (SafetensorError, OSError, EOFError, RuntimeError, ValueError) as exc:
        raise ValueError(f"{weights}: damaged, truncated or not a checkpoint "
                         f"({first_line(exc)})") from None
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    hf, info = loaded
    resized = [_resized(item) for item in sorted(info["mismatched_keys"])]
    wrong = [f"{what} {_listed(names)}" for what, names in (
        ("missing weights", sorted(info["missing_keys"])),
        ("unexpected weights", sorted(info["unexpected_keys"])),
        ("weights of other sizes", resized)) if names]
    if wrong:
        raise ValueError(f"{weights}: {'; '.join(wrong)}: the checkpoint does not hold "
                         f"the model {CONFIG_FILE} describes")
    return hf


__all__ = []
