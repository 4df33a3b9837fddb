"""Generated from book/appendix_cli.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 9bd8413cae8ee042
# fmt: off

# [book/appendix_cli.ipynb, cell 5b80d677]
from __future__ import annotations

import os
import sys
import unicodedata
from pathlib import Path

import torch

from transformer_lib.decoding.config import STRATEGY_SETTINGS, GenerationConfig
from transformer_lib.files import atomic_write
from transformer_lib.translation.model_dir import load_generation_config
from transformer_lib.translation.translate import translate_lines
from transformer_lib.cli.common import UsageError
from transformer_lib.cli.common import check_output, finished, log_line
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


# [book/appendix_cli.ipynb, cell f1886270]
#: the options of ``translate`` that set a GenerationConfig field of the same name
DECODING_OPTIONS = ("length_norm", "alpha", "stop", "max_len_a", "max_len_b",
                    "temperature", "top_k", "top_p", "seed")
_WHERE = {"beam": "beam search (--beam-size K > 1, or a model directory whose "
          "generation.json says beam)", "sample": "--sample"}


def generation_config(args) -> GenerationConfig:
    """The decoding settings of ``translate``: the model directory's defaults (its
    generation.json, else the library's), with the options given in their place
    (``--sample``, ``--beam-size K``: the strategy). An option the decoder would ignore
    is a usage error, as is ``--max-len`` with ``--max-len-a``/``-b``."""
    config = load_generation_config(args.model)
    given = {name: getattr(args, name) for name in DECODING_OPTIONS
             if getattr(args, name) is not None}
    strategy = config.strategy
    if args.sample:
        strategy = "sample"
    elif args.beam_size is not None:
        strategy = "beam" if args.beam_size > 1 else "greedy"
        if args.beam_size > 1:
            given["beam_size"] = args.beam_size
    if args.max_len is not None:
        if {"max_len_a", "max_len_b"} & given.keys():
            raise UsageError("--max-len: one fixed limit, not with --max-len-a or "
                             "--max-len-b")
        given.update(max_len_a=0.0, max_len_b=args.max_len)
    for name in given:
        owner = next((s for s, names in STRATEGY_SETTINGS.items() if name in names),
                     strategy)
        if owner != strategy:
            option = "--alpha/--length-penalty" if name == "alpha" else \
                f"--{name.replace('_', '-')}"
            raise UsageError(f"{option}: only with {_WHERE[owner]} (without it, "
                             "ignored)")
    return config.replace(strategy=strategy, **given)


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
    generation = generation_config(args)
    if not args.output and sys.stdout is None:       # started with >&-
        raise ValueError("standard output is closed: pass --output FILE")
    if args.output:                 # never over an input file or the model's files
        check_output("--output", Path(args.output),
                     reads=[name for name in args.inputs or [] if name != "-"],
                     folders=[args.model])
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
        translations = translate_engine(engine, texts, generation, args.batch_size,
                                        hook)
    else:
        precision = "fp32" if args.precision == "int8" else args.precision
        translations = translate_lines(
            model, tokenizer, texts, generation, batch_size=args.batch_size,
            precision=precision, engine="torch", on_too_long=hook)  # chosen above
    text = "".join(_one_line(t) + "\n" for t in translations)
    if args.output:
        _write_output(Path(args.output), text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    finished()                   # every translation is out: nothing left to stop
    return 0



def _write_output(path: Path, text: str) -> None:
    """``--output``: a file is replaced atomically (a failed or interrupted write
    leaves the old one whole; a link's target is written, the link kept); a device
    or a pipe (``/dev/stdout``) is written as it is."""
    target = Path(os.path.realpath(path))
    try:
        if target.exists() and not target.is_file():
            target.write_text(text, encoding="utf-8")
        else:
            atomic_write(target, text)
    except OSError as exc:
        reason = exc.strerror or " ".join(str(exc).split())
        raise OSError(f"--output {path}: cannot write ({reason})") from None


def _one_line(text: str) -> str:
    """``text`` with every control character and line or paragraph separator (a
    newline, a carriage return, a tab, U+2028...) made a space: one input line gives
    exactly one output line, whatever the model wrote."""
    return "".join(" " if unicodedata.category(ch) in ("Cc", "Zl", "Zp") else ch
                   for ch in text)


__all__ = ['DECODING_OPTIONS', 'generation_config', 'run_translate']
