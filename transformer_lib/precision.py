"""Generated from book/10c_training_plumbing.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: ffeaf6248b54e325
# fmt: off

# [book/10c_training_plumbing.ipynb, cell 033c8dc8]
from __future__ import annotations

import torch


# [book/10c_training_plumbing.ipynb, cell ca107e8d]
PRECISIONS: dict[str, torch.dtype | None] = {
    "fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
_ALIASES = {"none": "fp32", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def amp_dtype(precision: str | None, name: str = "precision") -> torch.dtype | None:
    """The 16-bit dtype that a precision names (:data:`PRECISIONS`): ``None`` or
    ``"fp32"`` -> None (no autocast, float32), ``"bf16"`` -> torch.bfloat16, ``"fp16"``
    -> torch.float16; the aliases ``"none"``, ``"float32"``, ``"bfloat16"`` and
    ``"float16"`` are accepted. Anything else raises a ValueError naming the argument
    ``name``."""
    if precision is None:
        return None
    key = _ALIASES.get(precision, precision) if isinstance(precision, str) else None
    if key not in PRECISIONS:
        names = ", ".join(map(repr, PRECISIONS))
        raise ValueError(f"{name} must be one of None, {names}, got {precision!r}")
    return PRECISIONS[key]


__all__ = ['PRECISIONS', 'amp_dtype']
