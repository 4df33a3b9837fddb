"""Tests of transformer_lib.decoding.config (chapter 11): GenerationConfig is checked once (each bad field is a
one-line error naming it), its output limit is floor(a·S + b) in [1, table], its JSON form round-trips, and every
decoder's keyword form is its config form (one code path: keywords -> config -> the work). Each length
normalisation and stopping rule is checked against an independent reference in tests/test_decoding.py (a plain
Python beam search) and against transformers' generate in tests/test_marian.py."""
from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from test_decoding import make_model, make_src

from transformer_lib.decoding.beam import beam_search
from transformer_lib.decoding.config import STRATEGY_SETTINGS, GenerationConfig, resolve_config
from transformer_lib.decoding.greedy import default_max_len, greedy_decode
from transformer_lib.decoding.sampling import sample


@pytest.mark.parametrize("field, bad", [
    ("strategy", "beams"), ("strategy", None),
    ("beam_size", 0), ("beam_size", True), ("beam_size", 2.0), ("beam_size", "4"),
    ("max_len_a", -0.5), ("max_len_a", math.inf), ("max_len_a", math.nan), ("max_len_a", "2"),
    ("max_len_b", -1), ("max_len_b", 1.5), ("max_len_b", False),
    ("length_norm", "linear"), ("length_norm", "GNMT"),
    ("alpha", math.nan), ("alpha", math.inf), ("alpha", "0.6"), ("alpha", True),
    ("stop", "early"), ("stop", True),
    ("temperature", 0.0), ("temperature", -1.0), ("temperature", math.inf),
    ("top_k", -1), ("top_k", 1.5), ("top_p", 0.0), ("top_p", 1.5), ("top_p", math.nan),
    ("seed", -1), ("seed", 0.5),
])
def test_each_bad_field_is_a_one_line_error_naming_it(field, bad):
    with pytest.raises(ValueError) as info:
        GenerationConfig(**{field: bad})
    text = str(info.value)
    assert text.startswith(f"{field} must be") and "\n" not in text, text
    with pytest.raises(ValueError, match=f"^{field} must be"):          # replace checks as the constructor does
        GenerationConfig().replace(**{field: bad})


def test_defaults_are_the_books():
    c = GenerationConfig()
    assert (c.strategy, c.beam_size, c.max_len_a, c.max_len_b, c.length_norm, c.alpha, c.stop) == (
        "greedy", 4, 2.0, 10, "gnmt", 0.6, "book")
    assert (c.temperature, c.top_k, c.top_p, c.seed) == (1.0, 0, 1.0, 0)
    with pytest.raises(AttributeError):                        # frozen: checked once, then never changed
        c.alpha = 1.0                                           # type: ignore[misc]


@settings(max_examples=examples(60), deadline=None)
@given(a=st.floats(0, 4, allow_nan=False), b=st.integers(0, 60), table=st.one_of(st.none(), st.integers(1, 80)),
       lengths=st.lists(st.integers(0, 100), min_size=1, max_size=6))
def test_the_limit_is_floor_a_s_plus_b_within_one_and_the_table(a, b, table, lengths):
    config = GenerationConfig(max_len_a=a, max_len_b=b)
    got = config.limits(torch.tensor(lengths), table).tolist()
    for S, limit in zip(lengths, got):
        expected = max(1, math.floor(a * S + b))
        assert limit == (expected if table is None else min(expected, table)), (a, b, S, table)
    # a sentence's limit never shrinks as its source grows (a >= 0)
    ordered = config.limits(torch.tensor(sorted(lengths)), table).tolist()
    assert ordered == sorted(ordered)


def test_the_papers_limit_and_the_books():
    lengths = torch.tensor([1, 7, 30])
    assert GenerationConfig().limits(lengths).tolist() == [12, 24, 70]                       # 2·S + 10
    assert GenerationConfig(max_len_a=1, max_len_b=50).limits(lengths).tolist() == [51, 57, 80]  # S + 50
    assert default_max_len(lengths, 40).tolist() == [12, 24, 40]
    assert GenerationConfig(max_len_a=0, max_len_b=0).limits(lengths).tolist() == [1, 1, 1]


def test_json_round_trip_and_unknown_fields():
    c = GenerationConfig(strategy="beam", beam_size=5, max_len_a=1.5, max_len_b=3, length_norm="power",
                         alpha=1.2, stop="first_k", temperature=0.7, top_k=5, top_p=0.9, seed=4)
    assert GenerationConfig.from_dict(json.loads(c.to_json())) == c
    assert GenerationConfig.from_dict({}) == GenerationConfig()               # a missing field: its default
    with pytest.raises(TypeError, match="^num_beams: not a GenerationConfig field"):
        GenerationConfig.from_dict({"num_beams": 4})
    with pytest.raises(ValueError, match="must be a JSON object, got list"):
        GenerationConfig.from_dict([1])


def test_resolve_config_is_the_one_way_from_keywords():
    base = GenerationConfig(strategy="beam", beam_size=3)
    assert resolve_config(None, None, {}) == GenerationConfig()
    assert resolve_config(base, None, {"alpha": None}) == base                   # None: not given
    assert resolve_config(base, None, {"length_penalty": 1.0}) == base.replace(alpha=1.0)      # the older name
    assert resolve_config(base, None, {"early_stopping": True}).stop == "first_k"
    assert resolve_config(base, None, {"early_stopping": False}).stop == "book"
    assert resolve_config(base, "greedy", {}).strategy == "greedy"
    with pytest.raises(ValueError, match="^top_k: a setting of another strategy than 'beam'"):
        resolve_config(base, None, {"top_k": 5})
    with pytest.raises(ValueError, match="^length_penalty: alpha must be a finite number"):
        resolve_config(base, None, {"length_penalty": math.nan})
    with pytest.raises(TypeError, match="config must be a GenerationConfig or None, got dict"):
        resolve_config({"beam_size": 3}, None, {})
    for strategy, names in STRATEGY_SETTINGS.items():          # every setting a strategy reads is a field
        assert set(names) <= set(GenerationConfig.__dataclass_fields__), strategy


# ---------------------------------------------------------------- keyword form == config form
BEAM_RULES = [(norm, stop) for norm in ("gnmt", "power", "none") for stop in ("book", "first_k")]


@pytest.mark.parametrize("seed", range(3))
def test_the_keyword_form_is_the_config_form(seed):
    """The same settings given as keywords or as a GenerationConfig give the same ids (and scores), on every
    decoder and every beam rule: 12 sentences per decoding, 8 decodings per seed."""
    model = make_model(seed, eos_boost=1.0 + 0.5 * seed)
    src = make_src(seed, 12, 6)
    same = 0
    pairs = [(greedy_decode(model, src, max_len_a=1, max_len_b=4),
              greedy_decode(model, src, config=GenerationConfig(max_len_a=1, max_len_b=4))),
             (sample(model, src, temperature=1.5, top_k=5, seed=7),
              sample(model, src, config=GenerationConfig(temperature=1.5, top_k=5, seed=7)))]
    for norm, stop in BEAM_RULES:
        kw_ids, kw_scores = beam_search(model, src, 3, 9, length_norm=norm, alpha=0.8, stop=stop, n_best=3)
        config = GenerationConfig(strategy="beam", beam_size=3, max_len_a=0, max_len_b=9, length_norm=norm,
                                  alpha=0.8, stop=stop)
        cf_ids, cf_scores = beam_search(model, src, config=config, n_best=3)
        assert torch.equal(kw_scores, cf_scores), (norm, stop)
        pairs.append((kw_ids, cf_ids))
    for a, b in pairs:
        assert torch.equal(a, b)
        same += a.size(0)
    assert same == 12 * 8
    # a config given and a keyword: the keyword wins, as in transformers' generate
    wide = GenerationConfig(strategy="beam", beam_size=2, alpha=0.0)
    assert torch.equal(beam_search(model, src, 4, config=wide)[0],
                       beam_search(model, src, config=wide.replace(beam_size=4))[0])


def test_the_older_keywords_are_the_new_fields():
    model, src = make_model(1), make_src(1, 6, 5)
    old = beam_search(model, src, 3, 8, length_penalty=1.0, length_norm="power", early_stopping=True)
    new = beam_search(model, src, 3, 8, alpha=1.0, length_norm="power", stop="first_k")
    assert torch.equal(old[0], new[0]) and torch.equal(old[1], new[1])


def test_sampling_without_a_generator_is_seeded_by_the_config():
    model, src = make_model(2), make_src(2, 8, 5)
    a = sample(model, src, 8, temperature=2.0, seed=11)
    assert torch.equal(a, sample(model, src, 8, temperature=2.0, seed=11))
    g = torch.Generator().manual_seed(11)                         # the same stream as seed=11
    assert torch.equal(a, sample(model, src, 8, temperature=2.0, generator=g))
    assert any(not torch.equal(a, sample(model, src, 8, temperature=2.0, seed=s)) for s in range(12, 16))


@pytest.mark.parametrize("call, needle", [
    (lambda m, s: greedy_decode(m, s, top_k=3), "top_k: a setting of another strategy than 'greedy'"),
    (lambda m, s: beam_search(m, s, 2, temperature=0.5), "temperature: a setting of another strategy than 'beam'"),
    (lambda m, s: sample(m, s, alpha=0.5), "alpha: a setting of another strategy than 'sample'"),
    (lambda m, s: greedy_decode(m, s, 5, max_len_b=3), "max_len: give a fixed max_len or max_len_a"),
    (lambda m, s: beam_search(m, s, 2, stop="early"), "stop must be one of book, first_k"),
    (lambda m, s: beam_search(m, s, length_norm="avg"), "length_norm must be one of gnmt, power, none"),
])
def test_a_setting_the_decoder_would_ignore_is_refused(call, needle):
    with pytest.raises(ValueError, match=needle):
        call(make_model(0), make_src(0, 2, 4))


def test_a_decoder_refuses_a_strategy_keyword_of_another_strategy():
    """greedy_decode(..., strategy="sample") decoded greedily, silently: the decoder called decides the strategy,
    and a keyword that asks for another one is refused, naming it."""
    model, src = make_model(), make_src(0, 2, 5)
    with pytest.raises(ValueError, match="strategy: this decoder decodes by 'greedy', got 'sample'"):
        greedy_decode(model, src, strategy="sample")
    with pytest.raises(ValueError, match="strategy: this decoder decodes by 'beam', got 'greedy'"):
        beam_search(model, src, strategy="greedy")
    assert torch.equal(greedy_decode(model, src, strategy="greedy"), greedy_decode(model, src))
