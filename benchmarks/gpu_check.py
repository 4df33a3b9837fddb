"""Check the model on a CUDA GPU in one command (``make gpu-check``), or the script itself on a CPU.

On a CUDA machine, ``python benchmarks/gpu_check.py`` prints, and asserts where there is something to assert:

1. training: the paper's base model (d_model 512, 8 heads, 6 + 6 layers, d_ff 2048) trained for a few hundred
   steps on chapter 12's task (generated numbers and dates, byte-level BPE) with bfloat16 autocast and with
   float16 autocast and a gradient scaler: every logged loss finite, and the last below the first;
2. attention kernels: a training step (forward and backward, dropout on) and cached decoding steps run with
   ``torch.nn.attention.sdpa_kernel`` restricted to the flash and memory-efficient kernels, so that a fallback to
   the unfused kernel raises, and the profiler must show a fused kernel's op; the explicit path still returns
   weights (rows summing to 1) and gives the same logits;
3. throughput: tokens/s of a training step (forward, loss, backward, Adam) and model FLOPs utilisation (MFU)
   against the GPU's peak 16-bit tensor FLOP/s (table ``PEAK_TFLOPS``, or ``--peak-tflops``), for the library and
   for ``torch.nn.Transformer`` with the same shapes and weights, side by side; the FLOPs of a step are counted by
   ``torch.utils.flop_counter`` and checked against a formula;
4. decoding: greedy and beam-search throughput with the KV cache, and the host-device synchronisations per
   decoding step (``torch.cuda.set_sync_debug_mode``, and the read-backs counted by a dispatch mode, attributed to
   their source lines): at most one per step, the check whether every sentence has finished;
5. memory: the peak memory of a training step, and the largest batch that fits (doubling, then bisection,
   catching ``torch.cuda.OutOfMemoryError``);
6. ``torch.compile``: the speed ratio eager / compiled of a training step and of a cached decoding step
   (their equality with eager is tested on the CPU in ``tests/test_compile.py``).

``--dry-run`` runs the same code paths on the CPU at tiny sizes, so that ``make test`` keeps the script working
on machines without a GPU; the assertions that need CUDA are skipped, and the output lists them, and
torch.compile uses dynamo's eager backend (TorchInductor's C++ kernels take minutes to build on a busy CPU).
``--record`` also writes the output, with the date and the GPU, to ``benchmarks/results/gpu_check.txt`` (to commit: the
book's introduction points to it). Run: ``python benchmarks/gpu_check.py`` (``--help`` for the options).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import math
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import PEAK_TFLOPS, largest_batch, peak_tflops, time_call, time_pair
from train_step import TorchWrapped

import transformer_lib as tl
from transformer_lib.checks import check_float, check_int
from transformer_lib.cli.common import OneLineParser, number_option

RESULTS = Path(__file__).resolve().parent / "results" / "gpu_check.txt"
FUSED_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]


@dataclass
class Sizes:
    """Every size the check uses: ``FULL`` on a GPU, ``DRY`` for the CPU dry run."""

    d_model: int
    n_heads: int
    layers: int            # encoder layers = decoder layers
    d_ff: int
    vocab: int             # BPE vocabulary of chapter 12's task
    pairs: int             # generated sentence pairs to train on
    batch_tokens: int      # padded tokens per training batch
    steps: int             # training steps of each precision
    warmup: int
    peak_lr: float
    bench_batch: int       # throughput and memory: sequences of bench_len tokens
    bench_len: int
    decode_batch: int      # decoding: sources of decode_src_len tokens
    decode_src_len: int
    decode_tokens: int     # new tokens per sentence (eos is never chosen)
    beam: int
    repeat: int            # timed calls per measurement
    max_batch: int         # the largest batch the memory search tries


FULL = Sizes(512, 8, 6, 2048, 1000, 20000, 4096, 300, 100, 3e-4, 64, 64, 64, 32, 64, 4, 10, 1 << 16)
DRY = Sizes(32, 2, 1, 64, 300, 600, 300, 30, 10, 3e-3, 4, 12, 2, 8, 6, 2, 2, 64)


class Report:
    """Prints each line and keeps it (for ``--record``); collects the skipped CUDA-only checks."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.skipped: list[str] = []

    def __call__(self, line: str = "") -> None:
        print(line, flush=True)
        self.lines.append(line)

    def section(self, title: str) -> None:
        self()
        self(f"## {title}")

    def skip(self, what: str) -> None:
        self(f"   skipped (needs CUDA): {what}")
        self.skipped.append(what)


def autocast(device: torch.device, dtype: torch.dtype | None):
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def dtype_name(dtype: torch.dtype | None) -> str:
    return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


# 1. training on chapter 12's task ---------------------------------------------------------------------------
def task_loader(s: Sizes, max_len: int) -> tuple[torch.utils.data.DataLoader, int]:
    """A loader over chapter 12's generated pairs, encoded with a BPE of ``s.vocab`` tokens."""
    pairs = tl.generate_pairs(s.pairs, seed=0)
    tokenizer = tl.BPETokenizer.train([p.src for p in pairs] + [p.tgt for p in pairs], vocab_size=s.vocab)
    encoded, _ = tl.encode_pairs(pairs, tokenizer, max_len)
    data = tl.PairDataset(encoded)
    sampler = tl.TokenBucketSampler(data.lengths, s.batch_tokens, seed=0)
    loader = torch.utils.data.DataLoader(data, batch_sampler=sampler, collate_fn=tl.PadCollate())
    return loader, tokenizer.vocab_size


def model_config(s: Sizes, vocab: int, **kw) -> tl.TransformerConfig:
    return tl.TransformerConfig(vocab, vocab, d_model=s.d_model, n_heads=s.n_heads, n_encoder_layers=s.layers,
                                n_decoder_layers=s.layers, d_ff=s.d_ff, **kw)


def check_training(s: Sizes, device: torch.device, dtypes: list[torch.dtype], report: Report
                   ) -> tuple[tl.Transformer, tuple[torch.Tensor, ...]]:
    """Train a fresh model in each 16-bit precision; return the last model and one batch."""
    loader, V = task_loader(s, max_len=64)
    report(f"task: {s.pairs} pairs of chapter 12 (numbers and dates -> English), BPE vocabulary {V}, "
           f"{s.batch_tokens} padded tokens per batch, {len(loader)} batches per epoch")
    model = None
    for dtype in dtypes:
        torch.manual_seed(0)
        model = tl.Transformer(model_config(s, V, share_embeddings=True, max_len=64)).to(device)
        optimizer, scheduler = tl.noam_optimizer(model, s.d_model, s.warmup, peak_lr=s.peak_lr)
        log_every = max(1, s.steps // 10)
        history = tl.train(model, loader, optimizer, scheduler, steps=s.steps, amp=dtype_name(dtype),
                           log_every=log_every, progress=False)
        losses = history.loss
        report(f"{dtype_name(dtype)} autocast{' + GradScaler' if dtype is torch.float16 else ''}: "
               f"{s.steps} steps in {history.seconds:.1f} s, loss every {log_every} steps: "
               + " ".join(f"{x:.3f}" for x in losses))
        assert all(math.isfinite(x) for x in losses), f"{dtype_name(dtype)}: a loss is not finite: {losses}"
        assert losses[-1] < 0.8 * losses[0], f"{dtype_name(dtype)}: the loss did not fall: {losses}"
        report(f"   ok: every loss finite, the last {losses[-1]:.2f} < 0.8 x the first {losses[0]:.2f}")
    assert model is not None
    return model, tuple(next(iter(loader)))


# 2. the fused attention kernels, and the explicit path ------------------------------------------------------
def sdpa_ops(fn: Callable[[], object]) -> set[str]:
    """Run ``fn`` with only the flash and memory-efficient SDPA kernels allowed (a fallback to another kernel
    raises) and return the names of the scaled-dot-product ops the profiler saw."""
    with warnings.catch_warnings(record=True) as caught:        # PyTorch says there why a kernel was refused
        warnings.simplefilter("always")
        try:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                with sdpa_kernel(FUSED_BACKENDS):
                    fn()
        except RuntimeError as exc:
            reasons = "; ".join(sorted({str(w.message).splitlines()[0] for w in caught}))
            raise AssertionError(f"no fused attention kernel for this call ({exc}): {reasons}") from None
    return {e.key for e in prof.key_averages() if "scaled_dot_product" in e.key}


def assert_fused(name: str, ops: set[str], report: Report) -> None:
    fused = sorted(op for op in ops if "flash" in op or "efficient" in op)
    assert fused, f"{name}: no fused attention op ran: {sorted(ops)}"
    assert not any("math" in op for op in ops), f"{name}: the unfused (math) kernel ran: {sorted(ops)}"
    report(f"{name}: {', '.join(op.removeprefix('aten::') for op in fused)}")


def check_attention(model: tl.Transformer, batch: tuple[torch.Tensor, ...], device: torch.device,
                    dtype: torch.dtype, report: Report) -> None:
    src, tgt_in, _ = (t.to(device) for t in batch)
    cuda = device.type == "cuda"

    def train_step() -> None:
        with autocast(device, dtype):
            logits = model(src, tgt_in)                                 # (B, T, V)
        logits.float().logsumexp(-1).mean().backward()
        model.zero_grad(set_to_none=True)

    modes = [("eval", False)] + ([("train, dropout 0.1", True)] if cuda else [])
    for label, training in modes:
        model.train(training)
        assert_fused(f"training step ({dtype_name(dtype)}, {label}), ops", sdpa_ops(train_step), report)
    if not cuda:
        report.skip("the fused kernels with attention dropout (the CPU's flash kernel has no dropout)")
    with autocast(device, dtype):
        assert_fused("greedy decoding with the KV cache, ops",
                     sdpa_ops(lambda: tl.greedy_decode(model, src, max_len=4)), report)

    model.eval()                                                        # the explicit path: weights
    with torch.no_grad():
        fused = model(src, tgt_in)
        maps = model.attention_weights(src, tgt_in)
        mhas = [m for m in model.modules() if isinstance(m, tl.MultiHeadAttention)]
        for m in mhas:
            m.record_weights = True
        try:
            explicit = model(src, tgt_in)                               # every layer on the explicit path
        finally:
            for m in mhas:
                m.record_weights = False
    B, S, T, h = src.size(0), src.size(1), tgt_in.size(1), model.config.n_heads
    shapes = {"encoder": (B, h, S, S), "decoder": (B, h, T, T), "cross": (B, h, T, S)}
    layers = {"encoder": model.config.n_encoder_layers, "decoder": model.config.n_decoder_layers,
              "cross": model.config.n_decoder_layers}
    for kind, ws in maps.items():
        assert len(ws) == layers[kind] and all(w.shape == shapes[kind] for w in ws), kind
        sums = torch.stack([w.float().sum(-1) for w in ws])
        assert torch.allclose(sums, torch.ones_like(sums), atol=1e-5), f"{kind}: rows do not sum to 1"
    diff = float((fused - explicit).abs().max())
    scale = float(fused.abs().max())
    assert diff <= 2e-3 * max(1.0, scale), f"explicit and fused paths differ by {diff} (largest logit {scale})"
    report(f"explicit path: {sum(len(ws) for ws in maps.values())} weight maps (B, h, Lq, Lk), rows sum to 1; "
           f"logits equal to the fused path's within {diff:.1e} (float32)")


# 3. training throughput and MFU, the library and nn.Transformer ---------------------------------------------
def counted_flops(fn: Callable[[], object]) -> int:
    """FLOPs of ``fn()`` counted by ``torch.utils.flop_counter`` (attention on the unfused kernel, whose matrix
    products the counter sees on every device)."""
    with sdpa_kernel([SDPBackend.MATH]), FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def formula_flops(c: tl.TransformerConfig, B: int, S: int, T: int) -> int:
    """Matrix-product FLOPs of a training step (forward + backward = 3 x forward) of B pairs of S source and T
    target positions: projections, attention scores and mixing, feed-forward, output layer."""
    d, f, V = c.d_model, c.d_ff, c.tgt_vocab_size
    encoder = S * (8 * d * d + 4 * d * f) + 4 * S * S * d
    decoder = T * (12 * d * d + 4 * d * f) + 4 * S * d * d + 4 * T * T * d + 4 * T * S * d
    return 3 * B * (c.n_encoder_layers * encoder + c.n_decoder_layers * decoder + 2 * T * d * V)


def bench_pair(s: Sizes, V: int, device: torch.device) -> tuple[tl.Transformer, nn.Module, tl.TransformerConfig]:
    """The library's model and nn.Transformer (wrapped in the same embeddings and output layer) with the same
    weights; final_norm=True as nn.Transformer always has one."""
    torch.manual_seed(0)
    cfg = model_config(s, V, dropout=0.1, final_norm=True, max_len=max(512, s.bench_len + 1))
    reference = nn.Transformer(s.d_model, s.n_heads, s.layers, s.layers, s.d_ff, dropout=0.1, batch_first=True)
    ours = tl.load_torch_transformer(tl.Transformer(cfg), reference)
    theirs = TorchWrapped(ours, reference)
    return ours.to(device).train(), theirs.to(device).train(), cfg


def bench_batch(B: int, L: int, V: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """B pairs of L source and L target tokens, no padding: every position is a token the step must learn."""
    src = torch.randint(3, V, (B, L), device=device)
    tgt = torch.randint(3, V, (B, L + 1), device=device)
    tgt[:, 0] = 1                                                      # bos
    return src, tgt[:, :-1], tgt[:, 1:]


def train_step(model: nn.Module, batch: tuple[torch.Tensor, ...], device: torch.device,
               dtype: torch.dtype | None, optimizer: torch.optim.Optimizer | None = None) -> Callable[[], None]:
    """One training step: forward (autocast), cross-entropy, backward, Adam (``optimizer``, if given)."""
    src, tgt_in, tgt_out = batch

    def run() -> None:
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
        with autocast(device, dtype):
            logits = model(src, tgt_in)                                 # (B, T, V)
        F.cross_entropy(logits.float().flatten(0, 1), tgt_out.flatten()).backward()
        if optimizer is not None:
            optimizer.step()
    return run


def check_throughput(s: Sizes, V: int, device: torch.device, dtype: torch.dtype, peak: float | None,
                     report: Report) -> None:
    ours, theirs, cfg = bench_pair(s, V, device)
    B, L = s.bench_batch, s.bench_len
    batch = bench_batch(B, L, V, device)
    flops = {name: counted_flops(train_step(m, batch, device, None)) for name, m in (("ours", ours),
                                                                                      ("theirs", theirs))}
    ours.zero_grad(set_to_none=True)
    theirs.zero_grad(set_to_none=True)
    expected = formula_flops(cfg, B, L, L)
    report(f"FLOPs of a training step, batch {B} x ({L} + {L}) tokens: counted {flops['ours']:.3e} (library), "
           f"{flops['theirs']:.3e} (nn.Transformer), formula {expected:.3e}")
    for name, n in flops.items():
        assert abs(n / expected - 1) < 0.01, f"{name}: counted {n} FLOPs, the formula says {expected}"
    steps = [train_step(m, batch, device, dtype, torch.optim.Adam(m.parameters(), lr=1e-4))
             for m in (ours, theirs)]
    t_ours, t_theirs = time_pair(steps[0], steps[1], repeat=s.repeat, warmup=2, rounds=2)
    report(f"{'model (' + dtype_name(dtype) + ' autocast, Adam)':<34} {'ms/step':>9} {'target tokens/s':>16} "
           f"{'TFLOP/s':>8} {'MFU':>6}")
    for name, t in (("transformer_lib.Transformer", t_ours), ("nn.Transformer (wrapped)", t_theirs)):
        achieved = expected / t / 1e12
        mfu = f"{achieved / peak:6.1%}" if peak else f"{'n/a':>6}"
        report(f"{name:<34} {t * 1e3:9.2f} {B * L / t:16,.0f} {achieved:8.2f} {mfu}")
        if peak:
            assert achieved < peak, f"{name}: {achieved:.1f} TFLOP/s is above the peak {peak}: wrong peak?"
    report(f"ratio tokens/s library / nn.Transformer: {t_theirs / t_ours:.2f}"
           + ("" if peak else "   (MFU: no peak for this device; --peak-tflops sets one)"))


# 4. decoding throughput and host-device synchronisations ------------------------------------------------------
_READS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.nonzero.default,
          torch.ops.aten.masked_select.default}
_COPIES = {torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default}


def _caller() -> str:
    """The innermost frame of the library or of this script: where a read-back was asked for."""
    here = os.path.abspath(__file__)
    for frame in reversed(traceback.extract_stack()[:-2]):
        name = frame.filename
        if f"{os.sep}transformer_lib{os.sep}" in name or os.path.abspath(name) == here:
            return f"{os.path.basename(name)}:{frame.lineno} ({frame.name})"
    return "elsewhere"


class ReadBacks(TorchDispatchMode):
    """Counts, by source line, the ops that read a tensor's values back to the host (``item``, ``bool``,
    ``tolist``, ``nonzero``, a copy to the CPU): each is a host-device synchronisation on a GPU."""

    def __init__(self) -> None:
        super().__init__()
        self.where: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        src = args[0] if args and isinstance(args[0], torch.Tensor) else None
        copy_back = (func in _COPIES and isinstance(out, torch.Tensor) and out.device.type == "cpu"
                     and src is not None and src.device.type != "cpu")
        if func in _READS or copy_back:
            key = _caller()
            self.where[key] = self.where.get(key, 0) + 1
        return out


@contextlib.contextmanager
def cuda_syncs() -> Iterator[list[warnings.WarningMessage]]:
    """Record one warning per host-device synchronisation (``torch.cuda.set_sync_debug_mode``)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield caught
        finally:
            torch.cuda.set_sync_debug_mode("default")


def per_step(decode: Callable[[int], object], n: int, count: Callable[[Callable[[], object]], dict[str, int]]
             ) -> tuple[dict[str, float], int]:
    """Counts per decoding step (difference between n and 2n steps, divided by n) and the constant rest. A first
    call, not counted, does the one-time work (on an H200 it cost one synchronisation more in the first counted
    call, which the difference then put on the steps' account: 63 in 64 steps)."""
    count(lambda: decode(n))
    short, long = count(lambda: decode(n)), count(lambda: decode(2 * n))
    steps = {k: (long.get(k, 0) - short.get(k, 0)) / n for k in long.keys() | short.keys()}
    rest = sum(short.values()) - round(sum(steps.values()) * n)
    return {k: v for k, v in steps.items() if v}, rest


def count_reads(fn: Callable[[], object]) -> dict[str, int]:
    with ReadBacks() as mode:
        fn()
    return mode.where


def count_syncs(fn: Callable[[], object]) -> dict[str, int]:
    with cuda_syncs() as caught:
        fn()
    return {"syncs": sum("synchroniz" in str(w.message) for w in caught)}


def decoding_model(s: Sizes, V: int, device: torch.device) -> tl.Transformer:
    """The base model with random weights whose eos row is zero (tied: the embedding's too): eos never wins, so
    every sentence runs to its length limit and a decode of n tokens takes n steps."""
    torch.manual_seed(0)
    model = tl.Transformer(model_config(s, V, dropout=0.0, max_len=512)).to(device).eval()
    with torch.no_grad():
        model.output.weight[model.config.eos_id] = 0.0
    return model


def check_decoding(s: Sizes, V: int, device: torch.device, dtype: torch.dtype, report: Report) -> None:
    model = decoding_model(s, V, device)
    src = torch.randint(3, V, (s.decode_batch, s.decode_src_len), device=device)
    B, n, k = s.decode_batch, s.decode_tokens, s.beam
    decoders = {"greedy": lambda m, a: tl.greedy_decode(model, src, max_len=m),
                f"beam {k}": lambda m, a: tl.beam_search(model, src, k, max_len=m)[0]}
    report(f"batch {B} sources of {s.decode_src_len} tokens, {n} new tokens each, KV cache; tokens/s counts the "
           "tokens of the output (one hypothesis per sentence)")
    for amp in (None, dtype):
        for name, decode in decoders.items():
            def run(m: int = n, decode=decode, amp=amp) -> torch.Tensor:
                with autocast(device, amp):
                    return decode(m, amp)
            out = run()
            assert out.shape == (B, n + 1), f"{name}: a sentence stopped early: {tuple(out.shape)}"
            t = time_call(run, repeat=s.repeat, warmup=1)
            report(f"{name:>8}, {dtype_name(amp)}: {B * n / t:10,.0f} tokens/s ({t / n * 1e3:.2f} ms per step)")
    cuda = device.type == "cuda"
    for name, decode in decoders.items():
        def run_n(m: int, decode=decode) -> torch.Tensor:
            return decode(m, None)
        reads, rest = per_step(run_n, n, count_reads)
        where = ", ".join(f"{v:g} at {k}" for k, v in sorted(reads.items())) or "none"
        report(f"{name}: values read back per step: {where}; {rest} more per call")
        # on the CPU check_token_ids reads the ids it checks (on a GPU it queues an assertion instead)
        counted = sum(v for k, v in reads.items() if cuda or "check_token_ids" not in k)
        assert counted <= 1, f"{name}: {counted} read-backs per step, the goal is at most 1 (the stopping check)"
        if cuda:
            syncs, sync_rest = per_step(run_n, n, count_syncs)
            per = syncs.get("syncs", 0.0)
            report(f"{name}: host-device synchronisations per step: {per:g} (set_sync_debug_mode); "
                   f"{sync_rest} more per call")
            assert per >= counted, "the sync debug mode saw fewer synchronisations than values read back"
            assert per <= 1, f"{name}: {per} synchronisations per step, the goal is at most 1"
    if not cuda:
        report.skip("synchronisations per step counted by torch.cuda.set_sync_debug_mode")


# 5. memory ----------------------------------------------------------------------------------------------------
def check_memory(s: Sizes, V: int, device: torch.device, dtype: torch.dtype, report: Report) -> None:
    ours = bench_pair(s, V, device)[0]                                  # nn.Transformer's copy is freed
    optimizer = torch.optim.Adam(ours.parameters(), lr=1e-4)
    L, cuda = s.bench_len, device.type == "cuda"
    train_step(ours, bench_batch(1, L, V, device), device, dtype, optimizer)()    # Adam's state exists now
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        train_step(ours, bench_batch(s.bench_batch, L, V, device), device, dtype, optimizer)()
        peak = torch.cuda.max_memory_allocated()
        report(f"peak memory of a training step, batch {s.bench_batch} x ({L} + {L}) tokens, "
               f"{dtype_name(dtype)} autocast, Adam: {peak / 2**30:.2f} GiB ({before / 2**30:.2f} GiB of weights, "
               "gradients and optimizer state before the step)")
    else:
        report.skip("peak memory of a training step (torch.cuda.max_memory_allocated)")
    capacity = None if cuda else 13                                     # the dry run: a simulated limit

    def fits(B: int) -> bool:
        failed = False
        try:
            if capacity is not None and B > capacity:
                raise torch.cuda.OutOfMemoryError(f"simulated: batch {B} > {capacity}")
            train_step(ours, bench_batch(B, L, V, device), device, dtype, optimizer)()
        except torch.cuda.OutOfMemoryError:
            failed = True
        optimizer.zero_grad(set_to_none=True)
        if failed and cuda:                                             # outside the except: frames released
            torch.cuda.empty_cache()
        return not failed

    best, tried = largest_batch(fits, start=s.bench_batch, limit=s.max_batch)
    at_limit = " (the search's limit)" if best == s.max_batch else ""
    report(f"largest training batch that fits: {best}{at_limit} x ({L} + {L}) tokens, "
           f"{dtype_name(dtype)} autocast, Adam (tried {', '.join(map(str, tried))})")
    assert best >= 1, "not even one sequence fits"
    if capacity is not None:
        assert best == capacity, f"the search found {best}, the simulated capacity is {capacity}"
        report.skip("the largest batch against the GPU's real memory (the dry run simulates a limit of "
                    f"{capacity} sequences)")


# 6. torch.compile -----------------------------------------------------------------------------------------------
def check_compile(s: Sizes, V: int, device: torch.device, dtype: torch.dtype, backend: str,
                  report: Report) -> None:
    if backend != "inductor":
        report(f"backend {backend!r}: dynamo captures the graphs, no code is generated; the ratios below test the "
               "code path, not the compiler (the inductor run: --compile-backend inductor)")
    ours = bench_pair(s, V, device)[0]
    compiled = torch.compile(ours, dynamic=False, backend=backend)
    batch = bench_batch(s.bench_batch, s.bench_len, V, device)
    steps = [train_step(m, batch, device, dtype, torch.optim.Adam(ours.parameters(), lr=1e-4))
             for m in (ours, compiled)]
    seconds = time_call(steps[1], repeat=1, warmup=0)                   # the first call compiles
    t_eager, t_compiled = time_pair(steps[0], steps[1], repeat=s.repeat, warmup=1, rounds=2)
    report(f"training step, {dtype_name(dtype)} autocast: eager / compiled time {t_eager / t_compiled:.2f} "
           f"({t_eager * 1e3:.2f} / {t_compiled * 1e3:.2f} ms; compiling took {seconds:.0f} s)")

    model = decoding_model(s, V, device)
    src = torch.randint(3, V, (s.decode_batch, s.decode_src_len), device=device)
    with torch.no_grad(), autocast(device, dtype):
        src_mask = tl.padding_mask(src, model.config.pad_id)
        memory = model.encode(src, src_mask)
        cache = model.new_cache()
        prefix = torch.full((src.size(0), s.decode_tokens), 3, device=device)
        prefix[:, 0] = model.config.bos_id
        model.decode(prefix, memory, src_mask, cache)                   # the cache holds decode_tokens positions
        saved = [(layer.self_attn.k, layer.self_attn.v) for layer in cache.layers]
        new = torch.full((src.size(0), 1), 4, device=device)
        decode = torch.compile(model.decode, dynamic=False, backend=backend)

        def step(fn: Callable) -> Callable[[], torch.Tensor]:
            def run() -> torch.Tensor:
                try:
                    return fn(new, memory, src_mask, cache)             # one cached step
                finally:
                    for layer, (k, v) in zip(cache.layers, saved):      # back to decode_tokens positions
                        layer.self_attn.k, layer.self_attn.v = k, v
            return run

        seconds = time_call(step(decode), repeat=1, warmup=0)
        diff = float((step(decode)().float() - step(model.decode)().float()).abs().max())
        t_eager, t_compiled = time_pair(step(model.decode), step(decode), repeat=s.repeat, warmup=1, rounds=2)
    report(f"cached decoding step: eager / compiled time {t_eager / t_compiled:.2f} ({t_eager * 1e3:.2f} / "
           f"{t_compiled * 1e3:.2f} ms; compiling took {seconds:.0f} s; logits differ by {diff:.1e})")


# the command ------------------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog=Path(__file__).name, description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true",
                   help="run every part on the CPU at tiny sizes, skipping the assertions that need CUDA")
    p.add_argument("--record", nargs="?", const=str(RESULTS), default=None, metavar="FILE",
                   help=f"also write the output, with the date and the device, to FILE (default: {RESULTS})")
    p.add_argument("--peak-tflops", type=number_option(float, check_float, low=0.0, low_open=True), default=None,
                   help="the device's peak 16-bit TFLOP/s for the MFU, > 0 (default: the table PEAK_TFLOPS)")
    p.add_argument("--steps", type=number_option(int, check_int, minimum=2), default=None,
                   help="training steps of each precision, at least 2: the check compares the last logged loss "
                   f"with the first (default: {FULL.steps}, dry run {DRY.steps})")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile timings")
    p.add_argument("--compile-backend", default=None, help="torch.compile's backend (default: inductor; in the "
                   "dry run 'eager', as compiling C++ kernels takes minutes on a busy CPU)")
    p.add_argument("--threads", type=number_option(int, check_int, minimum=0), default=0,
                   help="torch CPU threads (0: PyTorch's default)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available()
    if not cuda and not args.dry_run:
        print("gpu_check: no CUDA GPU here (torch.cuda.is_available() is False); run it on a machine with one, "
              "or check the script itself on the CPU with --dry-run", file=sys.stderr)
        return 2
    s = copy.copy(DRY if args.dry_run else FULL)
    if args.steps is not None:
        s.steps = args.steps
    device = torch.device("cuda" if cuda and not args.dry_run else "cpu")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    bf16 = device.type == "cpu" or torch.cuda.is_bf16_supported(including_emulation=False)
    dtype = torch.bfloat16 if bf16 else torch.float16
    peak = args.peak_tflops if args.peak_tflops is not None else (
        peak_tflops(name) if device.type == "cuda" else None)
    warnings.filterwarnings("ignore", message=".*nested.tensor.*")

    report = Report()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    report(f"# gpu_check{' --dry-run (tiny sizes, CPU)' if args.dry_run else ''}: {now}")
    report(f"# device {name}; torch {torch.__version__}, CUDA {torch.version.cuda}; "
           f"peak 16-bit tensor TFLOP/s: {peak if peak else 'unknown (--peak-tflops)'}"
           + (f" (table: {', '.join(k for k, _ in PEAK_TFLOPS)})" if peak is None and device.type == "cuda" else ""))
    report(f"# model d_model {s.d_model}, {s.n_heads} heads, {s.layers} + {s.layers} layers, d_ff {s.d_ff}")

    status = 0
    try:
        run_checks(s, device, name, dtype, bf16, peak, args, report)
    except Exception as exc:                          # recorded too: a failed run's figures are worth keeping
        traceback.print_exc()
        report()
        report(f"# FAILED ({type(exc).__name__}): {exc}")
        status = 1
    if args.record:
        path = Path(args.record)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(report.lines) + "\n", encoding="utf-8")
        print(f"# written to {path}")
    return status


def run_checks(s: Sizes, device: torch.device, name: str, dtype: torch.dtype, bf16: bool, peak: float | None,
               args: argparse.Namespace, report: Report) -> None:
    report.section(f"1. training on chapter 12's task, {s.steps} steps each")
    dtypes = [torch.bfloat16, torch.float16] if bf16 else [torch.float16]
    if not bf16:
        report(f"bf16: not supported by {name}; fp16 only")
    model, batch = check_training(s, device, dtypes, report)
    V = model.config.tgt_vocab_size
    report.section("2. attention kernels: fused kernels only (a fallback raises), and the explicit path")
    check_attention(model, batch, device, dtype, report)
    del model
    report.section(f"3. training throughput and MFU ({dtype_name(dtype)} autocast)")
    check_throughput(s, V, device, dtype, peak, report)
    report.section("4. decoding with the KV cache: throughput and synchronisations")
    check_decoding(s, V, device, dtype, report)
    report.section("5. memory of a training step")
    check_memory(s, V, device, dtype, report)
    report.section("6. torch.compile (equality with eager: tests/test_compile.py)")
    if args.no_compile:
        report("skipped (--no-compile)")
    else:
        backend = args.compile_backend or ("eager" if args.dry_run else "inductor")
        check_compile(s, V, device, dtype, backend, report)
    report()
    if report.skipped:
        report(f"# all checks passed except {len(report.skipped)} skipped for want of CUDA: "
               + "; ".join(report.skipped))
    else:
        report("# all checks passed")


if __name__ == "__main__":
    sys.exit(main())
