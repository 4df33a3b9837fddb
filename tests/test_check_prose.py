"""Tests of tools/check_prose.py: a measured-looking figure typed by hand fails, a glued one passes."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("_check_prose_under_test", REPO / "tools" / "check_prose.py")
check_prose = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = check_prose  # dataclasses look their module up
_spec.loader.exec_module(check_prose)


def figures(text: str) -> list[str]:
    return [f.figure for f in check_prose.find_figures(text, "page, line {line}")]


@pytest.mark.parametrize("text, figure", [
    ("With the KV cache, decoding is 3.7x faster.", "3.7x"),
    ("The cache is 4× faster.", "4×"),
    ("Exact match reaches 97.4% on the test set.", "97.4%"),
    ("Exact match reaches 97 % on the test set.", "97 %"),
    ("The ratio was 1.35 in this build.", "1.35"),
    ("The largest difference is 1.2e-06.", "1.2e-06"),
    ("The largest difference is 1e-6.", "1e-6"),
    ("The chapter runs in 70 s on two cores.", "70 s"),
    ("One step takes 118 ms.", "118 ms"),
    ("Training takes about 2 minutes.", "2 minutes"),
    ("All 13 errors are model errors.", "13 errors"),
    ("It made 4 model errors.", "4 model errors"),
])
def test_a_hand_typed_measured_figure_is_found(text, figure):
    assert figures(text) == [figure]


@pytest.mark.parametrize("text", [
    "With the KV cache, decoding is {glue:text}`cache_speedup:.1f`x faster.",
    "Exact match reaches {glue:text}`exact_match:.1%` on the test set.",
    "The paper's base model has {fact}`65M` parameters and BLEU {fact}`27.3`.",
    "The paper (§3.4) multiplies by $\\sqrt{d_{model}} = 22.6$ when $d = 512$.",
    "Run `lr=0.001` for `2.5x` longer.",
    "The base model has d_model 512, 8 heads and 6 layers, published in 2017.",
    "This needs Python 3.11 and torch 2.13.",
    "See [the release](https://example.org/v1.5) and Table 2.1.",
    "Chapter 10 trains the model.",
    "```python\nx = 3.7  # code is not prose\n```",
    "$$\nE = 0.5\n$$",
    "```{math}\n0.5\n```",
    "<!-- a comment with 3.7x -->",
    ":::{figure} a.png\n:width: 80%\nA caption.\n:::",
])
def test_glued_fixed_code_and_maths_are_not_flagged(text):
    assert figures(text) == []


def test_prose_after_an_environment_inside_display_maths_is_read():
    text = "$$\n\\begin{aligned}\nE &= 0.5\n\\end{aligned}\n$$\n\nIt took 12 s."
    assert figures(text) == ["12 s"]


def test_prose_inside_an_admonition_is_read():
    assert figures("```{note}\nThe cache is 3.7x faster.\n```") == ["3.7x"]


def test_a_chapter_with_a_hand_typed_figure_fails_and_the_glued_version_passes(tmp_path: Path, capsys):
    def notebook(markdown: str) -> Path:
        nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": markdown},
                        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                         "source": "speedup = 3.7  # code: not read"}],
              "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
        path = tmp_path / "book" / "11_decoding.ipynb"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(nb), encoding="utf-8")
        return path

    path = notebook("# Decoding\n\nThe cache is 3.7x faster.")
    assert check_prose.main([str(path)]) == 1
    err = capsys.readouterr().err
    assert "cell 1" in err and "'3.7x'" in err and "glue" in err
    path = notebook("# Decoding\n\nThe cache is {glue:text}`speedup:.1f`x faster.")
    assert check_prose.main([str(path)]) == 0


def test_the_line_number_is_given_for_a_page(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\nFine.\n\nIt took 12 s.\n", encoding="utf-8")
    [finding] = check_prose.check_file(page, tmp_path)
    assert finding.where == "page.md, line 5" and finding.figure == "12 s"
