"""Generated from book/09_model.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: ec9352d19950bec5
# fmt: off

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn

from transformer_lib.decoder import Decoder, KVCache
from transformer_lib.embedding import TokenEmbedding
from transformer_lib.encoder import Encoder
from transformer_lib.masks import causal_mask, padding_mask, target_mask
from transformer_lib.positional import PositionalEncoding


@dataclass
class TransformerConfig:
    """Every size and choice of a :class:`Transformer`. The defaults are the paper's base model."""

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    norm_first: bool = False
    activation: str = "relu"
    norm: str = "layer"
    eps: float = 1e-5
    max_len: int = 512
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    tie_output: bool = True          # target embedding = output projection (transposed)
    share_embeddings: bool = False   # source embedding = target embedding (needs one shared vocabulary)
    final_norm: bool | None = None   # norm after each stack; None: only with Pre-Norm (as the paper)

    def __post_init__(self):
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "n_encoder_layers",
                     "n_decoder_layers", "d_ff", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError("share_embeddings needs src_vocab_size == tgt_vocab_size, got "
                             f"{self.src_vocab_size} and {self.tgt_vocab_size}")
        for name in ("pad_id", "bos_id", "eos_id"):
            value = getattr(self, name)
            if not 0 <= value < min(self.src_vocab_size, self.tgt_vocab_size):
                raise ValueError(f"{name} must be a valid token id of both vocabularies, got {value}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TransformerConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown TransformerConfig fields: {sorted(unknown)}")
        return cls(**d)


class Transformer(nn.Module):
    """The encoder-decoder Transformer. forward(src (B, S), tgt_in (B, T)) -> logits (B, T, tgt_vocab_size)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        c = self.config = config
        self.src_embed = TokenEmbedding(c.src_vocab_size, c.d_model, padding_idx=c.pad_id)
        self.tgt_embed = self.src_embed if c.share_embeddings else TokenEmbedding(c.tgt_vocab_size, c.d_model, padding_idx=c.pad_id)
        self.positional = PositionalEncoding(c.d_model, c.max_len, c.dropout)
        kw = dict(d_model=c.d_model, n_heads=c.n_heads, d_ff=c.d_ff, dropout=c.dropout, norm_first=c.norm_first,
                  activation=c.activation, norm=c.norm, eps=c.eps, final_norm=c.final_norm)
        self.encoder = Encoder(c.n_encoder_layers, **kw)
        self.decoder = Decoder(c.n_decoder_layers, **kw)
        self.output = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        self.reset_parameters()
        if c.tie_output:
            self.output.weight = self.tgt_embed.weight

    def reset_parameters(self) -> None:
        """Xavier-uniform for every projection matrix; N(0, d_model^-1/2) for embeddings, pad row zero."""
        for name, p in self.named_parameters():
            if p.dim() > 1 and "embed" not in name:
                nn.init.xavier_uniform_(p)
        for emb in {id(self.src_embed): self.src_embed, id(self.tgt_embed): self.tgt_embed}.values():
            nn.init.normal_(emb.weight, mean=0.0, std=self.config.d_model ** -0.5)
            with torch.no_grad():
                emb.weight[self.config.pad_id].zero_()

    def _check_ids(self, ids: torch.Tensor, name: str) -> None:
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
            raise ValueError(f"{name} must be a (B, L) tensor of token ids, got "
                             f"{tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__}")
        if ids.size(0) == 0 or ids.size(1) == 0:
            raise ValueError(f"{name} is empty: shape {tuple(ids.shape)}")
        if ids.size(1) > self.config.max_len:
            raise ValueError(f"{name} has length {ids.size(1)}, longer than max_len={self.config.max_len}")

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """src (B, S) -> memory (B, S, d_model)."""
        self._check_ids(src, "src")
        if src_mask is None:
            src_mask = padding_mask(src, self.config.pad_id)
        return self.encoder(self.positional(self.src_embed(src)), src_mask)

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor | None = None,
               cache: KVCache | None = None) -> torch.Tensor:
        """tgt_in (B, T), memory (B, S, d) -> logits (B, T, tgt_vocab_size).

        With a ``cache`` (see :meth:`new_cache`), ``tgt_in`` holds only the new positions; their keys and
        values are added to the cache and the positions continue from ``cache.length``.
        """
        self._check_ids(tgt_in, "tgt_in")
        start = 0 if cache is None else cache.length
        T = tgt_in.size(1)
        if cache is None:
            tgt_mask = target_mask(tgt_in, self.config.pad_id)
        elif T == 1:
            tgt_mask = None                      # one new query may see every cached key
        else:
            tgt_mask = causal_mask(start + T, device=tgt_in.device)[..., start:, :]
        x = self.positional(self.tgt_embed(tgt_in), start_pos=start)
        x = self.decoder(x, memory, tgt_mask, src_mask, cache)
        return self.output(x)

    def new_cache(self) -> KVCache:
        """An empty key/value cache for incremental decoding with :meth:`decode`."""
        return KVCache(self.config.n_decoder_layers)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        src_mask = padding_mask(src, self.config.pad_id) if isinstance(src, torch.Tensor) and src.dim() == 2 else None
        memory = self.encode(src, src_mask)
        return self.decode(tgt_in, memory, src_mask)


def _copy_mha(dst, src: nn.MultiheadAttention) -> None:
    dst.in_proj.weight.copy_(src.in_proj_weight)
    dst.in_proj.bias.copy_(src.in_proj_bias)
    dst.out_proj.weight.copy_(src.out_proj.weight)
    dst.out_proj.bias.copy_(src.out_proj.bias)


def _copy_norm(dst, src: nn.LayerNorm) -> None:
    dst.weight.copy_(src.weight)
    dst.bias.copy_(src.bias)


def _copy_ffn(dst, src_layer) -> None:
    for name in ("linear1", "linear2"):
        getattr(dst, name).weight.copy_(getattr(src_layer, name).weight)
        getattr(dst, name).bias.copy_(getattr(src_layer, name).bias)


@torch.no_grad()
def load_torch_transformer(model: "Transformer", reference: nn.Transformer) -> "Transformer":
    """Copy the weights of a ``torch.nn.Transformer`` (batch_first) into ``model`` and return it.

    ``nn.Transformer`` holds only the two stacks; ``model`` keeps its own embeddings, positional
    encoding and output layer. ``nn.Transformer`` always ends each stack with a LayerNorm, so ``model``
    must be built with ``final_norm=True`` (automatic with Pre-Norm).
    """
    c = model.config
    if not reference.batch_first:
        raise ValueError("reference must be built with batch_first=True")
    enc_layers, dec_layers = reference.encoder.layers, reference.decoder.layers
    if len(enc_layers) != c.n_encoder_layers or len(dec_layers) != c.n_decoder_layers:
        raise ValueError(f"layer counts differ: reference has {len(enc_layers)} + {len(dec_layers)}, "
                         f"model has {c.n_encoder_layers} + {c.n_decoder_layers}")
    if reference.d_model != c.d_model or reference.nhead != c.n_heads:
        raise ValueError(f"reference has d_model={reference.d_model}, n_heads={reference.nhead}; "
                         f"model has {c.d_model}, {c.n_heads}")
    if isinstance(model.encoder.norm, nn.Identity) or isinstance(model.decoder.norm, nn.Identity):
        raise ValueError("nn.Transformer ends each stack with a LayerNorm: build the model with final_norm=True")
    if c.norm != "layer":
        raise ValueError(f"nn.Transformer uses LayerNorm; the model has norm={c.norm!r}")
    for src_layer, dst in zip(enc_layers, model.encoder.layers):
        if src_layer.norm_first != c.norm_first:
            raise ValueError(f"reference norm_first={src_layer.norm_first}, model norm_first={c.norm_first}")
        _copy_mha(dst.self_attn, src_layer.self_attn)
        _copy_ffn(dst.feed_forward, src_layer)
        _copy_norm(dst.sublayer1.norm, src_layer.norm1)
        _copy_norm(dst.sublayer2.norm, src_layer.norm2)
    for src_layer, dst in zip(dec_layers, model.decoder.layers):
        _copy_mha(dst.self_attn, src_layer.self_attn)
        _copy_mha(dst.cross_attn, src_layer.multihead_attn)
        _copy_ffn(dst.feed_forward, src_layer)
        _copy_norm(dst.sublayer1.norm, src_layer.norm1)
        _copy_norm(dst.sublayer2.norm, src_layer.norm2)
        _copy_norm(dst.sublayer3.norm, src_layer.norm3)
    _copy_norm(model.encoder.norm, reference.encoder.norm)
    _copy_norm(model.decoder.norm, reference.decoder.norm)
    return model


__all__ = ['TransformerConfig', 'Transformer', 'load_torch_transformer']
