"""A save that cannot be written (disk full, unwritable directory) gives a clear error and leaves the
previous checkpoints intact.

Tests run as root, for whom ``chmod`` blocks nothing: an unwritable place is made with a regular file
where a directory is needed, or with a monkeypatched write. A real full disk is a tiny tmpfs where
mounting is allowed.
"""

from __future__ import annotations

import errno
import os
import pathlib
import shutil
import subprocess
import uuid

import pytest
import torch
from torch import nn

import fabricx.checkpoint.atomic as checkpoint_atomic
import fabricx.checkpoint.serialization as serialization
from fabricx import Fabric
from fabricx.checkpoint import CheckpointManager, read_checkpoint
from fabricx.utilities.exceptions import CheckpointError


def _state(fabric: Fabric, size: int = 4) -> dict:
    model = nn.Linear(size, size)
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    fabric.backward(model(torch.randn(2, size)).sum())
    optimizer.step()
    return {"model": model, "optimizer": optimizer, "step": 1}


def _assert_intact(path: pathlib.Path, state: dict) -> None:
    loaded = read_checkpoint(path)
    assert loaded.shared["step"] == state["step"]
    for key, value in state["model"].state_dict().items():
        assert torch.equal(loaded.shared["model"][key], value)


def _no_leftovers(directory: pathlib.Path) -> list[str]:
    return [p.name for p in directory.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def _half_written_then_full(real_save_file):
    def save_file(tensors, filename, metadata=None):
        real_save_file(tensors, filename, metadata=metadata)
        with open(filename, "r+b") as handle:  # what a full disk leaves behind: a truncated file
            handle.truncate(os.path.getsize(filename) // 2)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)

    return save_file


def _meta_write_fails(real_write_text):
    def write_text(self, data, *args, **kwargs):
        if self.name == "meta.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real_write_text(self, data, *args, **kwargs)

    return write_text


@pytest.mark.parametrize("where", ["tensors", "meta"])
def test_disk_full_during_save_keeps_previous_checkpoints(tmp_path, monkeypatch, where):
    fabric = Fabric(accelerator="cpu")
    state = _state(fabric)
    manager = CheckpointManager(tmp_path, total_limit=1)
    first = fabric.save_checkpoint(manager, state)
    saved = {"model": state["model"], "step": 1}
    state["step"] = 2
    if where == "tensors":
        monkeypatch.setattr(serialization, "save_file", _half_written_then_full(serialization.save_file))
    else:
        monkeypatch.setattr(pathlib.Path, "write_text", _meta_write_fails(pathlib.Path.write_text))

    with pytest.raises(CheckpointError) as error:
        fabric.save_checkpoint(manager, state)
    message = str(error.value)
    assert str(manager.path_for(1)) in message and "No space left on device (ENOSPC)" in message
    assert "Free disk space" in message and "unchanged" in message
    assert isinstance(error.value.__cause__, OSError), "the OS error stays attached"
    # The same save into the same path (overwriting a checkpoint) must not damage it either.
    with pytest.raises(CheckpointError, match="ENOSPC"):
        fabric.save(first, state)

    assert manager.latest() == first and manager.list_complete() == [first], "retention deleted nothing"
    assert not _no_leftovers(manager.directory), "the unfinished save was cleaned up"
    _assert_intact(first, saved)

    monkeypatch.undo()  # space is back: the next save works and only then replaces the old one
    second = fabric.save_checkpoint(manager, state)
    assert manager.list_complete() == [second]
    assert read_checkpoint(second).shared["step"] == 2


def test_a_file_in_the_way_of_the_directory(tmp_path):
    fabric = Fabric(accelerator="cpu")
    state = _state(fabric)
    blocker = tmp_path / "runs"
    blocker.write_text("not a directory")
    for target, reason in ((blocker / "ckpt", "EEXIST"), (blocker / "exp" / "ckpt", "ENOTDIR")):
        with pytest.raises(CheckpointError) as error:
            fabric.save(target, state)
        message = str(error.value)
        assert str(target) in message and reason in message and "choose another path" in message
    assert blocker.read_text() == "not a directory"
    with pytest.raises(CheckpointError, match="ENOTDIR"):  # the manager's <project>/checkpoints/...
        fabric.save_checkpoint(CheckpointManager(blocker), state)


def test_permission_denied_is_explained(tmp_path, monkeypatch):
    fabric = Fabric(accelerator="cpu")
    state = _state(fabric)
    fabric.save(tmp_path / "ckpt", state)

    def denied(path, token=None):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(pathlib.Path(path).parent))

    monkeypatch.setattr(checkpoint_atomic, "prepare_directory", denied)  # what the local checkpoint I/O calls
    state["step"] = 5
    with pytest.raises(CheckpointError) as error:
        fabric.save(tmp_path / "ckpt", state)
    message = str(error.value)
    assert "Permission denied (EACCES)" in message and str(tmp_path) in message
    assert "directory this process may write to" in message
    monkeypatch.undo()
    _assert_intact(tmp_path / "ckpt", {"model": state["model"], "step": 1})


@pytest.fixture
def tiny_disk(tmp_path):
    """A real 256 KiB file system (tmpfs); skipped where this process may not mount one."""
    mount_point = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=False)
        shutil.rmtree(mount_point, ignore_errors=True)


def test_a_real_full_disk(tiny_disk):
    fabric = Fabric(accelerator="cpu")
    small = _state(fabric)
    manager = CheckpointManager(tiny_disk, total_limit=2)
    first = fabric.save_checkpoint(manager, small)
    big = _state(fabric, size=256)  # 256 x 256 float32 weights and momentum: about 512 KiB
    with pytest.raises(CheckpointError) as error:
        fabric.save_checkpoint(manager, big)
    message = str(error.value)
    assert "No space left on device (ENOSPC)" in message and str(manager.path_for(1)) in message
    assert manager.list_complete() == [first] and not _no_leftovers(manager.directory)
    _assert_intact(first, small)
    small["step"] = 3
    assert read_checkpoint(fabric.save_checkpoint(manager, small)).shared["step"] == 3, "space was freed"
