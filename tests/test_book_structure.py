"""The book's structural rules, checked on every chapter (issue: one module, one job).

* an exported cell is short (a class grows across cells instead), so that prose sits next to the code;
* only the ``#| default_exp`` cell is removed from the page: setup cells stay visible;
* a chapter runs its own definitions: no ``tl.NAME`` / ``transformer_lib.NAME`` for a name it exports;
* a module imports no private (``_name``) helper of another module.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((REPO / "book").glob("*.ipynb"))
MAX_EXPORTED_LINES = 80
HIDDEN = {"remove-cell", "remove-input"}

_spec = importlib.util.spec_from_file_location("_export_for_structure", REPO / "tools" / "export.py")
export = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = export
_spec.loader.exec_module(export)


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_exported_cells_are_short(path: Path):
    long = [(c.cell_id, len(c.body.splitlines())) for c in export.exported_cells(path)
            if len(c.body.splitlines()) > MAX_EXPORTED_LINES]
    assert not long, f"{path.name}: exported cells over {MAX_EXPORTED_LINES} lines (cell, lines): {long}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_only_the_default_exp_cell_is_removed_from_the_page(path: Path):
    hidden = [index + 1 for index, cell in enumerate(_cells(path))
              if HIDDEN & set(cell.get("metadata", {}).get("tags", []))
              and not _source(cell).lstrip().startswith("#| default_exp")]
    assert not hidden, f"{path.name}: cells removed from the page (show them, collapsed if need be): {hidden}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_a_chapter_runs_its_own_definitions(path: Path):
    own = {name for c in export.exported_cells(path) for name in export.public_names(c.body)}
    used = set()
    for cell in _cells(path):
        if cell.get("cell_type") == "code":
            used |= set(re.findall(r"\b(?:tl|transformer_lib)\.([A-Za-z_]\w*)", _source(cell)))
    assert not own & used, f"{path.name} uses the package's copy of its own names: {sorted(own & used)}"


def test_no_module_imports_a_private_name_of_another():
    offenders = []
    for module in sorted((REPO / "transformer_lib").rglob("*.py")):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("transformer_lib"):
                offenders += [f"{module.name}: {node.module}.{a.name}" for a in node.names
                              if a.name.startswith("_")]
    assert not offenders, offenders
