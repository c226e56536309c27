"""No crafted checkpoint under 1 MiB makes a load allocate more than 64 MiB, whatever its layout.

A seeded property test: `_crafted_memory_driver.py` derives crafted copies of real single-file, directory,
``dcp`` and ``deepspeed`` checkpoints (stride-0 and overlapping views, tensors of the wrong size, fabricx's
NumPy entries declaring huge shapes, deep nesting, compressed records inflating past 64 MiB, DCP metadata
declaring huge tensors, byte ranges or lists) and loads each with ``fabric.load`` in a child whose address
space may grow by 64 MiB at most, then copies what was restored. Each load works or raises
`CheckpointError`; none hits the limit, raises anything else, or runs past 20 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DRIVER = Path(__file__).with_name("_crafted_memory_driver.py")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks children under RLIMIT_AS (Linux)")
def test_crafted_checkpoints_never_make_a_load_allocate_more_than_64_mib(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(DRIVER), str(tmp_path), "20261204", "5"],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines and lines[-1].startswith("DONE"), done.stderr[-3000:]
    _, tried, failures = lines[-1].split()
    assert int(tried) >= 15, lines[-1]  # every layout's cases ran (deepspeed's where it is installed)
    assert int(failures) == 0, "\n".join(line for line in lines if line.startswith("FAIL"))
