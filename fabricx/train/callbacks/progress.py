"""``ProgressBar``: what every progress bar shares (Lightning's base class of the same name)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fabricx.train.callbacks.base import Callback
from fabricx.train.callbacks.trainer_state import shown_metrics, total_val_batches

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer


class ProgressBar(Callback):
    """The base class of progress bars, as Lightning's: the Trainer it shows (set in ``setup``, where ranks other
    than 0 call `disable`), the stages' descriptions, batch totals (of the epoch, of the current evaluation
    loader), the metrics shown, and `print` that does not break the bar. A subclass provides `disable`/`enable`.

    Example:
        ```python
        class PrintBar(ProgressBar):
            def disable(self):
                self.enabled = False

            def on_train_epoch_end(self, trainer, pl_module):
                print(trainer.current_epoch, self.get_metrics(trainer, pl_module))
        ```
    """

    # Class defaults: a subclass that does not call ``super().__init__()`` still works.
    _trainer: Trainer | None = None
    _current_eval_dataloader_idx: int | None = None

    def __init__(self) -> None:
        self._trainer = None
        self._current_eval_dataloader_idx = None

    def __getstate__(self) -> dict[str, Any]:
        # The Trainer holds its processes and does not pickle; a copy sent elsewhere is set up again there.
        return {**vars(self), "_trainer": None}

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
    def sanity_check_description(self) -> str:
        return "Sanity Checking"

    @property
    def train_description(self) -> str:
        return "Training"

    @property
    def validation_description(self) -> str:
        return "Validation"

    @property
    def test_description(self) -> str:
        return "Testing"

    @property
    def predict_description(self) -> str:
        return "Predicting"

    @property
    def total_train_batches(self) -> int | float:
        """The training batches of an epoch (``inf`` for a loader without a length); with ``max_epochs=-1`` and
        ``max_steps``, no more than the steps left."""
        trainer = self.trainer
        if trainer.max_epochs == -1 and trainer.max_steps is not None and trainer.max_steps > 0:
            return min(trainer.num_training_batches, trainer.max_steps - trainer.global_step)
        return trainer.num_training_batches

    @property
    def total_val_batches(self) -> int | float:
        """The validation batches of the current epoch, over all loaders (0 in an epoch that does not validate)."""
        return total_val_batches(self.trainer)

    @property
    def total_val_batches_current_dataloader(self) -> int | float:
        """The batches of the validation (or sanity-check) loader being run."""
        trainer = self.trainer
        batches = trainer.num_sanity_val_batches if trainer.sanity_checking else trainer.num_val_batches
        return self._of_current_loader(batches)

    @property
    def total_test_batches_current_dataloader(self) -> int | float:
        return self._of_current_loader(self.trainer.num_test_batches)

    @property
    def total_predict_batches_current_dataloader(self) -> int | float:
        return self._of_current_loader(self.trainer.num_predict_batches)

    def _of_current_loader(self, batches: Any) -> int | float:
        if not isinstance(batches, list):
            return batches
        if self._current_eval_dataloader_idx is None:
            raise RuntimeError("No evaluation loader is running: the batch totals per loader are read inside its loop.")
        return batches[self._current_eval_dataloader_idx]

    def has_dataloader_changed(self, dataloader_idx: int) -> bool:
        """Whether ``dataloader_idx`` is another loader than the last one seen (and remember it)."""
        previous, self._current_eval_dataloader_idx = self._current_eval_dataloader_idx, dataloader_idx
        return previous != dataloader_idx

    def reset_dataloader_idx_tracker(self) -> None:
        self._current_eval_dataloader_idx = None

    def disable(self) -> None:
        """Stop drawing (the Trainer calls it on ranks other than 0); a progress bar provides it."""
        raise NotImplementedError

    def enable(self) -> None:
        """Draw again; a progress bar provides it."""
        raise NotImplementedError

    def print(self, *args: Any, **kwargs: Any) -> None:
        """Print without breaking the bar."""
        print(*args, **kwargs)

    def setup(self, trainer: Trainer, pl_module: TrainModule, stage: str) -> None:
        self._trainer = trainer
        if not trainer.is_global_zero:
            self.disable()

    def get_metrics(self, trainer: Trainer, pl_module: TrainModule) -> dict[str, Any]:
        """``v_num`` (the logger's version) and the ``prog_bar`` metrics; override to change what is shown.

        Example:
            ```python
            trainer.progress_bar_callback.get_metrics(trainer, model)["train_loss"]
            ```
        """
        return shown_metrics(trainer)
