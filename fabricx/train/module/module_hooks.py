"""The hooks of a `fabricx.train.TrainModule` that do nothing (or the obvious thing) unless overridden.

Lightning's `ModelHooks`, `DataHooks` and `CheckpointHooks`: the Trainer calls only the ones a module
overrides (see `fabricx.train.module.hooks`), so an unused hook costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from fabricx.utilities.apply import move_data_to_device
from fabricx.utilities.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from torch.optim import Optimizer


def _missing_loader_hook(owner: Any, method: str, stage: str) -> MisconfigurationException:
    """The error a loader hook of a DataModule or TrainModule raises when the user did not define it
    (Lightning's exception type and phrase, and what to do)."""
    return MisconfigurationException(
        f"`{method}` must be implemented to be used with the Lightning Trainer: {type(owner).__name__} has no "
        f"{method}(), which Trainer.{stage} needs. Define {method}(self) returning a DataLoader, or pass the "
        "loader to the Trainer call."
    )


class DataHooks:
    """The data hooks a `fabricx.train.TrainModule` and a `fabricx.train.DataModule` share (Lightning's `DataHooks`):
    where the loaders come from and how a batch reaches the device.

    Example:
        ```python
        class Digits(DataModule):
            def train_dataloader(self):
                return DataLoader(self.train, batch_size=64, shuffle=True)
        ```
    """

    def prepare_data(self) -> None:
        """Download or write data once (global rank zero, or local rank zero per node) before ``setup``."""

    def train_dataloader(self) -> Any:
        """The training loader (or a dict/list of loaders, combined batch by batch) ``Trainer.fit`` uses when
        none is passed."""
        raise _missing_loader_hook(self, "train_dataloader", "fit")

    def val_dataloader(self) -> Any:
        """The validation loader(s) used when none are passed."""
        raise _missing_loader_hook(self, "val_dataloader", "validate")

    def test_dataloader(self) -> Any:
        """The test loader(s) used when none are passed."""
        raise _missing_loader_hook(self, "test_dataloader", "test")

    def predict_dataloader(self) -> Any:
        """The prediction loader(s) used when none are passed."""
        raise _missing_loader_hook(self, "predict_dataloader", "predict")

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch before it is moved to the device."""
        return batch

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Move ``batch`` to ``device`` (override for custom batch types)."""
        return move_data_to_device(batch, device)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch after it was moved to the device."""
        return batch


class ModuleHooks(DataHooks):
    """The optional hooks of a module, in the order of a run (override the ones you need).

    Example:
        ```python
        class MyModule(TrainModule):
            def on_train_epoch_start(self):
                self.print(f"epoch {self.current_epoch}")
        ```
    """

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

    def configure_model(self) -> None:
        """Create layers here to have them built on the device, sharded (called in fit/validate/test/predict)."""

    def configure_callbacks(self) -> Any:
        """Callbacks this module needs (they replace the Trainer's callbacks of the same type)."""
        return []

    def on_before_backward(self, loss: torch.Tensor) -> None: ...
    def on_after_backward(self) -> None: ...
    def on_before_optimizer_step(self, optimizer: Optimizer) -> None: ...

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Add plain values (numbers, strings, lists, dicts, tensors) to ``checkpoint`` before it is saved."""

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Read back what `on_save_checkpoint()` added."""


__all__ = ["DataHooks", "ModuleHooks"]
