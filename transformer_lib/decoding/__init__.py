"""The package ``transformer_lib.decoding``: it re-exports its modules' public names.

Generated from book/10_training.ipynb.
Generated from book/11_decoding.ipynb.
Edit the notebooks, not this file; regenerate with ``python tools/export.py``."""
# digest: 96402e4177586b68
# fmt: off

from transformer_lib.decoding import config as _config
from transformer_lib.decoding import greedy as _greedy
from transformer_lib.decoding import beam as _beam
from transformer_lib.decoding import sampling as _sampling
from transformer_lib.decoding.config import *  # noqa: F403
from transformer_lib.decoding.greedy import *  # noqa: F403
from transformer_lib.decoding.beam import *  # noqa: F403
from transformer_lib.decoding.sampling import *  # noqa: F403

__all__ = [
    *_config.__all__,
    *_greedy.__all__,
    *_beam.__all__,
    *_sampling.__all__,
]
