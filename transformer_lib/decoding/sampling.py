"""Generated from book/11_decoding.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 6717ac2956f1e121
# fmt: off

# [book/11_decoding.ipynb, cell 7ceb45cb]
from __future__ import annotations

from typing import Any

import torch

from transformer_lib.checks import check_float, check_int, check_probability
from transformer_lib.decoding.config import GenerationConfig
from transformer_lib.decoding.greedy import Seq2SeqModel, check_decoding
from transformer_lib.decoding.greedy import decode_unchecked


# how far short of top_p a nucleus's mass may fall by float32 rounding alone
_MASS_TOLERANCE = 16 * torch.finfo(torch.float32).eps


def sampling_distribution(logits: torch.Tensor, temperature: float = 1.0,
                          top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """The distribution :func:`sample` draws from: logits (…, V) -> probabilities
    (…, V), float32.

    In this order: divide the logits by ``temperature``; keep the ``top_k`` largest
    (exactly k: ties at the boundary are broken by ``torch.topk``; 0 keeps all);
    softmax; keep the nucleus, the smallest set of most probable tokens whose
    probabilities add up to at least ``top_p`` (1 keeps all); renormalise. The running
    sums are taken in float64 and a set whose mass falls short of ``top_p`` by float32
    rounding only (at most ``16 × float32 eps``, about 2e-6) reaches it: uniform logits
    keep exactly ceil(top_p · V) tokens.
    """
    return _filtered(logits, *check_sampling(temperature, top_k, top_p))


def _filtered(logits: torch.Tensor, temperature: float, top_k: int,
              top_p: float) -> torch.Tensor:
    """:func:`sampling_distribution` without the checks (made once by the caller)."""
    logits = logits.float()
    V = logits.size(-1)
    # subtract the max before dividing: a tiny temperature cannot overflow to +inf
    scaled = (logits - logits.amax(dim=-1, keepdim=True)) / temperature   # (…, V) <= 0
    if 0 < top_k < V:
        keep = torch.zeros_like(scaled, dtype=torch.bool)
        keep.scatter_(-1, scaled.topk(top_k, dim=-1).indices, True)        # exactly k
        scaled = scaled.masked_fill(~keep, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)                                  # (…, V)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)              # (…, V)
        # exclusive running sums, in float64: float32 sums of ten 0.1s fall short of 0.6
        mass_before = sorted_p.double().cumsum(dim=-1) - sorted_p.double()
        # the set is big enough, up to the rounding of float32 probabilities
        drop_sorted = mass_before >= top_p - _MASS_TOLERANCE
        drop_sorted[..., 0] = False                         # the top token stays
        # back to vocabulary order
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


# [book/11_decoding.ipynb, cell 24499349]
def check_sampling(temperature: Any, top_k: Any,
                   top_p: Any) -> tuple[float, int, float]:
    """The three knobs, checked: temperature > 0, top_k >= 0 (0: no top-k filter), top_p
    in (0, 1] (1: no nucleus filter)."""
    try:
        temperature = check_float(temperature, "temperature", 0.0, low_open=True)
    except ValueError as error:
        hint = "the limit temperature -> 0 is greedy_decode"
        raise ValueError(f"{error} ({hint})") from None
    return (temperature, check_int(top_k, "top_k", minimum=0),
            check_probability(top_p, "top_p", zero=False))


# [book/11_decoding.ipynb, cell c131d097]
def sample(model: Seq2SeqModel, src: torch.Tensor, max_len: int | None = None, *,
           config: GenerationConfig | None = None,
           generator: torch.Generator | None = None, use_cache: bool = True,
           **settings: Any) -> torch.Tensor:
    """Sampling of a batch: at every step each sentence draws its next token from
    :func:`sampling_distribution` (temperature, then top-k, then top-p) of the model's
    logits.

    src (B, S) -> ids (B, T), laid out as :func:`greedy_decode`'s output (``max_len``
    None: each sentence its own limit, ``config.limits``). The settings come from
    ``config`` (a :class:`GenerationConfig`; None: the defaults); keywords given
    (``temperature``, ``top_k``, ``top_p``, ``seed``, the limit's) replace its fields.
    The draws come from ``generator`` (a ``torch.Generator`` on the model's device),
    or without one from a new generator seeded with ``config.seed``: the same seed or
    generator state gives the same output, with or without the cache. pad and bos are
    never generated. ``model`` is any object with the members of :class:`Seq2SeqModel`.
    """
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, "
                        f"got {type(generator).__name__}")
    src, config = check_decoding(model, src, "sample", config,
                                 {**settings, "max_len": max_len})
    return sample_unchecked(model, src, config, generator=generator,
                            use_cache=bool(use_cache))


# [book/11_decoding.ipynb, cell 9cfd68c2]
def sample_unchecked(model: Seq2SeqModel, src: torch.Tensor, config: GenerationConfig,
                     *, generator: torch.Generator | None = None,
                     use_cache: bool = True) -> torch.Tensor:
    """:func:`sample` without the checks (made once by the caller)."""
    if generator is None:
        generator = torch.Generator(device=src.device).manual_seed(config.seed)
    knobs = config.temperature, config.top_k, config.top_p

    def draw(logits: torch.Tensor) -> torch.Tensor:                    # (B, V) -> (B,)
        probs = _filtered(logits, *knobs)
        # every row draws, finished or not: the random stream does not depend on which
        # rows have finished
        return torch.multinomial(probs, 1, generator=generator)[:, 0]

    return decode_unchecked(model, src, config, draw, use_cache)


__all__ = ['sampling_distribution', 'sample']
