"""Tests of transformer_lib.positional (chapter 2): the sinusoidal table and the positional encodings."""
from __future__ import annotations

import math

import pytest
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib.positional import (
    POSITIONAL_LAYOUTS,
    LearnedPositionalEncoding,
    PositionalEncoding,
    half_layout,
    sinusoidal_table,
)


def _table_by_loop(max_len: int, d_model: int) -> torch.Tensor:
    """The paper's formula, one entry at a time, in float64 Python arithmetic."""
    table = torch.empty(max_len, d_model, dtype=torch.float64)
    for pos in range(max_len):
        for col in range(d_model):
            two_i = col - (col % 2)
            angle = pos / math.pow(10000.0, two_i / d_model)
            table[pos, col] = math.sin(angle) if col % 2 == 0 else math.cos(angle)
    return table


def test_public_api_is_reexported():
    assert tl.sinusoidal_table is sinusoidal_table
    assert tl.PositionalEncoding is PositionalEncoding
    assert tl.LearnedPositionalEncoding is LearnedPositionalEncoding


@pytest.mark.parametrize("max_len, d_model", [(1, 2), (50, 16), (200, 64), (30, 7), (12, 1)])
def test_table_matches_a_float64_loop_of_the_formula(max_len, d_model):
    table = sinusoidal_table(max_len, d_model)
    assert table.shape == (max_len, d_model) and table.dtype == torch.float32
    torch.testing.assert_close(table.double(), _table_by_loop(max_len, d_model), rtol=0, atol=1e-6)


def test_table_values_in_unit_interval_and_row_norms_constant():
    table = sinusoidal_table(3000, 128).double()
    assert table.abs().max() <= 1.0
    torch.testing.assert_close(table.norm(dim=1), torch.full((3000,), math.sqrt(64.0), dtype=torch.float64))
    # position 0: sin(0) = 0 in even columns, cos(0) = 1 in odd columns
    assert torch.equal(table[0, 0::2], torch.zeros(64)) and torch.equal(table[0, 1::2], torch.ones(64))


def test_odd_d_model_last_column_is_the_unpaired_sine():
    table = sinusoidal_table(20, 7).double()
    pos = torch.arange(20, dtype=torch.float64)
    torch.testing.assert_close(table[:, 6], torch.sin(pos / 10000.0 ** (6 / 7)), rtol=0, atol=1e-6)


def _shift_matrix(k: int, d_model: int) -> torch.Tensor:
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        phi = k * 10000.0 ** (-2 * i / d_model)
        M[2 * i: 2 * i + 2, 2 * i: 2 * i + 2] = torch.tensor(
            [[math.cos(phi), math.sin(phi)], [-math.sin(phi), math.cos(phi)]], dtype=torch.float64)
    return M


@settings(max_examples=examples(30), deadline=None)
@given(k=st.integers(-200, 200), pos=st.integers(200, 700), half=st.integers(1, 32))
def test_shift_by_k_is_one_linear_map_independent_of_position(k, pos, half):
    d_model = 2 * half
    table = sinusoidal_table(1000, d_model).double()
    M = _shift_matrix(k, d_model)
    torch.testing.assert_close(M @ table[pos], table[pos + k], rtol=0, atol=1e-5)


def test_dot_product_depends_only_on_absolute_offset():
    table = sinusoidal_table(300, 32).double()
    G = table @ table.T
    omega = 10000.0 ** (-torch.arange(0, 32, 2, dtype=torch.float64) / 32)
    offset = (torch.arange(300)[:, None] - torch.arange(300)[None, :]).abs().double()
    torch.testing.assert_close(G, torch.cos(offset[..., None] * omega).sum(-1), rtol=0, atol=1e-4)


def test_positional_encoding_adds_the_table():
    torch.manual_seed(0)
    pe = PositionalEncoding(16, max_len=40)
    x = torch.randn(3, 25, 16)
    torch.testing.assert_close(pe(x), x + sinusoidal_table(40, 16)[:25])


def test_start_pos_step_by_step_equals_whole_sequence():
    torch.manual_seed(0)
    pe = PositionalEncoding(8, max_len=20)
    x = torch.randn(2, 12, 8)
    steps = torch.cat([pe(x[:, t: t + 1], start_pos=t) for t in range(12)], dim=1)
    assert torch.equal(steps, pe(x))
    assert torch.equal(pe(x[:, 5:9], start_pos=5), pe(x)[:, 5:9])


def test_sequence_exactly_filling_the_table_is_accepted():
    pe = PositionalEncoding(4, max_len=10)
    assert pe(torch.zeros(1, 10, 4)).shape == (1, 10, 4)
    assert pe(torch.zeros(1, 1, 4), start_pos=9).shape == (1, 1, 4)


@pytest.mark.parametrize("module_cls", [PositionalEncoding, LearnedPositionalEncoding])
def test_sequence_longer_than_the_table_raises(module_cls):
    m = module_cls(4, max_len=10)
    with pytest.raises(ValueError, match=r"length 11 .* longer than the positional table \(max_len=10\)"):
        m(torch.zeros(1, 11, 4))
    with pytest.raises(ValueError, match=r"starting at position 8 is longer than the positional table"):
        m(torch.zeros(1, 3, 4), start_pos=8)


@pytest.mark.parametrize("module_cls", [PositionalEncoding, LearnedPositionalEncoding])
def test_start_pos_accepts_integer_like_values(module_cls):
    m = module_cls(4, max_len=10)
    x = torch.randn(1, 2, 4)
    expected = m(x, start_pos=3)
    for start in (torch.tensor(3), torch.tensor(3, dtype=torch.int32)):
        assert torch.equal(m(x, start_pos=start), expected)


@pytest.mark.parametrize("module_cls", [PositionalEncoding, LearnedPositionalEncoding])
@pytest.mark.parametrize("start_pos", [-1, 1.0, True, torch.tensor(-2), torch.tensor(1.0), "3"])
def test_bad_start_pos_raises(module_cls, start_pos):
    m = module_cls(4, max_len=10)
    with pytest.raises(ValueError, match="start_pos must be an int >= 0"):
        m(torch.zeros(1, 2, 4), start_pos=start_pos)


@pytest.mark.parametrize("module_cls", [PositionalEncoding, LearnedPositionalEncoding])
@pytest.mark.parametrize("shape", [(2, 5, 3), (5, 4), (1, 2, 5, 4)])
def test_wrong_input_shape_raises(module_cls, shape):
    m = module_cls(4, max_len=10)
    with pytest.raises(ValueError, match=r"x must have shape \(B, L, 4\)"):
        m(torch.zeros(shape))


@pytest.mark.parametrize(
    "args, match",
    [((0, 8), "max_len must be an int >= 1"), ((10, 0), "d_model must be an int >= 1"),
     ((10.0, 8), "max_len must be an int >= 1"), ((True, 8), "max_len must be an int >= 1")],
)
def test_sinusoidal_table_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        sinusoidal_table(*args)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="max_len must be an int >= 1"):
        PositionalEncoding(8, max_len=0)
    with pytest.raises(ValueError, match="d_model must be an int >= 1"):
        PositionalEncoding(0)
    with pytest.raises(ValueError, match="max_len must be an int >= 1"):
        LearnedPositionalEncoding(8, max_len=0)
    with pytest.raises(ValueError):
        PositionalEncoding(8, dropout=1.5)


def test_table_is_a_non_persistent_buffer_that_follows_dtype():
    pe = PositionalEncoding(8, max_len=16)
    assert "pe" not in pe.state_dict() and list(pe.parameters()) == []
    x = torch.zeros(1, 3, 8, dtype=torch.bfloat16)
    out = pe(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), sinusoidal_table(16, 8)[:3][None].bfloat16().float())


def test_dropout_is_identity_in_eval_and_active_in_train():
    torch.manual_seed(0)
    pe = PositionalEncoding(8, max_len=16, dropout=0.5)
    x = torch.ones(4, 10, 8)
    pe.eval()
    torch.testing.assert_close(pe(x), x + sinusoidal_table(16, 8)[:10])
    pe.train()
    out = pe(x)
    dropped = out == 0
    assert 0.3 < dropped.float().mean().item() < 0.7
    kept = ~dropped
    torch.testing.assert_close(out[kept], ((x + sinusoidal_table(16, 8)[:10]) * 2)[kept])


def test_learned_encoding_adds_its_table_and_unseen_rows_get_no_gradient():
    torch.manual_seed(0)
    m = LearnedPositionalEncoding(6, max_len=20)
    assert sum(p.numel() for p in m.parameters()) == 20 * 6
    x = torch.randn(2, 7, 6)
    torch.testing.assert_close(m(x), x + m.table.weight[:7])
    torch.testing.assert_close(m(x[:, :3], start_pos=4), x[:, :3] + m.table.weight[4:7])
    m(x).sum().backward()
    grad = m.table.weight.grad
    assert (grad[:7] != 0).all() and torch.equal(grad[7:], torch.zeros(13, 6))


@pytest.mark.parametrize("module_cls", [PositionalEncoding, LearnedPositionalEncoding])
def test_forward_reads_no_value_back_from_the_device(module_cls):
    """On the meta device a value cannot be read back: the forward pass checks shapes only."""
    m = module_cls(4, max_len=10).to("meta")
    assert m(torch.zeros(2, 3, 4, device="meta"), start_pos=7).shape == (2, 3, 4)


@pytest.mark.parametrize("base", [1.0, 0.5, float("nan"), float("inf"), True])
def test_sinusoidal_table_bad_base(base):
    with pytest.raises(ValueError, match="base must be a finite number > 1.0"):
        sinusoidal_table(4, 8, base=base)


@pytest.mark.parametrize("module_cls", [PositionalEncoding, LearnedPositionalEncoding])
@pytest.mark.parametrize("kwargs, word", [(dict(d_model=True), "d_model"), (dict(d_model=4, max_len=3.0), "max_len"),
                                          (dict(d_model=4, dropout=-0.1), "dropout")])
def test_constructors_check_their_arguments(module_cls, kwargs, word):
    with pytest.raises(ValueError, match=word):
        module_cls(**kwargs)


# ---------------------------------------------------------------- Marian's column order (the Marian appendix)

@pytest.mark.parametrize("max_len, d_model", [(40, 16), (30, 7), (5, 1), (64, 32)])
def test_halves_layout_equals_marians_table(max_len, d_model):
    """Reference: transformers' MarianSinusoidalPositionalEmbedding (sines first, then cosines),
    for even and odd widths."""
    marian = pytest.importorskip("transformers.models.marian.modeling_marian")
    ref = marian.MarianSinusoidalPositionalEmbedding(max_len, d_model).create_weight()
    torch.testing.assert_close(half_layout(sinusoidal_table(max_len, d_model)), ref, rtol=0, atol=1e-6)


@given(max_len=st.integers(1, 60), d_model=st.integers(1, 40))
@settings(max_examples=examples(30), deadline=None)
def test_halves_layout_is_a_column_permutation_of_the_interleaved_table(max_len, d_model):
    inter = sinusoidal_table(max_len, d_model)
    halves = half_layout(inter)
    perm = torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])
    assert torch.equal(halves, inter[:, perm])
    assert torch.equal(half_layout(inter[None])[0], halves)              # any leading dimensions


def test_the_layouts_are_named_and_the_table_has_no_layout_argument():
    assert POSITIONAL_LAYOUTS == ("interleaved", "half")
    with pytest.raises(TypeError):
        sinusoidal_table(10, 8, layout="half")  # type: ignore[call-arg]
