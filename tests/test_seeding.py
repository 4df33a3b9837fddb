"""transformer_lib.seeding (chapter 0): the one place the book's chapters take their seeds from."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib.seeding import SEED_STRIDE, book_seed, seed_everything


def test_seed_everything_is_at_the_root_and_book_seed_in_its_module():
    assert tl.seed_everything is seed_everything                 # the curated root API (tests/test_api.py)
    assert not hasattr(tl, "book_seed") and callable(book_seed)  # the chapters' helper stays in its module


def test_unset_or_empty_is_seed_zero(monkeypatch):
    monkeypatch.delenv("BOOK_SEED", raising=False)
    assert book_seed() == 0 and book_seed(7) == 7
    monkeypatch.setenv("BOOK_SEED", " ")
    assert book_seed(3) == 3


@given(run=st.integers(0, 10**6), offset=st.integers(0, SEED_STRIDE - 1))
def test_seeds_of_different_runs_and_offsets_never_collide(run, offset):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BOOK_SEED", str(run))
        seed = book_seed(offset)
    assert divmod(seed, SEED_STRIDE) == (run, offset)       # one (run, offset) pair per seed


@pytest.mark.parametrize("raw", ["-1", "1.5", "one", "²", "0x10"])
def test_a_bad_book_seed_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv("BOOK_SEED", raw)
    with pytest.raises(ValueError, match="BOOK_SEED must be a whole number"):
        book_seed()


@pytest.mark.parametrize("offset", [-1, SEED_STRIDE, 1.0, True, "2", None])
def test_a_bad_offset_names_the_argument(offset):
    with pytest.raises(ValueError, match="offset must be an int from 0 to 999"):
        book_seed(offset)


def test_seed_everything_seeds_python_numpy_and_torch(monkeypatch):
    monkeypatch.setenv("BOOK_SEED", "4")
    draws = []
    for _ in range(2):
        assert seed_everything(5) == 4005
        draws.append((random.random(), float(np.random.rand()), torch.rand(3).tolist()))
    assert draws[0] == draws[1]
    monkeypatch.setenv("BOOK_SEED", "5")
    seed_everything(5)
    assert (random.random(), float(np.random.rand()), torch.rand(3).tolist()) != draws[0]
