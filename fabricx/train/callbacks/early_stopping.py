"""``EarlyStopping``: stop ``fit`` when a monitored metric stops improving or crosses a threshold."""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from fabricx.train.callbacks.base import Callback
from fabricx.train.callbacks.trainer_state import any_rank, fitting, validates_every_epoch_end
from fabricx.utilities.exceptions import MisconfigurationException
from fabricx.utilities.rank_zero import rank_zero_log_info, rank_zero_warn

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer

log = logging.getLogger(__name__)


class EarlyStoppingReason(Enum):
    """Why `EarlyStopping` stopped training (``early_stopping.stopping_reason``).

    Example:

    ```python
    if early_stopping.stopping_reason == EarlyStoppingReason.PATIENCE_EXHAUSTED:
        print(early_stopping.stopping_reason_message)
    ```
    """

    NOT_STOPPED = 0
    STOPPING_THRESHOLD = 1
    DIVERGENCE_THRESHOLD = 2
    PATIENCE_EXHAUSTED = 3
    NON_FINITE_METRIC = 4


class EarlyStopping(Callback):
    """Stop training after ``patience`` checks in a row without an improvement larger than ``min_delta``.

    Also stops at once when the metric reaches ``stopping_threshold``, gets worse than
    ``divergence_threshold``, or (``check_finite``) becomes NaN/inf. The check runs at the end of each
    training epoch when validation runs once per epoch at its end (Lightning's default), otherwise after
    each validation run; ``check_on_train_epoch_end`` forces one or the other. ``stopping_reason`` (an
    `EarlyStoppingReason`) and ``stopping_reason_message`` say why it stopped; the best score,
    patience counter and reason are stored in checkpoints, and so is whether it stopped the run: a fit
    resumed from a checkpoint written after that trains no more (Lightning's trains another epoch).

    Example:

    ```python
    Trainer(callbacks=[EarlyStopping(monitor="val_loss", mode="min", patience=3)])
    ```
    """

    _monitoring = True
    mode_dict: dict[str, Callable[..., Any]] = {"min": torch.lt, "max": torch.gt}
    order_dict = {"min": "<", "max": ">"}

    def __init__(
        self,
        monitor: str,
        min_delta: float = 0.0,
        patience: int = 3,
        verbose: bool = False,
        mode: str = "min",
        strict: bool = True,
        check_finite: bool = True,
        stopping_threshold: float | None = None,
        divergence_threshold: float | None = None,
        check_on_train_epoch_end: bool | None = None,
        log_rank_zero_only: bool = False,
    ) -> None:
        if mode not in self.mode_dict:
            raise MisconfigurationException(f"`mode` can be {', '.join(self.mode_dict)}, got {mode}")
        self.monitor = monitor
        self.patience = patience
        self.verbose = verbose
        self.mode = mode
        self.strict = strict
        self.check_finite = check_finite
        self.stopping_threshold = stopping_threshold
        self.divergence_threshold = divergence_threshold
        self.log_rank_zero_only = log_rank_zero_only
        self.wait_count = 0
        self.stopped_epoch = 0
        self.stopping_reason = EarlyStoppingReason.NOT_STOPPED
        self.stopping_reason_message: str | None = None
        # Whether this callback stopped the run, on every rank (the reason is the deciding rank's), and whether the
        # checkpoint just restored says so (`on_fit_start` reads it once).
        self._stopped_the_run = False
        self._restored_a_stopped_run = False
        self._check_on_train_epoch_end = check_on_train_epoch_end
        self._where = "a check"
        # Stored signed, as in Lightning: an improvement is `current - min_delta` beating the best score.
        self.min_delta = min_delta * (1 if mode == "max" else -1)
        inf = torch.tensor(torch.inf)
        self.best_score: Tensor = inf if mode == "min" else -inf

    @property
    def monitor_op(self) -> Callable[..., Any]:
        return self.mode_dict[self.mode]

    @property
    def state_key(self) -> str:
        return self._state_key_with(monitor=self.monitor, mode=self.mode)

    def setup(self, trainer: Trainer, pl_module: TrainModule, stage: str) -> None:
        if self._check_on_train_epoch_end is None:
            self._check_on_train_epoch_end = validates_every_epoch_end(trainer)

    def on_fit_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        # Restored from a checkpoint written after this callback had stopped the run (its last epoch-end save, or a
        # preemption before the process ended): an uninterrupted run ended there, so the resumed one trains no
        # more. Lightning trains on until the next check stops it again (the migration guide's row).
        self._stopped_the_run, self._restored_a_stopped_run = self._restored_a_stopped_run, False
        if self._stopped_the_run:
            trainer.should_stop = True
            rank_zero_log_info(
                log,
                f"EarlyStopping(monitor={self.monitor!r}) had stopped the run saved in {trainer.ckpt_path}"
                f" ({self.stopping_reason_message or self.stopping_reason.name}); the resumed fit trains no more."
                " To train on, fit without this callback's state: another `monitor` or `mode`, or no EarlyStopping.",
            )

    def on_train_epoch_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        if self._check_on_train_epoch_end and fitting(trainer):
            self._where = f"on_train_epoch_end of epoch {trainer.current_epoch}"
            self._run_early_stopping_check(trainer)

    def on_validation_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        if not self._check_on_train_epoch_end and fitting(trainer):
            self._where = f"on_validation_end of epoch {trainer.current_epoch}"
            self._run_early_stopping_check(trainer)

    def _validate_condition_metric(self, logs: dict[str, Any]) -> bool:
        if logs.get(self.monitor) is not None:
            return True
        message = (
            f"Early stopping conditioned on metric `{self.monitor}` which is not available."
            " Pass in or modify your `EarlyStopping` callback to use any of the following:"
            f" `{'`, `'.join(logs)}`. (EarlyStopping(monitor={self.monitor!r}) checked in {self._where};"
            f" log it with self.log({self.monitor!r}, value), or pass strict=False to skip the check.)"
        )
        if self.strict:
            raise RuntimeError(message)
        if self.verbose:
            rank_zero_warn(message, category=RuntimeWarning)
        return False

    def _run_early_stopping_check(self, trainer: Trainer) -> None:
        logs = trainer.callback_metrics
        # fast_dev_run checks the loop, not the model: never stop it early.
        if getattr(trainer, "fast_dev_run", False) or not self._validate_condition_metric(logs):
            return
        current = torch.as_tensor(logs[self.monitor]).detach().squeeze()
        should_stop, reason = self._evaluate_stopping_criteria(current)
        should_stop = any_rank(trainer, should_stop)
        trainer.should_stop = trainer.should_stop or should_stop
        if should_stop:
            self._stopped_the_run = True
            self.stopped_epoch = trainer.current_epoch
            self.stopping_reason_message = reason
        if reason and self.verbose:
            self._log_info(trainer, reason, self.log_rank_zero_only)

    def _evaluate_stopping_criteria(self, current: Tensor) -> tuple[bool, str | None]:
        order = self.order_dict[self.mode]
        if self.check_finite and not torch.isfinite(current):
            self.stopping_reason = EarlyStoppingReason.NON_FINITE_METRIC
            return True, (
                f"Monitored metric {self.monitor} = {current} is not finite."
                f" Previous best value was {self.best_score:.3f}. Signaling Trainer to stop."
            )
        if self.stopping_threshold is not None and self.monitor_op(current, self.stopping_threshold):
            self.stopping_reason = EarlyStoppingReason.STOPPING_THRESHOLD
            return True, (
                f"Stopping threshold reached: {self.monitor} = {current} {order} {self.stopping_threshold}."
                " Signaling Trainer to stop."
            )
        if self.divergence_threshold is not None and self.monitor_op(-current, -self.divergence_threshold):
            self.stopping_reason = EarlyStoppingReason.DIVERGENCE_THRESHOLD
            return True, (
                f"Divergence threshold reached: {self.monitor} = {current} {order} {self.divergence_threshold}."
                " Signaling Trainer to stop."
            )
        if self.monitor_op(current - self.min_delta, self.best_score.to(current.device)):
            reason = self._improvement_message(current)
            self.best_score = current
            self.wait_count = 0
            return False, reason
        self.wait_count += 1
        if self.wait_count >= self.patience:
            self.stopping_reason = EarlyStoppingReason.PATIENCE_EXHAUSTED
            return True, (
                f"Monitored metric {self.monitor} did not improve in the last {self.wait_count} records."
                f" Best score: {self.best_score:.3f}. Signaling Trainer to stop."
            )
        return False, None

    def _improvement_message(self, current: Tensor) -> str:
        if torch.isfinite(self.best_score):
            return (
                f"Metric {self.monitor} improved by {abs(self.best_score - current):.3f} >="
                f" min_delta = {abs(self.min_delta)}. New best score: {current:.3f}"
            )
        return f"Metric {self.monitor} improved. New best score: {current:.3f}"

    @staticmethod
    def _log_info(trainer: Trainer, message: str, log_rank_zero_only: bool) -> None:
        rank = trainer.global_rank if trainer.world_size > 1 else None
        if rank is not None:
            message = f"[rank: {rank}] {message}"
        if rank is None or not log_rank_zero_only or rank == 0:
            log.info(message)

    def state_dict(self) -> dict[str, Any]:
        return {
            "wait_count": self.wait_count,
            "stopped_epoch": self.stopped_epoch,
            "best_score": self.best_score,
            "patience": self.patience,
            "stopping_reason": self.stopping_reason.value,
            "stopping_reason_message": self.stopping_reason_message,
            "stopped_the_run": self._stopped_the_run,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.wait_count = state_dict["wait_count"]
        self.stopped_epoch = state_dict["stopped_epoch"]
        self.best_score = torch.as_tensor(state_dict["best_score"])
        self.patience = state_dict["patience"]
        self.stopping_reason = EarlyStoppingReason(
            state_dict.get("stopping_reason", EarlyStoppingReason.NOT_STOPPED.value)
        )
        self.stopping_reason_message = state_dict.get("stopping_reason_message")
        self._restored_a_stopped_run = bool(state_dict.get("stopped_the_run", False))  # not in Lightning's
