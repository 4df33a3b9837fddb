"""Tests of transformer_lib.masks: shapes and values against formulas computed another way, and the
guarantees a mask must give inside attention (hypothesis): padding never changes real outputs, the future
never changes the past, batch rows are independent."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.attention import MultiHeadAttention
from transformer_lib.masks import causal_mask, padding_mask, target_mask

SETTINGS = settings(max_examples=examples(25), deadline=None)
PAD = 0
D_MODEL, N_HEADS, VOCAB = 16, 4, 11


def _padded_batch(g, lengths, L):
    ids = torch.randint(1, VOCAB, (len(lengths), L), generator=g)
    for b, n in enumerate(lengths):
        ids[b, n:] = PAD
    return ids


def _layer(seed):
    torch.manual_seed(seed)
    table = torch.randn(VOCAB, D_MODEL)
    mha = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    return (lambda ids, mask: mha(table[ids], mask=mask)), table, mha


def test_shapes_dtypes_values():
    ids = torch.tensor([[5, 6, 0, 0], [7, 0, 0, 0], [1, 2, 3, 4]])
    pm, cm, tm = padding_mask(ids, PAD), causal_mask(4), target_mask(ids, PAD)
    assert pm.shape == (3, 1, 1, 4) and cm.shape == (1, 1, 4, 4) and tm.shape == (3, 1, 4, 4)
    assert pm.dtype == cm.dtype == tm.dtype == torch.bool
    i, j = torch.arange(4)[:, None], torch.arange(4)[None, :]
    assert torch.equal(cm[0, 0], j <= i)
    for b in range(3):
        for q in range(4):
            for k in range(4):
                assert bool(tm[b, 0, q, k]) == (k <= q and int(ids[b, k]) != PAD)
                assert bool(pm[b, 0, 0, k]) == (int(ids[b, k]) != PAD)


@SETTINGS
@given(B=st.integers(1, 4), L=st.integers(1, 9), pad_id=st.integers(0, 3), seed=st.integers(0, 2**16))
def test_target_mask_is_padding_and_causal(B, L, pad_id, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 4, (B, L), generator=g)
    expected = (ids != pad_id)[:, None, None, :] & torch.ones(L, L, dtype=torch.bool).tril()
    assert torch.equal(target_mask(ids, pad_id), expected)
    assert torch.equal(padding_mask(ids, pad_id).expand(B, 1, L, L) & causal_mask(L), expected)


def test_device_follows_input():
    ids = torch.ones(2, 3, dtype=torch.long, device="meta")
    assert padding_mask(ids, PAD).device.type == "meta"
    assert target_mask(ids, PAD).device.type == "meta"
    assert causal_mask(3, device="meta").device.type == "meta"


def test_causal_mask_accepts_integer_like_sizes():
    assert causal_mask(np.int64(3)).shape == (1, 1, 3, 3)
    assert causal_mask(torch.tensor(2)).shape == (1, 1, 2, 2)


@pytest.mark.parametrize("size", [0, -2, 2.5, True, "3", None])
def test_causal_mask_bad_size(size):
    with pytest.raises(ValueError, match="size"):
        causal_mask(size)


@pytest.mark.parametrize("ids", [torch.tensor([1, 2, 0]), torch.ones(2, 2, 2, dtype=torch.long),
                                 torch.ones(2, 3), torch.ones(2, 3, dtype=torch.bool)])
def test_bad_ids(ids):
    with pytest.raises(ValueError, match="ids"):
        padding_mask(ids, PAD)
    with pytest.raises(ValueError, match="ids"):
        target_mask(ids, PAD)


def test_ids_that_are_not_a_tensor():
    with pytest.raises(TypeError, match="ids must be a torch.Tensor"):
        padding_mask([[1, 2, 0]], PAD)
    with pytest.raises(TypeError, match="ids must be a torch.Tensor"):
        target_mask([[1, 2, 0]], PAD)


def test_masks_need_no_vocabulary():
    """Masks check the ids' type and shape only: any integer id, even one no vocabulary holds, is a key."""
    ids = torch.tensor([[-5, 10**6, PAD]])
    assert padding_mask(ids, PAD).tolist() == [[[[True, True, False]]]]


# --- the guarantees, inside attention --------------------------------------------------------------------

@SETTINGS
@given(lengths=st.lists(st.integers(1, 7), min_size=1, max_size=4), extra=st.integers(0, 3),
       seed=st.integers(0, 2**16))
def test_padded_tokens_never_change_real_outputs(lengths, extra, seed):
    g = torch.Generator().manual_seed(seed)
    L = max(lengths) + extra
    ids = _padded_batch(g, lengths, L)
    layer, _, _ = _layer(seed)
    real = ids != PAD
    noisy = ids.clone()
    noisy[~real] = torch.randint(1, VOCAB, (int((~real).sum()),), generator=g)
    mask = padding_mask(ids, PAD)
    with torch.no_grad():
        torch.testing.assert_close(layer(ids, mask)[real], layer(noisy, mask)[real], atol=1e-6, rtol=1e-5)
        # and a sentence padded further gives the same outputs at its real positions
        longer = torch.cat([ids, torch.full((len(lengths), 2), PAD)], dim=1)
        torch.testing.assert_close(layer(longer, padding_mask(longer, PAD))[:, :L][real],
                                   layer(ids, mask)[real], atol=1e-6, rtol=1e-5)


@SETTINGS
@given(L=st.integers(2, 9), t=st.data(), seed=st.integers(0, 2**16))
def test_future_never_changes_the_past(L, t, seed):
    g = torch.Generator().manual_seed(seed)
    pos = t.draw(st.integers(1, L - 1))
    ids = torch.randint(1, VOCAB, (2, L), generator=g)
    ids[1, L - 1:] = PAD                                  # a padded row too, through target_mask
    changed = ids.clone()
    changed[:, pos:] = torch.randint(1, VOCAB, (2, L - pos), generator=g)
    layer, _, _ = _layer(seed)
    with torch.no_grad():
        a = layer(ids, target_mask(ids, PAD))
        b = layer(changed, target_mask(ids, PAD))
    torch.testing.assert_close(a[:, :pos], b[:, :pos], atol=1e-6, rtol=1e-5)


@SETTINGS
@given(lengths=st.lists(st.integers(1, 6), min_size=2, max_size=4), causal=st.booleans(),
       seed=st.integers(0, 2**16))
def test_batch_rows_are_independent(lengths, causal, seed):
    g = torch.Generator().manual_seed(seed)
    ids = _padded_batch(g, lengths, max(lengths))
    make = target_mask if causal else padding_mask
    layer, _, _ = _layer(seed)
    with torch.no_grad():
        whole = layer(ids, make(ids, PAD))
        for b in range(len(lengths)):
            alone = layer(ids[b:b + 1], make(ids[b:b + 1], PAD))
            torch.testing.assert_close(alone, whole[b:b + 1], atol=1e-6, rtol=1e-5)


def test_without_mask_padding_leaks():
    """The property tests above can fail: without the mask, pad tokens do change real outputs."""
    g = torch.Generator().manual_seed(0)
    ids = _padded_batch(g, [2, 4], 4)
    layer, _, _ = _layer(0)
    noisy = ids.clone()
    noisy[ids == PAD] = 3
    with torch.no_grad():
        gap = (layer(ids, None) - layer(noisy, None))[ids != PAD].abs().max()
    assert gap > 1e-3


def test_pad_queries_are_finite_and_get_no_gradient_from_a_pad_ignoring_loss():
    g = torch.Generator().manual_seed(0)
    ids = _padded_batch(g, [2, 5, 3], 5)
    _, table, mha = _layer(0)
    x = table[ids].clone().requires_grad_(True)
    y = mha(x, mask=padding_mask(ids, PAD))
    assert torch.isfinite(y).all() and y[ids == PAD].abs().sum() > 0
    logits = y @ table.T
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten(), ignore_index=PAD).backward()
    assert x.grad[ids == PAD].abs().max() == 0 and x.grad[ids != PAD].abs().max() > 0


@pytest.mark.parametrize("need_weights", [False, True])
def test_masks_of_the_wrong_type_or_shape_are_refused_by_attention(need_weights):
    """The cases chapter 4 used to demonstrate: a 0/1 float mask (which the SDPA kernel would add to the
    scores, a silent bug) and masks built for another length or another batch."""
    ids = torch.tensor([[5, 7, 0], [4, 0, 0], [3, 8, 6]])
    mha = MultiHeadAttention(D_MODEL, N_HEADS)
    x = torch.randn(3, 3, D_MODEL)
    call = mha.forward_with_weights if need_weights else mha
    with pytest.raises(ValueError, match="boolean"):
        call(x, mask=padding_mask(ids, PAD).float())
    with pytest.raises(ValueError, match="does not broadcast"):
        call(x, mask=padding_mask(ids[:, :2], PAD))
    with pytest.raises(ValueError, match="does not broadcast"):
        call(x, mask=target_mask(ids[:2], PAD))
