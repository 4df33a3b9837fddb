"""Tests of transformer_lib.attention: reference tests against PyTorch (F.scaled_dot_product_attention,
nn.MultiheadAttention with copied weights), properties, the KV-cache protocol and bad input."""
from __future__ import annotations

import math
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_dropout_only_in_training, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_lib.attention import MultiHeadAttention, attention, check_mask
from transformer_lib.cache import AttentionCache

SETTINGS = settings(max_examples=examples(30), deadline=None)


def _random_mask(gen, shape, p_keep=0.7, full_rows=True):
    mask = torch.rand(shape, generator=gen) < p_keep
    if not full_rows:
        mask[..., 0] = True
    return mask


def _attention_float64(q, k, v, mask=None):
    """The formula computed another way: explicit exp / sum in float64, masked terms dropped."""
    q, k, v = q.double(), k.double(), v.double()
    s = torch.einsum("...id,...jd->...ij", q, k) / math.sqrt(q.size(-1))
    e = torch.exp(s - s.amax(-1, keepdim=True))
    if mask is not None:
        e = e * mask
    denom = e.sum(-1, keepdim=True)
    w = torch.where(denom > 0, e / denom.clamp_min(1e-300), torch.zeros_like(e))
    return torch.einsum("...ij,...jd->...id", w, v), w


def _copy_to_torch(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    bias = ours.in_proj.bias is not None
    ref = nn.MultiheadAttention(ours.d_model, ours.n_heads, bias=bias, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.in_proj.weight)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        if bias:
            ref.in_proj_bias.copy_(ours.in_proj.bias)
            ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ref


# --- attention() -------------------------------------------------------------------------------------

@SETTINGS
@given(B=st.integers(1, 3), h=st.integers(1, 3), Lq=st.integers(1, 6), Lk=st.integers(1, 6),
       d_k=st.integers(1, 8), d_v=st.integers(1, 8), masked=st.booleans(), seed=st.integers(0, 2**16))
def test_attention_matches_formula_and_sdpa(B, h, Lq, Lk, d_k, d_v, masked, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, h, Lq, d_k, generator=g), torch.randn(B, h, Lk, d_k, generator=g),
               torch.randn(B, h, Lk, d_v, generator=g))
    mask = _random_mask(g, (B, 1, Lq, Lk)) if masked else None      # may contain fully masked rows
    out, w = attention(q, k, v, mask)
    ref_out, ref_w = _attention_float64(q, k, v, mask)
    torch.testing.assert_close(out.double(), ref_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w.double(), ref_w, atol=1e-6, rtol=1e-5)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, sdpa, atol=1e-5, rtol=1e-5)
    has_key = torch.ones(B, h, Lq, dtype=torch.bool) if mask is None else mask.any(-1).expand(B, h, Lq)
    torch.testing.assert_close(w.sum(-1), has_key.float())          # rows sum to 1, or 0 with no key
    assert torch.isfinite(out).all()


def test_attention_unbatched_and_leading_dims():
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(4, 3, generator=g), torch.randn(5, 3, generator=g), torch.randn(5, 2, generator=g)
    out, w = attention(q, k, v)
    assert out.shape == (4, 2) and w.shape == (4, 5)
    out5, _ = attention(q.expand(2, 3, 4, 3), k.expand(2, 3, 5, 3), v.expand(2, 3, 5, 2))
    torch.testing.assert_close(out5[1, 2], out)


def test_fully_masked_row_gives_zeros_and_finite_gradients():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 3, 4, generator=g, requires_grad=True)
    k = torch.randn(2, 5, 4, generator=g, requires_grad=True)
    v = torch.randn(2, 5, 4, generator=g, requires_grad=True)
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[0, 1] = False
    out, w = attention(q, k, v, mask)
    assert torch.equal(out[0, 1], torch.zeros(4)) and torch.equal(w[0, 1], torch.zeros(5))
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert torch.equal(q.grad[0, 1], torch.zeros(4))


def test_attention_dropout():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 8, 4), torch.randn(2, 8, 4), torch.randn(2, 8, 4)
    out0, w0 = attention(q, k, v)
    out1, w1 = attention(q, k, v, dropout_p=0.5)
    dropped = w1 == 0
    assert dropped.any() and not dropped.all()
    torch.testing.assert_close(w1[~dropped], 2 * w0[~dropped])      # inverted dropout scaling
    with pytest.raises(ValueError, match="dropout_p"):
        attention(q, k, v, dropout_p=1.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_attention_half_precision(dtype):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 8, generator=g) for _ in range(3))
    mask = _random_mask(g, (2, 1, 5, 5))
    mask[0, 0, 2] = False                                           # one fully masked row
    ref, _ = attention(q, k, v, mask)
    out, w = attention(q.to(dtype), k.to(dtype), v.to(dtype), mask)
    assert out.dtype == dtype and w.dtype == dtype and torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), ref, atol=3e-2, rtol=3e-2)
    with torch.autocast("cpu", dtype=dtype):
        out_ac, _ = attention(q, k, v, mask)
    assert torch.isfinite(out_ac).all()
    torch.testing.assert_close(out_ac.float(), ref, atol=3e-2, rtol=3e-2)


@SETTINGS
@given(L=st.integers(2, 7), d=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_self_attention_is_permutation_equivariant(L, d, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(L, d, generator=g)
    W = [torch.randn(d, d, generator=g) for _ in range(3)]

    def f(x):
        return attention(x @ W[0], x @ W[1], x @ W[2])[0]
    perm = torch.randperm(L, generator=g)
    torch.testing.assert_close(f(x[perm]), f(x)[perm], atol=1e-5, rtol=1e-5)


# --- MultiHeadAttention against nn.MultiheadAttention ---------------------------------------------------

@SETTINGS
@given(B=st.integers(1, 3), Lq=st.integers(1, 6), Lk=st.integers(1, 6), h=st.sampled_from([1, 2, 4]),
       d_k=st.integers(1, 4), kind=st.sampled_from(["self", "cross_kv_same", "cross_kv_separate"]),
       masked=st.booleans(), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_mha_matches_torch(B, Lq, Lk, h, d_k, kind, masked, bias, seed):
    torch.manual_seed(seed)
    d_model = h * d_k
    ours = MultiHeadAttention(d_model, h, bias=bias).eval()
    if bias:                                           # non-zero biases, so that their layout is tested
        with torch.no_grad():
            ours.in_proj.bias.uniform_(-0.5, 0.5)
            ours.out_proj.bias.uniform_(-0.5, 0.5)
    ref = _copy_to_torch(ours).eval()
    x = torch.randn(B, Lq, d_model)
    if kind == "self":                                 # no key: self-attention
        q = k = v = x
        Lk, args = Lq, (x,)
    elif kind == "cross_kv_same":                      # a key, no value: values from the key
        q, k = x, torch.randn(B, Lk, d_model)
        v, args = k, (x, k)
    else:
        q, k, v = x, torch.randn(B, Lk, d_model), torch.randn(B, Lk, d_model)
        args = (q, k, v)
    keep = torch.rand(B, Lk) < 0.7
    keep[:, 0] = True                                  # PyTorch gives NaN for fully masked rows
    mask = keep[:, None, None, :] if masked else None
    kpm = ~keep if masked else None
    ref_out, ref_w = ref(q, k, v, key_padding_mask=kpm, need_weights=True, average_attn_weights=False)
    out_fast = ours(*args, mask=mask)
    out_slow, w = ours.forward_with_weights(*args, mask=mask)
    torch.testing.assert_close(out_fast, ref_out, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out_slow, ref_out, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(w, ref_w, atol=1e-6, rtol=1e-5)                  # (B, h, Lq, Lk)
    _, ref_avg = ref(q, k, v, key_padding_mask=kpm)                             # head-averaged default
    torch.testing.assert_close(w.mean(1), ref_avg, atol=1e-6, rtol=1e-5)


def test_mha_gradients_match_torch_with_causal_mask():
    torch.manual_seed(0)
    ours = MultiHeadAttention(16, 4)
    ref = _copy_to_torch(ours)
    x1 = torch.randn(3, 7, 16, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    allowed = torch.ones(7, 7, dtype=torch.bool).tril()
    ours(x1, mask=allowed[None, None]).square().sum().backward()
    ref(x2, x2, x2, attn_mask=~allowed, need_weights=False)[0].square().sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ours.in_proj.weight.grad, ref.in_proj_weight.grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ours.out_proj.weight.grad, ref.out_proj.weight.grad, atol=1e-5, rtol=1e-4)


def test_mha_initialisation_like_torch():
    torch.manual_seed(0)
    d = 64
    mha = MultiHeadAttention(d, 8)
    bound = math.sqrt(6 / (d + 3 * d))                 # xavier_uniform on (3d, d)
    w = mha.in_proj.weight
    assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound
    assert abs(w.var().item() - bound**2 / 3) < 0.1 * bound**2 / 3
    assert torch.equal(mha.in_proj.bias, torch.zeros(3 * d)) and torch.equal(mha.out_proj.bias, torch.zeros(d))
    assert MultiHeadAttention(d, 8, bias=False).in_proj.bias is None


def test_mha_fully_masked_rows_and_autocast():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2).eval()
    x = torch.randn(2, 4, 16, requires_grad=True)
    mask = torch.ones(2, 1, 4, 4, dtype=torch.bool)
    mask[1] = False                                    # a sentence with no visible key at all
    fast = mha(x, mask=mask)
    slow, _ = mha.forward_with_weights(x, mask=mask)
    torch.testing.assert_close(fast, slow, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(fast[1], mha.out_proj.bias.expand(4, 16))   # zero attention output
    fast.sum().backward()
    assert torch.isfinite(x.grad).all()
    for dtype in (torch.bfloat16, torch.float16):
        with torch.autocast("cpu", dtype=dtype):
            for need in (False, True):
                out = mha.forward_with_weights(x, mask=mask)[0] if need else mha(x, mask=mask)
                assert torch.isfinite(out).all()
                torch.testing.assert_close(out.float(), fast, atol=5e-2, rtol=5e-2)


def test_mha_dropout_only_in_training():
    torch.manual_seed(0)
    assert_dropout_only_in_training(MultiHeadAttention(16, 4, dropout=0.5), torch.randn(2, 6, 16))


def test_record_weights():
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3).eval()
    x, mem = torch.randn(2, 4, 12, requires_grad=True), torch.randn(2, 7, 12)
    assert mha.last_weights is None
    mha.record_weights = True
    out = mha(x, mem)
    _, w = mha.forward_with_weights(x, mem)
    assert mha.last_weights.shape == (2, 3, 4, 7) and not mha.last_weights.requires_grad
    torch.testing.assert_close(mha.last_weights, w.detach())
    assert out.shape == (2, 4, 12)


def test_self_attention_cache_equals_full_pass():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 6, 16)
    full = mha(x, mask=torch.ones(6, 6, dtype=torch.bool).tril()[None, None])
    cache = AttentionCache()
    steps = []
    for t in range(6):
        steps.append(mha(x[:, t:t + 1], cache=cache))  # the new query sees every cached key
    assert cache.k.shape == (2, 4, 6, 4) and cache.v.shape == (2, 4, 6, 4) and cache.length == 6
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)



def test_static_cache_equals_growing_cache_bit_for_bit():
    """reserve(n) preallocates the buffers and writes in place; the keys, values and outputs are exactly the
    growing (torch.cat) cache's, chunks of several positions and a reorder (beams) included."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(3, 7, 16)
    grow, static = AttentionCache(), AttentionCache()
    static.reserve(7)
    index = torch.tensor([2, 0, 0, 1])                 # a new batch size: the buffers follow
    for lo, hi in [(0, 2), (2, 3), (3, 6)]:
        a, b = mha(x[:, lo:hi], cache=grow), mha(x[:, lo:hi], cache=static)
        assert torch.equal(a, b) and torch.equal(grow.k, static.k) and torch.equal(grow.v, static.v)
        if lo == 0:
            x = x.index_select(0, index)
            grow.reorder(index)
            static.reorder(index)
    assert static.length == 6 and static.k.shape == (4, 4, 6, 4)
    assert torch.equal(mha(x[:, 6:], cache=grow), mha(x[:, 6:], cache=static))
    with pytest.raises(ValueError, match="room for 7 positions"):
        mha(x[:, :1], cache=static)
    with pytest.raises(RuntimeError, match="before its first call"):
        static.reserve(9)
    with pytest.raises(ValueError, match="capacity"):
        AttentionCache().reserve(0)

@pytest.mark.parametrize("grad", [False, True])
def test_static_cache_reorders_equal_the_growing_cache_with_and_without_autograd(grad):
    """After several reorders, batch sizes changing, with autograd on and off, a static cache's keys, values
    and outputs are the growing cache's, bit for bit."""
    torch.manual_seed(1)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 6, 16)
    grow, static = AttentionCache(), AttentionCache()
    static.reserve(6)
    indexes = [torch.tensor([1, 1, 0, 0, 1, 0]), torch.tensor([5, 0, 2, 2, 3, 1]), torch.tensor([4, 4, 0])]
    with torch.set_grad_enabled(grad):
        for t in range(6):
            a, b = mha(x[:, t:t + 1], cache=grow), mha(x[:, t:t + 1], cache=static)
            assert torch.equal(a, b) and torch.equal(grow.k, static.k) and torch.equal(grow.v, static.v)
            if t < len(indexes):
                x = x.index_select(0, indexes[t])
                grow.reorder(indexes[t])
                static.reorder(indexes[t])
                assert torch.equal(grow.k, static.k) and torch.equal(grow.v, static.v)
    assert static.k.requires_grad == grad and static.k.shape == (3, 4, 6, 4)


def test_cross_attention_cache_is_reused():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x, mem = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    cache = AttentionCache()
    first = mha(x, mem, cache=cache)
    k_cached = cache.k
    torch.testing.assert_close(first, mha(x, mem, mem))
    # later calls reuse the cached keys/values: the memory argument is not projected again
    second = mha(x, torch.zeros_like(mem), cache=cache)
    torch.testing.assert_close(second, first)
    assert cache.k is k_cached


def test_self_or_cross_attention_is_chosen_by_the_key_argument():
    """Self-attention is a call without a key, whatever the tensors are; a key given is cross-attention,
    even when it is the query's own tensor (the same function then, computed with the row slices)."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 3, 16)
    torch.testing.assert_close(mha(x), mha(x, x, x), atol=1e-6, rtol=1e-5)
    own, other = AttentionCache(), AttentionCache()
    mha(x, cache=own)
    mha(x, x, cache=other)                             # cross-attention to x: filled once
    mha(x[:, :1], cache=own)                           # self: one position more
    mha(x[:, :1], x, cache=other)                      # cross: the cache is read, not grown
    assert own.length == 4 and other.length == 3
    with pytest.raises(ValueError, match="value needs a key"):
        mha(x, None, x)


def test_forward_returns_one_type_and_forward_with_weights_a_pair():
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 3, 8)
    mha.record_weights = True
    assert isinstance(mha(x), torch.Tensor)
    out, w = mha.forward_with_weights(x)
    assert out.shape == (2, 3, 8) and w.shape == (2, 2, 3, 3)


# --- bad input --------------------------------------------------------------------------------------------

def test_bad_input_raises_value_error():
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match="divisible by n_heads"):
        MultiHeadAttention(10, 4)
    with pytest.raises(ValueError, match="n_heads"):
        MultiHeadAttention(8, 0)
    with pytest.raises(ValueError, match="dropout"):
        MultiHeadAttention(8, 2, dropout=1.5)
    with pytest.raises(ValueError, match="same width d_k"):
        attention(torch.randn(3, 4), torch.randn(3, 5), torch.randn(3, 4))
    with pytest.raises(ValueError, match="same length Lk"):
        attention(torch.randn(3, 4), torch.randn(3, 4), torch.randn(2, 4))
    with pytest.raises(ValueError, match="does not broadcast"):
        mha(x, mask=torch.ones(2, 1, 1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="does not broadcast"):
        mha.forward_with_weights(x, mask=torch.ones(3, 1, 1, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="boolean"):
        mha(x, mask=torch.ones(2, 1, 1, 5))
    with pytest.raises(ValueError, match="boolean"):
        attention(x, x, x, torch.ones(2, 5, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="query must have shape"):
        mha(torch.randn(2, 5, 6), x, x)
    with pytest.raises(ValueError, match="key"):
        mha(x, torch.randn(2, 4, 8), torch.randn(2, 3, 8))
    with pytest.raises(ValueError, match="batch"):
        mha(x, torch.randn(3, 4, 8), torch.randn(3, 4, 8))


def test_check_mask_accepts_broadcastable_and_none():
    check_mask(None, (2, 4, 3, 5))
    for shape in [(2, 1, 1, 5), (1, 1, 3, 5), (2, 4, 3, 5), (5,), (3, 5)]:
        check_mask(torch.ones(shape, dtype=torch.bool), (2, 4, 3, 5))
    with pytest.raises(ValueError, match="does not broadcast"):
        check_mask(torch.ones(2, 4, 3, 5, 1, dtype=torch.bool), (2, 4, 3, 5))   # would enlarge the scores


def test_sdpa_path_zeroes_empty_rows_even_if_the_kernel_gives_nan(monkeypatch):
    """Some PyTorch versions/backends return NaN for a query with no permitted key; the module must not."""
    def naive_sdpa(q, k, v, attn_mask=None, dropout_p=0.0):
        s = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        if attn_mask is not None:
            s = s.masked_fill(~attn_mask, float("-inf"))
        return torch.softmax(s, dim=-1) @ v            # NaN on rows with no key

    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 3, 8, requires_grad=True)
    mask = torch.ones(2, 1, 1, 3, dtype=torch.bool)
    mask[1] = False
    expected = mha.forward_with_weights(x, mask=mask)[0]
    monkeypatch.setattr(F, "scaled_dot_product_attention", naive_sdpa)
    out = mha(x, mask=mask)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)


# --- validation once, no host-device synchronisation ------------------------------------------------------

@pytest.mark.parametrize("need_weights", [False, True])
def test_forward_checks_the_mask_once_per_call(monkeypatch, need_weights):
    """MultiHeadAttention checks its mask once per call, on both paths (the explicit path does not check it
    again through the public `attention`)."""
    attention_module = sys.modules["transformer_lib.attention"]   # the package's `attention` is the function
    calls = []
    real = attention_module.check_mask
    monkeypatch.setattr(attention_module, "check_mask", lambda *a, **k: (calls.append(a), real(*a, **k)))
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 5, 8)
    call = mha.forward_with_weights if need_weights else mha
    call(x, mask=torch.ones(2, 1, 1, 5, dtype=torch.bool))
    assert len(calls) == 1


def test_forward_reads_no_value_back_from_the_device():
    """On the meta device tensors have shapes but no values: reading one back (.item(), bool(t), .tolist())
    raises. Both paths, the cache and the public function therefore run without a host-device sync."""
    mha = MultiHeadAttention(8, 2).to("meta")
    x = torch.randn(2, 5, 8, device="meta")
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool, device="meta")
    assert mha(x, mask=mask).shape == (2, 5, 8)
    out, w = mha.forward_with_weights(x, mask=mask)
    assert out.shape == (2, 5, 8) and w.shape == (2, 2, 5, 5)
    cache = AttentionCache()
    mha(x, cache=cache)
    assert mha(x[:, :1], cache=cache).shape == (2, 1, 8)
    assert attention(x, x, x, mask[:, 0])[0].shape == (2, 5, 8)
    check_mask(mask, (2, 2, 5, 5))


def test_constructor_refuses_bool_and_float_sizes():
    for kwargs, word in [(dict(d_model=True, n_heads=1), "d_model"), (dict(d_model=8, n_heads=2.0), "n_heads"),
                         (dict(d_model=8, n_heads=2, dropout=float("nan")), "dropout")]:
        with pytest.raises(ValueError, match=word):
            MultiHeadAttention(**kwargs)


def test_attention_leading_dimensions_must_broadcast():
    with pytest.raises(ValueError, match="leading dimensions of q .* and k .* do not broadcast"):
        attention(torch.randn(2, 3, 4), torch.randn(3, 5, 4), torch.randn(3, 5, 4))


def test_a_bad_mask_leaves_the_cache_as_it_was():
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 3, 8)
    cache = AttentionCache()
    mha(x, cache=cache)
    k_before = cache.k
    step = x[:, :1]
    with pytest.raises(ValueError, match="does not broadcast"):
        mha(step, mask=torch.ones(2, 1, 1, 3, dtype=torch.bool), cache=cache)   # needs 4 keys
    assert cache.k is k_before
    out = mha(step, mask=torch.ones(2, 1, 1, 4, dtype=torch.bool), cache=cache)
    assert out.shape == (2, 1, 8) and cache.length == 4


# --- grouped-query attention (n_kv_heads, chapter 13) --------------------------------------------------------

def _widened(gqa: MultiHeadAttention) -> MultiHeadAttention:
    """An ordinary n_heads layer whose W_k, W_v (and biases) repeat each kv head's rows for its group: the
    grouped layer's formula written another way."""
    d, h, g, d_k = gqa.d_model, gqa.n_heads, gqa.n_kv_heads, gqa.d_k
    full = MultiHeadAttention(d, h, bias=gqa.in_proj.bias is not None).eval()

    def widen(w):
        return w.view(g, d_k, *w.shape[1:]).repeat_interleave(h // g, 0).flatten(0, 1)

    with torch.no_grad():
        wq, wk, wv = gqa.in_proj.weight.split([d, g * d_k, g * d_k])
        full.in_proj.weight.copy_(torch.cat([wq, widen(wk), widen(wv)]))
        if gqa.in_proj.bias is not None:
            bq, bk, bv = gqa.in_proj.bias.split([d, g * d_k, g * d_k])
            full.in_proj.bias.copy_(torch.cat([bq, widen(bk), widen(bv)]))
        full.out_proj.load_state_dict(gqa.out_proj.state_dict())
    return full


@SETTINGS
@given(h_g=st.sampled_from([(4, 4), (4, 2), (4, 1), (6, 3), (8, 2)]), d_k=st.sampled_from([2, 4, 8]),
       B=st.integers(1, 3), Lq=st.integers(1, 6), Lk=st.integers(1, 6), seed=st.integers(0, 2**16),
       cross=st.booleans(), need_weights=st.booleans())
def test_grouped_query_attention_equals_heads_with_repeated_kv_weights(h_g, d_k, B, Lq, Lk, seed, cross,
                                                                      need_weights):
    h, g = h_g
    torch.manual_seed(seed)
    gqa = MultiHeadAttention(h * d_k, h, n_kv_heads=g).eval()
    with torch.no_grad():
        gqa.in_proj.bias.uniform_(-0.2, 0.2)
    full = _widened(gqa)
    x = torch.randn(B, Lq, h * d_k)
    args = (x, torch.randn(B, Lk, h * d_k)) if cross else (x,)
    mask = torch.rand(B, 1, Lq, args[-1].size(1)) < 0.7
    if need_weights:
        (ours, w_ours), (ref, w_ref) = gqa.forward_with_weights(*args, mask=mask), \
            full.forward_with_weights(*args, mask=mask)
        torch.testing.assert_close(w_ours, w_ref, atol=1e-6, rtol=1e-5)
    else:
        ours, ref = gqa(*args, mask=mask), full(*args, mask=mask)
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-5)


def test_n_kv_heads_equal_to_n_heads_is_the_old_layer():
    torch.manual_seed(0)
    old = MultiHeadAttention(32, 4)
    new = MultiHeadAttention(32, 4, n_kv_heads=4)
    assert [(k, v.shape) for k, v in new.state_dict().items()] == \
        [(k, v.shape) for k, v in old.state_dict().items()]
    new.load_state_dict(old.state_dict())
    x, m = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    assert torch.equal(new(x), old(x))
    assert torch.equal(new(x, m), old(x, m))


@pytest.mark.parametrize("g", [4, 2, 1])
def test_the_cache_holds_only_the_kv_heads_and_equals_the_full_pass(g):
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4, n_kv_heads=g).eval()
    x = torch.randn(2, 6, 32)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    full = mha(x, mask=causal)
    cache = AttentionCache()
    steps = []
    for t in range(6):
        steps.append(mha(x[:, t:t + 1], mask=causal[t:t + 1, :t + 1], cache=cache))   # self-attention
    assert cache.k.shape == cache.v.shape == (2, g, 6, 8)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-6, rtol=1e-5)
    # cross-attention: the memory's kv heads are cached once
    memory, cc = torch.randn(2, 5, 32), AttentionCache()
    first, second = mha(x, memory, cache=cc), mha(x, memory, cache=cc)
    assert cc.k.shape == (2, g, 5, 8) and torch.equal(first, second)


def test_rotary_rotates_queries_and_new_keys_before_caching():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, n_kv_heads=2).eval()
    x = torch.randn(1, 3, 16)
    calls = []

    def rotary(t):
        calls.append(tuple(t.shape))
        return -t                       # any function: the cache must store its output
    cache, plain = AttentionCache(), AttentionCache()
    mha(x, cache=cache, rotary=rotary)
    assert calls == [(1, 4, 3, 4), (1, 2, 3, 4)]          # q (h heads), then k (kv heads)
    mha(x, cache=plain)                                   # the same keys and values, not rotated
    assert torch.equal(cache.k, -plain.k) and torch.equal(cache.v, plain.v)
    with pytest.raises(ValueError, match="rotary"):
        mha(x, torch.randn(1, 2, 16), rotary=rotary)


@pytest.mark.parametrize("n_kv, word", [(3, "divisible by n_kv_heads"), (0, "n_kv_heads"),
                                        (True, "n_kv_heads"), (2.0, "n_kv_heads")])
def test_bad_n_kv_heads_is_refused(n_kv, word):
    with pytest.raises(ValueError, match=word):
        MultiHeadAttention(32, 4, n_kv_heads=n_kv)


def test_grouped_query_attention_runs_under_autocast():
    mha = MultiHeadAttention(32, 8, n_kv_heads=2)
    x = torch.randn(2, 5, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = mha(x, mask=torch.ones(5, 5, dtype=torch.bool).tril())
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
