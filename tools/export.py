#!/usr/bin/env python
"""Export the chapters' marked cells into the package ``transformer_lib``.

The book is the source of the library (literate programming, nbdev's directive spelling):

* the first code cell of a chapter holds ``#| default_exp NAME``: the chapter exports to
  ``transformer_lib/NAME.py``;
* a code cell whose first line is ``#| export`` is copied, without that line, into the module;
  ``#| export OTHER`` (nbdev's form) sends the cell to ``transformer_lib/OTHER.py`` instead, for a
  chapter that builds several modules;
* a class may grow across cells, next to the prose that explains each method: an exported cell that
  holds only ``class Name(Name):`` (the notebook's way of adding methods to the ``Name`` defined in an
  earlier cell) is folded into the body of that earlier class in the generated module. Such a cell may
  not call ``super()``: in the notebook it would reach the earlier ``Name``, in the module the real base;
* a later page of the book (in the order of ``_toc.yml``) may add to a module of an earlier one, as an
  appendix adds to its chapter's modules: its cells are appended after the earlier page's, a cell that
  holds only imports joins the module's imports at the top, and a ``class Name(Name):`` cell may reopen
  a class of the earlier page. The module's header names the page that made it and those that extend it;
* a module exported by a chapter that builds several modules imports the others' names with a
  directive line, ``#| from transformer_lib.checks import check_token_ids``: a comment in the notebook
  (whose kernel already holds the chapter's own definition), a real import in the generated module.

Each generated module starts with a header that names its chapter and a digest of the body, and ends
with an ``__all__`` of its public names (top-level functions, classes and constants that do not start
with an underscore). Each exported cell is preceded by a provenance comment,
``# [book/03_attention.ipynb, cell 12]`` (cells counted from 1, markdown included, as Jupyter shows
them), so that a traceback leads to the cell to edit.

Usage::

    python tools/export.py            # write the modules
    python tools/export.py book/10_training.ipynb    # write only the modules of one chapter
    python tools/export.py --check    # exit 1, naming the module, when anything differs

``--check`` fails when a module differs from what its chapter exports, when a module was edited by
hand (its digest no longer matches its body), or when a module of ``transformer_lib/`` has no chapter.
Hand-written files are listed in ``HAND_WRITTEN`` and left alone.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HAND_WRITTEN = {"__init__.py", "__main__.py"}
DEFAULT_EXP = re.compile(r"^\s*#\|\s*default_exp\s+([A-Za-z_][A-Za-z0-9_.]*)\s*$")
MODULE_IMPORT = re.compile(r"^(\s*)#\|\s*((?:from|import)\s+transformer_lib\b.*)$")
EXPORT = re.compile(r"^\s*#\|\s*export(?:\s+([A-Za-z_][A-Za-z0-9_.]*))?\s*$")
DIGEST = re.compile(r"^# digest: ([0-9a-f]{16})$", re.M)


class ExportError(Exception):
    """A chapter that cannot be exported (a directive in the wrong place, a clash of modules)."""


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def exported_cells(path: Path) -> list[tuple[int, str, str]]:
    """The exported cells of one notebook: (index among all its cells, module, body without the directive).

    Raises ExportError for a misplaced ``#| default_exp`` or an export with no module to go to.
    """
    nb = json.loads(path.read_text(encoding="utf-8"))
    module = None
    first_code = True
    cells: list[tuple[int, str | None, str]] = []
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        lines = _source(cell).splitlines()
        for line in lines:
            m = DEFAULT_EXP.match(line)
            if m:
                if not first_code:
                    raise ExportError(f"{path}: '#| default_exp' must be in the first code cell")
                module = m.group(1)
        first_code = False
        m = EXPORT.match(lines[0]) if lines else None
        if m:
            body = "\n".join(_module_only(line) for line in lines[1:]).strip("\n")
            cells.append((index, m.group(1), body))
    out = []
    for index, target, body in cells:
        target = target or module
        if target is None:
            raise ExportError(f"{path}: has '#| export' cells but no '#| default_exp' in its first code cell")
        out.append((index, target, body))
    return out


def _module_only(line: str) -> str:
    """``#| from transformer_lib.X import Y`` becomes a real import in the module; any other line is kept."""
    m = MODULE_IMPORT.match(line)
    return m.group(1) + m.group(2) if m else line


def book_order(root: Path) -> list[Path]:
    """The notebooks under ``root/book`` in the order of ``_toc.yml`` (those it does not list follow, by
    name), the order in which a later page may extend an earlier page's module."""
    toc = root / "_toc.yml"
    listed = re.findall(r"^\s*-?\s*file:\s*(\S+)\s*$", toc.read_text(encoding="utf-8"), re.M) if toc.exists() else []
    rank = {name: i for i, name in enumerate(listed)}
    notebooks = sorted((root / "book").glob("*.ipynb"))
    return sorted(notebooks, key=lambda p: (rank.get(p.relative_to(root).with_suffix("").as_posix(), len(rank)),
                                             p.name))


def read_chapter(path: Path) -> dict[str, list[tuple[int, str]]]:
    """{module: [(cell index, exported body), ...] in order} of one notebook."""
    bodies: dict[str, list[tuple[int, str]]] = {}
    for index, module, body in exported_cells(path):
        bodies.setdefault(module, []).append((index, body))
    return bodies


def public_names(body: str) -> list[str]:
    """Top-level public names defined in ``body``, in order of definition."""
    names: list[str] = []
    for node in ast.parse(body).body:
        targets: list[str] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            targets = [node.name]
        elif isinstance(node, ast.Assign):
            for t in node.targets:  # `A = ...` and `A, B = ...`
                elts = t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]
                targets += [e.id for e in elts if isinstance(e, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        for name in targets:
            if not name.startswith("_") and name not in names:
                names.append(name)
    return names


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def provenance(notebook_rel: str, index: int) -> str:
    """The comment that names the cell a piece of a module came from (cells counted from 1)."""
    return f"# [{notebook_rel}, cell {index + 1}]"


def _reopened_class(body: str, defined: set[str]) -> ast.ClassDef | None:
    """The class a cell reopens (``class Name(Name):`` with ``Name`` defined by an earlier cell), or None."""
    try:
        tree = ast.parse(body)
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.ClassDef):
        return None
    node = tree.body[0]
    bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
    if bases != [node.name] or len(node.bases) != 1 or node.keywords or node.name not in defined:
        return None
    return node


def _fold(notebook_rel: str, index: int, node: ast.ClassDef, body: str) -> list[str]:
    """The lines of a reopened class's body, to append to the earlier class, with their provenance."""
    lines = body.splitlines()
    if node.decorator_list or node.body[0].lineno <= node.lineno:
        raise ExportError(f"{notebook_rel}, cell {index + 1}: a cell that reopens class {node.name} must "
                          f"start with a plain `class {node.name}({node.name}):` line")
    if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "super"
           for n in ast.walk(node)):
        raise ExportError(f"{notebook_rel}, cell {index + 1}: a cell that reopens class {node.name} "
                          "cannot call super() (in the module it would reach another class)")
    header_end = node.body[0].lineno - 1
    while header_end > node.lineno and not lines[header_end - 1].rstrip().endswith(":"):
        header_end -= 1
    rest = lines[header_end:]
    return ["", "    " + provenance(notebook_rel, index), *rest]


def _imports_only(body: str) -> bool:
    try:
        tree = ast.parse(body)
    except SyntaxError:
        return False
    return bool(tree.body) and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in tree.body)


def render_module(cells: list[tuple[str, int, str]]) -> str:
    """The full text of a generated module from its cells, (notebook, cell index, body) in book order: each
    cell behind its provenance comment, reopened classes folded, a later page's import cells moved up to
    the module's imports."""
    chunks: list[list[str]] = []
    class_end: dict[str, tuple[int, int]] = {}  # class name -> (chunk, line after its body)
    first = cells[0][0]
    pages = list(dict.fromkeys(rel for rel, _, _ in cells))
    n_imports = 0  # leading chunks that hold only imports
    for notebook_rel, index, cell_body in cells:
        node = _reopened_class(cell_body, set(class_end))
        if node is not None:
            chunk, end = class_end[node.name]
            extra = _fold(notebook_rel, index, node, cell_body)
            chunks[chunk][end:end] = extra
            for name, (c, e) in class_end.items():  # later classes of the same chunk move down
                if c == chunk and e > end:
                    class_end[name] = (c, e + len(extra))
            class_end[node.name] = (chunk, end + len(extra))
            continue
        lines = [provenance(notebook_rel, index), *cell_body.splitlines()]
        if notebook_rel != first and _imports_only(cell_body):  # a later page's imports join the top
            if n_imports == 0 and chunks and "from __future__" in "\n".join(chunks[0]):
                n_imports = 1                           # never above a __future__ import
            chunks.insert(n_imports, lines)
            class_end = {k: (c + (c >= n_imports), e) for k, (c, e) in class_end.items()}
            n_imports += 1
            continue
        try:
            tree = ast.parse(cell_body)
        except SyntaxError:
            tree = None
        for top in tree.body if tree else []:
            if isinstance(top, ast.ClassDef):
                class_end[top.name] = (len(chunks), (top.end_lineno or top.lineno) + 1)
        if n_imports == len(chunks) and _imports_only(cell_body):
            n_imports += 1
        chunks.append(lines)
    body = "\n\n\n".join("\n".join(lines) for lines in chunks) + "\n"
    names = public_names(body)
    all_line = "__all__ = [" + ", ".join(repr(n) for n in names) + "]\n"
    if len(all_line) > 89:  # one name a line, within the book's 88 columns
        all_line = "__all__ = [\n" + "".join(f"    {n!r},\n" for n in names) + "]\n"
    content = body + "\n\n" + all_line
    extended = "".join(f"Extended by {rel}.\n" for rel in pages[1:])
    header = (
        f'"""Generated from {first}: edit the notebook, not this file.\n{extended}\n'
        f'Regenerate with ``python tools/export.py``."""\n'
        f"# digest: {digest(content)}\n"
        "# fmt: off\n\n"
    )
    return header + content


def export_all(root: Path = ROOT, only: list[str] | None = None) -> dict[Path, str]:
    """Map each module path to its expected text, from every chapter under ``root/book`` (or the modules
    that the chapters named in ``only``, by file name or path, write to)."""
    out: dict[Path, str] = {}
    parts: dict[str, list[tuple[str, int, str]]] = {}  # module -> its cells, in book order
    for nb_path in book_order(root):
        rel = nb_path.relative_to(root).as_posix()
        for module, cells in read_chapter(nb_path).items():
            parts.setdefault(module, []).extend((rel, index, body) for index, body in cells)
    for module, cells in parts.items():
        pages = {Path(rel).name for rel, _, _ in cells}
        if only and not pages & {Path(o).name for o in only}:
            continue
        target = root / "transformer_lib" / (module.replace(".", "/") + ".py")
        try:
            text = render_module(cells)
            compile(text, target.relative_to(root).as_posix(), "exec", dont_inherit=True)
        except SyntaxError as exc:  # name the chapter, not just a line of the generated text
            rels = " and ".join(dict.fromkeys(rel for rel, _, _ in cells))
            raise ExportError(f"{rels}: the cells they export to '{module}' are not valid Python: "
                              f"{exc.msg} (line {exc.lineno} of the generated module)") from exc
        out[target] = text
    return out


def check(root: Path = ROOT) -> list[str]:
    """Problems found (empty when the package matches the chapters)."""
    problems: list[str] = []
    expected = export_all(root)
    for path, text in expected.items():
        name = path.relative_to(root).as_posix()
        if not path.exists():
            problems.append(f"{name}: missing; run `python tools/export.py`")
            continue
        actual = path.read_text(encoding="utf-8")
        if actual != text:
            m = DIGEST.search(actual)
            body = actual.split("# fmt: off\n\n", 1)[-1]
            if m and m.group(1) != digest(body):
                problems.append(f"{name}: edited by hand (its digest no longer matches); edit the notebook instead")
            else:
                problems.append(f"{name}: differs from what its chapter exports; run `python tools/export.py`")
    pkg = root / "transformer_lib"
    for path in sorted(pkg.rglob("*.py")) if pkg.exists() else []:
        if path.name in HAND_WRITTEN and path.parent == pkg:
            continue
        if path not in expected:
            problems.append(f"{path.relative_to(root).as_posix()}: no chapter exports this module")
    return problems


def write(root: Path = ROOT, only: list[str] | None = None) -> list[Path]:
    written = []
    for path, text in export_all(root, only).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail when the package differs from the chapters")
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this repository)")
    parser.add_argument("chapters", nargs="*", help="write only the modules of these notebooks (default: all)")
    args = parser.parse_args(argv)
    try:
        if args.check:
            problems = check(args.root)
            for p in problems:
                print(f"export check: {p}", file=sys.stderr)
            if not problems:
                print(f"export check: {len(export_all(args.root))} modules match their chapters")
            return 1 if problems else 0
        for path in write(args.root, args.chapters or None):
            print(f"wrote {path.relative_to(args.root)}")
        return 0
    except (ExportError, SyntaxError) as exc:
        print(f"export: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
