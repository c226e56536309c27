"""Automatic checkpoint numbering, latest lookup and retention."""

from __future__ import annotations

import os

import pytest

from fabricx.checkpoint.format import read_checkpoint, write_checkpoint
from fabricx.checkpoint.manager import CheckpointManager


def _save(manager, step):
    path = manager.next_path()
    write_checkpoint(path, {"step": step}, None)
    manager.apply_retention()
    return path


def test_numbering_starts_at_zero_and_continues_in_a_new_manager(tmp_path):
    manager = CheckpointManager(tmp_path)
    assert manager.latest() is None and manager.iteration == 0
    assert manager.next_path() == tmp_path / "checkpoints" / "checkpoint_0"
    _save(manager, 0)
    _save(manager, 1)

    again = CheckpointManager(tmp_path)
    assert again.iteration == 2
    assert _save(again, 2).name == "checkpoint_2"
    assert [p.name for p in again.list_complete()] == ["checkpoint_0", "checkpoint_1", "checkpoint_2"]
    assert read_checkpoint(again.latest()).shared == {"step": 2}


def test_leftovers_are_never_reused_nor_listed(tmp_path):
    manager = CheckpointManager(tmp_path)
    _save(manager, 0)
    (manager.directory / "checkpoint_4.tmp-dead").mkdir()  # a save that crashed
    (manager.directory / "checkpoint_10").mkdir()  # committed name without meta.json: incomplete
    (manager.directory / "unrelated_99").mkdir()
    assert manager.next_path().name == "checkpoint_11"
    assert [p.name for p in manager.list_complete()] == ["checkpoint_0"]
    assert manager.latest().name == "checkpoint_0"


def test_numeric_not_lexical_order(tmp_path):
    manager = CheckpointManager(tmp_path)
    for step in range(12):
        _save(manager, step)
    assert manager.latest().name == "checkpoint_11"
    assert manager.list_complete()[2].name == "checkpoint_2"


def test_keep_last_two_and_clean_stale_leftovers(tmp_path):
    manager = CheckpointManager(tmp_path, total_limit=2)
    _save(manager, 0)
    _save(manager, 1)
    (manager.directory / "checkpoint_1.old-abcd").mkdir()  # interrupted swap, committed copy exists
    (manager.directory / "checkpoint_0.tmp-x").mkdir()
    _save(manager, 2)
    (manager.directory / "checkpoint_3.tmp-inflight").mkdir()  # newer than the newest: keep
    removed = manager.apply_retention()
    assert removed == []
    assert sorted(os.listdir(manager.directory)) == [
        "checkpoint_1",
        "checkpoint_2",
        "checkpoint_3.tmp-inflight",
    ]
    _save(manager, 4)  # index 4: the in-flight leftover's index 3 is never reused
    assert sorted(os.listdir(manager.directory)) == ["checkpoint_2", "checkpoint_4"]
    assert read_checkpoint(manager.latest()).shared == {"step": 4}


def test_invalid_arguments(tmp_path):
    with pytest.raises(ValueError, match="total_limit"):
        CheckpointManager(tmp_path, total_limit=0)
    with pytest.raises(ValueError, match="prefix"):
        CheckpointManager(tmp_path, prefix="a/b")
    custom = CheckpointManager(tmp_path, prefix="ckpt")
    assert custom.next_path().name == "ckpt_0"
