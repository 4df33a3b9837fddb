"""Tests of tools/check_pages.py's glyph check: a character that no installed font has fails the page, the
Chinese and Japanese of the book pass (with Debian's fonts-noto-cjk, which `make setup` installs).

They drive Debian's chromium; where it is not installed they are skipped (`make check-pages` then fails with
the command to run, and its --self-test checks every other rule)."""
from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("_check_pages_under_test", REPO / "tools" / "check_pages.py")
check_pages = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = check_pages  # dataclasses look their module up
_spec.loader.exec_module(check_pages)

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>t</title></head><body>
<p>{text}</p><pre>{code}</pre></body></html>"""


@pytest.fixture(scope="module")
def chromium():
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("chromium is not installed (make setup installs it)")
    return check_pages.find_chromium()


def _glyph_problems(chromium, tmp_path, pages: dict[str, tuple[str, str]]) -> dict[str, list[str]]:
    for name, (text, code) in pages.items():
        (tmp_path / name).write_text(PAGE.format(text=text, code=code), encoding="utf-8")
    results = check_pages.check_site(tmp_path, None, chromium, verbose=False)
    return {name: [p for p in results[name].problems if p.startswith("glyph:")] for name in pages}


@pytest.mark.slow
def test_a_character_no_font_has_fails_and_the_books_cjk_passes(chromium, tmp_path):
    if not check_pages.subprocess.run(["fc-list", ":family=Noto Sans CJK JP"], capture_output=True,
                                      text=True).stdout.strip():
        pytest.fail("the CJK font is missing: make setup installs fonts-noto-cjk")
    problems = _glyph_problems(chromium, tmp_path, {
        "cjk.html": ("2026年11月30日 三千七百二十四 导师引导训练 zéro fünf ␣ — “quoted”",
                     "2026年11月30日 -> November 30, 2026"),
        # Tangut characters (U+17000, U+18800: no Debian font has them), in text and in program output
        "tofu.html": ("Tangut \U00017000 here", "output \U00018800"),
    })
    assert problems["cjk.html"] == []
    assert len(problems["tofu.html"]) == 2
    assert "U+17000" in problems["tofu.html"][0] and "U+18800" in problems["tofu.html"][1]
    assert "fonts-noto-cjk" in problems["tofu.html"][0]          # the message says what to install
