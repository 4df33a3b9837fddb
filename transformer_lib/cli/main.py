"""Generated from book/appendix_cli.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 6b79076c5158b2b3
# fmt: off

# [book/appendix_cli.ipynb, cell c1ea5234]
from __future__ import annotations

import argparse
import json
import os
import signal
import time

from transformer_lib.checks import check_float, check_int, check_probability
from transformer_lib.decoding.config import LENGTH_NORMS, STOP_RULES
from transformer_lib.precision import PRECISIONS
from transformer_lib.cli.common import DECODER_DEFAULTS, MIN_VOCAB, MODEL_DEFAULTS
from transformer_lib.cli.common import Interrupted, OneLineParser, number_option
from transformer_lib.cli.common import UsageError, interrupted, log_line
from transformer_lib.cli.common import finished, take_signals
from transformer_lib.cli.average import run_average
from transformer_lib.cli.serve import run_export_ctranslate2
from transformer_lib.cli.train import run_train
from transformer_lib.cli.translate import run_translate


class _HelpFormatter(argparse.HelpFormatter):
    """Adds "(default: ...)" to an option's help, unless the default is None/False
    or the help gives it; the default of an option that has none in argparse comes
    from MODEL_DEFAULTS (train) or DECODER_DEFAULTS (translate)."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if default is None:
            default = MODEL_DEFAULTS.get(action.dest, DECODER_DEFAULTS.get(action.dest))
        if action.option_strings and default is not None and default is not False \
                and default != argparse.SUPPRESS and "default" not in text:
            text += f" (default: {default})"
        return text


_count = number_option(int, check_int)  # an int >= 1
_count0 = number_option(int, check_int, minimum=0)  # an int >= 0
_vocab = number_option(int, check_int, minimum=MIN_VOCAB)  # an int >= 260
_positive = number_option(float, check_float, low=0.0, low_open=True)  # a float > 0
_real = number_option(float, check_float)  # a finite float
_factor = number_option(float, check_float, low=0.0)  # a finite float >= 0
_rate = number_option(float, check_probability, one=False)  # a float in [0, 1)
_mass = number_option(float, check_probability, zero=False)  # a float in (0, 1]


# [book/appendix_cli.ipynb, cell e03777c1]
def _add_train_parser(sub) -> None:
    t = sub.add_parser(
        "train", formatter_class=_HelpFormatter, help="train a model on a corpus",
        description="Train a model on a parallel corpus (a TSV file 'source<TAB>"
        "target', or two line-aligned files) and write a model directory: config.json, "
        "tokenizer.json, model.safetensors, and checkpoint.pt to resume from (written "
        "at the start, every --checkpoint-every steps, at the end, and on Ctrl-C or "
        "SIGTERM). Under torchrun every process trains on its share of the batches.")
    add = t.add_argument_group("data").add_argument
    add("--train", nargs="+", required=True, metavar="FILE",
        help="training corpus: one TSV file, or a source file and a target file")
    add("--valid", nargs="+", metavar="FILE", help="validation corpus, like --train")
    add("--out", required=True, metavar="DIR", help="the model directory to write")
    add("--vocab-size", type=_vocab, help=f"shared BPE vocabulary, >= {MIN_VOCAB}")
    add("--resume", action="store_true",
        help="continue the run saved in --out (its config and tokenizer are kept)")
    add("--force", action="store_true", help="start a new run in an --out that holds "
        "files (a model's files there are replaced)")
    add = t.add_argument_group("model size (fixed by the run: not with --resume)"
                               ).add_argument
    add("--d-model", type=_count, help="model width d_model")
    add("--n-heads", type=_count, help="heads (divide d_model)")
    add("--layers", type=_count, help="encoder layers and decoder layers")
    add("--d-ff", type=_count, help="feed-forward inner width")
    add("--dropout", type=_rate, help="dropout rate")
    add("--norm-first", action="store_true", help="Pre-Norm, not the paper's Post-Norm")
    add("--max-len", type=_count, help="longest sentence in tokens: longer training "
        "pairs are skipped and counted")
    opt = t.add_argument_group("optimisation")
    length = opt.add_mutually_exclusive_group()
    length.add_argument("--steps", type=_count, default=None,
                        help="optimizer updates in all, a resumed run's included "
                        "(default 10000)")
    length.add_argument("--epochs", type=_positive, help="passes over the data instead")
    add = opt.add_argument
    add("--batch-tokens", type=_count, default=4096,
        help="padded tokens per batch (a resumed run must keep it)")
    add("--accum-steps", type=_count, default=1,
        help="batches per optimizer update: their gradients are summed and divided "
        "by their target tokens (a resumed run must keep it)")
    add("--warmup", type=_count, help="warm-up steps of the Noam rate (default: "
        "min(4000, steps // 4); a resumed run keeps its run's)")
    add("--lr-factor", type=_positive, default=1.0, help="scale of the Noam rate")
    add("--label-smoothing", type=_rate, default=0.1, help="label smoothing epsilon")
    add("--clip-norm", type=_positive, default=1.0, help="gradient-norm clipping")
    add = t.add_argument_group("running").add_argument
    add("--device", default="auto", help="'auto' (cuda when present), 'cpu', 'cuda', "
        "'cuda:1', ...; under torchrun: auto, cuda (the GPU of LOCAL_RANK) or cpu")
    add("--precision", choices=sorted(PRECISIONS), default="fp32",
        help="fp32, or autocast to bf16 or fp16 (fp16 with a gradient scaler)")
    add("--seed", type=int, default=0,
        help="seed of the weights and batches (a resumed run must keep it)")
    add("--val-every", type=_count0, default=1000, help="validation interval (0: end)")
    add("--checkpoint-every", type=_count0, default=1000,
        help="write checkpoint.pt every N steps (0: only at the start and the end)")
    add("--keep-checkpoints", type=_count0, metavar="N", help="also keep copies of "
        "the last N of those checkpoints in checkpoints/, for 'average --last N' "
        "(default: 0; a resumed run keeps its run's)")
    add("--threads", type=_count, help="CPU threads (default: PyTorch's choice)")
    add("--no-progress", action="store_true",
        help="a log line every tenth of the run instead of a progress bar")
    t.set_defaults(func=run_train)


# [book/appendix_cli.ipynb, cell 65c7ea3c]
def _add_translate_parser(sub) -> None:
    r = sub.add_parser(
        "translate", formatter_class=_HelpFormatter, help="translate with a model",
        description="Translate sentences, one per line, from files or standard input; "
        "write one translation per line to standard output (or --output).")
    add = r.add_argument
    add("inputs", nargs="*", metavar="FILE", help="input files ('-' or none: stdin)")
    add("--model", required=True, metavar="DIR", help="a model directory from 'train' "
        "(--engine ctranslate2: a directory from 'export-ctranslate2')")
    add("--engine", choices=["auto", "torch", "packed", "ctranslate2"],
        default="auto", help="the book's decoders on weights packed for the CPU, "
        "which apply every rule below (the same outputs as torch up to near ties: the "
        "serving appendix); the book's decoders on the model as it is; auto: packed "
        "on the CPU, torch on a GPU; or CTranslate2, on the CPU: greedy, or beam "
        "search with --length-norm power (or none) and --stop first_k only, its own "
        "rules (others are refused)")
    add("--output", metavar="FILE", help="write here instead of standard output")
    add("--truncate", action="store_true", help="translate the first max_len tokens "
        "of a longer line (default: such a line is an error)")
    model_s = "default: the model directory's generation.json, else"
    d = DECODER_DEFAULTS
    how = r.add_mutually_exclusive_group()
    how.add_argument("--beam-size", "--beam", type=_count, dest="beam_size",
                     help="K > 1: beam search of K beams; 1: greedy decoding "
                     f"({model_s} greedy; --beam is its older name)")
    how.add_argument("--sample", action="store_true", help="sample, do not search")
    add("--length-norm", choices=LENGTH_NORMS, help="beam search ranks log p / ((5 + "
        "n) / 6) ** alpha (gnmt, the paper's), log p / n ** alpha (power: Hugging "
        "Face's, CTranslate2's, Marian's) or log p (none), n the tokens with eos "
        f"({model_s} {d['length_norm']})")
    add("--alpha", "--length-penalty", type=_real, dest="alpha",
        help=f"the alpha of --length-norm ({model_s} {d['alpha']}; --length-penalty "
        "is its older name)")
    add("--stop", choices=STOP_RULES, help="beam search ends a sentence once it has K "
        "finished hypotheses and its best live beam cannot beat the worst (book: "
        "Hugging Face's early_stopping=False), or at K finished (first_k: "
        "CTranslate2's, fairseq's, early_stopping=True) "
        f"({model_s} {d['stop']})")
    add("--max-len-a", type=_factor, help="the output limit a·S + b for a source of "
        f"S tokens, at most the model's max_len: a ({model_s} {d['max_len_a']})")
    add("--max-len-b", type=_count0, help=f"the b of --max-len-a ({model_s} "
        f"{d['max_len_b']})")
    add("--temperature", type=_positive,
        help="sampling temperature, only with --sample")
    add("--top-k", type=_count0,
        help="sample from the k likeliest (0: all), only with --sample")
    add("--top-p", type=_mass, help="nucleus sampling, in (0, 1], only with --sample")
    add("--seed", type=int, help="seed of the sampling, only with --sample")
    add("--batch-size", type=_count, default=64, help="sentences decoded together")
    add("--max-len", type=_count, help="one limit for every line, at most the model's "
        "max_len: --max-len-a 0 --max-len-b N (default: a·S + b)")
    add("--device", default="auto", help="'auto' (cuda if present), 'cpu', 'cuda', ...")
    add("--precision", choices=[*sorted(PRECISIONS), "int8"], default="fp32",
        help="fp32, autocast to bf16/fp16, or int8 linear layers (CPU only; packed: "
        "int8 weights, one scale per row)")
    add("--threads", type=_count, help="CPU threads (default: PyTorch's choice)")
    r.set_defaults(func=run_translate)


# [book/appendix_cli.ipynb, cell 552421a4]
def run_convert_marian(args) -> int:
    """``convert-marian``: :func:`transformer_lib.marian.convert_marian` (imported here:
    it needs ``transformers``, which nothing else in the tool does)."""
    from transformer_lib.marian import convert_marian
    out = convert_marian(args.src, args.out)
    finished()                   # the model directory is complete
    log_line(f"wrote {out}")
    return 0


def _add_export_parser(sub) -> None:
    e = sub.add_parser(
        "export-ctranslate2", formatter_class=_HelpFormatter,
        help="export a model for CTranslate2", description="Write a model directory "
        "from 'train' or 'convert-marian' as a CTranslate2 model directory, for "
        "'translate --engine ctranslate2' (pip install 'transformer_lib[serve]').")
    e.add_argument("model", metavar="MODEL_DIR", help="the model directory")
    e.add_argument("--out", required=True, metavar="DIR", help="a new directory")
    e.add_argument("--quantization", choices=["int8"], help="store int8 weights")
    e.set_defaults(func=run_export_ctranslate2)


def _add_convert_parser(sub) -> None:
    c = sub.add_parser(
        "convert-marian", formatter_class=_HelpFormatter,
        help="convert a Marian (opus-mt) model", description="Convert a Marian model "
        "directory (as transformers' save_pretrained writes it) to a model directory.")
    c.add_argument("src", metavar="SRC_DIR", help="the Marian model directory")
    c.add_argument("--out", required=True, metavar="DIR", help="a new model directory")
    c.set_defaults(func=run_convert_marian)


# [book/appendix_cli.ipynb, cell d959b5aa]
def _add_average_parser(sub) -> None:
    a = sub.add_parser(
        "average", formatter_class=_HelpFormatter,
        help="average checkpoints into a model directory",
        description="Average the weights of several checkpoints of one model (model "
        "directories, checkpoint files, or with --last N the last N checkpoints that "
        "'train --keep-checkpoints' kept) and write a model directory that 'translate' "
        "reads: config.json, tokenizer.json, model.safetensors, and averaged.json, "
        "which names each input and its step.")
    add = a.add_argument
    add("inputs", nargs="+", metavar="INPUT", help="model directories or checkpoint "
        "files (checkpoint.pt, checkpoints/step-NNNNNN.pt); with --last, one run")
    add("--last", type=_count, metavar="N",
        help="average the last N checkpoints kept by the run INPUT")
    add("--out", required=True, metavar="DIR", help="the model directory to write")
    add("--force", action="store_true", help="write into an --out that holds files "
        "(a model's files there are replaced)")
    add("--allow-mixed", action="store_true", help="average checkpoints of different "
        "runs (refused by default: their weights are not aligned)")
    a.set_defaults(func=run_average)


def build_parser(prog: str = "transformer-lib") -> argparse.ArgumentParser:
    """The parser of the subcommands (``train``, ``translate``, ``average``,
    ``convert-marian``, ``export-ctranslate2``)."""
    parser = OneLineParser(
        prog=prog, formatter_class=_HelpFormatter, description="Train an "
        "encoder-decoder Transformer on a parallel corpus, and translate.")
    commands = "{train,translate,average,convert-marian,export-ctranslate2}"
    sub = parser.add_subparsers(dest="command", required=True, metavar=commands,
                                parser_class=OneLineParser)
    _add_train_parser(sub)
    _add_translate_parser(sub)
    _add_average_parser(sub)
    _add_convert_parser(sub)
    _add_export_parser(sub)
    return parser


# [book/appendix_cli.ipynb, cell cli-main]
def main(argv: list[str] | None = None, prog: str | None = None, *,
         restore_signals: bool = True) -> int:
    """The entry point of ``python -m transformer_lib`` and of the ``transformer-lib``
    console script. Returns the exit status: 0; 2 for a bad option or options that do
    not fit together; 1 for another error; 130 after Ctrl-C, 143 after SIGTERM. An
    error is one line on stderr, never a traceback; under torchrun rank 0 alone prints
    it, and each process leaves it in its torchrun error record. Once the command's
    output is complete (``finished``), a Ctrl-C or SIGTERM is ignored; the handlers
    are put back on return (``restore_signals=False``: left, for the console script,
    which exits)."""
    parser = build_parser(prog or "transformer-lib")
    args = parser.parse_args(argv)
    where = f"{parser.prog} {args.command}"
    saved = take_signals()                # SIGTERM as Ctrl-C, for this command
    try:
        return args.func(args)
    except Interrupted as exc:
        _forget_unhandled_interrupt()
        return _report(f"{where}: {exc}", exc.status)
    except KeyboardInterrupt as exc:            # Ctrl-C or SIGTERM (Terminated)
        _forget_unhandled_interrupt()
        stopped = interrupted(exc)
        return _report(f"{where}: {stopped}", stopped.status)
    except UsageError as exc:
        return _report(f"{where}: error: {exc} (see --help)", 2)
    except (ValueError, TypeError, OSError, RuntimeError, MemoryError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        return _report(f"{where}: error: {message}", 1)
    except Exception as exc:                 # a bug: still one line, with its type
        message = " ".join(str(exc).split())
        return _report(f"{where}: error: {type(exc).__name__} {message}".rstrip(), 1)
    finally:
        for sig, handler in saved.items():
            if restore_signals and handler is not None:
                signal.signal(sig, handler)


def _forget_unhandled_interrupt() -> None:
    """Keep the exit status we return after a Ctrl-C. CPython notes a KeyboardInterrupt
    that escapes code run from a string by ``exec`` (dataclasses build their methods so,
    and a Ctrl-C during an import can land there); at exit it then kills the process
    with SIGINT, whatever status ``main`` returned. Code run from a string that ends
    normally clears that note."""
    exec("pass")


def _report(line: str, status: int) -> int:
    """Print ``line`` (on rank 0 only, under torchrun: every process meets the same
    error) and, under torchrun, write it as the process's error record, which
    torchrun's failure report then shows instead of "To enable traceback see ..."."""
    if os.environ.get("RANK", "0") == "0":
        log_line(line)
    record = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if record:
        info = {"py_callstack": line, "timestamp": str(int(time.time()))}
        try:
            with open(record, "w", encoding="utf-8") as f:
                json.dump({"message": {"message": line, "extraInfo": info}}, f)
        except OSError:
            pass                              # the line above was the error itself
    return status


__all__ = ['run_convert_marian', 'build_parser', 'main']
