"""The package ``transformer_lib.training``: it re-exports its modules' public names.

Generated from book/10_training.ipynb.
Generated from book/10c_training_plumbing.ipynb.
Generated from book/appendix_training_run.ipynb.
Edit the notebooks, not this file; regenerate with ``python tools/export.py``."""
# digest: 939a005e2c8a3402
# fmt: off

from transformer_lib.training import batching as _batching
from transformer_lib.training import loss as _loss
from transformer_lib.training import evaluation as _evaluation
from transformer_lib.training import schedule as _schedule
from transformer_lib.training import loop as _loop
from transformer_lib.training import checkpoint as _checkpoint
from transformer_lib.training import distributed as _distributed
from transformer_lib.training import config as _config
from transformer_lib.training import averaging as _averaging
from transformer_lib.training import position as _position
from transformer_lib.training import snapshots as _snapshots
from transformer_lib.training import interrupts as _interrupts
from transformer_lib.training import metrics_log as _metrics_log
from transformer_lib.training.batching import *  # noqa: F403
from transformer_lib.training.loss import *  # noqa: F403
from transformer_lib.training.evaluation import *  # noqa: F403
from transformer_lib.training.schedule import *  # noqa: F403
from transformer_lib.training.loop import *  # noqa: F403
from transformer_lib.training.checkpoint import *  # noqa: F403
from transformer_lib.training.distributed import *  # noqa: F403
from transformer_lib.training.config import *  # noqa: F403
from transformer_lib.training.averaging import *  # noqa: F403
from transformer_lib.training.position import *  # noqa: F403
from transformer_lib.training.snapshots import *  # noqa: F403
from transformer_lib.training.interrupts import *  # noqa: F403
from transformer_lib.training.metrics_log import *  # noqa: F403

__all__ = [
    *_batching.__all__,
    *_loss.__all__,
    *_evaluation.__all__,
    *_schedule.__all__,
    *_loop.__all__,
    *_checkpoint.__all__,
    *_distributed.__all__,
    *_config.__all__,
    *_averaging.__all__,
    *_position.__all__,
    *_snapshots.__all__,
    *_interrupts.__all__,
    *_metrics_log.__all__,
]
