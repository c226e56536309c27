"""The Trainer's checkpoints under the strategies that store a module's state their own way (FSDP2, DeepSpeed).

Both ran a `fit` but failed at its first checkpoint (found by the resume matrix's Trainer rows for them):
- FSDP2: the ``on_save_checkpoint`` hooks saw the module's sharded state dict, which then went into the one
  ``.ckpt`` file as DTensors (refused: not loadable weights-only). Lightning's FSDP hands the hooks the full state
  dict that goes into the file; fabricx now does too.
- DeepSpeed: ``optimizer_states`` held the engine's ZeRO state dict (with DeepSpeed's `LossScaler` object).
  Lightning's DeepSpeed leaves ``optimizer_states`` out of the file to the engine's own checkpoint; fabricx now
  hands the optimizers to the engine, which writes and restores them with the model.

One process each, in this process: the strategy's own checkpoint code runs as with more.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fabricx.callbacks import ModelCheckpoint, OnExceptionCheckpoint
from fabricx.train import Trainer, TrainModule
from fabricx.utilities.process_group import release_process_group


@pytest.fixture(autouse=True)
def _release_the_process_group() -> Iterator[None]:
    """The sharded strategies make a process group in this process; a Trainer keeps it after `fit` (as Lightning's
    does, for a later `test`), so the test releases it: a later test in this worker may launch processes."""
    yield
    release_process_group(wait_for_peers=False)


class Stop(Exception):
    """Ends the first fit in the middle of epoch 1."""


class Regressor(TrainModule):
    def __init__(self, stop_at: int | None = None) -> None:
        super().__init__()
        torch.manual_seed(2)  # the same initial weights in every run
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        self.stop_at = stop_at
        self.saved_weights: list[dict[str, Any]] = []
        self.loaded_notes: list[Any] = []

    def train_dataloader(self) -> DataLoader:
        generator = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(24, 4, generator=generator), torch.randn(24, 1, generator=generator))
        return DataLoader(data, batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.global_step == self.stop_at:
            raise Stop

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.AdamW(self.parameters(), lr=0.01)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.8)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["note"] = self.global_step
        if isinstance(checkpoint.get("state_dict"), dict):
            self.saved_weights.append(checkpoint["state_dict"])

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.loaded_notes.append(checkpoint["note"])


def _fit(strategy: str, folder: Path, module: Regressor, ckpt_path: str | None = None) -> Trainer:
    torch.manual_seed(3)
    trainer = Trainer(
        accelerator="cpu", devices=1, strategy=strategy, max_epochs=3, logger=False, enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[ModelCheckpoint(dirpath=folder, save_last=True), OnExceptionCheckpoint(folder)],
    )
    trainer.fit(module, ckpt_path=ckpt_path)
    return trainer


def _weights(module: nn.Module) -> dict[str, torch.Tensor]:
    full = {name: v.full_tensor() if hasattr(v, "full_tensor") else v for name, v in module.state_dict().items()}
    return {name: value.detach().cpu().clone() for name, value in full.items()}


@pytest.mark.deepspeed
@pytest.mark.parametrize("strategy", ["auto", "fsdp", "deepspeed_stage_2"])
def test_a_fit_stopped_mid_epoch_resumes_exactly_under_a_sharding_strategy(strategy: str, tmp_path: Path) -> None:
    straight = Regressor()
    straight_trainer = _fit(strategy, tmp_path / "straight", straight)

    stopped = Regressor(stop_at=8)  # 6 steps an epoch: after the third batch of epoch 1
    with pytest.raises(Stop):
        _fit(strategy, tmp_path / "stopped", stopped)
    checkpoint = tmp_path / "stopped" / "on_exception.ckpt"  # removed by the resumed fit's end, as in Lightning
    if strategy.startswith("deepspeed"):
        # A folder (a `.ckpt` name under DeepSpeed, as Lightning's), its optimizer in the engine's own files.
        assert checkpoint.is_dir()
        assert any("optim_states" in path.name for path in checkpoint.rglob("*"))
    resumed = Regressor()
    resumed_trainer = _fit(strategy, tmp_path / "stopped", resumed, str(tmp_path / "stopped" / "on_exception.ckpt"))

    assert resumed.loaded_notes == [8]
    assert resumed_trainer.global_step == straight_trainer.global_step == 18
    assert resumed_trainer.lr_scheduler_configs[0].scheduler.state_dict() == (
        straight_trainer.lr_scheduler_configs[0].scheduler.state_dict()
    )
    want, got = _weights(straight), _weights(resumed)
    assert want.keys() == got.keys() and all(torch.equal(want[name], got[name]) for name in want)
    if strategy == "fsdp":
        # The hooks saw the weights as the file holds them: plain tensors, the whole of each.
        assert stopped.saved_weights and all(
            type(value) is torch.Tensor and value.shape == straight.get_parameter(name).shape
            for name, value in stopped.saved_weights[-1].items()
        )


class RaisesInItsStep(Regressor):
    def __init__(self, stop_at: int | None = None) -> None:
        super().__init__()
        self.raise_at = stop_at
        self.batches: list[tuple[int, int]] = []  # (epoch, batch_idx) of every training step that ran

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.batches.append((self.current_epoch, batch_idx))
        if self.global_step == self.raise_at:
            raise Stop
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("strategy", ["auto", "fsdp"])
def test_an_exception_inside_the_training_step_resumes_with_the_next_batch_and_says_so(
    strategy: str, tmp_path: Path
) -> None:
    # The checkpoint is written with the step half done (under FSDP2 the module is left unsharded by its forward:
    # its state dict is still gathered whole). The batch whose step raised is not trained again, and the resume
    # says so: running it again exactly needs every batch's starting random states (docs: checkpointing guide).
    straight = RaisesInItsStep()
    _fit(strategy, tmp_path / "straight", straight)
    stopped = RaisesInItsStep(stop_at=8)
    with pytest.raises(Stop):
        _fit(strategy, tmp_path / "stopped", stopped)
    resumed = RaisesInItsStep()
    with pytest.warns(UserWarning, match=r"inside the training step of batch 2 of epoch 1 .* not trained again"):
        trainer = _fit(strategy, tmp_path / "stopped", resumed, str(tmp_path / "stopped" / "on_exception.ckpt"))
    assert stopped.batches[-1] == (1, 2)
    assert stopped.batches + resumed.batches[:3] == straight.batches[:12]  # (1, 2) stepped in neither run
    assert resumed.batches[0] == (1, 3) and resumed.batches[3] == (2, 0)
    assert trainer.global_step == 17 and trainer.fit_loop.epoch_loop.batch_progress.current.completed == 6
