"""The references agree with the pages (issue 36): what a page cites, the bibliography lists, and the other way.

* every key a page cites (``{cite}`key```, ``{cite:t}`a,b```) is an entry of ``book/references.bib``;
* every entry of ``references.bib`` is cited by some page (no dead entries);
* every cited key has a row in the annotated table of ``book/bibliography.md``, and every key of a row is cited
  by some page other than the bibliography itself (no stale rows);
* a row's "chapters" column names the pages that use it: each page it names cites one of the row's keys
  (chapter 2 named for Marian after chapter 2 stopped citing it was this check's first catch), and each
  chapter or appendix that cites a key is named in a row that holds the key (a row marked ``all`` names every
  page).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BOOK = REPO / "book"
CITE = re.compile(r"\{cite(?::\w+)?\}`([^`]+)`")
DOC = re.compile(r"\{doc\}`(?:[^`<]*<)?([^`>]+)>?`")
BIB_KEY = re.compile(r"^@\w+\{([^,\s]+),", re.MULTILINE)


def _page_texts() -> dict[str, str]:
    """{page name (file stem): its prose}: markdown cells of the notebooks, and the Markdown pages."""
    pages = {}
    for path in sorted(BOOK.glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        pages[path.stem] = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    for path in sorted(BOOK.glob("*.md")):
        pages[path.stem] = path.read_text(encoding="utf-8")
    return pages


def _cited(text: str) -> set[str]:
    return {key.strip() for group in CITE.findall(text) for key in group.split(",") if key.strip()}


def _rows() -> list[tuple[set[str], set[str] | None]]:
    """The annotated table's rows: (keys, the pages named in the chapters column, None for 'all')."""
    rows = []
    for line in (BOOK / "bibliography.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 3 or not _cited(cells[0]):
            continue
        where = cells[-1]
        rows.append((_cited(cells[0]), None if where.lower() == "all" else {d.strip() for d in DOC.findall(where)}))
    return rows


PAGES = _page_texts()
CITES = {page: _cited(text) for page, text in PAGES.items() if page != "bibliography"}
ROWS = _rows()


def test_the_table_has_rows():
    assert len(ROWS) > 30 and all(where is None or where for _, where in ROWS), "a row without pages"


def test_every_cited_key_is_in_references_bib():
    entries = set(BIB_KEY.findall((BOOK / "references.bib").read_text(encoding="utf-8")))
    missing = sorted(f"{page}: {key}" for page, keys in CITES.items() for key in keys - entries)
    assert not missing, f"cited but not in book/references.bib: {missing}"


def test_every_entry_of_references_bib_is_cited():
    entries = BIB_KEY.findall((BOOK / "references.bib").read_text(encoding="utf-8"))
    assert len(entries) == len(set(entries)), "a key appears twice in references.bib"
    cited = set().union(*CITES.values())
    assert not sorted(set(entries) - cited), f"entries no page cites: {sorted(set(entries) - cited)}"


def test_every_cited_key_has_a_row():
    in_rows = set().union(*(keys for keys, _ in ROWS))
    missing = sorted(f"{page}: {key}" for page, keys in CITES.items() for key in keys - in_rows)
    assert not missing, f"cited but without a row in book/bibliography.md: {missing}"


def test_no_row_holds_a_key_that_no_page_cites():
    cited = set().union(*CITES.values())
    stale = sorted(key for keys, _ in ROWS for key in keys - cited)
    assert not stale, f"rows of book/bibliography.md that no page cites: {stale}"


def test_a_row_names_only_pages_that_cite_it():
    unknown = sorted({page for _, where in ROWS for page in (where or ()) if page not in PAGES})
    assert not unknown, f"the chapters column names pages that do not exist: {unknown}"
    stale = sorted(f"{page} for {'/'.join(sorted(keys))}" for keys, where in ROWS for page in (where or ())
                   if not keys & CITES.get(page, set()))
    assert not stale, f"rows name pages that cite none of their keys: {stale}"


def test_every_chapter_that_cites_a_key_is_named_in_its_row():
    unnamed = []
    for page, keys in CITES.items():
        if not (BOOK / f"{page}.ipynb").exists():  # the intro, glossary and reference pages need no row
            continue
        for key in sorted(keys):
            if not any(key in row_keys and (where is None or page in where) for row_keys, where in ROWS):
                unnamed.append(f"{page}: {key}")
    assert not unnamed, f"pages that cite a key but are not named in a row holding it: {unnamed}"
