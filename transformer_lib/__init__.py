"""transformer_lib: the encoder-decoder Transformer, exported from the chapters of the book.

The modules are generated from ``book/*.ipynb`` by ``tools/export.py``; this file is written by hand
and re-exports the public API (each module's ``__all__``).
"""
from transformer_lib.checks import *  # noqa: F401,F403  chapter 1
from transformer_lib.embedding import *  # noqa: F401,F403  chapter 1
from transformer_lib.positional import *  # noqa: F401,F403  chapter 2
from transformer_lib.attention import *  # noqa: F401,F403  chapter 3
from transformer_lib.masks import *  # noqa: F401,F403  chapter 4
from transformer_lib.feed_forward import *  # noqa: F401,F403  chapter 5
from transformer_lib.norm import *  # noqa: F401,F403  chapter 6
from transformer_lib.encoder import *  # noqa: F401,F403  chapter 7
from transformer_lib.decoder import *  # noqa: F401,F403  chapter 8
from transformer_lib.model import *  # noqa: F401,F403  chapter 9
from transformer_lib.training import *  # noqa: F401,F403  chapter 10
from transformer_lib.decoding import *  # noqa: F401,F403  chapter 11
from transformer_lib.data import *  # noqa: F401,F403  chapter 12

__version__ = "0.1.0"
