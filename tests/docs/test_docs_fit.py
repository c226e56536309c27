"""The pages fit the theme: code lines no wider than the text column, identifiers whole in tables, facts current.

How wide a code line the theme shows: Material's grid is at most 61rem wide; on a desktop window both sidebars
show (12.1rem each) and the content has 1.2rem margins each side, which leaves 34.4rem. Code is set at 0.85 of
the 0.8rem body text (0.68rem) with 1.1765em padding each side (1.6rem together), in Roboto Mono, whose
characters are 0.6em wide (0.408rem): (34.4 - 1.6) / 0.408 = 80 columns. Everything scales with the root font
size, so the bound holds at every window width where both sidebars show; a longer line is cut off behind a
scroll bar. (Below 76.25em the navigation folds away and about 110 columns show.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from fabricx.cli import main

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
WIDEST_CODE_LINE = 80


def _fenced_code_lines(text: str) -> list[tuple[int, str]]:
    lines, inside = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            inside = not inside
        elif inside:
            lines.append((number, line))
    return lines


def test_code_lines_on_every_page_fit_the_text_column() -> None:
    too_wide, checked = [], 0
    for page in sorted(DOCS.rglob("*.md")):
        for number, line in _fenced_code_lines(page.read_text(encoding="utf-8")):
            checked += 1
            if len(line) > WIDEST_CODE_LINE:
                too_wide.append(f"{page.relative_to(REPO)}:{number}: {len(line)} columns: {line}")
    assert checked > 500, f"only {checked} code lines found: the fence parser broke"
    assert not too_wide, f"code lines wider than {WIDEST_CODE_LINE} columns:\n" + "\n".join(too_wide)


def _cli_commands(capsys: pytest.CaptureFixture[str]) -> list[str]:
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = re.search(r"\{([a-z,]+)\}", capsys.readouterr().out)
    assert listed is not None, "fabricx --help lists no commands"
    return listed.group(1).split(",")


def test_the_cli_reference_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    page = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    commands = _cli_commands(capsys)
    usage = re.search(r"```text\n(.*?)```", page, re.DOTALL)
    assert usage is not None, "docs/reference/cli.md has no usage block"
    shown = set(re.findall(r"^fabricx (\w+)", usage.group(1), re.MULTILINE))
    assert shown == set(commands), f"the usage block shows {sorted(shown)}; the CLI has {sorted(commands)}"
    words = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
    assert f"has {words[len(commands)]} commands" in page, page[:300]


def test_the_fabric_migration_tables_say_a_suffixed_path_is_one_file() -> None:
    page = (DOCS / "migrating" / "lightning-fabric.md").read_text(encoding="utf-8")
    rows = [line for line in page.splitlines() if line.startswith("|") and re.search(r"checkpoint|save\(", line)]
    claims = [row for row in rows if "directory" in row]
    assert len(claims) >= 2, rows
    assert all("one file" in row for row in claims), "a table row calls every checkpoint a directory:\n" + "\n".join(
        row for row in claims if "one file" not in row
    )


def test_code_in_tables_keeps_identifiers_whole() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    styles = "".join((DOCS / name).read_text(encoding="utf-8") for name in config.get("extra_css", []))
    rule = re.search(r"\.md-typeset table:not\(\[class\]\) code\s*\{([^}]*)\}", styles)
    assert rule is not None, "no style for code in tables: Material breaks it mid-word"
    assert "word-break: normal" in rule.group(1) and "overflow-wrap: normal" in rule.group(1), rule.group(1)
