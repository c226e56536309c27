"""Trainer.fit against the equivalent hand-written Fabric loop: same seed, 32-true, CPU, same weights."""

from __future__ import annotations

import pytest
import torch
from _train_helpers import Regressor, loader, mlp, regression_data

from fabricx import Fabric
from fabricx.train import Trainer, TrainModule
from fabricx.utilities.seed import seed_everything


def _hand_loop(epochs: int, accum: int, clip: float | None, scheduler: str | None) -> dict[str, torch.Tensor]:
    seed_everything(0)
    fabric = Fabric(accelerator="cpu", devices=1, precision="32-true", grad_accum_steps=accum)
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.7) if scheduler else None
    model, optimizer = fabric.setup(model, optimizer)
    train_loader = fabric.setup_dataloaders(loader(regression_data(), batch_size=8))
    steps = 0
    for _ in range(epochs):
        for x, y in train_loader:
            with fabric.accumulate(model):
                fabric.backward(torch.nn.functional.mse_loss(model(x), y))
                if fabric.sync_gradients:
                    if clip is not None:
                        fabric.clip_gradients(model, optimizer, max_norm=clip, error_if_nonfinite=False)
                    optimizer.step()
                    optimizer.zero_grad()
                    steps += 1
                    if sched is not None and scheduler == "step":
                        sched.step()
        if sched is not None and scheduler == "epoch":
            sched.step()
    return {k: v.clone() for k, v in model.state_dict().items()}


def _trainer_fit(tmp_path, epochs: int, accum: int, clip: float | None, scheduler: str | None):
    trainer = Trainer(
        accelerator="cpu",
        devices=1,
        precision="32-true",
        max_epochs=epochs,
        grad_accum_steps=accum,
        gradient_clip_val=clip,
        seed=0,
        default_root_dir=tmp_path,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        loggers=False,
    )
    module = Regressor(lr=0.05, scheduler=scheduler)
    trainer.fit(module, loader(regression_data(), batch_size=8))
    return trainer, {k: v.clone() for k, v in module.net.state_dict().items()}


@pytest.mark.parametrize(
    ("accum", "clip", "scheduler"),
    [(1, None, None), (3, None, None), (1, 0.05, None), (3, 0.05, "step"), (1, None, "epoch")],
)
def test_fit_matches_hand_written_loop(tmp_path, accum, clip, scheduler):
    expected = _hand_loop(epochs=2, accum=accum, clip=clip, scheduler=scheduler)
    trainer, weights = _trainer_fit(tmp_path, epochs=2, accum=accum, clip=clip, scheduler=scheduler)
    assert weights.keys() == expected.keys()
    for key in expected:
        torch.testing.assert_close(weights[key], expected[key], rtol=0, atol=0, msg=key)
    # 32 batches per epoch; with accumulation 3 the last window of each epoch has 2 micro-batches.
    assert trainer.global_step == 2 * (32 if accum == 1 else 11)


def test_clipping_changes_the_result(tmp_path):
    # Guards the test above: clipping at 0.05 must actually have an effect with this data.
    _, clipped = _trainer_fit(tmp_path, epochs=1, accum=1, clip=0.05, scheduler=None)
    _, plain = _trainer_fit(tmp_path, epochs=1, accum=1, clip=None, scheduler=None)
    assert not torch.equal(clipped["0.weight"], plain["0.weight"])


class _CountingSteps(TrainModule):
    """Counts optimizer and scheduler steps; two schedulers, one per interval."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(32, 1)
        self.optimizer_steps = 0
        self.micro_batches = 0

    def training_step(self, batch, batch_idx):
        self.micro_batches += 1
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def on_before_optimizer_step(self, optimizer):
        self.optimizer_steps += 1

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.01)
        by_step = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=1.0)
        by_epoch = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=1.0)
        return [optimizer], [
            {"scheduler": by_step, "interval": "step", "frequency": 2},
            {"scheduler": by_epoch, "interval": "epoch"},
        ]


def test_accumulation_of_four_over_32_batches_gives_8_steps_and_schedulers_step_correctly(tmp_path):
    trainer = Trainer(
        accelerator="cpu",
        max_epochs=3,
        grad_accum_steps=4,
        default_root_dir=tmp_path,
        loggers=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    module = _CountingSteps()
    trainer.fit(module, loader(regression_data(), batch_size=8))  # 256 / 8 = 32 batches per epoch
    assert module.micro_batches == 3 * 32
    assert module.optimizer_steps == 3 * 8
    assert trainer.global_step == 3 * 8
    by_step, by_epoch = (config.scheduler for config in trainer.lr_scheduler_configs)
    assert by_step.last_epoch == 3 * 8 // 2  # frequency 2: every second optimizer step
    assert by_epoch.last_epoch == 3


def test_max_steps_stops_mid_epoch(tmp_path):
    trainer = Trainer(
        accelerator="cpu",
        max_steps=5,
        default_root_dir=tmp_path,
        loggers=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    module = _CountingSteps()
    trainer.fit(module, loader(regression_data(), batch_size=8))
    assert trainer.global_step == 5
    assert module.micro_batches == 5


def test_limit_train_batches_with_accumulation_steps_at_the_limit(tmp_path):
    trainer = Trainer(
        accelerator="cpu",
        max_epochs=2,
        limit_train_batches=6,
        grad_accum_steps=4,
        default_root_dir=tmp_path,
        loggers=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    module = _CountingSteps()
    trainer.fit(module, loader(regression_data(), batch_size=8))
    assert module.micro_batches == 12
    assert trainer.global_step == 4  # windows of 4 and 2 in each epoch
