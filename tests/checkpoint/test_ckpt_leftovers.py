"""What a killed save or a stray file leaves beside the checkpoints never wins and never accumulates.

* A stray file named like a checkpoint (``checkpoints/checkpoint_9``, two bytes) beside a complete
  ``checkpoint_0``: "latest" is ``checkpoint_0``, for the manager, ``fabric.load_latest`` and the Accelerate
  adapter's ``load_state()``.
* Eight single-file saves killed in a row (a real SIGKILL of the writing process, mid-write) leave their
  ``.tmp-`` files; the next saves into that folder remove all of them, while a live writer's temporary file
  is left alone.
* One rule (`fabricx.checkpoint.atomic.leftover_of`) for every layout: a save in any layout removes every
  dead writer's left-over in its folder, whatever checkpoint name it was left by (staging folders, swap
  copies, interrupted deletions, claims), keeps a live writer's, and never touches a user's look-alike (a
  regular file with another token, a link, a pipe, a non-empty ``.reserved``, an ``.old-`` copy that is the
  only readable one); thousands of them go in one save, off the save's path, and none is ever "latest".
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from fabricx import Fabric
from fabricx.checkpoint.atomic import leftover_of, prepare_directory, wait_for_background_removals
from fabricx.checkpoint.manager import CheckpointManager, claim_path
from fabricx.utilities.exceptions import CheckpointError

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
    from fabricx.checkpoint.torch_files import write_file

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


def _plant(folder: Path, outside: Path) -> tuple[set[str], set[str]]:
    """What killed writers of other checkpoint names left in ``folder`` (returned first), and what must stay:
    a live writer's and a user's look-alikes."""
    dead = {
        "epoch=1.ckpt.tmp-f0123456789ab": b"half a file",  # a single-file save killed mid-write
        "step_3.tmp-1a2b3c4d/shared.json": b"{}",  # a directory save killed before its commit
        "step_4.tmp-save/__0_0.distcp": b"shard",  # a dcp save killed (the default distributed token)
        "step_2.old-5e6f7a8b/meta.json": b"{}",  # a swap killed before its old copy went (step_2 is there)
        "step_5.del-0badcafe/rank_0.safetensors": b"x",  # a deletion killed midway
        "model.bin.del-0a1b2c3d": b"x",  # a file the background remover had renamed
        "last.ckpt.reserved": b"",  # a killed writer's claim
    }
    user = {
        "step_2/meta.json": b"{}",
        "notes.tmp-backup": b"mine",  # a regular file with another token than a writer's
        "weights.old-2": b"mine",
        "weights": b"mine",
        "seats.reserved": b"mine",  # not an empty claim file
        "only.old-1234abcd/meta.json": b"{}",  # its checkpoint's only copy: "only" itself is missing
    }
    for name, data in {**dead, **user}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    (outside / "keep.txt").write_bytes(b"outside")
    (folder / "link.tmp-abcdef12").symlink_to(outside, target_is_directory=True)
    os.mkfifo(folder / "pipe.tmp-f0123456789ab")
    (folder / "claimed.tmp-9f8e7d6c").mkdir()  # a running writer's folder: its claim below is held
    kept = {name.split("/")[0] for name in user} | {"link.tmp-abcdef12", "pipe.tmp-f0123456789ab"}
    return {name.split("/")[0] for name in dead}, kept | {"claimed.tmp-9f8e7d6c", "claimed.reserved"}


@pytest.mark.parametrize(("layout", "name"), [("directory", "final"), ("single_file", "final.pt"), ("dcp", "final")])
def test_a_save_in_any_layout_removes_dead_writers_leftovers_by_one_rule(
    tmp_path: Path, layout: str, name: str
) -> None:
    folder, outside = tmp_path / "checkpoints", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    dead, kept = _plant(folder, outside)
    assert all(leftover_of(left) is not None for left in dead)
    claim = claim_path(folder / "claimed")
    live = prepare_directory(folder / "running")  # this process is still writing it: locked
    fabric = Fabric(accelerator="cpu", devices=1)
    model = fabric.setup_module(nn.Linear(2, 2))
    fabric.save(folder / name, {"model": model, "step": 7}, layout=layout)
    assert wait_for_background_removals(timeout=60)
    remaining = {entry.name for entry in folder.iterdir()}
    assert remaining == kept | {live.name, name}, sorted(remaining ^ (kept | {live.name, name}))
    assert (outside / "keep.txt").read_bytes() == b"outside"
    assert claim is not None
    claim.release()
    state = {"model": nn.Linear(2, 2), "step": 0}
    fabric.load(folder / name, state)
    assert state["step"] == 7


def test_left_overs_never_count_as_checkpoints_nor_as_latest(tmp_path: Path) -> None:
    from fabricx.train.callbacks.model_checkpoint import _not_empty

    fabric = Fabric(accelerator="cpu", devices=1)
    fabric.save_checkpoint(tmp_path, {"model": nn.Linear(2, 2), "step": 3})
    manager = CheckpointManager(tmp_path)
    for name in ("checkpoint_9.tmp-f0123456789ab", "checkpoint_8.old-1a2b3c4d", "checkpoint_7.del-1a2b3c4d"):
        (manager.directory / name).mkdir()
        (manager.directory / name / "meta.json").write_text("{}")
    assert manager.latest() == manager.path_for(0) and manager.iteration == 10
    leftovers_only = tmp_path / "only_leftovers"
    leftovers_only.mkdir()
    (leftovers_only / "last.ckpt.tmp-f0123456789ab").write_bytes(b"x")
    assert not _not_empty(str(leftovers_only))  # ModelCheckpoint does not warn of a non-empty folder


def _save_beside_stale_folders(tmp_path: Path, count: int) -> tuple[float, list[str]]:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for index in range(count):  # what killed jobs left, each under its own checkpoint's name
        leftover = folder / f"epoch={index}-step={index * 10}.tmp-{index:08x}"
        leftover.mkdir()
        (leftover / "__0_0.distcp").write_bytes(b"shard")
    fabric = Fabric(accelerator="cpu", devices=1)
    model = fabric.setup_module(nn.Linear(4, 4))
    start = time.perf_counter()
    fabric.save(folder / "final", {"model": model}, layout="dcp")
    blocked = time.perf_counter() - start
    assert wait_for_background_removals(timeout=600)  # the deletions run on, off the save's path
    return blocked, sorted(entry.name for entry in folder.iterdir())


def test_a_thousand_stale_folders_of_other_names_go_with_the_next_save(tmp_path: Path) -> None:
    blocked, left = _save_beside_stale_folders(tmp_path, 1000)
    assert left == ["final"], left[:5]
    assert blocked < 5.0, f"the save was blocked {blocked:.1f} s by 1000 left-overs"


@pytest.mark.slow
def test_five_thousand_stale_folders_of_other_names_go_with_the_next_save(tmp_path: Path) -> None:
    blocked, left = _save_beside_stale_folders(tmp_path, 5000)
    print(f"save blocked {blocked:.2f} s with 5000 stale folders")
    assert left == ["final"], left[:5]
    assert blocked < 15.0, f"the save was blocked {blocked:.1f} s by 5000 left-overs"


def test_loading_a_left_over_by_its_name_is_refused(tmp_path: Path) -> None:
    """A left-over may be half written or a running save's: ``fabric.load`` of its name says so and names the
    checkpoint to load, for a single file and a directory alike (``load_raw`` too)."""
    fabric = Fabric(accelerator="cpu", devices=1)
    model = nn.Linear(2, 2)
    fabric.save(tmp_path / "last.ckpt", {"model": model})
    fabric.save(tmp_path / "ckpt", {"model": model})
    for name, base in (("last.ckpt.tmp-f0123456789ab", "last.ckpt"), ("ckpt.tmp-0123456789abcdef", "ckpt")):
        left = tmp_path / name
        os.link(tmp_path / base, left) if (tmp_path / base).is_file() else os.rename(tmp_path / base, left)
        with pytest.raises(CheckpointError, match=rf"Refusing to load .*{name}.*Load '{base}'"):
            fabric.load(left, {"model": model})
        with pytest.raises(CheckpointError, match="unfinished save"):
            fabric.load_raw(left, model)
    assert fabric.load(tmp_path / "last.ckpt", {"model": model}) == {}
