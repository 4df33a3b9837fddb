"""Generated from book/09_model.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 3d00772ac94c533f
# fmt: off

# [book/09_model.ipynb, cell 5]
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import nn

from transformer_lib.decoder import Decoder, KVCache, _copy_ffn, _copy_mha, _copy_norm, load_torch_decoder_layer
from transformer_lib.checks import check_token_ids
from transformer_lib.embedding import TokenEmbedding
from transformer_lib.encoder import Encoder
from transformer_lib.feed_forward import ACTIVATIONS
from transformer_lib.masks import causal_mask, padding_mask, target_mask
from transformer_lib.positional import PositionalEncoding


@dataclass
class TransformerConfig:
    """Every size and choice of a :class:`Transformer`. The defaults are the paper's base model.

    ``tie_output``: the output projection is the target embedding matrix (one tensor).
    ``share_embeddings``: the source and target embeddings are one matrix (needs one shared vocabulary).
    ``final_norm``: a norm after each stack; None means "with Pre-Norm only", as the paper's Post-Norm
    model has none. ``nn.Transformer`` always has them: set ``final_norm=True`` to match it.
    Round-trips through JSON with :meth:`to_dict` / :meth:`from_dict`.
    """

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
    tie_output: bool = True
    share_embeddings: bool = False
    final_norm: bool | None = None

    def __post_init__(self):
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "n_encoder_layers",
                     "n_decoder_layers", "d_ff", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if not isinstance(self.dropout, (int, float)) or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")
        if self.norm not in ("layer", "rms"):
            raise ValueError(f"norm must be 'layer' or 'rms', got {self.norm!r}")
        if not isinstance(self.eps, (int, float)) or not self.eps > 0:
            raise ValueError(f"eps must be a positive number, got {self.eps!r}")
        for name in ("norm_first", "tie_output", "share_embeddings"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if not (self.final_norm is None or isinstance(self.final_norm, bool)):
            raise ValueError(f"final_norm must be None, True or False, got {self.final_norm!r}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError("share_embeddings needs src_vocab_size == tgt_vocab_size, got "
                             f"{self.src_vocab_size} and {self.tgt_vocab_size}")
        for name in ("pad_id", "bos_id", "eos_id"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value < min(self.src_vocab_size, self.tgt_vocab_size):
                raise ValueError(f"{name} must be a token id of both vocabularies, "
                                 f"[0, {min(self.src_vocab_size, self.tgt_vocab_size)}), got {value!r}")
        if self.pad_id in (self.bos_id, self.eos_id):
            raise ValueError(f"pad_id ({self.pad_id}) must differ from bos_id ({self.bos_id}) and eos_id "
                             f"({self.eos_id}): padding is masked out, bos and eos are not")

    def to_dict(self) -> dict:
        """The fields as a plain dict (JSON-serialisable)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TransformerConfig":
        """The inverse of :meth:`to_dict`; unknown keys raise a ValueError."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown TransformerConfig fields: {sorted(unknown)}")
        return cls(**d)


class Transformer(nn.Module):
    """The encoder-decoder Transformer of the paper, built from a :class:`TransformerConfig`.

    ``forward(src (B, S), tgt_in (B, T))`` returns logits (B, T, tgt_vocab_size): no softmax, which belongs
    to the loss (training) or to the decoding strategy (generation). ``encode`` and ``decode`` split the
    pass for step-by-step generation, with a :class:`~transformer_lib.decoder.KVCache` from ``new_cache``.
    Masks are built from the ids (``config.pad_id``) on the ids' device.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
        c = self.config = config
        self.src_embed = TokenEmbedding(c.src_vocab_size, c.d_model, padding_idx=c.pad_id)
        self.tgt_embed = (self.src_embed if c.share_embeddings
                          else TokenEmbedding(c.tgt_vocab_size, c.d_model, padding_idx=c.pad_id))
        self.positional = PositionalEncoding(c.d_model, c.max_len, c.dropout)   # one table for both sides
        kw = dict(d_model=c.d_model, n_heads=c.n_heads, d_ff=c.d_ff, dropout=c.dropout, norm_first=c.norm_first,
                  activation=c.activation, norm=c.norm, eps=c.eps, final_norm=c.final_norm)
        self.encoder = Encoder(c.n_encoder_layers, **kw)
        self.decoder = Decoder(c.n_decoder_layers, **kw)
        self.output = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)       # the prediction head
        if c.tie_output:
            self.output.weight = self.tgt_embed.weight                         # one (V, d_model) tensor
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform for every projection matrix, as ``nn.Transformer`` and the reference implementations
        do; the embedding tables from N(0, 1/d_model) with a zero pad row (so that the embedding times
        sqrt(d_model) has unit variance, and a tied output layer gives logits of unit variance); biases zero
        in attention and PyTorch's default elsewhere."""
        embeddings = {id(self.src_embed.weight), id(self.tgt_embed.weight)}
        for p in self.parameters():
            if p.dim() > 1 and id(p) not in embeddings:
                nn.init.xavier_uniform_(p)
        self.src_embed.reset_parameters()
        if self.tgt_embed is not self.src_embed:
            self.tgt_embed.reset_parameters()

    def _check_ids(self, ids: torch.Tensor, name: str, vocab_size: int, start: int = 0) -> None:
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
            got = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
            raise ValueError(f"{name} must be a (B, L) tensor of token ids, got {got}")
        if ids.size(0) == 0 or ids.size(1) == 0:
            raise ValueError(f"{name} is empty: shape {tuple(ids.shape)}, expected at least one row and one position")
        if start + ids.size(1) > self.config.max_len:
            where = f" after {start} cached positions" if start else ""
            raise ValueError(f"{name} has length {ids.size(1)}{where}, longer than max_len={self.config.max_len}")
        check_token_ids(ids, vocab_size, name)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """src (B, S) ids -> memory (B, S, d_model). ``src_mask`` defaults to the padding mask of ``src``."""
        self._check_ids(src, "src", self.config.src_vocab_size)
        return self._encode(src, src_mask)

    def _encode(self, src: torch.Tensor, src_mask: torch.Tensor | None) -> torch.Tensor:
        if src_mask is None:
            src_mask = padding_mask(src, self.config.pad_id)                   # (B, 1, 1, S)
        x = self.positional(self.src_embed(src))                               # (B, S, d_model)
        return self.encoder(x, src_mask)                                       # (B, S, d_model)

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor | None = None,
               cache: KVCache | None = None) -> torch.Tensor:
        """tgt_in (B, T) ids, memory (B, S, d_model) -> logits (B, T, tgt_vocab_size).

        ``src_mask`` is the source padding mask (B, 1, 1, S) that ``encode`` used; pass it whenever the
        source has padding. Without a cache, the target mask (padding AND causal) is built from ``tgt_in``.
        With a ``cache`` (see :meth:`new_cache`), ``tgt_in`` holds only the new positions: their keys and
        values join the cache, their positions continue from ``cache.length``, and they see every cached
        position (the target's padding is not masked: generation has none before a sentence ends).
        """
        start = 0 if cache is None else cache.length
        self._check_ids(tgt_in, "tgt_in", self.config.tgt_vocab_size, start)
        B, T = tgt_in.shape
        if not isinstance(memory, torch.Tensor) or memory.dim() != 3 or memory.size(0) != B \
                or memory.size(2) != self.config.d_model:
            got = tuple(memory.shape) if isinstance(memory, torch.Tensor) else type(memory).__name__
            raise ValueError(f"memory must have shape ({B}, S, {self.config.d_model}), got {got}")
        if cache is None:
            tgt_mask = target_mask(tgt_in, self.config.pad_id)                 # (B, 1, T, T)
        elif T == 1:
            tgt_mask = None                                                    # one new query sees every key
        else:
            tgt_mask = causal_mask(start + T, device=tgt_in.device)[..., start:, :]   # (1, 1, T, start + T)
        x = self.positional(self.tgt_embed(tgt_in), start_pos=start)           # (B, T, d_model)
        x = self.decoder(x, memory, tgt_mask, src_mask, cache)                 # (B, T, d_model)
        return self.output(x)                                                  # (B, T, tgt_vocab_size)

    def new_cache(self) -> KVCache:
        """An empty key/value cache for incremental decoding with :meth:`decode`."""
        return KVCache(self.config.n_decoder_layers)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """src (B, S), tgt_in (B, T) -> logits (B, T, tgt_vocab_size), in one pass (teacher forcing)."""
        self._check_ids(src, "src", self.config.src_vocab_size)
        src_mask = padding_mask(src, self.config.pad_id)                       # (B, 1, 1, S)
        memory = self._encode(src, src_mask)                                   # (B, S, d_model)
        return self.decode(tgt_in, memory, src_mask)

    @torch.no_grad()
    def attention_weights(self, src: torch.Tensor, tgt_in: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        """Every attention map of one forward pass: {"encoder", "decoder", "cross"} -> one (B, h, Lq, Lk) tensor
        per layer (encoder self-attention, decoder self-attention, cross-attention). Call ``eval()`` first,
        or the maps include attention dropout."""
        groups = {"encoder": [layer.self_attn for layer in self.encoder.layers],
                  "decoder": [layer.self_attn for layer in self.decoder.layers],
                  "cross": [layer.cross_attn for layer in self.decoder.layers]}
        before = [(m, m.record_weights) for ms in groups.values() for m in ms]
        try:
            for m, _ in before:
                m.record_weights = True
            self(src, tgt_in)
        finally:
            for m, flag in before:
                m.record_weights = flag
        return {name: [m.last_weights for m in ms] for name, ms in groups.items()}


# [book/09_model.ipynb, cell 7]
@torch.no_grad()
def load_torch_transformer(model: Transformer, reference: nn.Transformer) -> Transformer:
    """Copy the weights of a ``torch.nn.Transformer`` (batch_first) into ``model`` and return it.

    ``nn.Transformer`` holds only the two stacks, so ``model`` keeps its own embeddings, positional encoding
    and output layer; feed the reference ``model.positional(model.src_embed(src))`` (and the same for the
    target) and apply ``model.output`` to its result to compare. ``nn.Transformer`` always ends each stack
    with a LayerNorm, even in Post-Norm mode, so ``model`` must have them: build it with
    ``final_norm=True`` (the default with ``norm_first=True``). Sizes, norm mode, activation and eps must
    agree; anything else raises a ValueError.
    """
    c = model.config
    if not isinstance(reference, nn.Transformer):
        raise TypeError(f"reference must be a torch.nn.Transformer, got {type(reference).__name__}")
    if not reference.batch_first:
        raise ValueError("reference must be built with batch_first=True")
    enc_layers, dec_layers = reference.encoder.layers, reference.decoder.layers
    if len(enc_layers) != c.n_encoder_layers or len(dec_layers) != c.n_decoder_layers:
        raise ValueError(f"layer counts differ: reference has {len(enc_layers)} + {len(dec_layers)}, "
                         f"model has {c.n_encoder_layers} + {c.n_decoder_layers}")
    if reference.d_model != c.d_model or reference.nhead != c.n_heads:
        raise ValueError(f"reference has d_model={reference.d_model}, n_heads={reference.nhead}; "
                         f"model has {c.d_model}, {c.n_heads}")
    if c.norm != "layer":
        raise ValueError(f"nn.Transformer uses LayerNorm; the model has norm={c.norm!r}")
    if isinstance(model.encoder.norm, nn.Identity) or isinstance(model.decoder.norm, nn.Identity):
        raise ValueError("nn.Transformer ends each stack with a LayerNorm: build the model with final_norm=True")
    if enc_layers[0].norm_first != c.norm_first:
        raise ValueError(f"norm_first differs: reference {enc_layers[0].norm_first}, model {c.norm_first}")
    if enc_layers[0].linear1.out_features != c.d_ff:
        raise ValueError(f"d_ff differs: reference {enc_layers[0].linear1.out_features}, model {c.d_ff}")
    for src_layer, dst in zip(enc_layers, model.encoder.layers):
        _copy_mha(dst.self_attn, src_layer.self_attn)
        _copy_ffn(dst.feed_forward, src_layer)
        _copy_norm(dst.sublayer1.norm, src_layer.norm1)
        _copy_norm(dst.sublayer2.norm, src_layer.norm2)
    for src_layer, dst in zip(dec_layers, model.decoder.layers):
        load_torch_decoder_layer(dst, src_layer)
    _copy_norm(model.encoder.norm, reference.encoder.norm)
    _copy_norm(model.decoder.norm, reference.decoder.norm)
    return model


__all__ = ['TransformerConfig', 'Transformer', 'load_torch_transformer']
