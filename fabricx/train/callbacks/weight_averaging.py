"""``WeightAveraging`` and ``EMAWeightAveraging``: a running average of the weights (torch.optim.swa_utils), kept
beside the model during training, used for validation and copied into the model when training ends."""

from __future__ import annotations

import copy
import itertools
import logging
from typing import TYPE_CHECKING, Any

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_avg_fn

from fabricx.train.callbacks.base import Callback
from fabricx.train.module.overrides import is_overridden
from fabricx.utilities.rank_zero import rank_zero_log_info, rank_zero_warn

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer

#: `AveragedModel` names the averaged module's entries ``module.<name>``.
_MODULE_PREFIX = "module."


class WeightAveraging(Callback):
    """Average the weights after each optimizer step (or as `should_update` says) in an `AveragedModel`.

    Lightning's callback: the keyword arguments go to `torch.optim.swa_utils.AveragedModel` (``avg_fn`` or
    ``multi_avg_fn``; without them, the equal-weight average of SWA), buffers are averaged unless
    ``use_buffers=False``, and the average lives on ``device`` (the model's by default). Validation runs on the
    averaged weights, training ends with them in the model, and a checkpoint holds the averaged weights as
    ``state_dict`` with the trained ones in ``current_model_state``, so a resumed fit continues both exactly.

    Example:
        ```python
        class LateEMA(WeightAveraging):
            def __init__(self):
                super().__init__(avg_fn=get_ema_avg_fn(0.99))

            def should_update(self, step_idx=None, epoch_idx=None):
                return step_idx is not None and step_idx >= 100

        Trainer(callbacks=[LateEMA()]).fit(model, loader)
        ```
    """

    def __init__(
        self, device: torch.device | str | int | None = None, use_buffers: bool = True, **kwargs: Any
    ) -> None:
        self._device: torch.device | int | None = torch.device(device) if isinstance(device, str) else device
        self._use_buffers = use_buffers
        self._kwargs = kwargs
        self._average_model: AveragedModel | None = None
        # Inside validation the model holds the average and the average the trained weights (`_swap_models`).
        self._swapped = False
        # Optimizer steps done at the last update: 0, so that the first update follows the first optimizer step
        # (after N batches with accumulate_grad_batches=N).
        self._latest_update_step = 0
        # The epoch of the last update: -1, so that should_update(epoch_idx=0) updates after the first epoch.
        self._latest_update_epoch = -1

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        """Whether to update the average after optimizer step ``step_idx`` or epoch ``epoch_idx`` (0-based; the
        other one is ``None``). The default updates after every optimizer step."""
        return step_idx is not None

    def setup(self, trainer: Trainer, pl_module: TrainModule, stage: str) -> None:
        if stage != "fit":
            return
        if is_overridden("configure_model", pl_module):
            # The averaged copy needs the layers now; they are built outside the strategy, so unsharded.
            rank_zero_warn(
                "You're using the WeightAveraging callback with a model that overrides the configure_model "
                "callback. WeightAveraging doesn't support sharding model layers, so you may run out of memory."
            )
            pl_module.configure_model()
        self._average_model = AveragedModel(
            model=pl_module, device=self._device or pl_module.device, use_buffers=self._use_buffers, **self._kwargs
        )

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: TrainModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # A 0-based step index, as epoch_idx is: global_step counts the steps done.
        step_idx = trainer.global_step - 1
        if trainer.global_step > self._latest_update_step and self.should_update(step_idx=step_idx):
            self._averaged().update_parameters(pl_module)
            self._latest_update_step = trainer.global_step

    def on_train_epoch_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        if trainer.current_epoch > self._latest_update_epoch and self.should_update(epoch_idx=trainer.current_epoch):
            self._averaged().update_parameters(pl_module)
            self._latest_update_epoch = trainer.current_epoch

    def on_train_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        self._copy_average_to_current(pl_module)

    def on_validation_epoch_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        if self._average_model is not None:
            self._swap_models(pl_module)

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        if self._average_model is not None:
            self._swap_models(pl_module)

    def state_dict(self) -> dict[str, Any]:
        # Lightning keeps the step alone; the epoch too lets a fit resumed inside an epoch's end hooks (a checkpoint
        # written after this callback's update) not update for that epoch twice. Lightning's files lack it.
        return {"latest_update_step": self._latest_update_step, "latest_update_epoch": self._latest_update_epoch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._latest_update_step = state_dict["latest_update_step"]
        self._latest_update_epoch = state_dict.get("latest_update_epoch", -1)

    def on_save_checkpoint(self, trainer: Trainer, pl_module: TrainModule, checkpoint: dict[str, Any]) -> None:
        """The averaged weights become the checkpoint's ``state_dict``, the trained ones ``current_model_state``
        and the average's own entries (``n_averaged``) ``averaging_state``."""
        if self._average_model is None:
            rank_zero_log_info(
                log,
                "You're using the WeightAveraging callback, but saving a checkpoint outside the 'fit' stage. The state "
                "of the WeightAveraging callback won't be saved in the checkpoint. If training has finished, the "
                "average model parameters will be saved to the state_dict in the checkpoint."
            )
            return
        average_state = self._average_model.state_dict()
        trained = checkpoint["state_dict"]
        prefix = len(_MODULE_PREFIX)
        averaged = {name[prefix:]: value for name, value in average_state.items() if name.startswith(_MODULE_PREFIX)}
        if self._swapped:
            # Saved inside validation (`OnExceptionCheckpoint`): each holds the other's weights. Lightning saves them
            # as they are, and the resumed run trains from the average.
            trained, averaged = averaged, trained
        checkpoint["current_model_state"] = trained
        checkpoint["state_dict"] = averaged
        checkpoint["averaging_state"] = {
            name: value for name, value in average_state.items() if not name.startswith(_MODULE_PREFIX)
        }

    def on_load_checkpoint(self, trainer: Trainer, pl_module: TrainModule, checkpoint: dict[str, Any]) -> None:
        """Restore the average from ``state_dict`` and the model from ``current_model_state`` (the module has just
        loaded the averaged weights); a checkpoint written without this callback starts both from its weights."""
        if self._average_model is None:
            rank_zero_warn(
                "You're using the WeightAveraging callback, but loading a checkpoint outside the 'fit' stage. The "
                "WeightAveraging state cannot be restored. If you're using the checkpoint for prediction or testing, "
                "you can ignore this warning. To disable the warning, remove the WeightAveraging callback."
            )
        elif "current_model_state" in checkpoint and "averaging_state" in checkpoint:
            rank_zero_log_info(
                log, "Found current_model_state in the checkpoint. This will be used to initialize the model."
            )
            average_state = {_MODULE_PREFIX + name: value for name, value in checkpoint["state_dict"].items()}
            average_state |= checkpoint["averaging_state"]
            self._average_model.load_state_dict(average_state)
            pl_module.load_state_dict(checkpoint["current_model_state"])
        else:
            rank_zero_warn(
                "The checkpoint was not created with WeightAveraging. Both the current and the average model will be "
                "initialized with state_dict."
            )
            self._average_model.module.load_state_dict(copy.deepcopy(checkpoint["state_dict"]), strict=False)

    def _averaged(self) -> AveragedModel:
        if self._average_model is None:
            raise RuntimeError("WeightAveraging has no averaged model: it is built when `fit` starts (`setup`).")
        return self._average_model

    # `_swap_models` and `_copy_average_to_current` are Lightning's names: subclasses (Lightning's own tests) wrap them.
    def _copy_average_to_current(self, pl_module: TrainModule) -> None:
        for average, current in _weights_of(self._averaged().module, pl_module):
            current.data.copy_(average.data)

    def _swap_models(self, pl_module: TrainModule) -> None:
        self._swapped = not self._swapped
        for average, current in _weights_of(self._averaged().module, pl_module):
            held = average.data.clone()
            average.data.copy_(current.data)
            current.data.copy_(held)


def _weights_of(average: torch.nn.Module, current: torch.nn.Module) -> zip[tuple[torch.Tensor, torch.Tensor]]:
    """The averaged module's parameters and buffers beside the model's, in the same order."""
    return zip(
        itertools.chain(average.parameters(), average.buffers()),
        itertools.chain(current.parameters(), current.buffers()),
        strict=True,
    )


class EMAWeightAveraging(WeightAveraging):
    """An exponential moving average of the weights (Lightning's callback).

    The average moves by ``1 - decay`` towards the weights every ``update_every_n_steps`` optimizer steps, from
    step ``update_starting_at_step`` on (when given); with ``update_starting_at_epoch``, also after each epoch from
    that one on.

    Example:
        ```python
        ema = EMAWeightAveraging(decay=0.999, update_starting_at_step=100)
        Trainer(callbacks=[ema]).fit(model, loader)
        ```
    """

    def __init__(
        self,
        device: torch.device | str | int | None = None,
        use_buffers: bool = True,
        decay: float = 0.999,
        update_every_n_steps: int = 1,
        update_starting_at_step: int | None = None,
        update_starting_at_epoch: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(device=device, use_buffers=use_buffers, **kwargs, avg_fn=get_ema_avg_fn(decay=decay))
        self.update_every_n_steps = update_every_n_steps
        self.update_starting_at_step = update_starting_at_step
        self.update_starting_at_epoch = update_starting_at_epoch

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        if step_idx is not None:
            started = self.update_starting_at_step is None or step_idx >= self.update_starting_at_step
            if started and self.update_every_n_steps > 0 and step_idx % self.update_every_n_steps == 0:
                return True
        return epoch_idx is not None and (
            self.update_starting_at_epoch is not None and epoch_idx >= self.update_starting_at_epoch
        )
