"""LightningModule features on fabricx's Trainer that the differential test does not cover: refusals with
what to do instead, Lightning's flags, hyper-parameters and checkpoints, a resume after a max_steps cut."""

from __future__ import annotations

import pytest
import torch
from _train_helpers import Regressor, loader, regression_data
from torch.utils.data import DataLoader

from fabricx.callbacks import Callback, EarlyStopping, ModelCheckpoint, OnExceptionCheckpoint
from fabricx.train import DataModule, Trainer, TrainModule
from fabricx.utilities.exceptions import MisconfigurationError


def _trainer(tmp_path, **kwargs):
    settings = {
        "accelerator": "cpu",
        "default_root_dir": tmp_path,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "logger": False,
    }
    settings.update(kwargs)
    return Trainer(**settings)


class TwoOptimizers(Regressor):
    def configure_optimizers(self):
        half = list(self.parameters())
        return [torch.optim.SGD(half[:2], lr=0.1), torch.optim.SGD(half[2:], lr=0.1)]


class Manual(Regressor):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        loss = super().training_step(batch, batch_idx)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()


def test_refusals_say_what_to_use_instead(tmp_path):
    data = loader(regression_data(16))
    # As Lightning: a RuntimeError (FabricxError), with its phrase.
    with pytest.raises(RuntimeError, match="only supported with manual optimization.*Set self.automatic_optimization"):
        _trainer(tmp_path, enable_checkpointing=False).fit(TwoOptimizers(), data)
    with pytest.raises(MisconfigurationError, match="Accumulate in training_step yourself"):
        _trainer(tmp_path, accumulate_grad_batches=2, enable_checkpointing=False).fit(Manual(), data)
    with pytest.raises(MisconfigurationError, match=r"Call self.clip_gradients"):
        _trainer(tmp_path, gradient_clip_val=1.0, enable_checkpointing=False).fit(Manual(), data)
    with pytest.raises(ValueError, match="'simple'"):
        _trainer(tmp_path, profiler="fastest")
    with pytest.raises(MisconfigurationError, match="name the same setting"):
        _trainer(tmp_path, grad_accum_steps=2, accumulate_grad_batches=4)
    with pytest.raises(MisconfigurationError, match="found no train data"):
        _trainer(tmp_path, enable_checkpointing=False).fit(Regressor())
    with pytest.raises(MisconfigurationError, match="DD:HH:MM:SS"):
        _trainer(tmp_path, max_time="an hour")


def test_manual_optimization_counts_every_step_and_manual_backward_is_refused_in_automatic(tmp_path):
    trainer = _trainer(tmp_path, max_epochs=1, enable_checkpointing=False)
    trainer.fit(Manual(), loader(regression_data(32)))
    assert trainer.global_step == 4 and trainer.progress.batches_that_stepped == 4

    class Wrong(Regressor):
        def training_step(self, batch, batch_idx):
            self.manual_backward(super().training_step(batch, batch_idx))

    with pytest.raises(Exception, match="manual_backward\\(\\) is for manual optimization"):
        _trainer(tmp_path, enable_checkpointing=False).fit(Wrong(), loader(regression_data(16)))


def test_fast_dev_run_min_epochs_and_overfit_batches(tmp_path):
    trainer = _trainer(tmp_path, fast_dev_run=2, logger=None)
    trainer.fit(Regressor(), loader(regression_data(64)), loader(regression_data(16)))
    # As Lightning: the loggers become one DummyLogger that records nothing.
    assert trainer.global_step == 2 and [type(x).__name__ for x in trainer.loggers] == ["DummyLogger"]
    assert trainer.checkpoint_callback is None

    class StopAtOnce(EarlyStopping):
        def on_train_epoch_end(self, trainer, module):
            trainer.should_stop = True

    trainer = _trainer(
        tmp_path, max_epochs=10, min_epochs=3, callbacks=[StopAtOnce(monitor="x")], enable_checkpointing=False
    )
    trainer.fit(Regressor(), loader(regression_data(16)))
    assert trainer.current_epoch == 3  # the stop request waited for min_epochs

    seen = []

    class Record(Regressor):
        def training_step(self, batch, batch_idx):
            seen.append(batch[0][0, 0].item())
            return super().training_step(batch, batch_idx)

    trainer = _trainer(tmp_path, max_epochs=2, overfit_batches=2, enable_checkpointing=False)
    trainer.fit(Record(), loader(regression_data(64), shuffle=True))
    assert len(seen) == 4 and seen[:2] == seen[2:]  # the same first two batches, unshuffled, every epoch


def test_hparams_ckpt_file_and_load_from_checkpoint(tmp_path):
    class Net(TrainModule):
        def __init__(self, width: int = 3, lr: float = 0.1, note: str = "x", module=None):
            super().__init__()
            self.save_hyperparameters(ignore=["module"])
            self.layer = torch.nn.Linear(2, self.hparams.width)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    net = Net(width=5, lr=0.2, module=torch.nn.ReLU())
    assert net.hparams.width == 5 and dict(net.hparams) == {"width": 5, "lr": 0.2, "note": "x"}
    trainer = _trainer(tmp_path, max_epochs=1, callbacks=[ModelCheckpoint(dirpath=tmp_path / "ck", save_last=True)])
    trainer.fit(net, DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2)), batch_size=4))

    file = tmp_path / "model.ckpt"
    trainer.save_checkpoint(file)
    opened = torch.load(file, weights_only=True)  # what a Lightning user does with a .ckpt
    assert opened["global_step"] == 2 and opened["hyper_parameters"] == {"width": 5, "lr": 0.2, "note": "x"}
    assert torch.equal(opened["state_dict"]["layer.weight"], net.layer.weight)
    for path in (file, tmp_path / "ck" / "last.ckpt"):
        rebuilt = Net.load_from_checkpoint(path, note="y")
        assert rebuilt.hparams.width == 5 and rebuilt.hparams.note == "y"
        assert torch.equal(rebuilt.layer.weight, net.layer.weight)
    # A .ckpt file resumes training too (it used to be refused: the Trainer wrote folders then).
    resumed = _trainer(tmp_path, max_epochs=2)
    again = Net(width=5, lr=0.2, module=torch.nn.ReLU())
    resumed.fit(again, DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2)), batch_size=4), ckpt_path=file)
    assert resumed.global_step == 4 and resumed.current_epoch == 2


def test_datamodule_positional_and_predict_without_a_model(tmp_path):
    class Data(DataModule):
        def setup(self, stage):
            self.data = regression_data(16)

        def train_dataloader(self):
            return loader(self.data, shuffle=False)

        def predict_dataloader(self):
            return DataLoader(self.data.tensors[0], batch_size=8)

    trainer = _trainer(tmp_path, max_epochs=1, enable_checkpointing=False)
    module, data = Regressor(), Data()
    trainer.fit(module, data)
    assert trainer.datamodule is data and data.trainer is trainer
    predictions = trainer.predict(datamodule=data)
    assert [p.shape for p in predictions] == [torch.Size([8, 1])] * 2
    assert trainer.estimated_stepping_batches == 2


def test_resume_after_a_max_steps_cut_continues_the_epoch(tmp_path):
    """The checkpoint written at the end hooks of an epoch cut by max_steps resumes inside that epoch:
    its end-of-epoch validation still runs, and epoch aggregates include the batches before the cut."""

    def run(root, max_steps, ckpt_path=None):
        torch.manual_seed(0)
        module = Regressor()
        trainer = _trainer(
            root,
            max_steps=max_steps,
            num_sanity_val_steps=0,
            callbacks=[ModelCheckpoint(dirpath=root / "ck", save_last=True, save_top_k=0)],
        )
        trainer.fit(
            module, loader(regression_data(64), shuffle=False), loader(regression_data(16)), ckpt_path=ckpt_path
        )
        return trainer, module

    full_trainer, full = run(tmp_path / "full", 12)  # 8 batches per epoch: epoch 1 ends at step 16
    run(tmp_path / "cut", 5)
    trainer, resumed = run(tmp_path / "cut", 12, ckpt_path="last")
    for key, value in full.state_dict().items():
        assert torch.equal(resumed.state_dict()[key], value), key
    assert trainer.global_step == 12 and trainer.callback_metrics == full_trainer.callback_metrics
    assert "val_loss" in trainer.callback_metrics


def test_a_max_steps_cut_saved_at_train_end_resumes_under_an_epoch_limit_as_the_uninterrupted_run(tmp_path):
    """Without validation, `ModelCheckpoint(save_last=True)` writes `last.ckpt` at train end, after the cut epoch was
    counted (`current_epoch` 2, as Lightning's). Resumed under `max_epochs=3`, the rest of epoch 1 runs as epoch 1,
    then epoch 2 whole, as in the uninterrupted run (before, the rest ran as epoch 2 and the run stopped there;
    Lightning starts epoch 2 and drops the rest of epoch 1)."""

    class EpochLog(Regressor):
        def on_train_epoch_start(self):
            self.epochs = [*getattr(self, "epochs", []), self.current_epoch]

        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            self.log("epoch_loss", loss, on_step=False, on_epoch=True)
            return loss

    class EpochAggregates(Callback):
        def __init__(self):
            self.seen = {}

        def on_train_epoch_end(self, trainer, pl_module):
            self.seen[trainer.current_epoch] = trainer.callback_metrics["epoch_loss"].item()

    def run(root, ckpt_path=None, **limits):
        torch.manual_seed(0)
        module, aggregates = EpochLog(), EpochAggregates()
        checkpoint = ModelCheckpoint(dirpath=root / "ck", save_last=True, save_top_k=0)
        trainer = _trainer(root, callbacks=[aggregates, checkpoint], **limits)
        trainer.fit(module, loader(regression_data(64)), ckpt_path=ckpt_path)  # 8 shuffled batches an epoch
        return trainer, module, aggregates.seen

    full_trainer, full, full_seen = run(tmp_path / "full", max_epochs=3)
    cut_trainer, _, _ = run(tmp_path / "cut", max_steps=12)  # epoch 1, after 4 of its 8 batches
    assert cut_trainer.current_epoch == 2  # the cut epoch is counted, as in Lightning
    trainer, resumed, seen = run(tmp_path / "cut", ckpt_path="last", max_epochs=3)
    assert resumed.epochs == [2] and trainer.global_step == full_trainer.global_step == 24
    for key, value in full.state_dict().items():
        assert torch.equal(resumed.state_dict()[key], value), key
    # epoch 1's mean loss covers the batches before the cut too
    assert seen == {1: full_seen[1], 2: full_seen[2]}
    assert trainer.callback_metrics == full_trainer.callback_metrics


def test_an_exception_in_the_epoch_end_hooks_resumes_without_reading_that_epoch_again(tmp_path):
    """`OnExceptionCheckpoint`'s file written when a callback raised in epoch 1's `on_train_epoch_end` (after its
    last batch and validation): the resumed fit reads none of epoch 1's batches again, runs its end hooks (the
    ones the exception cut short: `last.ckpt` of epoch 1, the epoch's aggregates), then epoch 2, and ends as the
    uninterrupted run. Before, it read epoch 1 a second time (4 more optimizer steps); Lightning skips epoch 1's
    end hooks and goes on with epoch 2."""

    class Stop(Exception):
        pass

    class Batches(Regressor):
        def training_step(self, batch, batch_idx):
            self.read = [*getattr(self, "read", []), (self.current_epoch, batch_idx)]
            loss = super().training_step(batch, batch_idx)
            self.log("epoch_loss", loss, on_step=False, on_epoch=True)
            return loss

    class StopInEpochEnd(Callback):
        def __init__(self, epoch):
            self.epoch, self.ends = epoch, []

        def on_train_epoch_end(self, trainer, pl_module):
            self.ends.append((trainer.current_epoch, trainer.global_step, trainer.callback_metrics["epoch_loss"]))
            if trainer.current_epoch == self.epoch:
                raise Stop

    def run(root, stop_epoch=None, ckpt_path=None):
        torch.manual_seed(0)
        module, stop = Batches(), StopInEpochEnd(stop_epoch)
        checkpoint = ModelCheckpoint(dirpath=root / "ck", save_last=True, save_top_k=0)
        trainer = _trainer(root, callbacks=[stop, checkpoint, OnExceptionCheckpoint(root)], max_epochs=3)
        try:
            trainer.fit(module, loader(regression_data(32)), ckpt_path=ckpt_path)  # 4 shuffled batches an epoch
        except Stop:
            pass
        return trainer, module, stop.ends

    full_trainer, full, full_ends = run(tmp_path / "full")
    run(tmp_path / "stopped", stop_epoch=1)
    trainer, resumed, ends = run(tmp_path / "stopped", ckpt_path=str(tmp_path / "stopped" / "on_exception.ckpt"))
    assert resumed.read == [(2, index) for index in range(4)]
    assert trainer.global_step == full_trainer.global_step == 12
    assert [end[:2] for end in ends] == [end[:2] for end in full_ends[1:]] == [(1, 8), (2, 12)]
    assert all(torch.equal(ours[2], theirs[2]) for ours, theirs in zip(ends, full_ends[1:], strict=True))
    for key, value in full.state_dict().items():
        assert torch.equal(resumed.state_dict()[key], value), key
    assert torch.load(tmp_path / "stopped" / "ck" / "last.ckpt", weights_only=True)["global_step"] == 12


def test_a_checkpoint_saved_after_fit_returned_resumes_with_the_next_epochs_start_hooks(tmp_path):
    """`trainer.save_checkpoint` after `fit` returned, then a `fit` with more epochs from it: each resumed epoch gets
    `on_train_epoch_start` (epoch 1's was skipped: the finished loader pass was taken for a pass inside epoch 1) and
    the batches and weights are the uninterrupted run's."""

    class Starts(Regressor):
        def on_train_epoch_start(self):
            self.starts = [*getattr(self, "starts", []), self.current_epoch]

    def fit(max_epochs, ckpt_path=None):
        torch.manual_seed(1)
        module = Starts()
        trainer = _trainer(tmp_path, max_epochs=max_epochs, enable_checkpointing=False)
        trainer.fit(module, loader(regression_data(32)), ckpt_path=ckpt_path)
        return trainer, module

    _, straight = fit(3)
    first_trainer, _ = fit(1)
    first_trainer.save_checkpoint(tmp_path / "after_fit.ckpt")
    trainer, resumed = fit(3, str(tmp_path / "after_fit.ckpt"))
    assert resumed.starts == [1, 2] and trainer.global_step == 12
    for key, value in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[key], value), key


def test_building_a_trainer_selects_no_device_until_its_first_run(tmp_path, monkeypatch):
    # A CUDA device cannot exist on this machine: CUDA is reported present and set_device recorded.
    selected: list[object] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", selected.append)
    trainer = Trainer(accelerator="gpu", devices=1, default_root_dir=tmp_path, logger=False)
    # As Lightning's Trainer: __init__ only builds objects, the device is set up when a run starts.
    assert trainer.num_devices == 1 and trainer.global_rank == 0
    assert selected == []
    from fabricx import Fabric

    Fabric(accelerator="cuda", devices=1)  # a plain Fabric is ready to use as soon as it is built
    assert selected == [torch.device("cuda", 0)]


def test_module_methods_name_their_parameters_as_lightnings(tmp_path):
    """A LightningModule's override type-checks against `TrainModule` as against `LightningModule`: every method
    both define takes the same parameter names (the steps take `*args, **kwargs`, so `training_step(self, batch)`
    overrides cleanly); and a module whose steps drop `batch_idx` trains and predicts."""
    import inspect

    from lightning.pytorch import LightningDataModule, LightningModule

    def names(cls, name):
        # Lightning's `load_from_checkpoint` is a descriptor that leaves `cls` in its signature: not a parameter
        return [(p.name, p.kind) for p in inspect.signature(getattr(cls, name)).parameters.values() if p.name != "cls"]

    # `save_hyperparameters(*names)` is Lightning's `*args` under another name: positional only, so no call differs.
    for ours, theirs in ((TrainModule, LightningModule), (DataModule, LightningDataModule)):
        shared = [name for name in vars(ours) if not name.startswith("_") and callable(getattr(ours, name))
                  and callable(getattr(theirs, name, None)) and name != "save_hyperparameters"]
        assert len(shared) >= (30 if ours is TrainModule else 7), shared
        differing = {name: names(ours, name) for name in shared if names(ours, name) != names(theirs, name)}
        assert differing == {}, differing

    class BatchOnly(Regressor):
        def training_step(self, batch):
            return super().training_step(batch, 0)

        def predict_step(self, batch):
            return self.net(batch[0])

    model = BatchOnly()
    trainer = _trainer(tmp_path, max_epochs=1)
    trainer.fit(model, loader(regression_data(), batch_size=8))
    [first, *_] = trainer.predict(model, loader(regression_data(), batch_size=8, shuffle=False))
    assert first.shape == (8, 1)
    assert trainer.global_step > 0
