"""``Progress``: where a run stands, owned by the loops and read by callbacks (``trainer.progress``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fabricx.train.loops.fit import FitLoop


@dataclass
class Progress:
    """The loop counters of a `fabricx.train.Trainer` (one object, saved in every checkpoint).

    The fit loop writes these fields; callbacks and modules read them (``trainer.progress.stepped``).

    ``global_step`` and ``current_epoch`` are read from the fit loop's counters (`count_from`), as Lightning
    derives them: one fact, checkpointed under ``loops``.

    Attributes:
        batches_that_stepped: Training batches that ended an accumulation window; the step loggers see.
        batch_idx: Index of the current training batch within its epoch (``-1`` before the first).
        total_batch_idx: Index of the current training batch counted over all epochs (``-1`` before the first).
        is_last_batch: Whether the current training batch is the epoch's last.
        stepped: Whether the current training batch ended with an optimizer step.
        accumulating: The current training batch is inside a gradient-accumulation window.
        epoch_done: The current epoch's batches are all done (its end-of-epoch hooks may still run).
        resumed_mid_epoch: The run was restored from a checkpoint written inside an epoch.
        val_pending: Validation was due right after the batch at which the restored checkpoint was written.
        validated_at_epoch_end: The end-of-epoch validation of the current epoch ran.
        batch_finished: Everything after ``on_train_batch_end`` of the current batch is done.
        epoch_cut: The fit stopped inside this epoch (``max_steps``/``max_time``); its epoch-end hooks
            ran, but a run resumed from a checkpoint written then continues the epoch.

    Example:
        ```python
        class EveryHundred(Callback):
            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                if trainer.progress.stepped and trainer.progress.global_step % 100 == 0:
                    trainer.print(trainer.callback_metrics)
        ```
    """

    batches_that_stepped: int = 0
    batch_idx: int = -1
    total_batch_idx: int = -1
    is_last_batch: bool = False
    stepped: bool = False
    accumulating: bool = False
    epoch_done: bool = False
    resumed_mid_epoch: bool = False
    val_pending: bool = False
    validated_at_epoch_end: bool = False
    batch_finished: bool = True
    epoch_cut: bool = False

    def __post_init__(self) -> None:
        self._fit_loop: FitLoop | None = None  # not a field: neither saved nor reset

    def count_from(self, fit_loop: FitLoop) -> None:
        """Read `global_step` and `current_epoch` from `fit_loop`'s counters (the Trainer binds its own)."""
        self._fit_loop = fit_loop

    @property
    def global_step(self) -> int:
        """Optimizer steps taken (with several optimizers under manual optimization, each ``step()`` counts)."""
        fit_loop = self._fit_loop
        return fit_loop.epoch_loop.global_step if fit_loop is not None else 0

    @property
    def current_epoch(self) -> int:
        """The epoch being trained, from 0 (the epochs completed so far)."""
        fit_loop = self._fit_loop
        return fit_loop.current_epoch if fit_loop is not None else 0

    def reset(self) -> None:
        """Back to the start of a new run."""
        for field in fields(self):
            setattr(self, field.name, field.default)

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for field in fields(self):
            if field.name in state_dict:
                setattr(self, field.name, type(field.default)(state_dict[field.name]))


__all__ = ["Progress"]
