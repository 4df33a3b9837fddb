"""Generated from book/11_decoding.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 4c4f1da8c7f065d1
# fmt: off

# [book/11_decoding.ipynb, cell 5814e656]
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch

from transformer_lib.checks import check_int, check_token_ids
from transformer_lib.cache import KVCache
from transformer_lib.masks import padding_mask
from transformer_lib.model import Transformer, check_ids
from transformer_lib.decoding.loop import check_seq2seq, decode_loop, forbid_specials
from transformer_lib.decoding.config import GenerationConfig, resolve_config


class DecodableModelConfig(Protocol):
    """The model fields decoding needs: what the decoders read from ``model.config``
    (the decoding settings are a :class:`GenerationConfig`)."""

    src_vocab_size: int
    tgt_vocab_size: int
    max_len: int              # the positional table: the longest source and output
    pad_id: int
    bos_id: int
    eos_id: int


class Seq2SeqModel(Protocol):
    """What the decoders need from a model: a ``config``, ``encode``, ``decode`` with an
    optional cache, and ``new_cache``. A :class:`~transformer_lib.model.Transformer` has
    them; so may a class of your own, which need not derive from it (duck typing). A
    model may instead bring its own stepper (see :func:`make_stepper`)."""

    @property
    def config(self) -> DecodableModelConfig: ...

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor: ...

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor,
               src_mask: torch.Tensor | None = None,
               cache: Any = None) -> torch.Tensor: ...

    # a cache has ``length`` (positions cached) and ``reorder(index)`` (keep batch rows)
    def new_cache(self) -> Any: ...


class DecodingStepper(Protocol):
    """What the decoding loops call once per step: ``step(ys)``, prefixes (N, t) that
    start with bos -> the next token's logits (N, V), float32, with pad and bos at -inf;
    ``reorder(index)``, keep rows ``index`` (the beams that survive a step). Beam search
    calls ``reorder_beams(index)`` instead, after its first step, when a stepper has
    one (:meth:`Stepper.reorder_beams`)."""

    def step(self, ys: torch.Tensor) -> torch.Tensor: ...

    def reorder(self, index: torch.Tensor) -> None: ...


# [book/11_decoding.ipynb, cell fd85899b]
_CONFIG_FIELDS = ("src_vocab_size", "tgt_vocab_size", "max_len", "pad_id", "bos_id",
                  "eos_id")


def check_model(model: Any) -> None:
    """Raise TypeError, naming what is missing, unless ``model`` has the members of
    :class:`Seq2SeqModel` (duck typing: it need not derive from any class), or a
    ``stepper`` method of its own and the config; ValueError unless eos differs from pad
    and bos (bos = eos: decoding would stop at once or never; pad = eos: eos could never
    be generated). pad = bos is allowed: Marian models start the decoder from the pad
    token, and the loops never read the first column as padding."""
    own_stepper = callable(getattr(model, "stepper", None))
    check_seq2seq(model, () if own_stepper else ("encode", "decode", "new_cache"),
                  _CONFIG_FIELDS)
    config = model.config
    ids = {name: getattr(config, name) for name in ("pad_id", "bos_id", "eos_id")}
    if ids["eos_id"] in (ids["pad_id"], ids["bos_id"]):
        named = ", ".join(f"{name}={value}" for name, value in ids.items())
        raise ValueError(f"model.config's eos_id must differ from its pad_id and "
                         f"bos_id, got {named}")


def check_src(model: Seq2SeqModel, src: Any) -> torch.Tensor:
    """Check src: a non-empty (B, S) tensor of the model's source token ids, at most
    ``config.max_len`` long (chapter 9's ``check_ids``, the model's own check). Returns
    it on the model's device."""
    c = model.config
    check_ids(src, "src", c.src_vocab_size, c.max_len)
    parameters = getattr(model, "parameters", None)        # an nn.Module: its device
    first = next(iter(parameters()), None) if callable(parameters) else None
    return src if first is None else src.to(first.device)


def check_max_len(model: Seq2SeqModel, max_len: Any) -> int:
    """Check max_len, the most tokens to generate after bos: a positive int within the
    model's positional table (``config.max_len``). Returns it."""
    max_len = check_int(max_len, "max_len")
    if max_len > model.config.max_len:
        raise ValueError(f"max_len={max_len} is larger than the model's positional "
                         f"table (config.max_len={model.config.max_len})")
    return max_len


def default_max_len(src_lengths: torch.Tensor,
                    limit: int | None = None) -> torch.Tensor:
    """Each sentence's default output length, the most tokens to generate after bos:
    ``GenerationConfig.limits`` of the defaults, ``2·S + 10`` for a source of S
    tokens (pad not counted), capped at ``limit`` (the model's ``config.max_len``).
    src_lengths (B,) -> (B,)."""
    return GenerationConfig().limits(src_lengths, limit)


def check_settings(model: Any, strategy: str | None, config: Any,
                   settings: dict[str, Any]) -> GenerationConfig:
    """The decoding settings of a call: ``config`` with the keyword ``settings`` given
    (``resolve_config``). ``max_len``, a fixed limit, is checked against the model
    (:func:`check_max_len`) and stands for ``max_len_a=0, max_len_b=max_len``."""
    settings = dict(settings)
    max_len = settings.pop("max_len", None)
    if max_len is not None:
        given = {name for name, value in settings.items() if value is not None}
        if given & {"max_len_a", "max_len_b"}:
            raise ValueError("max_len: give a fixed max_len or max_len_a and "
                             "max_len_b, not both")
        settings.update(max_len_a=0.0, max_len_b=check_max_len(model, max_len))
    return resolve_config(config, strategy, settings)


def check_decoding(model: Any, src: Any, strategy: str | None = None,
                   config: Any = None, settings: dict[str, Any] | None = None
                   ) -> tuple[torch.Tensor, GenerationConfig]:
    """The checks every public decoder makes at its door: :func:`check_model`,
    :func:`check_src` and the settings (:func:`check_settings`). -> (src on the
    model's device, the GenerationConfig of the call)."""
    check_model(model)
    src = check_src(model, src)
    return src, check_settings(model, strategy, config, settings or {})


# [book/11_decoding.ipynb, cell d985ab8c]
@contextlib.contextmanager
def decoding_mode(model: Seq2SeqModel) -> Iterator[None]:
    """Eval mode (no dropout) and no autograd while decoding: ``with
    decoding_mode(model): ...``. The model's mode is restored after. A model that is not
    an ``nn.Module`` has no mode: autograd only."""
    module = model if isinstance(model, torch.nn.Module) else None
    was_training = module is not None and module.training
    if module is not None:
        module.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        if module is not None:
            module.train(was_training)


class Stepper:
    """The logits of the next token for a batch of prefixes, with or without a KV cache.

    ``Stepper(model, src, use_cache, max_len)`` encodes src (B, S) once; src must be
    checked and on the model's device already (:func:`start_decoding` checks it, then
    makes one). ``step(ys)`` takes whole prefixes ys (N, t) that start with bos and
    returns the logits (N, V) of the next token, float32, pad and bos at -inf (never
    generated). Without a cache it runs the decoder over all t positions and keeps the
    last; with one it feeds only ys[:, -1:], at position t - 1, so each call's prefixes
    must be one token longer than the last call's. ``max_len`` (the most steps) makes
    the cache static when it has a ``reserve`` method (chapter 8's ``KVCache``). A
    :class:`~transformer_lib.model.Transformer` is run through its unchecked core: the
    ids fed are the loop's own choices. Use it inside :func:`decoding_mode`.
    """

    def __init__(self, model: Seq2SeqModel, src: torch.Tensor, use_cache: bool = True,
                 max_len: int | None = None):
        c = model.config
        self.model, self.config = model, c
        self.src_mask = padding_mask(src, c.pad_id)                   # (B, 1, 1, S)
        self.memory = model.encode(src, self.src_mask)                # (B, S, d_model)
        self.cache = model.new_cache() if use_cache else None
        reserve = getattr(self.cache, "reserve", None)
        if max_len is not None and callable(reserve):
            reserve(max_len)                          # static: written in place
        self.fast = model.decode_step if isinstance(model, Transformer) else None

    def step(self, ys: torch.Tensor) -> torch.Tensor:
        """Prefixes ys (N, t), bos first -> the next token's logits (N, V)."""
        start = 0 if self.cache is None else ys.size(1) - 1
        if self.cache is not None and self.cache.length != start:
            raise RuntimeError("KV cache out of step with the prefix")
        new = ys if self.cache is None else ys[:, -1:]          # (N, t) or (N, 1)
        if self.fast is not None:                               # checked at the door
            logits = self.fast(new, self.memory, self.src_mask, self.cache)
        elif self.cache is None:
            logits = self.model.decode(new, self.memory, self.src_mask)
        else:
            logits = self.model.decode(new, self.memory, self.src_mask, self.cache)
        return forbid_specials(logits[:, -1], self.config)                   # (N, V)

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index`` (in that order): the beams that survive a step."""
        self.memory = self.memory.index_select(0, index)
        self.src_mask = self.src_mask.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index)

    def reorder_beams(self, index: torch.Tensor) -> None:
        """:meth:`reorder` for an ``index`` that keeps each row among the rows of its
        own source sentence (beam search after its first step). The memory, the mask
        and the cross-attention keys and values are equal along those rows: only the
        self-attention caches move."""
        if isinstance(self.cache, KVCache):
            self.cache.reorder(index, cross=False)
        elif self.cache is not None:                   # a cache of another kind
            self.cache.reorder(index)


# [book/11_decoding.ipynb, cell d0775bbd]
def make_stepper(model: Seq2SeqModel, src: torch.Tensor, use_cache: bool = True,
                 max_len: int | None = None) -> DecodingStepper:
    """The stepper for a checked ``src`` on the model's device: the model's own when it
    has a ``stepper(src, use_cache)`` method (a decoder-only model continuing a prompt,
    chapter 13), else a :class:`Stepper` (its cache static for ``max_len`` steps). Every
    decoding loop goes through here."""
    own = getattr(model, "stepper", None)
    if callable(own):
        return own(src, use_cache)
    return Stepper(model, src, use_cache, max_len)


def start_decoding(model: Seq2SeqModel, src: torch.Tensor,
                   use_cache: bool = True) -> DecodingStepper:
    """Check ``model`` and ``src`` (B, S), encode the source once on the model's device,
    and return the stepper that decodes it (:func:`make_stepper`; use it inside
    :func:`decoding_mode`)."""
    check_model(model)
    return make_stepper(model, check_src(model, src), bool(use_cache))


# [book/11_decoding.ipynb, cell c66b2792]
def greedy_decode(model: Seq2SeqModel, src: torch.Tensor, max_len: int | None = None,
                  use_cache: bool = True, *, config: GenerationConfig | None = None,
                  **settings: Any) -> torch.Tensor:
    """Greedy decoding of a batch: each sentence takes its most probable next token.

    src (B, S) -> ids (B, T), T <= max_len + 1: bos, then at most ``max_len`` tokens
    (None: each sentence its own limit, ``config.limits``, 2·S + 10 by default); a
    sentence is padded (pad_id) after its eos, and the loop stops when all have one.
    ``config``: a :class:`GenerationConfig` (None: the defaults); keywords given, of its
    limit fields (``max_len_a``, ``max_len_b``), replace its fields.
    pad and bos are never generated. The model runs in eval mode without gradients (its
    mode is restored after); ``src`` is moved to the model's device. ``use_cache=False``
    recomputes the whole prefix at every step: the same tokens, more slowly. ``model``:
    anything with the members of :class:`Seq2SeqModel`.
    """
    src, config = check_decoding(model, src, "greedy", config,
                                 {**settings, "max_len": max_len})
    return decode_unchecked(model, src, config, None, bool(use_cache))


def decode_with(model: Seq2SeqModel, src: torch.Tensor, max_len: int | None,
                choose: Callable[[torch.Tensor], torch.Tensor],
                use_cache: bool = True) -> torch.Tensor:
    """Chapter 10's loop (``decode_loop`` of ``transformer_lib.decoding.loop``) on
    a cached stepper, with another rule for the next token: at each step ``choose``
    turns the next-token logits (B, V) into the next tokens (B,) (the argmax is
    :func:`greedy_decode`; a draw, :func:`~transformer_lib.decoding.sampling.sample`).
    Checks model, src and max_len (:func:`check_decoding`); the output is laid out as
    greedy_decode's."""
    src, config = check_decoding(model, src, "greedy", None, {"max_len": max_len})
    if not callable(choose):
        raise TypeError(f"choose must be a function of the logits, got {choose!r}")
    return decode_unchecked(model, src, config, choose, bool(use_cache))


# [book/11_decoding.ipynb, cell 967cfcce]
def decode_unchecked(model: Seq2SeqModel, src: torch.Tensor, config: GenerationConfig,
                     choose: Callable[[torch.Tensor], torch.Tensor] | None = None,
                     use_cache: bool = True) -> torch.Tensor:
    """:func:`decode_with` without the checks (made once by the caller): src checked
    and on the model's device, ``config`` a GenerationConfig (each sentence's limit
    from its ``limits``: one read-back before the loop). ``choose`` None: the
    argmax."""
    c = model.config
    limits = config.limits((src != c.pad_id).sum(dim=1), c.max_len)          # (B,)
    max_len = int(limits.max())
    with decoding_mode(model):
        stepper = make_stepper(model, src, use_cache, max_len)
        ys = torch.full((src.size(0), 1), c.bos_id, dtype=torch.long,
                        device=src.device)                                # (B, 1)
        return decode_loop(stepper.step, ys, c.pad_id, c.eos_id, max_len, choose,
                           limits)


# [book/11_decoding.ipynb, cell 7e01d7c6]
def token_scores(model: Seq2SeqModel, src: torch.Tensor,
                 ids: torch.Tensor) -> torch.Tensor:
    """The log-probability the model gives each generated token of a decode, in one
    teacher-forced pass (Hugging Face's ``compute_transition_scores``, for any output).

    src (B, S) and ids (B, T), T >= 2, laid out as the decoders return them
    (:func:`greedy_decode`, :func:`~transformer_lib.decoding.beam.beam_search`,
    :func:`~transformer_lib.decoding.sampling.sample`: bos first, pad after a sentence's
    eos) -> scores (B, T-1), float32: ``scores[b, j] = log p(ids[b, j+1] | ids[b, :j+1],
    src[b])`` under the distribution the decoders choose from (pad and bos excluded, so
    such a token scores -inf). The positions after a row's first eos are padding and
    score 0, so ``scores.sum(-1)`` is each output's log-probability, eos included (a row
    without eos, cut at max_len, counts every position). Eval mode and no gradients, as
    the decoders; src and ids are moved to the model's device. ``model``: the members of
    :class:`Seq2SeqModel` (``encode`` and ``decode`` are used), or a model with a
    ``stepper`` of its own and a ``model(src, tgt_in)`` that returns the logits of the
    target positions (the decoder-only model of chapter 13). Raises ValueError, naming
    the argument, for ids of the wrong shape, outside the vocabulary, not starting with
    bos, or longer than the model's ``max_len``.
    """
    check_model(model)
    src = check_src(model, src)
    c = model.config
    check_token_ids(ids, c.tgt_vocab_size, "ids", dims=2)
    if ids.size(0) != src.size(0) or ids.size(1) < 2:
        raise ValueError(f"ids must be a (B, T) tensor with T >= 2 and B = src's "
                         f"{src.size(0)} rows, got shape {tuple(ids.shape)}")
    if ids.size(1) - 1 > c.max_len:
        raise ValueError(f"ids has {ids.size(1) - 1} positions after bos, more than "
                         f"the model's max_len={c.max_len}")
    ids = ids.to(src.device)
    if bool((ids[:, 0] != c.bos_id).any()):                     # one read-back
        raise ValueError(f"ids must start with bos (id {c.bos_id}) in every row, as "
                         f"the decoders' outputs do")
    tgt_in, generated = ids[:, :-1], ids[:, 1:]                # (B, T-1) each
    with decoding_mode(model):
        if callable(getattr(model, "encode", None)):
            src_mask = padding_mask(src, c.pad_id)                        # (B, 1, 1, S)
            memory = model.encode(src, src_mask)                          # (B, S, d)
            logits = model.decode(tgt_in, memory, src_mask)               # (B, T-1, V)
        else:                                     # a model with its own stepper
            forward: Any = model                  # its forward: model(src, tgt_in)
            logits = forward(src, tgt_in)                                 # (B, T-1, V)
    logp = torch.log_softmax(forbid_specials(logits, c), dim=-1)          # (B, T-1, V)
    scores = logp.gather(-1, generated[..., None])[..., 0]                # (B, T-1)
    # padding: every position after the first eos (an exclusive running count)
    is_eos = (generated == c.eos_id).long()
    after_eos = is_eos.cumsum(dim=1) - is_eos > 0                         # (B, T-1)
    return scores.masked_fill(after_eos, 0.0)


__all__ = [
    'DecodableModelConfig', 'Seq2SeqModel', 'DecodingStepper', 'check_model',
    'check_src', 'check_max_len', 'default_max_len', 'check_settings', 'check_decoding',
    'decoding_mode', 'Stepper', 'make_stepper', 'start_decoding', 'greedy_decode',
    'decode_with', 'token_scores',
]
