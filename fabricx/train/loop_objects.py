"""`trainer.fit_loop`, `trainer.validate_loop`, ...: Lightning's loop objects as the Trainer exposes them.

They own the loops' progress counters (`epoch_progress`, `epoch_loop.batch_progress`, the optimizer and
scheduler counts, the validation loop's batches), which the fit and evaluation loops increment where
Lightning's do, and which a checkpoint holds under `loops`. The loops themselves run in `fit_loop.py` and
`eval_loop.py`; `fit_loop.epoch_loop.val_loop.run()` is the validation that fit runs (replaceable, as in
Lightning, e.g. by a mock that counts its calls).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from fabricx.train.progress_trackers import (
    BatchProgress,
    OptimizationProgress,
    ProcessedTracker,
    Progress,
    SchedulerProgress,
    ready_completed_progress,
)

if TYPE_CHECKING:
    from fabricx.train.trainer import Trainer


def _processed(progress: Progress) -> ProcessedTracker:
    # Epoch and batch progress count all four stages (only scheduler and optimizer counts have fewer).
    return cast(ProcessedTracker, progress.total)


class EvaluationLoop:
    """A validation, test or prediction loop's counters; `run()` runs it (the validation inside fit)."""

    def __init__(self, runner: Callable[[], Any] | None = None) -> None:
        self.batch_progress = BatchProgress()
        self.restarting = False
        self._runner = runner

    def run(self) -> Any:
        """Run the loop (inside fit: one validation pass)."""
        if self._runner is None:
            raise RuntimeError("This loop runs only inside Trainer.fit/validate/test/predict.")
        return self._runner()

    def reset_progress(self) -> None:
        """All counts back to zero (after the sanity check, as in Lightning)."""
        self.batch_progress.reset()

    def state_dict(self) -> dict[str, Any]:
        return {"state_dict": {}, "batch_progress": self.batch_progress.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "batch_progress" in state_dict:
            self.batch_progress.load_state_dict(state_dict["batch_progress"])
        self.restarting = True


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

    def __init__(self, trainer: Trainer, val_runner: Callable[[], Any]) -> None:
        self._trainer = trainer
        self.batch_progress = BatchProgress()
        self.scheduler_progress = SchedulerProgress()
        self.automatic_optimization = AutomaticOptimization()
        self.manual_optimization = ManualOptimization()
        self.val_loop = EvaluationLoop(val_runner)
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
        return self._trainer.global_step

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
        total = _processed(self.batch_progress)
        return (
            self.restarting
            and total.started == total.ready
            and total.processed == total.started
            and total.completed == total.processed - 1
        )

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


class FitLoop:
    """The fit loop's counters (`epoch_progress`) and its epoch loop (`epoch_loop`), as Lightning's `fit_loop`.

    Example:
        ```python
        trainer.fit(model)
        trainer.fit_loop.epoch_progress.current.completed  # epochs done
        trainer.fit_loop.epoch_loop.automatic_optimization.optim_progress.optimizer_steps
        ```
    """

    def __init__(self, trainer: Trainer, val_runner: Callable[[], Any]) -> None:
        self._trainer = trainer
        self.epoch_progress = Progress()
        self.epoch_loop = TrainingEpochLoop(trainer, val_runner)
        self._restarting = False
        self._loaded = False  # restored from a checkpoint, not reset since

    @property
    def max_epochs(self) -> int | None:
        return self._trainer.max_epochs

    @property
    def min_epochs(self) -> int | None:
        return self._trainer.min_epochs

    @property
    def max_steps(self) -> int:
        return self._trainer.max_steps

    @property
    def min_steps(self) -> int | None:
        return self._trainer.min_steps

    @property
    def batch_idx(self) -> int:
        return self.epoch_loop.batch_idx

    @property
    def total_batch_idx(self) -> int:
        return self.epoch_loop.total_batch_idx

    @property
    def done(self) -> bool:
        """Whether fit has nothing left to run (`max_steps`/`max_epochs` reached, or stopped)."""
        trainer = self._trainer
        return trainer._fit_is_done() or (trainer.should_stop and trainer._can_stop_early())

    @property
    def restarting(self) -> bool:
        return self._restarting

    @restarting.setter
    def restarting(self, restarting: bool) -> None:
        current = cast(ProcessedTracker, self.epoch_progress.current)
        # As Lightning: after a finished epoch there is nothing to restart (unless training counts steps).
        unfinished = current.ready != current.processed or current.started != current.processed
        self._restarting = restarting and (unfinished or self._trainer.max_steps >= 0)
        loop = self.epoch_loop
        loop.restarting = loop.val_loop.restarting = self._restarting
        loop.automatic_optimization.restarting = loop.manual_optimization.restarting = self._restarting

    def reset(self) -> None:
        """Before an epoch, after a restore (as Lightning's restart stages): an epoch restored at its start is
        counted again; one restored at its end (processed, not completed) is completed."""
        total = _processed(self.epoch_progress)
        loaded, self._loaded = self._loaded, False
        if not (self._restarting or loaded):
            return
        begun = total.processed == total.started and total.completed == total.processed
        mid_epoch = self._restarting and total.started == total.ready and total.processed == total.started - 1
        mid_epoch = mid_epoch and total.completed == total.processed
        if self._restarting and begun and total.started == total.ready - 1:
            self.epoch_progress.reset_on_restart()
        elif total.started == total.ready == total.processed and total.completed == total.processed - 1:
            self.epoch_progress.increment_completed()
        loop = self.epoch_loop
        if loop.restarted_on_train_batch_end() and loop.batch_progress.is_last_batch:
            # Written in on_train_batch_end of the epoch's last batch: that epoch is over.
            if mid_epoch:
                self.epoch_progress.increment_processed()
                self.epoch_progress.increment_completed()
            elif not loop.val_loop.batch_progress.is_last_batch:
                self.epoch_progress.increment_completed()

    def reset_progress(self) -> None:
        """Every counter back to zero (a new fit of this trainer)."""
        loop = self.epoch_loop
        for counts in (self.epoch_progress, loop.batch_progress, loop.scheduler_progress,
                       loop.automatic_optimization.optim_progress, loop.manual_optimization.optim_step_progress,
                       loop.val_loop.batch_progress):
            counts.reset()
        self._loaded = False
        self.restarting = False

    def state_dict(self) -> dict[str, Any]:
        from fabricx.train.loaders import lightning_loader_states

        loader_states = lightning_loader_states(self._trainer._train_loader)
        return {
            "state_dict": {"combined_loader": loader_states} if loader_states else {},
            "epoch_progress": self.epoch_progress.state_dict(),
            **self.epoch_loop.state_dict(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "epoch_progress" in state_dict:
            self.epoch_progress.load_state_dict(state_dict["epoch_progress"])
        self.epoch_loop.load_state_dict(state_dict)
        self.restarting = True
        self._loaded = True


__all__ = ["AutomaticOptimization", "EvaluationLoop", "FitLoop", "ManualOptimization", "TrainingEpochLoop"]
