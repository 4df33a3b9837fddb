"""Generated from book/appendix_cli.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: c8893ef189e7db71
# fmt: off

# [book/appendix_cli.ipynb, cell 3c9611f9]
from __future__ import annotations

from pathlib import Path

import torch

from transformer_lib.packed import PackedDecoder
from transformer_lib.serving import (CTranslate2Model, ctranslate2_refusal,
                                      export_ctranslate2, quantize_int8)
from transformer_lib.decoding.beam import check_beam_size
from transformer_lib.decoding.config import GenerationConfig
from transformer_lib.translation.model_dir import GENERATION_FILE, load_model_dir
from transformer_lib.translation.model_dir import load_generation_config
from transformer_lib.translation.model_dir import save_generation_config
from transformer_lib.translation.translate import translate_with
from transformer_lib.cli.common import UsageError, check_output, refuse_link
from transformer_lib.cli.common import device_option, finished, log_line


def _need_ctranslate2(option: str) -> None:
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise RuntimeError(f"{option}: ctranslate2 is not installed: pip install "
                           "'transformer_lib[serve]'") from None


def run_export_ctranslate2(args) -> int:
    """``export-ctranslate2``: the model directory as a CTranslate2 model directory,
    with the model's decoding defaults (its generation.json, checked) beside it."""
    out = Path(args.out)
    refuse_link("--out", out)
    check_output("--out", out, folders=[args.model])
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--out {out}: exists and is not empty (choose a new "
                         "directory)")
    _need_ctranslate2("export-ctranslate2")
    model, tokenizer = load_model_dir(args.model, "cpu")
    generation = None
    if (Path(args.model) / GENERATION_FILE).is_file():
        generation = load_generation_config(args.model)
    export_ctranslate2(model, tokenizer, out, args.quantization)
    if generation is not None:
        save_generation_config(out, generation)
    finished()                   # the export is complete: nothing left to stop
    log_line(f"wrote {out}")
    return 0


# [book/appendix_cli.ipynb, cell 2768a585]
def load_engine(args) -> CTranslate2Model:
    """``translate --engine ctranslate2``: its options checked, the export loaded."""
    cpu = args.device in ("auto", "cpu")
    for option, given in (("--sample", args.sample),
                          (f"--precision {args.precision}", args.precision != "fp32"),
                          (f"--device {args.device}", not cpu)):
        if given:
            raise UsageError(f"{option}: not with --engine ctranslate2 (greedy or "
                             "--beam K on the CPU; int8: export with --quantization)")
    _need_ctranslate2("--engine ctranslate2")
    if not (Path(args.model) / "model.bin").is_file():
        raise ValueError(f"--model {args.model}: not a directory written by "
                         "export-ctranslate2 (no model.bin)")
    return CTranslate2Model.load(args.model, threads=args.threads or 1)


def torch_model(args):
    """``translate`` on the book's decoders: (model, tokenizer). ``--engine packed``,
    or ``auto`` on the CPU: the model in a
    :class:`~transformer_lib.packed.PackedDecoder` (with ``--precision int8``, its
    int8 weights); ``--engine torch``: the model itself, or with ``--precision
    int8`` :func:`~transformer_lib.serving.quantize_int8`'s copy of it."""
    if args.precision == "int8" and args.device not in ("auto", "cpu"):
        raise UsageError(f"--precision int8: on the CPU only, not --device "
                         f"{args.device}")
    device = "cpu" if args.precision == "int8" else device_option(args.device)
    model, tokenizer = load_model_dir(args.model, device)
    on_cpu = next(model.parameters()).device.type == "cpu"
    if args.engine == "packed" or args.engine == "auto" and on_cpu:
        precision = "int8" if args.precision == "int8" else "fp32"
        return PackedDecoder(model, precision), tokenizer
    if args.precision == "int8":
        return quantize_int8(model), tokenizer
    return model, tokenizer


#: the flag of each setting CTranslate2 may refuse, and what it takes instead
CT2_FLAGS = {"strategy": ("--sample", "greedy or --beam-size K"),
             "length_norm": ("--length-norm", "pass --length-norm power"),
             "stop": ("--stop", "pass --stop first_k")}


def check_ctranslate2(config: GenerationConfig) -> None:
    """A UsageError naming the flag whose rule CTranslate2 does not have (serving's
    ``ctranslate2_refusal``): the engine never decodes with another rule."""
    refused = ctranslate2_refusal(config)
    if refused is not None:
        field, why = refused
        flag, instead = CT2_FLAGS[field]
        value = "" if field == "strategy" else f" {getattr(config, field)}"
        raise UsageError(f"{flag}{value}: not with --engine ctranslate2 ({why}: "
                         f"{instead})")


def translate_engine(engine: CTranslate2Model, lines: list[str],
                     config: GenerationConfig, batch_size: int,
                     on_too_long) -> list[str]:
    """``lines`` translated by ``engine`` with ``config``'s settings (refused when
    CTranslate2 cannot honour them: :func:`check_ctranslate2`) through chapter 12's
    ``translate_with``, as ``translate_lines`` would: tokenised once, a line longer than
    the model's ``max_len`` tokens handed to ``on_too_long(number, n_tokens)`` then
    cut, sorted by length, decoded ``batch_size`` at a time."""
    check_ctranslate2(config)
    if config.strategy == "beam" and config.beam_size > 1:    # as translate_lines does
        check_beam_size(engine.config, config.beam_size)      # (also with no lines)

    def decode(src: torch.Tensor) -> torch.Tensor:
        return engine.decode(src, config)                                     # (B, T)
    return translate_with(engine.config, torch.device("cpu"), engine.tokenizer, lines,
                          decode, batch_size, None, on_too_long)


__all__ = ['run_export_ctranslate2']
