"""Generated from book/00_overview.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: a5caf75a31826827
# fmt: off

# [book/00_overview.ipynb, cell 5eed0e02]
from __future__ import annotations

import os
import random

import torch

#: A run's seeds are ``1000 * BOOK_SEED + offset``, offset 0 to 999: no two runs
#: share one.
SEED_STRIDE = 1000


def book_seed(offset: int = 0) -> int:
    """The seed of one random draw of the book: ``1000 * BOOK_SEED + offset``.

    ``BOOK_SEED``, an environment variable (a whole number >= 0; 0 when unset), picks
    the run; ``offset`` (0 to 999) tells apart the independent draws of one chapter, so
    a chapter that trains three models seeds them with ``book_seed(0)``,
    ``book_seed(1)`` and ``book_seed(2)``."""
    if isinstance(offset, bool) or not isinstance(offset, int) \
            or not 0 <= offset < SEED_STRIDE:
        raise ValueError(f"offset must be an int from 0 to {SEED_STRIDE - 1}, "
                         f"got {offset!r}")
    raw = os.environ.get("BOOK_SEED", "").strip() or "0"
    if not (raw.isascii() and raw.isdigit()):
        raise ValueError(f"BOOK_SEED must be a whole number >= 0, got {raw!r}")
    return SEED_STRIDE * int(raw) + offset


def seed_everything(offset: int = 0) -> int:
    """Seed Python's ``random``, NumPy's global generator (when NumPy is installed) and
    PyTorch (the CPU and every GPU) with ``book_seed(offset)``; return that seed."""
    seed = book_seed(offset)
    random.seed(seed)
    torch.manual_seed(seed)                 # seeds every CUDA device too
    try:
        import numpy
    except ImportError:
        pass
    else:
        numpy.random.seed(seed % 2**32)
    return seed


__all__ = ['SEED_STRIDE', 'book_seed', 'seed_everything']
