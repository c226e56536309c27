"""A fit resumed from the checkpoint of a run that `EarlyStopping` ended trains no more (deliberate difference).

Lightning does not keep the Trainer's ``should_stop`` in the checkpoint: resumed from the ``last.ckpt`` written at
the end of the epoch in which early stopping fired (a job that a scheduler runs again after a preemption, or a
script run again to resume), it trains another epoch before the restored callback stops it again, and the run ends
with other weights than the uninterrupted one. fabricx's `EarlyStopping` keeps whether it stopped the run; the
resumed fit ends at once (docs/migrating/lightning-trainer.md).
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset


def _module_class(base: type) -> type:
    class Module(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.batches_trained = 0

        def training_step(self, batch, batch_idx):
            self.batches_trained += 1
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Module


def _fit_then_resume(trainer_class: type, module_class: type, early_stopping: type, checkpoint: type, folder,
                     resume_with_early_stopping: bool = True) -> list[int]:
    """A run that early stopping ends after epoch 1 (no epoch betters epoch 0 by ``min_delta``), then a fit resumed
    from its ``last.ckpt`` with the same callbacks (or without `EarlyStopping`): the batches each trained."""
    Module = _module_class(module_class)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    loaders = DataLoader(data, batch_size=4), DataLoader(data, batch_size=8)
    trained = []
    for resume in (False, True):
        callbacks = [checkpoint(dirpath=folder, save_last=True)]
        if resume_with_early_stopping or not resume:
            callbacks.insert(0, early_stopping(monitor="val_loss", min_delta=1e6, patience=1))
        trainer = trainer_class(max_epochs=5, logger=False, enable_progress_bar=False, enable_model_summary=False,
                                callbacks=callbacks, default_root_dir=folder)
        module = Module()
        trainer.fit(module, *loaders, ckpt_path=str(folder / "last.ckpt") if resume else None)
        trained.append(module.batches_trained)
    return trained


def test_a_fit_resumed_after_early_stopping_ended_the_run_trains_no_more(tmp_path, capsys):
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import EarlyStopping as LightningEarlyStopping
    from lightning.pytorch.callbacks import ModelCheckpoint as LightningModelCheckpoint

    import fabricx.train as fx
    from fabricx.callbacks import EarlyStopping, ModelCheckpoint

    theirs = _fit_then_resume(pl.Trainer, pl.LightningModule, LightningEarlyStopping, LightningModelCheckpoint,
                              tmp_path / "lightning")
    assert theirs == [8, 4]  # 2 epochs of 4 batches, then one more epoch after the resume
    ours = _fit_then_resume(fx.Trainer, fx.TrainModule, EarlyStopping, ModelCheckpoint, tmp_path / "fabricx")
    assert ours == [8, 0]
    said = capsys.readouterr()
    assert "EarlyStopping(monitor='val_loss') had stopped the run saved in" in said.out + said.err
    assert "the resumed fit trains no more" in said.out + said.err


def test_the_stop_is_kept_only_where_early_stopping_made_it(tmp_path):
    """Without the callback its state is not restored and the fit trains on; a checkpoint written before the stop,
    or by Lightning (no such entry), resumes the run as usual."""
    import fabricx.train as fx
    from fabricx.callbacks import EarlyStopping, ModelCheckpoint

    trained = _fit_then_resume(fx.Trainer, fx.TrainModule, EarlyStopping, ModelCheckpoint, tmp_path,
                               resume_with_early_stopping=False)
    assert trained == [8, 12]  # epochs 2 to 4 (max_epochs=5) once early stopping is gone
    state = EarlyStopping(monitor="val_loss").state_dict()
    assert state["stopped_the_run"] is False
    for saved in (state, {key: value for key, value in state.items() if key != "stopped_the_run"}):
        resumed = EarlyStopping(monitor="val_loss")
        resumed.load_state_dict(saved)
        assert not resumed._restored_a_stopped_run


class _Preempted(Exception):
    pass


def test_a_fit_resumed_after_early_stopping_stopped_inside_an_epoch_ends_that_epoch_and_no_more(tmp_path):
    """Stopped by the first validation of epoch 1 (``val_check_interval=0.5``), the run left alone reads no more
    of that epoch and runs its end hooks; the resumed fit from the ``last.ckpt`` of that validation does the same."""
    import fabricx.train as fx
    from fabricx.callbacks import EarlyStopping, ModelCheckpoint

    Module = _module_class(fx.TrainModule)

    class Counted(Module):  # type: ignore[misc, valid-type]
        preempt = False

        def on_train_epoch_end(self):
            self.epoch_ends = getattr(self, "epoch_ends", 0) + 1

        def on_train_end(self):
            if self.preempt:
                raise _Preempted  # after the last checkpoint, before the process ends

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    seen = []
    for preempt, ckpt_path in ((False, None), (True, None), (False, "last")):
        folder = tmp_path / ("alone" if not preempt and ckpt_path is None else "run")
        stop = EarlyStopping(monitor="val_loss", min_delta=1e6, patience=2, check_on_train_epoch_end=False)
        trainer = fx.Trainer(max_epochs=5, val_check_interval=0.5, logger=False, enable_progress_bar=False,
                             enable_model_summary=False, default_root_dir=folder,
                             callbacks=[stop, ModelCheckpoint(dirpath=folder, save_last=True)])
        module = Counted()
        module.preempt = preempt
        try:
            trainer.fit(module, DataLoader(data, batch_size=4), DataLoader(data, batch_size=8), ckpt_path=ckpt_path)
        except _Preempted:
            pass
        seen.append((module.batches_trained, getattr(module, "epoch_ends", 0), trainer.current_epoch))
    alone, preempted, resumed = seen
    assert alone == preempted == (12, 2, 2)  # 8 batches, then 4 of epoch 1 (of 8) before its first validation
    assert resumed == (0, 1, 2)  # epoch 1's end hooks, as the run left alone ran them after the stop
