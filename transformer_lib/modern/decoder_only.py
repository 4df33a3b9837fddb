"""Generated from book/13_modern.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 2e7ab3670f682d33
# fmt: off

# [book/13_modern.ipynb, cell 96baa493]
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lib.attention import MultiHeadAttention, check_heads
from transformer_lib.checks import check_float, check_int, check_probability
from transformer_lib.cache import KVCache, LayerCache
from transformer_lib.embedding import TokenEmbedding
from transformer_lib.feed_forward import PositionwiseFeedForward, swiglu_width
from transformer_lib.model import check_special_ids
from transformer_lib.norm import SublayerConnection, make_norm
from transformer_lib.positional import LearnedPositionalEncoding, PositionalEncoding
from transformer_lib.decoding.loop import forbid_specials
from transformer_lib.modern.rope import ROPE_LAYOUTS, RotaryEmbedding

#: the ``positions`` choices of :class:`DecoderOnlyConfig`
POSITIONS = ("rope", "sinusoidal", "learned", "none")


def _check_config(c: DecoderOnlyConfig) -> None:
    """Check a :class:`DecoderOnlyConfig` and fill in its defaults that depend on
    other fields (``d_ff``, ``embed_scale``)."""
    for name in ("vocab_size", "n_layers", "max_len"):
        setattr(c, name, check_int(getattr(c, name), name))
    c.d_model, c.n_heads = check_heads(c.d_model, c.n_heads)    # chapter 3's rule
    for name, value, allowed in (("positions", c.positions, POSITIONS),
                                 ("rope_layout", c.rope_layout, ROPE_LAYOUTS)):
        if value not in allowed:
            raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    if c.positions == "rope" and (c.d_model // c.n_heads) % 2:
        raise ValueError(f"RoPE rotates pairs: the head width d_model // n_heads "
                         f"must be even, got {c.d_model // c.n_heads}")
    if c.d_ff is None:
        c.d_ff = (swiglu_width(4 * c.d_model) if c.activation == "swiglu"
                  else 4 * c.d_model)
    c.d_ff = check_int(c.d_ff, "d_ff")
    if c.embed_scale is None:
        c.embed_scale = c.positions == "sinusoidal"
    if not isinstance(c.prefix_lm, bool):
        raise ValueError(f"prefix_lm must be True or False, got {c.prefix_lm!r}")
    c.dropout = check_probability(c.dropout, "dropout", one=False)
    c.rope_base = check_float(c.rope_base, "rope_base", 1.0, low_open=True)
    c.eps = check_float(c.eps, "eps", 0.0, low_open=True, high_open=True)
    # chapter 9's rule, and bos is the separator: it may not be the padding
    check_special_ids(c, c.vocab_size, bos_may_be_pad=False)


# [book/13_modern.ipynb, cell 2aaa4ef9]
@dataclass
class DecoderOnlyConfig:
    """The settings of a :class:`DecoderOnlyLM`. Defaults: a Llama-style model (RoPE,
    RMSNorm, Pre-Norm, SwiGLU, no biases, tied embeddings).

    ``d_ff=None``: the SwiGLU width of a plain FFN of 4·d_model (``swiglu_width``), or
    4·d_model for a plain activation. ``n_kv_heads=None``: ordinary multi-head
    attention. ``max_len``: the longest sequence (prompt and continuation; the
    positional table of "sinusoidal" and "learned"). ``rope_layout``: "interleaved"
    pairs (2j, 2j+1), "half" pairs (j, j + d/2) as Llama's checkpoints do. The ids
    ``pad_id`` (padding, anywhere), ``bos_id`` (the separator that ends a prompt and
    starts the continuation) and ``eos_id`` must differ. ``embed_scale``: chapter 1's
    ``TokenEmbedding`` (× √d_model, the paper's scale, next to a sinusoidal table of
    amplitude 1) instead of a plain ``nn.Embedding`` of std 0.02 (GPT, Llama); None:
    scaled for ``positions="sinusoidal"`` only. ``prefix_lm``: ``forward(src, tgt_in)``
    and the stepper let the source (the prompt) attend both ways, T5's prefix LM;
    the target stays causal."""

    vocab_size: int
    d_model: int = 256
    n_heads: int = 4
    n_layers: int = 4
    n_kv_heads: int | None = None
    d_ff: int | None = None
    dropout: float = 0.0
    max_len: int = 512
    positions: str = "rope"
    rope_base: float = 10000.0
    rope_layout: str = "interleaved"
    activation: str = "swiglu"
    norm: str = "rms"
    eps: float = 1e-6
    bias: bool = False
    tie_embeddings: bool = True
    embed_scale: bool | None = None
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    prefix_lm: bool = False

    def __post_init__(self) -> None:
        _check_config(self)

    @property
    def src_vocab_size(self) -> int:       # what the decoders of chapter 11 read
        return self.vocab_size

    @property
    def tgt_vocab_size(self) -> int:
        return self.vocab_size

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# [book/13_modern.ipynb, cell 6372f49b]
class DecoderOnlyBlock(nn.Module):
    """One Pre-Norm block: x + attn(norm(x)), then x + FFN(norm(x)); chapter 3's
    attention (with ``n_kv_heads``), chapter 5's FFN, chapter 6's sublayers.

    ``forward(x (B, L, d), mask, rotary=None, cache=None)``: ``mask`` (B|1, 1, L, Lk)
    boolean, True = may attend; ``rotary`` rotates queries and new keys (RoPE);
    ``cache`` is one entry of ``KVCache.layers`` (its ``self_attn`` cache is used)."""

    def __init__(self, c: DecoderOnlyConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(c.d_model, c.n_heads, c.dropout, c.bias,
                                            n_kv_heads=c.n_kv_heads)
        d_ff = check_int(c.d_ff, "d_ff")                   # set by the config
        self.feed_forward = PositionwiseFeedForward(c.d_model, d_ff, c.dropout,
                                                    c.activation, c.bias)
        self.sublayer1 = SublayerConnection(c.d_model, c.dropout, True, c.norm, c.eps)
        self.sublayer2 = SublayerConnection(c.d_model, c.dropout, True, c.norm, c.eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                rotary: Callable[[torch.Tensor], torch.Tensor] | None = None,
                cache: LayerCache | None = None) -> torch.Tensor:
        sc = None if cache is None else cache.self_attn
        x = self.sublayer1(
            x, lambda y: self.self_attn(y, mask=mask, cache=sc, rotary=rotary))
        return self.sublayer2(x, self.feed_forward)                 # (B, L, d)


# [book/13_modern.ipynb, cell 21f666f4]
def lm_positions(real: torch.Tensor) -> torch.Tensor:
    """Positions of a padded batch: real (B, L) True at real tokens -> (B, L), each real
    token's index among its row's real tokens (a pad repeats the last one; it is
    masked anyway). So a row's positions do not depend on where its padding is."""
    return (real.long().cumsum(dim=1) - 1).clamp(min=0)


def lm_mask(real: torch.Tensor, n_new: int, prefix: int = 0) -> torch.Tensor:
    """The mask of the last ``n_new`` positions of real (B, L): causal, and no pad key;
    the first ``prefix`` positions are keys for every query (a prefix LM: the prefix
    reads itself both ways). -> (B, 1, n_new, L), True = may attend."""
    L = real.size(1)
    causal = torch.ones(n_new, L, dtype=torch.bool, device=real.device).tril(L - n_new)
    causal[:, :prefix] = True
    return causal[None, None] & real[:, None, None, :]


class DecoderOnlyLM(nn.Module):
    """A decoder-only language model (GPT/Llama-style) from the book's blocks.

    ``lm(ids)``: ids (B, L), padding (``pad_id``) anywhere -> logits (B, L, V), each
    position predicting the next token. ``forward(src, tgt_in)`` reads the source, the
    separator ``bos_id`` (tgt_in's first token) and the target as one sequence and
    returns the logits of the target positions only (B, T, V): chapter 10's
    ``train`` and loss then train it on the target only, like the encoder-decoder.
    ``stepper(prompt, use_cache)`` lets chapter 11's decoders continue a prompt."""

    def __init__(self, config: DecoderOnlyConfig):
        super().__init__()
        if not isinstance(config, DecoderOnlyConfig):
            raise TypeError("config must be a DecoderOnlyConfig "
                            "(DecoderOnlyConfig(**d) builds one from a dict d), "
                            f"got a {type(config).__name__}")
        c = self.config = config
        self.embed: nn.Embedding | TokenEmbedding               # (B, L) -> (B, L, d)
        if c.embed_scale:
            self.embed = TokenEmbedding(c.vocab_size, c.d_model)      # × √d_model
        else:
            self.embed = nn.Embedding(c.vocab_size, c.d_model)        # GPT, Llama
            nn.init.normal_(self.embed.weight, std=0.02)
        self.position: PositionalEncoding | LearnedPositionalEncoding | None = None
        if c.positions == "sinusoidal":
            self.position = PositionalEncoding(c.d_model, c.max_len)
        elif c.positions == "learned":
            self.position = LearnedPositionalEncoding(c.d_model, c.max_len)
        self.rope = (RotaryEmbedding(c.d_model // c.n_heads, c.rope_base, c.max_len,
                                     c.rope_layout) if c.positions == "rope" else None)
        self.blocks = nn.ModuleList(DecoderOnlyBlock(c) for _ in range(c.n_layers))
        self.norm = make_norm(c.norm, c.d_model, c.eps)
        self.lm_head = (None if c.tie_embeddings
                        else nn.Linear(c.d_model, c.vocab_size, bias=False))
        if self.lm_head is not None:
            nn.init.normal_(self.lm_head.weight, std=0.02)

    def new_cache(self) -> KVCache:
        """Chapter 8's cache, self-attention keys and values only, one per block."""
        return KVCache(len(self.blocks), cross=False)

    # [book/13_modern.ipynb, cell 020c611d]
    def _add_positions(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        if self.position is None:
            return x
        if positions.numel() and int(positions.max()) >= self.config.max_len:  # 1 sync
            raise ValueError(f"a position reaches {int(positions.max())}, beyond the "
                             f"table (max_len={self.config.max_len})")
        if isinstance(self.position, PositionalEncoding):
            table = self.position.pe                              # (max_len, d)
        else:
            table = self.position.table.weight
        return x + table[positions].to(x.dtype)                   # (B, L, d)

    def hidden(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
               cache: KVCache | None = None) -> torch.Tensor:
        """The final-norm states (B, L, d) of ids (B, L) at ``positions`` (B, L) under
        ``mask`` (B, 1, L, Lk); with ``cache``, keys/values of earlier calls come
        first."""
        x = self._add_positions(self.embed(ids), positions)       # (B, L, d)
        rotary = None if self.rope is None else self.rope.rotation(positions)
        for i, block in enumerate(self.blocks):
            x = block(x, mask, rotary, None if cache is None else cache.layers[i])
        return self.norm(x)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """(…, d) -> (…, V): the output layer, the embedding matrix when tied."""
        if self.lm_head is None:
            return F.linear(h, self.embed.weight)
        return self.lm_head(h)

    def _check(self, ids: torch.Tensor, name: str, shape: str = "(B, L)") -> None:
        V = self.config.vocab_size
        if (not isinstance(ids, torch.Tensor) or ids.dim() != 2
                or ids.dtype.is_floating_point or ids.dtype == torch.bool):
            raise ValueError(f"{name} must be a {shape} tensor of token ids")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= V):
            raise ValueError(f"{name} holds ids outside [0, {V})")

    def lm(self, ids: torch.Tensor, first: int = 0, prefix: int = 0) -> torch.Tensor:
        """ids (B, L) -> next-token logits (B, L - first, V) of positions ``first`` on
        (all by default); pad tokens are never attended; the first ``prefix``
        positions attend to each other both ways (a prefix LM)."""
        self._check(ids, "ids")
        return self._lm(ids, first, prefix)

    def _lm(self, ids: torch.Tensor, first: int, prefix: int) -> torch.Tensor:
        real = ids != self.config.pad_id              # ids checked by the caller
        h = self.hidden(ids, lm_positions(real), lm_mask(real, ids.size(1), prefix))
        return self.logits(h[:, first:])              # no logits for unused positions

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """src (B, S), tgt_in (B, T) starting with bos -> logits (B, T, V) of the
        target positions of the sequence src ‖ tgt_in; with ``prefix_lm`` the source
        positions attend to the whole source."""
        self._check(src, "src", "(B, S)")
        self._check(tgt_in, "tgt_in", "(B, T)")
        if src.size(0) != tgt_in.size(0):
            raise ValueError(f"src and tgt_in must have the same batch size, got "
                             f"{src.size(0)} and {tgt_in.size(0)}")
        S = src.size(1)
        return self._lm(torch.cat([src, tgt_in], dim=1), first=S,
                        prefix=S if self.config.prefix_lm else 0)

    # [book/13_modern.ipynb, cell 454a3d92]
    def stepper(self, prompt: torch.Tensor,
                use_cache: bool = True) -> PromptStepper:
        """What chapter 11's ``make_stepper`` calls: greedy_decode, beam_search and
        sample then continue ``prompt`` (B, P) after the separator bos."""
        return PromptStepper(self, prompt, use_cache)


# [book/13_modern.ipynb, cell f58b3a19]
class PromptStepper:
    """Chapter 11's stepper protocol for a :class:`DecoderOnlyLM`: continue the prompts
    (B, P) (padded anywhere, usually at the end). ``step(ys)``: ys (N, t) bos first ->
    the logits of the next token (N, V), float32, pad and bos at -inf. With the cache
    the prompt is run once (the prefill) and each step feeds one token; without it
    every step runs prompt ‖ ys whole. The padding mask and the positions come from the
    real tokens only, so a row's continuation does not depend on its batch. With
    ``prefix_lm`` the prompt attends to itself both ways (in the prefill, once)."""

    def __init__(self, model: DecoderOnlyLM, prompt: torch.Tensor, use_cache: bool):
        c = model.config
        self.model, self.prompt, self.pad = model, prompt, c.pad_id
        self.prefix = prompt.size(1) if c.prefix_lm else 0
        self.cache = model.new_cache() if use_cache else None
        if self.cache is not None:                                 # the prefill
            real = prompt != c.pad_id
            model.hidden(prompt, lm_positions(real),
                         lm_mask(real, prompt.size(1), self.prefix), self.cache)

    def step(self, ys: torch.Tensor) -> torch.Tensor:
        ids = torch.cat([self.prompt, ys], dim=1)                  # (N, P + t)
        if self.cache is None:
            logits = self.model.lm(ids, ids.size(1) - 1, self.prefix)[:, -1]  # (N, V)
        else:
            if self.cache.length != ids.size(1) - 1:
                raise RuntimeError("KV cache out of step with the prefix")
            real = ids != self.pad
            pos = lm_positions(real)[:, -1:]                       # (N, 1)
            h = self.model.hidden(ids[:, -1:], pos, lm_mask(real, 1), self.cache)
            logits = self.model.logits(h[:, -1])                   # (N, V)
        return forbid_specials(logits, self.model.config)         # chapter 10

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index``: the beams that survive a step."""
        self.prompt = self.prompt.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index)


__all__ = [
    'POSITIONS', 'DecoderOnlyConfig', 'DecoderOnlyBlock', 'lm_positions', 'lm_mask',
    'DecoderOnlyLM', 'PromptStepper',
]
