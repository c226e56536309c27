"""The ``"deepspeed"`` layout without a DeepSpeed engine: a folder laid out as Lightning's DeepSpeedStrategy writes
it is recognised by a plain ``fabric.load``, read weights-only, and its model lands in the state's one model
whatever its key; a strategy without an engine refuses to save in this layout. The engine's own saves and
loads are in tests/differential/test_deepspeed_layout_lightning.py and test_ckpt_deepspeed_atomic.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fabricx import Fabric
from fabricx.checkpoint.layouts import saved_layout
from fabricx.checkpoint.layouts.deepspeed import DeepSpeedLayout
from fabricx.utilities.exceptions import CheckpointError


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (Path(self.marker),))


def _lightning_folder(path: Path, weights: dict[str, torch.Tensor], **client: Any) -> Path:
    """What DeepSpeed's ``engine.save_checkpoint(path, client_state=client, tag="checkpoint")`` writes at ZeRO
    stage 0 for one process: the engine's state and the client state in one model states file."""
    (path / "checkpoint").mkdir(parents=True)
    engine_state = {
        "module": weights,
        "buffer_names": [],
        "optimizer": None,
        "param_shapes": None,
        "lr_scheduler": None,
        "skipped_steps": 0,
        "global_steps": 4,
        "global_samples": 16,
        "dp_world_size": 1,
        "mp_world_size": 1,
        "ds_config": {"zero_optimization": {"stage": 0}, "train_micro_batch_size_per_gpu": 4},
        "ds_version": "0.19.8",
    }
    torch.save({**engine_state, **client}, path / "checkpoint" / "mp_rank_00_model_states.pt")
    (path / "latest").write_text("checkpoint")
    return path


def _weights(seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return nn.Linear(4, 3).state_dict()


def test_a_lightning_deepspeed_folder_loads_into_a_plain_model_under_any_key(tmp_path: Path) -> None:
    saved = _weights(0)
    path = _lightning_folder(tmp_path / "ckpt", saved, step=3, note="from lightning")
    assert isinstance(saved_layout(path), DeepSpeedLayout)

    fabric = Fabric(accelerator="cpu", devices=1)
    torch.manual_seed(1)
    model = fabric.setup(nn.Linear(4, 3))
    state: dict[str, Any] = {"net": model, "step": 0}
    assert fabric.load(path, state) == {"note": "from lightning"}
    assert state["step"] == 3
    assert all(torch.equal(model.state_dict()[name], value) for name, value in saved.items())

    everything = fabric.load(path)  # no state: the model under Lightning's usual key, and the client state
    assert sorted(everything) == ["model", "note", "step"]
    assert all(torch.equal(everything["model"][name], value) for name, value in saved.items())


def test_a_payload_in_the_client_state_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    path = _lightning_folder(tmp_path / "ckpt", _weights(0), step=3, payload=_Payload(marker))
    fabric = Fabric(accelerator="cpu", devices=1)
    with pytest.raises(CheckpointError, match="Refusing to load the DeepSpeed file .*mp_rank_00_model_states.pt"):
        fabric.load(path, {"model": fabric.setup(nn.Linear(4, 3)), "step": 0})
    assert not marker.exists()


def test_a_fabricx_directory_or_a_bare_folder_is_not_taken_for_a_deepspeed_one(tmp_path: Path) -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    fabric.save(tmp_path / "directory", {"step": 1})
    (tmp_path / "directory" / "checkpoint").mkdir()  # even with a folder of that name inside
    assert not DeepSpeedLayout().holds(str(tmp_path / "directory"))
    (tmp_path / "bare" / "checkpoint").mkdir(parents=True)  # no model states file
    assert not DeepSpeedLayout().holds(str(tmp_path / "bare"))


def test_a_strategy_without_a_deepspeed_engine_refuses_the_layout(tmp_path: Path) -> None:
    fabric = Fabric(accelerator="cpu", devices=1)
    with pytest.raises(CheckpointError, match="has no DeepSpeed engine. Save with DeepSpeedStrategy"):
        fabric.save(tmp_path / "ckpt", {"model": fabric.setup(nn.Linear(4, 3)), "step": 1}, layout="deepspeed")
    assert not (tmp_path / "ckpt").exists() and list(tmp_path.iterdir()) == []
