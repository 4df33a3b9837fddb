#!/usr/bin/env python
"""Execute every chapter notebook of the book, several at a time, into the build's jupyter-cache.

``make book`` runs this first and then ``jupyter-book build`` with ``execute_notebooks: cache``
(``_config.yml``), which takes each notebook's outputs, glue values and run time from the cache
instead of executing the notebooks again one after the other. The cache is emptied before every
build (``make book`` removes ``_build/.jupyter_cache``), so every notebook is run from the top with a
fresh kernel in every build, as before; only the order changes: the longest notebooks start first,
``--jobs`` at a time. A notebook that fails stops the build: its traceback is printed and the script
exits 1. Usage::

    python tools/execute_book.py [--jobs N] [--timeout S] [NOTEBOOK ...]
"""
from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import nbformat
from jupyter_cache import get_cache
from jupyter_cache.cache.main import CacheBundleIn
from jupyter_cache.executors.utils import single_nb_execution

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "_build" / ".jupyter_cache"          # jupyter-book's default execution cache


def execute(path: str, timeout: int) -> tuple[str, nbformat.NotebookNode, float, str | None]:
    """Run one notebook in its own folder (as myst-nb does) -> (path, executed notebook, seconds,
    traceback or None)."""
    nb = nbformat.read(path, as_version=4)
    result = single_nb_execution(nb, cwd=str(Path(path).parent), timeout=timeout, allow_errors=False)
    return path, nb, result.time, result.exc_string if result.err is not None else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="default: every book/*.ipynb")
    parser.add_argument("--jobs", type=int, default=2, help="notebooks run at once (default 2)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds a cell may take (default 900)")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.timeout < 1:
        parser.error("--jobs and --timeout must be positive")
    paths = [Path(p).resolve() for p in args.notebooks] or sorted((ROOT / "book").glob("*.ipynb"))
    paths.sort(key=lambda p: p.stat().st_size, reverse=True)      # the longest, roughly, first
    cache = get_cache(str(CACHE))
    failed = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(execute, str(p), args.timeout) for p in paths]
        for future in as_completed(futures):
            path, nb, seconds, error = future.result()
            name = Path(path).relative_to(ROOT)
            if error is not None:
                failed.append(name)
                print(f"{name}: FAILED after {seconds:.1f} s\n{error}", file=sys.stderr, flush=True)
                continue
            cache.cache_notebook_bundle(CacheBundleIn(nb, path, data={"execution_seconds": seconds}),
                                        check_validity=False, overwrite=True)
            print(f"{name}: {seconds:.1f} s", flush=True)
    if failed:
        print(f"{len(failed)} notebook(s) failed: {', '.join(map(str, failed))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
