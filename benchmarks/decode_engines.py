"""Decoding speed of the book's decoders against CTranslate2 (float32 and int8) and transformers' generate.

One run, one machine: a random-weight MarianMTModel with opus-mt's choices (as in ``marian_decode.py``: the
eos and pad logits get a bias of -1e4, so no sentence stops early) is converted with ``tl.from_marian`` and
exported with ``tl.serving.export_ctranslate2`` twice, float32 and int8. For greedy decoding and beam search
(4 beams, ``length_norm="power"``, length penalty 1.0: CTranslate2's and generate's scores), at batch 1, 8
and 64 and with 1 and 2 threads, each peer is timed against the book's decoder interleaved in the same run
(``common.time_pair``), and the table gives the ratio book / peer: above 1, the book's decoder is slower.
Each decoder is timed twice: on the model itself, and on ``tl.packed.PackedDecoder`` (the serving
appendix's packed weights and lean step; rows "packed").
The goal of issue 27: book / CTranslate2 float32 at most 1.5 at batch 8, and book / generate at most 1/1.5.
Needs ``ctranslate2`` and ``transformers``. Run: ``python benchmarks/decode_engines.py`` (``--quick``:
one timed call, one round, 32 new tokens).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import add_decode_args, add_model_args, header, time_pair, timing_plan
from marian_decode import tiny_marian

import transformer_lib as tl
from transformer_lib.packed import PackedDecoder
from transformer_lib.serving import CTranslate2Model, export_ctranslate2


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--thread-counts", type=int, nargs="+", default=[1, 2])
    add_decode_args(p)
    add_model_args(p, vocab=8000)
    args = p.parse_args(argv)
    if args.quick:
        args.new_tokens = min(args.new_tokens, 32)
    repeat, rounds, warmup = timing_plan(args)
    warnings.filterwarnings("ignore", category=UserWarning)
    torch.manual_seed(0)
    hf = tiny_marian(args.d_model, args.heads, args.layers, args.d_ff, args.vocab, max_len=512)
    model = tl.from_marian(hf).eval()
    packed = PackedDecoder(model)
    pad, n = args.vocab - 1, args.new_tokens
    tmp = tempfile.mkdtemp(prefix="decode_engines.")
    paths = {q: export_ctranslate2(model, None, os.path.join(tmp, q or "float32"), q) for q in (None, "int8")}
    header(f"decoding engines: source length {args.src_len}, {n} new tokens, d_model {args.d_model}, "
           f"{args.heads} heads, {args.layers} + {args.layers} layers, d_ff {args.d_ff}, vocabulary "
           f"{args.vocab}; ratio = book's time / peer's time (above 1: the book is slower)")
    print(f"{'decoder':16}{'batch':>6}{'threads':>8}{'book (s)':>10}{'/ ct2 fp32':>12}{'/ ct2 int8':>12}"
          f"{'/ generate':>12}")
    for threads in args.thread_counts:
        torch.set_num_threads(threads)
        engines = {q: CTranslate2Model(path, model.config, threads=threads) for q, path in paths.items()}
        for batch in args.batches:
            src = torch.randint(1, pad, (batch, args.src_len))
            src[:, -1] = 0                                              # each source ends with eos
            mask = torch.ones_like(src)
            for beams, fast in [(b, f) for b in (1, args.beam) for f in (False, True)]:
                m = packed if fast else model
                if beams == 1:
                    def ours(src=src, m=m):
                        return tl.greedy_decode(m, src, max_len=n)
                else:
                    def ours(src=src, beams=beams, m=m):
                        return tl.beam_search(m, src, beam_size=beams, max_len=n, length_norm="power",
                                              alpha=1.0, stop="first_k")[0]

                def generate(src=src, mask=mask, beams=beams):
                    with torch.no_grad():
                        return hf.generate(input_ids=src, attention_mask=mask, num_beams=beams,
                                           do_sample=False, max_new_tokens=n, length_penalty=1.0,
                                           early_stopping=False, forced_eos_token_id=None)
                settings = (dict(max_len=n) if beams == 1 else
                            dict(strategy="beam", beam_size=beams, max_len=n, length_norm="power",
                                 alpha=1.0, stop="first_k"))
                peers = [lambda e=e, src=src, s=settings: e.decode(src, **s)
                         for e in engines.values()] + [generate]
                ratios, t_book = [], []
                for peer in peers:
                    t_ours, t_peer = time_pair(ours, peer, repeat=repeat, warmup=warmup, rounds=rounds)
                    ratios.append(t_ours / t_peer)
                    t_book.append(t_ours)
                name = ("greedy" if beams == 1 else f"beam {beams}") + (" packed" if fast else "")
                print(f"{name:16}{batch:>6}{threads:>8}{min(t_book):>10.3f}"
                      + "".join(f"{r:>12.2f}" for r in ratios), flush=True)


if __name__ == "__main__":
    main()
