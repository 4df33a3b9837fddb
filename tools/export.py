#!/usr/bin/env python
"""Export the chapters' marked cells into the package ``transformer_lib``.

The book is the source of the library (literate programming, nbdev's directive spelling):

* the first code cell of a chapter holds ``#| default_exp NAME``: the chapter exports to
  ``transformer_lib/NAME.py``;
* a code cell whose first line is ``#| export`` is copied, without that line, into the module;
  ``#| export OTHER`` (nbdev's form) sends the cell to ``transformer_lib/OTHER.py`` instead, for a
  chapter that builds several modules. A dotted name, ``#| export training.checkpoint``, is a module of
  a subpackage (``transformer_lib/training/checkpoint.py``); the subpackage's ``__init__.py`` is generated
  and re-exports its modules' public names;
* ``#| exporti`` (and ``#| exporti OTHER``) exports the cell as ``#| export`` does, but its names stay out
  of the module's ``__all__``: a helper other modules import, not a name for the library's users;
* a class may grow across cells, next to the prose that explains each method: an exported cell that
  holds only ``class Name(Name):`` (the notebook's way of adding methods to the ``Name`` defined in an
  earlier cell) is folded into the body of that earlier class in the generated module. A method the class
  already has is replaced where it stands (a later chapter extending an earlier chapter's class, as d2l's
  ``add_to_class`` does); other members are appended. Such a cell may not call ``super()``: in the
  notebook it would reach the earlier ``Name``. It calls the base's method by name instead
  (``nn.Module.__init__(self)`` in a new ``__init__``), which the module spells ``super().__init__()``
  (for a class of one base, in a method of the same name; a comment after the call, which explains the
  notebook's spelling, is dropped). A dataclass is reopened with its own decorator (``@dataclass class
  Name(Name):``, spelled as the original is), which the notebook needs for the fields the cell adds
  (with defaults, after the old ones) and the module drops: the folded class has one decorator and
  every field, the new ones after the old ones and before the methods;
* a later page of the book (in the order of ``_toc.yml``) may add to a module of an earlier one, as an
  appendix adds to its chapter's modules: its cells are appended after the earlier page's, and a
  ``class Name(Name):`` cell may reopen a class of the earlier page. The module's header names the page
  that made it and those that extend it;
* the imports of every cell that goes to a module are gathered at its top, where its first cell's stand:
  that cell's as it writes them, each other one once, in its group (``__future__``, the standard library,
  other packages, ``transformer_lib``) in isort's order, or joined to a ``from`` import of the same module
  where the line allows; an ``if TYPE_CHECKING:`` block of imports (names for annotations only) follows
  them. A cell of imports only leaves nothing else in the module;
* a module exported by a chapter that builds several modules imports the others' names with a
  directive line, ``#| from transformer_lib.checks import check_token_ids``: a comment in the notebook
  (whose kernel already holds the chapter's own definition), a real import in the generated module.

Each generated module starts with a header that names its chapter and a digest of the body, and ends
with an ``__all__`` of its public names (top-level functions, classes and constants that do not start
with an underscore, from cells that are not internal). Each exported cell's code is preceded by a provenance
comment, ``# [book/03_attention.ipynb, cell 3a742c30]``, that names the cell by its stable id (inserting a
cell does not rewrite unrelated modules), so that a traceback leads to the cell to edit.

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
import textwrap
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
HAND_WRITTEN = {"__init__.py", "__main__.py"}
DEFAULT_EXP = re.compile(r"^\s*#\|\s*default_exp\s+([A-Za-z_][A-Za-z0-9_.]*)\s*$")
MODULE_IMPORT = re.compile(r"^(\s*)#\|\s*((?:from|import)\s+transformer_lib\b.*)$")
EXPORT = re.compile(r"^\s*#\|\s*export(i?)(?:\s+([A-Za-z_][A-Za-z0-9_.]*))?\s*$")
DIGEST = re.compile(r"^# digest: ([0-9a-f]{16})$", re.M)


class ExportError(Exception):
    """A chapter that cannot be exported (a directive in the wrong place, a clash of modules)."""


class Cell(NamedTuple):
    """One exported cell: its index among all the notebook's cells, its stable id, the module it goes to,
    its body without the directive, and whether it is internal (``#| exporti``: in the module, not in its
    ``__all__``)."""

    index: int
    cell_id: str
    module: str
    body: str
    internal: bool = False


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def exported_cells(path: Path) -> list[Cell]:
    """The exported cells of one notebook, in order.

    Raises ExportError for a misplaced ``#| default_exp``, an export with no module to go to, or an
    exported cell without an id (nbformat 4.5 gives every cell one).
    """
    nb = json.loads(path.read_text(encoding="utf-8"))
    module = None
    first_code = True
    cells: list[tuple[int, str, str | None, str, bool]] = []
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
            if not cell.get("id"):
                raise ExportError(f"{path}, cell {index + 1}: an exported cell needs an id (nbformat >= 4.5)")
            body = "\n".join(_module_only(line) for line in lines[1:]).strip("\n")
            cells.append((index, cell["id"], m.group(2), body, m.group(1) == "i"))
    out = []
    for index, cell_id, target, body, internal in cells:
        target = target or module
        if target is None:
            raise ExportError(f"{path}: has '#| export' cells but no '#| default_exp' in its first code cell")
        out.append(Cell(index, cell_id, target, body, internal))
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


def read_chapter(path: Path) -> dict[str, list[Cell]]:
    """{module: [its cells, in order]} of one notebook."""
    bodies: dict[str, list[Cell]] = {}
    for cell in exported_cells(path):
        bodies.setdefault(cell.module, []).append(cell)
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


def provenance(notebook_rel: str, cell_id: str) -> str:
    """The comment that names the cell a piece of a module came from, by the cell's stable id (inserting a
    cell elsewhere in the notebook does not change it)."""
    return f"# [{notebook_rel}, cell {cell_id}]"


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


def _member_span(node: ast.stmt) -> tuple[int, int]:
    """First and last line (1-based) of a class member, its decorators included."""
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return first, node.end_lineno or node.lineno


def _fold(chunk: list[str], notebook_rel: str, cell: Cell, node: ast.ClassDef) -> list[str]:
    """``chunk`` (a module piece whose top level defines class ``node.name``) with a reopening cell folded
    in: a method the class already has is replaced where it stands, the fields a reopened dataclass gains
    follow its last field, the other members are appended to the class's body; each piece goes behind the
    reopening cell's provenance. A call of the base's method by name (``nn.Module.__init__(self)``, the
    notebook's way past the earlier class) is spelled ``super().__init__()`` in the module."""
    where = f"{notebook_rel}, cell {cell.cell_id}"
    target = [n for n in ast.parse("\n".join(chunk)).body if isinstance(n, ast.ClassDef) and n.name == node.name][-1]
    _check_decorators(where, node, target)
    if node.body[0].lineno <= node.lineno:
        raise ExportError(f"{where}: a cell that reopens class {node.name} must "
                          f"start with a `class {node.name}({node.name}):` line of its own")
    if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "super"
           for n in ast.walk(node)):
        raise ExportError(f"{where}: a cell that reopens class {node.name} "
                          "cannot call super() (in the notebook it would reach the earlier "
                          f"{node.name}); call the base's method by name, as "
                          "`nn.Module.__init__(self)`: the module spells it super()")
    lines = _spell_super(cell.body.splitlines(), node, target)
    existing = {m.name: m for m in target.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
    comment = "    " + provenance(notebook_rel, cell.cell_id)
    edits: list[tuple[int, int, list[str]]] = []  # (first, last) lines in chunk (last < first: insert), new
    taken: set[int] = set()  # lines of the cell placed elsewhere than at the end of the class
    for member in node.body:
        if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) and member.name in existing:
            a, b = _member_span(member)
            taken.update(range(a, b + 1))
            edits.append((*_member_span(existing[member.name]), [comment, *lines[a - 1:b]]))
    if _dataclass_decorator(target) is not None:
        fields: list[str] = []
        for member in node.body:
            if isinstance(member, ast.AnnAssign):
                a, b = _with_comments_above(lines, *_member_span(member))
                taken.update(range(a, b + 1))
                fields += lines[a - 1:b]
        if fields:
            after = _fields_end(target)
            edits.append((after + 1, after, ["", comment, *fields]))
    header_end = node.body[0].lineno - 1
    while header_end > node.lineno and not lines[header_end - 1].rstrip().endswith(":"):
        header_end -= 1
    rest = [line for i, line in enumerate(lines, 1) if i > header_end and i not in taken]
    while rest and not rest[0].strip():
        rest.pop(0)
    while rest and not rest[-1].strip():
        rest.pop()
    out = list(chunk)
    end = target.end_lineno or target.lineno
    if rest:
        edits.append((end + 1, end, ["", comment, *rest]))
    for a, b, new in sorted(edits, key=lambda e: e[0], reverse=True):
        if b < a:  # an insertion after line b
            out[a - 1:a - 1] = new
            continue
        prev = a - 2  # the line above the old definition: the provenance of the cell that wrote it
        if prev >= 0 and out[prev].strip().startswith("# ["):
            if not _alone_after(out, b):  # that cell wrote more: its comment moves down to the rest
                after = next(i for i in range(b, len(out)) if out[i].strip())
                out.insert(after, out[prev])
            a -= 1
        out[a - 1:b] = new
    return out


def _with_comments_above(lines: list[str], first: int, last: int) -> tuple[int, int]:
    """(first, last) widened to the comment lines right above line ``first`` (1-based)."""
    while first > 1 and lines[first - 2].strip().startswith("#"):
        first -= 1
    return first, last


def _fields_end(target: ast.ClassDef) -> int:
    """The line after which a dataclass's new fields go: its last field's, else its docstring's, else the
    line above its first member."""
    fields = [m for m in target.body if isinstance(m, ast.AnnAssign)]
    if fields:
        return fields[-1].end_lineno or fields[-1].lineno
    first = target.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.end_lineno or first.lineno
    return _member_span(first)[0] - 1


def _spell_super(lines: list[str], node: ast.ClassDef, target: ast.ClassDef) -> list[str]:
    """``lines`` (a reopening cell) with each call of the base's own method by name inside a method of that
    name, ``Base.name(self, ...)``, respelled ``super().name(...)``, as a module that defines the class once
    writes it (the notebook cannot: its ``super()`` is the earlier class). A comment after such a call,
    which explains the notebook's spelling, is dropped. Only for a class with one base, the one named."""
    if len(target.bases) > 1 or target.keywords:
        return lines
    base = ast.unparse(target.bases[0]) if target.bases else "object"
    out = list(lines)
    for method in node.body:
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) or not method.args.args:
            continue
        me = method.args.args[0].arg
        statements = {id(s.value) for s in ast.walk(method) if isinstance(s, ast.Expr)}
        for call in ast.walk(method):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and call.func.attr == method.name and ast.unparse(call.func.value) == base
                    and call.args and isinstance(call.args[0], ast.Name) and call.args[0].id == me
                    and call.func.lineno == call.args[0].end_lineno):
                continue
            row = call.func.lineno - 1
            text = out[row].encode("utf-8")  # ast's columns count bytes
            one_line = call.end_lineno == call.lineno
            head = text[:call.func.col_offset]
            mid = text[call.args[0].end_col_offset or 0:call.end_col_offset if one_line else None].lstrip()
            after = text[call.end_col_offset or 0:] if one_line else b""
            if mid.startswith(b","):  # the arguments after self
                mid = mid[1:].lstrip()
            if one_line and id(call) in statements and after.strip().startswith(b"#"):
                after = b""
            out[row] = (head + f"super().{method.name}(".encode() + mid + after).decode("utf-8").rstrip()
    return out


def _dataclass_decorator(node: ast.ClassDef) -> str | None:
    """The text of ``node``'s ``@dataclass`` decorator (``dataclass``, ``dataclasses.dataclass``, either
    called with arguments or not), or None."""
    for dec in node.decorator_list:
        func = dec.func if isinstance(dec, ast.Call) else dec
        if ast.unparse(func) in ("dataclass", "dataclasses.dataclass"):
            return ast.unparse(dec)
    return None


def _check_decorators(where: str, node: ast.ClassDef, target: ast.ClassDef) -> None:
    """A reopening cell may carry one decorator: the ``@dataclass`` of the dataclass it reopens, spelled as
    the original spells it (so that the notebook's subclass has the same fields and methods as the folded
    class); it is dropped on folding. Only such a cell may add fields (annotated names)."""
    original = _dataclass_decorator(target)
    decorators = [ast.unparse(d) for d in node.decorator_list]
    if decorators and (original is None or decorators != [original]):
        allowed = f" or `@{original}`" if original else ""
        raise ExportError(f"{where}: a cell that reopens class {node.name} must start with a plain "
                          f"`class {node.name}({node.name}):` line{allowed}, got "
                          + ", ".join(f"@{d}" for d in decorators))
    fields = [m for m in node.body if isinstance(m, ast.AnnAssign)]
    if original is not None and fields and not decorators:
        raise ExportError(f"{where}: a cell that adds fields to the dataclass {node.name} must be "
                          f"decorated `@{original}` as the class is, or the notebook's class has no "
                          "such fields")
    if decorators and any(m.value is None for m in fields):
        raise ExportError(f"{where}: the fields a cell adds to the dataclass {node.name} need defaults "
                          "(they follow fields with defaults)")


def _alone_after(lines: list[str], last: int) -> bool:
    """Whether nothing but blank lines separates line ``last`` (1-based) from the next provenance comment or
    the end of the class (a line indented less than a member)."""
    for line in lines[last:]:
        if not line.strip():
            continue
        return line.strip().startswith("# [") or not line.startswith("    ")
    return True


class _Import(NamedTuple):
    """One import statement of a cell: its group (0 ``__future__``, 1 the standard library, 2 other
    packages, 3 ``transformer_lib``), its module for ``from M import ...`` (None for ``import M``), the
    names it binds, and its text as the cell spells it (comments included)."""

    group: int
    module: str | None
    names: tuple[tuple[str, str | None], ...]
    text: str

    @property
    def key(self) -> tuple[bool, str]:
        """The order within a group (as isort's): ``import M`` first, then by module."""
        return self.module is not None, (self.module or self.names[0][0]).lower()


IMPORTS_HERE = "#| imports |#"  # where the first cell's imports stood, until the module's imports replace it


def _import_of(node: ast.Import | ast.ImportFrom, text: str) -> _Import:
    names = tuple((a.name, a.asname) for a in node.names)
    if isinstance(node, ast.ImportFrom):
        module = "." * node.level + (node.module or "")
        top = "" if node.level else module.split(".")[0]
    else:
        module, top = None, names[0][0].split(".")[0]
    group = (0 if top == "__future__" else 3 if top in ("", "transformer_lib")
             else 1 if top in sys.stdlib_module_names else 2)
    return _Import(group, module, names, text)


def _type_checking(node: ast.stmt) -> bool:
    """Whether ``node`` is an ``if TYPE_CHECKING:`` block of imports only (names for annotations)."""
    return (isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
            and not node.orelse and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in node.body))


def _take_imports(body: str) -> tuple[list[str], list[_Import], list[tuple[str, list[_Import]]], int | None]:
    """(the lines of ``body`` without its top-level imports, those imports, its ``if TYPE_CHECKING:``
    blocks as (their ``if`` line, their imports), the index of the line where the first one stood or None).
    A comment right above an import moves with it; blank lines left between moved lines go too."""
    lines = body.splitlines()
    try:
        tree = ast.parse(body)
    except SyntaxError:
        return lines, [], [], None
    imports: list[_Import] = []
    guarded: list[tuple[str, list[_Import]]] = []
    moved: set[int] = set()  # 0-based
    for node in tree.body:
        if not isinstance(node, (ast.Import, ast.ImportFrom)) and not _type_checking(node):
            continue
        first, last = _with_comments_above(lines, node.lineno, node.end_lineno or node.lineno)
        moved.update(range(first - 1, last))
        if isinstance(node, ast.If):
            inner = [_import_of(n, textwrap.dedent("\n".join(
                lines[_with_comments_above(lines, n.lineno, 0)[0] - 1:n.end_lineno]))) for n in node.body]
            guarded.append((lines[node.lineno - 1].strip(), inner))
        else:
            imports.append(_import_of(node, "\n".join(lines[first - 1:last])))
    if not moved:
        return lines, [], [], None
    for i, line in enumerate(lines):  # a blank line between two moved lines (or the cell's start) goes
        if not line.strip():
            above = next((j for j in range(i - 1, -1, -1) if lines[j].strip()), None)
            below = next((j for j in range(i + 1, len(lines)) if lines[j].strip()), None)
            if (above is None or above in moved) and (below is None or below in moved):
                moved.add(i)
    at = min(moved)
    return [line for i, line in enumerate(lines) if i not in moved], imports, guarded, at


def _merged(have: _Import, new: list[tuple[str, str | None]]) -> _Import | None:
    """``from M import a`` and the names ``new`` of M as one statement, when both fit on one line."""
    if "\n" in have.text or "#" in have.text:
        return None
    names = sorted(have.names + tuple(new), key=_name_order)
    text = f"from {have.module} import " + ", ".join(n if a is None else f"{n} as {a}" for n, a in names)
    return have._replace(names=tuple(names), text=text) if len(text) <= 88 else None


def _name_order(name: tuple[str, str | None]) -> tuple[int, str]:
    """isort's order of the names of one ``from`` import: constants, classes, the rest."""
    n = name[0]
    return (0 if n.isupper() and len(n) > 1 else 1 if n[:1].isupper() else 2), n


def _import_block(own: list[_Import], added: list[_Import],
                  guarded: list[tuple[str, list[_Import]]]) -> list[str]:
    """The module's imports: those of its first cell as it writes them (``own``), then each later one
    (``added``) unless the module has it already, joined to a ``from`` import of the same module when the
    line allows, else put in its group in isort's order. Groups are parted by a blank line, ``__future__``
    first; the names imported for annotations only follow, in one ``if TYPE_CHECKING:`` block."""
    block: list[_Import] = []
    for number, imp in enumerate(own + added):
        if any(b.module == imp.module and b.names == imp.names for b in block):
            continue
        if imp.module is not None:
            same = [i for i, b in enumerate(block) if b.module == imp.module]
            new = [n for n in imp.names if all(n not in block[i].names for i in same)]
            if not new:
                continue
            if same and number >= len(own):
                joined = _merged(block[same[0]], new)
                if joined is not None:
                    block[same[0]] = joined
                    continue
                if len(new) < len(imp.names):
                    imp = imp._replace(names=tuple(new), text=f"from {imp.module} import "
                                       + ", ".join(n if a is None else f"{n} as {a}" for n, a in new))
                block.insert(same[-1] + 1, imp)
                continue
        if number < len(own):
            block.append(imp)
            continue
        peers = [i for i, b in enumerate(block) if b.group == imp.group]
        later = [i for i in peers if block[i].key > imp.key]
        at = (later[0] if later else peers[-1] + 1 if peers
              else next((i for i, b in enumerate(block) if b.group > imp.group), len(block)))
        block.insert(at, imp)
    out: list[str] = []
    for i, imp in enumerate(block):
        if i and imp.group != block[i - 1].group:
            out.append("")
        out.append(imp.text)
    if guarded:
        inner: list[str] = []
        for _, imps in guarded:
            inner += [imp.text for imp in imps if imp.text not in inner]
        body = ["    " + line for text in inner for line in text.splitlines()]
        out += ["", guarded[0][0], *body]
    return out


def render_module(cells: list[tuple[str, Cell]]) -> str:
    """The full text of a generated module from its cells, (notebook, cell) in book order: each cell behind
    its provenance comment, reopened classes folded, the imports of every cell gathered at the top (where
    the first cell's stood); ``__all__`` lists the public names of the cells that are not internal."""
    chunks: list[list[str]] = []
    owner: dict[str, int] = {}  # class name -> the chunk that defines it
    first = cells[0][0]
    pages = list(dict.fromkeys(rel for rel, _ in cells))
    names: list[str] = []
    own: list[_Import] = []       # the first chunk's imports, as it writes them
    added: list[_Import] = []     # the other cells'
    guarded: list[tuple[str, list[_Import]]] = []
    home: str | None = None       # the provenance of the first cell with imports, when it is not the first
    for notebook_rel, cell in cells:
        node = _reopened_class(cell.body, set(owner))
        if node is not None:
            chunks[owner[node.name]] = _fold(chunks[owner[node.name]], notebook_rel, cell, node)
            continue
        lines, imports, checking, at = _take_imports(cell.body)
        guarded += checking
        if at is not None and not chunks:
            own = imports
            lines.insert(at, IMPORTS_HERE)
        else:
            added += imports
            if at is not None and home is None:
                home = provenance(notebook_rel, cell.cell_id)
        while lines and not lines[-1].strip():
            lines.pop()
        while lines and not lines[0].strip():
            lines.pop(0)
        if not lines:  # a cell of imports only
            continue
        try:
            tree = ast.parse(cell.body)
        except SyntaxError:
            tree = None
        for top in tree.body if tree else []:
            if isinstance(top, ast.ClassDef):
                owner[top.name] = len(chunks)
        chunks.append([provenance(notebook_rel, cell.cell_id), *lines])
        if not cell.internal and tree is not None:
            names += [n for n in public_names(cell.body) if n not in names]
    block = _import_block(own, added, guarded)
    if chunks and IMPORTS_HERE in chunks[0]:
        at = chunks[0].index(IMPORTS_HERE)
        chunks[0][at:at + 1] = block
    elif block:
        chunks.insert(0, [home or "", *block] if home else block)
    body = "\n\n\n".join("\n".join(lines) for lines in chunks) + "\n"
    content = body + "\n\n" + _all_line(names)
    extended = "".join(f"Extended by {rel}.\n" for rel in pages[1:])
    header = (
        f'"""Generated from {first}: edit the notebook, not this file.\n{extended}\n'
        f'Regenerate with ``python tools/export.py``."""\n'
        f"# digest: {digest(content)}\n"
        "# fmt: off\n\n"
    )
    return header + content


def _all_line(names: list[str]) -> str:
    """``__all__`` on one line, or wrapped within the book's 88 columns (several names a line)."""
    line = "__all__ = [" + ", ".join(repr(n) for n in names) + "]\n"
    if len(line) <= 89:
        return line
    rows: list[str] = []
    for name in (f"{n!r}," for n in names):
        if rows and len(rows[-1]) + 1 + len(name) <= 88:
            rows[-1] += " " + name
        else:
            rows.append("    " + name)
    return "__all__ = [\n" + "\n".join(rows) + "\n]\n"


def render_package(package: str, modules: list[tuple[str, list[str], list[str]]]) -> str:
    """The ``__init__.py`` of a subpackage: it re-exports the public names of its modules, given as
    (dotted module, its public names, the pages it comes from) in book order. The names are listed once,
    in the modules' own ``__all__``: the package imports each module and joins their lists."""
    pages = list(dict.fromkeys(rel for _, _, rels in modules for rel in rels))
    shown = [m for m, public, _ in modules if public]
    short = [m.rsplit(".", 1)[1] for m in shown]
    lines = [f"from transformer_lib.{package} import {s} as _{s}" for s in short]
    lines += [f"from transformer_lib.{m} import *  # noqa: F403" for m in shown]
    body = "\n".join(lines) + "\n"
    content = body + "\n__all__ = [\n" + "".join(f"    *_{s}.__all__,\n" for s in short) + "]\n"
    made = "".join(f"Generated from {rel}.\n" for rel in pages)
    header = (
        f'"""The package ``transformer_lib.{package}``: it re-exports its modules\' public names.\n\n'
        f'{made}Edit the notebooks, not this file; regenerate with ``python tools/export.py``."""\n'
        f"# digest: {digest(content)}\n"
        "# fmt: off\n\n"
    )
    return header + content


def export_all(root: Path = ROOT, only: list[str] | None = None) -> dict[Path, str]:
    """Map each module path to its expected text, from every chapter under ``root/book`` (or the modules
    that the chapters named in ``only``, by file name or path, write to). A dotted module
    (``training.loop``) lives in a subpackage, whose generated ``__init__.py`` re-exports its modules'
    public names."""
    out: dict[Path, str] = {}
    parts: dict[str, list[tuple[str, Cell]]] = {}  # module -> its cells, in book order
    for nb_path in book_order(root):
        rel = nb_path.relative_to(root).as_posix()
        for module, cells in read_chapter(nb_path).items():
            parts.setdefault(module, []).extend((rel, cell) for cell in cells)
    packages: dict[str, list[tuple[str, list[str], list[str]]]] = {}
    for module, cells in parts.items():
        target = root / "transformer_lib" / (module.replace(".", "/") + ".py")
        try:
            text = render_module(cells)
            compile(text, target.relative_to(root).as_posix(), "exec", dont_inherit=True)
        except SyntaxError as exc:  # name the chapter, not just a line of the generated text
            rels = " and ".join(dict.fromkeys(rel for rel, _ in cells))
            raise ExportError(f"{rels}: the cells they export to '{module}' are not valid Python: "
                              f"{exc.msg} (line {exc.lineno} of the generated module)") from exc
        pages = list(dict.fromkeys(rel for rel, _ in cells))
        if "." in module:
            public = ast.literal_eval(text.rsplit("__all__ = ", 1)[1])
            packages.setdefault(module.rsplit(".", 1)[0], []).append((module, public, pages))
        if only and not {Path(p).name for p in pages} & {Path(o).name for o in only}:
            continue
        out[target] = text
    for package, modules in packages.items():
        pages = {Path(p).name for _, _, rels in modules for p in rels}
        if only and not pages & {Path(o).name for o in only}:
            continue
        if package in parts:
            raise ExportError(f"'{package}' is both a module and a package of modules")
        out[root / "transformer_lib" / package.replace(".", "/") / "__init__.py"] = render_package(package, modules)
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
