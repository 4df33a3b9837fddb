"""The ``{fact}`` role: a number in the prose that no cell measures, marked as such.

Every measured figure in the book's prose is glued from the cell that computed it (myst-nb's
``{glue:text}``); ``tools/check_prose.py`` fails on any other figure that looks measured. A number that is
a fixed fact (the paper's "65M" parameters, BLEU 28.4 as the paper reports it, a section number of a
cited text) is written ``{fact}`28.4``` instead: the reader sees plain text, and the check knows the
number was written by hand on purpose.
"""
from __future__ import annotations

from docutils import nodes


def fact_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    node = nodes.inline(rawtext, text, classes=["fact"])
    return [node], []


def setup(app):
    app.add_role("fact", fact_role)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
