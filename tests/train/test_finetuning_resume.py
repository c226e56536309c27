"""`BackboneFinetuning` resumed after it unfroze the backbone trains the backbone on (deliberate difference).

The callback freezes the backbone in `setup`, before the checkpoint is restored; the restore gives the optimizer
back the backbone's parameter group. Lightning's leaves the backbone frozen: its parameters stay in the optimizer
without gradients, and the rest of the run trains the head alone. fabricx's state also says what was frozen
(docs/migrating/lightning-trainer.md).
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset


class _Stop(Exception):
    pass


def _module_class(base: type) -> type:
    class Module(base):  # type: ignore[misc, valid-type]
        def __init__(self, stop: bool) -> None:
            super().__init__()
            self.backbone = torch.nn.Linear(4, 8)
            self.head = torch.nn.Linear(8, 1)
            self.stop = stop

        def on_train_batch_end(self, outputs, batch, batch_idx):
            if self.stop and (self.current_epoch, batch_idx) == (1, 1):
                raise _Stop

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.mse_loss(self.head(torch.tanh(self.backbone(batch[0]))), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD([p for p in self.parameters() if p.requires_grad], lr=0.05)

    return Module


def _backbone_after(trainer_class: type, module_class: type, finetuning: type, on_exception: type, folder,
                    stop: bool) -> tuple[torch.Tensor, bool]:
    """The backbone's weight after 3 epochs (unfrozen at epoch 1), left alone or stopped inside epoch 1 and resumed
    from `OnExceptionCheckpoint`'s file; and whether it trains at the end."""
    Module = _module_class(module_class)
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    runs = [(True, None), (False, str(folder / "on_exception.ckpt"))] if stop else [(False, None)]
    for stops, ckpt_path in runs:
        torch.manual_seed(1)
        module = Module(stops)
        trainer = trainer_class(max_epochs=3, logger=False, enable_progress_bar=False, enable_model_summary=False,
                                default_root_dir=folder,
                                callbacks=[finetuning(unfreeze_backbone_at_epoch=1, backbone_initial_lr=0.01),
                                           on_exception(folder)])
        if stops:
            with pytest.raises(_Stop):
                trainer.fit(module, data)
        else:
            trainer.fit(module, data, ckpt_path=ckpt_path)
    return module.backbone.weight.detach().clone(), module.backbone.weight.requires_grad


def test_a_fit_resumed_after_the_backbone_was_unfrozen_trains_it_on(tmp_path):
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import BackboneFinetuning as LightningBackboneFinetuning
    from lightning.pytorch.callbacks import OnExceptionCheckpoint as LightningOnExceptionCheckpoint

    import fabricx.train as fx
    from fabricx.callbacks import BackboneFinetuning, OnExceptionCheckpoint

    theirs = (pl.Trainer, pl.LightningModule, LightningBackboneFinetuning, LightningOnExceptionCheckpoint)
    left_alone, trains = _backbone_after(*theirs, tmp_path / "lightning", stop=False)
    assert trains
    resumed, trains = _backbone_after(*theirs, tmp_path / "lightning-resumed", stop=True)
    assert not trains and not torch.equal(resumed, left_alone)  # frozen again after the resume
    ours = (fx.Trainer, fx.TrainModule, BackboneFinetuning, OnExceptionCheckpoint)
    left_alone, trains = _backbone_after(*ours, tmp_path / "fabricx", stop=False)
    resumed, trains_resumed = _backbone_after(*ours, tmp_path / "fabricx-resumed", stop=True)
    assert trains and trains_resumed
    assert torch.equal(resumed, left_alone)
