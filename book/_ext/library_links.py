"""Tie the chapters to the library they export, both ways, and tell the reader what a chapter costs to run.

* ``{transformer-lib-api}`` (used by ``book/api.md``) documents every generated module of
  ``transformer_lib`` with autodoc, in the order of the chapters. Each public name also answers to its
  short path (``transformer_lib.MultiHeadAttention`` as well as ``transformer_lib.attention.MultiHeadAttention``).
* Each documented object gets a line "Defined in: chapter, section" that links to the very code cell of the
  chapter that defines it (found from the ``#| export`` cells of the notebooks).
* Each chapter page gets an "In transformer_lib" box at its end, inside its section "What is now in
  transformer_lib" (the chapter opens with its story, not with a list of names): the module it writes, each
  of its public names linked to the API reference, how long the notebook took to execute when the book was
  built (myst-nb's record of the execution), and the notebook to download.

Nothing here changes a chapter: everything is read from the notebooks, the generated modules' headers
("Generated from book/NN_name.ipynb") and the build itself.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import posixpath
import re
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

logger = logging.getLogger(__name__)

PACKAGE = "transformer_lib"
HEADER = re.compile(r'^"""Generated from (book/[^:\s]+\.ipynb):', re.M)
HIDDEN_MODULES = {"__init__", "__main__"}
_UNDOCUMENTED_DATA: set[str] = set()  # constants autodoc would describe with their type's docstring


# ------------------------------------------------------------------------------------ reading the sources


def _exporter():
    """tools/export.py, the one reader of the chapters' export directives."""
    path = Path(__file__).resolve().parents[2] / "tools" / "export.py"
    spec = importlib.util.spec_from_file_location("_transformer_book_export", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_EXPORT = _exporter()


def read_library(srcdir: Path) -> dict:
    """What each chapter exports, from the notebooks and the generated modules.

    Returns ``{"modules": {module: notebook docname}, "defs": {full name: (docname, cell index)},
    "chapter_modules": {docname: [module, ...]}, "all": {module: [public names]}}``.
    """
    modules: dict[str, str] = {}
    public: dict[str, list[str]] = {}
    pkg = srcdir / PACKAGE
    for path in sorted(pkg.rglob("*.py")) if pkg.is_dir() else []:
        if path.stem in HIDDEN_MODULES:
            continue
        text = path.read_text(encoding="utf-8")
        m = HEADER.search(text)
        if m:  # a generated module (a subpackage's __init__ has another header)
            module = path.relative_to(pkg).with_suffix("").as_posix().replace("/", ".")
            modules[module] = m.group(1)[: -len(".ipynb")]
            public[module] = _module_all(text)
    defs: dict[str, tuple[str, int]] = {}
    chapter_modules: dict[str, list[str]] = {}
    for nb_path in _EXPORT.book_order(srcdir):  # a name belongs to the first page that defines it
        docname = nb_path.relative_to(srcdir).as_posix()[: -len(".ipynb")]
        try:
            cells = _EXPORT.exported_cells(nb_path)
        except (OSError, ValueError, _EXPORT.ExportError):
            continue  # the export check reports it
        for cell in cells:
            chapter_modules.setdefault(docname, [])
            if cell.module not in chapter_modules[docname]:
                chapter_modules[docname].append(cell.module)
            if cell.internal:  # #| exporti: in the module, not part of its public names
                continue
            try:
                names = _EXPORT.public_names(cell.body)
            except SyntaxError:
                continue
            for name in names:
                defs.setdefault(f"{PACKAGE}.{cell.module}.{name}", (docname, cell.index))
    return {"modules": modules, "defs": defs, "chapter_modules": chapter_modules, "all": public}


def _module_all(text: str) -> list[str]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            try:
                return [str(n) for n in ast.literal_eval(node.value)]
            except ValueError:
                return []
    return []


def _library(app) -> dict:
    if not hasattr(app, "_tl_library"):
        app._tl_library = read_library(Path(app.srcdir))
    return app._tl_library


def _undocumented_data(modname: str, names: list[str]) -> list[str]:
    """Public names of ``modname`` that are plain data with no ``#:`` doc comment."""
    import importlib
    import inspect

    from sphinx.pycode import ModuleAnalyzer, PycodeError

    try:
        mod = importlib.import_module(modname)
        attr_docs = ModuleAnalyzer.for_module(modname).find_attr_docs()
    except (ImportError, PycodeError):
        return []  # autodoc reports the import failure itself
    out = []
    for name in names:
        obj = getattr(mod, name, None)
        if inspect.isclass(obj) or inspect.isroutine(obj) or inspect.ismodule(obj):
            continue
        if ("", name) not in attr_docs:
            out.append(name)
    return out


def _chapter_order(docname: str) -> tuple:
    m = re.match(r"book/(\d+)_", docname)
    return (int(m.group(1)) if m else 1_000, docname)


# ------------------------------------------------------------------------------------------ API page


class TransformerLibAPI(SphinxDirective):
    """Document every generated module of transformer_lib (automodule), one section each, chapter order."""

    has_content = False

    def run(self):
        lib = _library(self.env.app)
        # The package itself first, so that {py:mod}`transformer_lib` resolves too.
        lines: list[str] = ["```{eval-rst}", f".. automodule:: {PACKAGE}", "```", ""]
        lines += _root_api_lines(lib)
        package = None
        for module in _modules_in_book_order(lib):
            # Markdown (this page is MyST): a heading per module (under its package's, for a chapter
            # that builds a package), autodoc inside {eval-rst} because autodoc's output and the
            # docstrings are reStructuredText.
            level = "##"
            if "." in module:
                level = "###"
                if module.rsplit(".", 1)[0] != package:
                    package = module.rsplit(".", 1)[0]
                    lines += [f"## `{PACKAGE}.{package}`", "",
                              f"A package: `import {PACKAGE}.{package}` gives the public names of all its "
                              "modules.", ""]
            lines += [f"{level} `{PACKAGE}.{module}`", "",
                      "```{eval-rst}",
                      f".. automodule:: {PACKAGE}.{module}",
                      "   :members:", "   :undoc-members:", "   :show-inheritance:",
                      "   :member-order: bysource", ""]
            # autodoc skips module-level data without a doc comment even with :undoc-members:;
            # a public constant (a table of activations, the special tokens) belongs on the page too.
            for name in _undocumented_data(f"{PACKAGE}.{module}", lib["all"].get(module, [])):
                lines += [f".. autodata:: {PACKAGE}.{module}.{name}", ""]
                _UNDOCUMENTED_DATA.add(f"{PACKAGE}.{module}.{name}")
            lines += ["```", ""]
        content = StringList(lines, source=self.env.doc2path(self.env.docname))
        section = nodes.section()
        section.document = self.state.document
        nested_parse_with_titles(self.state, content, section)
        return section.children


def _modules_in_book_order(lib: dict) -> list[str]:
    """The generated modules in the order the book builds them (the table of contents, then the order of
    each page's cells), a package's modules together where its first one comes."""
    order = [m for modules in lib["chapter_modules"].values() for m in modules if m in lib["modules"]]
    order = list(dict.fromkeys(order))
    first = {}
    for i, module in enumerate(order):
        first.setdefault(module.rsplit(".", 1)[0] if "." in module else module, i)
    return sorted(order, key=lambda m: (first[m.rsplit(".", 1)[0] if "." in m else m], order.index(m)))


def _root_api_lines(lib: dict) -> list[str]:
    """The package root's curated names (``import transformer_lib as tl``), grouped by the chapter that
    builds them, each linked to its documentation below."""
    by_chapter: dict[str, list[str]] = {}
    for name, module in _root_api().items():
        docname = lib["modules"].get(module[len(PACKAGE) + 1:], "")
        by_chapter.setdefault(docname, []).append(f"{{py:obj}}`~{module}.{name}`")
    lines = ["## The package root", "",
             f"`import {PACKAGE} as tl` gives these {sum(map(len, by_chapter.values()))} names, the book's "
             "concepts; everything else below is imported from its module.", ""]
    for docname in sorted(by_chapter, key=_chapter_order):
        where = f"{{doc}}`/{docname}`" if docname else "elsewhere"
        lines.append(f"- {where}: " + ", ".join(by_chapter[docname]))
    return lines + [""]


def _note_aliases(app, env) -> None:
    """After reading: let ``transformer_lib.Name`` (what ``import transformer_lib as tl`` gives) resolve
    to the documented ``transformer_lib.module.Name``."""
    py = env.get_domain("py")
    for name, module in _root_api().items():
        entry = py.objects.get(f"{module}.{name}")
        short = f"{PACKAGE}.{name}"
        if entry is not None and short not in py.objects:
            py.objects[short] = entry._replace(aliased=True)


def _root_api() -> dict[str, str]:
    """{name: module that defines it} for the package root's curated ``__all__``."""
    import importlib

    try:
        root = importlib.import_module(PACKAGE)
    except ImportError:
        return {}
    return {name: getattr(root, name).__module__ if hasattr(getattr(root, name), "__module__")
            else PACKAGE for name in getattr(root, "__all__", [])}


def _resolve_short_name(app, env, node, contnode):
    """A docstring's ``:class:`TransformerConfig``` written in another module: resolve a bare public name
    of the package (unique across its modules) to the object it names, as a reader would expect."""
    if node.get("refdomain") != "py" or node.get("reftype") not in ("class", "func", "meth", "obj", "data", "exc"):
        return None
    target = node.get("reftarget", "").lstrip("~.")
    if target.startswith(PACKAGE + ".") and target.count(".") == 1:
        target = target.split(".", 1)[1]
    if "." in target:
        return None
    owners = [m for m, names in _library(app)["all"].items() if target in names]
    if len(owners) != 1:
        return None
    full = f"{PACKAGE}.{owners[0]}.{target}"
    py = env.get_domain("py")
    if full not in py.objects:
        return None
    return py.resolve_xref(env, node.get("refdoc", env.docname), app.builder, node["reftype"], full, node, contnode)


def _process_docstring(app, what, name, obj, options, lines) -> None:
    lib = _library(app)
    if what == "module" and name.startswith(PACKAGE + "."):
        docname = lib["modules"].get(name[len(PACKAGE) + 1:])
        if docname:
            # The generated header speaks to the library's maintainers; the reader wants the chapter.
            lines[:] = [f"Built in chapter :doc:`/{docname}`.", ""]
        return
    if what == "data" and name in _UNDOCUMENTED_DATA:
        lines[:] = []  # not dict's or tuple's docstring: the value shown in the signature says it all
    if what not in ("class", "function", "data", "exception", "attribute"):
        return
    if name in lib["defs"]:
        lines += ["", f":tl-defined-in:`{name}`"]


def _defined_in_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    node = addnodes.pending_xref(rawtext, refdomain="", reftype="tl-defined-in", reftarget=text,
                                 refexplicit=False, refwarn=True)
    node += nodes.inline(text, text)
    para = nodes.inline("", "", classes=["tl-defined-in"])
    para += nodes.emphasis("Defined in ", "Defined in ")
    para += node
    return [para], []


def _resolve_defined_in(app, env, node, contnode):
    if node.get("reftype") != "tl-defined-in":
        return None
    target = node["reftarget"]
    entry = getattr(env, "tl_defs", {}).get(target)
    if entry is None:
        logger.warning(f"library_links: no chapter cell found that defines {target}", location=node)
        return contnode
    docname, anchor, label = entry
    uri = app.builder.get_relative_uri(node.get("refdoc", env.docname), docname)
    ref = nodes.reference("", "", internal=True, refuri=f"{uri}#{anchor}" if anchor else uri)
    ref += [child.deepcopy() for child in label]
    return ref


# ---------------------------------------------------------------------------------------- chapter pages


def _section_title(node):
    """The title node of the section that holds ``node`` (None at the top)."""
    parent = node.parent
    while parent is not None and not isinstance(parent, nodes.section):
        parent = parent.parent
    if parent is None or not parent.children or not isinstance(parent[0], nodes.title):
        return None
    return parent[0]


def _label(chapter_title, section_title) -> list:
    """"Chapter › Section" as inline nodes, keeping maths in titles as maths (not raw TeX)."""
    out = [child.deepcopy() for child in chapter_title.children] if chapter_title is not None else []
    if section_title is not None and (chapter_title is None or section_title.astext() != chapter_title.astext()):
        out.append(nodes.Text(" \u203a "))
        out += [child.deepcopy() for child in section_title.children]
    return out


def _on_doctree_read(app, doctree) -> None:
    env = app.env
    docname = env.docname
    if not env.doc2path(docname).endswith(".ipynb"):
        return
    lib = _library(app)
    if not hasattr(env, "tl_defs"):
        env.tl_defs = {}
    chapter_title = env.titles.get(docname)
    # 1. Anchors on the code cells that define the library's names.
    cells = {}
    for node in doctree.findall(nodes.container):
        if node.get("nb_element") == "cell_code":
            cells.setdefault(node.get("cell_index"), node)
    for full, (def_doc, index) in lib["defs"].items():
        if def_doc != docname:
            continue
        cell = cells.get(index)
        if cell is None:  # the cell was removed from the page: point at the chapter itself
            env.tl_defs[full] = (docname, "", _label(chapter_title, None))
            continue
        anchor = nodes.make_id("tl-def-" + full)
        if anchor not in cell["ids"]:
            cell["ids"].append(anchor)
            doctree.ids[anchor] = cell
        env.tl_defs[full] = (docname, anchor, _label(chapter_title, _section_title(cell)))
    # 2. The "In transformer_lib" box at the chapter's end.
    box = nodes.admonition("", classes=["tl-chapter-box", "note"])
    box += nodes.title("In transformer_lib", "In transformer_lib")
    modules = lib["chapter_modules"].get(docname, [])
    for module in modules:
        para = nodes.paragraph()
        para += nodes.strong("Module ", "Module ")
        para += _xref(docname, "mod", f"{PACKAGE}.{module}", literal=True)
        names = lib["all"].get(module, [])
        # a module that several pages write (a chapter and its appendix): this page's names only
        own = [n for n in names if lib["defs"].get(f"{PACKAGE}.{module}.{n}", (docname,))[0] == docname]
        if own:
            para += nodes.Text(": ")
            for i, name in enumerate(own):
                if i:
                    para += nodes.Text(", ")
                para += _xref(docname, "obj", f"{PACKAGE}.{module}.{name}", text=name, literal=True)
        others = list(dict.fromkeys(lib["defs"][f"{PACKAGE}.{module}.{n}"][0] for n in names
                                    if n not in own and f"{PACKAGE}.{module}.{n}" in lib["defs"]))
        for i, other in enumerate(others):
            para += nodes.Text(" (with names from " if i == 0 else ", ")
            para += _xref(docname, "doc", "/" + other, domain="std")
            para += nodes.Text(")" if i == len(others) - 1 else "")
        para += nodes.Text(" (")
        para += _xref(docname, "doc", "/book/api", text="API reference", domain="std")
        para += nodes.Text(")")
        box += para
    if not modules:
        para = nodes.paragraph()
        para += nodes.strong("Module ", "Module ")
        para += nodes.Text("none: this chapter measures and explains, and exports no code.")
        box += para
    box += _runtime_paragraph(app, env, docname)
    _place_box(doctree, box)


def _place_box(doctree, box) -> None:
    """At the end of the section "What is now in transformer_lib" (or "What this appendix adds to
    transformer_lib"), else at the end of the page: the chapter opens with its story."""
    sections = list(doctree.findall(nodes.section))
    if not sections:
        return
    summary = [s for s in sections if s.children and isinstance(s[0], nodes.title)
               and re.match(r"What (is now in|this appendix adds to) transformer_lib", s[0].astext())]
    target = summary[-1] if summary else sections[0]
    # before the summary's own subsections, if any, so the box stays with its text
    pos = next((i for i, child in enumerate(target.children) if isinstance(child, nodes.section)),
               len(target.children))
    target.insert(pos, box)


def _xref(docname: str, reftype: str, target: str, text: str | None = None, literal: bool = False, domain: str = "py"):
    node = addnodes.pending_xref("", refdomain=domain, reftype=reftype, reftarget=target, refdoc=docname,
                                 refexplicit=text is not None, refwarn=True)
    label = text or target
    node += nodes.literal(label, label, classes=["xref", domain, f"{domain}-{reftype}"]) if literal \
        else nodes.inline(label, label)
    return node


def _runtime_paragraph(app, env, docname):
    from myst_nb.sphinx_ import NbMetadataCollector

    data = NbMetadataCollector.get_exec_data(env, docname)
    para = nodes.paragraph(classes=["tl-runtime-line"])
    para += nodes.strong("Run time ", "Run time ")
    runtime = data.get("runtime") if data else None
    if runtime is not None:
        text = f"{runtime:.1f} s"
        rest = f" for the whole notebook when this page was built ({_machine()}, kernel start included)"
    else:
        text = "not measured"
        rest = " (the notebook was not executed in this build)"
    para += nodes.inline(text, text, classes=["tl-runtime"])
    para += nodes.Text(rest + ".")
    nb_file = posixpath.relpath(f"_sources/{docname}.ipynb", posixpath.dirname(docname))
    download = nodes.paragraph()
    download += nodes.strong("Notebook ", "Notebook ")
    download += nodes.reference("", posixpath.basename(nb_file), refuri=nb_file, classes=["tl-download"])
    download += nodes.Text(" to run it yourself (also under the download button at the top of the page).")
    return [para, download]


def _machine() -> str:
    cores = os.cpu_count() or 1
    gpu = "no GPU"
    try:
        import torch

        if torch.cuda.is_available():
            gpu = f"GPU: {torch.cuda.get_device_name(0)}"
    except Exception:  # the box is informative only
        gpu = "GPU unknown"
    return f"{cores} CPU core{'s' if cores != 1 else ''}, {gpu}"


# ------------------------------------------------------------------------------------------ run times


class RunTimesNode(nodes.General, nodes.Element):
    """Placeholder for the table of the chapters' run times, filled in once every notebook has run."""


class ChapterRunTimes(SphinxDirective):
    """``{chapter-run-times}``: a table of each chapter notebook's execution time in this build."""

    has_content = False

    def run(self):
        return [RunTimesNode()]


def _fill_run_times(app, doctree, fromdocname) -> None:
    from myst_nb.sphinx_ import NbMetadataCollector

    env = app.env
    for placeholder in list(doctree.findall(RunTimesNode)):
        docs = sorted((d for d in env.found_docs if env.doc2path(d).endswith(".ipynb")), key=_chapter_order)
        table = nodes.table(classes=["tl-run-times"])
        group = nodes.tgroup(cols=3)
        table += group
        for width in (60, 20, 20):
            group += nodes.colspec(colwidth=width)
        head = nodes.thead()
        group += head
        body = nodes.tbody()
        group += body
        head += _row(["Chapter", "Run time", "Result"])
        total = 0.0
        for docname in docs:
            data = NbMetadataCollector.get_exec_data(env, docname) or {}
            runtime = data.get("runtime")
            link = nodes.reference("", "", internal=True, refuri=app.builder.get_relative_uri(fromdocname, docname))
            if docname in env.titles:
                link += [child.deepcopy() for child in env.titles[docname].children]
            else:
                link += nodes.Text(docname)
            if not data:
                result = "not executed"
            elif data.get("succeeded"):
                result = "ran to the end"
            else:
                result = f"failed ({data.get('error') or 'error'})"
            if runtime is not None:
                total += runtime
            body += _row([link, f"{runtime:.1f} s" if runtime is not None else "\u2013", result])
        body += _row([nodes.strong("", "All chapters"), nodes.strong("", f"{total:.1f} s"), f"({_machine()})"])
        placeholder.replace_self(table)


def _row(cells) -> nodes.row:
    row = nodes.row()
    for cell in cells:
        entry = nodes.entry()
        para = nodes.paragraph()
        para += cell if isinstance(cell, nodes.Node) else nodes.Text(cell)
        entry += para
        row += entry
    return row


# -------------------------------------------------------------------------------------- env bookkeeping


def _purge(app, env, docname) -> None:
    defs = getattr(env, "tl_defs", {})
    for key in [k for k, v in defs.items() if v[0] == docname]:
        del defs[key]


def _merge(app, env, docnames, other) -> None:
    if not hasattr(env, "tl_defs"):
        env.tl_defs = {}
    env.tl_defs.update({k: v for k, v in getattr(other, "tl_defs", {}).items() if v[0] in docnames})


def _maths_on_page(app, pagename, templatename, context, doctree) -> None:
    """Load MathJax on a page whose maths arrived after reading (a linked section title with maths).

    Sphinx decides per page from the maths it saw while reading; the "Defined in" links are resolved
    later, so the API page would show raw TeX without this.
    """
    if doctree is not None and next(iter(doctree.findall(nodes.math)), None) is not None:
        app.env.get_domain("math").data.setdefault("has_equations", {})[pagename] = True


def _static_path(app, config) -> None:
    static = str(Path(__file__).parent / "static")
    if static not in config.html_static_path:
        config.html_static_path.append(static)


def setup(app):
    app.setup_extension("sphinx.ext.autodoc")
    app.add_directive("transformer-lib-api", TransformerLibAPI)
    app.add_role("tl-defined-in", _defined_in_role)
    app.add_node(RunTimesNode)
    app.add_directive("chapter-run-times", ChapterRunTimes)
    app.connect("doctree-resolved", _fill_run_times)
    app.connect("config-inited", _static_path)
    app.add_css_file("library_links.css")
    app.connect("autodoc-process-docstring", _process_docstring)
    app.connect("doctree-read", _on_doctree_read)
    app.connect("env-updated", _note_aliases)
    app.connect("missing-reference", _resolve_defined_in)
    app.connect("missing-reference", _resolve_short_name)
    app.connect("html-page-context", _maths_on_page, priority=400)  # before sphinx.ext.mathjax (500)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
