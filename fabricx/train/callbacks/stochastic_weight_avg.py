"""``StochasticWeightAveraging``: average the weights of the last epochs (torch.optim.swa_utils) into the model."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.optim.swa_utils import SWALR, update_bn

from fabricx.train.callbacks.base import Callback
from fabricx.train.optim.optimizers import SchedulerConfig
from fabricx.utilities.exceptions import MisconfigurationException
from fabricx.utilities.rank_zero import rank_zero_log_info, rank_zero_warn

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer

AverageFunction = Callable[[Tensor, Tensor, Tensor], Tensor]


class StochasticWeightAveraging(Callback):
    """Average the model's weights over the epochs from ``swa_epoch_start`` to the end (SWA).

    From ``swa_epoch_start`` (an epoch number from 1, or a fraction of ``max_epochs``) the optimizer's
    rate follows ``torch.optim.swa_utils.SWALR`` towards ``swa_lrs`` over ``annealing_epochs``, replacing
    the module's own scheduler, and the weights are averaged at each epoch start. When training ends the
    averaged weights are copied into the model; batch-norm statistics are then recomputed with
    ``torch.optim.swa_utils.update_bn`` over the training data (a forward pass on each batch, or on its
    first element when the batch is a list or tuple).

    Example:

    ```python
    Trainer(max_epochs=20, callbacks=[StochasticWeightAveraging(swa_lrs=1e-2)])
    ```
    """

    def __init__(
        self,
        swa_lrs: float | list[float],
        swa_epoch_start: int | float = 0.8,
        annealing_epochs: int = 10,
        annealing_strategy: str = "cos",
        avg_fn: AverageFunction | None = None,
        device: torch.device | str | None = torch.device("cpu"),
    ) -> None:
        wrong_start = (isinstance(swa_epoch_start, int) and swa_epoch_start < 1) or (
            isinstance(swa_epoch_start, float) and not 0 <= swa_epoch_start <= 1
        )
        if wrong_start:
            raise MisconfigurationException(
                f"swa_epoch_start should be a >0 integer or a float between 0 and 1; got {swa_epoch_start!r}."
            )
        if not _positive_rates(swa_lrs):
            raise MisconfigurationException(
                f"The `swa_lrs` should a positive float, or a list of positive floats; got {swa_lrs!r}."
            )
        if avg_fn is not None and not callable(avg_fn):
            raise MisconfigurationException("The `avg_fn` should be callable.")
        if device is not None and not isinstance(device, (torch.device, str)):
            raise MisconfigurationException(f"device is expected to be a torch.device or a str. Found {device}")
        self.n_averaged: Tensor | None = None
        self._swa_epoch_start = swa_epoch_start
        self._swa_lrs = swa_lrs
        self._annealing_epochs = annealing_epochs
        self._annealing_strategy = annealing_strategy
        self._avg_fn = avg_fn or self.avg_fn
        self._device = device
        self._model_contains_batch_norm: bool | None = None
        self._average_model: nn.Module | None = None
        self._initialized = False
        self._swa_scheduler: Any = None
        self._scheduler_state: dict[str, Any] | None = None
        self._scheduler_epoch_seen = -1
        self._init_n_averaged = 0
        self._latest_update_epoch = -1
        self._max_epochs = -1

    @property
    def swa_start(self) -> int:
        """The first averaged epoch, counted from 0."""
        assert isinstance(self._swa_epoch_start, int)
        return max(self._swa_epoch_start - 1, 0)

    @property
    def swa_end(self) -> float:
        """The last averaged epoch, counted from 0 (infinite without ``max_epochs``)."""
        return float("inf") if self._max_epochs == -1 else self._max_epochs - 1

    @staticmethod
    def pl_module_contains_batch_norm(pl_module: nn.Module) -> bool:
        return any(isinstance(module, nn.modules.batchnorm._BatchNorm) for module in pl_module.modules())

    def setup(self, trainer: Trainer, pl_module: TrainModule, stage: str) -> None:
        if getattr(trainer.strategy, "shards_parameters", False):
            raise MisconfigurationException("SWA does not currently support sharded models.")
        self._average_model = copy.deepcopy(pl_module)  # detached from the Trainer, as Lightning's copy

    def on_fit_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        if len(trainer.optimizers) != 1:
            raise MisconfigurationException(
                f"SWA currently works with 1 `optimizer`; configure_optimizers returned {len(trainer.optimizers)}."
            )
        if len(trainer.lr_scheduler_configs) > 1:
            raise MisconfigurationException("SWA currently not supported for more than 1 `lr_scheduler`.")
        max_epochs = -1 if trainer.max_epochs is None else trainer.max_epochs
        if isinstance(self._swa_epoch_start, float):
            if max_epochs == -1:
                raise MisconfigurationException(
                    "SWA with `swa_epoch_start` as a float is not supported when `max_epochs=-1`. "
                    "Please provide `swa_epoch_start` as an integer."
                )
            self._swa_epoch_start = int(max_epochs * self._swa_epoch_start)
        self._model_contains_batch_norm = self.pl_module_contains_batch_norm(pl_module)
        self._max_epochs = max_epochs

    def on_train_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        if not self._initialized and self._scheduler_state is not None:
            # Restored from a checkpoint written after the schedule began: it goes on now, not at the next epoch's
            # start (Lightning's resume inside that epoch steps the module's own scheduler until then).
            self._initialized = True
            self._start_swa_schedule(trainer, pl_module)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        epoch = trainer.current_epoch
        in_window = self.swa_start <= epoch <= self.swa_end
        if not self._initialized and in_window:
            self._initialized = True
            self._start_swa_schedule(trainer, pl_module)
        elif self._swa_scheduler is not None and self._scheduler_epoch_seen == self._swa_scheduler.last_epoch:
            # The Trainer did not step the SWA schedule last epoch (it had no epoch scheduler): step it here.
            self._swa_scheduler.step()
        if self._swa_scheduler is not None:
            self._scheduler_epoch_seen = self._swa_scheduler.last_epoch
        if in_window and epoch > self._latest_update_epoch:
            assert self.n_averaged is not None and self._average_model is not None
            self.update_parameters(self._average_model, pl_module, self.n_averaged, self._avg_fn)
            self._latest_update_epoch = epoch

    def _start_swa_schedule(self, trainer: Trainer, pl_module: TrainModule) -> None:
        assert self._average_model is not None
        self._average_model = self._average_model.to(self._device or _device_of(pl_module))
        optimizer = trainer.optimizers[0]
        rates: Any = self._swa_lrs
        if isinstance(rates, float):
            rates = self._swa_lrs = [rates] * len(optimizer.param_groups)
        for lr, group in zip(rates, optimizer.param_groups, strict=False):
            group["initial_lr"] = lr
        restored_rates = [group["lr"] for group in optimizer.param_groups]
        self._swa_scheduler = SWALR(
            optimizer,
            swa_lr=rates,
            anneal_epochs=self._annealing_epochs,
            anneal_strategy=self._annealing_strategy,  # type: ignore[arg-type]
            last_epoch=self._max_epochs if self._annealing_strategy == "cos" else -1,
        )
        if self._scheduler_state is not None:
            self._swa_scheduler.load_state_dict(self._scheduler_state)
            # Building the scheduler stepped the rates; the restored optimizer's are the run's.
            for lr, group in zip(restored_rates, optimizer.param_groups, strict=True):
                group["lr"] = lr
        elif trainer.current_epoch != self.swa_start:
            rank_zero_warn("SWA is initializing after swa_start without any checkpoint data.")
        config = SchedulerConfig(self._swa_scheduler, interval="epoch", frequency=1)
        configs = trainer.lr_scheduler_configs
        if configs:
            old = configs[0]
            if old.interval != "epoch" or old.frequency != 1:
                rank_zero_warn(f"SWA is currently only supported every epoch. Found {old}")
            swapped = f"`{type(old.scheduler).__name__}` for `{type(self._swa_scheduler).__name__}`"
            rank_zero_log_info(log, f"Swapping scheduler {swapped}")
            configs[0] = config
        else:
            configs.append(config)
        if self.n_averaged is None:
            self.n_averaged = torch.tensor(self._init_n_averaged, dtype=torch.long, device=_device_of(pl_module))

    def on_train_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        reached_end = self._max_epochs == -1 or trainer.current_epoch - 1 >= self.swa_end
        if self._average_model is None or not self._initialized or not reached_end:
            return
        self.transfer_weights(self._average_model, pl_module)
        if self._model_contains_batch_norm:
            loader = trainer.train_dataloader
            if loader is not None:
                with torch.no_grad():
                    update_bn(loader, pl_module, device=_device_of(pl_module))

    @staticmethod
    def transfer_weights(src_pl_module: nn.Module, dst_pl_module: nn.Module) -> None:
        """Copy the parameters of ``src_pl_module`` into ``dst_pl_module``."""
        for source, target in zip(src_pl_module.parameters(), dst_pl_module.parameters(), strict=False):
            target.detach().copy_(source.to(target.device))

    @staticmethod
    def update_parameters(
        average_model: nn.Module, model: nn.Module, n_averaged: Tensor, avg_fn: AverageFunction
    ) -> None:
        """Fold ``model``'s parameters into ``average_model``'s running average; counts one more model."""
        for averaged, current in zip(average_model.parameters(), model.parameters(), strict=False):
            target = averaged.detach()
            value = current.detach().to(target.device)
            target.copy_(value if n_averaged == 0 else avg_fn(target, value, n_averaged.to(target.device)))
        n_averaged += 1

    @staticmethod
    def avg_fn(averaged_model_parameter: Tensor, model_parameter: Tensor, num_averaged: Tensor) -> Tensor:
        """The equally weighted running mean."""
        return averaged_model_parameter + (model_parameter - averaged_model_parameter) / (num_averaged + 1)

    def state_dict(self) -> dict[str, Any]:
        return {
            "n_averaged": 0 if self.n_averaged is None else self.n_averaged.item(),
            "latest_update_epoch": self._latest_update_epoch,
            # Whether the Trainer stepped the schedule in the epoch saved (not in Lightning's files).
            "scheduler_epoch_seen": self._scheduler_epoch_seen,
            "scheduler_state": None if self._swa_scheduler is None else self._swa_scheduler.state_dict(),
            "average_model_state": None if self._average_model is None else self._average_model.state_dict(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._init_n_averaged = state_dict["n_averaged"]
        self._latest_update_epoch = state_dict["latest_update_epoch"]
        self._scheduler_state = state_dict["scheduler_state"]
        self._scheduler_epoch_seen = state_dict.get("scheduler_epoch_seen", -1)
        if self._average_model is not None and state_dict["average_model_state"] is not None:
            self._average_model.load_state_dict(state_dict["average_model_state"])


def _positive_rates(rates: Any) -> bool:
    if isinstance(rates, float):
        return rates > 0
    return isinstance(rates, list) and all(isinstance(lr, float) and lr > 0 for lr in rates)


def _device_of(module: nn.Module) -> torch.device:
    parameter = next(module.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")
