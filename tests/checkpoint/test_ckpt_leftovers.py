"""What a killed save or a stray file leaves beside the checkpoints never wins and never accumulates.

* A stray file named like a checkpoint (``checkpoints/checkpoint_9``, two bytes) beside a complete
  ``checkpoint_0``: "latest" is ``checkpoint_0``, for the manager, ``fabric.load_latest`` and the Accelerate
  adapter's ``load_state()``.
* Eight single-file saves killed in a row (a real SIGKILL of the writing process, mid-write) leave their
  ``.tmp-`` files; the next saves into that folder remove all of them, while a live writer's temporary file
  is left alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch
from torch import nn

from fabricx import Fabric
from fabricx.checkpoint.manager import CheckpointManager

ROOT = Path(__file__).resolve().parents[2]


def test_a_stray_file_named_like_a_checkpoint_never_wins_latest(tmp_path: Path) -> None:
    from fabricx.compat.accelerate import Accelerator, ProjectConfiguration

    fabric = Fabric(accelerator="cpu", devices=1)
    model = nn.Linear(2, 2)
    fabric.save_checkpoint(tmp_path, {"model": model, "step": 3})
    manager = CheckpointManager(tmp_path)
    stray = manager.directory / "checkpoint_9"
    stray.write_bytes(b"PK")
    assert manager.latest() == manager.path_for(0)
    state = {"model": nn.Linear(2, 2), "step": 0}
    assert fabric.load_latest(tmp_path, state) == manager.path_for(0) and state["step"] == 3
    assert stray.read_bytes() == b"PK"  # not ours to delete: only never picked

    accelerator = Accelerator(
        cpu=True,
        project_config=ProjectConfiguration(project_dir=str(tmp_path / "acc"), automatic_checkpoint_naming=True),
    )
    prepared = accelerator.prepare(nn.Linear(2, 2))
    accelerator.save_state()
    (tmp_path / "acc" / "checkpoints" / "checkpoint_5").write_bytes(b"\x80\x04")
    assert Path(accelerator.load_state()).name == "checkpoint_0"
    assert isinstance(prepared, nn.Module)


_KILLED_SAVES = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    import torch
    from fabricx.checkpoint.layouts.single_file import write_file

    folder = Path(sys.argv[1])
    state = {"w": torch.ones(4 * 2**20)}  # 16 MiB: the kill lands while it is written
    for attempt in range(8):
        name = "last.ckpt" if attempt % 2 else f"epoch={attempt}.ckpt"
        before = set(folder.glob("*.tmp-*"))
        for _ in range(20):  # until a kill lands mid-write (the .tmp- file is there, not yet renamed)
            pid = os.fork()
            if pid == 0:
                write_file(folder / name, state)
                os._exit(0)
            started = time.monotonic()
            while not set(folder.glob("*.tmp-*")) - before and time.monotonic() - started < 10:
                time.sleep(0.0005)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            if set(folder.glob("*.tmp-*")) - before:
                break
    print(len(list(folder.glob("*.tmp-*"))))
    """
)


def test_left_overs_of_killed_single_file_saves_are_removed_by_the_next_saves(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_SAVES, str(folder)], capture_output=True, text=True, timeout=240, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    left = sorted(p.name for p in folder.glob("*.tmp-*"))
    assert len(left) == 8, left  # every kill left its temporary file
    live = folder / "epoch=99.ckpt.tmp-f0123456789ab"  # a writer that is still running holds its file locked
    with open(live, "wb") as handle:
        _lock(handle)
        fabric = Fabric(accelerator="cpu", devices=1)
        fabric.save(folder / "last.ckpt", {"model": nn.Linear(2, 2), "step": 1})
        fabric.save(folder / "epoch=9.ckpt", {"model": nn.Linear(2, 2), "step": 2})
        remaining = sorted(p.name for p in folder.glob("*.tmp-*"))
    assert remaining == [live.name]
    assert torch.load(folder / "last.ckpt", weights_only=True)["step"] == 1


def _lock(handle) -> None:
    import fcntl

    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
