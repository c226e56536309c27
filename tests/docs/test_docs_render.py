"""What a reader sees in the built site: no raw reST shows through, and the first pages' code fits.

Docstrings are Markdown (mkdocstrings cross-references, fenced examples); a reST role (`:meth:`, `:class:`,
`:attr:`) or an `Example::` marker left in one reaches the rendered HTML as literal text. Code blocks on
the home and getting-started pages fit 100 columns, so none is cut off in a browser window.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

RAW_REST = re.compile(r":(?:meth|class|attr):|Example::")
WIDEST_CODE_LINE = 100
FIRST_PAGES = ("index.html", "getting-started/index.html")


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
    return [html.unescape(re.sub(r"<[^>]+>", "", block)) for block in re.findall(r"<pre\b.*?</pre>", page, re.DOTALL)]


def test_code_blocks_on_the_first_pages_fit_100_columns(site: Path) -> None:
    too_wide = []
    for name in FIRST_PAGES:
        blocks = _code_blocks((site / name).read_text(encoding="utf-8"))
        assert blocks, f"{name} has no code block: the check would check nothing"
        for block in blocks:
            too_wide += [f"{name}: {len(line)} columns: {line}" for line in block.splitlines()
                         if len(line) > WIDEST_CODE_LINE]
    assert not too_wide, "code lines wider than 100 columns:\n" + "\n".join(too_wide)
