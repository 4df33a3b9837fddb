"""Tests of transformer_lib.decoder (chapter 8): reference tests against nn.TransformerDecoder(Layer),
property tests of the masks and the cache, bad-input tests."""
from __future__ import annotations

import copy
import functools
import warnings

import pytest
import torch
from conftest import examples
from conftest import padded_ids as _ids  # one builder of padded id batches for the layer tests
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import transformer_lib as tl
from transformer_lib.decoder import load_torch_decoder, load_torch_decoder_layer
from transformer_lib.encoder import LayerConfig

D, H, FF = 16, 4, 32
SETTINGS = settings(max_examples=examples(25), deadline=None)


@functools.cache
def _decoder(norm_first: bool = False, n_layers: int = 2) -> tl.Decoder:
    """One shared decoder per configuration (building one per hypothesis example is the slow part)."""
    torch.manual_seed(1234)
    return tl.Decoder(LayerConfig(D, H, FF, 0.0, norm_first), n_layers).eval()


def _torch_pair(norm_first: bool, n_layers: int, activation: str = "relu"):
    ref_layer = nn.TransformerDecoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first,
                                           activation=activation)
    ref_stack = nn.TransformerDecoder(copy.deepcopy(ref_layer), n_layers,
                                      norm=nn.LayerNorm(D) if norm_first else None)
    ours_layer = load_torch_decoder_layer(
        tl.DecoderLayer(LayerConfig(D, H, FF, 0.0, norm_first, activation=activation)), ref_layer)
    ours_stack = load_torch_decoder(
        tl.Decoder(LayerConfig(D, H, FF, 0.0, norm_first, activation=activation), n_layers), ref_stack)
    return ref_layer, ref_stack, ours_layer, ours_stack


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_equals_torch_decoder(norm_first, dtype, tol, activation):
    torch.manual_seed(0)
    mods = [m.to(dtype).eval() for m in _torch_pair(norm_first, 3, activation)]
    tgt = _ids([6, 4, 1], 6, bos=True)
    src = _ids([5, 2, 3], 5)
    x = torch.randn(3, 6, D, dtype=dtype)
    mem = torch.randn(3, 5, D, dtype=dtype)
    ours = dict(tgt_mask=tl.target_mask(tgt, 0), memory_mask=tl.padding_mask(src, 0))
    theirs = dict(tgt_mask=~tl.causal_mask(6)[0, 0], tgt_key_padding_mask=tgt == 0,
                  memory_key_padding_mask=src == 0)
    with torch.no_grad():
        torch.testing.assert_close(mods[2](x, mem, **ours), mods[0](x, mem, **theirs), atol=tol, rtol=0)
        torch.testing.assert_close(mods[3](x, mem, **ours), mods[1](x, mem, **theirs), atol=tol, rtol=0)


def test_equals_torch_in_training_mode_without_dropout():
    """Same gradients too: the backward pass of ours and PyTorch's agree."""
    torch.manual_seed(1)
    ref_layer, _, ours_layer, _ = [m.double() for m in _torch_pair(False, 1)]
    x = torch.randn(2, 5, D, dtype=torch.float64)
    mem = torch.randn(2, 4, D, dtype=torch.float64)
    (ours_layer(x, mem, tl.causal_mask(5)) ** 2).sum().backward()
    (ref_layer(x, mem, tgt_mask=~tl.causal_mask(5)[0, 0]) ** 2).sum().backward()
    torch.testing.assert_close(ours_layer.cross_attn.in_proj.weight.grad, ref_layer.multihead_attn.in_proj_weight.grad)
    torch.testing.assert_close(ours_layer.feed_forward.linear1.weight.grad, ref_layer.linear1.weight.grad)


@SETTINGS
@given(T=st.integers(2, 8), S=st.integers(1, 6), cut=st.integers(1, 7), norm_first=st.booleans(),
       seed=st.integers(0, 2**16))
def test_future_never_changes_past(T, S, cut, norm_first, seed):
    cut = min(cut, T - 1)
    torch.manual_seed(seed)
    dec = _decoder(norm_first)
    x = torch.randn(2, T, D)
    mem = torch.randn(2, S, D)
    x2 = x.clone()
    x2[:, cut:] = torch.randn(2, T - cut, D)
    with torch.no_grad():
        a = dec(x, mem, tl.causal_mask(T))
        b = dec(x2, mem, tl.causal_mask(T))
    torch.testing.assert_close(a[:, :cut], b[:, :cut], atol=1e-6, rtol=0)


@SETTINGS
@given(S=st.integers(1, 6), extra=st.integers(1, 4), T=st.integers(1, 6), norm_first=st.booleans(),
       seed=st.integers(0, 2**16))
def test_source_padding_never_changes_result(S, extra, T, norm_first, seed):
    """Appending pad positions (any content) to the memory, with the padding mask, changes nothing."""
    torch.manual_seed(seed)
    dec = _decoder(norm_first)
    x = torch.randn(1, T, D)
    mem = torch.randn(1, S, D)
    padded = torch.cat([mem, 100 * torch.randn(1, extra, D)], dim=1)
    src_ids = torch.cat([torch.full((1, S), 5), torch.zeros(1, extra, dtype=torch.long)], dim=1)
    with torch.no_grad():
        a = dec(x, mem, tl.causal_mask(T))
        b = dec(x, padded, tl.causal_mask(T), tl.padding_mask(src_ids, 0))
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


@SETTINGS
@given(lengths=st.lists(st.integers(1, 6), min_size=2, max_size=4), seed=st.integers(0, 2**16))
def test_target_padding_never_changes_real_positions(lengths, seed):
    """A target row padded to the batch's length gives, at its real positions, the result it gives alone."""
    torch.manual_seed(seed)
    dec = _decoder()
    T = max(lengths)
    tgt = _ids(lengths, T, bos=True)
    x = torch.randn(len(lengths), T, D)
    mem = torch.randn(len(lengths), 3, D)
    with torch.no_grad():
        batched = dec(x, mem, tl.target_mask(tgt, 0))
        for b, n in enumerate(lengths):
            alone = dec(x[b:b + 1, :n], mem[b:b + 1], tl.target_mask(tgt[b:b + 1, :n], 0))
            torch.testing.assert_close(batched[b:b + 1, :n], alone, atol=1e-5, rtol=0)


@SETTINGS
@given(B=st.integers(2, 4), seed=st.integers(0, 2**16))
def test_batch_rows_are_independent(B, seed):
    torch.manual_seed(seed)
    dec = _decoder()
    x, mem = torch.randn(B, 5, D), torch.randn(B, 4, D)
    with torch.no_grad():
        a = dec(x, mem, tl.causal_mask(5))
        x2, mem2 = x.clone(), mem.clone()
        x2[1:], mem2[1:] = torch.randn(B - 1, 5, D), torch.randn(B - 1, 4, D)
        b = dec(x2, mem2, tl.causal_mask(5))
    torch.testing.assert_close(a[0], b[0], atol=1e-6, rtol=0)


@SETTINGS
@given(T=st.integers(1, 7), first=st.integers(1, 3), norm_first=st.booleans(), seed=st.integers(0, 2**16))
def test_cache_equals_full_pass(T, first, norm_first, seed):
    """A prefix of `first` positions at once, then one position a step, equals the full masked pass."""
    first = min(first, T)
    torch.manual_seed(seed)
    dec = _decoder(norm_first, 3)
    x, mem = torch.randn(2, T, D), torch.randn(2, 4, D)
    src_mask = tl.padding_mask(torch.tensor([[5, 5, 5, 5], [5, 5, 0, 0]]), 0)
    cache = tl.KVCache(3)
    with torch.no_grad():
        full = dec(x, mem, tl.causal_mask(T), src_mask)
        parts = [dec(x[:, :first], mem, tl.causal_mask(first), src_mask, cache)]
        parts += [dec(x[:, t:t + 1], mem, None, src_mask, cache) for t in range(first, T)]
    assert cache.length == T
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-5, rtol=0)


def test_cache_reorder_selects_rows():
    torch.manual_seed(0)
    dec = tl.Decoder(LayerConfig(D, H, FF, 0.0), 2).eval()
    x, mem = torch.randn(3, 4, D), torch.randn(3, 2, D)
    cache = tl.KVCache(2)
    with torch.no_grad():
        dec(x[:, :3], mem, tl.causal_mask(3), None, cache)
        index = torch.tensor([2, 2, 0])
        cache.reorder(index)
        step = dec(x[index, 3:4], mem[index], None, None, cache)
        full = dec(x[index], mem[index], tl.causal_mask(4))
    torch.testing.assert_close(step, full[:, 3:4], atol=1e-5, rtol=0)
    assert cache.layers[1].cross_attn.k.shape[0] == 3


def test_cache_reorder_without_cross_leaves_the_cross_attention_caches():
    torch.manual_seed(0)
    dec = tl.Decoder(LayerConfig(D, H, FF, 0.0), 2).eval()
    x, mem = torch.randn(3, 2, D), torch.randn(3, 5, D)
    cache = tl.KVCache(2)
    with torch.no_grad():
        dec(x, mem, tl.causal_mask(2), None, cache)
        before = [(layer.self_attn.k.clone(), layer.cross_attn.k) for layer in cache.layers]
        cache.reorder(torch.tensor([2, 0, 1]), cross=False)
    for (self_k, cross_k), layer in zip(before, cache.layers):
        assert layer.cross_attn.k is cross_k                                # not touched
        assert torch.equal(layer.self_attn.k, self_k[[2, 0, 1]])


def test_cross_attention_weights_are_a_distribution_over_real_source_tokens():
    torch.manual_seed(0)
    layer = tl.DecoderLayer(LayerConfig(D, H, FF, 0.0)).eval()
    layer.cross_attn.record_weights = True
    src = _ids([4, 2], 4)
    with torch.no_grad():
        layer(torch.randn(2, 3, D), torch.randn(2, 4, D), tl.causal_mask(3), tl.padding_mask(src, 0))
    w = layer.cross_attn.last_weights
    assert w.shape == (2, H, 3, 4)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, H, 3))
    assert w[1, :, :, 2:].abs().max() == 0


def test_post_norm_has_no_final_norm_by_default_and_pre_norm_has_one():
    assert isinstance(tl.Decoder(LayerConfig(D, H, FF), 1).norm, nn.Identity)
    assert isinstance(tl.Decoder(LayerConfig(D, H, FF, norm_first=True), 1).norm, tl.LayerNorm)
    assert isinstance(tl.Decoder(LayerConfig(D, H, FF, final_norm=True), 1).norm, tl.LayerNorm)


def test_follows_input_dtype_and_autocast():
    dec = tl.Decoder(LayerConfig(D, H, FF, 0.1), 2).train()
    x = torch.randn(2, 5, D, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = dec(x, torch.randn(2, 3, D), tl.causal_mask(5))
    y.float().sum().backward()
    assert torch.isfinite(y.float()).all() and torch.isfinite(x.grad).all()


# ---- bad input ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("memory", [torch.randn(3, 4, D), torch.randn(2, 4, D + 1), torch.randn(2, 4),
                                    "not a tensor"])
def test_bad_memory(memory):
    """Another batch size, another width, another rank: the stack names the memory, once for all layers."""
    dec = tl.Decoder(LayerConfig(D, H, FF), 2)
    with pytest.raises(ValueError, match="memory"):
        dec(torch.randn(2, 3, D), memory)


def test_bad_cache_layers():
    dec = tl.Decoder(LayerConfig(D, H, FF), 2)
    with pytest.raises(ValueError, match="cache"):
        dec(torch.randn(2, 1, D), torch.randn(2, 4, D), cache=tl.KVCache(3))


def test_bad_mask_shape():
    layer = tl.DecoderLayer(LayerConfig(D, H, FF))
    with pytest.raises(ValueError, match="mask"):
        layer(torch.randn(2, 3, D), torch.randn(2, 4, D), memory_mask=torch.ones(2, 1, 1, 5, dtype=torch.bool))


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_bad_layer_count(bad):
    with pytest.raises(ValueError, match="n_layers"):
        tl.Decoder(LayerConfig(D, H, FF), bad)
    with pytest.raises(ValueError, match="n_layers"):
        tl.KVCache(bad)


def test_bad_reorder_index():
    with pytest.raises(ValueError, match="index"):
        tl.KVCache(1).reorder(torch.tensor([0.0]))


def test_load_refuses_mismatched_reference():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = nn.TransformerDecoderLayer(D, H, FF, batch_first=True)
    with pytest.raises(ValueError, match="norm_first"):
        load_torch_decoder_layer(tl.DecoderLayer(LayerConfig(D, H, FF, norm_first=True)), ref)
    with pytest.raises(ValueError, match="d_ff"):
        load_torch_decoder_layer(tl.DecoderLayer(LayerConfig(D, H, 2 * FF)), ref)
    with pytest.raises(ValueError, match="activation"):
        load_torch_decoder_layer(tl.DecoderLayer(LayerConfig(D, H, FF, activation="gelu")), ref)
    with pytest.raises(ValueError, match="n_heads"):
        load_torch_decoder_layer(tl.DecoderLayer(LayerConfig(D, 2, FF)), ref)
    with pytest.raises(ValueError, match="batch_first"):
        load_torch_decoder_layer(tl.DecoderLayer(LayerConfig(D, H, FF)), nn.TransformerDecoderLayer(D, H, FF))


def test_load_decoder_stack_refuses_mismatched_reference():
    ref = nn.TransformerDecoder(nn.TransformerDecoderLayer(D, H, FF, batch_first=True), 2)
    with pytest.raises(ValueError, match="layer counts"):
        load_torch_decoder(tl.Decoder(LayerConfig(D, H, FF), 3), ref)
    with pytest.raises(ValueError, match="final norm"):
        load_torch_decoder(tl.Decoder(LayerConfig(D, H, FF, final_norm=True), 2), ref)
    with pytest.raises(TypeError, match="reference"):
        load_torch_decoder(tl.Decoder(LayerConfig(D, H, FF), 2), ref.layers[0])
    with pytest.raises(TypeError, match="cross_attn"):            # an encoder layer lacks cross-attention
        load_torch_decoder_layer(tl.EncoderLayer(LayerConfig(D, H, FF)), ref.layers[0])


def test_failed_load_copies_nothing():
    """The checks run before the first copy: a refused reference leaves the layer as it was."""
    ref = nn.TransformerDecoderLayer(D, H, FF, batch_first=True, layer_norm_eps=1e-6)
    layer = tl.DecoderLayer(LayerConfig(D, H, FF))
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    with pytest.raises(ValueError, match="eps"):
        load_torch_decoder_layer(layer, ref)
    assert all(torch.equal(v, before[k]) for k, v in layer.state_dict().items())
