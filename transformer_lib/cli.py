"""Generated from book/12_translation.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: da852f31d569f300
# fmt: off

# [book/12_translation.ipynb, cell 35]
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model

from transformer_lib.data import BPETokenizer, read_parallel
from transformer_lib.decoding import beam_search, greedy_decode, sample
from transformer_lib.checks import default_device
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.training import (LabelSmoothingLoss, PadCollate, PairDataset, TokenBucketSampler,
                                      noam_lambda, train)

CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE = "config.json", "tokenizer.json", "model.safetensors"
CHECKPOINT_FILE, TRAINING_FILE = "checkpoint.pt", "training.json"


# [book/12_translation.ipynb, cell 36]
class ModelDirError(ValueError):
    """A model directory that is missing, incomplete or damaged."""


def save_model_dir(path, model: Transformer, tokenizer: BPETokenizer, **training) -> Path:
    """Write ``model`` and ``tokenizer`` to the directory ``path``: ``config.json`` (the
    :class:`~transformer_lib.model.TransformerConfig`), ``tokenizer.json`` and ``model.safetensors``
    (the weights; tied weights are stored once). Keyword arguments, if any, go to ``training.json`` as a
    record of the run."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / CONFIG_FILE).write_text(json.dumps(model.config.to_dict(), indent=2) + "\n", encoding="utf-8")
    tokenizer.save(path / TOKENIZER_FILE)
    save_model(model, str(path / WEIGHTS_FILE))
    if training:
        (path / TRAINING_FILE).write_text(json.dumps(training, indent=2) + "\n", encoding="utf-8")
    return path


def _read_config(path: Path) -> TransformerConfig:
    file = path / CONFIG_FILE
    if not file.is_file():
        raise ModelDirError(f"{path}: not a model directory (no {CONFIG_FILE})")
    try:
        return TransformerConfig.from_dict(json.loads(file.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelDirError(f"{file}: damaged ({exc})") from None
    except (TypeError, ValueError) as exc:
        raise ModelDirError(f"{file}: not a valid model configuration ({exc})") from None


def _read_tokenizer(path: Path, config: TransformerConfig) -> BPETokenizer:
    file = path / TOKENIZER_FILE
    if not file.is_file():
        raise ModelDirError(f"{path}: incomplete model directory (no {TOKENIZER_FILE})")
    try:
        tokenizer = BPETokenizer.load(file)
    except ValueError as exc:
        raise ModelDirError(str(exc)) from None
    if tokenizer.vocab_size != config.src_vocab_size or tokenizer.vocab_size != config.tgt_vocab_size:
        raise ModelDirError(f"{file}: {tokenizer.vocab_size} tokens, but {CONFIG_FILE} says "
                            f"{config.src_vocab_size} (source) and {config.tgt_vocab_size} (target)")
    return tokenizer


def load_model_dir(path, device: str | torch.device | None = None) -> tuple[Transformer, BPETokenizer]:
    """Read a directory written by :func:`save_model_dir` -> (model in eval mode on ``device``,
    tokenizer). A missing or damaged file raises :class:`ModelDirError` naming it."""
    path = Path(path)
    if not path.is_dir():
        raise ModelDirError(f"{path}: no such model directory")
    config = _read_config(path)
    tokenizer = _read_tokenizer(path, config)
    weights = path / WEIGHTS_FILE
    if not weights.is_file():
        raise ModelDirError(f"{path}: incomplete model directory (no {WEIGHTS_FILE})")
    model = Transformer(config)
    try:
        load_model(model, str(weights), strict=True)
    except (SafetensorError, RuntimeError, OSError, ValueError) as exc:
        raise ModelDirError(f"{weights}: damaged or not made for {CONFIG_FILE} "
                            f"({str(exc).splitlines()[0][:200]})") from None
    return model.to(device or default_device()).eval(), tokenizer


# [book/12_translation.ipynb, cell 38]
@torch.no_grad()
def translate_lines(model: Transformer, tokenizer: BPETokenizer, lines, *, beam: int = 1,
                    length_penalty: float = 0.6, sampling: bool = False, temperature: float = 1.0,
                    top_k: int = 0, top_p: float = 1.0, seed: int = 0, batch_size: int = 64,
                    max_len: int | None = None, precision: str = "fp32") -> list[str]:
    """Translate each string of ``lines``; one output per input, in order; an empty line gives ''.

    Lines are sorted by length and decoded ``batch_size`` at a time (``beam`` > 1: beam search;
    ``sampling``: :func:`~transformer_lib.decoding.sample`; else greedy). ``max_len``: the most target
    tokens (default: 2 × source + 10 for each sentence, at most the model's ``max_len``).
    """
    lines = list(lines)
    for name, value, low in (("beam", beam, 1), ("batch_size", batch_size, 1)):
        if not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if sampling and beam > 1:
        raise ValueError("choose beam search (beam > 1) or sampling, not both")
    if precision not in _PRECISION:
        raise ValueError(f"precision must be one of {sorted(_PRECISION)}, got {precision!r}")
    c = model.config
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed) if sampling else None
    encoded = [tokenizer.encode(line.strip())[: c.max_len] for line in lines]
    order = sorted((i for i, ids in enumerate(encoded) if ids), key=lambda i: len(encoded[i]))
    out = [""] * len(lines)
    model.eval()
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        src = torch.nn.utils.rnn.pad_sequence([torch.tensor(encoded[i]) for i in rows], batch_first=True,
                                              padding_value=c.pad_id).to(device)      # (B, S)
        limit = max_len or min(c.max_len, 2 * src.size(1) + 10)
        dtype = _PRECISION[precision]
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            if beam > 1:
                ids = beam_search(model, src, beam_size=beam, max_len=limit, length_penalty=length_penalty)
            elif sampling:
                ids = sample(model, src, max_len=limit, temperature=temperature, top_k=top_k, top_p=top_p,
                             generator=generator)
            else:
                ids = greedy_decode(model, src, max_len=limit)                         # (B, T)
        for i, row in zip(rows, ids.tolist()):
            # each sentence keeps at most its own limit, so the batch it landed in does not matter
            out[i] = tokenizer.decode(row[: 1 + (max_len or min(c.max_len, 2 * len(encoded[i]) + 10))])
    return out


# [book/12_translation.ipynb, cell 40]
_PRECISION = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


class _HelpFormatter(argparse.HelpFormatter):
    """Adds "(default: ...)" to an option's help, unless the default is None/False or the help gives it."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.option_strings and action.default is not None and action.default is not False \
                and action.default != argparse.SUPPRESS and "default" not in text:
            text += " (default: %(default)s)"
        return text


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad option gives one line on stderr, not the whole usage."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _positive(kind):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__}, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a value > 0, got {text!r}")
        return value
    parse.__name__ = f"positive {kind.__name__}"
    return parse


def _probability(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a float, got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a value in [0, 1), got {text!r}")
    return value


def build_parser(prog: str = "transformer-lib") -> argparse.ArgumentParser:
    """The parser of both subcommands (``train`` and ``translate``)."""
    fmt = _HelpFormatter
    parser = _Parser(prog=prog, description="Train an encoder-decoder Transformer on a parallel corpus and "
                     "translate with it.", formatter_class=fmt)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{train,translate}",
                                parser_class=_Parser)

    t = sub.add_parser("train", formatter_class=fmt, help="train a model on a parallel corpus",
                       description="Train a model on a parallel corpus (a TSV file 'source<TAB>target', or two "
                       "line-aligned files) and write a model directory: config.json, tokenizer.json, "
                       "model.safetensors, and checkpoint.pt to resume from.")
    data = t.add_argument_group("data")
    data.add_argument("--train", nargs="+", required=True, metavar="FILE",
                      help="training corpus: one TSV file, or a source file and a target file")
    data.add_argument("--valid", nargs="+", metavar="FILE", help="validation corpus, same form as --train")
    data.add_argument("--out", required=True, metavar="DIR", help="the model directory to write")
    data.add_argument("--vocab-size", type=_positive(int), default=8000,
                      help="BPE vocabulary size (one vocabulary shared by source and target)")
    data.add_argument("--resume", action="store_true",
                      help="continue the run saved in --out (its config and tokenizer are kept)")
    model = t.add_argument_group("model size")
    model.add_argument("--d-model", type=_positive(int), default=512, help="model width d_model")
    model.add_argument("--n-heads", type=_positive(int), default=8, help="attention heads (must divide d_model)")
    model.add_argument("--layers", type=_positive(int), default=6, help="encoder layers and decoder layers")
    model.add_argument("--d-ff", type=_positive(int), default=2048, help="inner width of the feed-forward network")
    model.add_argument("--dropout", type=_probability, default=0.1, help="dropout rate")
    model.add_argument("--norm-first", action="store_true", help="Pre-Norm instead of the paper's Post-Norm")
    model.add_argument("--max-len", type=_positive(int), default=256,
                       help="longest sequence in tokens (longer training pairs are skipped)")
    opt = t.add_argument_group("optimisation")
    length = opt.add_mutually_exclusive_group()
    length.add_argument("--steps", type=_positive(int), default=None,
                        help="total optimizer updates (default 10000; counts those of a resumed run)")
    length.add_argument("--epochs", type=_positive(float), default=None, help="train for this many passes instead")
    opt.add_argument("--batch-tokens", type=_positive(int), default=4096,
                     help="padded tokens per batch (batches group sentences of similar length)")
    opt.add_argument("--warmup", type=_positive(int), default=4000, help="warm-up steps of the Noam schedule")
    opt.add_argument("--lr-factor", type=_positive(float), default=1.0, help="scale of the Noam learning rate")
    opt.add_argument("--label-smoothing", type=_probability, default=0.1, help="label smoothing epsilon")
    opt.add_argument("--clip-norm", type=_positive(float), default=1.0, help="gradient-norm clipping threshold")
    run = t.add_argument_group("running")
    run.add_argument("--device", default="auto", help="'auto' (cuda when present), 'cpu', 'cuda', 'cuda:1', ...")
    run.add_argument("--precision", choices=sorted(_PRECISION), default="fp32",
                     help="fp32, or mixed precision with autocast (bf16; fp16 with a gradient scaler)")
    run.add_argument("--seed", type=int, default=0, help="seed of the initialisation and the batch order")
    run.add_argument("--val-every", type=int, default=1000, help="validate every N steps (0: only at the end)")
    run.add_argument("--checkpoint-every", type=int, default=1000,
                     help="write checkpoint.pt every N steps (and always at the end)")
    run.add_argument("--threads", type=_positive(int), default=None,
                     help="CPU threads of PyTorch (default: PyTorch's choice; 1 is often fastest for small models)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.set_defaults(func=run_train)

    r = sub.add_parser("translate", formatter_class=fmt, help="translate sentences with a trained model",
                       description="Translate sentences, one per line, from files or standard input; write "
                       "one translation per line to standard output (or --output).")
    r.add_argument("inputs", nargs="*", metavar="FILE", help="input files ('-' or none: standard input)")
    r.add_argument("--model", required=True, metavar="DIR", help="a model directory written by 'train'")
    r.add_argument("--output", metavar="FILE", help="write here instead of standard output")
    how = r.add_mutually_exclusive_group()
    how.add_argument("--beam", type=_positive(int), default=1, help="beam size (1: greedy decoding)")
    how.add_argument("--sample", action="store_true", help="sample instead of searching")
    r.add_argument("--length-penalty", type=float, default=0.6, help="beam search length penalty alpha")
    r.add_argument("--temperature", type=_positive(float), default=1.0, help="sampling temperature")
    r.add_argument("--top-k", type=int, default=0, help="sample among the k most probable tokens (0: all)")
    r.add_argument("--top-p", type=_positive(float), default=1.0, help="nucleus sampling threshold, in (0, 1]")
    r.add_argument("--seed", type=int, default=0, help="seed of the sampling")
    r.add_argument("--batch-size", type=_positive(int), default=64, help="sentences decoded together")
    r.add_argument("--max-len", type=_positive(int), default=None,
                   help="longest translation in tokens (default: 2 x source + 10)")
    r.add_argument("--device", default="auto", help="'auto' (cuda when present), 'cpu', 'cuda', ...")
    r.add_argument("--precision", choices=sorted(_PRECISION), default="fp32", help="fp32, or autocast to bf16/fp16")
    r.add_argument("--threads", type=_positive(int), default=None, help="CPU threads of PyTorch (default: PyTorch's choice)")
    r.set_defaults(func=run_translate)
    return parser


def _device(name: str, threads: int | None = None) -> torch.device:
    if threads:
        torch.set_num_threads(threads)
    if name == "auto":
        return default_device()
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"--device: expected 'auto', 'cpu', 'cuda' or 'cuda:N', got {name!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name}: CUDA is not available on this machine")
    return device


# [book/12_translation.ipynb, cell 41]
def _encode_pairs(pairs, tokenizer: BPETokenizer, max_len: int) -> tuple[list, int]:
    """Token-id pairs without bos/eos; pairs that would not fit ``max_len`` are dropped (and counted)."""
    out, skipped = [], 0
    for src, tgt in pairs:
        s, t = tokenizer.encode(src), tokenizer.encode(tgt)
        if 0 < len(s) <= max_len and 0 < len(t) + 1 <= max_len:
            out.append((s, t))
        else:
            skipped += 1
    return out, skipped


def _loader(encoded, batch_tokens: int, seed: int, shuffle: bool = True):
    dataset = PairDataset(encoded)
    sampler = TokenBucketSampler(dataset.lengths, batch_tokens, shuffle=shuffle, seed=seed)
    return torch.utils.data.DataLoader(dataset, batch_sampler=sampler, collate_fn=PadCollate())


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_train(args) -> int:
    """``train``: read the corpus, train (or load) the tokenizer, train the model, write the directory."""
    device = _device(args.device, args.threads)
    out = Path(args.out)
    checkpoint = out / CHECKPOINT_FILE
    if len(args.train) > 2 or (args.valid and len(args.valid) > 2):
        raise ValueError("--train and --valid take one TSV file or two aligned files")
    if args.resume:
        if not checkpoint.is_file():
            raise ModelDirError(f"{out}: nothing to resume (no {CHECKPOINT_FILE})")
        config = _read_config(out)
        tokenizer = _read_tokenizer(out, config)
    elif (out / CONFIG_FILE).exists() or checkpoint.exists():
        raise ModelDirError(f"{out} already holds a model: pass --resume to continue it, or choose another --out")
    train_pairs = read_parallel(*args.train)
    valid_pairs = read_parallel(*args.valid) if args.valid else None
    if not args.resume:
        tokenizer = BPETokenizer.train([s for s, _ in train_pairs] + [t for _, t in train_pairs],
                                       vocab_size=max(args.vocab_size, 260))
        config = TransformerConfig(tokenizer.vocab_size, tokenizer.vocab_size, d_model=args.d_model,
                                   n_heads=args.n_heads, n_encoder_layers=args.layers,
                                   n_decoder_layers=args.layers, d_ff=args.d_ff, dropout=args.dropout,
                                   norm_first=args.norm_first, max_len=args.max_len, share_embeddings=True)
    encoded, skipped = _encode_pairs(train_pairs, tokenizer, config.max_len)
    if not encoded:
        raise ValueError(f"no training pair fits --max-len {config.max_len}")
    if skipped:
        _log(f"skipped {skipped} training pairs longer than {config.max_len} tokens")
    torch.manual_seed(args.seed)
    model = Transformer(config).to(device)
    loader = _loader(encoded, args.batch_tokens, args.seed)
    val_loader = None
    if valid_pairs:
        val_encoded, _ = _encode_pairs(valid_pairs, tokenizer, config.max_len)
        val_loader = _loader(val_encoded, args.batch_tokens, args.seed, shuffle=False) if val_encoded else None
    steps = args.steps or (math.ceil(args.epochs * len(loader)) if args.epochs else 10000)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, noam_lambda(config.d_model, args.warmup, args.lr_factor))
    out.mkdir(parents=True, exist_ok=True)
    if not args.resume:
        (out / CONFIG_FILE).write_text(json.dumps(config.to_dict(), indent=2) + "\n", encoding="utf-8")
        tokenizer.save(out / TOKENIZER_FILE)
    _log(f"{len(encoded)} training pairs, vocabulary {tokenizer.vocab_size}, "
         f"{sum(p.numel() for p in model.parameters()):,} parameters, {steps} steps on {device}")
    history = train(model, loader, optimizer, scheduler, LabelSmoothingLoss(args.label_smoothing, config.pad_id),
                    steps=steps, val_loader=val_loader, val_every=args.val_every, clip_norm=args.clip_norm,
                    amp=None if args.precision == "fp32" else args.precision, log_every=max(1, min(50, steps)),
                    checkpoint_path=str(checkpoint), checkpoint_every=args.checkpoint_every,
                    resume_from=str(checkpoint) if args.resume else None, progress=not args.no_progress)
    record = {k: v for k, v in vars(args).items() if k != "func"}
    save_model_dir(out, model.cpu(), tokenizer, args=record, steps=history.last_step,
                   loss=history.loss[-1] if history.loss else None,
                   val_loss=history.val[-1].get("val_loss") if history.val else None)
    summary = f"step {history.last_step}/{steps}"
    if history.loss:
        summary += f", train loss {history.loss[-1]:.3f}"
    if history.val and "val_loss" in history.val[-1]:
        summary += f", valid loss {history.val[-1]['val_loss']:.3f}"
    _log(f"{summary}; {history.seconds:.1f} s; model written to {out}")
    return 0


def _read_inputs(inputs) -> list[str]:
    lines = []
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
    """``translate``: load the model directory, translate every input line, write one line each."""
    device = _device(args.device, args.threads)
    model, tokenizer = load_model_dir(args.model, device)
    lines = _read_inputs(args.inputs)
    translations = translate_lines(model, tokenizer, lines, beam=args.beam, length_penalty=args.length_penalty,
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
    """The entry point of ``python -m transformer_lib`` and of the ``transformer-lib`` console script.
    Returns the exit status: 0, 1 for an error (one line on stderr), 2 for a bad option."""
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


__all__ = ['CONFIG_FILE', 'TOKENIZER_FILE', 'WEIGHTS_FILE', 'CHECKPOINT_FILE', 'TRAINING_FILE', 'ModelDirError', 'save_model_dir', 'load_model_dir', 'translate_lines', 'build_parser', 'run_train', 'run_translate', 'main']
