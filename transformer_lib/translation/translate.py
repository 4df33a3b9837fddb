"""Generated from book/12_translation.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 63d3f8efb546c5a0
# fmt: off

# [book/12_translation.ipynb, cell 4d681ebd]
from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch

from transformer_lib.checks import check_int
from transformer_lib.decoding.beam import beam_search_unchecked, check_beam_size
from transformer_lib.decoding.config import GenerationConfig
from transformer_lib.decoding.greedy import check_model, check_settings
from transformer_lib.decoding.greedy import decode_unchecked
from transformer_lib.decoding.sampling import sample_unchecked
from transformer_lib.model import Transformer
from transformer_lib.precision import amp_dtype
from transformer_lib.translation.tokenizer import TextTokenizer


# [book/12_translation.ipynb, cell 5e9d2c41]
#: the engines of translate_lines: "auto" (packed weights for a model on the CPU, the
#: model itself elsewhere), "packed" (always packed) or "torch" (the model as given)
ENGINES = ("auto", "packed", "torch")


def decoding_model(model: Any, engine: str = "auto") -> Any:
    """What chapter 11's decoders run for :func:`translate_lines`: with
    ``engine="torch"`` the model itself; with ``"packed"`` the serving appendix's
    :class:`~transformer_lib.packed.PackedDecoder` around it (packed weights and a lean
    step: the same outputs up to near ties, in less time); ``"auto"`` packs a
    :class:`Transformer` whose weights are on the CPU and whose layers are all
    PyTorch's or the book's, and leaves anything else (a model on a GPU, one already
    packed or quantized, another kind of model) as it is."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if engine == "torch" or engine == "auto" and not (
            isinstance(model, Transformer)
            and next(model.parameters()).device.type == "cpu"
            and not any(type(m).__module__.startswith("torch.ao.")   # quantized
                        for m in model.modules())):
        return model
    # the serving appendix's module, imported when called: the one place where a
    # chapter reaches forward (tests/test_book_structure.py lists it)
    from transformer_lib.packed import PackedDecoder
    return model if isinstance(model, PackedDecoder) else PackedDecoder(model)


# [book/12_translation.ipynb, cell 079b917a]
def translate_lines(model: Transformer, tokenizer: TextTokenizer, lines: Iterable[str],
                    config: GenerationConfig | None = None, *, batch_size: int = 64,
                    precision: str = "fp32", engine: str = "auto",
                    on_too_long: str | Callable[[int, int], object] = "error",
                    **settings: Any) -> list[str]:
    """Translate each string of ``lines``; one output per input, in order; an empty line
    gives ''.

    The decoding settings are ``config``, a
    :class:`~transformer_lib.decoding.config.GenerationConfig` (None: the defaults,
    greedy decoding), and keywords given, any
    of its fields (``strategy="beam"``, ``beam_size=5``, ``alpha=1.0``, ...) or
    ``max_len`` (one fixed limit for every line, at most the model's ``max_len``),
    replace its fields. ``strategy`` "beam" with beam_size > 1: beam search; "sample":
    :func:`~transformer_lib.decoding.sampling.sample` (one generator seeded with
    ``seed`` for all batches); else greedy. Lines are sorted by length and decoded
    ``batch_size`` at a time. ``precision`` (chapter 10's ``PRECISIONS``): ``"bf16"`` or
    ``"fp16"`` decode under autocast. A source longer than the model's ``max_len``
    tokens: ``on_too_long="error"`` raises a ValueError naming its line number (from
    1), ``"warn"`` cuts it with a :class:`LineTooLongWarning`, ``"truncate"`` cuts it
    silently, and a function ``f(line_number, n_tokens)`` is called, then the line is
    cut. ``engine`` (:func:`decoding_model`): by default a model on the CPU decodes on
    the serving appendix's packed weights, the same outputs up to near ties;
    ``engine="torch"`` keeps chapter 11's step. The model decodes in eval mode; its
    mode is restored after."""
    if isinstance(lines, str):
        raise TypeError("lines must be a list of str, got one str (wrap it: [line])")
    check_model(model)
    model = decoding_model(model, engine)
    c = model.config
    config = check_settings(model, None, config, settings)
    batch_size = check_int(batch_size, "batch_size")
    if not callable(on_too_long) and on_too_long not in ("error", "warn", "truncate"):
        raise ValueError("on_too_long must be 'error', 'warn', 'truncate' or a "
                         f"function, got {on_too_long!r}")
    dtype, device = amp_dtype(precision), next(model.parameters()).device
    if config.strategy == "beam" and config.beam_size > 1:
        check_beam_size(c, config.beam_size)

        def decode(src: torch.Tensor) -> torch.Tensor:
            return beam_search_unchecked(model, src, config)[0]
    elif config.strategy == "sample":
        generator = torch.Generator(device=device).manual_seed(config.seed)

        def decode(src: torch.Tensor) -> torch.Tensor:
            return sample_unchecked(model, src, config, generator=generator)
    else:
        def decode(src: torch.Tensor) -> torch.Tensor:
            return decode_unchecked(model, src, config)
    return translate_with(c, device, tokenizer, list(lines), decode, batch_size, dtype,
                          on_too_long)


# [book/12_translation.ipynb, cell 3930bf4f]
def translate_with(c: Any, device: torch.device, tokenizer: TextTokenizer,
                   lines: list[str], decode: Callable[[torch.Tensor], torch.Tensor],
                   batch_size: int, dtype: torch.dtype | None,
                   on_too_long: str | Callable[[int, int], object]) -> list[str]:
    """:func:`translate_lines` after its checks, for any decoder: ``decode`` maps a
    batch of sources (B, S) on ``device`` to output ids (B, T); ``c`` is the model's
    config (its vocabulary sizes, max_len and pad_id)."""
    encoded = [tokenizer.encode(line.strip()) for line in lines]
    for number, line_ids in enumerate(encoded, 1):
        if line_ids and max(line_ids) >= c.src_vocab_size:
            raise ValueError(f"line {number}: the tokenizer gives id {max(line_ids)}, "
                             f"outside the model's src_vocab_size {c.src_vocab_size}")
        if len(line_ids) > c.max_len:
            _report_long_line(on_too_long, number, len(line_ids), c.max_len)
            encoded[number - 1] = line_ids[: c.max_len]
    order = sorted((i for i, ids in enumerate(encoded) if ids),
                   key=lambda i: len(encoded[i]))
    out = [""] * len(lines)
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        src = torch.nn.utils.rnn.pad_sequence(
            [torch.tensor(encoded[i]) for i in rows], batch_first=True,
            padding_value=c.pad_id).to(device)                                 # (B, S)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            ids = decode(src)                                                  # (B, T)
        for i, row in zip(rows, ids.tolist()):
            out[i] = tokenizer.decode(row)
    return out


# [book/12_translation.ipynb, cell 9b90b027]
class LineTooLongWarning(UserWarning):
    """A line longer than the model's ``max_len`` was cut (``on_too_long="warn"``)."""


def _report_long_line(on_too_long, number: int, n_tokens: int, max_len: int) -> None:
    message = (f"line {number}: {n_tokens} tokens, longer than the model's max_len "
               f"{max_len}")
    if on_too_long == "error":
        raise ValueError(f"{message} (on_too_long='warn' or 'truncate' cuts it)")
    if on_too_long == "warn":
        warnings.warn(f"{message}: cut to its first {max_len} tokens",
                      LineTooLongWarning, stacklevel=4)
    elif callable(on_too_long):
        on_too_long(number, n_tokens)


__all__ = ['ENGINES', 'decoding_model', 'translate_lines', 'LineTooLongWarning']
