"""Crafted files of every layout are refused before they can exhaust memory, block a reader or read outside.

Each test plants what an attacker would (a few KB) and loads it through ``fabric.load``:

* a single file with a stride-0 Adam ``exp_avg`` (2^26 elements from 4 bytes), or one of real bytes but
  not its parameter's shape; a single file holding a compressed record (a zip bomb);
* a ``deepspeed`` folder whose frozen fragment or fp32 partition is a stride-0 tensor;
* a ``dcp`` folder whose key paths declare millions of list slots; its ``meta.pt`` a symbolic link
  out of the folder, or a named pipe;
* ``__fabricx_*`` entries with values of the wrong kind: a `CheckpointError` naming the file, never a bare
  ``TypeError``/``ValueError``.
"""

from __future__ import annotations

import os
import pickle
import threading
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fabricx import Fabric
from fabricx.utilities.exceptions import CheckpointError

_HUGE = 2**26  # elements a crafted tensor claims (256 MiB of float32)


@pytest.fixture
def fabric() -> Fabric:
    return Fabric(accelerator="cpu", devices=1)


def _trained(fabric: Fabric) -> dict[str, Any]:
    model = nn.Linear(4, 4)
    optimizer = torch.optim.Adam(model.parameters())
    model, optimizer = fabric.setup(model, optimizer)
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    return {"model": model, "optimizer": optimizer, "step": 1}


def _fresh(fabric: Fabric) -> dict[str, Any]:
    model = nn.Linear(4, 4)
    model, optimizer = fabric.setup(model, torch.optim.Adam(model.parameters()))
    return {"model": model, "optimizer": optimizer, "step": 0}


def _single_file(fabric: Fabric, path: Path) -> dict[str, Any]:
    fabric.save(path, _trained(fabric))
    return torch.load(path, weights_only=True)


# ----------------------------------------------------------------------------------------------- single file


@pytest.mark.parametrize("exp_avg", ["stride0", "wrong_shape"])
def test_single_file_optimizer_states_are_checked_against_their_parameters(
    fabric: Fabric, tmp_path: Path, exp_avg: str
) -> None:
    path = tmp_path / "model.pth"
    contents = _single_file(fabric, path)
    crafted = torch.zeros(1).expand(_HUGE) if exp_avg == "stride0" else torch.zeros(64, 64)
    contents["optimizer"]["state"][0]["exp_avg"] = crafted
    torch.save(contents, path)
    assert path.stat().st_size < 64 * 1024
    state = _fresh(fabric)
    says = "expanded tensor" if exp_avg == "stride0" else r"does not fit the optimizer Adam: state\[0\]\['exp_avg'\]"
    with pytest.raises(CheckpointError, match=says) as error:
        fabric.load(path, state)
    assert str(path) in str(error.value)
    assert state["optimizer"].state == {}  # nothing was restored


def test_single_file_with_a_compressed_record_is_refused(fabric: Fabric, tmp_path: Path) -> None:
    path = tmp_path / "model.pth"
    contents = _single_file(fabric, path)
    contents["big"] = torch.zeros(2**20)  # 4 MiB of zeros: deflated, a few KB
    torch.save(contents, path)
    bomb = tmp_path / "bomb.pth"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as target:
        for record in source.infolist():
            target.writestr(record.filename, source.read(record.filename))
    assert bomb.stat().st_size < 64 * 1024
    with pytest.raises(CheckpointError, match="is compressed") as error:
        fabric.load(bomb, _fresh(fabric))
    assert str(bomb) in str(error.value)
    with pytest.raises(CheckpointError, match="is compressed"):
        fabric.load(bomb)


def _numpy_shape(contents: dict) -> None:
    contents["__fabricx_rng__"]["numpy"][1]["shape"] = [2, 5]


def _numpy_shape_float(contents: dict) -> None:
    contents["__fabricx_rng__"]["numpy"][1]["shape"] = 1.5


def _per_rank_keys_int(contents: dict) -> None:
    contents["__fabricx_single_file__"]["per_rank_keys"] = 1


def _per_rank_keys_tensor(contents: dict) -> None:
    contents["__fabricx_single_file__"]["per_rank_keys"] = torch.zeros(3)


@pytest.mark.parametrize("craft", [_numpy_shape, _numpy_shape_float, _per_rank_keys_int, _per_rank_keys_tensor])
def test_crafted_fabricx_entries_raise_a_checkpoint_error_naming_the_file(
    fabric: Fabric, tmp_path: Path, craft: Any
) -> None:
    path = tmp_path / "model.pth"
    contents = _single_file(fabric, path)
    craft(contents)
    torch.save(contents, path)
    with pytest.raises(CheckpointError) as error:
        fabric.load(path, _fresh(fabric))
    assert str(path) in str(error.value) and "damaged" in str(error.value)


# -------------------------------------------------------------------------------------------------- deepspeed


def _deepspeed_folder(folder: Path, fragment: torch.Tensor, partition: torch.Tensor) -> Path:
    """A ZeRO-2 folder as DeepSpeed lays it out, its model file with a frozen fragment, its optimizer file with
    an fp32 partition."""
    tag = folder / "checkpoint"
    tag.mkdir(parents=True)
    shapes = {"weight": torch.Size([4, 4])}
    torch.save(
        {
            "module": {},
            "buffer_names": [],
            "param_shapes": [shapes],
            "frozen_param_shapes": {"frozen": torch.Size([_HUGE])},
            "frozen_param_fragments": {"frozen": fragment},
            "shared_params": {},
            "ds_config": {"zero_optimization": {"stage": 2}},
            "ds_version": "0.19.8",
            "dp_world_size": 1,
            "mp_world_size": 1,
        },
        tag / "zero_pp_rank_0_mp_rank_00_model_states.pt",
    )
    torch.save(
        {
            "optimizer_state_dict": {
                "zero_stage": 2,
                "partition_count": 1,
                "single_partition_of_fp32_groups": [partition],
            }
        },
        tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt",
    )
    return folder


@pytest.mark.parametrize("where", ["frozen_fragment", "fp32_partition"])
def test_deepspeed_folder_with_a_stride0_tensor_is_refused(fabric: Fabric, tmp_path: Path, where: str) -> None:
    pytest.importorskip("deepspeed")
    expanded, plain = torch.zeros(1).expand(_HUGE), torch.zeros(16)
    fragment, partition = (expanded, plain) if where == "frozen_fragment" else (plain, expanded)
    folder = _deepspeed_folder(tmp_path / "ckpt", fragment, partition)
    assert sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) < 64 * 1024
    with pytest.raises(CheckpointError, match="expanded tensor") as error:
        fabric.load(folder, {"model": nn.Linear(4, 4)})
    assert "states.pt" in str(error.value)


# -------------------------------------------------------------------------------------------------------- dcp


def _dcp_folder(fabric: Fabric, folder: Path) -> Path:
    fabric.save(folder, _trained(fabric), layout="dcp")
    return folder


def test_dcp_key_paths_declaring_huge_lists_are_refused(fabric: Fabric, tmp_path: Path) -> None:
    folder = _dcp_folder(fabric, tmp_path / "ckpt")
    metadata = pickle.loads((folder / ".metadata").read_bytes())
    levels = [2**16 - 1] * 30
    metadata.planner_data = {
        fqn: (keys[0], i, *levels, "x") for i, (fqn, keys) in enumerate(metadata.planner_data.items())
    }
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    assert (folder / ".metadata").stat().st_size < 64 * 1024
    with pytest.raises(CheckpointError, match="slots") as error:
        fabric.load(folder, _fresh(fabric))
    assert str(folder / ".metadata") in str(error.value)


def test_dcp_meta_pt_must_be_a_regular_file_inside_the_folder(fabric: Fabric, tmp_path: Path) -> None:
    folder = _dcp_folder(fabric, tmp_path / "ckpt")
    outside = tmp_path / "outside.pt"
    torch.save({"secret": 42}, outside)
    (folder / "meta.pt").unlink()
    (folder / "meta.pt").symlink_to(outside)
    with pytest.raises(CheckpointError, match="symbolic link"):
        fabric.load(folder, _fresh(fabric))
    with pytest.raises(CheckpointError, match="symbolic link"):
        fabric.load(folder)


def test_dcp_meta_pt_as_a_named_pipe_is_refused_without_blocking(fabric: Fabric, tmp_path: Path) -> None:
    folder = _dcp_folder(fabric, tmp_path / "ckpt")
    (folder / "meta.pt").unlink()
    os.mkfifo(folder / "meta.pt")
    outcome: list[BaseException | None] = []

    def load() -> None:
        try:
            fabric.load(folder, _fresh(fabric))
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    reader = threading.Thread(target=load, daemon=True)
    reader.start()
    reader.join(timeout=30)
    if reader.is_alive():  # blocked on the pipe: give it a writer so the thread ends, then fail
        os.close(os.open(folder / "meta.pt", os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=10)
        pytest.fail("loading a checkpoint whose meta.pt is a named pipe blocked")
    assert isinstance(outcome[0], CheckpointError) and "not a regular file" in str(outcome[0])


def test_load_raw_checks_an_optimizer_state_against_its_parameters(fabric: Fabric, tmp_path: Path) -> None:
    state = _trained(fabric)
    optimizer_state = state["optimizer"].state_dict()
    optimizer_state["state"][0]["exp_avg_sq"] = torch.zeros(128, 128)
    path = tmp_path / "optimizer.pt"
    torch.save(optimizer_state, path)
    fresh = _fresh(fabric)
    with pytest.raises(CheckpointError, match=r"does not fit the optimizer Adam: state\[0\]\['exp_avg_sq'\]"):
        fabric.load_raw(path, fresh["optimizer"])
    assert fresh["optimizer"].state == {}
