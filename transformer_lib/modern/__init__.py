"""The package ``transformer_lib.modern``: it re-exports its modules' public names.

Generated from book/13_modern.ipynb.
Edit the notebooks, not this file; regenerate with ``python tools/export.py``."""
# digest: be45f7cdff144d41
# fmt: off

from transformer_lib.modern import rope as _rope
from transformer_lib.modern import decoder_only as _decoder_only
from transformer_lib.modern import llama as _llama
from transformer_lib.modern.rope import *  # noqa: F403
from transformer_lib.modern.decoder_only import *  # noqa: F403
from transformer_lib.modern.llama import *  # noqa: F403

__all__ = [
    *_rope.__all__,
    *_decoder_only.__all__,
    *_llama.__all__,
]
