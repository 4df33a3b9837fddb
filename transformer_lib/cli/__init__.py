"""The package ``transformer_lib.cli``: it re-exports its modules' public names.

Generated from book/appendix_cli.ipynb.
Edit the notebooks, not this file; regenerate with ``python tools/export.py``."""
# digest: c3298cf3decd70a5
# fmt: off

from transformer_lib.cli import common as _common
from transformer_lib.cli import main as _main
from transformer_lib.cli import train as _train
from transformer_lib.cli import translate as _translate
from transformer_lib.cli.common import *  # noqa: F403
from transformer_lib.cli.main import *  # noqa: F403
from transformer_lib.cli.train import *  # noqa: F403
from transformer_lib.cli.translate import *  # noqa: F403

__all__ = [
    *_common.__all__,
    *_main.__all__,
    *_train.__all__,
    *_translate.__all__,
]
