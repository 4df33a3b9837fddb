"""Generated from book/12_translation.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: fab19133e45ff1b4
# fmt: off

# [book/12_translation.ipynb, cell 4d681ebd]
from __future__ import annotations

import hashlib
import importlib
import json
import warnings
from pathlib import Path
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_model, save_model

from transformer_lib.checks import check_int, check_probability, resolve_device
from transformer_lib.training.checkpoint import load_checkpoint
from transformer_lib.decoding.beam import beam_search
from transformer_lib.decoding.greedy import greedy_decode
from transformer_lib.decoding.sampling import sample
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.translation.tokenizer import BPETokenizer
from transformer_lib.translation.corpus import atomic_write

#: the files of a model directory (section 12.7)
CONFIG_FILE, TOKENIZER_FILE = "config.json", "tokenizer.json"
WEIGHTS_FILE = "model.safetensors"
CHECKPOINT_FILE, TRAINING_FILE = "checkpoint.pt", "training.json"
#: the ``precision`` choices of :func:`translate_lines`: autocast's dtype (None: off)
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
#: a model directory's record of its tokenizer's kind; without it, tokenizer.json holds
#: a BPETokenizer
TOKENIZER_KIND_FILE = "tokenizer_kind.json"
#: the kinds a record may name -> "module:class", a class with ``load(path)``; imported
#: only when a directory names it (the Marian adapter needs ``transformers``)
TOKENIZER_KINDS = {"bpe": "transformer_lib.translation.tokenizer:BPETokenizer",
                   "marian": "transformer_lib.marian:MarianTokenizerAdapter"}


class TextTokenizer(Protocol):
    """What translation needs of a tokenizer: a
    :class:`~transformer_lib.translation.tokenizer.BPETokenizer` has it, and so does
    :class:`~transformer_lib.marian.MarianTokenizerAdapter` (duck typing). ``encode``
    gives a source's ids as the model reads them; ``decode`` takes an output row (start
    token first, padding after eos)."""

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids) -> str: ...


# [book/12_translation.ipynb, cell 079b917a]
@torch.no_grad()
def translate_lines(model: Transformer, tokenizer: TextTokenizer, lines: Iterable[str],
                    *, beam: int = 1, length_penalty: float = 0.6,
                    sampling: bool = False,
                    temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                    seed: int = 0, batch_size: int = 64, max_len: int | None = None,
                    precision: str = "fp32",
                    on_too_long: str | Callable[[int, int], object] = "error"
                    ) -> list[str]:
    """Translate each string of ``lines``; one output per input, in order; an empty line
    gives ''.

    Lines are sorted by length and decoded ``batch_size`` at a time (``beam`` > 1: beam
    search; ``sampling``: :func:`~transformer_lib.decoding.sampling.sample`; else greedy).
    ``max_len``: the most target tokens (default: 2 × source + 10 for each sentence, at
    most the model's ``max_len``). ``precision``: ``"bf16"`` or ``"fp16"`` decode under
    autocast. A source longer than the model's ``max_len`` tokens: ``on_too_long=
    "error"`` raises a ValueError naming its line number (from 1), ``"warn"`` cuts it
    with a :class:`LineTooLongWarning`, ``"truncate"`` cuts it silently, and a function
    ``f(line_number, n_tokens)`` is called, then the line is cut."""
    if isinstance(lines, str):
        raise TypeError("lines must be a list of str, got one str (wrap it: [line])")
    lines = list(lines)
    beam, batch_size = check_int(beam, "beam"), check_int(batch_size, "batch_size")
    if max_len is not None:
        max_len = check_int(max_len, "max_len")
    if sampling and beam > 1:
        raise ValueError("choose beam search (beam > 1) or sampling, not both")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got "
                         f"{precision!r}")
    c, dtype = model.config, PRECISIONS[precision]
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed) if sampling else None
    if not callable(on_too_long) and on_too_long not in ("error", "warn", "truncate"):
        raise ValueError("on_too_long must be 'error', 'warn', 'truncate' or a "
                         f"function, got {on_too_long!r}")
    encoded = [tokenizer.encode(line.strip()) for line in lines]
    for number, line_ids in enumerate(encoded, 1):
        if len(line_ids) > c.max_len:
            _too_long(on_too_long, number, len(line_ids), c.max_len)
            encoded[number - 1] = line_ids[: c.max_len]
    order = sorted((i for i, ids in enumerate(encoded) if ids),
                   key=lambda i: len(encoded[i]))
    out = [""] * len(lines)
    model.eval()
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        src = torch.nn.utils.rnn.pad_sequence(
            [torch.tensor(encoded[i]) for i in rows], batch_first=True,
            padding_value=c.pad_id).to(device)                                 # (B, S)
        limit = max_len or min(c.max_len, 2 * src.size(1) + 10)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            if beam > 1:
                # None: each sentence its own limit, so its batch does not matter
                ids = beam_search(model, src, beam_size=beam, max_len=max_len,
                                  length_penalty=length_penalty)
            elif sampling:
                ids = sample(model, src, max_len=limit, temperature=temperature,
                             top_k=top_k, top_p=top_p, generator=generator)
            else:
                ids = greedy_decode(model, src, max_len=limit)                 # (B, T)
        for i, row in zip(rows, ids.tolist()):
            # each sentence keeps at most its own limit: its batch does not matter
            own = max_len or min(c.max_len, 2 * len(encoded[i]) + 10)
            out[i] = tokenizer.decode(row[: 1 + own])
    return out


# [book/12_translation.ipynb, cell 9b90b027]
class LineTooLongWarning(UserWarning):
    """A line longer than the model's ``max_len`` was cut (``on_too_long="warn"``)."""


def _too_long(on_too_long, number: int, n_tokens: int, max_len: int) -> None:
    message = (f"line {number}: {n_tokens} tokens, longer than the model's max_len "
               f"{max_len}")
    if on_too_long == "error":
        raise ValueError(f"{message} (on_too_long='warn' or 'truncate' cuts it)")
    if on_too_long == "warn":
        warnings.warn(f"{message}: cut to its first {max_len} tokens",
                      LineTooLongWarning, stacklevel=3)
    elif callable(on_too_long):
        on_too_long(number, n_tokens)


# [book/12_translation.ipynb, cell b8dce5d6]
def corpus_bleu(hypotheses: Sequence[str],
                references: Sequence[str]) -> tuple[float, str]:
    """BLEU of ``hypotheses`` against one reference each, computed by sacrebleu with its
    standard tokenisation -> (score in [0, 100], sacrebleu's signature, which says how
    the score was computed). Needs the ``bleu`` extra."""
    bleu, hypotheses, references = _bleu_metric(hypotheses, references)
    score = bleu.corpus_score(hypotheses, [references])
    return score.score, str(bleu.get_signature())


def _bleu_metric(hypotheses: Sequence[str], references: Sequence[str]
                 ) -> tuple[Any, list[str], list[str]]:
    """sacrebleu's BLEU metric and the two lists, checked to be as many."""
    try:
        import sacrebleu
    except ImportError:
        raise ImportError("sacrebleu is not installed; it comes with the 'bleu' extra: "
                          "pip install 'transformer_lib[bleu]'") from None
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(f"hypotheses and references must be as many, got "
                         f"{len(hypotheses)} and {len(references)}")
    return sacrebleu.metrics.BLEU(), hypotheses, references


# [book/12_translation.ipynb, cell ef18c50f]
def bootstrap_ci(values, statistic: Callable[[np.ndarray], float] | None = None, *,
                 n_resamples: int = 1000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float, float]:
    """(estimate, low, high): ``statistic`` of ``values`` and its percentile bootstrap
    interval at confidence ``level``.

    ``values`` holds one entry (or one row of numbers) per test sentence;
    ``statistic`` maps an array of such rows to a number (default: their mean, the
    exact match of 0/1 entries). The sentences are drawn with replacement
    ``n_resamples`` times (by ``seed``); the interval holds the middle ``level`` of
    the resamples' statistics. The estimate is the statistic of ``values`` itself."""
    rows = np.asarray(values, dtype=float)
    if rows.ndim == 0 or len(rows) == 0:
        raise ValueError("values must hold one entry per sentence, got none")
    n_resamples = check_int(n_resamples, "n_resamples", minimum=2)
    level = check_probability(level, "level", zero=False, one=False)
    stat = statistic if statistic is not None else (lambda r: float(r.mean()))
    rng = np.random.default_rng(seed)
    draws = rng.integers(len(rows), size=(n_resamples, len(rows)))   # (n_resamples, n)
    stats = np.array([stat(rows[i]) for i in draws])
    low, high = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return float(stat(rows)), float(low), float(high)


def bleu_ci(hypotheses: Sequence[str], references: Sequence[str], *,
            n_resamples: int = 1000, level: float = 0.95,
            seed: int = 0) -> tuple[float, float, float]:
    """(BLEU, low, high): the score of :func:`corpus_bleu` and its bootstrap interval
    over sentences (:func:`bootstrap_ci`); a resample's BLEU is computed from the
    sums of its sentences' n-gram counts, as sacrebleu's own bootstrap does. Needs
    the ``bleu`` extra."""
    bleu, hypotheses, references = _bleu_metric(hypotheses, references)
    if not hypotheses:
        raise ValueError("hypotheses must hold at least one sentence, got none")
    counts = np.array(bleu._extract_corpus_statistics(hypotheses, [references]))

    def score(rows: np.ndarray) -> float:
        sums = rows.sum(axis=0).round().astype(int).tolist()
        return float(bleu._compute_score_from_stats(sums).score)

    return bootstrap_ci(counts, score, n_resamples=n_resamples, level=level, seed=seed)


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
def _differences(file: Path, config: TransformerConfig, stored: dict,
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


def _check_record(path: Path, config: TransformerConfig, weights: Path) -> None:
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
        _differences(path / CONFIG_FILE, config, stored, f"the {WEIGHTS_FILE}")
    digest = meta.get("tokenizer_sha256")
    if digest and _sha256((path / TOKENIZER_FILE).read_bytes()) != digest:
        raise ModelDirError(f"{path / TOKENIZER_FILE}: not the tokenizer the weights "
                            f"in {WEIGHTS_FILE} were trained with (its SHA-256 "
                            "differs)")


# [book/12_translation.ipynb, cell 8ab8e194]
def load_tokenizer(path) -> TextTokenizer:
    """The tokenizer of the model directory ``path``: the kind that
    ``tokenizer_kind.json`` records (``{"kind": ..., "path": ...}``, the path relative
    to the directory), or, without that file, the
    :class:`~transformer_lib.translation.tokenizer.BPETokenizer` of
    ``tokenizer.json``. A missing or damaged file raises :class:`ModelDirError`."""
    path = Path(path)
    record_file = path / TOKENIZER_KIND_FILE
    if not record_file.is_file():
        file = path / TOKENIZER_FILE
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
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
        raise ModelDirError(f"{record_file}: damaged, or not one of the kinds "
                            f"{sorted(TOKENIZER_KINDS)}") from None
    try:
        return getattr(importlib.import_module(module), name).load(where)
    except ImportError as exc:
        raise ModelDirError(f"{record_file}: a {record['kind']!r} tokenizer needs "
                            f"{exc.name} (pip install transformers sentencepiece)"
                            ) from None
    except (OSError, ValueError) as exc:
        raise ModelDirError(f"{where}: {exc}") from None


# [book/12_translation.ipynb, cell d050da21]
def load_config_and_tokenizer(path) -> tuple[TransformerConfig, TextTokenizer]:
    """Read ``config.json`` and the tokenizer (:func:`load_tokenizer`) of the model
    directory ``path`` and check that they agree; a missing or damaged file raises
    :class:`ModelDirError` naming it."""
    path = Path(path)
    file = path / CONFIG_FILE
    if not file.is_file():
        raise ModelDirError(f"{path}: not a model directory (no {CONFIG_FILE})")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        config = TransformerConfig.from_dict(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelDirError(f"{file}: damaged ({exc})") from None
    except (TypeError, ValueError) as exc:
        raise ModelDirError(f"{file}: not a valid model configuration ({exc})") \
            from None
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
    weights = path / WEIGHTS_FILE
    if not weights.is_file():
        raise ModelDirError(f"{path}: incomplete model directory (no {WEIGHTS_FILE})")
    _check_record(path, config, weights)
    model = Transformer(config)
    try:
        load_model(model, str(weights), strict=True)
    except (SafetensorError, RuntimeError, OSError, ValueError) as exc:
        raise ModelDirError(f"{weights}: damaged or not made for {CONFIG_FILE} "
                            f"({str(exc).splitlines()[0][:200]})") from None
    return model.to(device).eval(), tokenizer


# [book/12_translation.ipynb, cell 8b72a087]
def load_resume_setup(path) -> tuple[TransformerConfig, BPETokenizer]:
    """The config and tokenizer to resume the run of the model directory ``path``:
    ``config.json`` and ``tokenizer.json`` checked against ``checkpoint.pt`` (the
    config field by field, the tokenizer's size) and, when present, against the
    record in ``model.safetensors``. A difference raises :class:`ModelDirError`, a
    damaged checkpoint a ``CheckpointError``, each naming the file."""
    path = Path(path)
    checkpoint = path / CHECKPOINT_FILE
    if not checkpoint.is_file():
        raise ModelDirError(f"{path}: nothing to resume (no {CHECKPOINT_FILE})")
    config, tokenizer = load_config_and_tokenizer(path)
    if not isinstance(tokenizer, BPETokenizer):    # a converted model: not trained here
        raise ModelDirError(f"{path}: its tokenizer is not a BPETokenizer: only a run "
                            "of the train command can be resumed")
    stored = load_checkpoint(checkpoint).get("config")
    if isinstance(stored, dict):
        _differences(path / CONFIG_FILE, config, stored, f"the {CHECKPOINT_FILE}")
    if (path / WEIGHTS_FILE).is_file():
        _check_record(path, config, path / WEIGHTS_FILE)
    return config, tokenizer


__all__ = [
    'CONFIG_FILE',
    'TOKENIZER_FILE',
    'WEIGHTS_FILE',
    'CHECKPOINT_FILE',
    'TRAINING_FILE',
    'PRECISIONS',
    'TOKENIZER_KIND_FILE',
    'TOKENIZER_KINDS',
    'TextTokenizer',
    'translate_lines',
    'LineTooLongWarning',
    'corpus_bleu',
    'bootstrap_ci',
    'bleu_ci',
    'ModelDirError',
    'save_config_and_tokenizer',
    'save_model_dir',
    'load_tokenizer',
    'load_config_and_tokenizer',
    'load_model_dir',
    'load_resume_setup',
]
