"""Generated from book/appendix_cli.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: f4d231c755855a33
# fmt: off

# [book/appendix_cli.ipynb, cell 5b80d677]
from __future__ import annotations

import sys
import unicodedata
from pathlib import Path

import torch

from transformer_lib.translation.translate import translate_lines
from transformer_lib.cli.common import DECODER_DEFAULTS, UsageError
from transformer_lib.cli.common import log_line
from transformer_lib.cli.serve import load_engine, torch_model, translate_engine


def _read_inputs(inputs) -> list[tuple[str, int, str]]:
    """(where, line number, text) of every input line; a file that is not UTF-8,
    standard input included, is an error naming it and the line."""
    lines: list[tuple[str, int, str]] = []
    for name in inputs or ["-"]:
        if name == "-":
            where, stream = "<stdin>", sys.stdin
            buffer = getattr(stream, "buffer", None)
            data = buffer.read() if buffer is not None else stream.read()
        else:
            path, where = Path(name), name
            if not path.is_file():
                raise FileNotFoundError(f"{path}: no such input file")
            data = path.read_bytes()
        if isinstance(data, bytes):
            raw = data
            try:
                data = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                line = raw[:exc.start].count(b"\n") + 1
                raise ValueError(f"{where}:{line}: not valid UTF-8 ({exc.reason}, byte "
                                 f"{raw[exc.start]:#04x})") from None
        texts = data.split("\n")                   # numbered as editors number lines
        if texts[-1] == "":
            texts.pop()
        lines += [(where, i, text.removesuffix("\r"))
                  for i, text in enumerate(texts, 1)]
    return lines


def _sampling_options(args) -> dict:
    """The decoder's options that were given (the others keep translate_lines'
    defaults); one given for another decoder is a usage error."""
    given = {name: getattr(args, name) for name in DECODER_DEFAULTS
             if getattr(args, name) is not None}
    unused = [f"--{name.replace('_', '-')}" for name in given
              if name != "length_penalty"]
    if unused and not args.sample:
        raise UsageError(f"{', '.join(unused)}: only with --sample (without it, "
                         "ignored)")
    if "length_penalty" in given and args.beam == 1:
        raise UsageError("--length-penalty: only with --beam K > 1 (without it, "
                         "ignored)")
    return given


# [book/appendix_cli.ipynb, cell ddf2c589]
def _long_line_hook(lines, max_len: int, truncate: bool, say):
    """translate_lines' ``on_too_long``: a line of more than the model's ``max_len``
    tokens is an error naming its file and line, or with ``--truncate`` a warning
    (``translate_lines`` then translates its first ``max_len`` tokens)."""
    def on_too_long(number: int, n_tokens: int) -> None:
        where, i, _ = lines[number - 1]
        if not truncate:
            raise ValueError(f"{where}:{i}: {n_tokens} tokens, more than the model's "
                             f"max_len {max_len}; split it, or pass --truncate")
        say(f"warning: {where}:{i}: {n_tokens} tokens, only the first {max_len} "
            "translated")
    return on_too_long


def run_translate(args) -> int:
    """``translate``: load the model directory (or, with ``--engine ctranslate2``, the
    export), translate every input line, write one line each."""
    options = _sampling_options(args)
    if not args.output and sys.stdout is None:       # started with >&-
        raise ValueError("standard output is closed: pass --output FILE")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.engine == "ctranslate2":
        engine = load_engine(args)
        config, tokenizer = engine.config, engine.tokenizer
    else:
        model, tokenizer = torch_model(args)
        config = model.config
    limit = config.max_len
    if args.max_len is not None and args.max_len > limit:
        raise UsageError(f"--max-len {args.max_len}: the model in {args.model} "
                         f"handles at most {limit} tokens")
    lines = _read_inputs(args.inputs)
    texts = [text for _, _, text in lines]
    hook = _long_line_hook(lines, limit, args.truncate, log_line)
    if args.engine == "ctranslate2":
        translations = translate_engine(engine, texts, args.beam, args.batch_size,
                                        args.max_len, hook, **options)
    else:
        precision = "fp32" if args.precision == "int8" else args.precision
        translations = translate_lines(
            model, tokenizer, texts, beam=args.beam, sampling=args.sample,
            batch_size=args.batch_size, max_len=args.max_len, precision=precision,
            on_too_long=hook, **options)
    text = "".join(_one_line(t) + "\n" for t in translations)
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise OSError(f"--output {args.output}: cannot write ({reason})") from None
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0



def _one_line(text: str) -> str:
    """``text`` with every control character and line or paragraph separator (a
    newline, a carriage return, a tab, U+2028...) made a space: one input line gives
    exactly one output line, whatever the model wrote."""
    return "".join(" " if unicodedata.category(ch) in ("Cc", "Zl", "Zp") else ch
                   for ch in text)


__all__ = ['run_translate']
