"""CheckpointManager under crashes and concurrency: only loadable checkpoints are listed, names are
never shared by concurrent writers, and retention leaves a running writer's files alone."""

from __future__ import annotations

import multiprocessing
import os
import shutil
from pathlib import Path

import torch

from fabricx.checkpoint.format import read_checkpoint, write_checkpoint
from fabricx.checkpoint.manager import CheckpointManager


def _write(path: Path, value: float) -> None:
    write_checkpoint(path, {"w": torch.full((10,), value)}, None)


def test_list_complete_skips_half_written_and_half_deleted_checkpoints(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path)
    for index in range(4):
        _write(manager.path_for(index), float(index))
    (manager.path_for(1) / "shared.safetensors").unlink()  # a deletion killed midway; meta.json survived
    with open(manager.path_for(2) / "shared.json", "ab") as handle:
        handle.write(b" ")  # a file that is not what meta.json recorded
    # A crash between the two renames of an overwrite: only the .old- copy of checkpoint_3 exists.
    manager.path_for(3).rename(manager.path_for(3).with_name("checkpoint_3.old-ab12"))
    assert manager.list_complete() == [manager.path_for(0), manager.path_for(3)]
    assert manager.latest() == manager.path_for(3)
    assert float(read_checkpoint(manager.latest()).shared["w"][0]) == 3.0
    manager.apply_retention()  # puts checkpoint_3 back under its name, removes the broken ones
    assert sorted(p.name for p in manager.directory.iterdir()) == ["checkpoint_0", "checkpoint_3"]


def _reserve_many(project: str, barrier, queue) -> None:
    manager = CheckpointManager(project)
    barrier.wait()
    names = []
    for _ in range(8):
        path = manager.reserve()
        (path.parent / f"{path.name}.tmp-w").mkdir()  # what a writer makes before its commit
        names.append(path.name)
    queue.put(names)


def test_concurrent_writers_never_get_the_same_name(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    barrier, queue = context.Barrier(4), context.Queue()
    workers = [context.Process(target=_reserve_many, args=(str(tmp_path), barrier, queue)) for _ in range(4)]
    for worker in workers:
        worker.start()
    names = [name for _ in workers for name in queue.get(timeout=60)]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert len(names) == 32 and len(set(names)) == 32, sorted(names)


def test_retention_keeps_a_running_writers_files_and_cleans_a_dead_ones(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, total_limit=1)
    running = manager.reserve()  # checkpoint_0: this process is still writing it
    (running.parent / f"{running.name}.tmp-live").mkdir()
    dead = manager.reserve()  # checkpoint_1: its writer was killed (its reservation lock is gone)
    (dead.parent / f"{dead.name}.tmp-dead").mkdir()
    os.close(manager._held.pop(1))  # what a killed writer leaves: the file, its lock gone with it
    for index in (2, 3):
        _write(manager.path_for(index), float(index))
    removed = manager.apply_retention()
    names = sorted(p.name for p in manager.directory.iterdir())
    assert names == ["checkpoint_0.reserved", "checkpoint_0.tmp-live", "checkpoint_3"], names
    assert manager.path_for(2) in removed
    manager.release(running)
    shutil.rmtree(running.parent / f"{running.name}.tmp-live")
    assert manager.iteration == 4
