"""Contracts real Lightning projects rely on that no ported Lightning test pinned, as a user's code meets them.

Run twice by ``_lightning_differential.py --source=contracts``: as is, through Lightning, and with its
``lightning`` import lines swapped for fabricx's. Each case returns what the user's code would see: the
weights, the warnings, the exceptions (their types and messages), the files written.
"""

import csv
import enum
import functools
import inspect
import os
import shutil
import warnings
from collections.abc import MutableSequence

import numpy as np
import torch
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import (
    BasePredictionWriter,
    Callback,
    EMAWeightAveraging,
    GradientAccumulationScheduler,
    ModelCheckpoint,
)
from lightning.pytorch.core.saving import _load_state
from lightning.pytorch.loggers import CSVLogger, Logger
from lightning.pytorch.plugins import AsyncCheckpointIO, DoublePrecision, TorchCheckpointIO
from lightning.pytorch.trainer.states import RunningStage
from lightning.pytorch.utilities.parsing import get_init_args
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

QUIET = {"enable_progress_bar": False, "enable_model_summary": False, "accelerator": "cpu"}
# A folder no process may create files in, root's included (sysfs refuses new files).
READ_ONLY_DIR = "/sys"


def regression(samples: int = 32, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, 4, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True) * 0.5 + 0.1)


def loader(seed: int = 0) -> DataLoader:
    return DataLoader(regression(32, seed), batch_size=8)


def weights(module: nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def error_of(call) -> dict | None:
    """The exception ``call()`` raised: its type's and its bases' names and its message (``None``: it returned)."""
    try:
        call()
    except Exception as error:
        return {"types": [cls.__name__ for cls in type(error).__mro__], "message": str(error)}
    return None


def recorded(call) -> tuple:
    """``call()``'s result and the messages of the warnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    return result, [str(w.message) for w in caught]


class Regressor(LightningModule):
    def __init__(self, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Linear(4, 1)

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("zeta_loss", loss)
        self.log("alpha_loss", loss * 2)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


# -- 1. callbacks=, logger=, plugins= as any iterable -------------------------------------------------------
class ConfigList(MutableSequence):
    """A list-like container that is not a list, shaped as the ``ListConfig`` a Hydra config hands over."""

    def __init__(self, items):
        self._items = list(items)

    def __getitem__(self, index):
        return self._items[index]

    def __setitem__(self, index, value):
        self._items[index] = value

    def __delitem__(self, index):
        del self._items[index]

    def __len__(self):
        return len(self._items)

    def insert(self, index, value):
        self._items.insert(index, value)


class BatchCounter(Callback):
    def __init__(self):
        self.batches = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.batches += 1


def run_iterable_flags(root: str) -> dict:
    torch.manual_seed(0)
    module = Regressor()
    counter = BatchCounter()
    trainer = Trainer(
        max_epochs=2,
        callbacks=ConfigList([counter]),
        logger=(logger for logger in [CSVLogger(root, name="csv", version=0)]),
        plugins=(DoublePrecision(),),
        enable_checkpointing=False,
        **QUIET,
    )
    trainer.fit(module, loader())
    return {
        "batches_counted": counter.batches,
        "loggers": [type(logger).__name__ for logger in trainer.loggers],
        "log_dir_exists": os.path.isdir(f"{root}/csv/version_0"),
        "weights": weights(module),
    }


# -- 3. an unknown key in configure_optimizers' dict --------------------------------------------------------
class MisspelledScheduler(Regressor):
    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        # "scheduler" where Lightning reads "lr_scheduler": a common slip.
        return {"optimizer": optimizer, "scheduler": torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)}


def run_unknown_optimizer_key(root: str) -> dict:
    torch.manual_seed(1)
    module = MisspelledScheduler()
    trainer = Trainer(max_epochs=2, logger=False, enable_checkpointing=False, **QUIET)
    _, messages = recorded(lambda: trainer.fit(module, loader(1)))
    return {
        "warnings": [m for m in messages if "optimizer configuration" in m],
        "lr": trainer.optimizers[0].param_groups[0]["lr"],
        "weights": weights(module),
    }


# -- 4. self.trainer.model inside configure_optimizers ------------------------------------------------------
class OptimizesTrainerModel(Regressor):
    def configure_optimizers(self):
        self.model_seen = {"is_self": self.trainer.model is self, "type": type(self.trainer.model).__name__}
        return torch.optim.Adam(self.trainer.model.parameters(), lr=0.01)


def run_trainer_model(root: str) -> dict:
    torch.manual_seed(2)
    module = OptimizesTrainerModel()
    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, **QUIET)
    trainer.fit(module, loader(2))
    return {"seen": module.model_seen, "weights": weights(module)}


# -- 5. save_hyperparameters() with non-plain values ---------------------------------------------------------
class WithSubmodule(LightningModule):
    def __init__(self, net: nn.Module, optimizer=functools.partial(torch.optim.SGD, lr=0.1), hidden: int = 4):
        super().__init__()
        self.save_hyperparameters()
        self.net = net
        self.head = nn.Linear(1, hidden)

    def forward(self, x):
        return self.head(self.net(x)).sum(dim=1, keepdim=True)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self(x), y)

    def configure_optimizers(self):
        return self.hparams.optimizer(self.parameters())


def run_non_plain_hparams(root: str) -> dict:
    torch.manual_seed(3)
    module = WithSubmodule(nn.Linear(4, 1), hidden=3)
    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, **QUIET)
    trainer.fit(module, loader(3))
    path = f"{root}/model.ckpt"
    _, save_warnings = recorded(lambda: trainer.save_checkpoint(path))
    # weights_only=False: Lightning pickled the module and the partial into its file (fabricx's holds no code).
    passed = WithSubmodule.load_from_checkpoint(
        path, weights_only=False, net=nn.Linear(4, 1), optimizer=module.hparams.optimizer
    )
    return {
        "save_warnings": save_warnings,
        "weights": weights(module),
        "passed_again": {"weights": weights(passed), "hidden": passed.hparams.hidden},
        "without_them": error_of(lambda: WithSubmodule.load_from_checkpoint(path, weights_only=False)),
    }


# -- 6. the smaller ones ---------------------------------------------------------------------------------------
def run_csv_columns(root: str) -> dict:
    torch.manual_seed(4)
    trainer = Trainer(
        max_epochs=1,
        logger=CSVLogger(root, name="csv", version=0),
        log_every_n_steps=1,
        enable_checkpointing=False,
        **QUIET,
    )
    trainer.fit(Regressor(), loader(4))
    with open(f"{root}/csv/version_0/metrics.csv") as handle:
        return {"header": next(csv.reader(handle))}


def run_csv_steps_without_step(root: str) -> dict:
    logger = CSVLogger(root, name="steps", version=0, flush_logs_every_n_steps=3)
    for value in range(7):
        logger.log_metrics({"value": float(value)})
    logger.finalize("success")
    with open(f"{root}/steps/version_0/metrics.csv") as handle:
        return {"rows": list(csv.DictReader(handle))}


class RecordingData(LightningDataModule):
    def __init__(self, batch_size: int = 8, seed: int = 5):
        super().__init__()
        self.save_hyperparameters()

    def train_dataloader(self):
        return DataLoader(regression(32, self.hparams.seed), batch_size=self.hparams.batch_size)


def run_checkpoint_hparams_keys(root: str) -> dict:
    torch.manual_seed(5)
    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, **QUIET)
    trainer.fit(Regressor(lr=0.05), datamodule=RecordingData(batch_size=4))
    trainer.save_checkpoint(f"{root}/hparams.ckpt")
    checkpoint = torch.load(f"{root}/hparams.ckpt", weights_only=False)
    keys = ("hparams_name", "hyper_parameters", "datamodule_hparams_name", "datamodule_hyper_parameters")
    return {key: checkpoint.get(key) for key in keys}


def run_missing_and_read_only(root: str) -> dict:
    torch.manual_seed(6)
    module = Regressor()
    missing = f"{root}/no_such.ckpt"
    fit_missing = error_of(
        lambda: Trainer(max_epochs=1, logger=False, enable_checkpointing=False, **QUIET).fit(
            module, loader(6), ckpt_path=missing
        )
    )
    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, **QUIET)
    trainer.fit(module, loader(6))
    return {
        "fit_missing": fit_missing,
        "load_missing": error_of(lambda: Regressor.load_from_checkpoint(missing)),
        "save_read_only": error_of(lambda: trainer.save_checkpoint(f"{READ_ONLY_DIR}/model.ckpt")),
        "save_read_only_subfolder": error_of(lambda: trainer.save_checkpoint(f"{READ_ONLY_DIR}/run/model.ckpt")),
        "checkpoint_callback_read_only": error_of(
            lambda: Trainer(
                max_epochs=1, logger=False, callbacks=[ModelCheckpoint(dirpath=f"{READ_ONLY_DIR}/ckpts")], **QUIET
            ).fit(Regressor(), loader(6))
        ),
    }


# -- 9. whether fit has validation data, read inside configure_optimizers (gluonts' models do) ---------------
class ReadsValDataSource(Regressor):
    def configure_optimizers(self):
        self.val_defined = self.trainer.fit_loop.epoch_loop.val_loop._data_source.is_defined()
        return torch.optim.SGD(self.parameters(), lr=0.1)


class DefinesValDataloader(ReadsValDataSource):
    def val_dataloader(self):
        return loader(4)


def run_val_data_source(root: str) -> dict:
    seen = {}
    for name, module, val in [
        ("given", ReadsValDataSource(), loader(3)),
        ("none", ReadsValDataSource(), None),
        ("module_method", DefinesValDataloader(), None),
    ]:
        trainer = Trainer(max_steps=1, logger=False, enable_checkpointing=False, num_sanity_val_steps=0, **QUIET)
        trainer.fit(module, loader(2), val)
        seen[name] = module.val_defined
    return {"seen": seen}


# -- 10. validation inside fit runs under no_grad (a step may re-enable gradients), not inference_mode ------
class GradInValidation(Regressor):
    def validation_step(self, batch, batch_idx):
        x, _ = batch
        self.modes.append((self.trainer.state.fn.value, torch.is_inference_mode_enabled()))
        with torch.enable_grad():  # e.g. a normalizing flow's inverse, as gluonts' MQF2 model does
            x = x.clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(self(x).sum(), x)
        self.log("grad_norm", grad.norm())


def run_grad_in_validation(root: str) -> dict:
    torch.manual_seed(3)
    module = GradInValidation()
    module.modes = []
    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, num_sanity_val_steps=1, **QUIET)
    fit_error = error_of(lambda: trainer.fit(module, loader(2), loader(3)))
    validate_error = error_of(lambda: trainer.validate(module, loader(3), verbose=False))
    return {"fit_error": fit_error, "validate_error": validate_error, "modes": sorted(set(module.modes))}


# -- 11. a prediction writer sees each batch's sample indices and, at the epoch's end, every prediction ----
class RecordingWriter(BasePredictionWriter):
    def __init__(self, interval):
        super().__init__(interval)
        self.batches, self.epochs = [], []

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
        self.batches.append((batch_idx, dataloader_idx, list(batch_indices), prediction.sum().item()))

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
        flat = predictions if isinstance(predictions[0], torch.Tensor) else [p for per in predictions for p in per]
        self.epochs.append((batch_indices, [p.sum().item() for p in flat]))


class Predicts(Regressor):
    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return self(batch[0])


def run_prediction_writer(root: str) -> dict:
    torch.manual_seed(5)
    module, seen = Predicts(), {}
    order = torch.Generator().manual_seed(2)
    shuffled = DataLoader(regression(10, seed=1), batch_size=4, shuffle=True, generator=order)
    for interval in ("batch", "epoch", "batch_and_epoch"):
        for keep in (True, False):
            writer = RecordingWriter(interval)
            trainer = Trainer(logger=False, callbacks=[writer], **QUIET)
            returned = trainer.predict(module, [loader(1), shuffled], return_predictions=keep)
            seen[f"{interval}-{keep}"] = {
                "batches": writer.batches,
                "epochs": writer.epochs,
                "returned": returned is not None and len(returned),
            }
    seen["bad_interval"] = error_of(lambda: RecordingWriter("step"))
    return seen


# -- 12. save_hyperparameters() before LightningModule.__init__, and parsing.get_init_args (pytorch-forecasting) --
class HparamsFirst(LightningModule):
    def __init__(self, hidden=3, scale=0.5, **kwargs):
        self.save_hyperparameters()
        self.init_args = get_init_args(inspect.currentframe())
        super().__init__()
        self.net = nn.Linear(4, hidden)


def run_hparams_before_init(root: str) -> dict:
    module = HparamsFirst(hidden=2, extra="x")
    return {"hparams": dict(module.hparams), "init_args": module.init_args, "stage": str(RunningStage.TRAINING)}


# -- 13. NumPy scalars in hyper-parameters (pytorch-forecasting keeps a pandas column's np.int64) -------------------
class NumpyHparams(Regressor):
    def __init__(self, lr=0.1, min_idx=0, scale=0.5, flags=()):
        super().__init__(lr)
        self.save_hyperparameters()


def described(value):
    """A value as (type name, repr), through lists and tuples: the exact NumPy types compared across sides."""
    if isinstance(value, list | tuple):
        return type(value).__name__, [described(item) for item in value]
    return type(value).__name__, repr(value)


def run_numpy_hparams(root: str) -> dict:
    torch.manual_seed(6)
    given = {
        "lr": np.float64(0.1),
        "min_idx": np.int64(4),
        "scale": np.float32(0.5),
        "flags": [np.bool_(True), np.uint8(3), np.float16(-2.0), np.int32(-7)],
    }
    module = NumpyHparams(**given)
    checkpoint = ModelCheckpoint(dirpath=root, filename="numpy")
    Trainer(max_epochs=1, logger=False, callbacks=[checkpoint], **QUIET).fit(module, loader(6))
    # weights_only=False, as pytorch-forecasting passes it: Lightning's default (torch's weights-only) refuses NumPy.
    loaded = NumpyHparams.load_from_checkpoint(checkpoint.best_model_path, weights_only=False)
    return {
        "hparams": {key: described(value) for key, value in loaded.hparams.items()},
        "weights": weights(module),
        "loaded_weights": weights(loaded),
        "default_load": error_of(lambda: NumpyHparams.load_from_checkpoint(checkpoint.best_model_path)),
    }


# -- 14. A library's own checkpoint files (nn-template-core): a TorchCheckpointIO subclass, then _load_state -------
class LibraryIO(TorchCheckpointIO):
    """nn-template-core's NNCheckpointIO in small: the library adds its own entry to each file it writes."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        super().save_checkpoint({**checkpoint, "run_path": "entity/project/run"}, path, storage_options)


class Noted(Regressor):
    def __init__(self, lr=0.1, note="a"):
        super().__init__(lr)
        self.save_hyperparameters()


def run_library_checkpoint_io(root: str) -> dict:
    torch.manual_seed(7)
    module = Noted(lr=0.2, note="a")
    Trainer(max_epochs=1, logger=False, enable_checkpointing=False, **QUIET).fit(module, loader(7))
    io, path = LibraryIO(), os.path.join(root, "library", "run.ckpt")
    io.save_checkpoint({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}, path)
    checkpoint = io.load_checkpoint(path)
    loaded = _load_state(Noted, checkpoint, strict=True, note="b")  # a keyword overrides the saved value
    io.remove_checkpoint(path)
    return {
        "keys": sorted(checkpoint),
        "run_path": checkpoint["run_path"],
        "hparams": dict(loaded.hparams),
        "weights": weights(module),
        "loaded_weights": weights(loaded),
        "removed": not os.path.exists(path),
        "missing": error_of(lambda: io.load_checkpoint(os.path.join(root, "absent.ckpt"))),
    }


# -- 15. The Trainer writes and reads its checkpoints through a library's checkpoint I/O plugin -------------------
class ZippedIO(TorchCheckpointIO):
    """nn-template-core's NNCheckpointIO in small: it stores each checkpoint under its own name (``.zip``),
    drops an object entry its module added before writing, and puts it back when loading."""

    def __init__(self):
        self.saved, self.removed = [], []

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        self.saved.append(os.path.basename(path))
        checkpoint = dict(checkpoint)
        checkpoint["note_kind"] = type(checkpoint.pop("note")).__name__
        super().save_checkpoint(checkpoint, str(path) + ".zip", storage_options)

    def load_checkpoint(self, path, map_location=None, weights_only=None):
        checkpoint = super().load_checkpoint(str(path) + ".zip")
        checkpoint["note"] = Note() if checkpoint.pop("note_kind") == "Note" else None
        return checkpoint

    def remove_checkpoint(self, path):
        self.removed.append(os.path.basename(path))
        os.remove(str(path) + ".zip")


class Note:
    """An object a module adds to its checkpoints (nn-template's data metadata); the plugin stores it its way."""


class NotedCheckpoints(Regressor):
    def __init__(self, lr=0.1):
        super().__init__(lr)
        self.notes_loaded = []

    def on_save_checkpoint(self, checkpoint):
        checkpoint["note"] = Note()

    def on_load_checkpoint(self, checkpoint):
        self.notes_loaded.append(type(checkpoint["note"]).__name__)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", F.mse_loss(self(x), y))


def run_checkpoint_io_plugin(root: str) -> dict:
    def fit(epochs, ckpt_path=None):
        torch.manual_seed(11)
        io = ZippedIO()
        checkpoint = ModelCheckpoint(dirpath=os.path.join(root, "plugin"), save_top_k=1, save_last=True)
        module = NotedCheckpoints(lr=0.05)
        trainer = Trainer(max_epochs=epochs, logger=False, callbacks=[checkpoint], plugins=[io], **QUIET)
        trainer.fit(module, loader(9), ckpt_path=ckpt_path)
        module.trainer_used = trainer
        return module, io, checkpoint

    straight, _, _ = fit(4)
    shutil.rmtree(os.path.join(root, "plugin"))
    _, first_io, first_checkpoint = fit(2)
    resumed, _, resumed_checkpoint = fit(4, ckpt_path=first_checkpoint.best_model_path)
    # test(ckpt_path="best"): the weights come through the plugin (its file is named otherwise).
    tested = resumed.trainer_used.test(resumed, loader(9), ckpt_path="best", verbose=False)
    # The plugin names its files last.ckpt.zip: "last" finds no last.ckpt, warns, and the fit starts afresh.
    from_last, _, _ = fit(5, ckpt_path="last")
    return {
        "saved": first_io.saved,
        "removed": first_io.removed,
        "files": sorted(os.listdir(os.path.join(root, "plugin"))),
        "notes_loaded": resumed.notes_loaded,
        "best": os.path.basename(resumed_checkpoint.best_model_path),
        "tested": tested,
        "straight": weights(straight),
        "resumed": weights(resumed),
        "from_last": weights(from_last),
        "fresh": weights(fit(5)[0]),
    }


# -- 16. AsyncCheckpointIO: the Trainer's saves written in a background thread --------------------------------
class SlowIO(TorchCheckpointIO):
    """Writes late: a save that did not copy the weights first would store the ones of a later step."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        import time

        time.sleep(0.2)
        super().save_checkpoint(checkpoint, path, storage_options)


def run_async_checkpoint_io(root: str) -> dict:
    folder = os.path.join(root, "async")

    def fit(epochs, ckpt_path=None):
        torch.manual_seed(5)
        checkpoint = ModelCheckpoint(dirpath=folder, save_top_k=-1)
        module = Regressor(lr=0.05)
        trainer = Trainer(
            max_epochs=epochs, logger=False, callbacks=[checkpoint], plugins=[AsyncCheckpointIO(SlowIO())], **QUIET
        )
        trainer.fit(module, loader(3), ckpt_path=ckpt_path)
        return module

    straight = fit(3)
    names = os.listdir(folder)
    saved = {name: torch.load(os.path.join(folder, name), weights_only=True)["state_dict"] for name in names}
    resumed = fit(3, ckpt_path=os.path.join(folder, "epoch=0-step=4.ckpt"))
    return {
        "files": sorted(saved),
        "saved": {name: dict(weights) for name, weights in saved.items()},
        "straight": weights(straight),
        "resumed": weights(resumed),
    }


# -- 17. Loggers hear of each checkpoint through after_save_checkpoint(the ModelCheckpoint) ---------------------
class CheckpointHearingLogger(CSVLogger):
    """nn-core's logger in small: it reads the best path off the callback it is handed after each save."""

    def __init__(self, save_dir):
        super().__init__(save_dir)
        self.heard = []

    def after_save_checkpoint(self, checkpoint_callback):
        self.heard.append(
            {
                "kind": type(checkpoint_callback).__name__,
                "best": os.path.basename(checkpoint_callback.best_model_path),
                "kept": len(checkpoint_callback.best_k_models),
                # nn-core's logger: the score is a tensor (so are kth_value and best_k_models' values)
                "score": checkpoint_callback.best_model_score.detach().cpu().item(),
                "types": sorted(
                    {
                        type(checkpoint_callback.kth_value).__name__,
                        *(type(v).__name__ for v in checkpoint_callback.best_k_models.values()),
                    }
                ),
            }
        )


def run_logger_hears_checkpoints(root: str) -> dict:
    torch.manual_seed(2)
    logger = CheckpointHearingLogger(os.path.join(root, "heard"))
    checkpoint = ModelCheckpoint(dirpath=os.path.join(root, "heard", "ckpt"), save_top_k=2, monitor="zeta_loss")
    module = Regressor(lr=0.05)
    Trainer(max_epochs=3, logger=logger, callbacks=[checkpoint], log_every_n_steps=1, **QUIET).fit(module, loader(4))
    state = checkpoint.state_dict()
    return {
        "heard": logger.heard,
        "state_types": {key: type(state[key]).__name__ for key in ("best_model_score", "kth_value", "current_score")},
    }


class ConfiguredRegressor(LightningModule):
    """Hyper-parameters given whole: ``save_hyperparameters(config)`` with a dict, a Namespace or a Hydra config."""

    def __init__(self, config):
        super().__init__()
        self.save_hyperparameters(config)
        self.net = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams["lr"])


class ConfiguredData(LightningDataModule):
    def __init__(self, settings):
        super().__init__()
        self.save_hyperparameters(settings)

    def train_dataloader(self):
        self.served = getattr(self, "served", 0) + 1
        return DataLoader(regression(32, self.hparams["seed"]), batch_size=self.hparams["batch_size"])

    def state_dict(self):
        return {"served": self.served}

    def load_state_dict(self, state_dict):
        self.served = state_dict["served"]


def _plain_config(value):
    from omegaconf import OmegaConf

    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def run_hparams_given_whole(root: str) -> dict:
    from argparse import Namespace

    from omegaconf import OmegaConf

    configs = {
        "dict": {"lr": 0.05, "tags": ["a"]},
        "namespace": Namespace(lr=0.05, tags=["a"]),
        "dictconfig": OmegaConf.create({"lr": 0.05, "tags": ["a"], "net": {"width": 4}}),
    }
    results = {}
    for kind, config in configs.items():
        torch.manual_seed(7)
        module = ConfiguredRegressor(config)
        trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, **QUIET)
        trainer.fit(module, datamodule=ConfiguredData({"batch_size": 8, "seed": 5}))
        path = f"{root}/{kind}.ckpt"
        trainer.save_checkpoint(path)
        checkpoint = torch.load(path, weights_only=False)  # Lightning's file holds the DictConfig class
        saved_type = checkpoint.get("hparams_type")
        loaded = ConfiguredRegressor.load_from_checkpoint(path, weights_only=False)
        with open(f"{root}/override.yaml", "w") as handle:
            handle.write("lr: 0.2\n")
        override = f"{root}/override.yaml"
        from_file = ConfiguredRegressor.load_from_checkpoint(path, hparams_file=override, weights_only=False)
        overridden = ConfiguredRegressor.load_from_checkpoint(path, lr=0.3, weights_only=False)
        data = ConfiguredData.load_from_checkpoint(path, batch_size=4, weights_only=False)
        keys = ("hparams_name", "hyper_parameters", "datamodule_hparams_name", "datamodule_hyper_parameters")
        results[kind] = {
            "types": [type(module.hparams).__name__, type(module.hparams_initial).__name__],
            "entries": {key: _plain_config(checkpoint.get(key)) for key in keys},
            "saved_type": getattr(saved_type, "__name__", saved_type),
            "loaded_type": type(loaded.hparams).__name__,
            "loaded": _plain_config(loaded.hparams),
            "from_file": [type(from_file.hparams).__name__, _plain_config(from_file.hparams)],
            "overridden": _plain_config(overridden.hparams),
            "datamodule": [type(data.hparams).__name__, dict(data.hparams), data.served],
            "weights": weights(module),
            "loaded_weights": weights(loaded),
        }
    return results


# -- 19. Loggers get the hyper-parameters in every entry point, before the sanity check ---------------------------
class CallRecordingLogger(Logger):
    """A user's logger that records what the Trainer calls on it, in order, beside the hooks a callback sees."""

    def __init__(self, calls):
        super().__init__()
        self.calls = calls

    @property
    def name(self):
        return "recording"

    @property
    def version(self):
        return 0

    def log_hyperparams(self, params, *args, **kwargs):
        self.calls.append(("log_hyperparams", sorted(dict(params))))

    def log_metrics(self, metrics, step=None):
        self.calls.append(("log_metrics", sorted(metrics)))

    def log_graph(self, model, input_array=None):
        self.calls.append(("log_graph", type(model).__name__, input_array is None))

    def save(self):
        self.calls.append(("save",))

    def finalize(self, status):
        self.calls.append(("finalize", status))


class HookOrder(Callback):
    def __init__(self, calls):
        self.calls = calls

    def on_fit_start(self, trainer, pl_module):
        self.calls.append(("on_fit_start",))

    def on_sanity_check_start(self, trainer, pl_module):
        self.calls.append(("on_sanity_check_start",))

    def on_train_start(self, trainer, pl_module):
        self.calls.append(("on_train_start",))

    def on_validation_start(self, trainer, pl_module):
        self.calls.append(("on_validation_start",))

    def on_test_start(self, trainer, pl_module):
        self.calls.append(("on_test_start",))

    def on_predict_start(self, trainer, pl_module):
        self.calls.append(("on_predict_start",))

    def teardown(self, trainer, pl_module, stage):
        self.calls.append(("teardown", stage))


class Mode(enum.Enum):
    FAST = "fast-value"


class EvaluatedRegressor(Regressor):
    def __init__(self, lr: float = 0.1, mode: Mode = Mode.FAST):
        super().__init__(lr)
        self.save_hyperparameters()

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", F.mse_loss(self(x), y))

    def predict_step(self, batch, batch_idx):
        return self(batch[0])


def run_logging_in_every_entry_point(root: str) -> dict:
    torch.manual_seed(3)
    module = EvaluatedRegressor()
    calls = {}
    for stage in ("fit", "validate", "test", "predict"):
        calls[stage] = []
        trainer = Trainer(
            max_epochs=1,
            limit_train_batches=2,
            limit_val_batches=1,
            logger=CallRecordingLogger(calls[stage]),
            callbacks=[HookOrder(calls[stage])],
            enable_checkpointing=False,
            **QUIET,
        )
        if stage == "fit":
            trainer.fit(module, loader(1), loader(2))
        else:
            getattr(trainer, stage)(module, loader(2))
    # A CSVLogger given to test() alone writes hparams.yaml, an Enum by its name.
    csv_logger = CSVLogger(os.path.join(root, "csv"))
    Trainer(logger=csv_logger, **QUIET).test(module, loader(2))
    with open(os.path.join(csv_logger.log_dir, "hparams.yaml")) as handle:
        hparams_yaml = handle.read()
    return {"calls": calls, "hparams_yaml": hparams_yaml, "weights": weights(module)}


# -- 20. A run that raises: on_exception, the loggers finalized "failed", no teardown hooks -------------------------
class FailingRegressor(EvaluatedRegressor):
    def __init__(self, fail_in: str):
        super().__init__()
        self.fail_in = fail_in

    def training_step(self, batch, batch_idx):
        if self.fail_in == "training_step" and batch_idx == 1:
            raise ValueError("training_step failed")
        return super().training_step(batch, batch_idx)

    def test_step(self, batch, batch_idx):
        raise ValueError("test_step failed")

    def teardown(self, stage):
        self.calls.append(("module teardown", stage))


class ExceptionHooks(HookOrder):
    def on_exception(self, trainer, pl_module, exception):
        self.calls.append(("on_exception", type(exception).__name__, str(exception)))


def run_failing_entry_points(root: str) -> dict:
    results = {}
    for stage in ("fit", "test"):
        calls = []
        torch.manual_seed(4)
        module = FailingRegressor("training_step" if stage == "fit" else "test_step")
        module.calls = calls
        trainer = Trainer(
            max_epochs=1,
            logger=CallRecordingLogger(calls),
            callbacks=[ExceptionHooks(calls)],
            enable_checkpointing=False,
            **QUIET,
        )
        entry = functools.partial(trainer.fit, module, loader(1)) if stage == "fit" else functools.partial(
            trainer.test, module, loader(2)
        )
        error = error_of(entry)
        results[stage] = {
            "calls": [call for call in calls if call[0] not in ("log_metrics", "save")],
            "error": error,
            "status": str(trainer.state.status),
            "stage": str(trainer.state.stage),
        }
    return results


# -- 21. an accumulation factor scheduled by epoch -------------------------------------------------------------
class EpochRecorder(Callback):
    """Each epoch's factor and step count as it ends, and the weights then."""

    def __init__(self):
        self.epochs = []

    def on_train_epoch_end(self, trainer, pl_module):
        self.epochs.append((trainer.accumulate_grad_batches, trainer.global_step, weights(pl_module)))


class ManualRegressor(Regressor):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False


def run_accumulation_schedule(root: str) -> dict:
    torch.manual_seed(5)
    module, recorder = Regressor(), EpochRecorder()
    # 8 batches an epoch: every factor divides it, so both divide each loss by the factor alike
    data = DataLoader(regression(32, 6), batch_size=4)
    trainer = Trainer(max_epochs=4, logger=False, enable_checkpointing=False,
                      callbacks=[GradientAccumulationScheduler({1: 2, 3: 4}), recorder], **QUIET)
    trainer.fit(module, data)
    both = Trainer(max_epochs=1, accumulate_grad_batches=2, logger=False, enable_checkpointing=False,
                   callbacks=[GradientAccumulationScheduler({0: 2})], **QUIET)
    manual = Trainer(max_epochs=1, logger=False, enable_checkpointing=False,
                     callbacks=[GradientAccumulationScheduler({1: 2})], **QUIET)
    return {
        "epochs": recorder.epochs,
        "with_the_trainer_flag": error_of(lambda: both.fit(Regressor(), data)),
        "manual": error_of(lambda: manual.fit(ManualRegressor(), data)),
    }


# -- 22. an exponential moving average of the weights ----------------------------------------------------------
class ValidatedRegressor(Regressor):
    """Logs its validation loss, which runs on the averaged weights, with a batch norm whose statistics are averaged
    as buffers."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
        self.val_losses = []

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.val_losses.append(loss.detach().clone())
        self.log("val_loss", loss)


def run_weight_averaging(root: str) -> dict:
    def fit(max_epochs, ckpt_path=None, folder="straight"):
        torch.manual_seed(3)
        module = ValidatedRegressor()
        ema = EMAWeightAveraging(decay=0.8, update_every_n_steps=2, update_starting_at_step=1)
        trainer = Trainer(
            max_epochs=max_epochs, logger=False, accumulate_grad_batches=2, num_sanity_val_steps=0,
            callbacks=[ema, ModelCheckpoint(dirpath=os.path.join(root, folder), save_last=True)], **QUIET,
        )
        trainer.fit(module, loader(), DataLoader(regression(16, 9), batch_size=8), ckpt_path=ckpt_path)
        return module, ema

    module, ema = fit(3)
    checkpoint = torch.load(os.path.join(root, "straight", "last.ckpt"), weights_only=False)
    fit(2, folder="stopped")
    resumed, resumed_ema = fit(3, os.path.join(root, "stopped", "last.ckpt"), "stopped")
    return {
        "val_losses": module.val_losses,
        "weights": weights(module),
        "average": weights(ema._average_model),
        "checkpoint": {key: checkpoint[key] for key in ("state_dict", "current_model_state", "averaging_state")},
        "callback_state": next(v for k, v in checkpoint["callbacks"].items() if "WeightAveraging" in k),
        "resumed_weights": weights(resumed),
        "resumed_average": weights(resumed_ema._average_model),
        "resumed_val_losses": resumed.val_losses,
    }


# -- 23. a module's on_train_batch_end and a ModelCheckpoint that saves every n steps -------------------------
class CountsBatchEnds(Regressor):
    """Counts its on_train_batch_end calls and keeps the count in its checkpoints, as a running statistic or an
    average of the weights updated there would be."""

    def __init__(self):
        super().__init__()
        self.batch_ends = 0
        self.saved = []

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.batch_ends += 1

    def on_save_checkpoint(self, checkpoint):
        checkpoint["batch_ends"] = self.batch_ends
        self.saved.append((self.global_step, self.batch_ends))

    def on_load_checkpoint(self, checkpoint):
        self.batch_ends = checkpoint["batch_ends"]


def run_batch_end_before_checkpoint(root: str) -> dict:
    def fit(folder, ckpt_path=None):
        torch.manual_seed(0)
        module = CountsBatchEnds()
        checkpoint = ModelCheckpoint(dirpath=os.path.join(root, folder), every_n_train_steps=2, save_top_k=-1)
        trainer = Trainer(max_epochs=2, logger=False, callbacks=[checkpoint], **QUIET)
        trainer.fit(module, loader(), ckpt_path=ckpt_path)
        return module

    straight = fit("straight")
    step_2 = next(name for name in os.listdir(os.path.join(root, "straight")) if "step=2" in name)
    resumed = fit("resumed", os.path.join(root, "straight", step_2))
    return {"saved": straight.saved, "batch_ends": straight.batch_ends, "resumed_batch_ends": resumed.batch_ends}


CASES = {
    "iterable_flags": run_iterable_flags,
    "unknown_optimizer_key": run_unknown_optimizer_key,
    "trainer_model": run_trainer_model,
    "non_plain_hparams": run_non_plain_hparams,
    "csv_columns": run_csv_columns,
    "csv_steps_without_step": run_csv_steps_without_step,
    "checkpoint_hparams_keys": run_checkpoint_hparams_keys,
    "missing_and_read_only": run_missing_and_read_only,
    "val_data_source": run_val_data_source,
    "grad_in_validation": run_grad_in_validation,
    "prediction_writer": run_prediction_writer,
    "hparams_before_init": run_hparams_before_init,
    "numpy_hparams": run_numpy_hparams,
    "library_checkpoint_io": run_library_checkpoint_io,
    "checkpoint_io_plugin": run_checkpoint_io_plugin,
    "async_checkpoint_io": run_async_checkpoint_io,
    "logger_hears_checkpoints": run_logger_hears_checkpoints,
    "hparams_given_whole": run_hparams_given_whole,
    "logging_in_every_entry_point": run_logging_in_every_entry_point,
    "failing_entry_points": run_failing_entry_points,
    "accumulation_schedule": run_accumulation_schedule,
    "weight_averaging": run_weight_averaging,
    "batch_end_before_checkpoint": run_batch_end_before_checkpoint,
}
