"""Shared test settings."""
import os

import pytest
import torch
from hypothesis import settings

# On CI the property tests draw the same examples every run (a red CI then means a change, not luck);
# locally they explore new examples each run and keep failures in .hypothesis/ to replay.
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """The tests' tensors are tiny: one thread avoids the cost of thread hand-offs on a busy 2-core machine
    (and `make test` runs two pytest workers side by side)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
