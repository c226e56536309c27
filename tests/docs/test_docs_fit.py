"""Facts the pages state stay true, and code in tables keeps identifiers whole.

(The width of code lines is checked on the built site: test_docs_render.py.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from fabricx.cli import main

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


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
