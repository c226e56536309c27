"""`OnExceptionCheckpoint` behaves as Lightning's: the same runs through both leave the same files."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset


class _Crash(Exception):
    pass


def _module_class(base: type) -> type:
    """A module on ``base`` that crashes in epoch 1 when asked; its optimizer has one parameter group, or one per
    parameter."""

    class Module(base):  # type: ignore[misc, valid-type]
        def __init__(self, crash: bool, group_per_parameter: bool = False) -> None:
            super().__init__()
            self.layer, self.crash, self.group_per_parameter = torch.nn.Linear(4, 1), crash, group_per_parameter

        def training_step(self, batch, batch_idx):
            if self.crash and self.current_epoch == 1:
                raise _Crash
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            groups = [{"params": [p]} for p in self.parameters()] if self.group_per_parameter else self.parameters()
            return torch.optim.SGD(groups, lr=0.1)

    return Module


def _runs(trainer_class: type, module_class: type, callback_class: type, folder) -> list[bool]:
    """Crash in epoch 1, then a run that ends well: whether the file exists after each."""
    Module = _module_class(module_class)
    data = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)
    callback = callback_class(folder)
    seen = []
    for crash in (True, False):
        trainer = trainer_class(default_root_dir=folder, max_epochs=2, logger=False, enable_progress_bar=False,
                                enable_model_summary=False, callbacks=[callback])
        if crash:
            with pytest.raises(_Crash):
                trainer.fit(Module(crash), data)
        else:
            trainer.fit(Module(crash), data)
        seen.append((folder / "on_exception.ckpt").is_file())
    return seen


def test_written_on_a_crash_and_removed_by_a_run_that_ends_well_as_in_lightning(tmp_path):
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import OnExceptionCheckpoint as LightningOnException

    import fabricx.train as fx
    from fabricx.callbacks import OnExceptionCheckpoint

    theirs = _runs(pl.Trainer, pl.LightningModule, LightningOnException, tmp_path / "lightning")
    ours = _runs(fx.Trainer, fx.TrainModule, OnExceptionCheckpoint, tmp_path / "fabricx")
    assert ours == theirs == [True, False]


def test_an_empty_filename_is_refused_as_lightning_refuses_it():
    from lightning.pytorch.callbacks import OnExceptionCheckpoint as LightningOnException

    from fabricx.callbacks import OnExceptionCheckpoint

    for callback_class in (LightningOnException, OnExceptionCheckpoint):
        with pytest.raises(ValueError, match="The filename cannot be empty"):
            callback_class("here", filename="")
    assert OnExceptionCheckpoint("here").ckpt_path == LightningOnException("here").ckpt_path


def test_a_fit_that_fails_before_setup_raises_its_own_error_and_writes_nothing(tmp_path):
    import fabricx.train as fx
    from fabricx.callbacks import Callback, OnExceptionCheckpoint

    class Failing(Callback):
        def on_exception(self, trainer, pl_module, exception):
            raise RuntimeError("the handler broke too")

    class Module(fx.TrainModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)
    trainer = fx.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[OnExceptionCheckpoint(tmp_path), Failing()], default_root_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="missing.ckpt") as raised:
        trainer.fit(Module(), data, ckpt_path=str(tmp_path / "missing.ckpt"))
    # No module was set up: nothing to save, so nothing written (the checkpoint to resume from is left alone) ...
    assert not (tmp_path / "on_exception.ckpt").exists()
    # ... and a hook that fails while handling the error leaves the original in charge, with a note of its own.
    [note] = raised.value.__notes__
    assert note.startswith("While handling it, an on_exception hook raised RuntimeError: the handler broke too (")
    assert note.endswith(f"{__file__}:{Failing.on_exception.__code__.co_firstlineno + 1}, in on_exception)")


def _resume_with_another_optimizer(trainer_class: type, module_class: type, callback_class: type, folder) -> bool:
    """Crash, then resume from the exception checkpoint with an optimizer of two parameter groups, which the saved
    one-group state does not fit: whether the file the resume read is still the crash's."""
    Module = _module_class(module_class)
    data = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4)
    flags = dict(default_root_dir=folder, max_epochs=2, logger=False, enable_progress_bar=False,
                 enable_model_summary=False)
    with pytest.raises(_Crash):
        trainer_class(**flags, callbacks=[callback_class(folder)]).fit(Module(True), data)
    path = folder / "on_exception.ckpt"
    saved = path.read_bytes()
    resumed = Module(False, group_per_parameter=True)
    with pytest.raises(ValueError, match="parameter groups"):  # fabricx's CheckpointError is a ValueError too
        trainer_class(**flags, callbacks=[callback_class(folder)]).fit(resumed, data, ckpt_path=str(path))
    return path.read_bytes() == saved


def test_a_resume_that_fails_to_restore_keeps_the_checkpoint_it_read(tmp_path):
    """Deliberate difference (docs/migrating/lightning-trainer.md): Lightning's `OnExceptionCheckpoint` writes the
    half-restored run over the file the resume was reading; fabricx's writes nothing until the restore is whole."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import OnExceptionCheckpoint as LightningOnException

    import fabricx.train as fx
    from fabricx.callbacks import OnExceptionCheckpoint

    assert not _resume_with_another_optimizer(pl.Trainer, pl.LightningModule, LightningOnException, tmp_path / "pl")
    assert _resume_with_another_optimizer(fx.Trainer, fx.TrainModule, OnExceptionCheckpoint, tmp_path / "fabricx")
