"""Generated from book/12_translation.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: a1f0d8badb39313c
# fmt: off

# [book/12_translation.ipynb, cell c9e6cf5a]
from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model, save_model

from transformer_lib.checks import resolve_device
from transformer_lib.decoding.config import GenerationConfig
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.model_size import ModelTooLargeError, check_model_fits
from transformer_lib.files import atomic_write
from transformer_lib.translation.tokenizer import BPETokenizer, TextTokenizer

#: the files of a model directory
CONFIG_FILE, TOKENIZER_FILE = "config.json", "tokenizer.json"
WEIGHTS_FILE = "model.safetensors"
CHECKPOINT_FILE, TRAINING_FILE = "checkpoint.pt", "training.json"
#: the model's decoding defaults (a GenerationConfig); absent: the library's
GENERATION_FILE = "generation.json"


# [book/12_translation.ipynb, cell f4ab370e]
class ModelDirError(ValueError):
    """A model directory that is missing, incomplete or damaged."""


def _write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, or not at all when the file already
    holds it (a resumed run rewrites nothing it depends on)."""
    data = text.encode("utf-8")
    if not (path.is_file() and path.read_bytes() == data):
        atomic_write(path, data)


def _config_text(config: TransformerConfig) -> str:
    return json.dumps(config.to_dict(), indent=2) + "\n"


def save_config_and_tokenizer(path, config: TransformerConfig,
                              tokenizer: BPETokenizer) -> Path:
    """Write ``config.json`` and ``tokenizer.json`` to the directory ``path`` (made if
    needed): what a model directory holds besides the weights. Each file is written
    atomically, and not rewritten when it already holds the same text."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    _write_if_changed(path / CONFIG_FILE, _config_text(config))
    _write_if_changed(path / TOKENIZER_FILE, tokenizer.to_json())
    return path


def save_generation_config(path, config: GenerationConfig) -> Path:
    """Write ``config`` to ``generation.json`` in the model directory ``path``
    (atomically; not rewritten when it holds the same text): the decoding defaults that
    ``translate`` uses unless told otherwise."""
    if not isinstance(config, GenerationConfig):
        raise TypeError(f"config must be a GenerationConfig, got "
                        f"{type(config).__name__}")
    path = Path(path)
    _write_if_changed(path / GENERATION_FILE, config.to_json())
    return path / GENERATION_FILE


def load_generation_config(path) -> GenerationConfig:
    """The decoding defaults of the model directory ``path``: its ``generation.json``,
    checked as a new :class:`GenerationConfig` is, or without that file the library's
    defaults. A damaged file raises :class:`ModelDirError` naming it."""
    file = own_file(Path(path), GENERATION_FILE)
    if not file.is_file():
        return GenerationConfig()
    try:
        return GenerationConfig.from_dict(json.loads(file.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise ModelDirError(f"{file}: damaged ({reason})") from None
    except (TypeError, ValueError) as exc:
        raise ModelDirError(f"{file}: not a valid generation config ({exc})") from None


def save_model_dir(path, model: Transformer, tokenizer: BPETokenizer,
                   **training) -> Path:
    """Write ``model`` and ``tokenizer`` to the directory ``path``: ``config.json`` (the
    model's ``config``, a :class:`~transformer_lib.model.TransformerConfig`),
    ``tokenizer.json`` and ``model.safetensors`` (the weights; tied weights are stored
    once; its metadata records the config and a SHA-256 of ``tokenizer.json``, which
    :func:`load_model_dir` checks). Keyword arguments, if any, go to
    ``training.json`` as a record of the run. Every file is written atomically: a
    write that fails leaves the earlier file whole."""
    path = save_config_and_tokenizer(path, model.config, tokenizer)
    meta = {"config": _config_text(model.config),
            "tokenizer_sha256": _sha256(tokenizer.to_json().encode("utf-8"))}
    atomic_write(path / WEIGHTS_FILE, lambda tmp: save_model(model, tmp, meta))
    if training:
        text = json.dumps(training, indent=2) + "\n"
        _write_if_changed(path / TRAINING_FILE, text)
    return path


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# [book/12_translation.ipynb, cell translate-record-check]
def config_differences(file: Path, config: TransformerConfig, stored: dict,
                       where: str) -> None:
    """Raise :class:`ModelDirError` naming ``file`` and the first fields (all but
    dropout) in which ``config`` differs from the ``stored`` config dict."""
    here = config.to_dict()
    names = sorted((here.keys() | stored.keys()) - {"dropout"})
    differ = [f"{k}={here.get(k, '(none)')!r}, but {where} has "
              f"{stored.get(k, '(none)')!r}"
              for k in names if here.get(k, "(none)") != stored.get(k, "(none)")]
    if differ:
        raise ModelDirError(f"{file}: " + "; ".join(differ[:3]))


def check_weights_record(path: Path, config: TransformerConfig, weights: Path) -> None:
    """Compare config.json and tokenizer.json with what ``save_model_dir`` recorded in
    the metadata of ``weights`` (a file without that record is checked by shapes
    only)."""
    try:
        with safe_open(str(weights), framework="pt") as f:
            meta = f.metadata() or {}
    except (SafetensorError, OSError, ValueError) as exc:
        raise ModelDirError(f"{weights}: damaged ({str(exc).splitlines()[0][:200]})"
                            ) from None
    if "config" in meta:
        try:
            stored = json.loads(meta["config"])
        except json.JSONDecodeError:
            raise ModelDirError(f"{weights}: damaged metadata") from None
        config_differences(path / CONFIG_FILE, config, stored, f"the {WEIGHTS_FILE}")
    digest = meta.get("tokenizer_sha256")
    if digest and _sha256((path / TOKENIZER_FILE).read_bytes()) != digest:
        raise ModelDirError(f"{path / TOKENIZER_FILE}: not the tokenizer the weights "
                            f"in {WEIGHTS_FILE} were trained with (its SHA-256 "
                            "differs)")


# [book/12_translation.ipynb, cell 8ab8e194]
#: a model directory's record of its tokenizer's kind; without it, tokenizer.json holds
#: a BPETokenizer
TOKENIZER_KIND_FILE = "tokenizer_kind.json"
#: the kinds a record may name -> "module:class", a class with ``load(path)``; imported
#: only when a directory names it (the Marian adapter needs ``transformers``)
TOKENIZER_KINDS = {"bpe": "transformer_lib.translation.tokenizer:BPETokenizer",
                   "marian": "transformer_lib.marian:MarianTokenizerAdapter"}


def own_file(path: Path, name: str) -> Path:
    """``path / name``, refused when it is a link that leads out of the model directory
    ``path``: a model directory reads only its own files."""
    file = path / name
    if file.is_symlink() and not file.resolve().is_relative_to(path.resolve()):
        raise ModelDirError(f"{file}: a link to {file.resolve()}, outside the model "
                            "directory: a model directory reads only its own files")
    return file


def load_tokenizer(path) -> TextTokenizer:
    """The tokenizer of the model directory ``path``: the kind that
    ``tokenizer_kind.json`` records (``{"kind": ..., "path": ...}``, the path relative
    to the directory), or, without that file, the
    :class:`~transformer_lib.translation.tokenizer.BPETokenizer` of
    ``tokenizer.json``. A missing or damaged file raises :class:`ModelDirError`."""
    path = Path(path)
    record_file = own_file(path, TOKENIZER_KIND_FILE)
    if not record_file.is_file():
        file = own_file(path, TOKENIZER_FILE)
        if not file.is_file():
            raise ModelDirError(f"{path}: incomplete model directory (no "
                                f"{TOKENIZER_FILE})")
        try:
            return BPETokenizer.load(file)
        except ValueError as exc:
            raise ModelDirError(str(exc)) from None
    try:
        record = json.loads(record_file.read_text(encoding="utf-8"))
        module, name = TOKENIZER_KINDS[record["kind"]].split(":")
        where = path / record["path"]
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError, KeyError,
            TypeError):
        raise ModelDirError(f"{record_file}: damaged, or not one of the kinds "
                            f"{sorted(TOKENIZER_KINDS)}") from None
    if not where.resolve().is_relative_to(path.resolve()):   # ../x, /etc/x, a link out
        raise ModelDirError(f"{record_file}: the tokenizer's path must lie inside the "
                            f"model directory, got {record['path']!r}")
    try:
        return getattr(importlib.import_module(module), name).load(where)
    except ImportError as exc:
        raise ModelDirError(f"{record_file}: a {record['kind']!r} tokenizer needs "
                            f"{exc.name} (pip install transformers sentencepiece)"
                            ) from None
    except (OSError, ValueError) as exc:
        text = str(exc)                              # (the file named once)
        raise ModelDirError(text if text.startswith(str(where)) else f"{where}: {text}"
                            ) from None


# [book/12_translation.ipynb, cell d050da21]
def load_config_and_tokenizer(path) -> tuple[TransformerConfig, TextTokenizer]:
    """Read ``config.json`` and the tokenizer (:func:`load_tokenizer`) of the model
    directory ``path`` and check that they agree; a missing or damaged file raises
    :class:`ModelDirError` naming it."""
    path = Path(path)
    file = own_file(path, CONFIG_FILE)
    if not file.is_file():
        raise ModelDirError(f"{path}: not a model directory (no {CONFIG_FILE})")
    if (path / "model.bin").is_file():          # what export_ctranslate2 writes
        raise ModelDirError(f"{path}: a CTranslate2 export (model.bin), not a model "
                            "directory: load it with serving.CTranslate2Model (on the "
                            "command line: translate --engine ctranslate2)")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        config = TransformerConfig.from_dict(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelDirError(f"{file}: damaged ({exc})") from None
    except RecursionError:
        raise ModelDirError(f"{file}: damaged (nested too deeply)") from None
    except (TypeError, ValueError) as exc:
        raise ModelDirError(f"{file}: not a valid model configuration ({exc})") \
            from None
    try:                           # untrusted sizes: refused before anything is read
        check_model_fits(config, str(file))
    except ModelTooLargeError as exc:
        raise ModelDirError(str(exc)) from None
    tokenizer = load_tokenizer(path)
    n = tokenizer.vocab_size
    n_tgt = getattr(tokenizer, "tgt_vocab_size", n)   # two vocabularies (Marian)
    if n != config.src_vocab_size or n_tgt != config.tgt_vocab_size:
        raise ModelDirError(f"{path}: the tokenizer has {n} tokens (source) and "
                            f"{n_tgt} (target), but {CONFIG_FILE} says "
                            f"{config.src_vocab_size} and {config.tgt_vocab_size}")
    return config, tokenizer


def load_model_dir(path, device: str | torch.device | None = None
                   ) -> tuple[Transformer, TextTokenizer]:
    """Read a directory written by :func:`save_model_dir` -> (model in eval mode on
    ``device``, default: a GPU when there is one; tokenizer). A missing or damaged file
    raises :class:`ModelDirError` naming it."""
    path = Path(path)
    if not path.is_dir():
        raise ModelDirError(f"{path}: no such model directory")
    device = resolve_device(device)
    config, tokenizer = load_config_and_tokenizer(path)
    weights = own_file(path, WEIGHTS_FILE)
    if not weights.is_file():
        raise ModelDirError(f"{path}: incomplete model directory (no {WEIGHTS_FILE})")
    check_weights_record(path, config, weights)
    model = Transformer(config)
    try:
        load_model(model, str(weights), strict=True)
    except (SafetensorError, RuntimeError, OSError, ValueError) as exc:
        raise ModelDirError(f"{weights}: damaged or not made for {CONFIG_FILE} "
                            f"({str(exc).splitlines()[0][:200]})") from None
    return model.to(device).eval(), tokenizer


__all__ = [
    'CONFIG_FILE', 'TOKENIZER_FILE', 'WEIGHTS_FILE', 'CHECKPOINT_FILE', 'TRAINING_FILE',
    'GENERATION_FILE', 'ModelDirError', 'save_config_and_tokenizer',
    'save_generation_config', 'load_generation_config', 'save_model_dir',
    'TOKENIZER_KIND_FILE', 'TOKENIZER_KINDS', 'own_file', 'load_tokenizer',
    'load_config_and_tokenizer', 'load_model_dir',
]
