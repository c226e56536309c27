"""One strict build of the documentation site per test session, as `make docs` builds it, shared by every docs test."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def makefile_docs_environment() -> dict[str, str]:
    """The variables the Makefile's `docs` recipe sets before `mkdocs build`."""
    recipe = re.search(r"^docs:.*\n\t(.*)mkdocs build", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert recipe is not None, "the Makefile has no `docs` recipe running mkdocs build"
    words = [word for word in shlex.split(recipe.group(1)) if "=" in word]
    return dict(word.split("=", 1) for word in words)


@pytest.fixture(scope="session")
def docs_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The built site and everything the build printed.

    `make test` builds the site once (its `docs` step, strict) and names it and its log in
    ``FABRICX_BUILT_SITE`` / ``FABRICX_BUILT_SITE_LOG``; otherwise each test session builds its own.
    """
    built, log = os.environ.get("FABRICX_BUILT_SITE"), os.environ.get("FABRICX_BUILT_SITE_LOG")
    if built and log:
        site, output = REPO / built, (REPO / log).read_text()
        assert (site / "index.html").is_file(), f"FABRICX_BUILT_SITE={built} holds no built site"
        return site, output
    out = tmp_path_factory.mktemp("site")
    process = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600, env={**os.environ, **makefile_docs_environment()},
    )
    output = process.stdout + process.stderr
    assert process.returncode == 0, f"mkdocs build --strict failed:\n{output[-4000:]}"
    return out, output


@pytest.fixture(scope="session")
def site(docs_build: tuple[Path, str]) -> Path:
    return docs_build[0]
