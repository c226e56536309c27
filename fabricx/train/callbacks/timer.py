"""``Timer``: time the training, validation and test loops, and stop training at a time limit."""

from __future__ import annotations

import logging
import re
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from fabricx.train.callbacks.base import Callback
from fabricx.utilities.exceptions import MisconfigurationException
from fabricx.utilities.rank_zero import rank_zero_log_info

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer

# Lightning's RunningStage values: the names Timer's methods take.
_STAGES = ("train", "sanity_check", "validate", "test", "predict")
_INTERVALS = ("step", "epoch")


class Timer(Callback):
    """Measure the time spent in each loop; stop training once ``duration`` has passed.

    ``duration`` is ``"DD:HH:MM:SS"``, a ``timedelta`` or a dict of ``timedelta`` arguments; the limit
    is checked after every training batch (``interval="step"``) or epoch (``"epoch"``). Elapsed training
    time is stored in checkpoints, so a resumed run counts on from where it stopped.

    Example:

    ```python
    timer = Timer(duration="00:12:00:00")
    trainer = Trainer(callbacks=[timer])
    trainer.fit(model)
    timer.time_elapsed("train"), timer.time_elapsed("validate")
    ```
    """

    def __init__(
        self, duration: str | timedelta | dict[str, int] | None = None, interval: str = "step", verbose: bool = True
    ) -> None:
        if isinstance(duration, str):
            match = re.fullmatch(r"(\d+):(\d\d):(\d\d):(\d\d)", duration.strip())
            if not match:
                raise MisconfigurationException(
                    f"`Timer(duration={duration!r})` is not a valid duration. "
                    "Expected a string in the format DD:HH:MM:SS."
                )
            days, hours, minutes, seconds = (int(part) for part in match.groups())
            duration = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
        elif isinstance(duration, dict):
            duration = timedelta(**duration)
        if interval not in _INTERVALS:
            raise MisconfigurationException(
                f"Unsupported parameter value `Timer(interval={interval})`. Possible choices are:"
                f" {', '.join(_INTERVALS)}"
            )
        self._duration = duration.total_seconds() if duration is not None else None
        self._interval = interval
        self._verbose = verbose
        self._start_time: dict[str, float | None] = dict.fromkeys(_STAGES)
        self._end_time: dict[str, float | None] = dict.fromkeys(_STAGES)
        self._offset: float = 0

    def start_time(self, stage: str = "train") -> float | None:
        """When ``stage`` ("train", "validate", "test", ...) last started (``time.monotonic()`` seconds)."""
        return self._start_time[_stage(stage)]

    def end_time(self, stage: str = "train") -> float | None:
        """When ``stage`` last ended (``time.monotonic()`` seconds)."""
        return self._end_time[_stage(stage)]

    def time_elapsed(self, stage: str = "train") -> float:
        """Seconds spent in ``stage`` (training time includes what a restored checkpoint had counted)."""
        start, end = self.start_time(stage), self.end_time(stage)
        offset = self._offset if _stage(stage) == "train" else 0
        if start is None:
            return offset
        if end is None:
            return time.monotonic() - start + offset
        return end - start + offset

    def time_remaining(self, stage: str = "train") -> float | None:
        """Seconds left before ``duration`` is reached (``None`` without a duration)."""
        return None if self._duration is None else self._duration - self.time_elapsed(stage)

    def on_train_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        self._start_time["train"] = time.monotonic()

    def on_train_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        self._end_time["train"] = time.monotonic()

    def on_validation_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        self._start_time["validate"] = time.monotonic()

    def on_validation_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        self._end_time["validate"] = time.monotonic()

    def on_test_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        self._start_time["test"] = time.monotonic()

    def on_test_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        self._end_time["test"] = time.monotonic()

    def on_fit_start(self, trainer: Trainer, *args: Any, **kwargs: Any) -> None:
        if self._duration is not None:
            self._check_time_remaining(trainer)

    def on_train_batch_end(self, trainer: Trainer, *args: Any, **kwargs: Any) -> None:
        if self._interval == "step" and self._duration is not None:
            self._check_time_remaining(trainer)

    def on_train_epoch_end(self, trainer: Trainer, *args: Any, **kwargs: Any) -> None:
        if self._interval == "epoch" and self._duration is not None:
            self._check_time_remaining(trainer)

    def state_dict(self) -> dict[str, Any]:
        return {"time_elapsed": {stage: self.time_elapsed(stage) for stage in _STAGES}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._offset = state_dict.get("time_elapsed", {}).get("train", 0)

    def _check_time_remaining(self, trainer: Trainer) -> None:
        assert self._duration is not None
        should_stop = self.time_elapsed() >= self._duration
        if trainer.world_size > 1:
            # Rank 0's clock decides, so every rank stops after the same batch.
            should_stop = bool(trainer.fabric.broadcast(should_stop))
        trainer.should_stop = trainer.should_stop or should_stop
        if should_stop and self._verbose:
            elapsed = timedelta(seconds=int(self.time_elapsed("train")))
            rank_zero_log_info(log, f"Time limit reached. Elapsed time is {elapsed}. Signaling Trainer to stop.")


def _stage(stage: Any) -> str:
    value = str(getattr(stage, "value", stage))
    if value not in _STAGES:
        raise ValueError(f"'{value}' is not a valid RunningStage; choose one of {', '.join(_STAGES)}.")
    return value
