"""Generated from book/appendix_cli.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: ef6958931f581215
# fmt: off

# [book/appendix_cli.ipynb, cell 6]
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer

from transformer_lib.checks import (check_float, check_int, check_probability,
                                    resolve_device)
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.batching import PadCollate, PairDataset, TokenBucketSampler
from transformer_lib.loss import LabelSmoothingLoss
from transformer_lib.training import (cleanup_distributed, noam_lambda,
                                      setup_distributed, train)
from transformer_lib.corpus import read_parallel
from transformer_lib.tokenizer import BPETokenizer, encode_pairs
from transformer_lib.translate import (CHECKPOINT_FILE, CONFIG_FILE, PRECISIONS,
                                       ModelDirError, load_config_and_tokenizer,
                                       load_model_dir, save_config_and_tokenizer,
                                       save_model_dir, translate_lines)


class _HelpFormatter(argparse.HelpFormatter):
    """Adds "(default: ...)" to an option's help, unless the default is None/False
    or the help gives it."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if action.option_strings and default is not None and default is not False \
                and default != argparse.SUPPRESS and "default" not in text:
            text += " (default: %(default)s)"
        return text


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad option gives one line on stderr, not the whole usage."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _number(kind, check, **limits):
    """An argparse type: text -> ``kind``, checked by one of the shared checks."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            message = f"expected {kind.__name__}, got {text!r}"
            raise argparse.ArgumentTypeError(message) from None
        try:
            return kind(check(value, "the value", **limits))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parse.__name__ = kind.__name__
    return parse


_count = _number(int, check_int)                                   # an int >= 1
_positive = _number(float, check_float, low=0.0, low_open=True)    # a float > 0
_rate = _number(float, check_probability, one=False)               # a float in [0, 1)


# [book/appendix_cli.ipynb, cell 8]
def _add_train_parser(sub) -> None:
    t = sub.add_parser(
        "train", formatter_class=_HelpFormatter, help="train a model on a corpus",
        description="Train a model on a parallel corpus (a TSV file 'source<TAB>"
        "target', or two line-aligned files) and write a model directory: config.json, "
        "tokenizer.json, model.safetensors, and checkpoint.pt to resume from. Under "
        "torchrun every process trains on its share of the batches (DDP).")
    add = t.add_argument_group("data").add_argument
    add("--train", nargs="+", required=True, metavar="FILE",
        help="training corpus: one TSV file, or a source file and a target file")
    add("--valid", nargs="+", metavar="FILE", help="validation corpus, like --train")
    add("--out", required=True, metavar="DIR", help="the model directory to write")
    add("--vocab-size", type=_count, default=8000, help="shared BPE vocabulary")
    add("--resume", action="store_true",
        help="continue the run saved in --out (its config and tokenizer are kept)")
    add = t.add_argument_group("model size").add_argument
    add("--d-model", type=_count, default=512, help="model width d_model")
    add("--n-heads", type=_count, default=8, help="heads (divide d_model)")
    add("--layers", type=_count, default=6, help="encoder layers and decoder layers")
    add("--d-ff", type=_count, default=2048, help="feed-forward inner width")
    add("--dropout", type=_rate, default=0.1, help="dropout rate")
    add("--norm-first", action="store_true", help="Pre-Norm, not the paper's Post-Norm")
    add("--max-len", type=_count, default=256, help="longest sequence (tokens)")
    opt = t.add_argument_group("optimisation")
    length = opt.add_mutually_exclusive_group()
    length.add_argument("--steps", type=_count, default=None,
                        help="optimizer updates in all, a resumed run's included "
                        "(default 10000)")
    length.add_argument("--epochs", type=_positive, help="passes over the data instead")
    add = opt.add_argument
    add("--batch-tokens", type=_count, default=4096, help="padded tokens per batch")
    add("--warmup", type=_count, default=4000, help="warm-up steps of the Noam rate")
    add("--lr-factor", type=_positive, default=1.0, help="scale of the Noam rate")
    add("--label-smoothing", type=_rate, default=0.1, help="label smoothing epsilon")
    add("--clip-norm", type=_positive, default=1.0, help="gradient-norm clipping")
    add = t.add_argument_group("running").add_argument
    add("--device", default="auto", help="'auto' (cuda when present), 'cpu', 'cuda', "
        "'cuda:1', ...; under torchrun: auto, cuda (the GPU of LOCAL_RANK) or cpu")
    add("--precision", choices=sorted(PRECISIONS), default="fp32",
        help="fp32, or autocast to bf16 or fp16 (fp16 with a gradient scaler)")
    add("--seed", type=int, default=0, help="seed of the weights and batches")
    add("--val-every", type=int, default=1000, help="validation interval (0: end)")
    add("--checkpoint-every", type=int, default=1000,
        help="write checkpoint.pt every N steps (and always at the end)")
    add("--threads", type=_count, help="CPU threads (default: PyTorch's choice)")
    add("--no-progress", action="store_true", help="no progress bar")
    t.set_defaults(func=run_train)


# [book/appendix_cli.ipynb, cell 10]
def _add_translate_parser(sub) -> None:
    r = sub.add_parser(
        "translate", formatter_class=_HelpFormatter, help="translate with a model",
        description="Translate sentences, one per line, from files or standard input; "
        "write one translation per line to standard output (or --output).")
    add = r.add_argument
    add("inputs", nargs="*", metavar="FILE", help="input files ('-' or none: stdin)")
    add("--model", required=True, metavar="DIR", help="a model directory from 'train'")
    add("--output", metavar="FILE", help="write here instead of standard output")
    how = r.add_mutually_exclusive_group()
    how.add_argument("--beam", type=_count, default=1, help="beam size (1: greedy)")
    how.add_argument("--sample", action="store_true", help="sample, do not search")
    add("--length-penalty", type=float, default=0.6, help="beam search length penalty")
    add("--temperature", type=_positive, default=1.0, help="sampling temperature")
    add("--top-k", type=int, default=0, help="sample from the k likeliest (0: all)")
    add("--top-p", type=_positive, default=1.0, help="nucleus sampling, in (0, 1]")
    add("--seed", type=int, default=0, help="seed of the sampling")
    add("--batch-size", type=_count, default=64, help="sentences decoded together")
    add("--max-len", type=_count, help="longest translation (default: 2 x source + 10)")
    add("--device", default="auto", help="'auto' (cuda if present), 'cpu', 'cuda', ...")
    add("--precision", choices=sorted(PRECISIONS), default="fp32",
        help="fp32, or autocast to bf16/fp16")
    add("--threads", type=_count, help="CPU threads (default: PyTorch's choice)")
    r.set_defaults(func=run_translate)


def build_parser(prog: str = "transformer-lib") -> argparse.ArgumentParser:
    """The parser of both subcommands (``train`` and ``translate``)."""
    parser = _Parser(prog=prog, formatter_class=_HelpFormatter, description="Train an "
                     "encoder-decoder Transformer on a parallel corpus, and translate.")
    sub = parser.add_subparsers(dest="command", required=True,
                                metavar="{train,translate}", parser_class=_Parser)
    _add_train_parser(sub)
    _add_translate_parser(sub)
    return parser


# [book/appendix_cli.ipynb, cell 12]
def _device(name: str) -> torch.device:
    try:
        return resolve_device(name)
    except ValueError as exc:
        raise ValueError(f"--device: {exc}") from None


def _start(name: str, threads: int | None) -> tuple[int, int, torch.device]:
    """(rank, world size, device). Under torchrun, join the process group (chapter 10's
    ``setup_distributed``): each process takes the GPU of its LOCAL_RANK, or the CPU
    (gloo) with ``--device cpu``. Otherwise one process on ``--device``."""
    if threads:
        torch.set_num_threads(threads)
    rank, world, device = setup_distributed("gloo" if name == "cpu" else None)
    if not torch.distributed.is_initialized():           # not started by torchrun
        return 0, 1, _device(name)
    if name not in ("auto", "cpu", "cuda"):
        raise ValueError(f"--device: under torchrun each process takes the GPU of its "
                         f"LOCAL_RANK; pass auto, cuda or cpu, got {name!r}")
    if name == "cuda" and device.type != "cuda":
        raise ValueError("--device cuda: CUDA is not available on this machine")
    return rank, world, torch.device("cpu") if name == "cpu" else device


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _loader(encoded, batch_tokens: int, seed: int, shuffle: bool = True):
    """Token buckets (chapter 10); under torchrun each rank gets its share."""
    dataset = PairDataset(encoded)
    sampler = TokenBucketSampler(dataset.lengths, batch_tokens, shuffle=shuffle,
                                 seed=seed)
    return torch.utils.data.DataLoader(dataset, batch_sampler=sampler,
                                       collate_fn=PadCollate())


# [book/appendix_cli.ipynb, cell 14]
def _model_setup(args, pairs, rank: int, world: int
                 ) -> tuple[TransformerConfig, BPETokenizer]:
    """Rank 0 decides the configuration and the tokenizer (read from ``--out`` on
    ``--resume``, else trained) and writes them; under torchrun it sends them to the
    other processes, so that only rank 0 needs ``--out``'s files and all agree."""
    if rank == 0:
        if args.resume:
            config, tokenizer = load_config_and_tokenizer(args.out)
        else:
            texts = [s for s, _ in pairs] + [t for _, t in pairs]
            tokenizer = BPETokenizer.train(texts, vocab_size=max(args.vocab_size, 260))
            v = tokenizer.vocab_size
            config = TransformerConfig(
                v, v, d_model=args.d_model, n_heads=args.n_heads, d_ff=args.d_ff,
                n_encoder_layers=args.layers, n_decoder_layers=args.layers,
                dropout=args.dropout, norm_first=args.norm_first, max_len=args.max_len,
                share_embeddings=True)
    if world > 1:
        # every process has checked --out before rank 0 writes to it
        torch.distributed.barrier()
        box: list = [None]
        if rank == 0:
            box = [(config.to_dict(), tokenizer.tokenizer.to_str())]
        torch.distributed.broadcast_object_list(box, src=0)
        if rank != 0:
            config_dict, tokenizer_json = box[0]
            config = TransformerConfig.from_dict(config_dict)
            tokenizer = BPETokenizer(Tokenizer.from_str(tokenizer_json))
    if rank == 0 and not args.resume:
        save_config_and_tokenizer(args.out, config, tokenizer)
    return config, tokenizer


# [book/appendix_cli.ipynb, cell 16]
def run_train(args) -> int:
    """``train``: read the corpus, train (or load) the tokenizer, train the model, write
    the directory. Under torchrun every process runs it; rank 0 alone writes files."""
    try:
        rank, world, device = _start(args.device, args.threads)
        return _train(args, rank, world, device)
    finally:
        cleanup_distributed()


def _train(args, rank: int, world: int, device: torch.device) -> int:
    out, say = Path(args.out), _log if rank == 0 else (lambda message: None)
    checkpoint = out / CHECKPOINT_FILE
    if len(args.train) > 2 or (args.valid and len(args.valid) > 2):
        raise ValueError("--train and --valid take one TSV file or two aligned files")
    if args.resume and not checkpoint.is_file():
        raise ModelDirError(f"{out}: nothing to resume (no {CHECKPOINT_FILE})")
    if not args.resume and ((out / CONFIG_FILE).exists() or checkpoint.exists()):
        raise ModelDirError(f"{out} already holds a model: pass --resume to continue "
                            "it, or choose another --out")
    train_pairs = read_parallel(*args.train)
    valid_pairs = read_parallel(*args.valid) if args.valid else None
    config, tokenizer = _model_setup(args, train_pairs, rank, world)
    encoded, skipped = encode_pairs(train_pairs, tokenizer, config.max_len)
    if not encoded:
        raise ValueError(f"no training pair fits --max-len {config.max_len}")
    if skipped:
        say(f"skipped {skipped} training pairs longer than {config.max_len} tokens")
    torch.manual_seed(args.seed)             # the same initial model in every process
    model = Transformer(config).to(device)
    if world > 1:
        torch.manual_seed(args.seed + rank)       # ... and its own dropout in each
    loader = _loader(encoded, args.batch_tokens, args.seed)
    val_loader = None
    if valid_pairs:
        val_encoded, _ = encode_pairs(valid_pairs, tokenizer, config.max_len)
        if val_encoded:
            val_loader = _loader(val_encoded, args.batch_tokens, args.seed,
                                 shuffle=False)
    by_epochs = math.ceil(args.epochs * len(loader)) if args.epochs else 10000
    steps = args.steps or by_epochs
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98),
                                 eps=1e-9)
    schedule = noam_lambda(config.d_model, args.warmup, args.lr_factor)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    n_params = sum(p.numel() for p in model.parameters())
    where = f"{world} processes on {device.type}" if world > 1 else str(device)
    say(f"{len(encoded)} training pairs, vocabulary {tokenizer.vocab_size}, "
        f"{n_params:,} parameters, {steps} steps on {where}")
    loss_fn = LabelSmoothingLoss(args.label_smoothing, config.pad_id)
    history = train(model, loader, optimizer, scheduler, loss_fn, steps=steps,
                    val_loader=val_loader, val_every=args.val_every,
                    clip_norm=args.clip_norm,
                    amp=None if args.precision == "fp32" else args.precision,
                    log_every=max(1, min(50, steps)), checkpoint_path=str(checkpoint),
                    checkpoint_every=args.checkpoint_every,
                    resume_from=str(checkpoint) if args.resume else None,
                    progress=not args.no_progress)
    loss = history.loss[-1] if history.loss else None
    val_loss = history.val[-1].get("val_loss") if history.val else None
    if rank == 0:
        record = {k: v for k, v in vars(args).items() if k != "func"}
        save_model_dir(out, model.cpu(), tokenizer, args=record,
                       steps=history.last_step, loss=loss, val_loss=val_loss,
                       world_size=world)
    shown = (("train", loss), ("valid", val_loss))
    losses = "".join(f", {k} loss {v:.3f}" for k, v in shown if v is not None)
    say(f"step {history.last_step}/{steps}{losses}; {history.seconds:.1f} s; "
        f"model written to {out}")
    return 0


# [book/appendix_cli.ipynb, cell 18]
def _read_inputs(inputs) -> list[str]:
    lines: list[str] = []
    for name in inputs or ["-"]:
        if name == "-":
            lines += sys.stdin.read().splitlines()
        else:
            path = Path(name)
            if not path.is_file():
                raise FileNotFoundError(f"{path}: no such input file")
            try:
                lines += path.read_text(encoding="utf-8").splitlines()
            except UnicodeDecodeError as exc:
                raise ValueError(f"{path}: not valid UTF-8 ({exc.reason})") from None
    return lines


def run_translate(args) -> int:
    """``translate``: load the model directory, translate every input line, write one
    line each."""
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model_dir(args.model, _device(args.device))
    lines = _read_inputs(args.inputs)
    translations = translate_lines(
        model, tokenizer, lines, beam=args.beam, length_penalty=args.length_penalty,
        sampling=args.sample, temperature=args.temperature, top_k=args.top_k,
        top_p=args.top_p, seed=args.seed, batch_size=args.batch_size,
        max_len=args.max_len, precision=args.precision)
    text = "".join(t + "\n" for t in translations)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The entry point of ``python -m transformer_lib`` and of the ``transformer-lib``
    console script. Returns the exit status: 0, 1 for an error (one line on stderr), 2
    for a bad option."""
    parser = build_parser(prog or "transformer-lib")
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        _log(f"{parser.prog} {args.command}: interrupted")
        return 130
    except (ValueError, TypeError, OSError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        _log(f"{parser.prog} {args.command}: error: {message}")
        return 1


__all__ = ['build_parser', 'run_train', 'run_translate', 'main']
