"""Generated from book/13_modern.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 15bf0ba31d0c6a86
# fmt: off

# [book/13_modern.ipynb, cell 59159325]
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from transformer_lib.checks import check_float, check_int

#: the two ways of pairing a head's coordinates: (2j, 2j+1), the complex view, or
#: (j, j + d/2), as Llama does
ROPE_LAYOUTS = ("interleaved", "half")


def rotary_frequencies(head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """θ_j = base^(-2j / head_dim), j = 0 .. head_dim/2 - 1, float32 (head_dim/2,): the
    angle per position of each pair, the frequencies of chapter 2's sinusoidal table."""
    head_dim = check_int(head_dim, "head_dim")
    if head_dim % 2:
        raise ValueError(f"head_dim must be even (pairs of coordinates), "
                         f"got {head_dim}")
    base = check_float(base, "base", 1.0, low_open=True)
    j2 = torch.arange(0, head_dim, 2, dtype=torch.int64).float()
    return 1.0 / (base ** (j2 / head_dim))                   # (head_dim/2,)


def _check_positions(x: torch.Tensor, positions: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must be a tensor of shape (..., L, head_dim), got {shape}")
    if (not isinstance(positions, torch.Tensor) or positions.dtype.is_floating_point
            or positions.dtype == torch.bool or positions.dim() not in (1, 2)
            or positions.size(-1) != x.size(-2)
            or (positions.dim() == 2 and positions.size(0) != x.size(0))):
        got = (f"{tuple(positions.shape)} {positions.dtype}"
               if isinstance(positions, torch.Tensor) else type(positions).__name__)
        raise ValueError(f"positions must be an integer tensor (L,) or (B, L) with "
                         f"L = {x.size(-2)} (and B = x.size(0)), got {got}")


# [book/13_modern.ipynb, cell 65c243e8]
def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
           layout: str = "interleaved") -> torch.Tensor:
    """Rotate the coordinate pairs of x (..., L, d) by the angles whose cos and sin
    (..., L, d/2) are given. ``layout="interleaved"`` pairs (2j, 2j+1), the complex
    view; ``"half"`` pairs (j, j + d/2), Llama's ``rotate_half``. Half-precision x is
    rotated in float32 and returned in its dtype (so it runs under autocast)."""
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"layout must be one of {ROPE_LAYOUTS}, got {layout!r}")
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    if layout == "interleaved":
        x1, x2 = xf[..., 0::2], xf[..., 1::2]               # (..., L, d/2) each
    else:
        x1, x2 = xf.chunk(2, dim=-1)
    out1, out2 = x1 * cos - x2 * sin, x1 * sin + x2 * cos   # the 2x2 rotation
    if layout == "interleaved":
        out = torch.stack([out1, out2], dim=-1).flatten(-2)  # (..., L, d)
    else:
        out = torch.cat([out1, out2], dim=-1)
    return out.to(x.dtype)


def _angles_for(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """angles (L, d/2) or (B, L, d/2) shaped to broadcast against x (B, ..., L, d/2)."""
    if angles.dim() == 3:                                    # (B, L, d/2)
        B, L, half = angles.shape
        return angles.view(B, *([1] * (x.dim() - 3)), L, half)
    return angles


def apply_rotary(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0,
                 layout: str = "interleaved") -> torch.Tensor:
    """RoPE: rotate x (..., L, head_dim) at integer ``positions``, (L,) or (B, L) for
    x (B, ..., L, head_dim): pair j of position m turns by the angle m·θ_j,
    θ_j = base^(-2j/head_dim). Then q_m·k_n depends on m - n only."""
    _check_positions(x, positions)
    freqs = rotary_frequencies(x.size(-1), base).to(x.device)
    angles = positions.to(x.device).float()[..., None] * freqs   # (…, L, d/2)
    angles = _angles_for(x, angles)
    return rotate(x, angles.cos(), angles.sin(), layout)


# [book/13_modern.ipynb, cell 1fdcacf1]
class RotaryEmbedding(nn.Module):
    """RoPE as a module that keeps its cos/sin tables: ``rope(x, positions)`` equals
    ``apply_rotary(x, positions, base, layout)``. The tables cover positions below
    ``max_len``; beyond them the angles of the given positions only are computed, and
    the tables never grow, so memory follows the input, not the largest position.
    They are buffers that are not saved (``persistent=False``) and follow
    ``.to(device)``."""

    cos: torch.Tensor
    sin: torch.Tensor
    inv_freq: torch.Tensor

    def __init__(self, head_dim: int, base: float = 10000.0, max_len: int = 512,
                 layout: str = "interleaved"):
        super().__init__()
        if layout not in ROPE_LAYOUTS:
            raise ValueError(f"layout must be one of {ROPE_LAYOUTS}, got {layout!r}")
        self.head_dim, self.layout = check_int(head_dim, "head_dim"), layout
        self.base = check_float(base, "base", 1.0, low_open=True)
        self.register_buffer("inv_freq", rotary_frequencies(head_dim, base),
                             persistent=False)
        pos = torch.arange(check_int(max_len, "max_len")).float()
        angles = pos[:, None] * self.inv_freq                  # (max_len, d/2)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def rotation(self, positions: torch.Tensor
                 ) -> Callable[[torch.Tensor], torch.Tensor]:
        """The function x (B, ..., L, head_dim) -> x rotated at ``positions`` (L,) or
        (B, L): the tables are looked up once, for every layer that calls it."""
        if (not isinstance(positions, torch.Tensor) or positions.dim() not in (1, 2)
                or positions.dtype.is_floating_point or positions.dtype == torch.bool):
            raise ValueError("positions must be an integer tensor (L,) or (B, L)")
        if positions.numel() and int(positions.min()) < 0:   # one host-device sync
            raise ValueError("positions must be >= 0")
        top = int(positions.max()) + 1 if positions.numel() else 0
        positions = positions.to(self.cos.device)
        if top <= self.cos.size(0):
            cos, sin = self.cos[positions], self.sin[positions]    # (…, L, d/2)
        else:                      # beyond the tables: these positions' angles only
            angles = positions.float()[..., None] * self.inv_freq
            cos, sin = angles.cos(), angles.sin()

        def rotate_at(x: torch.Tensor) -> torch.Tensor:
            _check_positions(x, positions)
            if x.size(-1) != self.head_dim:
                raise ValueError(f"x must have last dimension head_dim="
                                 f"{self.head_dim}, got shape {tuple(x.shape)}")
            return rotate(x, _angles_for(x, cos), _angles_for(x, sin), self.layout)
        return rotate_at

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.rotation(positions)(x)


__all__ = [
    'ROPE_LAYOUTS', 'rotary_frequencies', 'rotate', 'apply_rotary', 'RotaryEmbedding',
]
