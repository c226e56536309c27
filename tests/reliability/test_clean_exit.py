"""Finished jobs exit 0, and the requeue request reaches the scheduler.

* The jobs of ``benchmarks/exit_soak.py`` (a DDP backward right before the end; the Accelerate adapter
  ending with ``end_training()``) started a few times: every run exits 0 with every rank finished.
* Releasing the group never hangs on a peer that is already gone.
* ``fabric.exit_for_requeue()`` under ``fabricx run`` (torchrun) gives the requeue code 85, not
  torchrun's 1, and on SLURM rank 0 asks ``scontrol requeue`` for the job (a stand-in ``scontrol``
  on PATH records the call; the SLURM variables are the only thing mocked).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from fabricx.cli import _all_left_for_requeue
from fabricx.utilities.preemption import REQUEUE_EXIT_CODE
from fabricx.utilities.requeue import request_slurm_requeue, slurm_job_id

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.exit_soak import run_once  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(400)]


@pytest.mark.parametrize("kind,runs", [("fabricx", 2), ("accelerate", 1)])
def test_finished_jobs_exit_zero_every_time(tmp_path: Path, kind: str, runs: int) -> None:
    for index in range(runs):
        code, tail = run_once(kind, tmp_path)
        assert code == 0, f"{kind} run {index + 1} exited {code}:\n{tail}"


_PEER_GONE = textwrap.dedent(
    """
    import os, sys, time
    import torch.distributed as dist
    from fabricx.utilities.process_group import release_process_group

    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    dist.barrier()
    if rank == 1:
        os._exit(0)  # gone without a word
    time.sleep(0.5)
    started = time.monotonic()
    release_process_group(timeout=3.0)
    print(f"released in {time.monotonic() - started:.2f}", flush=True)
    """
)

_REQUEUE_JOB = textwrap.dedent(
    """
    import torch
    from fabricx import Fabric

    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()
    model = fabric.setup(torch.nn.Linear(2, 1))
    fabric.backward(model(torch.ones(1, 2)).sum())
    fabric.exit_for_requeue()
    """
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "SLURM_", "RANK", "LOCAL_RANK"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def test_release_does_not_hang_on_a_peer_that_is_gone(tmp_path: Path) -> None:
    from fabricx.environments.local import find_free_port

    script = tmp_path / "peer_gone.py"
    script.write_text(_PEER_GONE)
    port = str(find_free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, str(script)],
            env=_env(RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    released = float(outputs[0][0].split("released in ")[1])
    assert released < 10.0  # the bounded wait (3 s) plus the idle check, not the group's timeout


def test_exit_for_requeue_under_fabricx_run_gives_85_and_asks_slurm(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "scontrol_calls.txt"
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    scontrol.chmod(0o755)
    script = tmp_path / "requeue_job.py"
    script.write_text(_REQUEUE_JOB)
    env = _env(
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", SLURM_JOB_ID="4242", SLURM_JOB_NAME="train",
        OMP_NUM_THREADS="1",
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "fabricx", "run", "--accelerator", "cpu", "--devices", "2", str(script)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == REQUEUE_EXIT_CODE, (done.returncode, done.stderr[-3000:])
    assert calls.read_text().split("\n")[:-1] == ["requeue 4242"]  # once, from global rank 0
    assert time.monotonic() - started < 280


def test_slurm_job_id_and_requeue_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.startswith("SLURM_")] + ["FABRICX_SLURM_REQUEUE"]:
        monkeypatch.delenv(name, raising=False)
    assert slurm_job_id() is None and request_slurm_requeue() is False
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_JOB_NAME", "bash")
    assert slurm_job_id() is None  # an interactive allocation is never requeued
    monkeypatch.setenv("SLURM_JOB_NAME", "train")
    assert slurm_job_id() == "77"
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "70")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    assert slurm_job_id() == "70_3"
    monkeypatch.setenv("FABRICX_SLURM_REQUEUE", "0")
    assert slurm_job_id() is None
    monkeypatch.delenv("FABRICX_SLURM_REQUEUE")
    # A refusal (a job submitted with --no-requeue) is reported, not raised.
    scontrol = tmp_path / "scontrol"
    scontrol.write_text("#!/bin/sh\necho 'Requested operation is presently disabled' >&2\nexit 1\n")
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert request_slurm_requeue() is False
    monkeypatch.setenv("PATH", "/nonexistent")
    assert request_slurm_requeue() is False


def test_torchrun_failures_count_as_requeue_only_when_every_rank_left_for_it() -> None:
    def error(*codes: int) -> SimpleNamespace:
        return SimpleNamespace(failures={rank: SimpleNamespace(exitcode=code) for rank, code in enumerate(codes)})

    assert _all_left_for_requeue(error(85, 85))
    assert _all_left_for_requeue(error(85, -15))  # the agent stopped a rank after the first left
    assert not _all_left_for_requeue(error(85, 1))
    assert not _all_left_for_requeue(error(1))
    assert not _all_left_for_requeue(SimpleNamespace())
