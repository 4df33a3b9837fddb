"""Tests of transformer_lib.modern.decoder_only: the decoder-only model with chapter 11's decoders (with and without
the cache, batch against one by one, padding anywhere), training through chapter 10's loop, the config's
checks and bad input."""
from __future__ import annotations

import pytest
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib.feed_forward import swiglu_width
from transformer_lib.modern.decoder_only import DecoderOnlyConfig, DecoderOnlyLM, lm_mask, lm_positions

SETTINGS = settings(max_examples=examples(15), deadline=None)
V = 20


def _model(seed=0, **kw) -> DecoderOnlyLM:
    torch.manual_seed(seed)
    options = dict(vocab_size=V, d_model=16, n_heads=4, n_layers=2, n_kv_heads=2, max_len=64)
    options.update(kw)
    model = DecoderOnlyLM(DecoderOnlyConfig(**options)).eval()
    with torch.no_grad():                      # perturbed: decisions that are not all alike
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def _prompts(gen, B, P):
    ids = torch.randint(3, V, (B, P), generator=gen)
    lengths = torch.randint(1, P + 1, (B,), generator=gen)
    ids[torch.arange(P)[None, :] >= lengths[:, None]] = 0          # right padding
    return ids, lengths


@SETTINGS
@given(seed=st.integers(0, 2**16), B=st.integers(1, 4), P=st.integers(1, 6),
       positions=st.sampled_from(["rope", "sinusoidal", "learned", "none"]), n_kv=st.sampled_from([4, 2, 1]),
       beam=st.sampled_from([1, 3]), prefix_lm=st.booleans())
def test_decoding_with_cache_equals_without_and_batch_equals_one_by_one(seed, B, P, positions, n_kv, beam,
                                                                        prefix_lm):
    model = _model(seed % 3, positions=positions, n_kv_heads=n_kv, prefix_lm=prefix_lm)
    prompts, lengths = _prompts(torch.Generator().manual_seed(seed), B, P)

    def decode(src, use_cache):
        if beam == 1:
            return tl.greedy_decode(model, src, 8, use_cache=use_cache)
        return tl.beam_search(model, src, beam_size=beam, max_len=8, use_cache=use_cache)[0]

    batch = decode(prompts, True)
    assert torch.equal(batch, decode(prompts, False))
    for i in range(B):
        alone = decode(prompts[i:i + 1, :int(lengths[i])], True)[0]      # no padding at all
        assert torch.equal(batch[i, :alone.numel()], alone)
        assert (batch[i, alone.numel():] == 0).all()


def test_sampling_is_the_same_with_and_without_the_cache():
    model = _model(1)
    prompts, _ = _prompts(torch.Generator().manual_seed(0), 3, 5)
    draws = [tl.sample(model, prompts, 10, temperature=1.5, generator=torch.Generator().manual_seed(3),
                       use_cache=c) for c in (True, False)]
    assert torch.equal(*draws)


@SETTINGS
@given(seed=st.integers(0, 2**16), left=st.integers(0, 3), middle=st.integers(0, 3), right=st.integers(0, 3))
def test_padding_anywhere_does_not_change_the_real_positions_logits(seed, left, middle, right):
    model = _model(seed % 2)
    gen = torch.Generator().manual_seed(seed)
    a, b = torch.randint(3, V, (1, 3), generator=gen), torch.randint(3, V, (1, 4), generator=gen)
    pad = lambda n: torch.zeros(1, n, dtype=torch.long)           # noqa: E731
    plain = model.lm(torch.cat([a, b], 1))
    padded = model.lm(torch.cat([pad(left), a, pad(middle), b, pad(right)], 1))
    real = torch.cat([pad(left), a, pad(middle), b, pad(right)], 1)[0] != 0
    torch.testing.assert_close(padded[0, real], plain[0], atol=1e-5, rtol=1e-5)


def test_forward_is_the_target_slice_of_one_sequence_and_the_future_never_leaks():
    model = _model(0)
    src, tgt_in = torch.randint(3, V, (2, 5)), torch.randint(3, V, (2, 4))
    tgt_in[:, 0] = 1
    out = model(src, tgt_in)
    assert out.shape == (2, 4, V)
    torch.testing.assert_close(out, model.lm(torch.cat([src, tgt_in], 1))[:, 5:])
    changed = tgt_in.clone()
    changed[:, 3] = (changed[:, 3] + 1 - 3) % (V - 3) + 3
    assert torch.equal(model(src, changed)[:, :3], out[:, :3])          # causal


def test_positions_and_mask_helpers():
    real = torch.tensor([[True, True, False, True], [False, True, True, True]])
    assert lm_positions(real).tolist() == [[0, 1, 1, 2], [0, 0, 1, 2]]
    mask = lm_mask(real, 2)                                              # the last two queries
    assert mask.shape == (2, 1, 2, 4)
    assert mask[0, 0].tolist() == [[True, True, False, False], [True, True, False, True]]


def test_the_prefix_mask_opens_the_prefix_to_every_query():
    real = torch.tensor([[True, True, False, True, True]])
    mask = lm_mask(real, 5, prefix=3)[0, 0]
    assert mask.tolist() == [[True, True, False, False, False], [True, True, False, False, False],
                             [True, True, False, False, False], [True, True, False, True, False],
                             [True, True, False, True, True]]
    assert torch.equal(lm_mask(real, 5, prefix=0), lm_mask(real, 5))


def _changed(ids, j):
    out = ids.clone()
    out[:, j] = (out[:, j] + 1 - 3) % (V - 3) + 3
    return out


@pytest.mark.parametrize("positions", ["rope", "sinusoidal", "none"])
def test_a_prefix_lm_reads_the_source_both_ways_and_the_target_causally(positions):
    prefix, causal = (_model(1, positions=positions, prefix_lm=flag) for flag in (True, False))
    src, tgt_in = torch.randint(3, V, (2, 5)), torch.randint(3, V, (2, 4))
    tgt_in[:, 0] = 1
    ids, later_src = torch.cat([src, tgt_in], 1), torch.cat([_changed(src, 4), tgt_in], 1)
    with torch.no_grad():
        # the first source position's state depends on the last source token only in the prefix LM
        assert not torch.allclose(prefix.lm(ids, prefix=5)[:, 0], prefix.lm(later_src, prefix=5)[:, 0])
        assert torch.equal(causal.lm(ids)[:, 0], causal.lm(later_src)[:, 0])
        out = prefix(src, tgt_in)
        torch.testing.assert_close(out, prefix.lm(ids, prefix=5)[:, 5:])
        assert not torch.allclose(out, prefix.lm(ids)[:, 5:])          # the mask matters
        for j in (1, 2, 3):                                            # no later target token leaks
            torch.testing.assert_close(prefix(src, _changed(tgt_in, j))[:, :j], out[:, :j],
                                       atol=1e-6, rtol=1e-6)


@SETTINGS
@given(seed=st.integers(0, 2**16), B=st.integers(1, 4), P=st.integers(1, 6),
       positions=st.sampled_from(["rope", "learned", "none"]))
def test_prefix_lm_cached_greedy_equals_full_recomputation_of_every_step(seed, B, P, positions):
    model = _model(seed % 3, positions=positions, prefix_lm=True)
    prompts, _ = _prompts(torch.Generator().manual_seed(seed), B, P)
    ys = tl.greedy_decode(model, prompts, 8, use_cache=True)
    with torch.no_grad():                     # every step recomputed whole, with forward's prefix mask
        logits = model(prompts, ys[:, :-1]).float()
    logits[..., [0, 1]] = float("-inf")       # pad and bos are never generated
    expected = logits.argmax(-1)
    for i in range(B):
        for t in range(1, ys.size(1)):
            assert ys[i, t] == expected[i, t - 1]
            if ys[i, t] == model.config.eos_id:
                assert (ys[i, t + 1:] == 0).all()
                break


def test_it_trains_with_chapter_10s_loop_on_the_target_only():
    torch.manual_seed(0)
    pairs = tl.reverse_task(400, vocab_size=V, seed=0)
    data = tl.PairDataset(pairs)
    loader = torch.utils.data.DataLoader(data, collate_fn=tl.PadCollate(),
                                         batch_sampler=tl.TokenBucketSampler(data.lengths, 400))
    model = DecoderOnlyLM(DecoderOnlyConfig(V, d_model=32, n_heads=4, n_layers=2, max_len=64))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    history = tl.train(model, loader, opt, None, tl.LabelSmoothingLoss(0.0, 0), steps=150, progress=False,
                       log_every=10)
    assert history.loss[-1] < 0.5 * history.loss[0]


def test_tied_embeddings_share_one_matrix_and_untied_do_not():
    tied, untied = _model(0), _model(0, tie_embeddings=False)
    assert tied.lm_head is None and untied.lm_head is not None
    n = lambda m: sum(p.numel() for p in m.parameters())                 # noqa: E731
    assert n(untied) - n(tied) == V * 16


def test_config_defaults_are_llama_choices_and_it_answers_the_decoders_fields():
    c = DecoderOnlyConfig(100, d_model=64)
    assert (c.positions, c.activation, c.norm, c.bias, c.tie_embeddings) == ("rope", "swiglu", "rms", False,
                                                                             True)
    assert c.d_ff == swiglu_width(256) and c.src_vocab_size == c.tgt_vocab_size == 100
    assert DecoderOnlyConfig(100, d_model=64, activation="relu").d_ff == 256
    assert c.embed_scale is False and DecoderOnlyConfig(100, positions="sinusoidal").embed_scale is True
    assert DecoderOnlyConfig(**c.to_dict()) == c


@pytest.mark.parametrize("kw, word", [
    (dict(positions="alibi"), "positions"), (dict(rope_layout="pairs"), "rope_layout"),
    (dict(pad_id=1), "must differ"), (dict(eos_id=100), "below vocab_size"), (dict(d_model=0), "d_model"),
    (dict(n_heads=3), "divisible"), (dict(n_heads=16), "even"), (dict(n_kv_heads=3), "n_kv_heads"),
    (dict(dropout=1.0), "dropout"), (dict(activation="tanh"), "activation"),
    (dict(prefix_lm=1), "prefix_lm")])
def test_bad_settings_are_named(kw, word):
    with pytest.raises(ValueError, match=word):
        DecoderOnlyLM(DecoderOnlyConfig(**{"vocab_size": 100, "d_model": 16, "n_heads": 4, **kw}))


def test_bad_ids_and_too_long_sequences_are_named():
    model = _model(0, positions="learned", max_len=8)
    with pytest.raises(ValueError, match="outside"):
        model.lm(torch.tensor([[3, V]]))
    with pytest.raises(ValueError, match="ids must be"):
        model.lm(torch.tensor([3.0, 4.0]))
    with pytest.raises(ValueError, match="max_len=8"):
        model.lm(torch.randint(3, V, (1, 9)))
    assert _model(0, max_len=8).lm(torch.randint(3, V, (1, 20))).shape == (1, 20, V)   # RoPE: no table


def test_the_cache_holds_the_kv_heads_of_every_layer():
    for g in (4, 2, 1):
        model = _model(0, n_kv_heads=g)
        stepper = model.stepper(torch.randint(3, V, (2, 5)), use_cache=True)
        stepper.step(torch.ones(2, 1, dtype=torch.long))
        assert len(stepper.cache.layers) == 2
        assert stepper.cache.layers[0].self_attn.k.shape == (2, g, 6, 4)
        assert stepper.cache.layers[0].cross_attn is None                 # no cross-attention


def test_eps_must_be_positive_as_in_the_encoder_decoder_config():
    """eps = 0 gave NaN for a zero row under RMSNorm; chapter 7's LayerConfig already refused it."""
    for eps in (0.0, -1e-6, float("inf")):
        with pytest.raises(ValueError, match="eps"):
            DecoderOnlyConfig(40, d_model=32, n_heads=4, eps=eps)
    assert DecoderOnlyConfig(40, d_model=32, n_heads=4, eps=1e-5).eps == 1e-5


@pytest.mark.parametrize("config", [dict(vocab_size=V), tl.TransformerConfig(V, V), None])
def test_a_config_that_is_not_a_decoder_only_config_is_named(config):
    """N18: DecoderOnlyLM(dict) raised AttributeError: 'dict' object has no attribute 'embed_scale'."""
    with pytest.raises(TypeError, match=r"^config must be a DecoderOnlyConfig") as err:
        DecoderOnlyLM(config)
    assert type(config).__name__ in str(err.value) and "\n" not in str(err.value)


def test_forward_names_src_and_tgt_in_and_their_batch_sizes():
    """N28b: different batch sizes gave torch.cat's 'Sizes of tensors must match'; tgt_in's bad ids were
    called 'ids'."""
    model = _model(0)
    src, tgt_in = torch.randint(3, V, (2, 5)), torch.randint(3, V, (1, 4))
    with pytest.raises(ValueError, match=r"^src and tgt_in must have the same batch size, got 2 and 1$"):
        model(src, tgt_in)
    with pytest.raises(ValueError, match=r"^tgt_in must be a \(B, T\) tensor of token ids"):
        model(src, torch.rand(2, 4))
    with pytest.raises(ValueError, match=r"^tgt_in holds ids outside \[0, 20\)"):
        model(src, torch.full((2, 4), V))
    with pytest.raises(ValueError, match=r"^src must be a \(B, S\) tensor of token ids"):
        model(torch.arange(5), tgt_in)


@pytest.mark.parametrize("positions", ["rope", "sinusoidal", "learned"])
def test_an_empty_prompt_gives_empty_logits_whatever_the_positions(positions):
    """N21b (a reshape error with RoPE) and its sibling (max() of no position) of the reliability report:
    a (B, 0) prompt has no position to score."""
    model = _model(positions=positions)
    for batch in (1, 2):
        assert model.lm(torch.zeros(batch, 0, dtype=torch.long)).shape == (batch, 0, model.config.vocab_size)
