"""Accelerate's shipped test scripts (``accelerate/test_utils/scripts/`` of the installed package) run
through the adapter, one process and two (see ``run_scripts.py`` for which names are swapped).

Every case must pass, or be listed in docs/migrating/accelerate.md under "Accelerate's own test
scripts" as a deliberate difference; a listed case that starts passing must leave the list.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
RUNNER = HERE / "run_scripts.py"
GUIDE = REPO / "docs" / "migrating" / "accelerate.md"
SCRIPTS = ["test_ops", "test_sync", "test_script", "external_deps/test_metrics"]

pytestmark = pytest.mark.distributed


def _documented_differences() -> set[str]:
    text = GUIDE.read_text()
    section = text.split("### Accelerate's own test scripts", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\* `([^`]+)`", section, flags=re.MULTILINE))


def _run(tmp_path: Path, processes: int, scripts: list[str]) -> dict[str, str]:
    out = tmp_path / f"p{processes}"
    if processes == 1:
        command = [sys.executable, str(RUNNER), str(out), *scripts]
    else:
        command = [sys.executable, "-m", "fabricx", "run", "--accelerator", "cpu", "--devices", str(processes)]
        command += [str(RUNNER), str(out), *scripts]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=420)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-5000:])
    merged: dict[str, str] = {}
    for rank in range(processes):
        for case, outcome in json.loads((out / f"rank_{rank}.json").read_text()).items():
            key = f"{processes}p {case}"
            if merged.get(key, "passed") == "passed":
                merged[key] = outcome
    return merged


def test_accelerate_scripts_pass_through_the_adapter(tmp_path):
    results = _run(tmp_path, 1, SCRIPTS)
    # test_sync once more with Accelerate's scaling of the short last window (the documented opt-in).
    results.update(_run(tmp_path, 2, [*SCRIPTS, "test_distributed_data_loop", "test_sync@full_window"]))
    failed = {case: outcome for case, outcome in results.items() if outcome != "passed"}
    documented = _documented_differences()
    passed = len(results) - len(failed)
    print(f"Accelerate's scripts through the adapter: {passed} of {len(results)} cases pass")
    # A run that stopped early would have few cases: the scripts' mains reach all of these.
    assert len(results) >= 60, sorted(results)
    assert set(failed) <= documented, {case: failed[case] for case in set(failed) - documented}
    assert documented <= set(failed), f"listed as differences but passing now: {sorted(documented - set(failed))}"
