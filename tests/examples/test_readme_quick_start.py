"""Every Python block in the README runs as shown; the Trainer quick start resumes with ``ckpt_path="last"``.

The Fabric block is run (and checked for quiet output) by test_quiet_runs.py; every other block runs here, so a
block added to the README is run without a test naming it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.examples.test_quiet_runs import TWO_PROCESSES, _env

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(600)


def readme_python_blocks() -> list[str]:
    """The source of every ```python block in README.md, in order."""
    return re.findall(r"^```python\n(.*?)^```", (REPO / "README.md").read_text(encoding="utf-8"), re.DOTALL | re.M)


def _run(source: str, cwd: Path) -> str:
    (cwd / "block.py").write_text(source)
    process = subprocess.run(
        [sys.executable, "block.py"], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300
    )
    output = process.stdout + process.stderr
    assert process.returncode == 0, f"README block exited {process.returncode}:\n{source}\n{output[-4000:]}"
    return output


def _trainer_block() -> str:
    blocks = [block for block in readme_python_blocks() if "Trainer(" in block]
    assert len(blocks) == 1, "README.md should show one TrainModule + Trainer quick start"
    block = blocks[0]
    assert 'ckpt_path="last"' in block and "max_epochs=3" in block and TWO_PROCESSES in block, block
    return block


def test_the_readme_has_a_fabric_and_a_trainer_quick_start() -> None:
    blocks = readme_python_blocks()
    fabric = [block for block in blocks if "Fabric(" in block]
    # test_quiet_runs.py runs the Fabric block; the Trainer block runs below. Any other block needs a test here.
    assert len(fabric) == 1 and TWO_PROCESSES in fabric[0], blocks
    assert len(blocks) == 2, f"a new README block ({len(blocks)} now): run it in this file"
    _trainer_block()
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "`from fabricx.compat.accelerate import Accelerator`" in readme


def _trainer_resumes(tmp_path: Path, devices: str) -> None:
    block = _trainer_block().replace(TWO_PROCESSES, devices)
    first = _run(block, tmp_path)
    assert "Epoch 2/2" in first, first[-3000:]
    # One more epoch asked for: the second run restores the last checkpoint and trains only epoch 3.
    second = _run(block.replace("max_epochs=3", "max_epochs=4"), tmp_path)
    assert "Epoch 3/3" in second and "Epoch 0/3" not in second, second[-3000:]
    assert (tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt").is_file()


def test_trainer_quick_start_runs_and_resumes_from_last(tmp_path: Path) -> None:
    _trainer_resumes(tmp_path, "devices=1")


@pytest.mark.slow
def test_trainer_quick_start_on_two_processes(tmp_path: Path) -> None:
    _trainer_resumes(tmp_path, TWO_PROCESSES)
