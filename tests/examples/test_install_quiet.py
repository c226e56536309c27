"""`pip install -e .` into a fresh virtual environment prints no deprecation banner.

The banner setuptools prints for a deprecated `pyproject.toml` comes from pip's isolated build environment, so
only a real install with build isolation shows it: a fresh venv, `pip install -v --no-deps -e .` (pip fetches
the build requirements from its configured index; `-v` shows everything the build backend prints, which a
quiet install hides only until setuptools makes the warning an error).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(300)


def _copy_project(destination: Path) -> None:
    # A copy, so the install's egg-info and build files never land in the checkout under test.
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, destination / name)
    shutil.copytree(REPO / "fabricx", destination / "fabricx", ignore=shutil.ignore_patterns("__pycache__"))


def test_editable_install_prints_no_deprecation(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    _copy_project(project)
    environment = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(environment)
    python = environment / "bin" / "python"
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    process = subprocess.run(
        [str(python), "-m", "pip", "install", "-v", "--no-deps", "-e", "."],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    output = process.stdout + process.stderr
    assert process.returncode == 0, f"pip install -e . failed (is the package index reachable?):\n{output[-4000:]}"
    assert "Successfully installed fabricx" in output, output[-2000:]
    banner = [line for line in output.splitlines() if "deprecat" in line.lower()]
    assert not banner, "the install printed deprecation warnings:\n" + "\n".join(banner)


def test_installed_metadata_carries_the_spdx_license() -> None:
    # The metadata itself, read from the checkout's pyproject: one SPDX expression and the license file shipped.
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        tomllib = pytest.importorskip("tomli")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    for pattern in project["license-files"]:
        assert list(REPO.glob(pattern)), f"license-files names {pattern!r}, which matches no file"


def _makefile_editable_install() -> tuple[dict[str, str], list[str]]:
    """The environment assignments and pip options of the Makefile's editable install line."""
    lines = (REPO / "Makefile").read_text().splitlines()
    line = next(line for line in lines if "pip install" in line and " -e " in line)
    before, after = line.split("$(PY) -m pip install", 1)
    assignments = dict(word.split("=", 1) for word in shlex.split(before))
    options = [word for word in shlex.split(after) if word.startswith("-") and word != "-e"]
    return assignments, options


@pytest.mark.slow  # a fresh virtual environment and pip from the package index: about 100 s
def test_the_makefile_install_prints_nothing(tmp_path: Path) -> None:
    # As `make demo` installs: pip upgraded first (pip 25+ shows the build backend's warnings), then quietly.
    project = tmp_path / "project"
    project.mkdir()
    _copy_project(project)
    environment = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(environment)
    python = str(environment / "bin" / "python")
    unset = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONWARNINGS")
    env = {key: value for key, value in os.environ.items() if key not in unset}
    upgrade = subprocess.run([python, "-m", "pip", "install", "-q", "--upgrade", "pip"], env=env,
                             capture_output=True, text=True, timeout=240)
    assert upgrade.returncode == 0, f"upgrading pip failed (is the package index reachable?):\n{upgrade.stderr[-2000:]}"
    assignments, options = _makefile_editable_install()
    process = subprocess.run([python, "-m", "pip", "install", *options, "--no-deps", "-e", "."], cwd=project,
                             env={**env, **assignments}, capture_output=True, text=True, timeout=240)
    output = process.stdout + process.stderr
    assert process.returncode == 0, output[-4000:]
    assert output.strip() == "", f"the Makefile's install printed:\n{output}"
