"""``EarlyStopping``: stop ``fit`` when a monitored metric stops improving."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from fabricx.train.callbacks.base import Callback
from fabricx.train.logging_result import to_float
from fabricx.utilities.exceptions import MisconfigurationError
from fabricx.utilities.rank_zero import rank_zero_info, rank_zero_warn

if TYPE_CHECKING:
    from fabricx.train.module import TrainModule
    from fabricx.train.trainer import Trainer


class EarlyStopping(Callback):
    """Stop training after ``patience`` checks in a row without an improvement larger than ``min_delta``.

    The metric is checked after every validation run when ``fit`` has validation data, otherwise
    at the end of every training epoch (``check_on_train_epoch_end`` forces one or the other).
    The best score and the patience counter are stored in checkpoints.

    Example::

        Trainer(callbacks=[EarlyStopping(monitor="val_loss", mode="min", patience=3)])
    """

    _monitoring = True

    def __init__(
        self,
        monitor: str,
        min_delta: float = 0.0,
        patience: int = 3,
        mode: str = "min",
        strict: bool = True,
        check_finite: bool = True,
        check_on_train_epoch_end: bool | None = None,
        verbose: bool = False,
    ) -> None:
        if mode not in ("min", "max"):
            raise MisconfigurationError(f"EarlyStopping(mode={mode!r}); allowed are 'min' and 'max'.")
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
            raise MisconfigurationError(f"EarlyStopping(patience={patience!r}); give an int >= 0.")
        self.monitor = monitor
        self.min_delta = abs(float(min_delta))
        self.patience = patience
        self.mode = mode
        self.strict = strict
        self.check_finite = check_finite
        self.check_on_train_epoch_end = check_on_train_epoch_end
        self.verbose = verbose
        self.wait_count = 0
        self.stopped_epoch = -1
        self.best_score = math.inf if mode == "min" else -math.inf
        self._on_train_epoch_end = False

    @property
    def state_key(self) -> str:
        return self._state_key_with(monitor=self.monitor, mode=self.mode)

    def setup(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
        self._on_train_epoch_end = self.check_on_train_epoch_end

    def on_train_start(self, trainer: Trainer, module: TrainModule) -> None:
        if self._on_train_epoch_end is None:
            self._on_train_epoch_end = trainer.val_dataloaders is None

    def on_validation_end(self, trainer: Trainer, module: TrainModule) -> None:
        if trainer.state == "fit" and not trainer.sanity_checking and not self._on_train_epoch_end:
            self._check(trainer, "on_validation_end")

    def on_train_epoch_end(self, trainer: Trainer, module: TrainModule) -> None:
        if self._on_train_epoch_end:
            self._check(trainer, "on_train_epoch_end")

    def _check(self, trainer: Trainer, hook: str) -> None:
        metrics = trainer.callback_metrics
        if self.monitor not in metrics:
            message = (
                f"EarlyStopping(monitor={self.monitor!r}) found no metric {self.monitor!r} in {hook} "
                f"(epoch {trainer.current_epoch}). Logged metrics: {sorted(metrics) or 'none'}. Log it with "
                f"self.log({self.monitor!r}, value), or change monitor."
            )
            if self.strict:
                raise MisconfigurationError(message)
            rank_zero_warn(message + " (strict=False: not checking)")
            return
        current = float(to_float(metrics[self.monitor]))
        if trainer.world_size > 1:
            current = trainer.fabric.broadcast(current)
        stop, reason = self._evaluate(current)
        if stop:
            trainer.should_stop = True
            self.stopped_epoch = trainer.current_epoch
            if self.verbose:
                rank_zero_info(f"EarlyStopping: {reason}")

    def _evaluate(self, current: float) -> tuple[bool, str]:
        if self.check_finite and not math.isfinite(current):
            return True, f"{self.monitor} = {current} is not finite; stopping."
        improved = (
            current < self.best_score - self.min_delta
            if self.mode == "min"
            else current > self.best_score + self.min_delta
        )
        if improved:
            self.best_score = current
            self.wait_count = 0
            return False, ""
        self.wait_count += 1
        if self.wait_count >= self.patience:
            return True, (
                f"{self.monitor} did not improve by more than {self.min_delta} in {self.wait_count} checks "
                f"(best {self.best_score:.6g}); stopping."
            )
        return False, ""

    def state_dict(self) -> dict[str, Any]:
        return {
            "wait_count": self.wait_count,
            "stopped_epoch": self.stopped_epoch,
            "best_score": self.best_score,
            "patience": self.patience,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.wait_count = int(state_dict["wait_count"])
        self.stopped_epoch = int(state_dict["stopped_epoch"])
        self.best_score = float(state_dict["best_score"])
