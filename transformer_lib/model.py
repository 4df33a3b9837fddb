"""Generated from book/09_model.ipynb: edit the notebook, not this file.
Extended by book/appendix_marian.ipynb.

Regenerate with ``python tools/export.py``."""
# digest: bc095c2efb28e67c
# fmt: off

# [book/09_model.ipynb, cell c85a103b]
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from transformer_lib.checks import check_int, check_token_ids
from transformer_lib.cache import KVCache
from transformer_lib.decoder import Decoder, load_torch_decoder
from transformer_lib.embedding import TokenEmbedding
from transformer_lib.encoder import Encoder, LayerConfig, load_torch_encoder
from transformer_lib.masks import causal_mask, padding_mask_unchecked
from transformer_lib.model_size import check_model_fits
from transformer_lib.positional import PositionalEncoding
from transformer_lib.positional import POSITIONAL_LAYOUTS, half_layout
from transformer_lib.torch_weights import DecoderLayerParts, EncoderLayerParts
from transformer_lib.torch_weights import check_torch_stack, expect_parts, expect_torch


# [book/09_model.ipynb, cell af55530d]
def check_special_ids(config: Any, vocab_size: int, vocab_name: str = "vocab_size",
                      bos_may_be_pad: bool = True) -> None:
    """Check ``config.pad_id``, ``bos_id`` and ``eos_id`` and store them as ints: token
    ids below ``vocab_size`` (called ``vocab_name`` in the message); eos differs from
    pad and bos, which are never generated; bos from pad unless ``bos_may_be_pad``."""
    for name in ("pad_id", "bos_id", "eos_id"):
        value = check_int(getattr(config, name), name, minimum=0)
        if value >= vocab_size:
            raise ValueError(f"{name} must be a token id below {vocab_name}="
                             f"{vocab_size}, got {value!r}")
        setattr(config, name, value)
    pad, bos, eos = config.pad_id, config.bos_id, config.eos_id
    if eos in (pad, bos) or (pad == bos and not bos_may_be_pad):
        may = " (pad_id may equal bos_id)" if bos_may_be_pad else ""
        raise ValueError(f"eos_id ({eos}), pad_id ({pad}) and bos_id ({bos}) must "
                         f"differ{may}: "
                         "pad and bos are never generated, eos must be")


def check_transformer_config(c: Any) -> None:
    """The checks of :class:`TransformerConfig`, a function of its own so that a later
    page that adds fields can run them before its own: sizes, the layer options (chapter
    7's ``LayerConfig``), the two ties, the special ids. Normalises the fields."""
    for name in ("src_vocab_size", "tgt_vocab_size", "n_encoder_layers",
                 "n_decoder_layers", "max_len"):
        setattr(c, name, check_int(getattr(c, name), name))
    layer = LayerConfig.of(c)                   # chapter 7 checks the layer options
    for field in dataclasses.fields(layer):
        setattr(c, field.name, getattr(layer, field.name))
    for name in ("tie_output", "share_embeddings"):
        if not isinstance(getattr(c, name), bool):
            raise ValueError(f"{name} must be True or False, got {getattr(c, name)!r}")
    if c.share_embeddings and c.src_vocab_size != c.tgt_vocab_size:
        raise ValueError("share_embeddings needs src_vocab_size == tgt_vocab_size, "
                         f"got {c.src_vocab_size} and {c.tgt_vocab_size}")
    check_special_ids(c, min(c.src_vocab_size, c.tgt_vocab_size),
                      "both vocabularies' size")


# [book/09_model.ipynb, cell 98696042]
@dataclass
class TransformerConfig:
    """Every size and choice of a :class:`Transformer`; the defaults are the paper's
    base model.

    ``tie_output``: the output projection is the target embedding matrix (one tensor).
    ``share_embeddings``: the source and target embeddings are one matrix (needs one
    shared vocabulary). ``final_norm``: a norm after each stack; None means "with
    Pre-Norm only", as the paper's Post-Norm model has none. ``nn.Transformer`` always
    has them: set ``final_norm=True`` to match it. pad_id may equal bos_id (Marian
    starts from pad). JSON via :meth:`to_dict` / :meth:`from_dict`.
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

    # [book/appendix_marian.ipynb, cell 33a6284f]
    positional_layout: str = "interleaved"   # the sinusoids' column order, or "half"
    output_bias: bool = False                # a bias on the prediction head

    # [book/appendix_marian.ipynb, cell 33a6284f]
    def __post_init__(self) -> None:
        check_transformer_config(self)       # chapter 9's checks, then the new fields'
        if self.positional_layout not in POSITIONAL_LAYOUTS:
            raise ValueError(f"positional_layout must be one of {POSITIONAL_LAYOUTS}, "
                             f"got {self.positional_layout!r}")
        if not isinstance(self.output_bias, bool):
            raise ValueError(f"output_bias must be True or False, "
                             f"got {self.output_bias!r}")

    # [book/appendix_marian.ipynb, cell 33a6284f]
    def to_dict(self) -> dict:
        """The fields as a plain dict (JSON-serialisable). The two fields of the Marian
        appendix are left out while they hold the paper's values, so a model saved
        before they existed has the same dict."""
        d = dataclasses.asdict(self)
        for name, default in MARIAN_FIELDS.items():
            if d[name] == default:
                del d[name]
        return d

    # [book/09_model.ipynb, cell f33cd6c8]
    @classmethod
    def from_dict(cls, d: dict) -> TransformerConfig:
        """The inverse of :meth:`to_dict`; unknown keys raise a ValueError."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown TransformerConfig fields: {sorted(unknown)}")
        return cls(**d)


# [book/09_model.ipynb, cell 0867b346]
class Transformer(nn.Module):
    """The encoder-decoder Transformer of the paper, built from a
    :class:`TransformerConfig`.

    ``forward(src (B, S), tgt_in (B, T))`` returns logits (B, T, tgt_vocab_size): no
    softmax, which belongs to the loss (training) or to the decoding strategy
    (generation). ``encode`` and ``decode`` split the pass for step-by-step generation,
    with a :class:`~transformer_lib.cache.KVCache` from ``new_cache``. Masks are built
    from the ids (``config.pad_id``) on the ids' device.
    """

    # [book/appendix_marian.ipynb, cell 714bf34a]
    def __init__(self, config: TransformerConfig):
        super().__init__()
        missing = [f.name for f in dataclasses.fields(TransformerConfig)
                   if not hasattr(config, f.name) and f.name not in MARIAN_FIELDS]
        if missing:
            raise TypeError("config must be a TransformerConfig (or have its fields), "
                            f"got a {type(config).__name__} without "
                            f"{', '.join(missing)}")
        check_model_fits(config)                 # before anything is allocated
        c = self.config = config
        marian = {name: getattr(c, name, default)
                  for name, default in MARIAN_FIELDS.items()}
        self.src_embed = TokenEmbedding(c.src_vocab_size, c.d_model,
                                        padding_idx=c.pad_id)
        self.tgt_embed = (
            self.src_embed if c.share_embeddings
            else TokenEmbedding(c.tgt_vocab_size, c.d_model, padding_idx=c.pad_id))
        self.positional = PositionalEncoding(c.d_model, c.max_len, c.dropout)
        if marian["positional_layout"] == "half":            # Marian's column order
            self.positional.pe = half_layout(self.positional.pe)
        layer = LayerConfig.of(c)                # the options of every layer
        self.encoder = Encoder(layer, c.n_encoder_layers)
        self.decoder = Decoder(layer, c.n_decoder_layers)
        # the prediction head, with Marian's logits bias if asked for
        self.output = nn.Linear(c.d_model, c.tgt_vocab_size,
                                bias=bool(marian["output_bias"]))
        if c.tie_output:
            self.output.weight = self.tgt_embed.weight
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform for every projection matrix, as ``nn.Transformer`` and the
        reference implementations do; the embedding tables from N(0, 1/d_model) with a
        zero pad row (so that the embedding times sqrt(d_model) has unit variance, and a
        tied output layer gives logits of unit variance); biases zero in attention and
        in the prediction head, PyTorch's default elsewhere."""
        embeddings = {id(self.src_embed.weight), id(self.tgt_embed.weight)}
        for p in self.parameters():
            if p.dim() > 1 and id(p) not in embeddings:
                nn.init.xavier_uniform_(p)
        if self.output.bias is not None:
            nn.init.zeros_(self.output.bias)
        self.src_embed.reset_parameters()
        if self.tgt_embed is not self.src_embed:
            self.tgt_embed.reset_parameters()

    # [book/09_model.ipynb, cell 05b2945e]
    def encode(self, src: torch.Tensor,
               src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """src (B, S) ids -> memory (B, S, d_model). ``src_mask`` defaults to the
        padding mask of ``src``."""
        c = self.config
        check_ids(src, "src", c.src_vocab_size, c.max_len)
        return self._encode(src, src_mask)

    def _encode(self, src: torch.Tensor, src_mask: torch.Tensor | None) -> torch.Tensor:
        if src_mask is None:                                 # src is checked already
            src_mask = padding_mask_unchecked(src, self.config.pad_id)  # (B, 1, 1, S)
        x = self.positional(self.src_embed.lookup(src))              # (B, S, d_model)
        return self.encoder(x, src_mask)                             # (B, S, d_model)

    # [book/09_model.ipynb, cell ef335c04]
    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor,
               src_mask: torch.Tensor | None = None,
               cache: KVCache | None = None) -> torch.Tensor:
        """tgt_in (B, T) ids, memory (B, S, d_model) -> logits (B, T, tgt_vocab_size).

        ``src_mask`` is the source padding mask (B, 1, 1, S) that ``encode`` used; pass
        it whenever the source has padding. Without a cache, the target mask is causal
        only: ``tgt_in`` is right-padded (pads after every real token), so no real query
        can see a pad key, and a pad position's output is never used. With a ``cache``
        (see :meth:`new_cache`),
        ``tgt_in`` holds only the new positions: their keys and values join the cache,
        their positions continue from ``cache.length``, and they see every cached
        position (the target's padding is not masked: generation has none before a
        sentence ends).
        """
        start, c = 0 if cache is None else cache.length, self.config
        check_ids(tgt_in, "tgt_in", c.tgt_vocab_size, c.max_len, start)
        return self.decode_step(tgt_in, memory, src_mask, cache)

    def decode_step(self, tgt_in: torch.Tensor, memory: torch.Tensor,
                    src_mask: torch.Tensor | None = None,
                    cache: KVCache | None = None) -> torch.Tensor:
        """:meth:`decode` without its check of the ids: for a decoding loop that feeds
        the model its own choices, checked once at the door (chapter 11's stepper)."""
        T, start = tgt_in.size(1), 0 if cache is None else cache.length
        if cache is None:
            tgt_mask = causal_mask(T, device=tgt_in.device)           # (1, 1, T, T)
        elif T == 1:
            tgt_mask = None                              # one new query sees every key
        else:                                            # (1, 1, T, start + T)
            tgt_mask = causal_mask(start + T, device=tgt_in.device)[..., start:, :]
        x = self.positional(self.tgt_embed.lookup(tgt_in), start)     # (B, T, d_model)
        x = self.decoder(x, memory, tgt_mask, src_mask, cache)       # (B, T, d_model)
        return self.output(x)                                 # (B, T, tgt_vocab_size)

    def new_cache(self) -> KVCache:
        """An empty key/value cache for incremental decoding with :meth:`decode`."""
        return KVCache(self.config.n_decoder_layers)

    # [book/09_model.ipynb, cell b3314832]
    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """src (B, S), tgt_in (B, T) -> logits (B, T, tgt_vocab_size), in one pass
        (teacher forcing)."""
        c = self.config
        check_ids(src, "src", c.src_vocab_size, c.max_len)
        check_ids(tgt_in, "tgt_in", c.tgt_vocab_size, c.max_len)
        if src.size(0) != tgt_in.size(0):
            raise ValueError(f"src and tgt_in must have the same batch size, got "
                             f"{src.size(0)} and {tgt_in.size(0)}")
        src_mask = padding_mask_unchecked(src, c.pad_id)             # (B, 1, 1, S)
        memory = self._encode(src, src_mask)                         # (B, S, d_model)
        return self.decode_step(tgt_in, memory, src_mask)           # (B, T, V)

    @torch.no_grad()
    def attention_weights(self, src: torch.Tensor,
                          tgt_in: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        """Every attention map of one forward pass: {"encoder", "decoder", "cross"} ->
        one (B, h, Lq, Lk) tensor per layer (encoder self-attention, decoder
        self-attention, cross-attention). Call ``eval()`` first, or the maps include
        attention dropout."""
        enc: list[EncoderLayerParts] = [
            expect_parts(layer, EncoderLayerParts) for layer in self.encoder.layers]
        dec: list[DecoderLayerParts] = [
            expect_parts(layer, DecoderLayerParts) for layer in self.decoder.layers]
        groups = {"encoder": [layer.self_attn for layer in enc],
                  "decoder": [layer.self_attn for layer in dec],
                  "cross": [layer.cross_attn for layer in dec]}
        before = [(m, m.record_weights) for ms in groups.values() for m in ms]
        try:
            for m, _ in before:
                m.record_weights = True
            self(src, tgt_in)
        finally:
            for m, flag in before:
                m.record_weights = flag
        # every block recorded its weights in the pass above
        return {name: [m.last_weights for m in ms if m.last_weights is not None]
                for name, ms in groups.items()}


# [book/09_model.ipynb, cell 73d293d2]
def check_ids(ids: Any, name: str, vocab_size: int, max_len: int,
              start: int = 0) -> None:
    """A ValueError unless ``ids`` is a non-empty (B, L) integer tensor of ids in
    [0, vocab_size) that fits the positional table after ``start`` positions:
    ``start + L <= max_len``."""
    check_token_ids(ids, vocab_size, name, dims=2)
    if ids.size(0) == 0 or ids.size(1) == 0:
        raise ValueError(f"{name} is empty: shape {tuple(ids.shape)}, expected at "
                         "least one row and one position")
    if start + ids.size(1) > max_len:
        where = f" after {start} cached positions" if start else ""
        raise ValueError(f"{name} has length {ids.size(1)}{where}, longer than "
                         f"max_len={max_len}")


# [book/09_model.ipynb, cell b776b95f]
@torch.no_grad()
def load_torch_transformer(model: Transformer, reference: nn.Module) -> Transformer:
    """Copy the weights of a ``torch.nn.Transformer`` (batch_first) into ``model`` and
    return it.

    ``nn.Transformer`` holds only the two stacks, so ``model`` keeps its own embeddings,
    positional encoding and output layer; feed the reference
    ``model.positional(model.src_embed(src))`` (and the same for the target) and apply
    ``model.output`` to its result to compare. ``nn.Transformer`` always ends each stack
    with a LayerNorm, even in Post-Norm mode, so ``model`` must have them: build it with
    ``final_norm=True`` (the default with ``norm_first=True``). Sizes, norm mode,
    activation and eps must agree; anything else raises a ValueError.
    """
    ref = expect_torch(reference, nn.Transformer)
    encoder = expect_torch(ref.encoder, nn.TransformerEncoder)
    decoder = expect_torch(ref.decoder, nn.TransformerDecoder)
    check_torch_stack(model.encoder, encoder)
    check_torch_stack(model.decoder, decoder)
    load_torch_encoder(model.encoder, encoder)
    load_torch_decoder(model.decoder, decoder)
    return model


# [book/appendix_marian.ipynb, cell 98449ae6]
#: the fields the Marian appendix adds to TransformerConfig, at the paper's values: a
#: configuration saved without them reads back with these
MARIAN_FIELDS = {"positional_layout": "interleaved", "output_bias": False}


__all__ = ['TransformerConfig', 'Transformer', 'load_torch_transformer']
