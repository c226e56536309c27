"""``TQDMProgressBar``: Lightning's tqdm progress bars, one per loop, customizable through the same methods."""

from __future__ import annotations

import math
import os
import sys
from typing import TYPE_CHECKING, Any

from fabricx.train.callbacks.progress import ProgressBar
from fabricx.utilities.imports import lazy_import

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer

#: The width numbers in the postfix are padded to, so the bar does not flicker as their digits change.
_PAD_SIZE = 5


def format_num(n: int | float | str) -> str:
    """tqdm's number format, a float (or numeric string) padded with zeros to five characters (Lightning's
    ``Tqdm.format_num``), so the postfix does not flicker as digits change.

    Example:
        ```python
        format_num(0.1)  # "0.100"
        ```
    """
    padded = isinstance(n, (float, str))
    text = n if isinstance(n, str) else lazy_import("tqdm.auto").tqdm.format_num(n)
    if padded and "e" not in text:
        if "." not in text and len(text) < _PAD_SIZE:
            try:
                float(text)
            except ValueError:
                return text
            text += "."
        text += "0" * (_PAD_SIZE - len(text))
    return text


def _tqdm() -> Any:
    """Lightning's ``Tqdm``: ``tqdm.auto.tqdm`` with `format_num`, built on first use (importing this module
    imports no tqdm); a test's ``mock.patch`` of ``Tqdm`` here is what the bars use."""
    built = globals().get("Tqdm")
    if built is None:
        built = type("Tqdm", (lazy_import("tqdm.auto").tqdm,), {"format_num": staticmethod(format_num)})
        built.__module__ = __name__
        globals()["Tqdm"] = built
    return built


def __getattr__(name: str) -> Any:
    if name == "Tqdm":
        return _tqdm()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _BarSlot:
    """A bar attribute of `TQDMProgressBar`: kept in ``_<name>``; reading it before its loop made it is an error."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.attribute = f"_{name}"

    def __get__(self, bar: Any, owner: type | None = None) -> Any:
        if bar is None:
            return self
        value = getattr(bar, self.attribute)
        if value is None:
            raise TypeError(f"The `{type(bar).__name__}.{self.attribute}` reference has not been set yet.")
        return value

    def __set__(self, bar: Any, value: Any) -> None:
        setattr(bar, self.attribute, value)


class TQDMProgressBar(ProgressBar):
    """tqdm bars as Lightning draws them: the sanity check, ``Epoch N`` over the training batches, validation
    (under the training bar during fit), test and predict, each showing ``v_num`` and the ``prog_bar`` metrics.
    Customize a bar by overriding its ``init_*_tqdm`` method, the descriptions, or `get_metrics`.

    Only global rank zero draws. ``refresh_rate`` redraws every N batches (0 disables the bars),
    ``process_position`` offsets the bars (several trainers in one terminal), ``leave`` keeps each finished
    epoch's bar.

    Example:
        ```python
        class QuietValidation(TQDMProgressBar):
            def init_validation_tqdm(self):
                bar = super().init_validation_tqdm()
                bar.disable = True
                return bar

        Trainer(callbacks=[QuietValidation(refresh_rate=10)])
        ```
    """

    BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]"

    def __init__(self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False) -> None:
        super().__init__()
        self._refresh_rate = _resolve_refresh_rate(self._checked_refresh_rate(refresh_rate))
        self._process_position = process_position
        self._enabled = True
        self._leave = leave
        self._train_progress_bar: Any = None
        self._val_progress_bar: Any = None
        self._test_progress_bar: Any = None
        self._predict_progress_bar: Any = None

    def __getstate__(self) -> dict[str, Any]:
        # Bars hold a terminal; a copy sent to another process draws its own.
        bars = ("_train_progress_bar", "_val_progress_bar", "_test_progress_bar", "_predict_progress_bar")
        return {**super().__getstate__(), **dict.fromkeys(bars)}

    # -- the bars, set while their loop runs (Lightning's settable properties) ----------------------------------
    train_progress_bar: Any = _BarSlot()
    val_progress_bar: Any = _BarSlot()
    test_progress_bar: Any = _BarSlot()
    predict_progress_bar: Any = _BarSlot()

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

    # -- the bars' construction: override one to change a bar -------------------------------------------------
    def _new_tqdm(self, description: str, offset: int = 0, leave: bool = True, **kwargs: Any) -> Any:
        return _tqdm()(
            desc=description,
            position=2 * self.process_position + offset,
            disable=self.is_disabled,
            leave=leave,
            dynamic_ncols=True,
            file=sys.stdout,
            bar_format=self.BAR_FORMAT,
            **kwargs,
        )

    def init_sanity_tqdm(self) -> Any:
        return self._new_tqdm(self.sanity_check_description, leave=False)

    def init_train_tqdm(self) -> Any:
        return self._new_tqdm(self.train_description, smoothing=0)

    def init_predict_tqdm(self) -> Any:
        return self._new_tqdm(self.predict_description, smoothing=0)

    def init_validation_tqdm(self) -> Any:
        # Under the training bar during fit (and gone when done); on its own line for trainer.validate().
        under_training = self.trainer.state.fn != "validate"
        return self._new_tqdm(self.validation_description, offset=int(under_training), leave=not under_training)

    def init_test_tqdm(self) -> Any:
        return self._new_tqdm("Testing")

    # -- hooks ----------------------------------------------------------------------------------------------------
    def on_sanity_check_start(self, *_: Any) -> None:
        self.val_progress_bar = self.init_sanity_tqdm()
        self.train_progress_bar = _tqdm()(disable=True)  # stands in until training starts

    def on_sanity_check_end(self, *_: Any) -> None:
        self.val_progress_bar.close()
        self.train_progress_bar.close()

    def on_train_start(self, *_: Any) -> None:
        self.train_progress_bar = self.init_train_tqdm()

    def on_train_epoch_start(self, trainer: Trainer, *_: Any) -> None:
        if self._leave:
            self.train_progress_bar = self.init_train_tqdm()
        _restart(self.train_progress_bar, self.total_train_batches, f"Epoch {trainer.current_epoch}")

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: TrainModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        bar = self._train_progress_bar
        if bar is not None and self._should_update(batch_idx + 1, bar.total):
            _show_n(bar, batch_idx + 1)
            bar.set_postfix(self.get_metrics(trainer, pl_module))

    def on_train_epoch_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        if not self.train_progress_bar.disable:
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))
        if self._leave:
            self.train_progress_bar.close()

    def on_train_end(self, *_: Any) -> None:
        self.train_progress_bar.close()

    def on_validation_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        if not trainer.sanity_checking:
            self.val_progress_bar = self.init_validation_tqdm()

    def on_validation_batch_start(
        self, trainer: Trainer, pl_module: TrainModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.has_dataloader_changed(dataloader_idx):
            stage = self.sanity_check_description if trainer.sanity_checking else self.validation_description
            total = self.total_val_batches_current_dataloader
            _restart(self.val_progress_bar, total, f"{stage} DataLoader {dataloader_idx}")

    def on_validation_batch_end(
        self,
        trainer: Trainer,
        pl_module: TrainModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._advance(self._val_progress_bar, batch_idx + 1)

    def on_validation_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        self.val_progress_bar.close()
        self.reset_dataloader_idx_tracker()
        if self._train_progress_bar is not None and trainer.state.fn == "fit":
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))

    def on_test_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        self.test_progress_bar = self.init_test_tqdm()

    def on_test_batch_start(
        self, trainer: Trainer, pl_module: TrainModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.has_dataloader_changed(dataloader_idx):
            total = self.total_test_batches_current_dataloader
            _restart(self.test_progress_bar, total, f"{self.test_description} DataLoader {dataloader_idx}")

    def on_test_batch_end(
        self,
        trainer: Trainer,
        pl_module: TrainModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._advance(self._test_progress_bar, batch_idx + 1)

    def on_test_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        self.test_progress_bar.close()
        self.reset_dataloader_idx_tracker()

    def on_predict_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        self.predict_progress_bar = self.init_predict_tqdm()

    def on_predict_batch_start(
        self, trainer: Trainer, pl_module: TrainModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.has_dataloader_changed(dataloader_idx):
            total = self.total_predict_batches_current_dataloader
            _restart(self.predict_progress_bar, total, f"{self.predict_description} DataLoader {dataloader_idx}")

    def on_predict_batch_end(
        self,
        trainer: Trainer,
        pl_module: TrainModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._advance(self._predict_progress_bar, batch_idx + 1)

    def on_predict_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        self.predict_progress_bar.close()
        self.reset_dataloader_idx_tracker()

    def print(self, *args: Any, sep: str = " ", **kwargs: Any) -> None:
        """Print through the bar that is drawing (``tqdm.write``), so the bar is redrawn below the text."""
        bars = (self._train_progress_bar, self._val_progress_bar, self._test_progress_bar, self._predict_progress_bar)
        active = next((bar for bar in bars if bar is not None and not bar.disable), None)
        if active is not None:
            active.write(sep.join(map(str, args)), **kwargs)

    def _advance(self, bar: Any, n: int) -> None:
        if bar is not None and self._should_update(n, bar.total):
            _show_n(bar, n)

    def _should_update(self, current: int, total: int | float | None) -> bool:
        """Redraw every ``refresh_rate`` batches and at the last one."""
        return self.is_enabled and (current % self.refresh_rate == 0 or current == total)


def _resolve_refresh_rate(refresh_rate: int) -> int:
    # As Lightning's: Colab redraws at most every 20 batches (more often crashes its output); TQDM_MINITERS,
    # tqdm's own variable, sets the least rate.
    if os.getenv("COLAB_GPU") and refresh_rate == 1:
        return 20
    if "TQDM_MINITERS" in os.environ:
        return max(int(os.environ["TQDM_MINITERS"]), refresh_rate)
    return refresh_rate


def _restart(bar: Any, total: int | float, description: str) -> None:
    bar.reset()
    bar.total = None if isinstance(total, float) and math.isinf(total) else total
    bar.initial = 0
    bar.set_description(description)


def _show_n(bar: Any, n: int) -> None:
    if not bar.disable:
        bar.n = n
        bar.refresh()


__all__ = ["TQDMProgressBar", "format_num"]
