"""The launchers: re-running a script per rank (strategy="ddp") and spawn/fork (no-process checks)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from unittest import mock

import pytest
import torch

from fabricx import Fabric
from fabricx.environments.local import LocalEnvironment
from fabricx.strategies import DDPStrategy
from fabricx.strategies.launchers.launcher import threads_per_process
from fabricx.strategies.launchers.multiprocessing import MultiprocessingLauncher
from fabricx.strategies.launchers.subprocess_script import SubprocessScriptLauncher
from fabricx.utilities.exceptions import FabricxError

pytestmark = pytest.mark.distributed

# A script run as `python script.py OUT_DIR MODE`: strategy="ddp" re-runs it for local rank 1.
_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import torch
    from fabricx import Fabric
    from fabricx.strategies import DDPStrategy

    torch.set_num_threads(1)
    out_dir, mode = sys.argv[1], sys.argv[2]
    fabric = Fabric(accelerator="cpu", devices=2, strategy=DDPStrategy(timeout=60))
    fabric.launch()
    rank = fabric.global_rank
    with open(os.path.join(out_dir, f"rank{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    # A second Fabric in the same script joins the running job instead of starting more processes.
    again = Fabric(accelerator="cpu", devices=2, strategy="ddp")
    assert again.global_rank == rank and again.world_size == 2

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    for step in range(3):
        x = torch.full((2, 3), float(rank + step))
        fabric.backward(model(x).sum())
        optimizer.step()
        optimizer.zero_grad()
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = fabric.all_gather(weights)
    assert torch.equal(gathered[0], gathered[1]), gathered
    fabric.barrier()
    if mode == f"fail_rank{rank}":
        with open(os.path.join(out_dir, "failed_at.txt"), "w") as f:
            f.write(repr(time.time()))
        raise RuntimeError(f"rank {['zero', 'one'][rank]} failed on purpose")
    if mode != "ok":
        fabric.barrier()  # the surviving rank waits here for the one that failed
        time.sleep(120)
    with open(os.path.join(out_dir, f"done{rank}.txt"), "w") as f:
        f.write(" ".join(f"{v:.6f}" for v in weights.tolist()))
    """
)


def _run_script(tmp_path: Path, mode: str) -> subprocess.CompletedProcess:
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FABRICX_", "MASTER_", "LOCAL_RANK"))}
    return subprocess.run(
        [sys.executable, str(script), str(tmp_path), mode],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _assert_all_gone(tmp_path: Path) -> None:
    pids = [int(p.read_text()) for p in tmp_path.glob("rank*.pid")]
    assert len(pids) == 2
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if _alive(pid)], "a process of the job was left running"


def test_script_relaunch_trains_on_two_ranks(tmp_path: Path) -> None:
    result = _run_script(tmp_path, "ok")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "done0.txt").read_text() == (tmp_path / "done1.txt").read_text()
    _assert_all_gone(tmp_path)


@pytest.mark.parametrize(("mode", "message"), [
    ("fail_rank1", "rank one failed on purpose"),
    ("fail_rank0", "rank zero failed on purpose"),
])
def test_a_failing_rank_ends_the_whole_job(tmp_path: Path, mode: str, message: str) -> None:
    result = _run_script(tmp_path, mode)
    assert result.returncode != 0
    # The job ended within the process-group timeout (60 s) of the failure, not by running into it.
    assert time.time() - float((tmp_path / "failed_at.txt").read_text()) < 60
    assert "Traceback" in result.stderr and message in result.stderr
    assert not list(tmp_path.glob("done*.txt"))
    _assert_all_gone(tmp_path)


def test_relaunch_refuses_a_process_that_is_not_a_script() -> None:
    # Here __main__ is pytest: re-running it would start the test session again, not a rank.
    launcher = SubprocessScriptLauncher(LocalEnvironment(), num_processes=2, num_nodes=1)
    with pytest.raises(FabricxError, match="ddp_spawn"):
        launcher._command()


def test_spawn_refuses_what_cannot_be_pickled_with_advice() -> None:
    fabric = Fabric(accelerator="cpu", devices=2, strategy=DDPStrategy(start_method="spawn", timeout=60))
    with pytest.raises(FabricxError, match="module level"):
        fabric.launch(lambda fabric: None)


def test_launch_without_a_function_is_refused_for_spawn() -> None:
    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp_spawn")
    with pytest.raises(FabricxError, match="fabric.launch"):
        fabric.launch()


def test_fork_refused_once_cuda_is_initialised() -> None:
    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp_fork")
    with mock.patch.object(torch.cuda, "is_available", return_value=True), mock.patch.object(
        torch.cuda, "is_initialized", return_value=True
    ), pytest.raises(FabricxError, match="ddp_spawn"):
        fabric.launch(_noop)


def test_unknown_start_method_for_this_platform() -> None:
    strategy = DDPStrategy(start_method="spawn")
    with mock.patch("torch.multiprocessing.get_all_start_methods", return_value=["spawn"]), pytest.raises(
        FabricxError, match="not available"
    ):
        MultiprocessingLauncher(strategy, start_method="fork")


def test_threads_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads_per_process(8) == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    cores = len(os.sched_getaffinity(0))
    assert threads_per_process(2) == max(1, cores // 2)
    assert threads_per_process(10 * cores) == 1


def _noop(fabric: Fabric) -> None:
    return None


def test_a_launched_function_that_raises_stops_waiting_for_the_stopped_ranks_at_exit(monkeypatch) -> None:
    """The launcher stops the other ranks when its function raises, so at exit this rank does not wait for them at
    the exit barrier (it waited its full timeout, 30 s, when the script caught the error and ended normally)."""
    from fabricx.utilities import process_group

    monkeypatch.setitem(process_group._state, "failed", False)
    launcher = SubprocessScriptLauncher(LocalEnvironment(), num_processes=1, num_nodes=1)

    def refuse() -> None:
        raise FabricxError("refused on purpose")

    with pytest.raises(FabricxError, match="on purpose"):
        launcher.launch(refuse)
    assert process_group._state["failed"]
