"""Serve MathJax 3 from the installed ``sphinx-mathjax-offline`` package, never from a CDN.

The package ships MathJax under ``static/mathjax``; this extension copies it into the built HTML and
points Sphinx at ``tex-svg-full.js`` (SVG output: no web fonts to fetch). Nothing is committed.
"""
from __future__ import annotations

import importlib.util
import os

from sphinx.util.fileutil import copy_asset

MATHJAX_FILE = "mathjax/tex-svg-full.js"


def _mathjax_dir() -> str:
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("sphinx-mathjax-offline is not installed: run `make setup`")
    return os.path.join(list(spec.submodule_search_locations)[0], "static", "mathjax")


def _set_path(app, config):
    config.mathjax_path = MATHJAX_FILE


def _copy(app, exc):
    if exc is None and app.builder.format == "html":
        copy_asset(_mathjax_dir(), os.path.join(app.outdir, "_static", "mathjax"))


def setup(app):
    _mathjax_dir()  # fail early with a clear message
    app.connect("config-inited", _set_path, priority=900)
    app.connect("build-finished", _copy)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
