"""Tests of transformer_lib.checks (chapter 1): the argument checks shared by the library."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import transformer_lib as tl
from transformer_lib.checks import (
    check_float,
    check_int,
    check_probability,
    check_token_ids,
    default_device,
    resolve_device,
)


def test_the_checks_live_in_their_module_and_only_default_device_is_at_the_root():
    names = ("check_int", "check_float", "check_probability", "check_token_ids", "default_device", "resolve_device")
    assert set(tl.checks.__all__) == set(names)
    assert tl.default_device is tl.checks.default_device
    assert not any(hasattr(tl, name) for name in names if name != "default_device")


# --- check_int --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, minimum", [(1, 1), (7, 1), (0, 0), (-3, -5), (np.int64(4), 1),
                                            (torch.tensor(3), 1)])
def test_check_int_accepts_integers_and_returns_a_python_int(value, minimum):
    out = check_int(value, "n", minimum=minimum)
    assert out == int(value) and type(out) is int


@pytest.mark.parametrize("value", [True, False, 2.0, 2.5, "3", None, 0, -1, torch.tensor(2.0),
                                   torch.tensor([1, 2])])
def test_check_int_refuses_non_counts_naming_the_argument(value):
    with pytest.raises(ValueError, match=r"n_layers must be an int >= 1, got"):
        check_int(value, "n_layers")


def test_check_int_minimum_is_inclusive():
    assert check_int(0, "start_pos", minimum=0) == 0
    with pytest.raises(ValueError, match="start_pos must be an int >= 0, got -1"):
        check_int(-1, "start_pos", minimum=0)


# --- check_float / check_probability ----------------------------------------------------------------------

@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), True, "0.1", None,
                                   torch.tensor(0.5)])
def test_check_float_refuses_non_finite_and_non_numbers(value):
    with pytest.raises(ValueError, match="lr must be a finite number"):
        check_float(value, "lr")


def test_check_float_returns_a_float_inside_the_interval():
    out = check_float(3, "eps", 0.0)
    assert out == 3.0 and type(out) is float
    assert check_float(0.0, "eps", 0.0) == 0.0                              # closed end
    assert check_float(1e300, "eps", 0.0) == 1e300                          # no upper bound


@pytest.mark.parametrize("value, kwargs, match", [
    (-1e-9, dict(low=0.0), r"eps must be a finite number >= 0.0, got -1e-09"),
    (1.0, dict(low=1.0, low_open=True), r"base must be a finite number > 1.0, got 1.0"),
    (2.0, dict(high=1.0), r"x must be a finite number <= 1.0, got 2.0"),
    (1.0, dict(high=1.0, high_open=True), r"x must be a finite number < 1.0, got 1.0"),
    (0.0, dict(low=0.0, high=1.0, low_open=True), r"p must be a finite number in \(0.0, 1.0\], got 0.0"),
    (1.0, dict(low=0.0, high=1.0, high_open=True), r"p must be a finite number in \[0.0, 1.0\), got 1.0"),
])
def test_check_float_open_and_closed_ends(value, kwargs, match):
    name = match.split(" ")[0]
    with pytest.raises(ValueError, match=match):
        check_float(value, name, **kwargs)


def test_check_probability_ends():
    assert check_probability(0, "dropout") == 0.0
    assert check_probability(1, "top_p") == 1.0
    assert check_probability(0.25, "dropout", one=False) == 0.25
    with pytest.raises(ValueError, match=r"dropout must be a finite number in \[0.0, 1.0\)"):
        check_probability(1.0, "dropout", one=False)
    with pytest.raises(ValueError, match=r"top_p must be a finite number in \(0.0, 1.0\]"):
        check_probability(0.0, "top_p", zero=False)
    for bad in (-0.1, 1.5, math.nan, math.inf):
        with pytest.raises(ValueError, match="dropout must be a finite number in"):
            check_probability(bad, "dropout")


# --- check_token_ids --------------------------------------------------------------------------------------

def test_check_token_ids_on_cpu_names_the_argument_and_the_range():
    with pytest.raises(ValueError, match=r"src holds token ids outside the vocabulary \[0, 10\): min -1, max 4"):
        check_token_ids(torch.tensor([[3, -1, 4]]), 10, name="src")
    with pytest.raises(ValueError, match=r"tgt_in holds token ids outside .*: min 0, max 12"):
        check_token_ids(torch.tensor([0, 12, 5]), 10, name="tgt_in")
    check_token_ids(torch.tensor([[0, 9]]), 10)                             # both ends are fine


def test_check_token_ids_type_dtype_and_dims():
    with pytest.raises(TypeError, match="ids must be a torch.Tensor of token ids, got list"):
        check_token_ids([1, 2], 5)
    with pytest.raises(ValueError, match=r"ids must hold integer token ids.*float32"):
        check_token_ids(torch.tensor([1.0]), 5)
    with pytest.raises(ValueError, match=r"ids must hold integer token ids.*bool"):
        check_token_ids(torch.tensor([True]), 5)
    with pytest.raises(ValueError, match=r"ids must have 2 dimensions, got shape \(3,\)"):
        check_token_ids(torch.tensor([1, 2, 3]), 5, dims=2)
    check_token_ids(torch.tensor([[1, 2, 3]]), 5, dims=2)


def test_check_token_ids_without_a_vocabulary_checks_only_type_and_shape():
    check_token_ids(torch.tensor([[-7, 10**6]]), None, dims=2)
    with pytest.raises(ValueError, match="ids must hold integer token ids"):
        check_token_ids(torch.tensor([[0.5]]), None)


def test_check_token_ids_empty_is_fine():
    check_token_ids(torch.zeros(0, 3, dtype=torch.long), 1)


def test_check_token_ids_on_a_device_queues_the_check_instead_of_reading_back():
    """Off the CPU (here the meta device, which has no values to read) the range check must not
    read a value back: it is queued with torch._assert_async."""
    ids = torch.zeros(2, 3, dtype=torch.long, device="meta")
    check_token_ids(ids, 10)                                                # no .item(), no error


# --- devices ----------------------------------------------------------------------------------------------

def test_default_device_follows_cuda_availability(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert default_device() == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert default_device() == torch.device("cuda")


def test_resolve_device_auto_and_names(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device() == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")


@pytest.mark.parametrize("name", ["gpu", "tpu", "", 3.5])
def test_resolve_device_bad_name(name):
    with pytest.raises(ValueError, match="device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got"):
        resolve_device(name)


def test_resolve_device_cuda_when_unavailable(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name in ("cuda", "cuda:0"):
        with pytest.raises(ValueError, match=f"device '{name}': CUDA is not available"):
            resolve_device(name)


def test_resolve_device_cuda_index_beyond_the_machine(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(ValueError, match=r"device 'cuda:2': this machine has 2 CUDA device\(s\)"):
        resolve_device("cuda:2")
