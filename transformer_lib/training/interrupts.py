"""Generated from book/appendix_training_run.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 65ec0cfeaf71ed67
# fmt: off

# [book/appendix_training_run.ipynb, cell 16f7669f]
from __future__ import annotations

import signal
import threading
from typing import Any


# [book/appendix_training_run.ipynb, cell c859e501]
class Interrupts:
    """A context manager that notes Ctrl-C (SIGINT) and SIGTERM instead of acting on
    them, while ``enabled`` and in the main thread (the one that receives signals).

    Inside ``with Interrupts(True) as interrupts:`` a first signal is recorded in
    ``interrupts.signum`` (None until then): the loop checks it between two units of
    work and stops cleanly. A second signal restores the previous handlers and is
    handed over at once. After the block, :meth:`deliver` hands a noted signal to the
    handler that was there before (Python's raises ``KeyboardInterrupt``; SIGTERM's
    default ends the process). The previous handlers are restored on leaving the
    block."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.signum: int | None = None
        self.previous: dict[int, Any] = {}
        self.installed = False

    def __enter__(self) -> Interrupts:
        if self.enabled and threading.current_thread() is threading.main_thread():
            for name in ("SIGINT", "SIGTERM"):
                sig: int | None = getattr(signal, name, None)
                if sig is None:
                    continue
                handler = signal.getsignal(sig)
                if handler is not None and handler is not signal.SIG_IGN:
                    self.previous[sig] = handler
                    signal.signal(sig, self._note)
            self.installed = True
        return self

    def _note(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum                     # acted on after this update
        else:
            self.restore()                           # a second one: at once
            self._hand_over(signum)

    def restore(self) -> None:
        """Put the previous handlers back (done on leaving the block)."""
        if self.installed:
            for sig, handler in self.previous.items():
                signal.signal(sig, handler)
            self.installed = False

    def __exit__(self, *exc: Any) -> None:
        self.restore()

    def deliver(self) -> None:
        """Hand the noted signal, if any, to its previous handler."""
        if self.signum is not None:
            self._hand_over(self.signum)

    def _hand_over(self, signum: int) -> None:
        handler = self.previous.get(signum)
        if callable(handler):
            handler(signum, None)       # e.g. Python's own: raises KeyboardInterrupt
        else:
            signal.raise_signal(signum)              # the default action


__all__ = ['Interrupts']
