"""Shared test settings.

Hypothesis profiles: on CI (``CI`` set) the property tests draw the same examples every run, so a red CI
means a change, not luck; locally they explore fresh examples each run and keep failures in .hypothesis/
to replay. ``make test-deep`` sets ``HYPOTHESIS_DEEP=N``: every property test then draws N times its
usual number of examples, from fresh seeds, to find a property that is false for a rare input.
"""
import os

import pytest
import torch
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

DEEP = int(os.environ.get("HYPOTHESIS_DEEP", "0") or 0)


def pytest_collection_modifyitems(items):
    """Under HYPOTHESIS_DEEP=N, multiply each property test's own max_examples by N (fresh seeds)."""
    if DEEP <= 1:
        return
    for item in items:
        test = getattr(item, "obj", None)
        own = getattr(test, "_hypothesis_internal_use_settings", None)
        if own is not None:
            test._hypothesis_internal_use_settings = settings(
                own, max_examples=own.max_examples * DEEP, derandomize=False, deadline=None)


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
