"""``trainer.callback_metrics``, ``logged_metrics`` and ``progress_bar_metrics``, kept as Lightning keeps them.

The three dicts take the running loop's `ResultCollection` values when they are read, and before the collection
is reset or replaced: the step values of the batches (not after each batch: nothing reads them there, and the
next batch's values replace them) and the epoch aggregates. A read inside a batch sees the step values logged so
far, between batches (epoch-end hooks) the epoch aggregates. What goes to the loggers is
sent from here too: training step values every ``log_every_n_steps`` optimizer steps, epoch aggregates at
the step of the epoch's last batch, evaluation step values at every batch (at the loader's batch count),
evaluation epoch values once per pass.

Example:
    ```python
    connector = LoggerConnector(trainer)
    connector.on_batch_start(results, batch)
    ...  # the step logs
    connector.on_batch_end()
    trainer.callback_metrics  # connector.callback_metrics()
    ```
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fabricx.train.logging.logging_result import Metrics, ResultCollection, tensors_in, to_float

if TYPE_CHECKING:
    from fabricx.train.trainer import Trainer


class LoggerConnector:
    """The Trainer's metric dicts and the loop events that fill them (one per Trainer)."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.callback: dict[str, Any] = {}
        self.logged: dict[str, Any] = {}
        self.pbar: dict[str, Any] = {}
        #: The collection of the loop that runs now (``None`` outside loops: reads give the kept values).
        self.results: ResultCollection | None = None
        #: ``None`` outside a batch loop, ``True`` in its first batch, ``False`` in the later ones.
        self.first_loop_iter: bool | None = None
        #: The collection whose last batch's step values the dicts have not taken yet (see `take_step_values`).
        self._untaken: ResultCollection | None = None

    # -- reset -------------------------------------------------------------------------------------------
    def reset_metrics(self) -> None:
        self._untaken = None
        self.callback = {}
        self.logged = {}
        self.pbar = {}

    def reset_results(self) -> None:
        self.take_step_values()
        if self.results is not None:
            self.results.reset()
        self.first_loop_iter = None

    # -- loop events -------------------------------------------------------------------------------------
    def set_results(self, results: ResultCollection | None) -> None:
        """Make ``results`` the running loop's collection (the dicts take the previous one's step values first)."""
        self.take_step_values()
        self.results = results

    def take_step_values(self) -> None:
        """Copy the step values of the last batch that ended into the dicts, if they have not taken them yet.

        Called before anything reads the dicts and before the collection's entries are reset or the collection or
        its loader changes: until then the values stay in the collection's entries (a batch that logs them again
        replaces them, as the dicts would).
        """
        results = self._untaken
        if results is not None:
            self._untaken = None
            results.metrics_into(True, self.callback, self.logged, self.pbar)

    def on_batch_start(self, results: ResultCollection, batch: Any, dataloader_idx: int | None = None) -> None:
        untaken = self._untaken
        if untaken is not None and (untaken is not results or results.dataloader_idx != dataloader_idx):
            self.take_step_values()
        self.results = results
        self.first_loop_iter = self.first_loop_iter is None
        # The collection's per-batch fields, set here: this runs every batch, and a method call costs more.
        results.batch = batch
        results.batch_size = None
        results.dataloader_idx = dataloader_idx

    def on_batch_end(self) -> None:
        results = self.results
        if results is not None:
            if results.entries:  # nothing logged yet (a module without self.log): nothing to take
                self._untaken = results
            results.batch = None
            results.batch_size = None

    def epoch_end_reached(self) -> None:
        self.take_step_values()
        self.first_loop_iter = None

    def on_epoch_end(self) -> None:
        self._update(self.metrics())

    def _update(self, metrics: Metrics | None) -> None:
        self.take_step_values()
        if metrics is None:
            return
        self.callback.update(metrics.callback)
        self.logged.update(metrics.log)
        self.pbar.update(metrics.pbar)

    def metrics(self) -> Metrics | None:
        """Step values inside a batch loop, epoch values outside it (``None`` when no loop runs)."""
        if self.results is None:
            return None
        return self.results.metrics(self.first_loop_iter is not None)

    # -- to the loggers ----------------------------------------------------------------------------------
    def log_metrics(self, metrics: dict[str, Any], step: int | None = None, default_step: int | None = None) -> None:
        """Send ``metrics`` to the loggers at ``step``; without one, at a logged ``step`` value, else with
        ``epoch`` added at ``default_step`` (default: optimizer steps so far), as Lightning's connector does."""
        trainer = self.trainer
        if not trainer.loggers or not metrics:
            return
        self.logged.update(metrics)
        if not trainer.is_global_zero:
            return
        scalars = {name: to_float(value) for name, value in metrics.items()}
        if step is None:
            logged_step = scalars.pop("step", None)
            if logged_step is not None:
                step = int(logged_step)
            else:
                scalars.setdefault("epoch", trainer.current_epoch)
                step = trainer.progress.batches_that_stepped if default_step is None else default_step
        for logger in trainer.loggers:
            logger.log_metrics(scalars, step=step)
            logger.save()

    def update_train_step_metrics(self, due: bool) -> None:
        """After a training batch: its step values to the loggers when ``due`` (every ``log_every_n_steps``)."""
        if due:
            metrics = self.metrics()
            if metrics is not None:
                self.log_metrics(metrics.log)

    def update_train_epoch_metrics(self, step: int) -> None:
        """After the epoch-end hooks: the epoch values (with ``epoch``) to the loggers at ``step`` (Lightning
        logs them at the step of the epoch's last batch); the collection is reset."""
        metrics = self.metrics()
        if metrics is not None:
            self.log_metrics(metrics.log, default_step=step)
        self.reset_results()

    def update_eval_step_metrics(self, step: int) -> None:
        metrics = self.metrics()
        if metrics is not None:
            self.log_metrics(metrics.log, step=step)

    def update_eval_epoch_metrics(self) -> dict[str, Any]:
        """The epoch values of the evaluation loader that ran (or of the epoch-end hooks), kept in the dicts."""
        if self.trainer.sanity_checking:
            return {}
        metrics = self.metrics()
        if metrics is None:
            return {}
        self._update(metrics)
        return metrics.log

    def log_eval_end_metrics(self, metrics: dict[str, Any]) -> None:
        if not self.trainer.sanity_checking:
            self.log_metrics(metrics)

    # -- what the Trainer's properties return -------------------------------------------------------------
    def callback_metrics(self) -> dict[str, Any]:
        return tensors_in(self._read(self.callback, "callback"))

    def logged_metrics(self) -> dict[str, Any]:
        return tensors_in(self._read(self.logged, "log"))

    def progress_bar_metrics(self) -> dict[str, Any]:
        # Numbers only when read: converting every batch would wait for the device each step.
        return {name: to_float(value) for name, value in self._read(self.pbar, "pbar").items()}

    def _read(self, kept: dict[str, Any], view: str) -> dict[str, Any]:
        """``kept`` (the dict of the `Metrics` field ``view``), brought up to date with the running loop's values."""
        self.take_step_values()
        metrics = self.metrics()
        if metrics is not None:
            kept.update(getattr(metrics, view))
        return kept


__all__ = ["LoggerConnector"]
