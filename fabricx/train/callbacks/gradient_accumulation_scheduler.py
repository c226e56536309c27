"""`GradientAccumulationScheduler`: Lightning's callback that changes ``accumulate_grad_batches`` by epoch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fabricx.train.callbacks.base import Callback
from fabricx.train.module.overrides import is_overridden
from fabricx.utilities.exceptions import MisconfigurationException
from fabricx.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer


class GradientAccumulationScheduler(Callback):
    """Accumulate gradients over a number of batches that changes with the epoch: ``scheduling`` maps the first
    epoch (0-based) of each factor to the factor; epochs before the first key accumulate 1.

    As Lightning's: set at every epoch's start, refused with manual optimization, with DeepSpeed (its engine fixes
    the factor) and beside ``Trainer(accumulate_grad_batches=N)``. Unlike Lightning's, a run resumed in the middle
    of an epoch accumulates that epoch's factor (Lightning's goes on with 1 until the next epoch starts).

    Example:
        ```python
        # 1 batch per step in epochs 0-3, then 2; from epoch 8 on, 4
        Trainer(callbacks=[GradientAccumulationScheduler(scheduling={4: 2, 8: 4})])
        ```
    """

    def __init__(self, scheduling: dict[int, int]) -> None:
        super().__init__()
        if not scheduling:
            raise TypeError("Empty dict cannot be interpreted correct")
        if any(not isinstance(key, int) or key < 0 for key in scheduling):
            raise MisconfigurationException(
                f"Epoch should be an int greater than or equal to 0. Got {list(scheduling.keys())}."
            )
        if any(not isinstance(value, int) or value < 1 for value in scheduling.values()):
            raise MisconfigurationException(
                f"Accumulation factor should be an int greater than 0. Got {list(scheduling.values())}."
            )
        if min(scheduling) != 0:  # as Lightning: the caller's dict gains the first epochs' factor
            scheduling.update({0: 1})
        self.scheduling = scheduling
        self.epochs = sorted(scheduling)

    def going_to_accumulate_grad_batches(self) -> bool:
        """Whether any epoch accumulates more than one batch."""
        return any(value > 1 for value in self.scheduling.values())

    def get_accumulate_grad_batches(self, epoch: int) -> int:
        """The factor of ``epoch``: that of the last scheduled epoch at or before it."""
        return next((self.scheduling[start] for start in reversed(self.epochs) if epoch >= start), 1)

    def on_train_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        if not pl_module.automatic_optimization:
            raise RuntimeError(
                "Automatic gradient accumulation and the `GradientAccumulationScheduler` is not supported for manual "
                "optimization. Please remove the callback or switch to automatic optimization."
            )
        hooks_overridden = is_overridden("optimizer_step", pl_module) or is_overridden(
            "optimizer_zero_grad", pl_module
        )
        if hooks_overridden and self.going_to_accumulate_grad_batches():
            rank_zero_warn(
                "When using `Trainer(accumulate_grad_batches != 1)` and overriding"
                " `LightningModule.optimizer_{step,zero_grad}`, the hooks will not be called on every batch"
                " (rather, they are called on every optimization step)."
            )
        if getattr(trainer.strategy, "engine_owns_optimizer", False):
            raise RuntimeError(
                f"The `{type(trainer.strategy).__name__}` does not support `accumulate_grad_batches` changing"
                " between epochs."
            )
        if trainer.accumulate_grad_batches != 1:
            raise ValueError(
                "You have set `accumulate_grad_batches` and are using the `GradientAccumulationScheduler`"
                " callback. Either remove `accumulate_grad_batches` from the Trainer or remove the callback."
            )
        # A run resumed mid-epoch calls no `on_train_epoch_start` for that epoch: its factor is set here.
        trainer.accumulate_grad_batches = self.get_accumulate_grad_batches(trainer.current_epoch)

    def on_train_epoch_start(self, trainer: Trainer, *_: Any) -> None:
        trainer.accumulate_grad_batches = self.get_accumulate_grad_batches(trainer.current_epoch)


__all__ = ["GradientAccumulationScheduler"]
