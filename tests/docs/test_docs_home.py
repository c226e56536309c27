"""The home page tells a newcomer how to install fabricx, where its source is, and how to search these pages."""

from __future__ import annotations

import html
import re
from pathlib import Path


def _install_section(site: Path) -> str:
    page = (site / "index.html").read_text(encoding="utf-8")
    section = re.search(r'<h2 id="install">(.*?)<h2 ', page, re.DOTALL)
    assert section is not None, "the home page has no Install section"
    return section.group(1)


def test_the_home_page_shows_an_install_command(site: Path) -> None:
    blocks = [html.unescape(re.sub(r"<[^>]+>", "", block))
              for block in re.findall(r"<pre\b.*?</pre>", _install_section(site), re.DOTALL)]
    assert any(line.startswith("pip install -e .") for block in blocks for line in block.splitlines()), blocks


def test_the_home_page_says_where_the_source_is_and_how_search_works(site: Path) -> None:
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", "", _install_section(site))).split())
    assert "From a clone of the fabricx source repository" in text, text
    assert "search box works when the site is served" in text and "python -m http.server -d site" in text, text
