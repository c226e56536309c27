"""The callback interface: hooks the Trainer calls, plus state that goes into checkpoints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.optim import Optimizer

    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer


class Callback:
    """Base class for Trainer callbacks; override only the hooks you need.

    Hooks receive the trainer and the module. ``state_dict``/``load_state_dict`` carry state through
    checkpoints (plain values only: numbers, strings, lists, dicts, tensors). ``state_key`` tells
    callbacks of the same class apart inside a checkpoint.

    Example:
        ```python
        class PrintLoss(Callback):
            def on_train_epoch_end(self, trainer, pl_module):
                trainer.print(trainer.callback_metrics.get("loss"))
        ```
    """

    #: Callbacks that read metrics to make decisions run after all others at epoch end.
    _monitoring: bool = False

    @property
    def state_key(self) -> str:
        """The key of this callback's entry in a checkpoint."""
        return type(self).__qualname__

    def _state_key_with(self, **kwargs: Any) -> str:
        return f"{type(self).__qualname__}{kwargs!r}"

    def state_dict(self) -> dict[str, Any]:
        """State to store in a checkpoint."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what `state_dict()` returned."""

    # -- whole run ---------------------------------------------------------------------------------
    def setup(self, trainer: Trainer, pl_module: TrainModule, stage: str) -> None:
        """Called when fit/validate/test/predict begins, in every process."""

    def teardown(self, trainer: Trainer, pl_module: TrainModule, stage: str) -> None:
        """Called when fit/validate/test/predict ends (also after an exception)."""

    def on_fit_start(self, trainer: Trainer, pl_module: TrainModule) -> None: ...
    def on_fit_end(self, trainer: Trainer, pl_module: TrainModule) -> None: ...
    def on_sanity_check_start(self, trainer: Trainer, pl_module: TrainModule) -> None: ...
    def on_sanity_check_end(self, trainer: Trainer, pl_module: TrainModule) -> None: ...
    def on_train_start(self, trainer: Trainer, pl_module: TrainModule) -> None: ...
    def on_train_end(self, trainer: Trainer, pl_module: TrainModule) -> None: ...
    def on_exception(self, trainer: Trainer, pl_module: TrainModule, exception: BaseException) -> None: ...

    # -- training ----------------------------------------------------------------------------------
    def on_train_epoch_start(self, trainer: Trainer, pl_module: TrainModule) -> None: ...
    def on_train_epoch_end(self, trainer: Trainer, pl_module: TrainModule) -> None: ...
    def on_train_batch_start(self, trainer: Trainer, pl_module: TrainModule, batch: Any, batch_idx: int) -> None: ...

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: TrainModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None: ...

    def on_before_backward(self, trainer: Trainer, pl_module: TrainModule, loss: Any) -> None: ...
    def on_after_backward(self, trainer: Trainer, pl_module: TrainModule) -> None: ...
    def on_before_optimizer_step(self, trainer: Trainer, pl_module: TrainModule, optimizer: Optimizer) -> None: ...
    def on_before_zero_grad(self, trainer: Trainer, pl_module: TrainModule, optimizer: Optimizer) -> None: ...

    # -- evaluation --------------------------------------------------------------------------------
    def on_validation_start(self, trainer: Trainer, pl_module: TrainModule) -> None: ...
    def on_validation_end(self, trainer: Trainer, pl_module: TrainModule) -> None: ...
    def on_validation_epoch_start(self, trainer: Trainer, pl_module: TrainModule) -> None: ...
    def on_validation_epoch_end(self, trainer: Trainer, pl_module: TrainModule) -> None: ...

    def on_validation_batch_start(
        self, trainer: Trainer, pl_module: TrainModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...

    def on_validation_batch_end(
        self, trainer: Trainer, pl_module: TrainModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None: ...

    def on_test_start(self, trainer: Trainer, pl_module: TrainModule) -> None: ...
    def on_test_end(self, trainer: Trainer, pl_module: TrainModule) -> None: ...
    def on_test_epoch_start(self, trainer: Trainer, pl_module: TrainModule) -> None: ...
    def on_test_epoch_end(self, trainer: Trainer, pl_module: TrainModule) -> None: ...

    def on_test_batch_start(
        self, trainer: Trainer, pl_module: TrainModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...

    def on_test_batch_end(
        self, trainer: Trainer, pl_module: TrainModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None: ...

    def on_predict_start(self, trainer: Trainer, pl_module: TrainModule) -> None: ...
    def on_predict_end(self, trainer: Trainer, pl_module: TrainModule) -> None: ...
    def on_predict_epoch_start(self, trainer: Trainer, pl_module: TrainModule) -> None: ...
    def on_predict_epoch_end(self, trainer: Trainer, pl_module: TrainModule) -> None: ...

    def on_predict_batch_start(
        self, trainer: Trainer, pl_module: TrainModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None: ...

    def on_predict_batch_end(
        self, trainer: Trainer, pl_module: TrainModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None: ...

    # -- checkpoints -------------------------------------------------------------------------------
    def on_save_checkpoint(self, trainer: Trainer, pl_module: TrainModule, checkpoint: dict[str, Any]) -> None:
        """Add plain values to ``checkpoint``: a dict shared with the module's hook, saved with the checkpoint."""

    def on_load_checkpoint(self, trainer: Trainer, pl_module: TrainModule, checkpoint: dict[str, Any]) -> None:
        """Read what `on_save_checkpoint()` added."""


class Checkpoint(Callback):
    """The base class of the callbacks that write checkpoints (`ModelCheckpoint`, `OnExceptionCheckpoint`), as
    Lightning's: the Trainer runs them after the other callbacks in each hook, lists them in
    `trainer.checkpoint_callbacks`, and adds its default `ModelCheckpoint` only when none is given.

    Example:
        ```python
        class EveryEpoch(Checkpoint):
            def on_train_epoch_end(self, trainer, pl_module):
                trainer.save_checkpoint(f"epoch-{trainer.current_epoch}.ckpt")
        ```
    """


def overrides(obj: Any, name: str, base: type) -> bool:
    """Whether ``obj``'s class defines hook ``name`` differently from ``base``."""
    method = getattr(type(obj), name, None)
    if method is None:
        return False
    return method is not getattr(base, name, None)
