"""Inference does not import training (issue 37 §2).

Decoding, translation, the loaders and serving are what a program that only translates runs; the
training package (chapter 10's loop, its checkpoints, its keeper) is for programs that train. So no
module outside ``transformer_lib/training/`` and ``transformer_lib/cli/`` (the command-line tool trains
too) imports ``transformer_lib.training``: by its source (every import statement, except those a type
checker alone reads under ``if TYPE_CHECKING:``) and in a fresh interpreter (what importing the
inference packages really loads, the package root's lazy names included).
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LIBRARY = REPO / "transformer_lib"
MAY_IMPORT_TRAINING = ("training", "cli")
INFERENCE = ["transformer_lib", "transformer_lib.decoding", "transformer_lib.translation",
             "transformer_lib.modern", "transformer_lib.marian", "transformer_lib.serving",
             "transformer_lib.packed"]


def _runtime_imports(tree: ast.Module) -> list[str]:
    """The modules a file's import statements name, outside ``if TYPE_CHECKING:`` blocks."""
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
               and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
               for child in node.body for n in ast.walk(child)}
    names = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            names.append(node.module or "")
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return names


def _inference_modules() -> list[Path]:
    return sorted(p for p in LIBRARY.rglob("*.py")
                  if p.relative_to(LIBRARY).parts[0] not in MAY_IMPORT_TRAINING)


@pytest.mark.parametrize("path", _inference_modules(), ids=lambda p: p.relative_to(LIBRARY).as_posix())
def test_no_inference_module_imports_training(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = [n for n in _runtime_imports(tree)
             if n == "transformer_lib.training" or n.startswith("transformer_lib.training.")]
    assert not found, f"{path.relative_to(REPO)} imports {found}: move the shared code out of training/"


def test_the_import_rule_sees_an_import_of_training(tmp_path):
    """The rule above is not vacuous: it finds a plain and a dotted import, and skips TYPE_CHECKING."""
    tree = ast.parse("from typing import TYPE_CHECKING\nimport transformer_lib.training.loop\n"
                     "from transformer_lib.training.files import x\n"
                     "if TYPE_CHECKING:\n    from transformer_lib.training.config import y\n")
    assert _runtime_imports(tree) == ["typing", "transformer_lib.training.loop",
                                      "transformer_lib.training.files"]


def test_importing_the_inference_packages_loads_no_training_module():
    code = ("import sys\n" + "".join(f"import {m}\n" for m in INFERENCE)
            + "print(sorted(m for m in sys.modules if m.startswith('transformer_lib.training')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", f"importing {INFERENCE} loaded {out.stdout.strip()}"


def test_the_root_still_gives_the_training_names():
    """The root's training names are lazy, not gone: each resolves, and ``dir`` lists it."""
    code = ("import transformer_lib as tl\n"
            "missing = [n for n in tl.__all__ if not hasattr(tl, n)]\n"
            "assert not missing, missing\n"
            "assert 'train' in dir(tl) and tl.train.__module__ == 'transformer_lib.training.loop'\n"
            "try:\n    tl.no_such_name\nexcept AttributeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "no attribute 'no_such_name'" in out.stdout
