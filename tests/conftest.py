"""Shared test settings.

Hypothesis profiles: on CI (``CI`` set) the property tests draw the same examples every run, so a red CI
means a change, not luck; locally they explore fresh examples each run and keep failures in .hypothesis/
to replay. ``make test-deep`` sets ``HYPOTHESIS_DEEP=N``: every property test then draws N times its
usual number of examples (``examples``), from fresh seeds, to find a property that is false for a rare
input.
"""
import os

import pytest
import torch
from hypothesis import settings

DEEP = int(os.environ.get("HYPOTHESIS_DEEP", "0") or 0)

settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("deep", derandomize=False, deadline=None, max_examples=100 * max(DEEP, 1))
if DEEP > 1:
    settings.load_profile("deep")
elif os.environ.get("CI"):
    settings.load_profile("ci")


def examples(n: int) -> int:
    """A property test's number of examples: ``n``, or ``n`` times ``HYPOTHESIS_DEEP`` under ``make test-deep``
    (``@settings(max_examples=examples(15))``)."""
    return n * DEEP if DEEP > 1 else n


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """The tests' tensors are tiny: one thread avoids the cost of thread hand-offs on a busy 2-core machine
    (and `make test` runs two pytest workers side by side)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def padded_ids(lengths: list[int], width: int, vocab: int = 20, bos: bool = False) -> torch.Tensor:
    """(B, width) token ids in [3, vocab), row b real for its first lengths[b] positions, then pad (0); with
    ``bos``, every row starts with bos (1). Shared by the layer and model tests (``from conftest import``)."""
    ids = torch.randint(3, vocab, (len(lengths), width))
    for b, n in enumerate(lengths):
        ids[b, n:] = 0
    if bos:
        ids[:, 0] = 1
    return ids


def assert_dropout_only_in_training(module: torch.nn.Module, x: torch.Tensor) -> None:
    """``module`` (built with dropout > 0) is deterministic in eval mode and random in training mode."""
    module.eval()
    torch.testing.assert_close(module(x), module(x))
    module.train()
    assert not torch.allclose(module(x), module(x))
