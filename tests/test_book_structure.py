"""The book's structural rules, checked on every chapter (issue: one module, one job).

* an exported cell is short (a class grows across cells instead), so that prose sits next to the code;
* only the ``#| default_exp`` cell is removed from the page: setup cells stay visible;
* a chapter runs its own definitions: no ``tl.NAME`` / ``transformer_lib.NAME`` for a name it exports;
* a module imports no private (``_name``) helper of another module;
* (issue 25) a module is at most 350 lines; a module imports only from its own chapter or earlier ones, in
  the order of the table of contents (the import graph reads like the book); no library code calls a
  private function of another package.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
import yaml

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


MAX_MODULE_LINES = 350
# Private functions of other packages that the library calls on purpose, with the reason. torch has no public
# device-side assertion: checks.check_token_ids queues one on a GPU instead of reading the ids back. torch has
# no public way to keep a linear layer's weight in oneDNN's packed layout: packed.PackedLinear calls the two
# operators PyTorch's own compiler uses for frozen CPU models, detects them at run time and falls back to
# F.linear where they are missing (tests/test_packed.py covers both paths).
ALLOWED_PRIVATE_CALLS = {"torch._assert_async", "torch.ops.mkldnn._reorder_linear_weight",
                         "torch.ops.mkldnn._linear_pointwise"}


def _library() -> list[Path]:
    return sorted((REPO / "transformer_lib").rglob("*.py"))


def test_every_module_is_short():
    long = {p.relative_to(REPO).as_posix(): n for p in _library()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def _chapter_rank() -> dict[str, int]:
    """{page file name: the position of its chapter in the table of contents}; a section (an appendix nested
    under its chapter, as the training run's under chapter 10) counts as its chapter."""
    toc = yaml.safe_load((REPO / "_toc.yml").read_text(encoding="utf-8"))
    rank: dict[str, int] = {}
    chapters = [c for part in toc.get("parts", []) for c in part.get("chapters", [])]
    for i, chapter in enumerate(chapters):
        for entry in [chapter, *chapter.get("sections", [])]:
            rank[Path(entry["file"]).name + ".ipynb"] = i
    return rank


def _page_rank() -> dict[str, int]:
    """{module: the position in the book of the chapter that makes it}."""
    chapter = _chapter_rank()
    rank: dict[str, int] = {}
    for path in export.book_order(REPO):
        for module in export.read_chapter(path):
            rank.setdefault(module, chapter.get(path.name, len(chapter)))
    return rank


def test_a_module_imports_only_its_own_chapter_or_earlier_ones():
    rank = _page_rank()
    later = []
    for module, position in rank.items():
        path = REPO / "transformer_lib" / (module.replace(".", "/") + ".py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                if name.startswith("transformer_lib."):
                    target = name[len("transformer_lib."):]
                    if target in rank and rank[target] > position:
                        later.append(f"{module} imports {target}, a later chapter's module")
    assert not later, later


def test_no_library_code_calls_a_private_function_of_another_package():
    calls = set()
    for path in _library():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {a.asname or a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                    for a in n.names if not a.name.startswith("transformer_lib")}
        imported |= {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                     and not (n.module or "").startswith("transformer_lib") for a in n.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and not (node.module or "").startswith("transformer_lib"):
                calls |= {f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")}
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.endswith("__"):
                base = node.value
                while isinstance(base, ast.Attribute):
                    base = base.value
                if isinstance(base, ast.Name) and base.id in imported:
                    calls.add(f"{ast.unparse(node.value)}.{node.attr}")
    assert calls <= ALLOWED_PRIVATE_CALLS, sorted(calls - ALLOWED_PRIVATE_CALLS)
