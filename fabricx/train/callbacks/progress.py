"""``ProgressBar``: what every progress bar shares (Lightning's base class of the same name)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fabricx.train.callbacks.base import Callback
from fabricx.train.callbacks.trainer_state import shown_metrics, total_val_batches

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer


class ProgressBar(Callback):
    """The Trainer a bar shows (set in ``setup``), its batch totals and the metrics it shows.

    Example:
        ```python
        class PrintBar(ProgressBar):
            def on_train_epoch_end(self, trainer, pl_module):
                print(trainer.current_epoch, self.get_metrics(trainer, pl_module))
        ```
    """

    _trainer: Trainer | None = None

    def _checked_refresh_rate(self, refresh_rate: int) -> int:
        if isinstance(refresh_rate, bool) or not isinstance(refresh_rate, int) or refresh_rate < 0:
            raise ValueError(f"{type(self).__name__}(refresh_rate={refresh_rate!r}); give an int >= 0.")
        return refresh_rate

    @property
    def trainer(self) -> Trainer:
        """The Trainer this bar shows (set in ``setup``)."""
        if self._trainer is None:
            raise TypeError(f"The `{type(self).__name__}._trainer` reference has not been set yet.")
        return self._trainer

    @property
    def total_train_batches(self) -> int | float:
        """The training batches of an epoch (``inf`` for a loader without a length)."""
        return self.trainer.num_training_batches

    @property
    def total_val_batches(self) -> int | float:
        """The validation batches of the current epoch, over all loaders (0 in an epoch that does not validate)."""
        return total_val_batches(self.trainer)

    def get_metrics(self, trainer: Trainer, pl_module: TrainModule) -> dict[str, Any]:
        """``v_num`` (the logger's version) and the ``prog_bar`` metrics; override to change what is shown.

        Example:
            ```python
            trainer.progress_bar_callback.get_metrics(trainer, model)["train_loss"]
            ```
        """
        return shown_metrics(trainer)
