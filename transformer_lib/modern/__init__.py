"""The package ``transformer_lib.modern``: it re-exports its modules' public names.

Generated from book/13_modern.ipynb.
Edit the notebooks, not this file; regenerate with ``python tools/export.py``."""
# digest: 6310774821d47b42
# fmt: off

from transformer_lib.modern.rope import (
    ROPE_LAYOUTS,
    rotary_frequencies,
    rotate,
    apply_rotary,
    RotaryEmbedding,
)
from transformer_lib.modern.decoder_only import (
    POSITIONS,
    DecoderOnlyConfig,
    DecoderOnlyBlock,
    lm_positions,
    lm_mask,
    DecoderOnlyLM,
    PromptStepper,
)
from transformer_lib.modern.llama import (
    half_to_interleaved,
    load_llama_state_dict,
)

__all__ = [
    'ROPE_LAYOUTS',
    'rotary_frequencies',
    'rotate',
    'apply_rotary',
    'RotaryEmbedding',
    'POSITIONS',
    'DecoderOnlyConfig',
    'DecoderOnlyBlock',
    'lm_positions',
    'lm_mask',
    'DecoderOnlyLM',
    'PromptStepper',
    'half_to_interleaved',
    'load_llama_state_dict',
]
