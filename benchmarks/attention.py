"""Forward + backward time of transformer_lib.MultiHeadAttention against torch.nn.MultiheadAttention.

Both modules hold the same weights and run self-attention on the same batch (B=32, L=128, d_model=512,
h=8 by default), with and without a padding mask; the script prints time(library) / time(PyTorch), so a
ratio at or below 1.0 means the library is not slower. Run: ``python benchmarks/attention.py``.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import add_timing_args, apply_threads, header, time_pair

from transformer_lib import MultiHeadAttention, default_device, padding_mask


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=128)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    add_timing_args(p, repeat=5, rounds=3)
    args = p.parse_args(argv)
    apply_threads(args)

    torch.manual_seed(0)
    device = default_device()
    B, L, d, h = args.batch, args.length, args.d_model, args.heads
    ours = MultiHeadAttention(d, h).to(device)
    ref = nn.MultiheadAttention(d, h, batch_first=True).to(device)
    with torch.no_grad():                      # the same weights in both
        ref.in_proj_weight.copy_(ours.in_proj.weight)
        ref.in_proj_bias.copy_(ours.in_proj.bias)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)

    x = torch.randn(B, L, d, device=device, requires_grad=True)
    ids = torch.randint(3, 100, (B, L), device=device)
    lengths = torch.randint(L // 2, L + 1, (B,), device=device)
    ids[torch.arange(L, device=device)[None, :] >= lengths[:, None]] = 0      # pad the tail of each row
    mask = padding_mask(ids, 0)                 # (B, 1, 1, L), True = may attend
    key_padding_mask = ids == 0                 # (B, L), True = ignore (PyTorch's convention)

    def step(fn):
        def run():
            x.grad = None
            fn().sum().backward()
        return run

    header(f"MultiHeadAttention vs nn.MultiheadAttention, forward + backward, B={B} L={L} d_model={d} h={h}")
    cases = [
        ("no mask", step(lambda: ours(x)),
         step(lambda: ref(x, x, x, need_weights=False)[0])),
        ("padding mask", step(lambda: ours(x, mask=mask)),
         step(lambda: ref(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)[0])),
        ("padding mask, weights returned", step(lambda: ours.forward_with_weights(x, mask=mask)[0]),
         step(lambda: ref(x, x, x, key_padding_mask=key_padding_mask, need_weights=True,
                          average_attn_weights=False)[0])),
    ]
    print(f"{'case':<32} {'ours ms':>9} {'torch ms':>9} {'ratio':>7}")
    for name, a, b in cases:
        ta, tb = time_pair(a, b, repeat=args.repeat, rounds=args.rounds)
        print(f"{name:<32} {ta * 1e3:9.1f} {tb * 1e3:9.1f} {ta / tb:7.2f}")
    print("# ratio = time(transformer_lib) / time(nn.MultiheadAttention); <= 1.0 means not slower")


if __name__ == "__main__":
    main()
