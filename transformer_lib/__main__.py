"""``python -m transformer_lib train|translate|...``: the command-line tool.

Written by hand (tools/export.py leaves it alone); the tool itself,
transformer_lib.cli.main, is exported from book/appendix_cli.ipynb. Under
``torchrun --nproc_per_node N -m transformer_lib train`` every process runs this file.

:func:`run` is also the ``transformer-lib`` console script. It owns the process's
signals, which a library function must not: Ctrl-C and SIGTERM end the tool with one
line and the status a shell expects (130, 143) whatever it is doing, even while it is
still importing torch (``import transformer_lib`` imports nothing heavy, so this file
runs within milliseconds of the start); and once :func:`~transformer_lib.cli.main.main`
has returned, a late signal no longer changes the status it returned.
"""
import signal
import sys
import threading


class _Terminated(KeyboardInterrupt):
    """SIGTERM while the tool starts, raised like Ctrl-C."""


def _on_sigterm(signum, frame) -> None:
    raise _Terminated()


def _where(argv: list[str], prog: str) -> str:
    command = next((a for a in argv if not a.startswith("-")), "")
    return f"{prog} {command}".rstrip()


def run(argv: list[str] | None = None, prog: str = "transformer-lib") -> int:
    """Run the tool on ``argv`` (default: ``sys.argv[1:]``); its exit status."""
    argv = sys.argv[1:] if argv is None else argv
    owner = threading.current_thread() is threading.main_thread()
    try:
        if owner:
            signal.signal(signal.SIGTERM, _on_sigterm)
        from transformer_lib.cli.common import on_sigterm  # torch and the chapters
        from transformer_lib.cli.main import main
        if owner:
            signal.signal(signal.SIGTERM, on_sigterm)
        status = main(argv, prog)
    except KeyboardInterrupt as exc:                 # only while starting: main
        name, status = (("SIGTERM", 143) if isinstance(exc, _Terminated)   # handles
                        else ("Ctrl-C", 130))                               # the rest
        print(f"{_where(argv, prog)}: interrupted by {name} while starting",
              file=sys.stderr)
    finally:
        if owner:           # the tool has said how it ended: a late signal is ignored
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
    exec("pass")   # forget an interrupt CPython noted as unhandled (see cli.main)
    return status


if __name__ == "__main__":
    sys.exit(run(prog="python -m transformer_lib"))
