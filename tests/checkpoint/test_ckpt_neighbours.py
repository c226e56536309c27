"""Two jobs in one checkpoint directory, and a directory full of what dead jobs left: a job's clean-up
never takes a running neighbour's save, and thousands of left-overs do not stall the next save."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from torch import nn

from fabricx import Fabric
from fabricx.checkpoint.atomic import wait_for_background_removals
from fabricx.checkpoint.format import read_checkpoint
from fabricx.checkpoint.manager import CheckpointManager

_ENV = {**os.environ, "OMP_NUM_THREADS": "1"}

# Job A: an asynchronous save whose background write is held (by this script, not by fabricx) until
# job B has saved into the same manager directory, so B's clean-up runs while A's copy is in flight.
JOB_A = textwrap.dedent(
    """
    import json, os, sys, time
    import torch
    from torch import nn
    import fabricx.checkpoint.format as checkpoint_format
    from fabricx import Fabric

    project, started, go = sys.argv[1:4]
    original_dump = checkpoint_format.dump

    def held_dump(state, directory, stem):
        if stem.startswith("rank_"):  # the shared files are written: hold before this rank's own
            while not os.path.exists(go):
                time.sleep(0.01)
        return original_dump(state, directory, stem)

    checkpoint_format.dump = held_dump
    fabric = Fabric(accelerator="cpu")
    model = fabric.setup_module(nn.Linear(8, 8))
    path = fabric.save_checkpoint(project, {"model": model, "job": "A"}, async_save=True)
    open(started, "w").write(str(path))
    try:
        fabric.checkpointer.wait()
        print(json.dumps({"path": str(path), "error": None}))
    except Exception as error:
        print(json.dumps({"path": str(path), "error": f"{type(error).__name__}: {error}"}))
    """
)

JOB_B = textwrap.dedent(
    """
    import json, os, sys, time
    from torch import nn
    from fabricx import Fabric

    project, started, go = sys.argv[1:4]
    deadline = time.time() + 120
    while not os.path.exists(started) and time.time() < deadline:
        time.sleep(0.01)
    fabric = Fabric(accelerator="cpu")
    model = fabric.setup_module(nn.Linear(8, 8))
    path = fabric.save_checkpoint(project, {"model": model, "job": "B"})  # its retention cleans left-overs
    open(go, "w").write("go")
    print(json.dumps({"path": str(path)}))
    """
)


def test_a_neighbours_cleanup_never_removes_an_in_flight_async_save(tmp_path: Path) -> None:
    project, started, go = str(tmp_path / "project"), str(tmp_path / "started"), str(tmp_path / "go")
    jobs = [
        subprocess.Popen([sys.executable, "-c", script, project, started, go], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=_ENV)
        for script in (JOB_A, JOB_B)
    ]
    outputs = [job.communicate(timeout=240) for job in jobs]
    for job, (_out, err) in zip(jobs, outputs, strict=True):
        assert job.returncode == 0, err[-2000:]
    a, b = (json.loads(out.strip().splitlines()[-1]) for out, _ in outputs)
    assert a["error"] is None, a["error"]
    assert Path(a["path"]).name == "checkpoint_0" and Path(b["path"]).name == "checkpoint_1"
    manager = CheckpointManager(project)
    assert [p.name for p in manager.list_complete()] == ["checkpoint_0", "checkpoint_1"]
    assert read_checkpoint(a["path"]).shared["job"] == "A" and read_checkpoint(b["path"]).shared["job"] == "B"
    assert sorted(p.name for p in manager.directory.iterdir()) == ["checkpoint_0", "checkpoint_1"]


def _plant_and_save(tmp_path: Path, count: int) -> tuple[float, int]:
    manager = CheckpointManager(tmp_path, total_limit=2)
    manager.directory.mkdir(parents=True)
    for index in range(count):  # what killed jobs left: unfinished copies, with files in them
        leftover = manager.directory / f"checkpoint_{index}.tmp-dead{index}"
        leftover.mkdir()
        (leftover / "shared.json").write_bytes(b"{}")
    fabric = Fabric(accelerator="cpu")
    model = fabric.setup_module(nn.Linear(4, 4))
    start = time.perf_counter()
    fabric.save_checkpoint(manager, {"model": model, "step": 1})
    blocked = time.perf_counter() - start
    assert wait_for_background_removals(timeout=600)  # the deletions run on, off the save's path
    return blocked, len(list(manager.directory.iterdir()))


def test_a_thousand_stale_leftovers_do_not_stall_the_next_save(tmp_path: Path) -> None:
    blocked, left = _plant_and_save(tmp_path, 1000)
    assert left == 1, left  # the new checkpoint, nothing else
    assert blocked < 3.0, f"the save was blocked {blocked:.1f} s by 1000 left-overs"


@pytest.mark.slow
def test_five_thousand_stale_leftovers_do_not_stall_the_next_save(tmp_path: Path) -> None:
    blocked, left = _plant_and_save(tmp_path, 5000)
    print(f"save blocked {blocked:.2f} s with 5000 stale left-overs")
    assert left == 1, left
    assert blocked < 10.0, f"the save was blocked {blocked:.1f} s by 5000 left-overs"
