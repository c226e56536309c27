"""Crashes: a rank that raises, or is killed with SIGKILL, ends the whole 2-process job quickly.

Each case runs a real job (``strategy="ddp"``: the script re-runs itself for rank 1) in its own
session, so that "no orphans" can be checked as "no process of that session is left".
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fabricx.checkpoint import CheckpointManager, read_checkpoint

# Well under the job's 60 s process-group timeout: the launcher, not the timeout, must end the job.
PG_TIMEOUT = 60

JOB = r"""
import json, os, sys, time
from pathlib import Path
import torch
from torch import nn
from fabricx import Fabric
from fabricx.checkpoint import CheckpointManager
from fabricx.strategies import DDPStrategy

out, mode = Path(sys.argv[1]), sys.argv[2]
# With preemption signals on, the SIGTERM a dying parent sends its children is caught, not fatal:
# the job must still end (through the broken process group) rather than hang.
fabric = Fabric(accelerator="cpu", devices=2, strategy=DDPStrategy(timeout=60), preemption_signals=mode == "kill0")
fabric.launch()
torch.set_num_threads(1)
rank = fabric.global_rank
(out / f"pid_{rank}").write_text(str(os.getpid()))
fabric.seed_everything(0)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = fabric.setup(model, optimizer)
manager = CheckpointManager(out / "project")
state = {"model": model, "optimizer": optimizer, "step": 0}
while True:
    fabric.backward(model(torch.randn(8, 4)).pow(2).mean())
    optimizer.step()
    optimizer.zero_grad()
    state["step"] += 1
    if state["step"] == 2:
        fabric.save_checkpoint(manager, state)
        if rank == 0:
            (out / "saved").write_text(json.dumps(model.weight.tolist()))
    if state["step"] == 4:
        if mode == "raise" and rank == 1:
            (out / "fault_time").write_text(str(time.time()))
            raise RuntimeError("rank 1 failed on purpose at step 4")
        if rank == 0:
            (out / "ready").write_text("1")
    if state["step"] >= 4:
        time.sleep(0.05)
"""


def _session_processes(session: int) -> list[int]:
    """Live (non-zombie) processes of a session."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":
            found.append(int(entry))
    return found


def _wait_until_gone(session: int, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := _session_processes(session)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _wait_for(path: Path, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, f"the job ended early (code {process.returncode})"
        assert time.monotonic() < deadline, f"{path.name} did not appear within {timeout} s"
        time.sleep(0.05)


MODES = ("raise", "kill1", "kill0")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """The three jobs, started together: their start-up (mostly importing torch) overlaps."""
    root = tmp_path_factory.mktemp("crash_jobs")
    script = root / "job.py"
    script.write_text(JOB)
    started = {}
    for mode in MODES:
        out = root / mode
        out.mkdir()
        with open(out / "log", "w") as log:
            started[mode] = subprocess.Popen(
                [sys.executable, str(script), str(out), mode],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
                start_new_session=True,
            )
    yield {mode: (job, root / mode) for mode, job in started.items()}
    for job in started.values():
        if _session_processes(job.pid):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()


@pytest.mark.distributed
@pytest.mark.parametrize("mode", MODES)
def test_a_failing_rank_ends_the_whole_job(jobs, mode):
    job, out = jobs[mode]
    if mode == "raise":
        job.wait(timeout=240)
        fault_time = float((out / "fault_time").read_text())
    else:
        _wait_for(out / "ready", job, timeout=240)
        victim = int((out / ("pid_1" if mode == "kill1" else "pid_0")).read_text())
        fault_time = time.time()
        os.kill(victim, signal.SIGKILL)
        job.wait(timeout=PG_TIMEOUT + 30)
    left = _wait_until_gone(job.pid, PG_TIMEOUT)
    ended = time.time()
    log = (out / "log").read_text()

    assert job.returncode != 0, log
    assert not left, f"processes of the job outlived it: {left}"
    assert ended - fault_time < PG_TIMEOUT, f"the job took {ended - fault_time:.1f} s to end after the fault"
    if mode == "raise":
        assert "RuntimeError: rank 1 failed on purpose at step 4" in log
        assert 'raise RuntimeError("rank 1 failed on purpose' in log, "the failing rank's traceback is shown"
    elif mode == "kill1":
        assert "local rank 1" in log and "exited with code -9 (SIGKILL)" in log, log
    else:
        assert job.returncode == -signal.SIGKILL

    manager = CheckpointManager(out / "project")
    assert manager.list_complete() == [manager.path_for(0)]
    loaded = read_checkpoint(manager.path_for(0))
    assert loaded.shared["step"] == 2
    saved_weight = torch.tensor(json.loads((out / "saved").read_text()))
    assert torch.equal(loaded.shared["model"]["weight"], saved_weight)
