"""Threads per launched process: the cores divided among local processes unless the user set OMP_NUM_THREADS.

Each launch below runs a script that sets no thread count itself, as a user's script does; every rank reports
``torch.get_num_threads()``. The launch log says once (rank 0) what was chosen, and nothing when the user chose.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fabricx.strategies.launchers.launcher import THREADS_ENV

pytestmark = pytest.mark.distributed

REPO = Path(__file__).resolve().parents[2]
CORES = len(os.sched_getaffinity(0))
DIVIDED = max(1, CORES // 2)
# torch takes at most one thread per core from OMP_NUM_THREADS; all the cores differ from half of them.
USERS = CORES
ANNOUNCEMENT = "intra-op thread"

# `python train.py OUT_DIR LAUNCHER`: LAUNCHER is "ddp" (the script re-run per rank), "ddp_spawn", or "joined"
# (started by `fabricx run`, whose processes the Fabric joins).
_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import torch
    from fabricx import Fabric
    from fabricx.strategies import DDPStrategy

    def report(fabric, out_dir):
        info = {"threads": torch.get_num_threads(), "env": os.environ.get("OMP_NUM_THREADS")}
        with open(os.path.join(out_dir, f"rank{fabric.global_rank}.json"), "w") as f:
            json.dump(info, f)
        fabric.barrier()

    if __name__ == "__main__":
        out_dir, launcher = sys.argv[1], sys.argv[2]
        if launcher == "ddp_spawn":
            strategy = DDPStrategy(start_method="spawn", timeout=60)
        else:
            strategy = DDPStrategy(timeout=60)
        Fabric(accelerator="cpu", devices=2, strategy=strategy).launch(report, out_dir)
    """
)


def _launch(tmp_path: Path, launcher: str, user_threads: int | None) -> tuple[list[dict], str]:
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    drop = ("FABRICX_", "MASTER_", "LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "TORCHELASTIC", THREADS_ENV)
    env = {key: value for key, value in os.environ.items() if not key.startswith(drop)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if user_threads is not None:
        env[THREADS_ENV] = str(user_threads)
    command = [sys.executable, str(script), str(tmp_path), launcher]
    if launcher == "joined":
        command[1:1] = ["-m", "fabricx", "run", "--accelerator", "cpu", "--devices", "2"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    return [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)], result.stderr


def _announcements(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ANNOUNCEMENT in line]


def test_relaunched_ranks_divide_the_cores_and_say_so_once(tmp_path: Path) -> None:
    ranks, stderr = _launch(tmp_path, "ddp", user_threads=None)
    assert [rank["threads"] for rank in ranks] == [DIVIDED, DIVIDED], ranks
    assert _announcements(stderr) == [
        f"fabricx: 2 processes share {CORES} CPU cores: {DIVIDED} intra-op thread{'s' if DIVIDED > 1 else ''} "
        f"each (set {THREADS_ENV} to choose)."
    ], stderr


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["ddp", "ddp_spawn", "joined"])
@pytest.mark.skipif(CORES < 2, reason="with one core the user's count and the divided one are both 1")
def test_the_users_omp_num_threads_stays(tmp_path: Path, launcher: str) -> None:
    ranks, stderr = _launch(tmp_path, launcher, user_threads=USERS)
    assert ranks == [{"threads": USERS, "env": str(USERS)}] * 2
    assert not _announcements(stderr), stderr


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["ddp_spawn", "joined"])
def test_spawned_and_torchrun_ranks_divide_the_cores(tmp_path: Path, launcher: str) -> None:
    ranks, stderr = _launch(tmp_path, launcher, user_threads=None)
    assert [rank["threads"] for rank in ranks] == [DIVIDED, DIVIDED], ranks
    assert len(_announcements(stderr)) == 1, stderr
