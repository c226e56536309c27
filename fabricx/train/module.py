"""``TrainModule``: a ``torch.nn.Module`` with the hooks a :class:`~fabricx.train.Trainer` calls."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from fabricx.utilities.exceptions import FabricxError
from fabricx.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from torch.optim import Optimizer

    from fabricx.fabric import Fabric
    from fabricx.train.trainer import Trainer


class TrainModule(nn.Module):
    """A module that knows how to train itself: a LightningModule ports by changing its base class.

    Override ``training_step`` and ``configure_optimizers`` (and ``validation_step``, ``test_step``,
    ``predict_step`` as needed); the ``on_*`` hooks are optional. Inside them, ``self.log`` records
    metrics, and ``self.fabric``, ``self.trainer``, ``self.device``, ``self.global_step`` and
    ``self.current_epoch`` describe the run.

    Example::

        class Regressor(TrainModule):
            def __init__(self):
                super().__init__()
                self.net = torch.nn.Linear(32, 1)

            def training_step(self, batch, batch_idx):
                x, y = batch
                loss = torch.nn.functional.mse_loss(self.net(x), y)
                self.log("train_loss", loss, prog_bar=True)
                return loss

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        Trainer(max_epochs=3).fit(Regressor(), train_loader)
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Kept out of nn.Module's registries: the trainer is not a sub-module.
        self.__dict__["_trainer"] = None
        self.__dict__["_hparams"] = {}

    # -- where the module is running ------------------------------------------------------------------
    @property
    def trainer(self) -> Trainer:
        """The Trainer running this module (an error when none is)."""
        trainer = self.__dict__.get("_trainer")
        if trainer is None:
            raise FabricxError(
                f"{type(self).__name__} is not attached to a Trainer. Pass it to Trainer.fit/validate/test/"
                "predict; self.trainer exists only while one of them runs."
            )
        return trainer

    @property
    def fabric(self) -> Fabric:
        """The :class:`~fabricx.Fabric` the Trainer drives this module with."""
        return self.trainer.fabric

    @property
    def device(self) -> torch.device:
        """The device this process computes on (the device of the first parameter when not attached)."""
        trainer = self.__dict__.get("_trainer")
        if trainer is not None:
            return trainer.fabric.device
        for tensor in self.parameters():
            return tensor.device
        return torch.device("cpu")

    @property
    def global_step(self) -> int:
        """Optimizer steps taken so far (0 when not attached)."""
        trainer = self.__dict__.get("_trainer")
        return trainer.global_step if trainer is not None else 0

    @property
    def current_epoch(self) -> int:
        """The epoch being trained, counting from 0 (0 when not attached)."""
        trainer = self.__dict__.get("_trainer")
        return trainer.current_epoch if trainer is not None else 0

    @property
    def hparams(self) -> dict[str, Any]:
        """Hyperparameters recorded by :meth:`save_hyperparameters` (sent to the loggers at fit start)."""
        return self.__dict__["_hparams"]

    def save_hyperparameters(self, *names: str, ignore: list[str] | None = None, **values: Any) -> None:
        """Record the caller's ``__init__`` arguments (all, or those in ``names``) and ``values`` as hparams.

        Example::

            def __init__(self, lr=0.1, hidden=64):
                super().__init__()
                self.save_hyperparameters()  # self.hparams == {"lr": 0.1, "hidden": 64}
        """
        frame = inspect.currentframe()
        caller = frame.f_back if frame is not None else None
        found: dict[str, Any] = {}
        if caller is not None:
            info = inspect.getargvalues(caller)
            for arg in info.args[1:]:  # skip self
                found[arg] = info.locals[arg]
            if info.keywords and isinstance(info.locals.get(info.keywords), Mapping):
                found.update(info.locals[info.keywords])
        del frame, caller
        if names:
            found = {key: found[key] for key in names if key in found}
        for key in ignore or ():
            found.pop(key, None)
        found.update(values)
        self.__dict__["_hparams"].update(found)

    # -- logging ---------------------------------------------------------------------------------------
    def log(
        self,
        name: str,
        value: Any,
        prog_bar: bool = False,
        logger: bool = True,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str | Any = "mean",
        sync_dist: bool = False,
        batch_size: int | None = None,
        enable_graph: bool = False,
        add_dataloader_idx: bool = True,
        metric_attribute: str | None = None,
        rank_zero_only: bool = False,
        sync_dist_group: Any = None,
    ) -> None:
        """Record a metric: a tensor, a number, or a torchmetrics ``Metric``.

        ``on_step`` values go to the loggers every ``log_every_n_steps`` steps; ``on_epoch`` values are
        reduced over the epoch with ``reduce_fx`` (``"mean"`` weighted by batch size, ``"sum"``,
        ``"max"``, ``"min"``) and, with ``sync_dist=True``, across processes. A ``Metric`` is updated
        by you each step, then computed (synchronised across processes) at epoch end and reset.
        Defaults: ``on_step=True, on_epoch=False`` in ``training_step``, the reverse in
        validation/test and in epoch-end hooks. Logged with both, a metric appears as
        ``name_step`` and ``name_epoch``. ``enable_graph``, ``add_dataloader_idx``, ``metric_attribute``,
        ``rank_zero_only`` and ``sync_dist_group`` are accepted so LightningModule code runs unchanged;
        they have no effect (values are always detached; loaders are suffixed when there are several).

        Example::

            self.log("val_acc", self.val_accuracy, prog_bar=True)
        """
        trainer = self.__dict__.get("_trainer")
        if trainer is None:
            _warn_not_attached(name)
            return
        trainer._results.log(name, value, prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist, batch_size)

    def log_dict(
        self,
        dictionary: Mapping[str, Any],
        prog_bar: bool = False,
        logger: bool = True,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str | Any = "mean",
        sync_dist: bool = False,
        batch_size: int | None = None,
    ) -> None:
        """:meth:`log` every entry of ``dictionary`` with the same options.

        Example::

            self.log_dict({"loss": loss, "acc": acc}, prog_bar=True)
        """
        for name, value in dictionary.items():
            self.log(name, value, prog_bar, logger, on_step, on_epoch, reduce_fx, sync_dist, batch_size)

    def optimizers(self) -> Any:
        """The set-up optimizer (a list when ``configure_optimizers`` returned several)."""
        optimizers = self.trainer.optimizers
        return optimizers[0] if len(optimizers) == 1 else list(optimizers)

    def lr_schedulers(self) -> Any:
        """The LR scheduler (a list when there are several, ``None`` when there is none)."""
        schedulers = [config.scheduler for config in self.trainer.lr_scheduler_configs]
        if not schedulers:
            return None
        return schedulers[0] if len(schedulers) == 1 else schedulers

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on global rank zero only."""
        trainer = self.__dict__.get("_trainer")
        if trainer is None or trainer.is_global_zero:
            print(*args, **kwargs)

    # -- steps (override) ------------------------------------------------------------------------------
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        """Compute and return the loss (a tensor, or a dict with a ``"loss"`` key) for one batch."""
        raise NotImplementedError(
            f"{type(self).__name__} has no training_step. Define training_step(self, batch, batch_idx) "
            "returning the loss to train it with Trainer.fit."
        )

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        """Evaluate one validation batch (log metrics with ``self.log``)."""
        raise NotImplementedError(
            f"{type(self).__name__} has no validation_step, but validation data was given. Define "
            "validation_step(self, batch, batch_idx), or pass no val_dataloaders."
        )

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        """Evaluate one test batch (log metrics with ``self.log``)."""
        raise NotImplementedError(
            f"{type(self).__name__} has no test_step. Define test_step(self, batch, batch_idx) to use Trainer.test."
        )

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        """Return the prediction for one batch (the default calls ``self(batch)``)."""
        return self(batch)

    def configure_optimizers(self) -> Any:
        """Return an optimizer; a list of optimizers; ``([optimizers], [schedulers])``; or
        ``{"optimizer": opt, "lr_scheduler": scheduler_or_config}`` where the config is
        ``{"scheduler": s, "interval": "step"|"epoch", "frequency": n, "monitor": "metric"}``."""
        raise NotImplementedError(
            f"{type(self).__name__} has no configure_optimizers. Define configure_optimizers(self) returning "
            "e.g. torch.optim.SGD(self.parameters(), lr=0.1)."
        )

    # -- hooks (optional) ------------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        """Called at the start of fit/validate/test/predict in every process (``stage`` names which)."""

    def teardown(self, stage: str) -> None:
        """Called at the end of fit/validate/test/predict (also after an exception)."""

    def on_fit_start(self) -> None: ...
    def on_fit_end(self) -> None: ...
    def on_train_start(self) -> None: ...
    def on_train_end(self) -> None: ...
    def on_train_epoch_start(self) -> None: ...
    def on_train_epoch_end(self) -> None: ...

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> Any:
        """Return ``-1`` to skip the rest of this epoch."""

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None: ...
    def on_validation_start(self) -> None: ...
    def on_validation_end(self) -> None: ...
    def on_validation_epoch_start(self) -> None: ...
    def on_validation_epoch_end(self) -> None: ...
    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_test_start(self) -> None: ...
    def on_test_end(self) -> None: ...
    def on_test_epoch_start(self) -> None: ...
    def on_test_epoch_end(self) -> None: ...
    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_predict_start(self) -> None: ...
    def on_predict_end(self) -> None: ...
    def on_predict_epoch_start(self) -> None: ...
    def on_predict_epoch_end(self) -> None: ...
    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...
    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None: ...

    def on_before_backward(self, loss: torch.Tensor) -> None: ...
    def on_after_backward(self) -> None: ...
    def on_before_optimizer_step(self, optimizer: Optimizer) -> None: ...

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Add plain values (numbers, strings, lists, dicts, tensors) to ``checkpoint`` before it is saved."""

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Read back what :meth:`on_save_checkpoint` added."""


_warned_not_attached: set[str] = set()


def _warn_not_attached(name: str) -> None:
    if name not in _warned_not_attached:
        _warned_not_attached.add(name)
        rank_zero_warn(
            f"self.log({name!r}, ...) was called outside a Trainer run; the value is dropped. "
            "Logging works inside the hooks Trainer.fit/validate/test call."
        )
