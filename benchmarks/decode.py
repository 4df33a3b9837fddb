"""Decoding speed: KV cache against full recomputation, and beam search against greedy.

One run, one machine: for a batch of 8 sources and 32 / 64 / 128 new tokens, a mid-size random-weight
Transformer (d_model=256, 4 heads, 3 + 3 layers, d_ff=1024, vocabulary 1000; its eos row is zeroed so
that every sentence runs to the full length) decodes with

* greedy, without cache / with cache,
* beam search (beam 4), without cache / with cache,
* beam 4 / greedy, both with the cache,
* the growing cache (``torch.cat`` every step, the decoders with ``KVCache.reserve`` switched off) / the
  static cache the decoders reserve (written in place), for greedy and beam search,

and the script prints each pair's time ratio (measured interleaved, in the same run, with
``common.time_pair``). A ratio above 1 means the second of the pair is faster. The cache's gain
grows with the number of new tokens, and is larger for beam search (4 rows per sentence) than for
greedy decoding; how large depends on the machine: run it (chapter 11 times a small version).
Run: ``python benchmarks/decode.py`` (``--quick``: one timed call of each; several
minutes on a CPU either way, the uncached beam search at 128 tokens is most of it).
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import add_decode_args, add_model_args, apply_threads, header, time_pair, timing_plan

import transformer_lib as tl


@contextlib.contextmanager
def growing_cache() -> Iterator[None]:
    """The decoders as they were before the static cache: no reservation, so every step grows the cache."""
    reserve = tl.KVCache.reserve
    tl.KVCache.reserve = lambda self, n: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        tl.KVCache.reserve = reserve  # type: ignore[method-assign]


def grown(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` run with the growing cache."""
    def run() -> object:
        with growing_cache():
            return fn()
    return run


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=str, default="32,64,128", help="new tokens, comma-separated")
    add_decode_args(p)
    add_model_args(p)
    args = p.parse_args(argv)
    apply_threads(args)
    repeat, rounds, warmup = timing_plan(args)

    torch.manual_seed(0)
    device = tl.default_device()
    config = tl.TransformerConfig(args.vocab, args.vocab, d_model=args.d_model, n_heads=args.heads,
                                  n_encoder_layers=args.layers, n_decoder_layers=args.layers, d_ff=args.d_ff,
                                  dropout=0.0, max_len=max(512, args.src_len))
    model = tl.Transformer(config).to(device).eval()
    with torch.no_grad():
        model.output.weight[config.eos_id] = 0.0          # tied with the target embedding: eos never wins
    src = torch.randint(3, args.vocab, (args.batch, args.src_len), device=device)

    header(f"decoding: batch {args.batch}, source length {args.src_len}, d_model {args.d_model}, "
           f"{args.layers}+{args.layers} layers, d_ff {args.d_ff}, vocabulary {args.vocab}, beam {args.beam}")
    print(f"{'new tokens':>10} | {'greedy: no cache / cache':>24} | {'beam: no cache / cache':>22} | "
          f"{'beam / greedy (cached)':>22} | {'greedy: grown / static':>22} | {'beam: grown / static':>20} | "
          f"greedy cached, ms")
    greedy = functools.partial(tl.greedy_decode, model, src)
    beam = functools.partial(tl.beam_search, model, src, args.beam)
    for n in (int(t) for t in args.tokens.split(",")):
        out = greedy(n, use_cache=True)
        assert out.size(1) == n + 1, "a sentence stopped early: the timing would not be of n tokens"
        assert torch.equal(out, greedy(n, use_cache=False))
        g_nc, g_c = time_pair(functools.partial(greedy, n, use_cache=False),
                              functools.partial(greedy, n, use_cache=True), repeat, warmup, rounds)
        b_nc, b_c = time_pair(functools.partial(beam, n, use_cache=False),
                              functools.partial(beam, n, use_cache=True), repeat, warmup, rounds)
        g_grown, g_static = time_pair(grown(functools.partial(greedy, n)), functools.partial(greedy, n), repeat,
                                      warmup, rounds)
        b_grown, b_static = time_pair(grown(functools.partial(beam, n)), functools.partial(beam, n), repeat,
                                      warmup, rounds)
        print(f"{n:>10} | {g_nc / g_c:>23.1f}x | {b_nc / b_c:>21.1f}x | {b_c / g_c:>21.1f}x | "
              f"{g_grown / g_static:>21.2f}x | {b_grown / b_static:>19.2f}x | {1e3 * g_c:.0f}", flush=True)


if __name__ == "__main__":
    main()
