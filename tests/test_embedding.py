"""Tests of transformer_lib.embedding (chapter 1): TokenEmbedding (the checks: tests/test_checks.py)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib.checks import check_token_ids, default_device
from transformer_lib.embedding import TokenEmbedding


def test_public_api_is_reexported():
    assert tl.TokenEmbedding is TokenEmbedding
    assert not hasattr(tl, "check_token_ids")          # a helper: from transformer_lib.checks only
    assert tl.default_device is default_device


def test_output_is_table_rows_times_sqrt_d_model():
    torch.manual_seed(0)
    emb = TokenEmbedding(50, 24)
    ids = torch.randint(0, 50, (3, 7))
    out = emb(ids)
    assert out.shape == (3, 7, 24)
    # reference: PyTorch's functional lookup on the same weight, times sqrt(d_model)
    torch.testing.assert_close(out, F.embedding(ids, emb.weight) * math.sqrt(24))


@settings(max_examples=examples(25), deadline=None)
@given(
    vocab=st.integers(1, 40),
    d_model=st.integers(1, 16),
    shape=st.lists(st.integers(0, 5), min_size=1, max_size=3),
    seed=st.integers(0, 2**16),
)
def test_lookup_equals_one_hot_times_table(vocab, d_model, shape, seed):
    g = torch.Generator().manual_seed(seed)
    emb = TokenEmbedding(vocab, d_model)
    ids = torch.randint(0, vocab, tuple(shape), generator=g)
    one_hot = F.one_hot(ids, vocab).to(emb.weight.dtype)
    expected = (one_hot @ emb.weight) * math.sqrt(d_model)
    torch.testing.assert_close(emb(ids), expected)


def test_initial_table_has_variance_one_over_d_model_and_output_unit_variance():
    torch.manual_seed(0)
    d_model = 256
    emb = TokenEmbedding(4000, d_model)                 # 1,024,000 draws
    var = emb.weight.var().item()
    assert abs(var * d_model - 1.0) < 0.02, var * d_model
    out = emb(torch.arange(4000)[None])
    assert abs(out.var().item() - 1.0) < 0.02


def test_pytorch_default_init_is_unit_variance_not_one_over_d_model():
    # The claim chapter 1 corrects: nn.Embedding starts at N(0, 1), whatever d_model is.
    torch.manual_seed(0)
    w = torch.nn.Embedding(4000, 256).weight
    assert abs(w.var().item() - 1.0) < 0.02


def test_padding_row_is_zero_and_gets_no_gradient():
    torch.manual_seed(0)
    emb = TokenEmbedding(10, 6, padding_idx=0)
    assert emb.padding_idx == 0
    assert torch.equal(emb.weight[0], torch.zeros(6))
    ids = torch.tensor([[4, 0, 2, 0], [0, 0, 9, 1]])
    out = emb(ids)
    assert torch.equal(out[ids == 0], torch.zeros(int((ids == 0).sum()), 6))
    out.sum().backward()
    assert torch.equal(emb.weight.grad[0], torch.zeros(6))
    assert emb.weight.grad[4].abs().sum() > 0


def test_padding_row_stays_zero_under_adamw_with_weight_decay():
    torch.manual_seed(0)
    emb = TokenEmbedding(10, 6, padding_idx=3)
    opt = torch.optim.AdamW(emb.parameters(), lr=0.1, weight_decay=0.5)
    ids = torch.tensor([[3, 1, 2, 3]])
    for _ in range(5):
        opt.zero_grad()
        emb(ids).pow(2).sum().backward()
        opt.step()
    assert torch.equal(emb.weight[3], torch.zeros(6))


def test_reset_parameters_rezeros_padding_row():
    emb = TokenEmbedding(10, 4, padding_idx=2)
    with torch.no_grad():
        emb.weight.fill_(1.0)
    emb.reset_parameters()
    assert torch.equal(emb.weight[2], torch.zeros(4))
    assert not torch.equal(emb.weight[1], torch.ones(4))


def test_negative_padding_idx_counts_from_the_end():
    emb = TokenEmbedding(10, 4, padding_idx=-1)
    assert emb.padding_idx == 9
    assert torch.equal(emb(torch.tensor([[9]]))[0, 0], torch.zeros(4))


def test_tied_output_layer_shares_storage_and_sums_gradients():
    torch.manual_seed(0)
    V, d = 30, 8
    emb = TokenEmbedding(V, d)
    out = torch.nn.Linear(d, V, bias=False)
    out.weight = emb.weight
    h = torch.randn(2, 3, d)
    torch.testing.assert_close(out(h), h @ emb.weight.T)
    ids = torch.tensor([[1, 1, 5]])
    (emb(ids).sum() + out(h).sum()).backward()
    expected = h.reshape(-1, d).sum(0).expand(V, d).clone()
    expected[1] += 2 * math.sqrt(d)
    expected[5] += math.sqrt(d)
    torch.testing.assert_close(emb.weight.grad, expected)


@pytest.mark.parametrize("dtype", [torch.int16, torch.int32, torch.int64, torch.uint8])
def test_accepts_integer_dtypes(dtype):
    emb = TokenEmbedding(10, 4)
    assert emb(torch.tensor([[1, 9]], dtype=dtype)).shape == (1, 2, 4)


def test_empty_batch_is_fine():
    emb = TokenEmbedding(10, 4)
    assert emb(torch.zeros(0, 5, dtype=torch.long)).shape == (0, 5, 4)
    check_token_ids(torch.zeros(0, dtype=torch.long), 10)


@pytest.mark.parametrize(
    "ids, match",
    [
        (torch.tensor([[1, 2, 10]]), r"ids holds token ids outside the vocabulary \[0, 10\).*max 10"),
        (torch.tensor([[-100, 2]]), r"outside the vocabulary.*min -100"),
        (torch.tensor([[1.0, 2.0]]), r"ids must hold integer token ids.*float32"),
        (torch.tensor([[True, False]]), r"ids must hold integer token ids.*bool"),
    ],
)
def test_bad_ids_raise_value_error_naming_the_argument(ids, match):
    emb = TokenEmbedding(10, 4)
    with pytest.raises(ValueError, match=match):
        emb(ids)


def test_check_token_ids_uses_the_given_name_and_rejects_non_tensors():
    with pytest.raises(ValueError, match="src holds token ids outside"):
        check_token_ids(torch.tensor([5]), 5, name="src")
    with pytest.raises(TypeError, match="tgt must be a torch.Tensor"):
        check_token_ids([1, 2], 5, name="tgt")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(vocab_size=0, d_model=4), "vocab_size must be an int >= 1"),
        (dict(vocab_size=10, d_model=0), "d_model must be an int >= 1"),
        (dict(vocab_size=10.0, d_model=4), "vocab_size must be an int >= 1"),
        (dict(vocab_size=10, d_model=4, padding_idx=10), r"padding_idx must be a token id in \[0, 10\)"),
        (dict(vocab_size=10, d_model=4, padding_idx=-11), "padding_idx must be a token id"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TokenEmbedding(**kwargs)


def test_output_follows_module_dtype():
    emb = TokenEmbedding(10, 4).to(torch.float64)
    assert emb(torch.tensor([[1, 2]])).dtype == torch.float64


def test_forward_reads_no_value_back_from_the_device():
    """On the meta device a value cannot be read back; the lookup and its id check still run (the check is
    queued with torch._assert_async off the CPU)."""
    emb = TokenEmbedding(10, 4, padding_idx=0).to("meta")
    assert emb(torch.zeros(2, 3, dtype=torch.long, device="meta")).shape == (2, 3, 4)


@pytest.mark.parametrize("padding_idx", [True, 2.0, "0"])
def test_padding_idx_must_be_an_int(padding_idx):
    with pytest.raises(ValueError, match="padding_idx must be a token id"):
        TokenEmbedding(10, 4, padding_idx=padding_idx)
