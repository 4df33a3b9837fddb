"""Generated from book/11_decoding.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: e932628a281c40d6
# fmt: off

# [book/11_decoding.ipynb, cell 42810989]
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import torch

from transformer_lib.checks import check_float, check_int, check_probability

#: the decoding strategies, the length normalisations and the stopping rules
STRATEGIES = ("greedy", "beam", "sample")
LENGTH_NORMS = ("gnmt", "power", "none")
STOP_RULES = ("book", "first_k")
#: the settings each strategy reads, besides the output limit (max_len_a, max_len_b)
STRATEGY_SETTINGS = {"greedy": (),
                     "beam": ("beam_size", "length_norm", "alpha", "stop"),
                     "sample": ("temperature", "top_k", "top_p", "seed")}


def _one_of(value: Any, name: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
    return value


# [book/11_decoding.ipynb, cell 180af2cb]
@dataclass(frozen=True)
class GenerationConfig:
    """The settings of a decode, one object for every decoder, engine and the CLI.

    * ``strategy``: "greedy", "beam" (beam search) or "sample".
    * ``beam_size``: the beams of beam search.
    * ``max_len_a``, ``max_len_b``: a sentence of S source tokens gets at most
      ``floor(a·S + b)`` tokens after bos (at least 1, at most the model's ``max_len``):
      the book's 2·S + 10 by default; the paper's "input length + 50" is a = 1, b = 50;
      a = 0 is one fixed limit for every sentence (fairseq's ``--max-len-a/-b``).
    * ``length_norm``, ``alpha``: beam search ranks a finished hypothesis of n tokens
      by log p / ((5 + n) / 6) ** alpha ("gnmt", Wu et al. 2016, the paper's 0.6),
      log p / n ** alpha ("power": Hugging Face's and CTranslate2's length_penalty),
      or log p ("none").
    * ``stop``, when a sentence's search ends: "book", once it has beam_size finished
      hypotheses and its best live beam, scored at its current length, does not beat
      the worst of them (Hugging Face's ``early_stopping=False``); "first_k", once it
      has beam_size finished hypotheses (fairseq, CTranslate2, HF's
      ``early_stopping=True``).
    * ``temperature``, ``top_k`` (0: all), ``top_p`` (1: all), ``seed``: sampling.

    Checked once, when made: a bad value raises a ValueError naming its field.
    """

    strategy: str = "greedy"
    beam_size: int = 4
    max_len_a: float = 2.0
    max_len_b: int = 10
    length_norm: str = "gnmt"
    alpha: float = 0.6
    stop: str = "book"
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        try:
            temperature = check_float(self.temperature, "temperature", 0.0,
                                      low_open=True)
        except ValueError as error:
            raise ValueError(f"{error} (the limit temperature -> 0 is greedy "
                             "decoding)") from None
        checked = {
            "strategy": _one_of(self.strategy, "strategy", STRATEGIES),
            "beam_size": check_int(self.beam_size, "beam_size"),
            "max_len_a": check_float(self.max_len_a, "max_len_a", 0.0),
            "max_len_b": check_int(self.max_len_b, "max_len_b", minimum=0),
            "length_norm": _one_of(self.length_norm, "length_norm", LENGTH_NORMS),
            "alpha": check_float(self.alpha, "alpha"),
            "stop": _one_of(self.stop, "stop", STOP_RULES),
            "temperature": temperature,
            "top_k": check_int(self.top_k, "top_k", minimum=0),
            "top_p": check_probability(self.top_p, "top_p", zero=False),
            "seed": check_int(self.seed, "seed", minimum=0)}
        for name, value in checked.items():          # frozen: set once, checked
            object.__setattr__(self, name, value)

    # [book/11_decoding.ipynb, cell 62f35347]
    def limits(self, src_lengths: torch.Tensor,
               table: int | None = None) -> torch.Tensor:
        """Each sentence's output limit, the most tokens after bos: src_lengths (B,),
        pad not counted -> (B,) ``floor(a·S + b)``, at least 1 and at most ``table``
        (the model's ``config.max_len``). A sentence's limit depends on its own
        length, not on its batch's."""
        limits = (self.max_len_a * src_lengths.double() + self.max_len_b).floor()
        return limits.long().clamp(min=1, max=table)

    def replace(self, **changes: Any) -> GenerationConfig:
        """A copy with ``changes`` (field names), checked as a new one is."""
        unknown = sorted(changes.keys() - FIELDS)
        if unknown:
            raise TypeError(f"{unknown[0]}: not a GenerationConfig field (the fields: "
                            f"{', '.join(sorted(FIELDS))})")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> GenerationConfig:
        """The inverse of :meth:`to_dict`; a missing field keeps its default, an
        unknown one is an error naming it."""
        if not isinstance(data, dict):
            raise ValueError(f"a generation config must be a JSON object, got "
                             f"{type(data).__name__}")
        return cls().replace(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"


# [book/11_decoding.ipynb, cell 7a5b1d0a]
FIELDS = frozenset(field.name for field in dataclasses.fields(GenerationConfig))
#: the older names of two settings, still taken as keywords by the decoders
ALIASES = {"length_penalty": "alpha", "early_stopping": "stop"}


def resolve_config(config: GenerationConfig | None, strategy: str | None,
                   settings: dict[str, Any]) -> GenerationConfig:
    """The one way from keywords to a config: ``config`` (None: the defaults) with the
    ``settings`` given (a value of None is "not given") in place of its fields, and
    ``strategy`` when not None. A setting the strategy does not read is refused, as is
    an unknown name; ``length_penalty`` is ``alpha``, and ``early_stopping`` True or
    False is ``stop`` "first_k" or "book"."""
    if config is None:
        config = GenerationConfig()
    elif not isinstance(config, GenerationConfig):
        raise TypeError(f"config must be a GenerationConfig or None, got "
                        f"{type(config).__name__}")
    given, aliased = {}, {}
    for name, value in settings.items():
        if value is None:
            continue
        if name == "early_stopping":
            value = "first_k" if value is True else "book" if value is False else value
        given[ALIASES.get(name, name)] = value
        aliased[ALIASES.get(name, name)] = name
    if strategy is not None:                 # the decoder called decides the strategy
        asked = given.get("strategy", strategy)
        if asked != strategy:
            raise ValueError(f"strategy: this decoder decodes by {strategy!r}, got "
                             f"{asked!r}: call the decoder of that strategy, or "
                             "translate_lines")
        given["strategy"] = strategy
    try:
        config = config.replace(**given)
    except ValueError as error:                   # named as the caller named it
        field = str(error).split(" ")[0]
        name = aliased.get(field, field)
        raise ValueError(str(error) if name == field else f"{name}: {error}") from None
    reads = {"strategy", "max_len_a", "max_len_b", *STRATEGY_SETTINGS[config.strategy]}
    for name in settings:
        if settings[name] is not None and ALIASES.get(name, name) not in reads:
            raise ValueError(f"{name}: a setting of another strategy than "
                             f"{config.strategy!r} (it would be ignored)")
    return config


__all__ = [
    'STRATEGIES', 'LENGTH_NORMS', 'STOP_RULES', 'STRATEGY_SETTINGS', 'GenerationConfig',
]
