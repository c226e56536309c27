"""`trainer.strategy.optimizers`, `lr_scheduler_configs` and `setup_optimizers(trainer)`, as Lightning's Strategy has
them: the optimizers the Trainer runs, and a way to make them anew from ``configure_optimizers`` during fit."""

from __future__ import annotations

import pytest
import torch
from _train_helpers import Regressor, loader, regression_data

from fabricx import Fabric
from fabricx.callbacks import Callback
from fabricx.train import Trainer
from fabricx.train.tuner.tuning import Tuner
from fabricx.utilities.exceptions import FabricxError
from fabricx.wrappers import unwrap


def _trainer(tmp_path, **kwargs):
    options = dict(
        accelerator="cpu",
        default_root_dir=tmp_path,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
    )
    options.update(kwargs)
    return Trainer(**options)


class FrozenHead(Regressor):
    """The first layer trains only once unfrozen: configure_optimizers takes the parameters requiring grad."""

    def __init__(self) -> None:
        super().__init__(scheduler="epoch")
        self.net[0].requires_grad_(False)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=self.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": scheduler}


class Unfreeze(Callback):
    """Unfreezes the first layer and sets the optimizers up again at ``(epoch, batch)``."""

    def __init__(self, epoch: int, batch: int) -> None:
        self.at = (epoch, batch)
        self.first_layer: list[torch.Tensor] = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if (trainer.current_epoch, batch_idx) == self.at:
            module.net[0].requires_grad_(True)
            trainer.strategy.setup_optimizers(trainer)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.first_layer.append(module.net[0].weight.detach().clone())


def test_the_strategy_holds_the_optimizers_the_trainer_runs(tmp_path):
    trainer = _trainer(tmp_path, max_steps=2)
    assert trainer.strategy.optimizers == [] and trainer.strategy.lr_scheduler_configs == []
    trainer.fit(Regressor(scheduler="step"), loader(regression_data(32)))
    assert trainer.strategy.optimizers is trainer.optimizers and len(trainer.optimizers) == 1
    assert trainer.strategy.lr_scheduler_configs is trainer.lr_scheduler_configs
    assert trainer.lr_scheduler_configs[0].interval == "step"


def test_a_plain_fabric_leaves_the_strategy_list_empty():
    fabric = Fabric(accelerator="cpu", devices=1)
    model = torch.nn.Linear(2, 2)
    fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert fabric.strategy.optimizers == []


@pytest.mark.parametrize("batch", [0, 2], ids=["at_epoch_start", "mid_epoch"])
def test_setup_optimizers_during_fit_trains_with_the_new_ones(tmp_path, batch):
    model, callback = FrozenHead(), Unfreeze(epoch=1, batch=batch)
    trainer = _trainer(tmp_path, max_epochs=2, limit_train_batches=4, callbacks=[callback])
    first_optimizer = None

    class Spy(Callback):
        def on_train_start(self, trainer, module):
            nonlocal first_optimizer
            first_optimizer = trainer.optimizers[0]

    trainer.callbacks.append(Spy())
    trainer.fit(model, loader(regression_data(32)))
    frozen = callback.first_layer[: 4 + batch]  # epoch 0 and epoch 1's batches before the new optimizers
    assert all(torch.equal(weight, frozen[0]) for weight in frozen)
    assert not torch.equal(callback.first_layer[4 + batch], frozen[0])  # the new optimizer stepped it at once
    new_optimizer = trainer.strategy.optimizers[0]
    assert new_optimizer is not first_optimizer and trainer.optimizers is trainer.strategy.optimizers
    assert any(p is model.net[0].weight for group in unwrap(new_optimizer).param_groups for p in group["params"])
    assert trainer.lr_scheduler_configs[0].scheduler.optimizer is unwrap(new_optimizer)
    assert model.optimizers() is trainer.run_context.module_optimizers[0]
    assert trainer.global_step == 8


def test_setup_optimizers_outside_a_fit_says_when_to_call_it(tmp_path):
    trainer = _trainer(tmp_path)
    with pytest.raises(FabricxError, match="from a hook of a running fit"):
        trainer.strategy.setup_optimizers(trainer)


def test_the_tuner_leaves_the_module_attached_to_its_trainer(tmp_path):
    model = Regressor()
    trainer = _trainer(tmp_path, max_epochs=1)
    Tuner(trainer).lr_find(model, loader(regression_data(64)), num_training=5)
    assert model.trainer is trainer
