"""`trainer.fit_loop` and the evaluation loops count as Lightning's do: the same fit through Lightning and through
fabricx leaves the same progress counters, in the loop objects and in the checkpoint's `loops` entry."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import fabricx.train as fx
from fabricx.callbacks import ModelCheckpoint


def _data(samples: int) -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(samples, 4, generator=generator)), batch_size=2)


def _module(base: type) -> object:
    class Module(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def validation_step(self, batch, batch_idx):
            self.log("val", self.layer(batch[0]).mean())

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)]

    return Module()


def _run(trainer_class: type, module_class: type, tmp_path, **flags) -> tuple[dict, dict, dict]:
    options = dict(default_root_dir=tmp_path, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False, accelerator="cpu", max_epochs=2, limit_val_batches=2)
    trainer = trainer_class(**{**options, **flags})
    module = _module(module_class)
    trainer.fit(module, _data(10), _data(6))
    fit = trainer.fit_loop.state_dict()
    trainer.save_checkpoint(tmp_path / "end.ckpt")
    saved = torch.load(tmp_path / "end.ckpt", weights_only=True)["loops"]["fit_loop"]
    trainer.validate(module, _data(6), verbose=False)
    return fit, saved, trainer.validate_loop.state_dict()


def _counters(state: dict) -> dict:
    # The loops' own `state_dict` entries hold implementation details (dataloader state, internal counters).
    return {key: value for key, value in state.items() if not key.endswith("state_dict")}


@pytest.mark.parametrize("flags", [{}, {"accumulate_grad_batches": 2, "limit_train_batches": 5},
                                   {"max_steps": 3}, {"val_check_interval": 2, "num_sanity_val_steps": 1}])
def test_progress_counters_equal_lightnings(tmp_path, flags):
    import lightning.pytorch as pl

    theirs = _run(pl.Trainer, pl.LightningModule, tmp_path / "lightning", **flags)
    ours = _run(fx.Trainer, fx.TrainModule, tmp_path / "fabricx", **flags)
    for mine, lightning in zip(ours, theirs, strict=True):
        assert _counters(mine) == _counters(lightning)
    assert ours[0]["epoch_progress"]["total"]["completed"] > 0  # the comparison saw a run


def test_a_restored_fit_loop_resets_begun_counts_to_completed(tmp_path):
    """Written in on_train_batch_end (processed, not completed): the restart completes that batch."""
    checkpoints = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2)
    trainer = fx.Trainer(default_root_dir=tmp_path, logger=False, enable_progress_bar=False, max_steps=3,
                         enable_model_summary=False, callbacks=[checkpoints])
    trainer.fit(_module(fx.TrainModule), _data(10))
    loops = torch.load(tmp_path / "epoch=0-step=2.ckpt", weights_only=True)["loops"]["fit_loop"]
    assert loops["epoch_loop.batch_progress"]["total"] == {"ready": 2, "started": 2, "processed": 2, "completed": 1}
    fit_loop = trainer.fit_loop
    fit_loop.load_state_dict(loops)
    assert fit_loop.restarting and fit_loop.epoch_loop.automatic_optimization.restarting
    fit_loop.reset()
    fit_loop.epoch_loop.reset()
    assert fit_loop.epoch_loop.batch_progress.current.state_dict() == {
        "ready": 2, "started": 2, "processed": 2, "completed": 2
    }
