"""Generated from book/12_translation.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 0093cf6385e93915
# fmt: off

# [book/12_translation.ipynb, cell 33]
from __future__ import annotations

import json
from pathlib import Path
from collections.abc import Iterable, Sequence

import torch
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model

from transformer_lib.checks import check_int, resolve_device
from transformer_lib.beam import beam_search
from transformer_lib.decoding import greedy_decode
from transformer_lib.sampling import sample
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.tokenizer import BPETokenizer

#: the files of a model directory (section 12.7)
CONFIG_FILE, TOKENIZER_FILE = "config.json", "tokenizer.json"
WEIGHTS_FILE = "model.safetensors"
CHECKPOINT_FILE, TRAINING_FILE = "checkpoint.pt", "training.json"
#: the ``precision`` choices of :func:`translate_lines`: autocast's dtype (None: off)
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


# [book/12_translation.ipynb, cell 34]
@torch.no_grad()
def translate_lines(model: Transformer, tokenizer: BPETokenizer, lines: Iterable[str],
                    *, beam: int = 1, length_penalty: float = 0.6,
                    sampling: bool = False,
                    temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                    seed: int = 0, batch_size: int = 64, max_len: int | None = None,
                    precision: str = "fp32") -> list[str]:
    """Translate each string of ``lines``; one output per input, in order; an empty line
    gives ''.

    Lines are sorted by length and decoded ``batch_size`` at a time (``beam`` > 1: beam
    search; ``sampling``: :func:`~transformer_lib.sampling.sample`; else greedy).
    ``max_len``: the most target tokens (default: 2 × source + 10 for each sentence, at
    most the model's ``max_len``). ``precision``: ``"bf16"`` or ``"fp16"`` decode under
    autocast."""
    if isinstance(lines, str):
        raise TypeError("lines must be a list of str, got one str")
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
    encoded = [tokenizer.encode(line.strip())[: c.max_len] for line in lines]
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
                ids = beam_search(model, src, beam_size=beam, max_len=limit,
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


# [book/12_translation.ipynb, cell 36]
def corpus_bleu(hypotheses: Sequence[str],
                references: Sequence[str]) -> tuple[float, str]:
    """BLEU of ``hypotheses`` against one reference each, computed by sacrebleu with its
    standard tokenisation -> (score in [0, 100], sacrebleu's signature, which says how
    the score was computed). Needs the ``bleu`` extra."""
    try:
        import sacrebleu
    except ImportError:
        raise ImportError("sacrebleu is not installed; it comes with the 'bleu' extra: "
                          "pip install 'transformer_lib[bleu]'") from None
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(f"hypotheses and references must be as many, got "
                         f"{len(hypotheses)} and {len(references)}")
    bleu = sacrebleu.metrics.BLEU()
    score = bleu.corpus_score(hypotheses, [references])
    return score.score, str(bleu.get_signature())


# [book/12_translation.ipynb, cell 48]
class ModelDirError(ValueError):
    """A model directory that is missing, incomplete or damaged."""


def save_config_and_tokenizer(path, config: TransformerConfig,
                              tokenizer: BPETokenizer) -> Path:
    """Write ``config.json`` and ``tokenizer.json`` to the directory ``path`` (made if
    needed): what a model directory holds besides the weights."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    text = json.dumps(config.to_dict(), indent=2) + "\n"
    (path / CONFIG_FILE).write_text(text, encoding="utf-8")
    tokenizer.save(path / TOKENIZER_FILE)
    return path


def save_model_dir(path, model: Transformer, tokenizer: BPETokenizer,
                   **training) -> Path:
    """Write ``model`` and ``tokenizer`` to the directory ``path``: ``config.json`` (the
    model's ``config``, a :class:`~transformer_lib.model.TransformerConfig`),
    ``tokenizer.json`` and ``model.safetensors`` (the weights; tied weights are stored
    once). Keyword arguments, if any, go to ``training.json`` as a record of the run."""
    path = save_config_and_tokenizer(path, model.config, tokenizer)
    save_model(model, str(path / WEIGHTS_FILE))
    if training:
        text = json.dumps(training, indent=2) + "\n"
        (path / TRAINING_FILE).write_text(text, encoding="utf-8")
    return path


# [book/12_translation.ipynb, cell 50]
def load_config_and_tokenizer(path) -> tuple[TransformerConfig, BPETokenizer]:
    """Read ``config.json`` and ``tokenizer.json`` of the model directory ``path`` and
    check that they agree; a missing or damaged file raises :class:`ModelDirError`
    naming it."""
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
    file = path / TOKENIZER_FILE
    if not file.is_file():
        raise ModelDirError(f"{path}: incomplete model directory (no {TOKENIZER_FILE})")
    try:
        tokenizer = BPETokenizer.load(file)
    except ValueError as exc:
        raise ModelDirError(str(exc)) from None
    n = tokenizer.vocab_size
    if n != config.src_vocab_size or n != config.tgt_vocab_size:
        raise ModelDirError(f"{file}: {n} tokens, but {CONFIG_FILE} says "
                            f"{config.src_vocab_size} (source) and "
                            f"{config.tgt_vocab_size} (target)")
    return config, tokenizer


def load_model_dir(path, device: str | torch.device | None = None
                   ) -> tuple[Transformer, BPETokenizer]:
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
    model = Transformer(config)
    try:
        load_model(model, str(weights), strict=True)
    except (SafetensorError, RuntimeError, OSError, ValueError) as exc:
        raise ModelDirError(f"{weights}: damaged or not made for {CONFIG_FILE} "
                            f"({str(exc).splitlines()[0][:200]})") from None
    return model.to(device).eval(), tokenizer


__all__ = [
    'CONFIG_FILE',
    'TOKENIZER_FILE',
    'WEIGHTS_FILE',
    'CHECKPOINT_FILE',
    'TRAINING_FILE',
    'PRECISIONS',
    'translate_lines',
    'corpus_bleu',
    'ModelDirError',
    'save_config_and_tokenizer',
    'save_model_dir',
    'load_config_and_tokenizer',
    'load_model_dir',
]
