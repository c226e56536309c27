"""Commit and the work after it report separately and truthfully: a failing commit callback is not a
failed save, retention skips what it cannot remove, and an unwaited failed last save fails the process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from fabricx import Fabric
from fabricx.checkpoint.background import CommitCallbackError
from fabricx.checkpoint.format import read_checkpoint
from fabricx.checkpoint.manager import CheckpointManager
from fabricx.utilities.exceptions import CheckpointError


def _fabric_and_model() -> tuple[Fabric, nn.Module]:
    fabric = Fabric(accelerator="cpu")
    return fabric, fabric.setup_module(nn.Linear(4, 4))


def test_a_failing_commit_callback_is_reported_as_committed(tmp_path: Path) -> None:
    fabric, model = _fabric_and_model()
    handle = fabric.save(tmp_path / "ckpt", {"model": model, "step": 7}, async_save=True)
    assert handle is not None
    ran: list[str] = []

    def broken() -> None:
        raise RuntimeError("the callback broke")

    handle.add_commit_callback(broken)
    handle.add_commit_callback(lambda: ran.append("second"))  # a failing one does not stop the others
    with pytest.raises(CommitCallbackError, match="was committed and is the latest.*the callback broke") as error:
        handle.wait()
    assert "not committed" not in str(error.value)
    assert ran == ["second"]
    assert read_checkpoint(tmp_path / "ckpt").shared["step"] == 7  # it is committed and loads
    assert "committed, a commit callback failed" in repr(handle)


@pytest.mark.parametrize("async_save", [False, True])
def test_retention_skips_a_planted_reservation_directory_and_the_save_succeeds(
    tmp_path: Path, async_save: bool
) -> None:
    fabric, model = _fabric_and_model()
    manager = CheckpointManager(tmp_path, total_limit=1)
    manager.directory.mkdir(parents=True)
    planted = manager.directory / "checkpoint_0.reserved"
    planted.mkdir()
    (planted / "keep").write_text("not ours")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(3):
            fabric.save_checkpoint(manager, {"model": model, "step": step}, async_save=async_save)
        if async_save:
            fabric.save(tmp_path / "flush", {"step": 0})  # waits for (and reports) the last background save
    assert any("checkpoint_0.reserved" in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert planted.is_dir() and (planted / "keep").read_text() == "not ours"
    assert [p.name for p in manager.list_complete()] == ["checkpoint_3"]
    assert read_checkpoint(manager.latest()).shared["step"] == 2  # type: ignore[arg-type]


FAILING_LAST_SAVE = textwrap.dedent(
    """
    import sys
    from torch import nn
    from fabricx import Fabric
    fabric = Fabric(accelerator="cpu")
    model = fabric.setup_module(nn.Linear(4, 4))
    mode = sys.argv[2]
    if mode == "sync":
        fabric.save(sys.argv[1], {"model": model, "bad": {(1, 2): 3}})
    elif mode == "async":
        # A tuple key passes staging, the writer refuses it in the background; nobody waits.
        fabric.save(sys.argv[1], {"model": model, "bad": {(1, 2): 3}}, async_save=True)
    else:
        fabric.save(sys.argv[1], {"model": model, "step": 1}, async_save=True)
    """
)


def test_an_unwaited_failed_last_async_save_exits_non_zero_as_a_sync_one_does(tmp_path: Path) -> None:
    codes = {}
    for mode in ("sync", "async", "ok"):
        done = subprocess.run(
            [sys.executable, "-c", FAILING_LAST_SAVE, str(tmp_path / mode), mode],
            capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        codes[mode] = (done.returncode, done.stderr[-600:])
    assert codes["sync"][0] != 0
    assert codes["async"][0] == 1 and "background save" in codes["async"][1], codes["async"]
    assert codes["ok"][0] == 0, codes["ok"]
    assert read_checkpoint(tmp_path / "ok").shared["step"] == 1
    assert not (tmp_path / "async").exists()


def test_a_failed_save_still_says_not_committed(tmp_path: Path) -> None:
    fabric, model = _fabric_and_model()
    handle = fabric.save(tmp_path / "x", {"model": model, "bad": {(1,): torch.ones(1)}}, async_save=True)
    assert handle is not None
    with pytest.raises(CheckpointError, match="failed") as error:
        handle.wait()
    assert not isinstance(error.value, CommitCallbackError)
