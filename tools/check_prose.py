#!/usr/bin/env python
"""Fail on a measured-looking figure typed by hand in the book's prose.

The book's promise is that what its prose reports was measured by the cells of the same build. So a
figure that looks measured must be glued from the cell that computed it (myst-nb:
``{glue:text}`name:.2f```) or, when it is a fixed fact that no cell measures (the paper's "65M", its
BLEU 28.4, a date), marked as one: ``{fact}`28.4``` (``book/_ext/prose_facts.py`` renders it as
plain text).

Read: every markdown cell of ``book/*.ipynb`` and every ``book/*.md`` page. Not read: code (fenced
blocks and inline code), maths (``$...$``, ``$$...$$``, ``\\begin{...}`` blocks), roles whose text is not
prose (``{glue:...}``, ``{fact}``, ``{cite...}``, ``{ref}``, ``{numref}``, ``{doc}``, ``{eq}``), link
targets, directive options (``:name: ...``) and HTML comments.

Measured-looking (a number followed or preceded by):

* a decimal point: ``1.35``, ``0.78`` (but not a section ``§3.4`` or a version ``Python 3.11``);
* an exponent: ``1.2e-06``;
* a ratio sign: ``3.7x``, ``4×``;
* a percent sign: ``97.4%``, ``12 percent``;
* a unit of time: ``70 s``, ``118 ms``, ``2 min``, ``3 minutes``;
* a count of errors: ``13 errors``, ``4 model errors``.

Plain integers (``512``, ``2017``, ``6 layers``) are not flagged: they are sizes and settings that the
code states. Usage::

    python tools/check_prose.py              # check the book; exit 1 and list each hand-typed figure
    python tools/check_prose.py FILE ...     # check these notebooks / pages
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_NUM = r"(?<![\w.§/-])\d+(?:[.,]\d+)*"
FIGURE = re.compile(
    r"(?:"
    + _NUM + r"(?:\.\d+)?\s?[x×](?![\w])"                 # 3.7x, 4×
    + r"|" + _NUM + r"(?:\.\d+)?\s?(?:%|percent\b)"        # 97.4 %, 12 percent
    + r"|" + _NUM + r"(?:\.\d+)?\s?(?:ms|µs|us|s|sec|seconds?|min|minutes?|h|hours?)\b(?!-)"  # 70 s
    + r"|" + _NUM + r"\s+(?:\w+\s+)?(?:errors?|mistakes?|failures?)\b"  # 13 errors
    + r"|" + _NUM + r"\.\d+(?:e[-+]?\d+)?(?![\w.]*\d)"        # 1.35, 1.2e-06 (not 1.2.3)
    + r"|" + _NUM + r"e[-+]?\d+\b"                             # 1e-6
    + r")"
)
# a number that is a reference or a version, not a measurement
NOT_A_FIGURE_BEFORE = re.compile(r"(?:§|\bsection|\bSection|\bTable|\bFigure|\bFig\.|\bPython|\bversion|"
                                 r"\bv|\bchapter|\bChapter|\bequation|\bEq\.|\btorch|\bPyTorch)\s*$")

SKIP_ROLES = r"glue(?::\w+)?|fact|cite(?::\w+)?|ref|numref|doc|eq|download|term"
ROLE = re.compile(r"\{(?:" + SKIP_ROLES + r")\}`[^`]*`")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
INLINE_MATH = re.compile(r"\$\$.+?\$\$|(?<![\\$])\$(?!\s)[^$\n]+?(?<![\s\\])\$")
LINK_TARGET = re.compile(r"\]\([^)]*\)|<https?://[^>]*>|https?://\S+")
HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
DIRECTIVE_OPTION = re.compile(r"^\s*:[\w-]+:")
FENCE = re.compile(r"^\s*(`{3,}|~{3,}|:{3,})\s*(\{[^}]*\})?\s*(\S*)")
PROSE_DIRECTIVES = {"note", "tip", "warning", "important", "caution", "attention", "admonition", "hint",
                    "seealso", "figure", "margin", "sidebar", "dropdown", "exercise", "solution",
                    "glossary", "epigraph", "topic", "table", "list-table", "div", "card", "tab-item",
                    "tab-set", "grid", "grid-item", "grid-item-card", "toggle", "danger", "error"}


@dataclass(frozen=True)
class Finding:
    where: str      # "book/03_attention.ipynb, cell 12" or "book/intro.md, line 40"
    figure: str
    context: str

    def __str__(self) -> str:
        return (f"{self.where}: {self.figure!r} in \"{self.context}\" is typed by hand: glue it from the cell "
                "that measures it ({glue:text}`name`) or mark a fixed fact ({fact}`...`)")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number from 1, prose of that line) for the lines of a markdown text that hold prose."""
    out: list[tuple[int, str]] = []
    text = HTML_COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    fences: list[tuple[str, bool]] = []   # open fences: (marker, is prose)
    in_math: str | None = None            # what opened the maths block: "$$" or "env" (\begin{...})
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        m = FENCE.match(line)
        if m:
            marker, directive, lang = m.group(1), m.group(2), m.group(3)
            if fences and marker.startswith(fences[-1][0][0]) and len(marker) >= len(fences[-1][0]) \
                    and not directive and not lang:
                fences.pop()
                continue
            name = directive[1:-1] if directive else ""
            is_prose = (marker.startswith(":") and not directive) or name in PROSE_DIRECTIVES
            fences.append((marker, is_prose))
            continue
        if any(not prose for _, prose in fences):
            continue
        if in_math:
            if (in_math == "$$" and stripped.endswith("$$")) or (in_math == "env" and stripped.startswith(r"\end{")):
                in_math = None
            continue
        if stripped.startswith("$$"):
            in_math = None if len(stripped) > 2 and stripped.endswith("$$") else "$$"
            continue
        if stripped.startswith(r"\begin{"):
            in_math = "env"
            continue
        if DIRECTIVE_OPTION.match(line):
            continue
        out.append((number, line))
    return out


def strip_non_prose(line: str) -> str:
    """The line without roles, code, maths and link targets (each replaced by a space)."""
    for pattern in (ROLE, INLINE_CODE, INLINE_MATH, LINK_TARGET):
        line = pattern.sub(" ", line)
    return line


def find_figures(text: str, where: str) -> list[Finding]:
    found = []
    for number, line in prose_lines(text):
        prose = strip_non_prose(line)
        for m in FIGURE.finditer(prose):
            if NOT_A_FIGURE_BEFORE.search(prose[: m.start()]):
                continue
            context = prose[max(0, m.start() - 40): m.end() + 30].strip()
            context = re.sub(r"\s+", " ", context)
            found.append(Finding(where.format(line=number), m.group(0).strip(), context))
    return found


def check_file(path: Path, root: Path = ROOT) -> list[Finding]:
    try:
        rel = path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:  # a file outside the repository: its path as given
        rel = path.as_posix()
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text(encoding="utf-8"))
        findings = []
        for index, cell in enumerate(nb.get("cells", [])):
            if cell.get("cell_type") != "markdown":
                continue
            src = cell.get("source", "")
            src = "".join(src) if isinstance(src, list) else src
            findings += find_figures(src, f"{rel}, cell {index + 1}, line {{line}}")
        return findings
    return find_figures(path.read_text(encoding="utf-8"), f"{rel}, line {{line}}")


def book_files(root: Path = ROOT) -> list[Path]:
    book = root / "book"
    return sorted([*book.glob("*.ipynb"), *book.glob("*.md")])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="notebooks or pages (default: the whole book)")
    args = parser.parse_args(argv)
    files = args.files or book_files()
    findings = [f for path in files for f in check_file(path)]
    for finding in findings:
        print(f"check_prose: {finding}", file=sys.stderr)
    if findings:
        print(f"check_prose: {len(findings)} hand-typed figure(s) in {len(files)} file(s)", file=sys.stderr)
        return 1
    print(f"check_prose: every measured-looking figure in {len(files)} file(s) is glued or marked as a fact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
