"""configure_optimizers forms, self.log semantics, evaluation behaviour and the errors a user can act on."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from _train_helpers import Regressor, loader, regression_data

from fabricx.callbacks import EarlyStopping, ModelCheckpoint
from fabricx.train import Trainer, TrainModule
from fabricx.train.optim.optimizers import parse_optimizers
from fabricx.utilities.exceptions import MisconfigurationError, MisconfigurationException
from fabricx.wrappers import unwrap


def _trainer(tmp_path, **kwargs):
    options = dict(
        accelerator="cpu",
        default_root_dir=tmp_path,
        loggers=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        max_epochs=1,
    )
    options.update(kwargs)
    if any(isinstance(cb, ModelCheckpoint) for cb in options.get("callbacks") or ()):
        options["enable_checkpointing"] = True  # as Lightning, False with a ModelCheckpoint given is refused
    return Trainer(**options)


# -- configure_optimizers ---------------------------------------------------------------------------------
def _opt():
    return torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)


def test_every_configure_optimizers_form_parses():
    a, b = _opt(), _opt()
    sa = torch.optim.lr_scheduler.StepLR(a, 1)
    sb = torch.optim.lr_scheduler.ExponentialLR(b, 0.9)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(a)

    assert parse_optimizers(a) == ([a], [])
    assert parse_optimizers([a, b]) == ([a, b], [])
    assert parse_optimizers((a,)) == ([a], [])
    optimizers, configs = parse_optimizers(([a, b], [sa, sb]))
    assert optimizers == [a, b] and [c.scheduler for c in configs] == [sa, sb]
    assert all(c.interval == "epoch" and c.frequency == 1 for c in configs)
    optimizers, [config] = parse_optimizers({"optimizer": a, "lr_scheduler": sa})
    assert optimizers == [a] and config.scheduler is sa and config.interval == "epoch"
    _, [config] = parse_optimizers(
        {"optimizer": a, "lr_scheduler": {"scheduler": sa, "interval": "step", "frequency": 3, "name": "warm"}}
    )
    assert (config.interval, config.frequency, config.name) == ("step", 3, "warm")
    _, [config] = parse_optimizers({"optimizer": a, "lr_scheduler": plateau, "monitor": "val_loss"})
    assert config.reduce_on_plateau and config.monitor == "val_loss"
    optimizers, configs = parse_optimizers([{"optimizer": a, "lr_scheduler": sa}, {"optimizer": b}])
    assert optimizers == [a, b] and [c.scheduler for c in configs] == [sa]
    optimizers, [config] = parse_optimizers(([a], [{"scheduler": sa, "interval": "step"}]))
    assert config.interval == "step"


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        ("sgd", "it is a str"),
        ([], "it is empty"),
        ({"lr_scheduler": None}, "no 'optimizer' key"),
        ({"optimizer": "opt"}, "str is not a torch.optim.Optimizer"),
        ("bad-interval", "interval='hourly'"),
        ("bad-frequency", "frequency=0"),
        ("plateau", "ReduceLROnPlateau without a metric"),
    ],
)
def test_wrong_configure_optimizers_returns_are_clear_errors(returned, message):
    opt = _opt()
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    returned = (
        {
            "bad-interval": {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "hourly"}},
            "bad-frequency": {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "frequency": 0}},
            "plateau": {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt)},
        }.get(returned, returned)
        if isinstance(returned, str)
        else returned
    )
    with pytest.raises(MisconfigurationError, match="configure_optimizers") as info:
        parse_optimizers(returned)
    assert message in str(info.value)


def test_scheduler_dicts_and_objects_are_checked_as_lightning_checks_them():
    opt = _opt()
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    # An unknown key is dropped with Lightning's RuntimeWarning (not refused).
    with pytest.warns(RuntimeWarning, match=r"Found unsupported keys in the lr scheduler dict: \{'every'\}"):
        _, [config] = parse_optimizers({"optimizer": opt, "lr_scheduler": {"scheduler": sched, "every": 2}})
    assert config.scheduler is sched
    # Manual optimization ignores the keys only automatic stepping reads, with Lightning's warning.
    with pytest.warns(RuntimeWarning, match=r"contains the key\(s\) \['monitor'\], but the keys will be ignored"):
        _, [config] = parse_optimizers(
            {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "loss"}}, manual=True
        )
    assert config.monitor is None
    # Without state_dict/load_state_dict a scheduler cannot be checkpointed: Lightning's TypeError.
    with pytest.raises(TypeError, match="should have `state_dict` and `load_state_dict` methods"):
        parse_optimizers(([opt], [object()]))

    class NoStep:
        optimizer = opt

        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

    # No step(): refused in automatic optimization unless lr_scheduler_step is overridden; fine in manual.
    with pytest.raises(MisconfigurationError, match="doesn't follow PyTorch's LRScheduler API"):
        parse_optimizers(([opt], [NoStep()]))
    assert parse_optimizers(([opt], [NoStep()]), custom_scheduler_step=True)[1][0].scheduler.__class__ is NoStep
    assert parse_optimizers(([opt], [NoStep()]), manual=True)[1][0].scheduler.__class__ is NoStep


def test_reduce_on_plateau_steps_with_monitored_metric(tmp_path):
    class Plateau(Regressor):
        def validation_step(self, batch, batch_idx):
            self.log("val_loss", torch.tensor(1.0))  # never improves

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=0)
            return {"optimizer": optimizer, "lr_scheduler": scheduler, "monitor": "val_loss"}

    trainer = _trainer(tmp_path, max_epochs=3)
    trainer.fit(Plateau(), loader(regression_data(16)), loader(regression_data(16)))
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.25)  # halved after epochs 1 and 2


# -- errors that name the hook ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("returned", "shown"),
    [
        ({"logits": 1}, "training_step returned a dict with keys ['logits']"),
        ("detached", "does not require grad"),
    ],
)
def test_training_step_without_loss_is_a_clear_error(tmp_path, returned, shown):
    class NoLoss(Regressor):
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            return loss.detach() if returned == "detached" else returned

    with pytest.raises(MisconfigurationError) as info:
        _trainer(tmp_path).fit(NoLoss(), loader(regression_data(32)))
    assert shown in str(info.value)


def test_monitoring_a_metric_never_logged_names_the_hook(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "c", monitor="val_acc")
    with pytest.raises(MisconfigurationError) as info:
        _trainer(tmp_path, callbacks=[checkpoint]).fit(
            Regressor(), loader(regression_data(32)), loader(regression_data(16))
        )
    message = str(info.value)
    assert "ModelCheckpoint(monitor='val_acc')" in message and "on_train_epoch_end" in message
    assert "val_loss" in message  # lists what was logged

    # RuntimeError, as Lightning raises; checked at the end of each training epoch, as in Lightning.
    missing = r"metric `nope` which is not available.*EarlyStopping\(monitor='nope'\).*on_train_epoch_end"
    with pytest.raises(RuntimeError, match=missing):
        _trainer(tmp_path, callbacks=[EarlyStopping("nope")]).fit(
            Regressor(), loader(regression_data(32)), loader(regression_data(16))
        )


def test_validation_data_without_validation_step_is_skipped_with_a_warning(tmp_path):
    # As Lightning: validation data without a validation_step skips validation, with Lightning's warning.
    class TrainOnly(TrainModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(32, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = _trainer(tmp_path)
    with pytest.warns(UserWarning, match="but have no `validation_step`. Skipping val loop"):
        trainer.fit(TrainOnly(), loader(regression_data(32)), loader(regression_data(16)))
    assert trainer.num_val_batches == [] and trainer.global_step > 0


def test_log_with_on_step_in_epoch_hook_is_an_error(tmp_path):
    class Bad(Regressor):
        def on_train_epoch_end(self):
            self.log("x", 1.0, on_step=True)

    with pytest.raises(MisconfigurationException, match="on_train_epoch_end"):  # Lightning's type
        _trainer(tmp_path).fit(Bad(), loader(regression_data(32)))


_REFUSING_HOOKS = [
    "prepare_data", "setup", "configure_callbacks", "configure_model", "configure_optimizers", "on_fit_start",
    "train_dataloader", "val_dataloader", "on_before_batch_transfer", "transfer_batch_to_device",
    "on_after_batch_transfer", "on_validation_model_eval", "lr_scheduler_step", "on_save_checkpoint",
    "on_train_end", "on_fit_end", "teardown",
]


@pytest.mark.parametrize("hook", _REFUSING_HOOKS)
def test_log_in_a_hook_lightning_refuses_is_refused(tmp_path, hook):
    class WithData(Regressor):
        def train_dataloader(self):
            return loader(regression_data(16))

        def val_dataloader(self):
            return loader(regression_data(8), shuffle=False)

    def logging_hook(self, *args, **kwargs):
        self.log("x", 1.0)
        return getattr(super(Logs, self), hook)(*args, **kwargs)

    Logs = type("Logs", (WithData,), {hook: logging_hook})
    trainer = _trainer(tmp_path, limit_train_batches=2, limit_val_batches=1, callbacks=[ModelCheckpoint(tmp_path)])
    with pytest.raises(MisconfigurationException, match=f"You can't `self.log\\(\\)` inside `{hook}`"):
        trainer.fit(Logs(scheduler="step"))


def test_callback_hooks_log_as_the_hook_they_are(tmp_path):
    from fabricx.callbacks import Callback

    class Refused(Callback):
        def on_fit_start(self, trainer, module):
            module.log("x", 1.0)

    class Allowed(Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            module.log("from_batch_end", 2.0)  # a step hook: per step by default

        def on_train_epoch_end(self, trainer, module):
            with pytest.raises(MisconfigurationException, match="on_step=True.*on_train_epoch_end"):
                module.log("per_step", 1.0, on_step=True)

    with pytest.raises(MisconfigurationException, match="You can't `self.log\\(\\)` inside `on_fit_start`"):
        _trainer(tmp_path, callbacks=[Refused()]).fit(Regressor(), loader(regression_data(16)))
    module = Regressor()
    trainer = _trainer(tmp_path, callbacks=[Allowed()])
    trainer.fit(module, loader(regression_data(16)))
    assert float(trainer.callback_metrics["from_batch_end"]) == 2.0
    assert module.__dict__.get("_current_fx_name") is None  # each hook restores the one around it


# -- evaluation ----------------------------------------------------------------------------------------------
def test_validation_has_no_gradients_and_restores_modes_even_after_an_exception(tmp_path):
    seen = {}

    class Failing(Regressor):
        def validation_step(self, batch, batch_idx):
            seen["grad"] = torch.is_grad_enabled()
            seen["training"] = self.training
            raise ValueError("broken validation")

    module = Failing()
    module.net[0].eval()  # a submodule the user keeps in eval mode
    with pytest.raises(ValueError, match="broken validation"):
        _trainer(tmp_path).fit(module, loader(regression_data(32)), loader(regression_data(16)))
    assert seen == {"grad": False, "training": False}
    assert module.training and module.net[2].training
    assert not module.net[0].training

    trainer = _trainer(tmp_path)
    module = Failing()
    module.train()
    with pytest.raises(ValueError):
        trainer.validate(module, loader(regression_data(16)))
    assert module.training


def test_epoch_means_are_weighted_by_batch_size(tmp_path):
    data = regression_data(20)
    trainer = _trainer(tmp_path)
    module = Regressor()
    trainer.fit(module, loader(data, batch_size=8), loader(data, batch_size=8, shuffle=False))  # 8, 8, 4
    assert set(trainer.callback_metrics) >= {"train_loss", "train_loss_step", "train_loss_epoch", "val_loss"}
    [metrics] = trainer.validate(module, loader(data, batch_size=8, shuffle=False))
    with torch.no_grad():
        expected = torch.nn.functional.mse_loss(module(data.tensors[0]), data.tensors[1]).item()
    assert metrics["val_loss"] == pytest.approx(expected, rel=1e-6)
    # As in Lightning, each run starts with fresh metrics: after validate() they are the validation ones.
    assert set(trainer.callback_metrics) == {"val_loss"}


def test_reduce_fx_and_log_dict(tmp_path):
    class Reductions(Regressor):
        def training_step(self, batch, batch_idx):
            self.log_dict({"biggest": float(batch_idx), "total": 1.0}, on_step=False, on_epoch=True, reduce_fx="max")
            self.log("count", 1.0, on_step=False, on_epoch=True, reduce_fx="sum")
            return super().training_step(batch, batch_idx)

    trainer = _trainer(tmp_path)
    trainer.fit(Reductions(), loader(regression_data(40)))  # 5 batches
    metrics = trainer.callback_metrics
    assert float(metrics["biggest"]) == 4.0 and float(metrics["count"]) == 5.0 and float(metrics["total"]) == 1.0


@pytest.mark.parametrize("compute_groups", [True, False])
def test_log_dict_of_a_metric_collection_keeps_its_compute_groups(tmp_path, compute_groups):
    from torchmetrics import MetricCollection
    from torchmetrics.classification import MulticlassAccuracy, MulticlassPrecision

    calls = []

    class Recorded(MetricCollection):
        def items(self, keep_base=False, copy_state=True):
            calls.append((keep_base, copy_state))
            return super().items(keep_base=keep_base, copy_state=copy_state)

    class WithMetrics(Regressor):
        def __init__(self):
            super().__init__()
            average = {"num_classes": 3, "average": "micro"}
            self.metrics = Recorded(
                [MulticlassAccuracy(**average), MulticlassPrecision(**average)], compute_groups=compute_groups
            )

        def training_step(self, batch, batch_idx):
            self.metrics(torch.tensor([0, 1, 2, 2]), torch.tensor([0, 1, 2, 0]))
            calls.clear()
            self.log_dict(self.metrics, on_step=False, on_epoch=True)
            # As Lightning: asked once, without the base names, and without copying a compute group's state.
            assert calls == [(False, not compute_groups)]
            return super().training_step(batch, batch_idx)

    trainer = _trainer(tmp_path, limit_train_batches=2)
    trainer.fit(WithMetrics(), loader(regression_data(32)))
    metrics = trainer.callback_metrics
    assert float(metrics["MulticlassAccuracy"]) == pytest.approx(0.75)
    assert float(metrics["MulticlassPrecision"]) == pytest.approx(0.75)


def test_test_and_predict(tmp_path):
    class WithTest(Regressor):
        def test_step(self, batch, batch_idx):
            self.log("test_loss", torch.nn.functional.mse_loss(self(batch[0]), batch[1]))

        def predict_step(self, batch, batch_idx):
            return self(batch[0])

    trainer = _trainer(tmp_path)
    module = WithTest()
    [metrics] = trainer.test(module, loader(regression_data(16)))
    assert set(metrics) == {"test_loss"}
    predictions = trainer.predict(module, loader(regression_data(16), shuffle=False))
    assert [p.shape for p in predictions] == [torch.Size([8, 1])] * 2


def test_steps_run_through_the_precision_context(tmp_path):
    seen = []

    class Probe(Regressor):
        def training_step(self, batch, batch_idx):
            seen.append(torch.is_autocast_enabled("cpu"))
            return super().training_step(batch, batch_idx)

    _trainer(tmp_path, precision="bf16-mixed", max_steps=2).fit(Probe(), loader(regression_data(32)))
    assert seen == [True, True]


def test_module_properties(tmp_path):
    module = Regressor()
    with pytest.raises(Exception, match="not attached to a `Trainer`"):
        _ = module.trainer
    trainer = _trainer(tmp_path, max_steps=3)
    trainer.fit(module, loader(regression_data(32)))
    assert module.trainer is trainer and module.fabric is trainer.fabric
    assert module.global_step == 3 and module.device == torch.device("cpu")
    assert module.optimizers().optimizer is unwrap(trainer.optimizers[0]) and module.lr_schedulers() is None
    assert isinstance(module.optimizers(), torch.optim.SGD)


def test_importing_fabricx_train_is_cheap():
    code = (
        "import sys, fabricx.train, fabricx.callbacks; from fabricx.train import Trainer, TrainModule; "
        "heavy = [m for m in ('rich', 'torchmetrics', 'tensorboard') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_fitted_module_pickles_and_copies_without_its_trainer(tmp_path):
    # As Lightning's LightningModule.__getstate__: the Trainer that ran the module is left behind (fabricx's Trainer
    # holds its processes and does not pickle), so users can pickle, deep-copy (an EMA copy) or send a fitted module.
    import copy
    import pickle

    module = Regressor()
    trainer = Trainer(accelerator="cpu", default_root_dir=tmp_path, max_epochs=1, logger=False,
                      enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    trainer.fit(module, loader(regression_data(16)))
    assert module.trainer is trainer
    for twin in (pickle.loads(pickle.dumps(module)), copy.deepcopy(module)):
        assert twin.__dict__["_trainer"] is None
        theirs, ours = twin.state_dict(), module.state_dict()
        assert theirs.keys() == ours.keys() and all(torch.equal(theirs[k], ours[k]) for k in ours)
    assert module.trainer is trainer  # the original keeps it
