"""Preemption: SIGTERM/SIGUSR1 noticed at a step boundary, a checkpoint saved, exit code for requeueing.

The end-to-end test sends SIGTERM to one rank of a running 2-process job (the way a scheduler warns a
job before killing it), checks the job leaves a complete checkpoint and exits with the requeue code,
relaunches it, and compares the final weights with an uninterrupted run bit for bit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from fabricx import Fabric
from fabricx.checkpoint import CheckpointManager, read_checkpoint
from fabricx.resume import exit_if_preempted
from fabricx.utilities.preemption import REQUEUE_EXIT_CODE, PreemptionWatcher, resolve_signals

JOB = r"""
import json, os, sys, time
from pathlib import Path
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from fabricx import Fabric
from fabricx.checkpoint import CheckpointManager
from fabricx.resume import exit_if_preempted
from fabricx.strategies import DDPStrategy

out, mode = Path(sys.argv[1]), sys.argv[2]
TOTAL, EVERY, READY_AT = 24, 5, 6
fabric = Fabric(accelerator="cpu", devices=2, strategy=DDPStrategy(timeout=60), preemption_signals=True)
fabric.launch()
torch.set_num_threads(1)
(out / f"pid_{fabric.global_rank}").write_text(str(os.getpid()))


def build():
    fabric.seed_everything(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.2), nn.Tanh(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model, optimizer = fabric.setup(model, optimizer)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g))
    loader = fabric.setup_dataloaders(DataLoader(data, batch_size=4, shuffle=True))
    return {"model": model, "optimizer": optimizer, "loader": loader, "step": 0}


def train(state, manager=None):
    model, optimizer = state["model"], state["optimizer"]
    while state["step"] < TOTAL:
        for x, y in state["loader"]:
            fabric.backward(nn.functional.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
            state["step"] += 1
            if manager is not None:
                if state["step"] % EVERY == 0:
                    fabric.save_checkpoint(manager, state)
                if state["step"] == READY_AT and fabric.is_global_zero:
                    (out / "ready").write_text("1")
                if state["step"] >= READY_AT and mode == "first":
                    time.sleep(0.2)  # leave the test time to send its signal while steps still run
                    if state["step"] == TOTAL - 2:  # a very slow machine: wait for the signal here
                        for _ in range(600):
                            if fabric.preemption_requested:
                                break
                            time.sleep(0.1)
                exit_if_preempted(fabric, manager, state)
            if state["step"] >= TOTAL:
                break


def weights(state):
    return {k: v.detach().clone() for k, v in state["model"].state_dict().items()}


manager = CheckpointManager(out / "project", total_limit=2)
state = build()
resumed_from = fabric.load_latest(manager, state)
train(state, manager)
if fabric.is_global_zero:
    torch.save(weights(state), out / "resumed.pt")
    (out / "resumed_from").write_text(str(resumed_from))
reference = build()
train(reference)
if fabric.is_global_zero:
    torch.save(weights(reference), out / "reference.pt")
"""


SPAWN_JOB = r"""
import os, signal, sys
from pathlib import Path
import torch
from fabricx import Fabric
from fabricx.checkpoint import CheckpointManager
from fabricx.resume import exit_if_preempted
from fabricx.strategies import DDPStrategy


def train(fabric, out):
    torch.set_num_threads(1)
    model = torch.nn.Linear(2, 2)
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    state = {"model": model, "optimizer": optimizer, "step": 0}
    for step in range(1, 1000):
        fabric.backward(model(torch.randn(4, 2)).sum())
        optimizer.step()
        optimizer.zero_grad()
        state["step"] = step
        if step == 3 and fabric.global_rank == 1:
            os.kill(os.getpid(), signal.SIGUSR1)
        exit_if_preempted(fabric, CheckpointManager(out), state)
    raise AssertionError("the preemption signal was not noticed")


if __name__ == "__main__":
    strategy = DDPStrategy(start_method="spawn", timeout=60)
    fabric = Fabric(accelerator="cpu", devices=2, strategy=strategy, preemption_signals=True)
    fabric.launch(train, Path(sys.argv[1]))
"""


@pytest.fixture(scope="module")
def spawned_job(tmp_path_factory):
    """A spawn-launched job that preempts itself; started early so that it runs alongside other jobs."""
    root = tmp_path_factory.mktemp("spawned")
    (root / "job.py").write_text(SPAWN_JOB)
    job = _run(root / "job.py", root, "")
    yield job, root
    if job.poll() is None:
        os.killpg(job.pid, signal.SIGKILL)
    job.wait()


def _run(script: Path, out: Path, mode: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, str(script), str(out), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )


def _wait_for(path: Path, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(f"the job ended (code {process.returncode}) early:\n{process.stdout.read()}")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"{path.name} did not appear within {timeout} s")
        time.sleep(0.05)


@pytest.mark.distributed
def test_sigterm_to_one_rank_saves_exits_for_requeue_and_resumes_exactly(tmp_path, spawned_job):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    out = tmp_path / "out"
    out.mkdir()

    first = _run(script, out, "first")
    try:
        _wait_for(out / "ready", first, timeout=120)
        rank1 = int((out / "pid_1").read_text())
        os.kill(rank1, signal.SIGTERM)  # only rank 1 is told; rank 0 learns it through the all-reduce
        log, _ = first.communicate(timeout=90)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert first.returncode == REQUEUE_EXIT_CODE, log
    assert not (out / "resumed.pt").exists(), "the preempted job must stop, not run to the end"

    manager = CheckpointManager(out / "project", total_limit=2)
    latest = manager.latest()
    assert latest is not None
    assert not [p.name for p in manager.directory.iterdir() if ".tmp-" in p.name or ".old-" in p.name]
    assert len(manager.list_complete()) <= 2, "retention holds during preemption too"
    saved = read_checkpoint(latest)
    stopped_at = saved.shared["step"]
    assert 6 <= stopped_at < 24, stopped_at
    assert saved.meta["world_size"] == 2 and saved.per_rank is not None
    assert set(saved.meta["per_rank_keys"]) >= {"loader", "__fabricx_rng__"}

    second = _run(script, out, "resume")
    log, _ = second.communicate(timeout=120)
    assert second.returncode == 0, log
    assert (out / "resumed_from").read_text() == str(latest)
    resumed = torch.load(out / "resumed.pt", weights_only=True)
    reference = torch.load(out / "reference.pt", weights_only=True)
    assert resumed.keys() == reference.keys()
    for key in reference:
        assert torch.equal(resumed[key], reference[key]), f"{key} differs from the uninterrupted run"


@pytest.mark.distributed
def test_spawned_ranks_hand_the_requeue_code_to_the_parent(spawned_job):
    job, root = spawned_job
    log, _ = job.communicate(timeout=180)
    assert job.returncode == REQUEUE_EXIT_CODE, log
    manager = CheckpointManager(root)
    assert manager.list_complete() == [manager.path_for(0)]
    assert read_checkpoint(manager.path_for(0)).shared["step"] == 3, "saved at the step the signal came"


# -- in-process checks of the pieces ---------------------------------------------------------------


def test_resolve_signals_accepts_true_names_and_numbers():
    assert resolve_signals(True) == [signal.SIGTERM, signal.SIGUSR1]
    assert resolve_signals("usr1") == [signal.SIGUSR1]
    assert resolve_signals(["SIGTERM", int(signal.SIGUSR2)]) == [signal.SIGTERM, signal.SIGUSR2]
    with pytest.raises(ValueError, match="SIGNOPE"):
        resolve_signals(["SIGNOPE"])


def test_watcher_records_chains_and_restores():
    seen = []
    before = signal.signal(signal.SIGUSR2, lambda signum, frame: seen.append(signum))
    try:
        watcher = PreemptionWatcher([signal.SIGUSR2])
        assert watcher.received is None
        os.kill(os.getpid(), signal.SIGUSR2)
        assert watcher.received == signal.SIGUSR2
        assert seen == [signal.SIGUSR2], "the handler installed before keeps running"
        watcher.restore()
        os.kill(os.getpid(), signal.SIGUSR2)
        assert seen == [signal.SIGUSR2, signal.SIGUSR2]
    finally:
        signal.signal(signal.SIGUSR2, before)


def test_watcher_refuses_other_threads():
    errors = []

    def make():
        try:
            PreemptionWatcher([signal.SIGUSR2])
        except RuntimeError as error:
            errors.append(str(error))

    thread = threading.Thread(target=make)
    thread.start()
    thread.join()
    assert errors and "main thread" in errors[0]


def test_single_process_preemption_saves_through_the_manager_and_exits_85(tmp_path):
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    fabric = Fabric(accelerator="cpu", preemption_signals=True)
    try:
        model = fabric.setup(torch.nn.Linear(2, 2))
        manager = CheckpointManager(tmp_path, total_limit=1)
        state = {"model": model, "step": 7}
        exit_if_preempted(fabric, manager, state)  # nothing received: carries on
        assert manager.latest() is None and fabric.preemption_requested is False
        os.kill(os.getpid(), signal.SIGUSR1)
        assert fabric.preemption_requested is True
        with pytest.raises(SystemExit) as exited:
            exit_if_preempted(fabric, manager, state)
        assert exited.value.code == REQUEUE_EXIT_CODE
        assert manager.latest() == manager.path_for(0)
        fresh = Fabric(accelerator="cpu")
        restored = {"model": fresh.setup(torch.nn.Linear(2, 2)), "step": 0}
        assert fresh.load_latest(manager, restored) == manager.path_for(0)
        assert restored["step"] == 7
        assert torch.equal(restored["model"].weight, model.weight)
        path = fresh.save_checkpoint(manager, restored)
        assert path == manager.path_for(1) and manager.list_complete() == [path], "keep-last-1 retention"
    finally:
        fabric._preemption_watcher.restore()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
