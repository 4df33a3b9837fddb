"""``python -m transformer_lib train|translate|...``: the command-line tool.

Written by hand (tools/export.py leaves it alone); the tool itself,
transformer_lib.cli.main, is exported from book/appendix_cli.ipynb. Under
``torchrun --nproc_per_node N -m transformer_lib train`` every process runs this file.

:func:`run` is also the ``transformer-lib`` console script. It owns the process's
signals, which a library function must not: Ctrl-C and SIGTERM end the tool with one
line and the status a shell expects (130, 143) whatever it is doing, even while it is
still importing torch (``import transformer_lib`` imports nothing heavy, so this file
runs within milliseconds of the start: a signal that comes while torch is imported
is held until the import is done, then ends the tool); and once the command's output
is complete (``cli.common.finished``), a late signal no longer changes its status.
"""
import signal
import sys
import threading


class _Terminated(KeyboardInterrupt):
    """SIGTERM while the tool starts, raised like Ctrl-C."""


def _on_sigterm(signum, frame) -> None:
    raise _Terminated()


def _hold(owner: bool):
    """Block Ctrl-C and SIGTERM while torch is imported; the mask to restore after.
    Python's import of torch (and of numpy within it) is not safe to interrupt: a
    KeyboardInterrupt there can be swallowed by the C code that imports numpy, or
    leave a module half-initialised ("cannot load module more than once"). Held
    signals are delivered, once, when the mask is restored."""
    if not owner or not hasattr(signal, "pthread_sigmask"):
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT, signal.SIGTERM))


def _where(argv: list[str], prog: str) -> str:
    command = next((a for a in argv if not a.startswith("-")), "")
    return f"{prog} {command}".rstrip()


def run(argv: list[str] | None = None, prog: str = "transformer-lib") -> int:
    """Run the tool on ``argv`` (default: ``sys.argv[1:]``); its exit status."""
    argv = sys.argv[1:] if argv is None else argv
    owner = threading.current_thread() is threading.main_thread()
    started = False
    try:
        if owner:
            signal.signal(signal.SIGTERM, _on_sigterm)
        held = _hold(owner)
        try:             # torch and the chapters; a signal waits until they are in
            from transformer_lib.cli.main import main
        finally:
            if held is not None:     # a signal that came meanwhile is raised here
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
        started = True
        status = main(argv, prog, restore_signals=not owner)
    except KeyboardInterrupt as exc:   # while starting: main handles the rest, but
        common = sys.modules.get("transformer_lib.cli.common")   # for a few steps
        terminated = (_Terminated, getattr(common, "Terminated", _Terminated))
        name, status = (("SIGTERM", 143) if isinstance(exc, terminated)
                        else ("Ctrl-C", 130))
        when = "" if started else " while starting"
        print(f"{_where(argv, prog)}: interrupted by {name}{when}", file=sys.stderr)
    finally:
        if owner:           # the tool has said how it ended: a late signal is ignored
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
    exec("pass")   # forget an interrupt CPython noted as unhandled (see cli.main)
    return status


if __name__ == "__main__":
    sys.exit(run(prog="python -m transformer_lib"))
