"""The checkpoint-I/O plugin is real: Fabric(plugins=[io]) sends every save, load and deletion through it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from fabricx import Fabric
from fabricx.checkpoint import CheckpointManager, LocalCheckpointIO
from fabricx.utilities.exceptions import MisconfigurationError


class RecordingIO(LocalCheckpointIO):
    """Local files, with every call recorded; staging goes to a folder of its own choosing."""

    def __init__(self, staging_root: Path) -> None:
        self.calls: list[str] = []
        self.staging_root = staging_root

    def staging_dir(self, path, token):
        return self.staging_root / f"{Path(path).name}.{token}"

    def stage(self, path, token):
        self.calls.append("stage")
        staging = self.staging_dir(path, token)
        staging.mkdir(parents=True)
        return staging

    def finish_rank(self, staging, path, rank):
        self.calls.append(f"finish_rank:{rank}")

    def commit(self, staging, path):
        self.calls.append("commit")
        assert (staging / "meta.json").is_file()  # meta.json with the manifest is written before commit
        super().commit(staging, path)

    def resolve(self, path, is_complete):
        self.calls.append("resolve")
        return super().resolve(path, is_complete)

    def remove(self, path):
        self.calls.append("remove")
        super().remove(path)


def test_saves_loads_and_retention_go_through_the_plugin(tmp_path: Path) -> None:
    io = RecordingIO(tmp_path / "staging")
    fabric = Fabric(accelerator="cpu", plugins=[io])
    assert fabric.strategy.checkpoint_io is io
    model = fabric.setup_module(nn.Linear(3, 2))
    fabric.save(tmp_path / "ckpt", {"model": model, "step": 4})
    assert io.calls == ["stage", "finish_rank:0", "commit"]
    assert not any((tmp_path / "staging").iterdir())  # the staged folder became the checkpoint
    state = {"model": model, "step": 0}
    fabric.load(tmp_path / "ckpt", state)
    assert state["step"] == 4 and io.calls[-1] == "resolve"

    manager = CheckpointManager(tmp_path / "project", total_limit=1, io=io)
    for step in range(3):
        fabric.save_checkpoint(manager, {"model": model, "step": step})
    assert io.calls.count("remove") == 2
    assert manager.list_complete() == [manager.path_for(2)]
    assert torch.equal(fabric.load(manager.latest())["model"]["weight"], model.weight.detach())


def test_a_pickling_checkpoint_plugin_is_refused_with_the_alternative() -> None:
    class TorchSaveIO:
        def save_checkpoint(self, checkpoint, path):
            torch.save(checkpoint, path)

        def load_checkpoint(self, path):
            return torch.load(path, weights_only=False)

    with pytest.raises(MisconfigurationError, match="subclass fabricx.checkpoint.CheckpointIO"):
        Fabric(accelerator="cpu", plugins=[TorchSaveIO()])


def test_a_dcp_folder_writes_its_meta_file_through_the_plugin(tmp_path: Path) -> None:
    written: list[str] = []

    class FileRecordingIO(LocalCheckpointIO):
        def write_file(self, path, write):
            written.append(Path(path).name)
            super().write_file(path, write)

    fabric = Fabric(accelerator="cpu", plugins=[FileRecordingIO()])
    model = fabric.setup_module(nn.Linear(3, 2))
    fabric.save(tmp_path / "ckpt", {"model": model, "step": 4}, layout="dcp")
    assert written == ["meta.pt"]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [".metadata", "__0_0.distcp", "meta.pt"]
    state = {"model": model, "step": 0}
    assert fabric.load(tmp_path / "ckpt", state) == {} and state["step"] == 4
