"""Tests of the exporter, tools/export.py: chapters in a temporary repository -> modules, and --check."""
from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _load_exporter():
    spec = importlib.util.spec_from_file_location("_export_under_test", REPO / "tools" / "export.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


export = _load_exporter()

BODY_1 = '''from __future__ import annotations

import math


def double(x: float) -> float:
    """Twice x."""
    return 2 * x'''

BODY_2 = '''SCALE = math.sqrt(2)
_PRIVATE = 3


class Thing:
    def method(self):
        inner = 1
        return inner


def _helper():
    return SCALE'''


def _cell(kind: str, source: str, tags: list[str] | None = None) -> dict:
    cell = {"cell_type": kind, "metadata": {"tags": tags} if tags else {}, "source": source.splitlines(True)}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def _notebook(cells: list[dict]) -> dict:
    """A notebook of ``cells``; a cell without an id gets its position (from 1), so provenance reads
    ``cell 3`` in these tests."""
    cells = [{"id": str(i), **cell} for i, cell in enumerate(cells, 1)]
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def _write_notebook(root: Path, name: str, cells: list[dict]) -> Path:
    path = root / "book" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_notebook(cells), indent=1), encoding="utf-8")
    return path


def _chapter(body_1: str = BODY_1) -> list[dict]:
    return [
        _cell("markdown", "# A chapter\n\nSome prose."),
        _cell("code", "#| default_exp toy", tags=["remove-cell"]),
        _cell("code", "#| export\n" + body_1),
        _cell("code", "print(double(2))  # a demonstration cell: not exported"),
        _cell("markdown", "More prose."),
        _cell("code", "#| export\n" + BODY_2),
    ]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with one chapter, exported, and the hand-written __init__.py."""
    _write_notebook(tmp_path, "01_toy.ipynb", _chapter())
    pkg = tmp_path / "transformer_lib"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from transformer_lib.toy import *\n", encoding="utf-8")
    export.write(tmp_path)
    return tmp_path


def test_notebook_becomes_the_expected_module(repo: Path):
    text = (repo / "transformer_lib" / "toy.py").read_text(encoding="utf-8")
    header, _, rest = text.partition("# fmt: off\n\n")
    # header: names the chapter and says to edit the notebook
    assert header.startswith('"""Generated from book/01_toy.ipynb: edit the notebook, not this file.')
    assert "# digest: " in header
    # body: the two exported cells, in order, each behind the comment naming its cell (counted from 1),
    # without the directive lines, and nothing else
    assert rest == ("# [book/01_toy.ipynb, cell 3]\n" + BODY_1 + "\n\n\n"
                    + "# [book/01_toy.ipynb, cell 6]\n" + BODY_2 + "\n\n\n"
                    + "__all__ = ['double', 'SCALE', 'Thing']\n")
    assert "#| export" not in text and "default_exp" not in text and "print(double(2))" not in text
    # the module is valid Python whose __all__ lists exactly the public top-level names
    tree = ast.parse(text)
    assert ast.get_docstring(tree).startswith("Generated from book/01_toy.ipynb")
    namespace: dict = {}
    exec(compile(text, "toy.py", "exec"), namespace)
    assert namespace["__all__"] == ["double", "SCALE", "Thing"]
    assert namespace["double"](3) == 6


def test_fresh_export_passes_the_check_and_writing_again_changes_nothing(repo: Path):
    assert export.check(repo) == []
    assert export.write(repo) == []


def test_main_check_exit_codes(repo: Path, capsys):
    assert export.main(["--check", "--root", str(repo)]) == 0
    assert "1 modules match their chapters" in capsys.readouterr().out
    (repo / "transformer_lib" / "toy.py").write_text("x = 1\n", encoding="utf-8")
    assert export.main(["--check", "--root", str(repo)]) == 1
    assert "transformer_lib/toy.py" in capsys.readouterr().err


def test_drift_after_the_notebook_changes_is_reported_by_name(repo: Path):
    _write_notebook(repo, "01_toy.ipynb", _chapter(BODY_1.replace("2 * x", "x + x")))
    problems = export.check(repo)
    assert len(problems) == 1
    assert problems[0].startswith("transformer_lib/toy.py: differs from what its chapter exports")
    export.write(repo)
    assert export.check(repo) == []


def test_hand_edited_module_is_reported_by_name(repo: Path):
    path = repo / "transformer_lib" / "toy.py"
    path.write_text(path.read_text(encoding="utf-8").replace("2 * x", "3 * x"), encoding="utf-8")
    problems = export.check(repo)
    assert len(problems) == 1
    assert problems[0].startswith("transformer_lib/toy.py: edited by hand")


def test_whitespace_only_edit_is_still_caught(repo: Path):
    path = repo / "transformer_lib" / "toy.py"
    path.write_text(path.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert [p.split(":")[0] for p in export.check(repo)] == ["transformer_lib/toy.py"]


def test_orphan_module_is_reported_by_name(repo: Path):
    (repo / "transformer_lib" / "stray.py").write_text("x = 1\n", encoding="utf-8")
    problems = export.check(repo)
    assert problems == ["transformer_lib/stray.py: no chapter exports this module"]


def test_module_of_a_deleted_chapter_is_an_orphan(repo: Path):
    (repo / "book" / "01_toy.ipynb").unlink()
    problems = export.check(repo)
    assert problems == ["transformer_lib/toy.py: no chapter exports this module"]


def test_missing_module_is_reported(repo: Path):
    (repo / "transformer_lib" / "toy.py").unlink()
    problems = export.check(repo)
    assert len(problems) == 1 and problems[0].startswith("transformer_lib/toy.py: missing")


def test_hand_written_init_is_left_alone(repo: Path):
    init = repo / "transformer_lib" / "__init__.py"
    init.write_text("# anything the author likes\n", encoding="utf-8")
    assert export.check(repo) == []
    export.write(repo)
    assert init.read_text(encoding="utf-8") == "# anything the author likes\n"


def test_export_other_sends_a_cell_to_a_second_module(tmp_path: Path):
    cells = _chapter() + [_cell("code", "#| export extra\nVALUE = 1")]
    _write_notebook(tmp_path, "12_two.ipynb", cells)
    modules = {p.name: text for p, text in export.export_all(tmp_path).items()}
    assert set(modules) == {"toy.py", "extra.py"}
    assert "VALUE = 1" in modules["extra.py"] and "VALUE" not in modules["toy.py"]
    assert "__all__ = ['VALUE']" in modules["extra.py"]
    assert "Generated from book/12_two.ipynb" in modules["extra.py"]


def test_chapter_without_exports_produces_no_module(tmp_path: Path):
    _write_notebook(tmp_path, "00_overview.ipynb", [_cell("markdown", "# Overview"), _cell("code", "x = 1")])
    assert export.export_all(tmp_path) == {}


def test_default_exp_outside_the_first_code_cell_is_an_error(tmp_path: Path):
    _write_notebook(tmp_path, "01_bad.ipynb", [_cell("code", "x = 1"), _cell("code", "#| default_exp bad")])
    with pytest.raises(export.ExportError, match="first code cell"):
        export.export_all(tmp_path)


def test_export_without_default_exp_is_an_error(tmp_path: Path):
    _write_notebook(tmp_path, "01_bad.ipynb", [_cell("code", "#| export\nx = 1")])
    with pytest.raises(export.ExportError, match="no '#| default_exp'"):
        export.export_all(tmp_path)


def _headed_chapter() -> list[dict]:
    """``_chapter()`` with its imports in a cell of their own, as the book's chapters have them."""
    head, code = BODY_1.split("\n\n\ndef ")
    return [_cell("code", "#| default_exp toy"), _cell("code", "#| export\n" + head),
            _cell("code", "#| export\ndef " + code), _cell("code", "#| export\n" + BODY_2)]


def _appendix(extra: str = "") -> list[dict]:
    """A later page that adds to the module ``toy`` of ``_chapter()``: its imports, a function, a method."""
    return [
        _cell("markdown", "# An appendix"),
        _cell("code", "#| export toy\nimport os\n#| from transformer_lib.other import helper"),
        _cell("code", "#| export toy\ndef where() -> str:\n    return os.sep + str(double(1))" + extra),
    ]


def test_a_later_page_extends_an_earlier_module(tmp_path: Path):
    _write_notebook(tmp_path, "01_a.ipynb", _headed_chapter())
    _write_notebook(tmp_path, "zz_appendix.ipynb", _appendix())
    text = export.export_all(tmp_path)[tmp_path / "transformer_lib" / "toy.py"]
    assert text.startswith('"""Generated from book/01_a.ipynb: edit the notebook')
    assert "Extended by book/zz_appendix.ipynb." in text
    # the appendix's import cell joins the chapter's imports; its code follows the chapter's
    assert text.index("import math") < text.index("import os") < text.index("def double")
    assert "from transformer_lib.other import helper" in text
    assert text.index("def _helper") < text.index("def where")
    assert "# [book/zz_appendix.ipynb, cell 3]" in text
    namespace: dict = {}
    exec(compile(text.replace("from transformer_lib.other import helper", ""), "toy.py", "exec"), namespace)
    assert namespace["where"]().endswith("2")
    assert "__all__ = ['double', 'SCALE', 'Thing', 'where']" in text
    tree = ast.parse(text)
    assert all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in tree.body[1:5])  # docstring, then imports


def test_a_later_import_cell_never_goes_above_a_future_import(tmp_path: Path):
    _write_notebook(tmp_path, "01_a.ipynb", _chapter())        # __future__ and code in one cell
    _write_notebook(tmp_path, "zz_appendix.ipynb", _appendix())
    text = export.export_all(tmp_path)[tmp_path / "transformer_lib" / "toy.py"]
    assert text.index("from __future__") < text.index("import os")


def test_the_order_of_the_pages_is_the_table_of_contents(tmp_path: Path):
    # by name the appendix would come first; _toc.yml puts it after the chapter
    _write_notebook(tmp_path, "02_chapter.ipynb", _headed_chapter())
    _write_notebook(tmp_path, "01_appendix.ipynb", _appendix())
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nparts:\n  - chapters:\n"
                                       "      - file: book/02_chapter\n        sections:\n"
                                       "          - file: book/01_appendix\n", encoding="utf-8")
    text = export.export_all(tmp_path)[tmp_path / "transformer_lib" / "toy.py"]
    assert "Generated from book/02_chapter.ipynb" in text and "Extended by book/01_appendix.ipynb" in text
    assert text.index("def double") < text.index("def where")


def test_a_later_page_may_reopen_a_class_of_the_earlier_one(tmp_path: Path):
    _write_notebook(tmp_path, "01_toy.ipynb", _reopening_chapter()[:2])
    _write_notebook(tmp_path, "02_more.ipynb", [_cell("code", "#| export toy\n" + REOPEN_1)])
    text = export.export_all(tmp_path)[tmp_path / "transformer_lib" / "toy.py"]
    classes = [n for n in ast.parse(text).body if isinstance(n, ast.ClassDef)]
    assert [m.name for m in classes[0].body if isinstance(m, ast.FunctionDef)] == ["__init__", "add"]
    assert "    # [book/02_more.ipynb, cell 1]" in text


def test_writing_one_page_writes_the_whole_module_it_extends(tmp_path: Path):
    _write_notebook(tmp_path, "01_a.ipynb", _headed_chapter())
    _write_notebook(tmp_path, "zz_appendix.ipynb", _appendix())
    whole = export.export_all(tmp_path)
    assert export.export_all(tmp_path, only=["zz_appendix.ipynb"]) == whole


def test_a_syntax_error_across_pages_names_both(tmp_path: Path):
    _write_notebook(tmp_path, "01_a.ipynb", _chapter())
    _write_notebook(tmp_path, "zz_appendix.ipynb", _appendix("\n    return (("))
    with pytest.raises(export.ExportError, match=r"book/01_a.ipynb and book/zz_appendix.ipynb.*'toy'"):
        export.export_all(tmp_path)


def test_syntax_error_in_an_exported_cell_names_the_chapter(tmp_path: Path):
    cells = _chapter() + [_cell("code", "#| export\ndef broken(:\n    pass")]
    _write_notebook(tmp_path, "03_broken.ipynb", cells)
    with pytest.raises(export.ExportError, match=r"book/03_broken.ipynb.*toy"):
        export.export_all(tmp_path)
    assert export.main(["--root", str(tmp_path)]) == 1
    assert not (tmp_path / "transformer_lib" / "toy.py").exists()


def test_a_future_import_after_other_code_goes_first(tmp_path: Path):
    # Python wants __future__ first: a later cell's goes to the top of the module's imports, once
    cells = [_cell("code", "#| default_exp toy"), _cell("code", "#| export\nimport math\nPI = math.pi"),
             _cell("code", "#| export\nfrom __future__ import annotations\nLATE = 1"),
             _cell("code", "#| export\nfrom __future__ import annotations")]
    _write_notebook(tmp_path, "03_late.ipynb", cells)
    text = export.export_all(tmp_path)[tmp_path / "transformer_lib" / "toy.py"]
    assert text.split("# fmt: off\n\n", 1)[1].startswith(
        "# [book/03_late.ipynb, cell 2]\nfrom __future__ import annotations\n\nimport math\nPI = math.pi")
    assert text.count("__future__") == 1 and "LATE = 1" in text


def test_public_names_cover_every_top_level_definition():
    body = "A, B = 1, 2\n[C, _D] = 3, 4\nE: int = 5\n_F = 6\ndef g(): pass\nclass H: pass\nx.y = 7\n"
    assert export.public_names(body) == ["A", "B", "C", "E", "g", "H"]


REOPEN_BASE = '''class Counter:
    """Counts."""

    def __init__(self):
        self.n = 0


def helper():
    return 1'''

REOPEN_1 = '''class Counter(Counter):
    def add(self, k: int = 1) -> "Counter":
        self.n += k
        return self'''

REOPEN_2 = '''class Counter(Counter):
    # a comment before the method stays with it
    def value(self) -> int:
        return self.n'''


def _reopening_chapter() -> list[dict]:
    return [
        _cell("code", "#| default_exp toy"),
        _cell("code", "#| export\n" + REOPEN_BASE),
        _cell("markdown", "The next method."),
        _cell("code", "#| export\n" + REOPEN_1),
        _cell("code", "#| export\n" + REOPEN_2),
    ]


def test_a_reopened_class_is_folded_into_the_earlier_class(tmp_path: Path):
    _write_notebook(tmp_path, "01_toy.ipynb", _reopening_chapter())
    text = export.export_all(tmp_path)[tmp_path / "transformer_lib" / "toy.py"]
    tree = ast.parse(text)
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    assert [c.name for c in classes] == ["Counter"]                       # one class, not three
    assert [m.name for m in classes[0].body if isinstance(m, ast.FunctionDef)] == ["__init__", "add", "value"]
    assert "Counter(Counter)" not in text
    # each piece names its cell, the folded ones inside the class body
    assert "# [book/01_toy.ipynb, cell 2]" in text
    assert "    # [book/01_toy.ipynb, cell 4]" in text and "    # [book/01_toy.ipynb, cell 5]" in text
    assert text.index("cell 5]") < text.index("def helper")               # folded before the next definition
    namespace: dict = {}
    exec(compile(text, "toy.py", "exec"), namespace)
    assert namespace["Counter"]().add(2).add().value() == 3
    assert namespace["__all__"] == ["Counter", "helper"]
    # and the notebook's own reading (the cells run in order) gives the same behaviour
    nb_namespace: dict = {}
    for body in (REOPEN_BASE, REOPEN_1, REOPEN_2):
        exec(body, nb_namespace)
    assert nb_namespace["Counter"]().add(2).add().value() == 3


def test_a_reopened_class_cannot_call_super(tmp_path: Path):
    cells = _reopening_chapter()[:2] + [_cell("code", "#| export\nclass Counter(Counter):\n"
                                                     "    def __init__(self):\n        super().__init__()")]
    _write_notebook(tmp_path, "01_toy.ipynb", cells)
    with pytest.raises(export.ExportError, match="super"):
        export.export_all(tmp_path)


def test_a_subclass_of_another_name_is_not_folded(tmp_path: Path):
    cells = _reopening_chapter()[:2] + [_cell("code", "#| export\nclass Big(Counter):\n    pass")]
    _write_notebook(tmp_path, "01_toy.ipynb", cells)
    text = export.export_all(tmp_path)[tmp_path / "transformer_lib" / "toy.py"]
    assert "class Big(Counter):" in text


def test_a_module_only_import_is_a_comment_in_the_notebook_and_an_import_in_the_module(tmp_path: Path):
    cells = [_cell("code", "#| default_exp toy"),
             _cell("code", "#| export other\ndef helper():\n    return 1"),
             _cell("code", "#| export\nimport math\n#| from transformer_lib.other import helper\n\n\n"
                           "def twice():\n    return 2 * helper()")]
    _write_notebook(tmp_path, "01_toy.ipynb", cells)
    text = export.export_all(tmp_path)[tmp_path / "transformer_lib" / "toy.py"]
    assert "\nfrom transformer_lib.other import helper\n" in text and "#| from" not in text
    assert "__all__ = ['twice']" in text                      # an imported name is not re-exported


# ---------------------------------------------------------------- issue 25: exporti, replaced methods,
# subpackages, provenance by cell id

def test_an_internal_cell_is_in_the_module_but_not_in_its_all(tmp_path: Path):
    _write_notebook(tmp_path, "01_toy.ipynb", [
        _cell("code", "#| default_exp toy"),
        _cell("code", "#| export\ndef shown() -> int:\n    return helper() + 1"),
        _cell("code", "#| exporti\ndef helper() -> int:\n    return 1"),
        _cell("code", "#| exporti other\nLIMIT = 3"),
    ])
    out = export.export_all(tmp_path)
    text = out[tmp_path / "transformer_lib" / "toy.py"]
    assert "def helper" in text and text.rstrip().endswith("__all__ = ['shown']")
    assert out[tmp_path / "transformer_lib" / "other.py"].rstrip().endswith("__all__ = []")
    namespace: dict = {}
    exec(compile(text, "toy.py", "exec"), namespace)
    assert namespace["shown"]() == 2


def test_a_later_page_replaces_a_method_where_it_stands(tmp_path: Path):
    replacing = '''class Counter(Counter):
    def add(self, k: int = 1) -> "Counter":
        self.n += 10 * k
        return self

    def twice(self) -> int:
        return 2 * self.n'''
    _write_notebook(tmp_path, "01_toy.ipynb", _reopening_chapter())
    _write_notebook(tmp_path, "02_more.ipynb", [_cell("code", "#| export toy\n" + replacing)])
    text = export.export_all(tmp_path)[tmp_path / "transformer_lib" / "toy.py"]
    cls = [n for n in ast.parse(text).body if isinstance(n, ast.ClassDef)][0]
    methods = [m.name for m in cls.body if isinstance(m, ast.FunctionDef)]
    assert methods == ["__init__", "add", "value", "twice"]         # add stays where it stood, once
    assert text.count("def add") == 1 and "10 * k" in text
    assert text.count("# [book/02_more.ipynb, cell 1]") == 2        # before add and before twice
    assert "# [book/01_toy.ipynb, cell 4]" not in text               # the replaced cell is gone
    namespace: dict = {}
    exec(compile(text, "toy.py", "exec"), namespace)
    counter = namespace["Counter"]()
    assert counter.add(2).value() == 20 and counter.twice() == 40


def test_a_dotted_module_is_in_a_subpackage_with_a_generated_init(tmp_path: Path):
    _write_notebook(tmp_path, "01_toy.ipynb", [
        _cell("code", "#| default_exp part.first"),
        _cell("code", "#| export\ndef one() -> int:\n    return 1"),
        _cell("code", "#| export part.second\n#| from transformer_lib.part.first import one\n"
                      "def two() -> int:\n    return one() + 1"),
        _cell("code", "#| exporti part.second\ndef hidden() -> int:\n    return 0"),
    ])
    export.write(tmp_path)
    pkg = tmp_path / "transformer_lib" / "part"
    assert sorted(p.name for p in pkg.iterdir()) == ["__init__.py", "first.py", "second.py"]
    init = (pkg / "__init__.py").read_text(encoding="utf-8")
    assert "from transformer_lib.part.first import *  # noqa: F403" in init and "hidden" not in init
    assert "*_first.__all__," in init and "*_second.__all__," in init   # the names are listed once, in the modules
    compile(init, "__init__.py", "exec")
    assert export.check(tmp_path) == []
    (pkg / "stray.py").write_text("x = 1\n", encoding="utf-8")
    assert export.check(tmp_path) == ["transformer_lib/part/stray.py: no chapter exports this module"]


def test_provenance_names_the_cell_id_so_inserting_a_cell_changes_no_module(tmp_path: Path):
    cells = [{"id": f"c{i}", **cell} for i, cell in enumerate(_chapter())]
    cells[2]["id"] = "3a742c30"
    _write_notebook(tmp_path, "01_toy.ipynb", cells)
    before = export.export_all(tmp_path)
    assert "# [book/01_toy.ipynb, cell 3a742c30]" in before[tmp_path / "transformer_lib" / "toy.py"]
    _write_notebook(tmp_path, "01_toy.ipynb", [cells[0], {"id": "new", **_cell("markdown", "Prose."), }, *cells[1:]])
    assert export.export_all(tmp_path) == before


def test_an_exported_cell_without_an_id_is_refused(tmp_path: Path):
    path = tmp_path / "book" / "01_toy.ipynb"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"cells": [_cell("code", "#| default_exp toy"), _cell("code", "#| export\nx = 1")],
                                "metadata": {}, "nbformat": 4, "nbformat_minor": 4}), encoding="utf-8")
    with pytest.raises(export.ExportError, match="needs an id"):
        export.export_all(tmp_path)


# ---------------------------------------------------------------- a reopened dataclass gains fields

CONFIG_BASE = '''from dataclasses import dataclass


@dataclass(frozen=False)
class Config:
    size: int
    depth: int = 2

    def __post_init__(self):
        if self.size < 1:
            raise ValueError("size")'''

CONFIG_MORE = '''@dataclass(frozen=False)
class Config(Config):
    layout: str = "plain"
    bias: bool = False

    def __post_init__(self):
        if self.layout not in ("plain", "half"):
            raise ValueError("layout")'''


def test_a_reopened_dataclass_gains_fields_under_one_decorator(tmp_path: Path):
    _write_notebook(tmp_path, "01_toy.ipynb", [_cell("code", "#| default_exp toy"),
                                               _cell("code", "#| export\n" + CONFIG_BASE)])
    _write_notebook(tmp_path, "02_more.ipynb", [_cell("code", "#| export toy\n" + CONFIG_MORE)])
    text = export.export_all(tmp_path)[tmp_path / "transformer_lib" / "toy.py"]
    assert text.count("@dataclass") == 1 and text.count("class Config") == 1
    assert text.count("def __post_init__") == 1 and '"layout"' in text   # the method is replaced
    namespace: dict = {}
    exec(compile(text, "toy.py", "exec"), namespace)
    Config = namespace["Config"]
    import dataclasses
    assert [f.name for f in dataclasses.fields(Config)] == ["size", "depth", "layout", "bias"]
    assert Config(3) == Config(3, 2, "plain", False)
    with pytest.raises(ValueError, match="layout"):
        Config(3, layout="odd")
    # the notebook's reading: a dataclass subclass with the same fields
    nb_namespace: dict = {}
    for body in (CONFIG_BASE, CONFIG_MORE):
        exec(body, nb_namespace)
    assert [f.name for f in dataclasses.fields(nb_namespace["Config"])] == ["size", "depth", "layout", "bias"]


def _refused_reopen(tmp_path: Path, reopen: str, message: str) -> None:
    """A chapter with CONFIG_BASE and the reopening cell ``reopen`` does not export: ExportError(message)."""
    _write_notebook(tmp_path, "01_toy.ipynb", [_cell("code", "#| default_exp toy"),
                                               _cell("code", "#| export\n" + CONFIG_BASE),
                                               _cell("code", "#| export\n" + reopen)])
    with pytest.raises(export.ExportError, match=message):
        export.export_all(tmp_path)


@pytest.mark.parametrize("decorator, message", [
    ("@dataclass", "@dataclass\\(frozen=False\\)"),        # not spelled as the original
    ("@functools.total_ordering", "plain"),
])
def test_a_reopened_dataclass_keeps_its_own_decorator_only(tmp_path: Path, decorator: str, message: str):
    _refused_reopen(tmp_path, CONFIG_MORE.replace("@dataclass(frozen=False)", decorator), message)


def test_fields_need_the_decorator_and_defaults(tmp_path: Path):
    _refused_reopen(tmp_path, CONFIG_MORE.split("\n", 1)[1], "must be decorated")
    _refused_reopen(tmp_path, CONFIG_MORE.replace('bias: bool = False', 'bias: bool'), "need defaults")


def test_a_decorator_on_a_reopen_of_a_plain_class_is_refused(tmp_path: Path):
    cells = _reopening_chapter()[:2] + [_cell("code", "#| export\n@dataclass\n" + REOPEN_1)]
    _write_notebook(tmp_path, "01_toy.ipynb", cells)
    with pytest.raises(export.ExportError, match="plain `class Counter\\(Counter\\):`"):
        export.export_all(tmp_path)


def test_a_replaced_method_leaves_its_cells_other_members_under_their_provenance(tmp_path: Path):
    two = ('class Counter(Counter):\n    def add(self) -> int:\n        return 1\n\n'
           '    def sub(self) -> int:\n        return 2')
    one = 'class Counter(Counter):\n    def add(self) -> int:\n        return 3'
    _write_notebook(tmp_path, "01_toy.ipynb", [_cell("code", "#| default_exp toy"),
                                               _cell("code", "#| export\n" + REOPEN_BASE),
                                               _cell("code", "#| export\n" + two)])
    _write_notebook(tmp_path, "02_more.ipynb", [_cell("code", "#| export toy\n" + one)])
    text = export.export_all(tmp_path)[tmp_path / "transformer_lib" / "toy.py"]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    at = lines.index("def add(self) -> int:")
    assert lines[at - 1] == "# [book/02_more.ipynb, cell 1]" and lines[at + 1] == "return 3"
    assert lines[at + 2] == "# [book/01_toy.ipynb, cell 3]" and lines[at + 3] == "def sub(self) -> int:"


# ---------------------------------------------------------------- issue 37: generated modules read as if
# written by hand: super(), a dataclass's fields together, imports at the top

SUPER_BASE = '''class Base:
    def __init__(self, start: int = 0):
        self.n = start

    def reset(self) -> None:
        self.n = 0


class Counter(Base):
    def __init__(self):
        super().__init__()
        self.k = 1'''

SUPER_REOPEN = '''class Counter(Counter):
    def __init__(self, start: int = 5):
        Base.__init__(self, start)          # not super(): that is the earlier Counter
        self.k = 2

    def reset(self) -> None:
        Base.reset(self)  # the base's own
        self.k = 0

    def restart(self) -> None:
        Base.__init__(self)                 # another method's name: left as written'''


def test_a_replaced_constructor_calls_super_in_the_module(tmp_path: Path):
    _write_notebook(tmp_path, "01_toy.ipynb", [_cell("code", "#| default_exp toy"),
                                               _cell("code", "#| export\n" + SUPER_BASE)])
    _write_notebook(tmp_path, "02_more.ipynb", [_cell("code", "#| export toy\n" + SUPER_REOPEN)])
    text = export.export_all(tmp_path)[tmp_path / "transformer_lib" / "toy.py"]
    lines = text.splitlines()
    # the call of the base's method of the same name is super()'s, and the notebook's comment is gone
    assert "        super().__init__(start)" in lines and "        super().reset()" in lines
    assert "not super()" not in text and "the base's own" not in text
    assert "        Base.__init__(self)                 # another method's name: left as written" in lines
    namespace: dict = {}
    exec(compile(text, "toy.py", "exec"), namespace)
    counter = namespace["Counter"]()
    assert (counter.n, counter.k) == (5, 2)
    counter.reset()
    assert (counter.n, counter.k) == (0, 0)
    # the notebook's reading, with the base's methods called by name, behaves the same
    nb_namespace: dict = {}
    for body in (SUPER_BASE, SUPER_REOPEN):
        exec(body, nb_namespace)
    nb_counter = nb_namespace["Counter"]()
    assert (nb_counter.n, nb_counter.k) == (5, 2)


def test_super_is_not_spelled_for_a_class_of_two_bases(tmp_path: Path):
    base = SUPER_BASE.replace("class Counter(Base):", "class Other:\n    pass\n\n\nclass Counter(Base, Other):")
    _write_notebook(tmp_path, "01_toy.ipynb", [_cell("code", "#| default_exp toy"),
                                               _cell("code", "#| export\n" + base),
                                               _cell("code", "#| export\n" + SUPER_REOPEN)])
    text = export.export_all(tmp_path)[tmp_path / "transformer_lib" / "toy.py"]
    assert "super().__init__(start)" not in text and "Base.__init__(self, start)" in text


def test_the_fields_a_dataclass_gains_join_its_fields_before_the_methods(tmp_path: Path):
    more = CONFIG_MORE.replace('    bias: bool = False\n',
                               '    #: a bias on the output\n    bias: bool = False\n\n'
                               '    def doubled(self) -> int:\n        return 2 * self.size\n')
    _write_notebook(tmp_path, "01_toy.ipynb", [_cell("code", "#| default_exp toy"),
                                               _cell("code", "#| export\n" + CONFIG_BASE)])
    _write_notebook(tmp_path, "02_more.ipynb", [_cell("code", "#| export toy\n" + more)])
    text = export.export_all(tmp_path)[tmp_path / "transformer_lib" / "toy.py"]
    cls = [n for n in ast.parse(text).body if isinstance(n, ast.ClassDef)][0]
    kinds = ["field" if isinstance(m, ast.AnnAssign) else m.name for m in cls.body]
    assert kinds == ["field"] * 4 + ["__post_init__", "doubled"]
    body = text[text.index("class Config"):]
    assert body.index("depth: int = 2") < body.index("# [book/02_more.ipynb, cell 1]") \
        < body.index("layout: str") < body.index("#: a bias on the output") < body.index("bias: bool")
    namespace: dict = {}
    exec(compile(text, "toy.py", "exec"), namespace)
    assert namespace["Config"](3, bias=True).doubled() == 6


IMPORTING = [
    "#| export\nfrom __future__ import annotations\n\nimport math\nfrom typing import cast\n\n"
    "from transformer_lib.a import one\n\n\ndef f() -> float:\n    return cast(float, math.pi)",
    "#| export\nimport json\nfrom transformer_lib.a import two\nfrom typing import Any\n"
    "import math\n\n\ndef g(x: Any) -> str:\n    return json.dumps(x)",
    "#| export\nfrom typing import TYPE_CHECKING\nimport argparse\n\n"
    "if TYPE_CHECKING:  # names for annotations\n    from transformer_lib.b import Thing",
]


def test_imports_are_gathered_at_the_top_of_the_module(tmp_path: Path):
    _write_notebook(tmp_path, "01_toy.ipynb", [_cell("code", "#| default_exp toy"),
                                               *[_cell("code", body) for body in IMPORTING]])
    text = export.export_all(tmp_path)[tmp_path / "transformer_lib" / "toy.py"]
    body = text.split("# fmt: off\n\n", 1)[1]
    # the first cell's imports, with the others' in their groups (isort's order), each once, a ``from``
    # import of a module the block has joined to it; then the names for annotations
    assert body.startswith(
        "# [book/01_toy.ipynb, cell 2]\n"
        "from __future__ import annotations\n\n"
        "import argparse\nimport json\nimport math\nfrom typing import TYPE_CHECKING, Any, cast\n\n"
        "from transformer_lib.a import one, two\n\n"
        "if TYPE_CHECKING:  # names for annotations\n    from transformer_lib.b import Thing\n\n\n"
        "def f() -> float:\n")
    assert "# [book/01_toy.ipynb, cell 3]\ndef g(x: Any) -> str:" in body   # its imports left, its code stays
    assert "cell 4]" not in body                                           # a cell of imports only is gone
    tree = ast.parse(text)
    assert [type(n).__name__ for n in tree.body[1:]] == \
        ["ImportFrom"] + ["Import"] * 3 + ["ImportFrom"] * 2 + ["If", "FunctionDef", "FunctionDef", "Assign"]
