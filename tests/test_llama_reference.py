"""DecoderOnlyLM against `transformers`' Llama given the same weights: tiny random configs built in the test
(nothing is downloaded), float32 logits equal to 1e-5, with grouped-query attention, tied and untied
embeddings, both RoPE layouts; one Llama block alone; and greedy decoding with the KV cache against Llama's
`generate`. `transformers` is a test-only dependency: without it these tests are skipped."""
from __future__ import annotations

import pytest
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib.modern.decoder_only import DecoderOnlyBlock, DecoderOnlyConfig, DecoderOnlyLM
from transformer_lib.modern.llama import half_to_interleaved, load_llama_state_dict

transformers = pytest.importorskip("transformers")
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding  # noqa: E402

SETTINGS = settings(max_examples=examples(10), deadline=None)


def _pair(seed, vocab=40, d=32, heads=4, kv=2, layers=2, ff=48, tie=True, layout="interleaved", theta=10000.0,
          std=None):
    torch.manual_seed(seed)
    hc = transformers.LlamaConfig(vocab_size=vocab, hidden_size=d, intermediate_size=ff,
                                  num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                                  max_position_embeddings=128, rms_norm_eps=1e-6, tie_word_embeddings=tie,
                                  rope_theta=theta, attn_implementation="eager")
    ref = transformers.LlamaForCausalLM(hc).eval()
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if "norm" in name:                 # not the identity, so a misplaced norm weight shows
                p.uniform_(0.5, 1.5)
            elif std is not None:              # larger weights: varied, position-dependent choices
                p.normal_(0.0, std)
    ours = DecoderOnlyLM(DecoderOnlyConfig(vocab, d_model=d, n_heads=heads, n_layers=layers, n_kv_heads=kv,
                                           d_ff=ff, max_len=128, tie_embeddings=tie, rope_layout=layout,
                                           rope_base=theta)).eval()
    return load_llama_state_dict(ours, ref.state_dict()), ref


@SETTINGS
@given(seed=st.integers(0, 2**16), heads_kv=st.sampled_from([(4, 4), (4, 2), (4, 1), (8, 2)]),
       d_k=st.sampled_from([4, 8, 16]), layers=st.integers(1, 3), tie=st.booleans(),
       layout=st.sampled_from(["interleaved", "half"]), theta=st.sampled_from([10000.0, 500000.0]),
       B=st.integers(1, 3), L=st.integers(1, 24))
def test_logits_equal_llamas(seed, heads_kv, d_k, layers, tie, layout, theta, B, L):
    heads, kv = heads_kv
    ours, ref = _pair(seed, d=heads * d_k, heads=heads, kv=kv, layers=layers, ff=3 * d_k, tie=tie,
                      layout=layout, theta=theta)
    ids = torch.randint(0, 40, (B, L), generator=torch.Generator().manual_seed(seed))
    ids[ids == 0] = 5                                        # our pad id: Llama here has no padding
    with torch.no_grad():
        torch.testing.assert_close(ours.lm(ids), ref(ids).logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("causal", [False, True])
def test_one_block_equals_a_llama_decoder_layer(layout, causal):
    torch.manual_seed(0)
    hc = transformers.LlamaConfig(hidden_size=32, intermediate_size=40, num_attention_heads=4,
                                  num_key_value_heads=2, rms_norm_eps=1e-6, attn_implementation="eager")
    ref = LlamaDecoderLayer(hc, layer_idx=0).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.normal_(0, 0.2)
    ours = DecoderOnlyBlock(DecoderOnlyConfig(10, d_model=32, n_heads=4, n_kv_heads=2, d_ff=40,
                                              rope_layout=layout)).eval()
    state = {f"model.layers.0.{k}": v for k, v in ref.state_dict().items()}
    shell = DecoderOnlyLM(DecoderOnlyConfig(10, d_model=32, n_heads=4, n_layers=1, n_kv_heads=2, d_ff=40,
                                            rope_layout=layout))
    shell.blocks[0] = ours
    state.update({"model.embed_tokens.weight": shell.embed.weight.detach(),
                  "model.norm.weight": shell.norm.weight.detach()})
    load_llama_state_dict(shell, state)
    x, pos = torch.randn(2, 7, 32), torch.arange(7)
    with torch.no_grad():
        cos, sin = LlamaRotaryEmbedding(hc)(x, pos[None].expand(2, 7))
        mask, ref_mask = None, None
        if causal:
            mask = torch.ones(7, 7, dtype=torch.bool).tril()
            ref_mask = torch.zeros(1, 1, 7, 7).masked_fill(~mask, float("-inf"))
        expected = ref(x, attention_mask=ref_mask, position_embeddings=(cos, sin))
        expected = expected[0] if isinstance(expected, tuple) else expected
        got = ours(x, mask, shell.rope.rotation(pos))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_decoding_with_the_cache_equals_llamas_generate(tie, seed):
    ours, ref = _pair(3, tie=tie, std=0.5)
    prompt = torch.randint(3, 40, (1, 6), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        with_sep = torch.cat([prompt, torch.ones(1, 1, dtype=torch.long)], 1)     # prompt, separator bos
        # as our decoders: pad (0) and bos (1) never generated, stop at eos (2)
        theirs = ref.generate(with_sep, max_new_tokens=12, do_sample=False, suppress_tokens=[0, 1],
                              pad_token_id=0, eos_token_id=2, bos_token_id=1)[0, 7:]
    mine = tl.greedy_decode(ours, prompt, 12)[0, 1:]
    mine = mine[:int((mine != 0).sum())]                      # drop the padding after eos
    assert torch.equal(mine, theirs)


def test_the_permutation_interleaves_the_two_halves():
    assert half_to_interleaved(8).tolist() == [0, 4, 1, 5, 2, 6, 3, 7]


def test_a_model_that_is_not_llama_shaped_is_refused():
    ours = DecoderOnlyLM(DecoderOnlyConfig(10, d_model=16, n_heads=2, activation="relu"))
    with pytest.raises(ValueError, match="swiglu"):
        load_llama_state_dict(ours, {})
    with pytest.raises(KeyError, match="embed_tokens"):
        load_llama_state_dict(DecoderOnlyLM(DecoderOnlyConfig(10, d_model=16, n_heads=2)), {})


# ---------------------------------------------------------------- issue 26: the loader refuses, before copying

def _tiny(layers=1, tie=True, d=32, kv=2, vocab=40):
    return DecoderOnlyLM(DecoderOnlyConfig(vocab, d_model=d, n_heads=4, n_layers=layers, n_kv_heads=kv, d_ff=48,
                                           max_len=128, tie_embeddings=tie))


def _llama_state(layers=1, tie=True, d=32, kv=2, vocab=40):
    return _pair(0, vocab=vocab, d=d, kv=kv, layers=layers, tie=tie)[1].state_dict()


@pytest.mark.parametrize("model, state, message", [
    (lambda: _tiny(layers=1), lambda: _llama_state(layers=2), "would not use, such as 'model.layers.1"),
    (lambda: _tiny(tie=True), lambda: _llama_state(tie=False), "lm_head.weight differs from its embeddings"),
    (lambda: _tiny(d=64), lambda: _llama_state(d=32), "model.embed_tokens.weight has shape \\(40, 32\\)"),
    (lambda: _tiny(kv=4), lambda: _llama_state(kv=2), "k_proj.weight has shape \\(16, 32\\)"),
    (lambda: _tiny(vocab=50), lambda: _llama_state(vocab=40), "embed_tokens.weight has shape \\(40, 32\\)"),
])
def test_a_state_dict_that_does_not_fit_is_refused_before_anything_is_copied(model, state, message):
    ours, theirs = model(), state()
    before = {k: v.clone() for k, v in ours.state_dict().items()}
    with pytest.raises(ValueError, match=message):
        load_llama_state_dict(ours, theirs)
    assert all(torch.equal(before[k], v) for k, v in ours.state_dict().items())     # untouched


def test_a_model_instead_of_its_state_dict_is_a_clear_error():
    ref = _pair(0, layers=1)[1]
    with pytest.raises(TypeError, match="state must be a state dict .*, got LlamaForCausalLM"):
        load_llama_state_dict(_tiny(), ref)


def test_half_to_interleaved_refuses_an_odd_width():
    with pytest.raises(ValueError, match="head_dim must be even"):
        half_to_interleaved(7)
    assert sorted(half_to_interleaved(8).tolist()) == list(range(8))
