"""The book's structural rules, checked on every chapter (issue: one module, one job).

* an exported cell is short (a class grows across cells instead), so that prose sits next to the code;
* only the ``#| default_exp`` cell is removed from the page: setup cells stay visible;
* a chapter runs its own definitions: no ``tl.NAME`` / ``transformer_lib.NAME`` for a name it exports;
* a module imports no private (``_name``) helper of another module;
* (issue 25) a module imports only from its own chapter or earlier ones, in the order of the table of
  contents (the import graph reads like the book); no library code calls a private function of another
  package. An import for annotations only (under ``if TYPE_CHECKING:``, never run) may also name a module
  of a later page that extends the importing module, as chapter 8's cache methods of chapter 3's
  ``MultiHeadAttention`` name ``transformer_lib.cache.AttentionCache``. A call-time import (inside a
  function) of a later page's module is allowed only where :data:`FORWARD_AT_CALL` names it, with why;
* (issue 37) a module of more than 350 lines draws a warning (in pytest's summary), one of more than 450
  fails: the split is due then, and a measured speed-up is never dropped to stay under a number.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
import warnings
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
def test_no_figure_caption_holds_a_tag(path: Path):
    """A caption is read as Markdown, where ``<bos>`` is an HTML tag: the page shows nothing in its place
    (chapter 4's shifted-target caption lost its start token so). Alt text is an attribute, escaped."""
    tagged = [(cell.get("id"), caption) for cell in _cells(path)
              if re.search(r"<[A-Za-z/]", caption := cell.get("metadata", {}).get("mystnb", {})
                           .get("figure", {}).get("caption", ""))]
    assert not tagged, f"{path.name}: captions with a tag the page would swallow (write the word): {tagged}"


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


WARN_MODULE_LINES = 350   # a module near the size where it holds two jobs: a warning
MAX_MODULE_LINES = 450    # past this it is split: a failure
# Private functions of other packages that the library calls on purpose, with the reason. torch has no public
# device-side assertion: checks.check_token_ids queues one on a GPU instead of reading the ids back. torch has
# no public way to keep a linear layer's weight in oneDNN's packed layout: packed.PackedLinear calls the two
# operators PyTorch's own compiler uses for frozen CPU models, after packed.onednn_linear has probed them once
# against F.linear, and falls back to F.linear where they are missing, raise or disagree (tests/test_packed.py
# and tests/test_cli_packed.py cover each case).
ALLOWED_PRIVATE_CALLS = {"torch._assert_async", "torch.ops.mkldnn._reorder_linear_weight",
                         "torch.ops.mkldnn._linear_pointwise"}


def _library() -> list[Path]:
    return sorted((REPO / "transformer_lib").rglob("*.py"))


def test_every_module_is_short():
    sizes = {p.relative_to(REPO).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
             for p in _library()}
    near = {name: n for name, n in sizes.items() if WARN_MODULE_LINES < n <= MAX_MODULE_LINES}
    if near:
        warnings.warn(f"modules over {WARN_MODULE_LINES} lines (split past {MAX_MODULE_LINES}): {near}",
                      UserWarning, stacklevel=1)
    long = {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}
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


def _page_ranks() -> dict[str, list[int]]:
    """{module: the positions in the book of the chapters that write it, the one that makes it first}."""
    chapter = _chapter_rank()
    ranks: dict[str, list[int]] = {}
    for path in export.book_order(REPO):
        for module in export.read_chapter(path):
            ranks.setdefault(module, []).append(chapter.get(path.name, len(chapter)))
    return ranks


#: (importing module, imported module) pairs allowed to reach forward in the book, inside a function only, and why
FORWARD_AT_CALL = {
    ("translation.translate", "packed"): "issue 38: translate_lines (chapter 12) decodes on the serving appendix's "
                                         "packed weights by default, on the CPU; the chapter says so",
}


def _imports(tree: ast.Module) -> list[tuple[str, bool, bool]]:
    """(module, for annotations only, inside a function) of each import in ``tree``; ``if TYPE_CHECKING:`` marks
    the second."""
    guarded = {id(n) for top in tree.body if isinstance(top, ast.If) and ast.unparse(top.test) in
               ("TYPE_CHECKING", "typing.TYPE_CHECKING") for n in ast.walk(top)}
    in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for n in ast.walk(f)}
    found = []
    for node in ast.walk(tree):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
            [a.name for a in node.names] if isinstance(node, ast.Import) else []
        found += [(name, id(node) in guarded, id(node) in in_function) for name in names]
    return found


def test_a_module_imports_only_its_own_chapter_or_earlier_ones():
    ranks = _page_ranks()
    rank = {module: r[0] for module, r in ranks.items()}
    later = []
    for module, position in rank.items():
        path = REPO / "transformer_lib" / (module.replace(".", "/") + ".py")
        for name, typing_only, at_call in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if name.startswith("transformer_lib."):
                target = name[len("transformer_lib."):]
                allowed = max(ranks[module]) if typing_only else position
                if target in rank and rank[target] > allowed and not (
                        at_call and (module, target) in FORWARD_AT_CALL):
                    later.append(f"{module} imports {target}, a later chapter's module")
    assert not later, later
    stale = [pair for pair in FORWARD_AT_CALL if pair[0] not in rank or pair[1] not in rank]
    assert not stale, f"FORWARD_AT_CALL names modules that are gone: {stale}"


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
