"""The training epochs of ``Trainer.fit``, in Lightning's order but for one batch hook: the module's
``on_train_batch_end`` runs before the monitoring callbacks' (Lightning runs it after every callback's), so that
a checkpoint saved at a batch's end holds what the module's hook did (the migration guide's row).

One batch:

```python
[on_before_batch_transfer -> transfer_batch_to_device -> on_after_batch_transfer]  (when overridden)
on_train_batch_start
automatic optimization, at a window boundary:
    optimizer_step(epoch, batch_idx, optimizer, closure)   closure = training_step ->
        [first batch of a window: on_before_zero_grad -> optimizer_zero_grad] ->
        on_before_backward -> backward -> on_after_backward;
    then on_before_optimizer_step -> configure_gradient_clipping -> the step
inside a window: the closure alone (no gradient sync)
manual optimization: training_step (the module steps its optimizers)
step-interval schedulers (and, at the epoch's last batch, epoch-interval ones)
on_train_batch_end (callbacks, module, then monitoring callbacks such as ModelCheckpoint)
step metrics to the loggers (every log_every_n_steps stepped batches)
[when due: on_validation_model_zero_grad -> validation]
ReduceLROnPlateau step schedulers; the stepped-batch counter moves on
```

A checkpoint written in ``on_train_batch_end`` records whether validation was still due; a run
resumed from it finishes that batch (validation included) before the next one.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

from fabricx.train.data.loaders import LoaderGroup
from fabricx.train.loops.dataloader_iter import DataLoaderIter, takes_dataloader_iter
from fabricx.train.loops.evaluation import run_evaluation
from fabricx.train.loops.fit_data import FitData
from fabricx.train.loops.loop_objects import TrainingEpochLoop, processed_counts
from fabricx.train.loops.progress_trackers import ProcessedTracker, ProgressCounters
from fabricx.train.states import RunningStage
from fabricx.utilities.rank_zero import rank_zero_log_info, rank_zero_warn
from fabricx.utilities.rng import capture_rng_states, restore_rng_states
from fabricx.utilities.warnings import PossibleUserWarning

if TYPE_CHECKING:
    from fabricx.train.loops.training_steps import TrainingSteps
    from fabricx.train.run_context import RunContext
    from fabricx.train.trainer import Trainer

log = logging.getLogger(__name__)


class FitLoop:
    """Lightning's `trainer.fit_loop`: runs fit's epochs and owns their counters (`epoch_progress`, `epoch_loop`),
    the fit's data (`data`) and its stop conditions (`done`).

    Example:
        ```python
        trainer.fit(model)
        trainer.fit_loop.epoch_progress.current.completed  # epochs done
        automatic = trainer.fit_loop.epoch_loop.automatic_optimization
        automatic.optim_progress.optimizer_steps
        ```
    """

    def __init__(self, trainer: Trainer, run: RunContext, steps: TrainingSteps) -> None:
        self._validation_start_rng: dict[str, Any] | None = None
        self._trainer = trainer
        self._run = run
        self._steps = steps
        self.data = FitData(trainer, run)
        self.epoch_progress = ProgressCounters()
        self.epoch_loop = TrainingEpochLoop(trainer, self.run_validation, self.data.has_val_source)
        self._restarting = False
        self._loaded = False  # restored from a checkpoint, not reset since
        # The restored counts were adjusted by `reset` (it may run again before the next epoch: not twice).
        self._restart_counted = False
        # Restored in an epoch's end hooks after its data was all read: the resumed epoch reads no batch.
        self._resumed_after_last_batch = False
        self._started_at: float | None = None  # read only for max_time
        # Notes and warnings given once per trainer, as Lightning's warning cache gives them.
        self._said: set[str] = set()

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
    def current_epoch(self) -> int:
        """The epoch being trained, from 0: the epochs completed (``epoch_progress.current.completed``)."""
        return self.epoch_progress.current.completed

    @property
    def batch_idx(self) -> int:
        return self.epoch_loop.batch_idx

    @property
    def total_batch_idx(self) -> int:
        return self.epoch_loop.total_batch_idx

    @property
    def done(self) -> bool:
        """Whether fit has nothing left to run (`max_steps`/`max_epochs` reached, or stopped)."""
        return self.fit_is_done() or (self._trainer.should_stop and self.can_stop_early())

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
        total = processed_counts(self.epoch_progress)
        loaded, self._loaded = self._loaded, False
        if not (self._restarting or loaded) or self._restart_counted:
            return
        self._restart_counted = True
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
        for counts in (
            self.epoch_progress,
            loop.batch_progress,
            loop.scheduler_progress,
            loop.automatic_optimization.optim_progress,
            loop.manual_optimization.optim_step_progress,
            loop.val_loop.batch_progress,
        ):
            counts.reset()
        self._loaded = False
        self._restart_counted = False
        self.restarting = False

    def count_from_checkpoint(self, global_step: int, epoch: int, epoch_done: bool) -> None:
        """The counters of a checkpoint without Lightning's ``loops`` entry (an earlier fabricx folder, a file
        written by another tool): ``epoch`` epochs completed, the next one processed when ``epoch_done``, and
        ``global_step`` optimizer steps."""
        self.reset_progress()
        epochs = self.epoch_progress
        epochs.increment_by(epoch)
        if epoch_done:
            epochs.increment_ready()
            epochs.increment_started()
            epochs.increment_processed()
        loop = self.epoch_loop
        if self._run.automatic:
            loop.automatic_optimization.optim_progress.optimizer.step.increment_by(global_step)
        else:
            loop.manual_optimization.optim_step_progress.increment_by(global_step)
        self._loaded = True

    def continue_after_epoch(self) -> None:
        """Restored at the end of an epoch: the restored counts adjusted as `reset` adjusts them (once), so that
        `current_epoch` is the next epoch from now on (Lightning's reset before ``on_train_start``); an epoch the
        counts leave unfinished (a Lightning file written in the last batch's validation) is finished here."""
        epoch = self.current_epoch
        self.reset()
        if self.current_epoch == epoch:
            for tracker in (self.epoch_progress.total, self.epoch_progress.current):
                done = tracker.completed + 1
                for stage in ("ready", "started", "processed", "completed"):
                    setattr(tracker, stage, max(getattr(tracker, stage), done))

    def continue_cut_epoch(self) -> None:
        """Restored inside an epoch that ``max_steps``/``max_time`` cut, from a checkpoint written after its end was
        counted (``ModelCheckpoint(save_last=True)`` at train end): the counts are taken back to those of its end
        hooks, so the rest of its batches runs as that epoch, and the next epoch follows with all of its own."""
        for tracker in (self.epoch_progress.total, self.epoch_progress.current):
            started = tracker.started  # type: ignore[attr-defined]
            if tracker.completed >= started > 0:
                tracker.completed = started - 1

    @property
    def in_epoch_end(self) -> bool:
        """After an epoch's last batch, before its `completed` count: in its end hooks, or in the validation after a
        loader without a length ran out (where a checkpoint that `continue_in_epoch_end` resumes was written)."""
        total = self.epoch_progress.total
        return total.started > total.completed  # type: ignore[attr-defined]

    def continue_in_epoch_end(self) -> None:
        """Restored from a checkpoint written after an epoch's last batch (`in_epoch_end`; an exception there,
        saved by `OnExceptionCheckpoint`): the loader's pass is over, so the resumed epoch reads no batch; what had
        not all run (the validation of a loader without a length, the end hooks) runs again, then the next epoch."""
        self._resumed_after_last_batch = True

    def take_counters(self, state_dict: dict[str, Any]) -> None:
        """The counters of a fit run in another process (``ddp_spawn``'s rank 0), without restarting from them."""
        self.load_state_dict(state_dict)
        self._loaded = False
        self.restarting = False

    def state_dict(self) -> dict[str, Any]:
        from fabricx.train.data.loaders import lightning_loader_states

        loader_states = lightning_loader_states(self.data.train_loader)
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
        self._restart_counted = False

    # -- running fit -------------------------------------------------------------------------------------------
    def start_clock(self) -> None:
        """``max_time`` counts from here (the clock is read only when it is set: a time-based
        ``val_check_interval`` counts the clock's reads, as Lightning's does)."""
        self._started_at = time.monotonic() if self._trainer.max_time is not None else None

    def run(self) -> None:
        """Train epochs until ``max_epochs``/``max_steps``/``max_time`` or ``trainer.should_stop``."""
        trainer, run = self._trainer, self._run
        progress = trainer.progress
        if progress.resumed_mid_epoch and not progress.batch_finished and self.epoch_loop.restarted_inside_a_step():
            self.epoch_loop.skip_interrupted_batch()  # written while its step ran: the step is not run again
        if progress.resumed_mid_epoch and progress.batch_idx >= 0 and not progress.batch_finished:
            # Restored from a checkpoint written in on_train_batch_end: finish that batch first, logging its
            # restored step values (inside the batch loop) as the interrupted run would have. Written inside
            # the validation after it: that validation runs again, from its start (its metrics whole again).
            interrupted = self.epoch_loop.val_loop.forget_interrupted_pass()
            run.results = run.train_results
            run.logger_connector.first_loop_iter = False
            self._finish_batch(
                progress.val_pending or interrupted, accumulating=progress.accumulating, logged=interrupted
            )
        while not self.fit_is_done():
            if trainer.should_stop and self.can_stop_early():
                if progress.resumed_mid_epoch:  # asked inside it (EarlyStopping's restored state): it ends there
                    self._finish_epoch()
                break  # asked to stop before this epoch began (e.g. a Timer with no time left), as in Lightning
            self.data.maybe_reload_train_loader()
            self._run_epoch()
            self._finish_epoch()
            if trainer.should_stop and self.can_stop_early():
                break

    def _run_epoch(self) -> None:
        """One pass over the training data (or the rest of it, after a mid-epoch resume): `advance` per batch."""
        started = self._start_epoch()  # None: resumed after the epoch's last batch
        if started is not None:
            advance = self._batch_advance(*started)
            while advance():
                pass
        progress, data = self._trainer.progress, self.data
        if (
            not progress.validated_at_epoch_end
            and math.isinf(data.num_training_batches)
            and math.isinf(data.val_check_batch)
            and self._trainer.val_check_seconds is None
            and data.val_enabled
            and data.validates_this_epoch()
        ):
            # A loader without a length: the end of the epoch is only known now. Resumed from a checkpoint written
            # inside this validation, it runs again from its start (its metrics whole again).
            self.epoch_loop.val_loop.forget_interrupted_pass()
            self.epoch_loop.val_loop.run()
            progress.validated_at_epoch_end = True

    def _start_epoch(self) -> tuple[Any, Iterator[Any], DataLoaderIter | None, float, bool] | None:
        """The epoch's start hooks and counters (skipped when resuming inside it); the loader, its iterator, the
        ``dataloader_iter`` handed to the step, the epoch's batch limit and whether it cuts the loader short, or
        ``None`` when a resumed epoch has no batch left."""
        trainer, run = self._trainer, self._run
        loader = self.data.train_loader
        progress = trainer.progress
        run.results = results = run.train_results
        results.in_step = True
        results.hook = "training_step"
        resumed = progress.resumed_mid_epoch
        if resumed:
            progress.resumed_mid_epoch = False
        else:
            loader.set_epoch(trainer.current_epoch)
            progress.batch_idx = -1
            progress.validated_at_epoch_end = False
            self.reset()
            self.epoch_progress.increment_ready()
            run.hooks.call("on_train_epoch_start")
            self.epoch_progress.increment_started()
        self.epoch_loop.reset()
        self.restarting = False  # the restored counts are set; from here on they count this run
        if isinstance(loader, LoaderGroup) and loader.mode == "sequential":
            raise ValueError(
                "`FitLoop` does not support the `CombinedLoader(mode='sequential')` mode. The available modes are: "
                "['min_size', 'max_size_cycle', 'max_size']. Give the training iterables in one of those modes."
            )
        limit = self.data.num_training_batches
        limited = _is_limited(loader, limit)
        after_last_batch, self._resumed_after_last_batch = self._resumed_after_last_batch, False
        if resumed and (after_last_batch or (limited and loader.batches_consumed >= limit)):
            return None
        iterator = iter(loader)
        return loader, iterator, self._dataloader_iter(iterator, loader, limit), limit, limited

    def _batch_advance(
        self, loader: Any, iterator: Iterator[Any], fetcher: DataLoaderIter | None, limit: float, limited: bool
    ) -> Callable[[], bool]:
        """The epoch's per-batch step, Lightning's ``advance()``: runs one batch, answers whether the epoch goes on.

        Everything it touches is looked up here, once per epoch: the per-batch path reads its closure's cells.
        """
        trainer, run, steps = self._trainer, self._run, self._steps
        fabric = run.fabric
        hooks = run.hooks
        results = run.train_results
        progress = trainer.progress
        epoch_loop = self.epoch_loop
        counts = epoch_loop.batch_progress
        # The last window of a limited epoch ends at the limit, not at the loader's end.
        epoch_length = int(limit) if limited else None
        if fetcher is not None and not math.isinf(limit):
            # A dataloader_iter step fetches inside its window: when a window begins, the loader is a batch behind.
            epoch_length = int(limit) - 1
        batch_start_callbacks = hooks.callback_hooks("on_train_batch_start")
        batch_start_module = hooks.module_hook("on_train_batch_start")
        batch_end_callbacks = hooks.callback_hooks("on_train_batch_end", monitoring=False)
        batch_end_module = hooks.module_hook("on_train_batch_end")
        batch_end_monitoring = hooks.callback_hooks("on_train_batch_end", monitoring=True)
        module = run.module
        automatic = run.automatic
        accumulate = fabric.grad_accum_steps > 1
        model = run.model
        assert model is not None, "the fit loop runs on a set-up module"
        process = run.batch_processor
        step_schedulers = bool(steps.step_schedulers) and automatic
        epoch_schedulers = bool(steps.epoch_schedulers) and automatic
        automatic_step = steps.automatic_step
        manual_step = steps.manual_step
        step_lr_schedulers = steps.step_lr_schedulers
        connector = run.logger_connector
        data = self.data
        step_counter = epoch_loop.step_counter(automatic)  # `.completed` is trainer.global_step, read per batch

        def advance() -> bool:
            if limited and loader.batches_consumed >= limit:
                return False
            if fetcher is None:
                try:
                    batch = next(iterator)
                except StopIteration:
                    return False
                batch_idx = position = loader.batches_consumed - 1
                if process is not None:
                    batch = process(batch, 0)
            elif fetcher.done:
                return False
            else:
                # training_step fetches its batches: the hooks before it see the last one fetched; the epoch's
                # batch index counts steps (as Lightning's), and its end is known once the data is used up.
                batch, batch_idx, position = fetcher.batch, fetcher.batch_idx, counts.current.ready
            progress.batch_idx = position
            progress.total_batch_idx += 1
            progress.batch_finished = False
            progress.is_last_batch = fetcher is None and position + 1 >= limit
            counts.is_last_batch = progress.is_last_batch
            counts.increment_ready()
            connector.on_batch_start(results, batch)
            if batch is None and fetcher is None:
                # As Lightning: a None batch runs no step and no batch-start hooks, but ends as a batch does.
                self._warn_once("train_dataloader yielded None. If this was on purpose, ignore this warning...")
                outputs, stepped, accumulating = None, False, False
                progress.stepped = False
            else:
                for method in batch_start_callbacks:
                    method(trainer, module, batch, batch_idx)
                if batch_start_module is not None and batch_start_module(batch, batch_idx) == -1:
                    counts.is_last_batch = True
                    counts.increment_processed()
                    progress.is_last_batch = True  # as Lightning: the epoch ends at this batch, its schedulers step
                    if epoch_schedulers:
                        step_lr_schedulers("epoch", plateau=False)
                    return False
                counts.increment_started()
                step_input = batch if fetcher is None else fetcher
                steps_before = step_counter.completed
                try:
                    if automatic:
                        assert automatic_step is not None
                        if accumulate:
                            with fabric.accumulate(model, epoch_length=epoch_length):
                                stepped = fabric.sync_gradients
                                outputs = automatic_step(step_input, batch_idx, stepped)
                        else:
                            stepped = True
                            outputs = automatic_step(step_input, batch_idx, True)
                        progress.stepped = stepped
                    else:
                        assert manual_step is not None
                        outputs = manual_step(step_input, batch_idx)
                        stepped = True
                        progress.stepped = step_counter.completed != steps_before
                except StopIteration:
                    if fetcher is None:
                        raise
                    if automatic:
                        return False  # a dataloader_iter step found the data used up: the epoch ends, as in Lightning
                    outputs, stepped = None, True  # as Lightning, a manual step's batch then ends as any other
                    progress.stepped = step_counter.completed != steps_before
                if fetcher is not None:
                    # The hooks after the step see the batch it fetched.
                    batch, batch_idx = fetcher.batch, fetcher.batch_idx
                    progress.is_last_batch = counts.is_last_batch = fetcher.done
                accumulating = not stepped
            if stepped and step_schedulers:
                step_lr_schedulers("step", plateau=False)
            if epoch_schedulers and progress.is_last_batch:
                step_lr_schedulers("epoch", plateau=False)
            counts.increment_processed()
            progress.val_pending = data.val_enabled and self._validation_due(fetcher is not None and fetcher.done)
            progress.accumulating = accumulating
            for method in batch_end_callbacks:
                method(trainer, module, outputs, batch, batch_idx)
            if batch_end_module is not None:
                batch_end_module(outputs, batch, batch_idx)
            for method in batch_end_monitoring:
                method(trainer, module, outputs, batch, batch_idx)
            trainer.checkpoint_connector.run_after_hook_writes()
            connector.on_batch_end()
            counts.increment_completed()
            self._finish_batch(progress.val_pending, accumulating=accumulating)
            # The usual answer (no stop asked, steps left, no time limit) without a call.
            may_end = trainer.should_stop or self._started_at is not None
            if (may_end or 0 <= trainer.max_steps <= step_counter.completed) and self._should_end_epoch():
                # Stopped by max_steps/max_time before the data ended: the epoch is cut, not finished.
                progress.epoch_cut = not trainer.should_stop and batch_idx + 1 < limit
                return False
            return True

        return advance

    def _dataloader_iter(self, iterator: Iterator[Any], loader: Any, limit: float) -> DataLoaderIter | None:
        """What a ``training_step(self, dataloader_iter)`` is handed (``None`` for a step that takes a batch)."""
        module = self._run.module
        if not takes_dataloader_iter(getattr(module, "training_step", None), "training_step"):
            return None
        indexed = ((batch, loader.batches_consumed - 1, 0) for batch in iterator)
        return DataLoaderIter(indexed, limit, fetched=loader.batches_consumed)

    def _finish_batch(self, validate: bool, accumulating: bool = False, logged: bool = False) -> None:
        """What follows ``on_train_batch_end``: step metrics (unless `logged` already), validation when due,
        plateau schedulers, counters."""
        trainer, run = self._trainer, self._run
        progress = trainer.progress
        if not accumulating and not logged and trainer.loggers:
            every = trainer.log_every_n_steps
            due = every > 0 and (progress.batches_that_stepped + 1) % every == 0
            if due or trainer.should_stop or trainer.fast_dev_run:
                run.logger_connector.update_train_step_metrics(True)
        if validate:
            progress.val_pending = False
            if not accumulating:
                # Called also when not overridden: TrainModule's default drops the gradients (frees their memory).
                zero_grad = run.hooks.module_hook("on_validation_model_zero_grad")
                zero_grad = zero_grad or getattr(run.module, "on_validation_model_zero_grad", None)
                if callable(zero_grad):
                    zero_grad()
            self.epoch_loop.val_loop.run()
            if progress.is_last_batch:
                progress.validated_at_epoch_end = True
        if not accumulating:
            if run.automatic and self._steps.step_schedulers:
                self._steps.step_lr_schedulers("step", plateau=True)
            progress.batches_that_stepped += 1
        progress.val_pending = False
        progress.batch_finished = True

    def _validation_due(self, dataloader_iter_done: bool = False) -> bool:
        """Lightning's rule: in a validating epoch, at the end of a `dataloader_iter` epoch, when stopping, when the
        time interval passed, or every N batches (counted within the epoch, or over all epochs with
        ``check_val_every_n_epoch=None``)."""
        trainer, data = self._trainer, self.data
        if not data.val_enabled or not data.validates_this_epoch():
            return False
        if dataloader_iter_done:
            return True
        progress = trainer.progress
        if trainer.should_stop and self.can_stop_early():
            return True
        seconds = trainer.val_check_seconds
        if seconds is not None:
            return time.monotonic() - data.last_val_time >= seconds
        interval = data.val_check_batch
        if math.isinf(interval):
            # An epoch of unknown length: validated once its end is known (after the loop).
            return False
        done = (progress.total_batch_idx if trainer.check_val_every_n_epoch is None else progress.batch_idx) + 1
        return done % interval == 0

    def _finish_epoch(self) -> None:
        """Epoch-end hooks, epoch metrics, epoch-interval plateau schedulers, then monitoring callbacks."""
        trainer, run = self._trainer, self._run
        hooks = run.hooks
        results = run.train_results
        progress = trainer.progress
        # A checkpoint written in the epoch-end hooks of a cut epoch resumes inside it, with the aggregates
        # of the batches done so far (the epoch-end computation below resets them).
        run.cut_metric_state = results.state_dict() if progress.epoch_cut else None
        results.in_step = False
        results.hook = "on_train_epoch_end"
        connector = run.logger_connector
        connector.set_results(results)
        # Outside the batch loop, reads of the metrics give the epoch aggregates (to every on_train_epoch_end hook).
        connector.epoch_end_reached()
        # As Lightning: `processed` before the epoch-end hooks (where checkpoints are written), `completed` after;
        # once, also when a checkpoint written in these hooks has the epoch's end run again.
        if self.epoch_progress.current.processed < self.epoch_progress.current.started:  # type: ignore[attr-defined]
            self.epoch_progress.increment_processed()
        try:
            hooks.call("on_train_epoch_end", monitoring=False)
        finally:
            results.in_step = True
            results.hook = "training_step"
        if run.automatic and not progress.epoch_cut:
            if progress.batch_idx < 0 or not progress.is_last_batch:
                # The epoch ended early (no batches, on_train_batch_start returned -1, a batch limit):
                # its epoch schedulers were not stepped at a last batch.
                self._steps.step_lr_schedulers("epoch", plateau=False)
            self._steps.step_lr_schedulers("epoch", plateau=True)
        progress.epoch_done = not progress.epoch_cut
        results.in_step = False
        results.hook = "on_train_epoch_end"
        try:
            hooks.call("on_train_epoch_end", monitoring=True, module=False)
        finally:
            results.in_step = True
            results.hook = "training_step"
        connector.on_epoch_end()
        # As in Lightning, epoch metrics are logged at the step of the epoch's last batch.
        connector.update_train_epoch_metrics(step=max(0, progress.batches_that_stepped - 1))
        self.epoch_progress.increment_completed()  # trainer.current_epoch moves on
        progress.epoch_done = False
        # A cut ends the fit: its flag and aggregates stay for a checkpoint written at train end (`continue_cut_epoch`).
        if not progress.epoch_cut:
            run.cut_metric_state = None

    def _first_time(self, key: str) -> bool:
        said = key in self._said
        self._said.add(key)
        return not said

    def _warn_once(self, message: str) -> None:
        if self._first_time(message):
            rank_zero_warn(message)

    def warn_if_modules_in_eval_mode(self) -> None:
        """As Lightning, before ``on_train_start``: submodules left in eval mode may train unexpectedly."""
        module = self._run.module
        assert module is not None
        eval_modules = [name for name, submodule in module.named_modules() if not submodule.training]
        if eval_modules:
            rank_zero_warn(
                f"Found {len(eval_modules)} module(s) in eval mode at the start of training. This may lead to "
                f"unexpected behavior during training. If this is intentional, you can ignore this warning: "
                f"{', '.join(eval_modules[:5])}{', ...' if len(eval_modules) > 5 else ''}.",
                category=PossibleUserWarning,
            )

    # -- validation inside fit -------------------------------------------------------------------------------
    def run_validation(self) -> None:
        """One validation pass of fit (`epoch_loop.val_loop.run()`); the loaders are (re)built when it runs."""
        trainer, run, data = self._trainer, self._run, self.data
        trainer.state.stage = RunningStage.VALIDATING
        # A run that stops inside this pass restarts it when resumed: what it must resume with is the random
        # state the pass began with (its loaders' iterators draw from it), see `rewind_interrupted_validation`.
        self._validation_start_rng = capture_rng_states()
        try:
            data.ensure_val_loaders()
            run_evaluation(trainer, run, "validate", run.val_results, data.val_loaders, data.val_limits, in_fit=True)
            data.validation_ended(data.val_limits)
            self._validation_start_rng = None
        finally:
            trainer.state.stage = RunningStage.TRAINING

    def rewind_interrupted_validation(self) -> None:
        """Put the random generators back to where the validation pass an exception interrupted began, so that a
        checkpoint written now (`OnExceptionCheckpoint`) resumes as the uninterrupted run went on: the resumed run
        runs that pass again from its start."""
        rng, self._validation_start_rng = self._validation_start_rng, None
        if rng is not None:
            restore_rng_states(rng)

    def run_sanity_check(self) -> None:
        """``num_sanity_val_steps`` validation batches before training; they change no state, random generators
        included, and nothing they log or count is kept."""
        trainer, run, data = self._trainer, self._run, self.data
        steps = trainer.num_sanity_val_steps
        rng = capture_rng_states()
        trainer.sanity_checking = True
        try:
            run.hooks.call("on_sanity_check_start", module=False)
            data.ensure_val_loaders()
            limits = [limit if steps < 0 else min(limit, steps) for limit in data.val_limits]
            run_evaluation(
                trainer, run, "validate", run.val_results, data.val_loaders, limits, sanity=True, in_fit=True
            )
            data.validation_ended(limits)
            run.hooks.call("on_sanity_check_end", module=False)
            run.logger_connector.reset_metrics()
            self.epoch_loop.val_loop.reset_progress()
        finally:
            trainer.state.stage = RunningStage.TRAINING
            restore_rng_states(rng)

    # -- when fit ends -----------------------------------------------------------------------------------------
    def fit_is_done(self) -> bool:
        trainer = self._trainer
        if self.data.train_loader is not None and self.data.num_training_batches == 0:
            return True  # as Lightning: no training batches, nothing to loop over
        if trainer.max_steps >= 0 and trainer.global_step >= trainer.max_steps:
            return True
        if self._time_is_up():
            return True
        max_epochs = trainer.max_epochs
        return max_epochs is not None and max_epochs >= 0 and trainer.current_epoch >= max_epochs

    def can_stop_early(self) -> bool:
        """``min_epochs``/``min_steps`` reached (a stop request before them is postponed, as in Lightning)."""
        trainer = self._trainer
        if trainer.min_epochs is not None and trainer.current_epoch < trainer.min_epochs:
            return False
        return not (trainer.min_steps is not None and trainer.global_step < trainer.min_steps)

    def _time_is_up(self) -> bool:
        max_time = self._trainer.max_time
        return max_time is not None and self._started_at is not None and time.monotonic() - self._started_at >= max_time

    def _should_end_epoch(self) -> bool:
        trainer = self._trainer
        if trainer.max_steps >= 0 and trainer.global_step >= trainer.max_steps:
            return True
        if self._time_is_up():
            trainer.should_stop = True
            return True
        if not trainer.should_stop:
            return False
        if self.can_stop_early():
            return True
        if self._first_time("stop postponed"):
            # Lightning names its parsed min_epochs: 1 when only min_steps is set, else 0.
            min_steps = trainer.min_steps
            min_epochs = trainer.min_epochs if trainer.min_epochs is not None else (1 if min_steps is not None else 0)
            rank_zero_log_info(
                log,
                f"Trainer was signaled to stop but the required `min_epochs={min_epochs!r}` or"
                f" `min_steps={min_steps!r}` has not been met. Training will continue...",
            )
        return False


def _is_limited(loader: Any, limit: float) -> bool:
    try:
        return limit < len(loader)
    except TypeError:
        return not math.isinf(limit)
