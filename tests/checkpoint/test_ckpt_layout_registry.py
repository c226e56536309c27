"""A new checkpoint layout is one backend plus one registration: a toy layout defined in this file saves and
loads through ``fabric.save(path, state, layout="toy")`` / ``fabric.load(path, state)``, synchronously and
in the background, with no change to fabricx; the built-in keys stay as they were.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fabricx import Fabric
from fabricx.checkpoint.background import AsyncSave
from fabricx.checkpoint.contents import split_state
from fabricx.checkpoint.io import CheckpointIO
from fabricx.checkpoint.layouts import SaveRequest, layout_for, layout_keys, register_layout, unregister_layout
from fabricx.checkpoint.loaded import LoadedCheckpoint

_FILE = "toy.pt"


class ToyLayout:
    """Every rank's contents in one torch file per rank inside a folder (rank 0 also writes the shared ones)."""

    def __init__(self) -> None:
        self.saves = 0

    def save(self, request: SaveRequest) -> AsyncSave | None:
        shared, per_rank = split_state(request.host, request.state, request.filter)
        contents = request.mode.copy({"shared": shared, "per_rank": per_rank})
        folder = Path(request.path)

        def job() -> None:
            folder.mkdir(parents=True, exist_ok=True)
            torch.save(contents, folder / _FILE)
            self.saves += 1

        return request.mode.run(request.path, job)

    def holds(self, path: str) -> bool:
        return (Path(path) / _FILE).is_file()

    def read(self, path: str, rank: int, io: CheckpointIO) -> LoadedCheckpoint:
        contents = torch.load(Path(path) / _FILE, weights_only=False)  # a test's own file
        return LoadedCheckpoint(contents["shared"], contents["per_rank"], {"toy": True}, Path(path))


@pytest.fixture
def toy() -> Iterator[ToyLayout]:
    layout = ToyLayout()
    register_layout("toy", layout)
    yield layout
    unregister_layout("toy")


def _model(fabric: Fabric, seed: int) -> Any:
    torch.manual_seed(seed)
    return fabric.setup(nn.Linear(4, 3))


@pytest.mark.parametrize("async_save", [False, True])
def test_a_registered_layout_saves_and_loads_through_fabric(tmp_path: Path, toy: ToyLayout, async_save: bool) -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    model = _model(fabric, seed=0)
    expected = {key: value.clone() for key, value in model.state_dict().items()}
    handle = fabric.save(tmp_path / "ckpt", {"model": model, "step": 7}, layout="toy", async_save=async_save)
    assert (handle is not None) == async_save
    if handle is not None:
        handle.wait()
    assert toy.saves == 1 and toy.holds(str(tmp_path / "ckpt"))
    assert not (tmp_path / "ckpt" / "meta.json").exists()  # not the directory layout

    other = _model(fabric, seed=1)
    state: dict[str, Any] = {"model": other, "step": 0}
    assert fabric.load(tmp_path / "ckpt", state) == {}
    assert state["step"] == 7
    assert all(torch.equal(other.state_dict()[key], value) for key, value in expected.items())


def test_registration_adds_a_key_and_leaves_the_built_in_choice(toy: ToyLayout) -> None:
    assert layout_keys() == ("directory", "single_file", "dcp", "deepspeed", "toy")
    assert layout_for("out/model.pth") == "single_file" and layout_for("out/step_1") == "directory"
    assert layout_for("out/step_1", requested="toy") == "toy"
    unregister_layout("toy")
    with pytest.raises(ValueError, match=r"choose one of \['directory', 'single_file', 'dcp', 'deepspeed'\]"):
        layout_for("out/step_1", requested="toy")
