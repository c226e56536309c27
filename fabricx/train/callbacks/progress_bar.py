"""``RichProgressBar``: per-epoch training and validation bars with the loss and ``prog_bar`` metrics.

Only global rank zero displays anything. On a terminal the bars are drawn with rich: one line per bar
(description, bar, batches done, elapsed and remaining time, speed) whose parts always fit, and the
metrics below them, wrapped over as many lines as they need; when output goes to a file or a pipe,
one plain line is printed per training epoch and per validation run.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from fabricx.train.callbacks.progress import ProgressBar
from fabricx.train.logging.logging_result import to_float
from fabricx.utilities.imports import lazy_import

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer


#: Significant digits of a metric on the bar (the logged value keeps every digit).
_DIGITS = 4


def _format_value(value: Any) -> str:
    value = to_float(value)
    return f"{value:.{_DIGITS}g}" if isinstance(value, float) else str(value)


class RichProgressBar(ProgressBar):
    """Show training progress: batches done, elapsed and remaining time, speed, loss and ``prog_bar`` metrics.

    Args:
        refresh_rate: Redraw every N batches (0 disables the bar).
        leave: Keep each finished epoch's bar on screen instead of reusing one line.
        console_kwargs: Arguments for ``rich.console.Console`` (e.g. ``{"file": f, "force_terminal": True}``).

    Example:
        ```python
        Trainer(callbacks=[RichProgressBar(refresh_rate=10, leave=True)])
        ```
    """

    def __init__(
        self, refresh_rate: int = 1, leave: bool = False, console_kwargs: dict[str, Any] | None = None
    ) -> None:
        self.refresh_rate = self._checked_refresh_rate(refresh_rate)
        self.leave = leave
        self.console_kwargs = console_kwargs or {}
        self._reset()

    def _reset(self) -> None:
        self._enabled = False
        self._console: Any = None
        self._progress: Any = None
        self._train_task: Any = None
        self._eval_task: Any = None
        self._train_done = 0
        self._eval_done = 0
        self._eval_total: float = 0
        self._started_at = 0.0
        self._first_done = 0
        # Metrics logged on some steps only (throughput every N steps) keep their last value on the bar, so the
        # layout does not change from one step to the next.
        self._shown_metrics: dict[str, str] = {}
        self._metrics_line = ""

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), **dict.fromkeys(("_console", "_progress", "_train_task", "_eval_task"))}

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    @property
    def is_disabled(self) -> bool:
        return not self._enabled

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        # Drawing needs the console `setup` made on global rank zero.
        self._enabled = self._console is not None and self.refresh_rate > 0

    @property
    def is_terminal(self) -> bool:
        return bool(self._console is not None and self._console.is_terminal)

    # -- set-up -------------------------------------------------------------------------------------------------
    def setup(self, trainer: Trainer, pl_module: TrainModule, stage: str) -> None:
        self._reset()
        self._trainer = trainer
        self._enabled = trainer.is_global_zero and self.refresh_rate > 0
        if not self._enabled:
            return
        Console = lazy_import("rich.console").Console

        self._console = Console(**self.console_kwargs)

    def teardown(self, trainer: Trainer, pl_module: TrainModule, stage: str) -> None:
        if self._progress is not None:
            self._progress.refresh()
            self._progress.stop()
        self._progress = None

    def _ensure_progress(self) -> Any:
        if self._progress is None:
            self._progress = _progress_with_metrics_line(self._console, lambda: self._metrics_line)
            self._progress.start()
        return self._progress

    def _set_metrics_line(self, text: str) -> None:
        self._metrics_line = text

    # -- training -----------------------------------------------------------------------------------------------
    def _description(self, trainer: Trainer) -> str:
        if trainer.max_epochs is not None and trainer.max_epochs >= 0:
            return f"Epoch {trainer.current_epoch}/{trainer.max_epochs - 1}"
        return f"Epoch {trainer.current_epoch}"

    def _start_train(self, trainer: Trainer, done: int) -> None:
        self._train_done = self._first_done = done
        self._started_at = time.perf_counter()
        if self.is_terminal:
            progress = self._ensure_progress()
            if self._train_task is not None and not self.leave:
                progress.remove_task(self._train_task)
            total = trainer.num_training_batches
            self._train_task = progress.add_task(
                self._description(trainer),
                total=None if math.isinf(total) else total,
                completed=self._train_done,
                speed="",
            )
        else:
            self._train_task = True

    def on_train_epoch_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        if self._enabled:
            self._start_train(trainer, 0)

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: TrainModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self._enabled:
            return
        if self._train_task is None:  # resumed in the middle of an epoch
            self._start_train(trainer, batch_idx)
        self._train_done = batch_idx + 1
        if self.is_terminal and (self._train_done % self.refresh_rate == 0 or trainer.is_last_batch):
            self._set_metrics_line(self._metrics_text(trainer, with_loss=True))
            self._progress.update(self._train_task, completed=self._train_done, speed=self._speed())
            self._progress.refresh()

    def on_train_epoch_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        if not self._enabled or self._train_task is None:
            return
        metrics = self._metrics_text(trainer, with_loss=True)
        if self.is_terminal:
            self._set_metrics_line(metrics)
            self._progress.update(self._train_task, completed=self._train_done, speed=self._speed())
            self._progress.refresh()
        else:
            total = trainer.num_training_batches
            shown_total = "?" if math.isinf(total) else int(total)
            self._console.print(
                f"{self._description(trainer)}: {self._train_done}/{shown_total} {self._speed()} {metrics}".rstrip(),
                highlight=False,
                soft_wrap=True,
            )
            self._train_task = None

    def _speed(self) -> str:
        elapsed = time.perf_counter() - self._started_at
        done = self._train_done - self._first_done
        if elapsed <= 0 or done <= 0:
            return ""
        return f"{done / elapsed:.2f} it/s"

    def _metrics_text(self, trainer: Trainer, with_loss: bool, only: Any = None) -> str:
        shown: dict[str, str] = {}
        for name, value in trainer.progress_bar_metrics.items():
            if only is None or name in only:
                shown[name] = _format_value(value)
        if only is None:
            self._shown_metrics.update(shown)
            shown = self._shown_metrics
        parts = [f"{name}={value}" for name, value in shown.items()]
        if with_loss and trainer.last_loss is not None and "loss" not in shown:
            loss = _format_value(trainer.last_loss)
            # The loss the step returned is usually logged by the user too (train_loss): show it once.
            if loss not in shown.values():
                parts.insert(0, f"loss={loss}")
        return " ".join(parts)

    def on_train_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        # Stopped before the epoch's end (max_steps, early stopping, a stop request): say where, so the last
        # frame agrees with what the run reports afterwards.
        if not self._enabled or not self.is_terminal or self._train_task is None:
            return
        total = trainer.num_training_batches
        if not math.isinf(total) and self._train_done < total:
            # The epoch it stopped in, as the bar showed it (the epoch counter has moved on by now).
            shown = next(task.description for task in self._progress.tasks if task.id == self._train_task)
            description = f"{shown} · stopped at step {trainer.global_step}"
            self._progress.update(self._train_task, description=description, completed=self._train_done)
            self._progress.refresh()

    # -- evaluation ---------------------------------------------------------------------------------------------
    def _start_eval(self, trainer: Trainer, description: str, totals: list[float]) -> None:
        if not self._enabled:
            return
        self._eval_done = 0
        self._eval_total = sum(totals)
        if self.is_terminal:
            progress = self._ensure_progress()
            total = None if math.isinf(self._eval_total) else self._eval_total
            self._eval_task = progress.add_task(description, total=total, speed="")
            progress.refresh()
        else:
            self._eval_task = description

    def _advance_eval(self) -> None:
        if not self._enabled or self._eval_task is None:
            return
        self._eval_done += 1
        if self.is_terminal and (self._eval_done % self.refresh_rate == 0 or self._eval_done == self._eval_total):
            self._progress.update(self._eval_task, completed=self._eval_done)
            self._progress.refresh()

    def _end_eval(self, trainer: Trainer, description: str) -> None:
        if not self._enabled or self._eval_task is None:
            return
        if self.is_terminal:
            self._progress.remove_task(self._eval_task)
            self._progress.refresh()
        elif not trainer.sanity_checking:
            total = "?" if math.isinf(self._eval_total) else int(self._eval_total)
            metrics = self._metrics_text(trainer, with_loss=False, only=trainer.stage_metric_names)
            self._console.print(
                f"{description}: {self._eval_done}/{total} {metrics}".rstrip(), highlight=False, soft_wrap=True
            )
        self._eval_task = None

    def on_validation_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        description = "Sanity check" if trainer.sanity_checking else "Validation"
        limits = trainer.num_val_batches
        if trainer.sanity_checking and trainer.num_sanity_val_steps >= 0:
            limits = [min(limit, trainer.num_sanity_val_steps) for limit in limits]
        self._start_eval(trainer, description, limits)

    def on_validation_batch_end(self, trainer: Trainer, pl_module: TrainModule, *args: Any, **kwargs: Any) -> None:
        self._advance_eval()

    def on_validation_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        self._end_eval(trainer, "Validation")

    def on_test_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        # Unknown ("?") only when a test loader has no length.
        self._start_eval(trainer, "Testing", trainer.num_test_batches or [math.inf])

    def on_test_batch_end(self, trainer: Trainer, pl_module: TrainModule, *args: Any, **kwargs: Any) -> None:
        self._advance_eval()

    def on_test_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        self._end_eval(trainer, "Testing")


def _progress_with_metrics_line(console: Any, metrics_line: Any) -> Any:
    """A rich ``Progress`` whose bars keep one line each and whose metrics go on the lines below.

    The bar line's parts never wrap (the bar takes what is left), so no step's metrics can squeeze the bar or
    its counts out; the metrics line folds over as many lines as it needs.
    """
    progress = lazy_import("rich.progress")
    table = lazy_import("rich.table")
    text = lazy_import("rich.text")

    def fixed(template: str) -> Any:
        return progress.TextColumn(template, table_column=table.Column(no_wrap=True))

    class _Progress(progress.Progress):
        def get_renderables(self) -> Any:
            yield self.make_tasks_table(self.tasks)
            line = metrics_line()
            if line:
                yield text.Text(line, overflow="fold")

    return _Progress(
        fixed("{task.description}"),
        progress.BarColumn(bar_width=None),
        progress.MofNCompleteColumn(table_column=table.Column(no_wrap=True)),
        progress.TimeElapsedColumn(table_column=table.Column(no_wrap=True)),
        fixed("•"),
        progress.TimeRemainingColumn(table_column=table.Column(no_wrap=True)),
        fixed("{task.fields[speed]}"),
        console=console,
        auto_refresh=False,
        expand=True,
    )
