"""Tests of transformer_lib.modern.rope: RoPE's relative-position property (hypothesis), its direction (against chapter
2's sinusoidal dot product), the complex-multiplication form both ways, the two layouts, the cached module,
autocast, and bad input."""
from __future__ import annotations

import pytest
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.modern.rope import RotaryEmbedding, apply_rotary, rotary_frequencies, rotate
from transformer_lib.positional import sinusoidal_table

SETTINGS = settings(max_examples=examples(40), deadline=None)


def _score(q, k, m, n, **kw):
    """Scores of q (N, d) at positions m (N,) with k (N, d) at positions n (N,), one pair per row."""
    qr = apply_rotary(q[:, None], m[:, None], **kw)[:, 0]
    kr = apply_rotary(k[:, None], n[:, None], **kw)[:, 0]
    return (qr * kr).sum(-1)


@SETTINGS
@given(half=st.integers(1, 16), seed=st.integers(0, 2**16), layout=st.sampled_from(["interleaved", "half"]),
       base=st.sampled_from([100.0, 10000.0, 500000.0]))
def test_the_score_depends_only_on_the_offset(half, seed, layout, base):
    gen = torch.Generator().manual_seed(seed)
    d = 2 * half
    q, k = torch.randn(64, d, generator=gen, dtype=torch.float64), torch.randn(64, d, generator=gen,
                                                                                dtype=torch.float64)
    m, n, s = torch.randint(0, 2000, (3, 64), generator=gen)
    gap = (_score(q, k, m, n, base=base, layout=layout) - _score(q, k, m + s, n + s, base=base, layout=layout))
    # the angles m·θ are float32 (as transformers computes them): their rounding, relative to |q||k|
    assert (gap.abs() / (q.norm(dim=-1) * k.norm(dim=-1))).max() < 1e-4


@SETTINGS
@given(half=st.integers(2, 16), seed=st.integers(0, 2**16))
def test_ahead_and_behind_differ_unlike_the_sinusoidal_dot_product(half, seed):
    gen = torch.Generator().manual_seed(seed)
    d = 2 * half
    q, k = torch.randn(1, d, generator=gen, dtype=torch.float64), torch.randn(1, d, generator=gen,
                                                                               dtype=torch.float64)
    m = torch.tensor([100])
    deltas = torch.arange(1, 9)
    ahead = _score(q.expand(8, d), k.expand(8, d), m.expand(8), m + deltas)
    behind = _score(q.expand(8, d), k.expand(8, d), m.expand(8), m - deltas)
    # score(+Δ) - score(-Δ) = 2 Σ_j sin(Δθ_j)·(q_j × k_j): zero for every Δ only if every pair's cross
    # product vanishes, which random vectors never do
    assert (ahead - behind).abs().max() > 1e-6 * q.norm() * k.norm()
    pe = sinusoidal_table(120, d).double()
    assert torch.allclose(pe[100 + deltas] @ pe[100], pe[100 - deltas] @ pe[100], atol=1e-5)


@SETTINGS
@given(half=st.integers(1, 16), L=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_rotation_is_complex_multiplication_both_ways(half, L, seed):
    gen = torch.Generator().manual_seed(seed)
    d = 2 * half
    x = torch.randn(2, L, d, generator=gen, dtype=torch.float64)
    pos = torch.randint(0, 10000, (L,), generator=gen)
    angles = (pos[:, None].float() * rotary_frequencies(d)).double()            # (L, d/2)
    phase = torch.polar(torch.ones_like(angles), angles)                        # e^{i m θ_j}
    z = torch.view_as_complex(x.reshape(2, L, half, 2))
    rotated = apply_rotary(x, pos)
    torch.testing.assert_close(rotated, torch.view_as_real(z * phase).reshape(2, L, d), atol=1e-6, rtol=0)
    back = torch.view_as_real(torch.view_as_complex(rotated.reshape(2, L, half, 2)) / phase)
    torch.testing.assert_close(back.reshape(2, L, d), x, atol=1e-6, rtol=0)


def test_frequencies_are_chapter_2s():
    d = 16
    theta = rotary_frequencies(d)
    # chapter 2: PE[pos, 2i] = sin(pos · 10000^(-2i/d)); RoPE's θ_i is that frequency
    pe = sinusoidal_table(50, d)
    torch.testing.assert_close(torch.sin(torch.arange(50.0)[:, None] * theta), pe[:, 0::2], atol=1e-5, rtol=0)


def test_position_zero_is_the_identity_and_norms_are_kept():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 8)
    assert torch.equal(apply_rotary(x, torch.zeros(5, dtype=torch.long)), x)
    rotated = apply_rotary(x, torch.arange(5) * 37)
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))


def test_the_two_layouts_are_one_permutation_apart():
    torch.manual_seed(0)
    d = 8
    perm = torch.stack([torch.arange(d // 2), torch.arange(d // 2) + d // 2], 1).flatten()  # half -> pairs
    x = torch.randn(2, 6, d)
    pos = torch.arange(6) * 3
    torch.testing.assert_close(apply_rotary(x, pos, layout="half")[..., perm],
                               apply_rotary(x[..., perm], pos, layout="interleaved"))


def test_per_sequence_positions_rotate_each_row_at_its_own():
    torch.manual_seed(0)
    x = torch.randn(3, 4, 5, 8)                                   # (B, h, L, d)
    pos = torch.randint(0, 100, (3, 5))
    out = apply_rotary(x, pos)
    for b in range(3):
        torch.testing.assert_close(out[b], apply_rotary(x[b], pos[b]))


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_rotary_embedding_equals_apply_rotary_within_and_beyond_its_tables(layout):
    torch.manual_seed(0)
    rope = RotaryEmbedding(8, max_len=4, layout=layout)
    x = torch.randn(2, 3, 6, 8)
    for pos in (torch.arange(6), torch.tensor([[0, 1, 2, 3, 4, 5], [7, 8, 9, 10, 11, 900]]),
                torch.tensor([[0, 1, 2, 3, 2, 1], [3, 2, 1, 0, 1, 2]])):
        assert torch.equal(rope(x, pos), apply_rotary(x, pos, layout=layout))
    assert rope.cos.size(0) == 4                                  # beyond the tables: computed, not stored
    assert "cos" not in rope.state_dict()                         # tables are not saved
    f = rope.rotation(torch.arange(6))                            # looked up once, applied to q and k
    assert torch.equal(f(x), rope(x, torch.arange(6)))


def test_rotary_under_autocast_and_in_half_precision():
    x = torch.randn(2, 5, 8)
    for dtype in (torch.bfloat16, torch.float16):
        out = apply_rotary(x.to(dtype), torch.arange(5))
        assert out.dtype == dtype
        torch.testing.assert_close(out.float(), apply_rotary(x, torch.arange(5)), atol=2e-2, rtol=2e-2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert RotaryEmbedding(8)(x.bfloat16(), torch.arange(5)).dtype == torch.bfloat16


def test_a_cached_step_rotates_the_new_key_at_its_own_position():
    torch.manual_seed(0)
    x = torch.randn(1, 2, 7, 8)
    whole = apply_rotary(x, torch.arange(7))
    steps = torch.cat([apply_rotary(x[:, :, t:t + 1], torch.tensor([t])) for t in range(7)], dim=2)
    assert torch.equal(whole, steps)


@pytest.mark.parametrize("args, word", [
    ((torch.randn(2, 5, 7), torch.arange(5)), "even"),
    ((torch.randn(2, 5, 8), torch.arange(4)), "positions"),
    ((torch.randn(2, 5, 8), torch.arange(5.0)), "positions"),
    ((torch.randn(2, 5, 8), torch.zeros(3, 5, dtype=torch.long)), "positions"),
    ((torch.randn(5), torch.arange(5)), "x must"),
])
def test_bad_input_is_named(args, word):
    with pytest.raises(ValueError, match=word):
        apply_rotary(*args)


@pytest.mark.parametrize("far", [10**5, 10**9, 2**62])
def test_a_far_position_is_computed_without_growing_the_tables(far):
    """G24: a position of 10^9 grew the tables to 10^9 rows (8 GB); beyond the tables the angles of the given
    positions only are computed, so memory follows the input, not the largest position."""
    torch.manual_seed(0)
    rope = RotaryEmbedding(8, max_len=16)
    x = torch.randn(2, 3, 3, 8)
    pos = torch.tensor([0, 5, far])
    assert torch.equal(rope(x, pos), apply_rotary(x, pos))
    assert rope.cos.size(0) == rope.sin.size(0) == 16
    assert torch.equal(rope(x, torch.arange(3)), apply_rotary(x, torch.arange(3)))   # the tables still serve


def test_bad_module_arguments_are_named():
    with pytest.raises(ValueError, match="layout"):
        RotaryEmbedding(8, layout="pairs")
    with pytest.raises(ValueError, match="layout"):
        rotate(torch.randn(2, 4), torch.ones(2, 2), torch.zeros(2, 2), layout="pairs")
    with pytest.raises(ValueError, match="base"):
        rotary_frequencies(8, base=1.0)
    with pytest.raises(ValueError, match=">= 0"):
        RotaryEmbedding(8)(torch.randn(1, 3, 8), torch.tensor([0, -1, 2]))
    with pytest.raises(ValueError, match="head_dim"):
        RotaryEmbedding(8)(torch.randn(1, 3, 6), torch.arange(3))
