"""The README's quick start, run as a user runs it, prints no warning the user did not cause.

A dependency's internal deprecation (torchdata's ``'set_vital' is deprecated``, DeepSpeed's use of deprecated
torch collectives, DeepSpeed's "Setting accelerator to CPU" and its tqdm bars in ``fabricx consolidate``) is
nothing a user can act on. The user's own warnings still show: the script warns once itself.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MARKER = "quick-start-user-warning"
TWO_PROCESSES = 'devices=2, strategy="ddp"'

pytestmark = pytest.mark.timeout(600)


def _quick_start() -> str:
    code = re.search(r"## Quick start\s+```python\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)
    assert code, "README.md has no ```python block under '## Quick start'"
    source = code.group(1)
    assert TWO_PROCESSES in source, f"the quick start no longer says {TWO_PROCESSES}; update this test"
    return source + f'import warnings\nwarnings.warn("{MARKER}")\n'


def _env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "FABRICX_"))}
    # A user's shell: no pytest warning filters, no DeepSpeed accelerator chosen for them.
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PYTHONWARNINGS", "DS_ACCELERATOR"):
        env.pop(name, None)
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return env


def _run(args: list[str], cwd: Path) -> str:
    process = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300
    )
    output = process.stdout + process.stderr
    assert process.returncode == 0, f"{' '.join(args)} exited {process.returncode}:\n{output[-4000:]}"
    return output


def _assert_only_the_users_warning(output: str, processes: int) -> None:
    ours = [line for line in output.splitlines() if MARKER in line]
    # Each process warns once: the warning line and the source line it points to.
    assert len(ours) == 2 * processes, f"the user's own warning must still show once per process:\n{output}"
    others = [line for line in output.splitlines() if MARKER not in line and line.strip()]
    assert not others, "the run printed what the user did not cause:\n" + "\n".join(others)


# Two processes cost a launch (~15 s on a loaded machine): slow suite; one process stays in the fast one.
@pytest.mark.parametrize("processes", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_quick_start_prints_only_the_users_warning(tmp_path: Path, processes: int) -> None:
    source = _quick_start()
    if processes == 1:
        source = source.replace(TWO_PROCESSES, "devices=1")
    (tmp_path / "quick_start.py").write_text(source)
    _assert_only_the_users_warning(_run(["quick_start.py"], tmp_path), processes)


@pytest.mark.slow
@pytest.mark.deepspeed
def test_deepspeed_quick_start_and_consolidate_are_quiet(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    source = _quick_start().replace(TWO_PROCESSES, 'devices=2, strategy="deepspeed_stage_2"')
    source = source.replace(', precision="bf16-mixed"', "")
    (tmp_path / "quick_start.py").write_text(source)
    _assert_only_the_users_warning(_run(["quick_start.py"], tmp_path), 2)
    output = _run(["-m", "fabricx", "consolidate", "checkpoints/last", "-o", "full"], tmp_path)
    assert output.strip() == "Consolidated checkpoints/last into full", output
