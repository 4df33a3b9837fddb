"""Generated from book/01_embedding.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 2f53e1a2d14d667e
# fmt: off

# [book/01_embedding.ipynb, cell c59bb357]
# Argument checks shared by the library's public functions. Each public function checks
# its arguments once, where a user calls it; a bad value raises a ValueError (or
# TypeError) that names the argument and says what was expected. Checks inside a forward
# pass never read a value back from a GPU: that would stall the device at every call.
from __future__ import annotations

import math
import operator

import torch


def default_device() -> torch.device:
    """Where a new model should live: the first CUDA GPU if there is one, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """``None`` or ``"auto"`` -> :func:`default_device`; a name (``"cpu"``,
    ``"cuda:1"``) -> that device, after checking that it exists on this machine."""
    if device is None or device == "auto":
        return default_device()
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError("device must be 'auto', 'cpu', 'cuda' or 'cuda:N', "
                         f"got {device!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: CUDA is not available on this machine")
    n_gpus = torch.cuda.device_count() if dev.type == "cuda" else 0
    if dev.type == "cuda" and dev.index is not None and dev.index >= n_gpus:
        raise ValueError(f"device {device!r}: this machine has {n_gpus} CUDA device(s)")
    return dev


def check_int(value, name: str, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum``; True/False and 2.0 are refused (they are not
    counts). NumPy integers and 0-d integer tensors are accepted."""
    expected = f"{name} must be an int >= {minimum}, got {value!r}"
    if isinstance(value, bool):
        raise ValueError(expected)
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError(expected) from None
    if value < minimum:
        raise ValueError(expected)
    return value


def check_float(value, name: str, low: float = -math.inf, high: float = math.inf, *,
                low_open: bool = False, high_open: bool = False) -> float:
    """``value`` as a finite float in the interval from ``low`` to ``high`` (closed
    unless ``low_open`` / ``high_open``)."""
    left, right = "(" if low_open else "[", ")" if high_open else "]"
    if math.isinf(high):
        interval = f" {'>' if low_open else '>='} {low}" if math.isfinite(low) else ""
    elif math.isinf(low):
        interval = f" {'<' if high_open else '<='} {high}"
    else:
        interval = f" in {left}{low}, {high}{right}"
    expected = f"{name} must be a finite number{interval}"
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value)):
        raise ValueError(f"{expected}, got {value!r}")
    if (value < low or value > high or (low_open and value == low)
            or (high_open and value == high)):
        raise ValueError(f"{expected}, got {value!r}")
    return float(value)


def check_probability(value, name: str, *, zero: bool = True,
                      one: bool = True) -> float:
    """``value`` as a probability in [0, 1]; ``zero=False`` / ``one=False`` exclude
    the ends."""
    return check_float(value, name, 0.0, 1.0, low_open=not zero, high_open=not one)


# [book/01_embedding.ipynb, cell 420052b9]
def check_token_ids(ids: torch.Tensor, vocab_size: int | None, name: str = "ids",
                    dims: int | None = None) -> None:
    """Refuse anything but an integer tensor of ids in [0, vocab_size) (of ``dims``
    dimensions, if given; ``vocab_size=None`` skips the range check).

    On the CPU the range is checked at once and the error gives the offending values. On
    a GPU, and inside ``torch.compile``, the check is queued on the device
    (``torch._assert_async``) instead of read back: no synchronisation and no graph
    break, and a bad id still stops the program, at the next synchronisation, instead of
    reading another token's row.
    """
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, "
                        f"got {type(ids).__name__}")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids (torch.long), "
                         f"got dtype {ids.dtype}")
    if dims is not None and ids.dim() != dims:
        raise ValueError(f"{name} must have {dims} dimensions, "
                         f"got shape {tuple(ids.shape)}")
    if vocab_size is None or not ids.numel():
        return
    vocab = f"the vocabulary [0, {vocab_size})"
    if ids.device.type != "cpu" or torch.compiler.is_compiling():
        ok = ((ids >= 0) & (ids < vocab_size)).all()
        torch._assert_async(ok, f"{name} holds token ids outside {vocab}")
        return
    lo, hi = torch.aminmax(ids)
    if lo < 0 or hi >= vocab_size:
        raise ValueError(f"{name} holds token ids outside {vocab}: "
                         f"min {int(lo)}, max {int(hi)}")


__all__ = [
    'default_device', 'resolve_device', 'check_int', 'check_float', 'check_probability',
    'check_token_ids',
]
