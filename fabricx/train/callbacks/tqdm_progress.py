"""``TQDMProgressBar``: Lightning's default progress bars, drawn with tqdm (one per loop)."""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any

from fabricx.train.callbacks.progress import ProgressBar

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer


class TQDMProgressBar(ProgressBar):
    """tqdm bars: ``Epoch N`` over the training batches (with validation batches counted in), and one for
    each validation, test and predict run, showing ``v_num`` and the ``prog_bar`` metrics.

    Only global rank zero draws. ``refresh_rate`` redraws every N batches (0 disables the bars),
    ``process_position`` offsets the bars (several trainers in one terminal), ``leave`` keeps each
    finished epoch's bar.

    Example:

    ```python
    Trainer(callbacks=[TQDMProgressBar(refresh_rate=10)])
    ```
    """

    BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]"

    def __init__(self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False) -> None:
        self._refresh_rate = self._checked_refresh_rate(refresh_rate)
        self._process_position = process_position
        self._enabled = True
        self._leave = leave
        self._bars: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        # Bars hold a terminal; a copy sent to another process draws its own.
        return {**self.__dict__, "_bars": {}, "_trainer": None}

    # -- Lightning's ProgressBar interface --------------------------------------------------------------
    @property
    def refresh_rate(self) -> int:
        return self._refresh_rate

    @property
    def process_position(self) -> int:
        return self._process_position

    @property
    def is_enabled(self) -> bool:
        return self._enabled and self.refresh_rate > 0

    @property
    def is_disabled(self) -> bool:
        return not self.is_enabled

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def _bar(self, key: str) -> Any:
        if key not in self._bars:
            raise TypeError(
                f"The `{type(self).__name__}._{key}_progress_bar` reference has not been set yet."
                f" The {key} progress bar exists only while its loop runs."
            )
        return self._bars[key]

    @property
    def train_progress_bar(self) -> Any:
        return self._bar("train")

    @property
    def val_progress_bar(self) -> Any:
        return self._bar("val")

    @property
    def test_progress_bar(self) -> Any:
        return self._bar("test")

    @property
    def predict_progress_bar(self) -> Any:
        return self._bar("predict")

    # -- bars --------------------------------------------------------------------------------------------
    def _new_bar(self, key: str, description: str, total: float, position: int, leave: bool) -> Any:
        from tqdm.auto import tqdm

        bar = tqdm(
            desc=description,
            total=None if math.isinf(total) else int(total),
            position=2 * self.process_position + position,
            disable=self.is_disabled,
            leave=leave,
            dynamic_ncols=True,
            file=sys.stdout,
            smoothing=0,
            bar_format=self.BAR_FORMAT,
        )
        self._bars[key] = bar
        return bar

    def _close(self, key: str) -> None:
        bar = self._bars.pop(key, None)
        if bar is not None:
            bar.close()

    def _advance_one(self, key: str) -> None:
        bar = self._bars.get(key)
        if bar is not None:
            self._advance(key, bar.n + 1, bar.total)

    def _advance(self, key: str, n: int, total: float | None = None) -> None:
        bar = self._bars.get(key)
        if bar is None:
            return
        last = total is not None and not math.isinf(total) and n >= total
        if self.refresh_rate and (n % self.refresh_rate == 0 or last):
            bar.n = n
            bar.refresh()

    def setup(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
        self._trainer = trainer
        if not trainer.is_global_zero:
            self.disable()

    def on_sanity_check_start(self, trainer: Trainer, module: TrainModule) -> None:
        self._new_bar("val", "Sanity Checking", sum(getattr(trainer, "num_sanity_val_batches", [0])), 0, False)

    def on_sanity_check_end(self, trainer: Trainer, module: TrainModule) -> None:
        self._close("val")

    def on_train_start(self, trainer: Trainer, module: TrainModule) -> None:
        self._new_bar("train", "Training", self.total_train_batches, 0, True)

    def on_train_epoch_start(self, trainer: Trainer, module: TrainModule) -> None:
        bar = self._bars.get("train") or self._new_bar("train", "Training", self.total_train_batches, 0, True)
        if self._leave and bar.n:
            bar.close()
            bar = self._new_bar("train", "Training", self.total_train_batches, 0, True)
        total = self.total_train_batches
        bar.reset(total=None if math.isinf(total) else int(total))
        bar.initial = 0
        bar.set_description(f"Epoch {trainer.current_epoch}")

    def on_train_batch_end(
        self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._advance("train", batch_idx + 1, self.total_train_batches)
        bar = self._bars.get("train")
        if bar is not None and self.refresh_rate and (batch_idx + 1) % self.refresh_rate == 0:
            bar.set_postfix(self.get_metrics(trainer, module))

    def on_train_epoch_end(self, trainer: Trainer, module: TrainModule) -> None:
        self._show_train_metrics(trainer, module)

    def on_train_end(self, trainer: Trainer, module: TrainModule) -> None:
        self._close("train")

    def on_validation_start(self, trainer: Trainer, module: TrainModule) -> None:
        if not getattr(trainer, "sanity_checking", False):
            self._new_bar("val", "Validation", sum(trainer.num_val_batches), int("train" in self._bars), False)

    def on_validation_batch_end(
        self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._advance_one("val")

    def on_validation_end(self, trainer: Trainer, module: TrainModule) -> None:
        if not getattr(trainer, "sanity_checking", False):
            self._close("val")
        self._show_train_metrics(trainer, module)

    def _show_train_metrics(self, trainer: Trainer, module: TrainModule) -> None:
        bar = self._bars.get("train")
        if bar is not None and not bar.disable:
            bar.set_postfix(self.get_metrics(trainer, module))

    def on_test_start(self, trainer: Trainer, module: TrainModule) -> None:
        self._new_bar("test", "Testing", sum(trainer.num_test_batches), 0, True)

    def on_test_batch_end(
        self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._advance_one("test")

    def on_test_end(self, trainer: Trainer, module: TrainModule) -> None:
        self._close("test")

    def on_predict_start(self, trainer: Trainer, module: TrainModule) -> None:
        self._new_bar("predict", "Predicting", sum(trainer.num_predict_batches), 0, True)

    def on_predict_batch_end(
        self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._advance_one("predict")

    def on_predict_end(self, trainer: Trainer, module: TrainModule) -> None:
        self._close("predict")

    def teardown(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
        for key in list(self._bars):
            self._close(key)
