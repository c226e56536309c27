"""ModelCheckpoint top-k and last, EarlyStopping, LearningRateMonitor, progress bar and model summary."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pytest
import torch
from _train_helpers import Regressor, loader, regression_data

from fabricx.callbacks import (
    Callback,
    EarlyStopping,
    LearningRateMonitor,
    ModelCheckpoint,
    ModelSummary,
    RichModelSummary,
    RichProgressBar,
)
from fabricx.train import Trainer
from fabricx.train.module.summary import summarize


class ScriptedScore(Regressor):
    """Logs a made-up validation score per epoch, so the expected decisions are known in advance."""

    def __init__(self, scores):
        super().__init__()
        self.scores = scores

    def validation_step(self, batch, batch_idx):
        self.log("score", torch.tensor(self.scores[self.current_epoch]))


def _trainer(tmp_path, **kwargs):
    options = dict(
        accelerator="cpu",
        default_root_dir=tmp_path,
        loggers=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    options.update(kwargs)
    return Trainer(**options)


def test_model_checkpoint_keeps_exactly_top_k_plus_last(tmp_path):
    scores = [0.5, 0.2, 0.9, 0.1, 0.3, 0.15]
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="score", mode="min", save_top_k=3, save_last=True)
    trainer = _trainer(tmp_path, max_epochs=len(scores), callbacks=[checkpoint])
    trainer.fit(ScriptedScore(scores), loader(regression_data(32)), loader(regression_data(16), shuffle=False))

    # the three lowest scores: epochs 3 (0.1), 5 (0.15) and 1 (0.2); each epoch is 4 steps
    expected = {"epoch=3-step=16.ckpt": 0.1, "epoch=5-step=24.ckpt": 0.15, "epoch=1-step=8.ckpt": 0.2}
    on_disk = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert on_disk == sorted([*expected, "last.ckpt"])
    assert {Path(p).name: pytest.approx(s) for p, s in checkpoint.best_k_models.items()} == expected
    assert Path(checkpoint.best_model_path).name == "epoch=3-step=16.ckpt"
    assert checkpoint.best_model_score == pytest.approx(0.1)
    assert checkpoint.kth_value == pytest.approx(0.2)
    assert Path(checkpoint.last_model_path).name == "last.ckpt"
    # the best checkpoint holds the weights of its moment and the callback state of that moment
    contents = trainer.fabric.load(checkpoint.best_model_path)
    state = contents["callbacks"][checkpoint.state_key]
    assert Path(state["best_model_path"]).name == "epoch=3-step=16.ckpt"
    assert contents["global_step"] == 16 and torch.load(checkpoint.best_model_path)["global_step"] == 16


def test_model_checkpoint_max_mode_and_every_n_train_steps(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=3, save_top_k=-1)
    trainer = _trainer(tmp_path, max_epochs=2, callbacks=[checkpoint])
    trainer.fit(Regressor(), loader(regression_data(64)))  # 8 steps per epoch
    names = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert names == sorted(f"epoch={(s - 1) // 8}-step={s}.ckpt" for s in (3, 6, 9, 12, 15))

    best = ModelCheckpoint(dirpath=tmp_path / "max", monitor="score", mode="max", save_top_k=1, filename="{score:.2f}")
    trainer = _trainer(tmp_path, max_epochs=3, callbacks=[best])
    trainer.fit(ScriptedScore([0.1, 0.7, 0.4]), loader(regression_data(32)), loader(regression_data(16)))
    assert [p.name for p in (tmp_path / "max").iterdir()] == ["score=0.70.ckpt"]


@pytest.mark.parametrize(
    ("mode", "scores", "stop_epoch"),
    [
        ("min", [1.0, 0.8, 0.7, 0.75, 0.71, 0.9, 0.5, 0.4], 4),
        ("max", [0.1, 0.2, 0.2, 0.3, 0.3, 0.3, 0.3, 0.3], 5),
    ],
)
def test_early_stopping_stops_at_expected_epoch(tmp_path, mode, scores, stop_epoch):
    early = EarlyStopping(monitor="score", mode=mode, patience=2)
    trainer = _trainer(tmp_path, max_epochs=len(scores), callbacks=[early], enable_checkpointing=False)
    trainer.fit(ScriptedScore(scores), loader(regression_data(32)), loader(regression_data(16)))
    assert early.stopped_epoch == stop_epoch
    assert trainer.current_epoch == stop_epoch + 1
    assert early.wait_count == 2
    assert trainer.should_stop


def test_early_stopping_on_train_metric_without_validation(tmp_path):
    class Rising(Regressor):
        def on_train_epoch_end(self):
            self.log("rising", float(self.current_epoch))

    early = EarlyStopping(monitor="rising", patience=1)
    trainer = _trainer(tmp_path, max_epochs=10, callbacks=[early], enable_checkpointing=False)
    trainer.fit(Rising(), loader(regression_data(32)))
    assert early.stopped_epoch == 1 and trainer.current_epoch == 2


def test_learning_rate_monitor_logs_scheduled_rates(tmp_path):
    from fabricx.loggers import CSVLogger

    logger = CSVLogger(tmp_path, name="lr")
    trainer = _trainer(
        tmp_path,
        max_epochs=1,
        loggers=logger,
        log_every_n_steps=2,
        callbacks=[LearningRateMonitor()],
        enable_checkpointing=False,
    )
    trainer.fit(Regressor(lr=1.0, scheduler="step"), loader(regression_data(64)))
    with open(logger.metrics_file_path) as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("lr-SGD")]
    # As in Lightning: logged at the start of every second batch, at the step count of the batches done so far,
    # with the rate that batch trains with (StepLR(step_size=2, gamma=0.7) stepped once per optimizer step).
    assert [int(row["step"]) for row in rows] == [1, 3, 5, 7]
    assert [float(row["lr-SGD"]) for row in rows] == pytest.approx([0.7 ** (s // 2) for s in (1, 3, 5, 7)])
    with open(logger.metrics_file_path) as handle:
        assert any(row.get("train_loss_step") for row in csv.DictReader(handle))


def test_progress_bar_renders_on_a_terminal(tmp_path):
    buffer = io.StringIO()
    bar = RichProgressBar(console_kwargs={"file": buffer, "force_terminal": True, "width": 160})
    trainer = _trainer(tmp_path, max_epochs=2, callbacks=[bar], enable_progress_bar=True, enable_checkpointing=False)
    trainer.fit(Regressor(), loader(regression_data(64)), loader(regression_data(16), shuffle=False))
    text = buffer.getvalue()
    assert "Epoch 1/1" in text and "8/8" in text
    # Logged with on_step and on_epoch, the loss shows as Lightning's bar shows it: name_step and name_epoch.
    assert "train_loss_step=" in text and "val_loss=" in text
    assert "it/s" in text
    assert "\x1b[" in text  # drawn with terminal control codes


def test_progress_bar_prints_plain_lines_when_not_a_terminal(tmp_path, capsys):
    trainer = _trainer(tmp_path, max_epochs=2, enable_progress_bar=True, enable_checkpointing=False)
    trainer.fit(Regressor(), loader(regression_data(64)), loader(regression_data(16), shuffle=False))
    lines = capsys.readouterr().out.splitlines()
    epoch_lines = [line for line in lines if line.startswith("Epoch")]
    assert len(epoch_lines) == 2
    assert epoch_lines[1].startswith("Epoch 1/1: 8/8 ") and "train_loss_step=" in epoch_lines[1]
    assert "it/s" in epoch_lines[1]
    assert sum(line.startswith("Validation: 2/2 val_loss=") for line in lines) == 2
    assert not any("\x1b[" in line for line in lines)


def test_progress_bar_and_summary_disabled_print_nothing(tmp_path, capsys):
    trainer = _trainer(
        tmp_path, max_epochs=1, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False
    )
    trainer.fit(Regressor(), loader(regression_data(32)), loader(regression_data(16)))
    captured = capsys.readouterr()
    assert captured.out == ""


def test_model_summary_table(tmp_path, capsys):
    module = Regressor()
    module.net[0].weight.requires_grad_(False)
    summary = summarize(module, max_depth=2)
    assert summary.total_parameters == 32 * 64 + 64 + 64 + 1
    assert summary.trainable_parameters == 64 + 64 + 1
    assert summary.model_size == pytest.approx(4e-6 * summary.total_parameters)  # 32-bit parameters, in MB
    assert summary.layer_names == ["net", "net.0", "net.1", "net.2"]

    # The default summary is the rich table (Lightning's default where rich is installed); ModelSummary is the text.
    trainer = _trainer(tmp_path, max_epochs=1, enable_model_summary=True, enable_checkpointing=False)
    assert [type(cb).__name__ for cb in trainer.callbacks if isinstance(cb, ModelSummary)] == ["RichModelSummary"]
    text = _trainer(tmp_path, max_epochs=1, callbacks=[ModelSummary(max_depth=2)], enable_checkpointing=False)
    text.fit(module, loader(regression_data(32)))
    out = capsys.readouterr().out
    assert "| Sequential |" in out and "2.2 K     Total params" in out and "2.0 K     Non-trainable params" in out
    assert "0.009     Total estimated model params size (MB)" in out
    assert "| net.0 | Linear" in out
    assert RichModelSummary(max_depth=2).max_depth == 2


def test_callback_state_and_hook_order(tmp_path):
    calls = []

    class Spy(Callback):
        def __init__(self):
            self.count = 0

        def on_fit_start(self, trainer, module):
            calls.append("fit_start")

        def on_train_epoch_start(self, trainer, module):
            calls.append("epoch_start")

        def on_validation_end(self, trainer, module):
            calls.append("validation_end")

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            self.count += 1
            calls.append("batch_end")

        def on_train_epoch_end(self, trainer, module):
            calls.append("epoch_end")

        def state_dict(self):
            return {"count": self.count}

    spy = Spy()
    trainer = _trainer(tmp_path, max_epochs=1, callbacks=[spy], enable_checkpointing=False, limit_train_batches=2)
    trainer.fit(Regressor(), loader(regression_data(32)), loader(regression_data(16)))
    # As in Lightning: validation at the end of the epoch runs after the last batch's on_train_batch_end
    assert calls == ["fit_start", "epoch_start", "batch_end", "batch_end", "validation_end", "epoch_end"]
    assert not math.isnan(float(trainer.callback_metrics["val_loss"]))


def test_model_checkpoint_keeps_last_when_max_steps_ends_before_the_first_validation(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="score", save_last=True, every_n_epochs=1)
    trainer = _trainer(tmp_path, max_steps=2, callbacks=[checkpoint])
    # 4 steps per epoch, but max_steps stops after 2: validation never ran, so "score" cannot exist yet
    trainer.fit(ScriptedScore([0.5]), loader(regression_data(32)), loader(regression_data(16), shuffle=False))
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["last.ckpt"]
    assert checkpoint.best_model_score is None


@pytest.mark.parametrize("strategy", ["fsdp", "deepspeed"])
def test_callbacks_refuse_strategies_by_capability_not_by_class_name(strategy: str) -> None:
    # StochasticWeightAveraging keeps a full copy of the model, which sharded parameters cannot follow; a
    # DeepSpeed engine owns its param groups, which BaseFinetuning adds to. A user's subclass of the strategy
    # (another class name) is refused the same way. The callbacks read what the strategy can do, nothing that
    # its constructor sets up, so the strategy is made without one (no DeepSpeed import).
    from types import SimpleNamespace

    from fabricx.train.callbacks import BackboneFinetuning, StochasticWeightAveraging
    from fabricx.utilities.exceptions import MisconfigurationException

    if strategy == "fsdp":
        from fabricx.strategies.fsdp import FSDPStrategy as base
    else:
        from fabricx.strategies.deepspeed.strategy import DeepSpeedStrategy as base
    renamed = type("MyStrategy", (base,), {})
    trainer = SimpleNamespace(strategy=renamed.__new__(renamed))
    module = torch.nn.Module()
    module.backbone = torch.nn.Linear(2, 2)  # what BackboneFinetuning freezes before it checks the strategy
    with pytest.raises(MisconfigurationException, match="sharded models"):
        StochasticWeightAveraging(swa_lrs=0.1).setup(trainer, module, "fit")  # type: ignore[arg-type]
    finetuning = BackboneFinetuning()
    if strategy == "deepspeed":
        with pytest.raises(NotImplementedError, match="DeepSpeed"):
            finetuning.setup(trainer, module, "fit")  # type: ignore[arg-type]
    else:
        finetuning.setup(trainer, module, "fit")  # type: ignore[arg-type]
        assert not any(parameter.requires_grad for parameter in module.backbone.parameters())


def test_a_module_with_lazy_layers_fits_with_the_default_summary(tmp_path, capsys):
    # The former summary called numel() on an uninitialized parameter, so fit raised at on_fit_start.
    class Lazy(Regressor):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.LazyLinear(8), torch.nn.ReLU(), torch.nn.Linear(8, 1))

    module = Lazy()
    with pytest.warns(UserWarning, match="number of parameters detected may be inaccurate"):
        _trainer(tmp_path, max_epochs=1, enable_model_summary=True).fit(module, loader(regression_data(16)))
    assert "Total params" in capsys.readouterr().out
    assert module.net[0].weight.shape == (8, 32)


def test_lambda_and_checkpoint_callbacks_as_lightnings(tmp_path):
    # LambdaCallback runs the functions given by hook name; a user's Checkpoint subclass is a checkpoint callback:
    # listed in trainer.checkpoint_callbacks, run after the others, and the default ModelCheckpoint is not added.
    import lightning.pytorch as pl

    from fabricx.callbacks import Checkpoint, LambdaCallback

    seen = []
    lam = LambdaCallback(
        on_train_epoch_start=lambda trainer, module: seen.append(("epoch", trainer.current_epoch)),
        on_fit_end=lambda trainer, module: seen.append(("fit_end",)),
    )

    class Snapshot(Checkpoint):
        def on_train_epoch_end(self, trainer, module):
            seen.append(("snapshot", trainer.current_epoch))

    snapshot = Snapshot()
    trainer = Trainer(
        accelerator="cpu", default_root_dir=tmp_path, logger=False, enable_progress_bar=False, max_epochs=2,
        enable_model_summary=False, callbacks=[snapshot, lam],
    )
    assert trainer.checkpoint_callbacks == [snapshot] and trainer.callbacks[-1] is snapshot
    assert not any(isinstance(cb, ModelCheckpoint) for cb in trainer.callbacks)
    trainer.fit(Regressor(), loader(regression_data(16)))
    assert seen == [("epoch", 0), ("snapshot", 0), ("epoch", 1), ("snapshot", 1), ("fit_end",)]
    with pytest.raises(Exception, match="enable_checkpointing=False"):
        Trainer(accelerator="cpu", enable_checkpointing=False, callbacks=[Snapshot()])
    # the same on Lightning
    ours = [type(cb).__name__ for cb in trainer.callbacks]
    theirs = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[pl.callbacks.LambdaCallback(), type("Snapshot", (pl.callbacks.Checkpoint,), {})()])
    assert ours == ["LambdaCallback", "Snapshot"] == [type(cb).__name__ for cb in theirs.callbacks]


def _callbacks_after_configure_callbacks(pl_module_class, trainer_class, callbacks_module, tmp_path) -> list[str]:
    class Bar(callbacks_module.TQDMProgressBar):
        pass

    class Module(pl_module_class):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(32, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def configure_callbacks(self):
            return [Bar(), callbacks_module.EarlyStopping(monitor="loss", check_on_train_epoch_end=False)]

    trainer = trainer_class(
        accelerator="cpu", default_root_dir=tmp_path, max_steps=1, logger=False, enable_model_summary=False,
        enable_checkpointing=False, callbacks=[callbacks_module.TQDMProgressBar(), callbacks_module.Callback()],
    )
    trainer.fit(Module(), torch.utils.data.DataLoader(regression_data(8), batch_size=4))
    return [type(cb).__name__ for cb in trainer.callbacks]


def test_configure_callbacks_replaces_the_trainers_callbacks_of_a_parent_class_as_lightnings(tmp_path):
    # A module's TQDMProgressBar subclass replaces the Trainer's TQDMProgressBar; a bare Callback is kept.
    import lightning.pytorch as pl

    import fabricx.callbacks
    import fabricx.train

    theirs = _callbacks_after_configure_callbacks(
        pl.LightningModule, pl.Trainer, pl.callbacks, tmp_path / "lightning"
    )
    ours = _callbacks_after_configure_callbacks(
        fabricx.train.TrainModule, fabricx.train.Trainer, fabricx.callbacks, tmp_path / "fabricx"
    )
    assert ours == theirs == ["Callback", "Bar", "EarlyStopping"]


def test_two_stateful_callbacks_with_one_state_key_are_refused():
    with pytest.raises(RuntimeError, match="more than one stateful callback of type `EarlyStopping`"):
        Trainer(accelerator="cpu", callbacks=[EarlyStopping(monitor="loss"), EarlyStopping(monitor="loss")])


def test_every_callbacks_hooks_name_their_parameters_as_lightnings() -> None:
    """A callback written for Lightning overrides `on_train_batch_end(self, trainer, pl_module, ...)` and may call
    `super()` by keyword: the base class's and every shipped callback's hooks take Lightning's parameter names
    (a type checker reports a renamed parameter in an override as an error), or a prefix of them and then
    `*args, **kwargs`, or what Lightning's class of the same name takes."""
    import inspect

    import lightning.pytorch.callbacks as lightning_callbacks

    import fabricx.callbacks as fabricx_callbacks

    def names(hook):
        return [(p.name, p.kind) for p in inspect.signature(hook).parameters.values()]

    lightning_hooks = {name: hook for name, hook in vars(lightning_callbacks.Callback).items()
                       if callable(hook) and not name.startswith("_")}
    assert set(lightning_hooks) <= set(dir(Callback)), set(lightning_hooks) - set(dir(Callback))
    shipped = [value for value in vars(fabricx_callbacks).values() if isinstance(value, type)
               and issubclass(value, Callback)]
    assert len(shipped) >= 15, shipped
    differing = {}
    for cls in shipped:
        for name, method in vars(cls).items():
            if name not in lightning_hooks:
                continue
            ours, theirs = names(method), names(lightning_hooks[name])
            named = [entry for entry in ours if entry[1] == inspect.Parameter.POSITIONAL_OR_KEYWORD]
            takes_the_rest = {kind for _, kind in ours} >= {inspect.Parameter.VAR_POSITIONAL,
                                                             inspect.Parameter.VAR_KEYWORD}
            lightnings_class = getattr(lightning_callbacks, cls.__name__, None)
            same_as_lightnings_class = hasattr(lightnings_class, name) and ours == names(
                getattr(lightnings_class, name))
            if not (ours == theirs or same_as_lightnings_class or (takes_the_rest and named == theirs[: len(named)])):
                differing[f"{cls.__name__}.{name}"] = [entry[0] for entry in ours]
    assert differing == {}, differing
