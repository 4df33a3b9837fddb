"""The signal dispositions a test's child process starts with.

A child inherits ignored signals: under ``nohup`` (SIGHUP ignored) or a shell without job
control (SIGINT ignored in background jobs), a child that the test signals would never see the
signal, and a test that waits for it would wait for ever. Tests that signal a child start it
with ``preexec_fn=default_signals``: what a user's terminal gives it.
"""
from __future__ import annotations

import signal


def default_signals() -> None:
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
