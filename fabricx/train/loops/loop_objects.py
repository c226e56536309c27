"""The counters of Lightning's loop objects below `trainer.fit_loop`, and `trainer.validate_loop`, `test_loop`,
`predict_loop`.

They own the loops' progress counters (`epoch_loop.batch_progress`, the optimizer and scheduler counts, the
validation loop's batches), which the fit loop (`fit.py`, `FitLoop`) and the evaluation passes
(`evaluation.py`) increment where Lightning's do, and which a checkpoint holds under `loops`.
`fit_loop.epoch_loop.val_loop.run()` is the validation that fit runs (replaceable, as in Lightning, e.g. by a
mock that counts its calls).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from fabricx.train.loops.progress_trackers import (
    BatchProgress,
    OptimizationProgress,
    ProcessedTracker,
    ProgressCounters,
    ReadyCompletedTracker,
    SchedulerProgress,
    ready_completed_progress,
)
from fabricx.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from fabricx.train.trainer import Trainer


def processed_counts(progress: ProgressCounters) -> ProcessedTracker:
    # Epoch and batch progress count all four stages (only scheduler and optimizer counts have fewer).
    return cast(ProcessedTracker, progress.total)


class DataSource:
    """Whether a loop has data to run on, read as Lightning's ``_DataConnectorSource.is_defined()``."""

    def __init__(self, is_defined: Callable[[], bool] | None) -> None:
        self._is_defined = is_defined  # a bound method, not a lambda: the Trainer is pickled for ddp_spawn

    def is_defined(self) -> bool:
        return self._is_defined is not None and bool(self._is_defined())


class EvaluationLoop:
    """A validation, test or prediction loop's counters; `run()` runs it (the validation inside fit)."""

    def __init__(self, runner: Callable[[], Any] | None = None, has_data: Callable[[], bool] | None = None) -> None:
        self.batch_progress = BatchProgress()
        self.restarting = False
        self._runner = runner
        # Lightning's name: libraries read it (gluonts' `configure_optimizers` monitors "val_loss" only when
        # `trainer.fit_loop.epoch_loop.val_loop._data_source.is_defined()`).
        self._data_source = DataSource(has_data)

    def run(self) -> Any:
        """Run the loop (inside fit: one validation pass)."""
        if self._runner is None:
            raise RuntimeError("This loop runs only inside Trainer.fit/validate/test/predict.")
        return self._runner()

    def reset_progress(self) -> None:
        """All counts back to zero (after the sanity check, as in Lightning)."""
        self.batch_progress.reset()

    def forget_interrupted_pass(self) -> bool:
        """Whether this loop was restored from a checkpoint written while one of its batches ran (begun, not
        processed: an exception inside the step, saved by `OnExceptionCheckpoint`); if so, it is made ready to run
        that pass again from its start: its completed batches are counted by the new pass, so they leave the
        totals; the batch that was interrupted stays counted as begun (as in Lightning, whose totals then read the
        same)."""
        total = processed_counts(self.batch_progress)
        interrupted = (
            self.restarting
            and total.started == total.ready
            and total.processed == total.started - 1
            and total.completed == total.processed
        )
        if interrupted:
            done = self.batch_progress.current.completed
            self.batch_progress.total.increment_by(-done)
            self.batch_progress.current.reset()
        return interrupted

    def state_dict(self) -> dict[str, Any]:
        return {"state_dict": {}, "batch_progress": self.batch_progress.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "batch_progress" in state_dict:
            self.batch_progress.load_state_dict(state_dict["batch_progress"])
        self.restarting = True


class PredictionLoop(EvaluationLoop):
    """`trainer.predict_loop`: the prediction counters and the last `predict`'s outputs (`predictions`).

    Example:
        ```python
        trainer.predict(model, loader)
        trainer.predict_loop.predictions  # the same list predict returned
        ```
    """

    def __init__(self) -> None:
        super().__init__()
        self.return_predictions = True
        self._predictions: list[list[Any]] = []  # loaders x batches
        # Read by `BasePredictionWriter`: the sample indices of the current batch, and of every batch per loader.
        self.current_batch_indices: list[int] = []
        self.epoch_batch_indices: list[list[list[int]]] = []

    @property
    def predictions(self) -> list[Any]:
        """The last `predict`'s outputs (a list per loader when there were several; empty when not kept)."""
        if not self._predictions:
            return []
        return self._predictions[0] if len(self._predictions) == 1 else self._predictions

    def keep(self, predictions: list[list[Any]], *, for_writers: bool = False) -> None:
        """Store one `predict`'s outputs, one list per loader (nothing when `return_predictions` is off, unless
        an epoch-end prediction writer is about to read them)."""
        self._predictions = predictions if self.return_predictions or for_writers else []


class AutomaticOptimization:
    """The automatic optimization's counters: `optim_progress` (optimizer steps and zero_grad calls)."""

    def __init__(self) -> None:
        self.optim_progress = OptimizationProgress()
        self.restarting = False


class ManualOptimization:
    """The manual optimization's counters: `optim_step_progress` (each `optimizer.step()`)."""

    def __init__(self) -> None:
        self.optim_step_progress = ready_completed_progress()
        self.restarting = False


class TrainingEpochLoop:
    """One training epoch's counters: batches, scheduler steps, optimizer steps, the validation inside it."""

    def __init__(self, trainer: Trainer, val_runner: Callable[[], Any], has_val_data: Callable[[], bool]) -> None:
        self._trainer = trainer
        self.batch_progress = BatchProgress()
        self.scheduler_progress = SchedulerProgress()
        self.automatic_optimization = AutomaticOptimization()
        self.manual_optimization = ManualOptimization()
        self.val_loop = EvaluationLoop(val_runner, has_data=has_val_data)
        self.restarting = False

    @property
    def min_steps(self) -> int | None:
        return self._trainer.min_steps

    @property
    def max_steps(self) -> int:
        return self._trainer.max_steps

    @max_steps.setter
    def max_steps(self, max_steps: int) -> None:
        self._trainer.max_steps = max_steps

    @property
    def global_step(self) -> int:
        """Optimizer steps taken, as Lightning counts them: the automatic optimization's completed steps, or
        under manual optimization every completed ``optimizer.step()``."""
        return self.step_counter(self._trainer.run_context.automatic).completed

    def step_counter(self, automatic: bool) -> ReadyCompletedTracker:
        """The tracker whose ``completed`` is `global_step` (what the fit loop reads after every batch)."""
        if automatic:
            return self.automatic_optimization.optim_progress.optimizer.step.total
        return self.manual_optimization.optim_step_progress.total

    @property
    def batch_idx(self) -> int:
        """The index of the current batch within its epoch (`ready` counts it as soon as it is fetched)."""
        return self.batch_progress.current.ready - 1

    @property
    def total_batch_idx(self) -> int:
        """The index of the current batch over all epochs."""
        return self.batch_progress.total.ready - 1

    def restarted_on_train_batch_end(self) -> bool:
        """Restored from a checkpoint written in `on_train_batch_end` (the batch processed, not completed)."""
        total = processed_counts(self.batch_progress)
        return (
            self.restarting
            and total.started == total.ready
            and total.processed == total.started
            and total.completed == total.processed - 1
        )

    def restarted_inside_a_step(self) -> bool:
        """Restored from a checkpoint written after a batch was fetched and before its step was done (an exception
        in ``on_train_batch_start`` or the training step, saved by `OnExceptionCheckpoint`)."""
        total = processed_counts(self.batch_progress)
        return self.restarting and total.processed == total.ready - 1 and total.completed == total.processed

    def skip_interrupted_batch(self) -> None:
        """Count the batch `restarted_inside_a_step` names as done, and say so: the loader has handed it out, its
        step is not run again (running it again exactly would need the random states of every batch's start,
        taken at every batch: about 0.1 ms each)."""
        progress = self._trainer.progress
        rank_zero_warn(
            f"The checkpoint was written inside the training step of batch {progress.batch_idx} of epoch "
            f"{self._trainer.current_epoch} (an exception raised there). That batch is not trained again: the fit "
            "continues with the next batch. Resume from a checkpoint written between batches (ModelCheckpoint, or "
            "an exception raised in on_train_batch_end) to continue exactly."
        )
        progress.batch_finished = True
        counts = self.batch_progress
        total = processed_counts(counts)
        if total.started < total.ready:  # raised in on_train_batch_start, before the step began
            counts.increment_started()
        counts.increment_processed()
        counts.increment_completed()

    def reset(self) -> None:
        """At an epoch's start: this epoch's counts from zero; after a restart, begun counts back to completed."""
        optim = self.automatic_optimization.optim_progress
        if self.restarted_on_train_batch_end():
            # The batch whose on_train_batch_end wrote the checkpoint is done.
            self.batch_progress.increment_completed()
            if self.batch_progress.current.completed >= self._trainer.num_training_batches:
                self.batch_progress.reset_on_run()
                self.scheduler_progress.reset_on_run()
                optim.reset_on_run()
                self.val_loop.batch_progress.total.reset()
        if self.restarting:
            self.batch_progress.reset_on_restart()
            self.scheduler_progress.reset_on_restart()
            optim.reset_on_restart()
            return
        self.batch_progress.reset_on_run()
        self.scheduler_progress.reset_on_run()
        optim.reset_on_run()
        self.val_loop.batch_progress.total.reset()

    def state_dict(self) -> dict[str, Any]:
        manual = self.manual_optimization.optim_step_progress
        return {
            "epoch_loop.state_dict": {"_batches_that_stepped": self._trainer.progress.batches_that_stepped},
            "epoch_loop.batch_progress": self.batch_progress.state_dict(),
            "epoch_loop.scheduler_progress": self.scheduler_progress.state_dict(),
            "epoch_loop.manual_optimization.state_dict": {},
            "epoch_loop.manual_optimization.optim_step_progress": manual.state_dict(),
            "epoch_loop.automatic_optimization.state_dict": {},
            "epoch_loop.automatic_optimization.optim_progress": self.automatic_optimization.optim_progress.state_dict(),
            "epoch_loop.val_loop.state_dict": {},
            "epoch_loop.val_loop.batch_progress": self.val_loop.batch_progress.state_dict(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        parts = {
            "epoch_loop.batch_progress": self.batch_progress,
            "epoch_loop.scheduler_progress": self.scheduler_progress,
            "epoch_loop.manual_optimization.optim_step_progress": self.manual_optimization.optim_step_progress,
            "epoch_loop.automatic_optimization.optim_progress": self.automatic_optimization.optim_progress,
            "epoch_loop.val_loop.batch_progress": self.val_loop.batch_progress,
        }
        for key, part in parts.items():
            if key in state_dict:
                part.load_state_dict(state_dict[key])
        self.restarting = True
        self.val_loop.restarting = True


__all__ = [
    "AutomaticOptimization",
    "EvaluationLoop",
    "ManualOptimization",
    "PredictionLoop",
    "TrainingEpochLoop",
    "processed_counts",
]
