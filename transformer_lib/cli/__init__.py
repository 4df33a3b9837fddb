"""The package ``transformer_lib.cli``: it re-exports its modules' public names.

Generated from book/appendix_cli.ipynb.
Edit the notebooks, not this file; regenerate with ``python tools/export.py``."""
# digest: a20a3b035f108df9
# fmt: off

from transformer_lib.cli import common as _common
from transformer_lib.cli import main as _main
from transformer_lib.cli import train as _train
from transformer_lib.cli import average as _average
from transformer_lib.cli import translate as _translate
from transformer_lib.cli import serve as _serve
from transformer_lib.cli.common import *  # noqa: F403
from transformer_lib.cli.main import *  # noqa: F403
from transformer_lib.cli.train import *  # noqa: F403
from transformer_lib.cli.average import *  # noqa: F403
from transformer_lib.cli.translate import *  # noqa: F403
from transformer_lib.cli.serve import *  # noqa: F403

__all__ = [
    *_common.__all__,
    *_main.__all__,
    *_train.__all__,
    *_average.__all__,
    *_translate.__all__,
    *_serve.__all__,
]
