"""What a reader sees in the built site: no raw reST shows through, and code fits the text column.

Docstrings are Markdown (mkdocstrings cross-references, fenced examples); a reST role (`:meth:`, `:class:`,
`:attr:`) or an `Example::` marker left in one reaches the rendered HTML as literal text. Code blocks on
every page, the API reference's docstring examples included, fit the 80 columns the theme shows, so none
is cut off in a browser window.

Why 80: Material's grid is at most 61rem wide; on a desktop window both sidebars show (12.1rem each) and the
content has 1.2rem margins each side, which leaves 34.4rem. Code is set at 0.85 of the 0.8rem body text
(0.68rem) with 1.1765em padding each side (1.6rem together), in Roboto Mono, whose characters are 0.6em wide
(0.408rem): (34.4 - 1.6) / 0.408 = 80 columns. Everything scales with the root font size, so this holds at
every window width where both sidebars show; a longer line is cut off behind a scroll bar. (Below 76.25em the
navigation folds away and about 110 columns show.)
"""

from __future__ import annotations

import html
import re
from pathlib import Path

RAW_REST = re.compile(r":(?:meth|class|attr):|Example::")
WIDEST_CODE_LINE = 80


def _visible_text(page: str) -> str:
    # Only what is shown: scripts, styles and tag attributes (the search index, titles) are not read.
    page = re.sub(r"<(script|style)\b.*?</\1>", "", page, flags=re.DOTALL)
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_no_raw_rest_in_the_rendered_site(site: Path) -> None:
    found: dict[str, list[str]] = {}
    for page in sorted(site.rglob("*.html")):
        hits = RAW_REST.findall(_visible_text(page.read_text(encoding="utf-8")))
        if hits:
            kinds = {kind: hits.count(kind) for kind in sorted(set(hits))}
            found[str(page.relative_to(site))] = [f"{kind} x{count}" for kind, count in kinds.items()]
    assert not found, "raw reST in the rendered pages:\n" + "\n".join(
        f"  {page}: {', '.join(kinds)}" for page, kinds in found.items()
    )


def _code_blocks(page: str) -> list[str]:
    # A signature block (mkdocstrings wraps signatures itself; a constant's value, such as tqdm's bar format,
    # cannot be wrapped) is left out: only code the pages and docstrings show.
    page = re.sub(r'<div class="doc-signature[^"]*">\s*<pre\b.*?</pre>', "", page, flags=re.DOTALL)
    return [html.unescape(re.sub(r"<[^>]+>", "", block)) for block in re.findall(r"<pre\b.*?</pre>", page, re.DOTALL)]


def test_code_blocks_on_every_page_fit_80_columns(site: Path) -> None:
    too_wide, checked = [], 0
    for page in sorted(site.rglob("*.html")):
        for block in _code_blocks(page.read_text(encoding="utf-8")):
            checked += 1
            too_wide += [f"{page.relative_to(site)}: {len(line)} columns: {line}" for line in block.splitlines()
                         if len(line) > WIDEST_CODE_LINE]
    assert checked > 200, f"only {checked} code blocks in the site: the check would check little"
    assert not too_wide, f"code lines wider than {WIDEST_CODE_LINE} columns:\n" + "\n".join(too_wide)


def test_the_build_prints_nothing_but_its_progress(docs_build: tuple[Path, str]) -> None:
    # As `make docs` runs it: no banner (mkdocs-material's end of life, raw colour codes) and no warning.
    lines = [line for line in docs_build[1].splitlines() if line.strip()]
    assert lines, "the build printed nothing at all: is mkdocs' log captured?"
    other = [line for line in lines if not line.startswith("INFO")]
    assert not other, "mkdocs build printed:\n" + "\n".join(other)
