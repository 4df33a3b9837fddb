"""Generated from book/08_decoder.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: edae9fce4e2c497f
# fmt: off

# [book/08_decoder.ipynb, cell 8]
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lib.attention import MultiHeadAttention
from transformer_lib.feed_forward import PositionwiseFeedForward
from transformer_lib.norm import SublayerConnection, make_norm


class KVCache:
    """The keys and values every decoder layer has computed so far, kept between decoding steps.

    ``layers[i]["self"]`` holds layer i's self-attention keys/values (B, h, t, d_k) under "k" and "v",
    growing with every step; ``layers[i]["cross"]`` holds its cross-attention keys/values of the encoder
    output (B, h, S, d_k), computed at the first step and reused. Chapter 11 builds decoding on it.
    """

    def __init__(self, n_layers: int):
        if not isinstance(n_layers, int) or n_layers < 1:
            raise ValueError(f"n_layers must be a positive int, got {n_layers!r}")
        self.layers = [{"self": {}, "cross": {}} for _ in range(n_layers)]

    @property
    def length(self) -> int:
        """How many target positions are cached."""
        k = self.layers[0]["self"].get("k")
        return 0 if k is None else k.size(2)

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (in that order) of every cached tensor: the beams that survive a step."""
        if not isinstance(index, torch.Tensor) or index.dim() != 1 or index.dtype.is_floating_point:
            raise ValueError("index must be a 1-D integer tensor of batch rows")
        for layer in self.layers:
            for part in layer.values():
                for key, t in part.items():
                    part[key] = t.index_select(0, index.to(t.device))


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder output, feed-forward; each in a sublayer.

    forward(x (B, T, d_model), memory (B, S, d_model), tgt_mask, memory_mask, cache) -> (B, T, d_model).
    ``tgt_mask`` (B or 1, 1, T, T) is the target's padding AND causal mask, for self-attention;
    ``memory_mask`` (B, 1, 1, S) is the source padding mask, for cross-attention. Both are boolean,
    True = may attend. ``cache`` is one entry of ``KVCache.layers``.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False,
                 activation: str = "relu", norm: str = "layer", eps: float = 1e-5):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.sublayer1 = SublayerConnection(d_model, dropout, norm_first, norm, eps)   # around self_attn
        self.sublayer2 = SublayerConnection(d_model, dropout, norm_first, norm, eps)   # around cross_attn
        self.sublayer3 = SublayerConnection(d_model, dropout, norm_first, norm, eps)   # around feed_forward

    def forward(self, x: torch.Tensor, memory: torch.Tensor, tgt_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, cache: dict | None = None) -> torch.Tensor:
        if memory.dim() != 3 or memory.size(0) != x.size(0):
            raise ValueError(f"memory must have shape (B, S, d_model) with the batch size of x ({x.size(0)}), "
                             f"got {tuple(memory.shape)}")
        sc = None if cache is None else cache["self"]
        cc = None if cache is None else cache["cross"]
        # 1. masked self-attention: queries, keys and values all from the target    (B, T, d_model)
        x = self.sublayer1(x, lambda y: self.self_attn(y, y, y, tgt_mask, cache=sc))
        # 2. cross-attention: queries from the target, keys/values from the memory  (B, T, d_model)
        x = self.sublayer2(x, lambda y: self.cross_attn(y, memory, memory, memory_mask, cache=cc))
        # 3. position-wise feed-forward                                             (B, T, d_model)
        return self.sublayer3(x, self.feed_forward)


class Decoder(nn.Module):
    """A stack of ``n_layers`` decoder layers, then a final norm when ``final_norm`` (default: Pre-Norm only).

    Every layer attends to the same ``memory``, the encoder's final output.
    """

    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 norm_first: bool = False, activation: str = "relu", norm: str = "layer", eps: float = 1e-5,
                 final_norm: bool | None = None):
        super().__init__()
        if not isinstance(n_layers, int) or n_layers < 1:
            raise ValueError(f"n_layers must be a positive int, got {n_layers!r}")
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, n_heads, d_ff, dropout, norm_first, activation, norm, eps) for _ in range(n_layers)
        )
        use_final = norm_first if final_norm is None else final_norm
        self.norm = make_norm(norm, d_model, eps) if use_final else nn.Identity()

    def forward(self, x: torch.Tensor, memory: torch.Tensor, tgt_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, cache: KVCache | None = None) -> torch.Tensor:
        """x (B, T, d_model), memory (B, S, d_model) -> (B, T, d_model)."""
        if cache is not None and len(cache.layers) != len(self.layers):
            raise ValueError(f"cache has {len(cache.layers)} layers, the decoder has {len(self.layers)}")
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, tgt_mask, memory_mask, None if cache is None else cache.layers[i])
        return self.norm(x)


# [book/08_decoder.ipynb, cell 10]
def _copy_linear(dst: nn.Linear, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    dst.weight.copy_(weight)
    if (dst.bias is None) != (bias is None):
        raise ValueError("reference and model disagree on whether projections have biases")
    if bias is not None:
        dst.bias.copy_(bias)


def _copy_mha(dst: MultiHeadAttention, src: nn.MultiheadAttention) -> None:
    if src.in_proj_weight is None:
        raise ValueError("reference attention must have kdim = vdim = d_model (one in_proj_weight)")
    _copy_linear(dst.in_proj, src.in_proj_weight, src.in_proj_bias)
    _copy_linear(dst.out_proj, src.out_proj.weight, src.out_proj.bias)


def _copy_norm(dst: nn.Module, src: nn.LayerNorm) -> None:
    if not isinstance(src, nn.LayerNorm) or getattr(dst, "bias", None) is None:
        raise ValueError("both norms must be LayerNorms (norm='layer')")
    if getattr(dst, "eps", src.eps) != src.eps:
        raise ValueError(f"LayerNorm eps differs: reference {src.eps}, model {dst.eps}")
    dst.weight.copy_(src.weight)
    dst.bias.copy_(src.bias)


def _activation_name(src_layer: nn.Module) -> str | None:
    """"relu" or "gelu" for the activation of a PyTorch transformer layer, None for anything else."""
    act = src_layer.activation
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
        return "gelu"
    return None


def _copy_ffn(dst: PositionwiseFeedForward, src_layer: nn.Module) -> None:
    act = _activation_name(src_layer)
    if act != dst.activation_name:
        raise ValueError(f"activation differs: reference {act or src_layer.activation!r}, "
                         f"model {dst.activation_name!r}")
    _copy_linear(dst.linear1, src_layer.linear1.weight, src_layer.linear1.bias)
    _copy_linear(dst.linear2, src_layer.linear2.weight, src_layer.linear2.bias)


@torch.no_grad()
def load_torch_decoder_layer(layer: DecoderLayer, reference: nn.TransformerDecoderLayer) -> DecoderLayer:
    """Copy the weights of a ``torch.nn.TransformerDecoderLayer`` into ``layer`` and return it.

    The two must agree on d_model, n_heads, d_ff, activation, eps and ``norm_first``; ``reference`` must be
    batch_first. Afterwards both compute the same function (up to rounding).
    """
    if not reference.self_attn.batch_first:
        raise ValueError("reference must be built with batch_first=True")
    if reference.norm_first != layer.norm_first:
        raise ValueError(f"norm_first differs: reference {reference.norm_first}, model {layer.norm_first}")
    if (reference.self_attn.embed_dim, reference.self_attn.num_heads) != (layer.self_attn.d_model,
                                                                          layer.self_attn.n_heads):
        raise ValueError(f"reference has d_model={reference.self_attn.embed_dim}, "
                         f"n_heads={reference.self_attn.num_heads}; model has {layer.self_attn.d_model}, "
                         f"{layer.self_attn.n_heads}")
    if reference.linear1.out_features != layer.feed_forward.linear1.out_features:
        raise ValueError(f"d_ff differs: reference {reference.linear1.out_features}, "
                         f"model {layer.feed_forward.linear1.out_features}")
    _copy_mha(layer.self_attn, reference.self_attn)
    _copy_mha(layer.cross_attn, reference.multihead_attn)
    _copy_ffn(layer.feed_forward, reference)
    _copy_norm(layer.sublayer1.norm, reference.norm1)
    _copy_norm(layer.sublayer2.norm, reference.norm2)
    _copy_norm(layer.sublayer3.norm, reference.norm3)
    return layer


__all__ = ['KVCache', 'DecoderLayer', 'Decoder', 'load_torch_decoder_layer']
