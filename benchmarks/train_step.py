"""Tokens per second of a full training step: transformer_lib.Transformer against torch.nn.Transformer.

A training step is forward, loss (cross-entropy over the non-pad targets), backward and an Adam update.
PyTorch's ``nn.Transformer`` holds only the two stacks, so it is wrapped in the same embeddings, positional
encoding and (tied) output layer as ours, and starts from the same weights (``load_torch_transformer``;
our model is built with ``final_norm=True`` so that both do the same work). Both run in training mode with
dropout (0.1 by default) on the same padded batches, in the same run, interleaved. The script prints each one's tokens
per second and the ratio ours / PyTorch's (>= 1.0: the library is at least as fast).

Then the cost of the loop around the step: ``transformer_lib.train`` running ``--loop-steps`` updates of our
model (gradient clipping, the scheduler-free default, one read-back of the loss per logging interval) against
the same updates written as a bare Python loop with the same clipping and one read-back at the end. A ratio
near 1.0 means the loop adds nothing measurable: no host-device synchronisation inside a step.
Run: ``python benchmarks/train_step.py`` (``--help`` for the sizes).
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import warnings

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import add_model_args, add_timing_args, apply_threads, header, time_pair

import transformer_lib as tl


class TorchWrapped(nn.Module):
    """nn.Transformer between copies of our model's embeddings, positional encoding and output layer."""

    def __init__(self, model: tl.Transformer, reference: nn.Transformer):
        super().__init__()
        self.src_embed = copy.deepcopy(model.src_embed)
        self.tgt_embed = copy.deepcopy(model.tgt_embed)
        self.positional = copy.deepcopy(model.positional)
        self.output = nn.Linear(model.config.d_model, model.config.tgt_vocab_size, bias=False)
        if model.config.tie_output:
            self.output.weight = self.tgt_embed.weight
        else:
            self.output.load_state_dict(model.output.state_dict())
        self.transformer = reference
        self.pad_id = model.config.pad_id

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        T = tgt_in.size(1)
        causal = torch.ones(T, T, dtype=torch.bool, device=tgt_in.device).triu(1)      # True = blocked
        out = self.transformer(self.positional(self.src_embed(src)), self.positional(self.tgt_embed(tgt_in)),
                               tgt_mask=causal, src_key_padding_mask=src == self.pad_id,
                               tgt_key_padding_mask=tgt_in == self.pad_id,
                               memory_key_padding_mask=src == self.pad_id)
        return self.output(out)                                                        # (B, T, V)


def padded_batch(B: int, L: int, vocab: int, device: torch.device, bos: bool = False) -> torch.Tensor:
    ids = torch.randint(3, vocab, (B, L), device=device)
    lengths = torch.randint(L // 2, L + 1, (B,), device=device)
    ids[torch.arange(L, device=device)[None, :] >= lengths[:, None]] = 0               # pad each row's tail
    if bos:
        ids[:, 0] = 1
    return ids


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=32)
    add_model_args(p, layers_help="encoder layers = decoder layers")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--norm-first", action="store_true", help="Pre-Norm (default: Post-Norm, the paper)")
    p.add_argument("--loop-steps", type=int, default=20, help="updates per timed call of the loop comparison")
    add_timing_args(p, repeat=5, rounds=3)
    args = p.parse_args(argv)
    apply_threads(args)
    warnings.filterwarnings("ignore", message=".*nested.tensor.*")

    torch.manual_seed(0)
    device = tl.default_device()
    B, L, d = args.batch, args.length, args.d_model
    cfg = tl.TransformerConfig(args.vocab, args.vocab, d_model=d, n_heads=args.heads, n_encoder_layers=args.layers,
                               n_decoder_layers=args.layers, d_ff=args.d_ff, dropout=args.dropout,
                               norm_first=args.norm_first, final_norm=True, max_len=max(512, L))
    reference = nn.Transformer(d, args.heads, args.layers, args.layers, args.d_ff, dropout=args.dropout,
                               batch_first=True, norm_first=args.norm_first)
    ours = tl.load_torch_transformer(tl.Transformer(cfg), reference)
    theirs = TorchWrapped(ours, reference)
    ours, theirs = ours.to(device).train(), theirs.to(device).train()
    n_ours = sum(p.numel() for p in ours.parameters())
    n_theirs = sum(p.numel() for p in theirs.parameters())
    assert n_ours == n_theirs, (n_ours, n_theirs)

    src = padded_batch(B, L, args.vocab, device)
    tgt = padded_batch(B, L + 1, args.vocab, device, bos=True)
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]                       # teacher forcing: shift by one
    tokens = int((tgt_out != 0).sum())                             # target tokens the loss counts

    def train_step(model: nn.Module):
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)

        def run():
            opt.zero_grad(set_to_none=True)
            logits = model(src, tgt_in)                            # (B, L, V)
            loss = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=0)
            loss.backward()
            opt.step()
        return run

    header(f"training step (forward, loss, backward, Adam): transformer_lib.Transformer vs nn.Transformer, "
           f"{'Pre' if args.norm_first else 'Post'}-Norm, d_model={d} h={args.heads} layers={args.layers}+"
           f"{args.layers} d_ff={args.d_ff} dropout={args.dropout} vocab={args.vocab}, batch {B} x {L} tokens, "
           f"{n_ours:,} parameters each")
    t_ours, t_theirs = time_pair(train_step(ours), train_step(theirs), repeat=args.repeat, rounds=args.rounds)
    print(f"{'model':<28} {'ms/step':>9} {'target tokens/s':>16}")
    print(f"{'transformer_lib.Transformer':<28} {t_ours * 1e3:9.1f} {tokens / t_ours:16,.0f}")
    print(f"{'nn.Transformer (wrapped)':<28} {t_theirs * 1e3:9.1f} {tokens / t_theirs:16,.0f}")
    print(f"ratio tokens/s ours / PyTorch's: {t_theirs / t_ours:.2f}   (>= 1.0: the library is at least as fast)")

    n = args.loop_steps
    batches = [(src, tgt_in, tgt_out)] * n

    def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=0)

    def bare_loop():
        opt = torch.optim.Adam(ours.parameters(), lr=1e-4)

        def run():
            total = torch.zeros((), device=device)
            for _ in range(n):
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(ours(src, tgt_in).float(), tgt_out)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(ours.parameters(), 1.0)
                opt.step()
                total += loss.detach()
            return float(total)                                    # one read-back
        return run

    def library_loop():
        opt = torch.optim.Adam(ours.parameters(), lr=1e-4)

        def run():
            return tl.train(ours, batches, opt, None, loss_fn, steps=n, log_every=n, progress=False)
        return run

    print()
    header(f"the loop: transformer_lib.train vs a bare loop of the same {n} updates (clipping, Adam)")
    t_lib, t_bare = time_pair(library_loop(), bare_loop(), repeat=max(1, args.repeat // 2), warmup=1,
                              rounds=args.rounds)
    print(f"{'loop':<28} {'ms/step':>9}")
    print(f"{'transformer_lib.train':<28} {t_lib / n * 1e3:9.1f}")
    print(f"{'bare Python loop':<28} {t_bare / n * 1e3:9.1f}")
    print(f"ratio time bare / train: {t_bare / t_lib:.2f}   (about 1.0: the loop adds nothing measurable)")


if __name__ == "__main__":
    main()
