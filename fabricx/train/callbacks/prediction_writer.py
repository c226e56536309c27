"""`BasePredictionWriter`: write `predict` outputs (to disk, a queue, ...) per batch, per epoch, or both."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

from fabricx.train.callbacks.base import Callback
from fabricx.utilities.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer

WRITE_INTERVALS = ("batch", "epoch", "batch_and_epoch")


class BasePredictionWriter(Callback):
    """Subclass it and override `write_on_batch_end` and/or `write_on_epoch_end` (Lightning's callback).

    ``batch_indices`` are the dataset indices of the batch's samples, read from the loader's batch sampler.

    Example:
        ```python
        class Writer(BasePredictionWriter):
            def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
                torch.save(predictions, f"predictions_{trainer.global_rank}.pt")

        trainer = Trainer(callbacks=[Writer(write_interval="epoch")])
        trainer.predict(model, loader, return_predictions=False)
        ```
    """

    def __init__(self, write_interval: Literal["batch", "epoch", "batch_and_epoch"] = "batch") -> None:
        if write_interval not in WRITE_INTERVALS:
            raise MisconfigurationException(f"`write_interval` should be one of {list(WRITE_INTERVALS)}.")
        self.interval = WriteInterval(write_interval)

    def write_on_batch_end(
        self,
        trainer: Trainer,
        pl_module: TrainModule,
        prediction: Any,
        batch_indices: list[int] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int,
    ) -> None:
        """Called after every `predict_step` when the interval includes ``"batch"``."""
        raise NotImplementedError()

    def write_on_epoch_end(
        self, trainer: Trainer, pl_module: TrainModule, predictions: list[Any], batch_indices: list[Any]
    ) -> None:
        """Called once after all batches when the interval includes ``"epoch"``."""
        raise NotImplementedError()

    def on_predict_batch_end(
        self,
        trainer: Trainer,
        pl_module: TrainModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if not self.interval.on_batch:
            return
        batch_indices = trainer.predict_loop.current_batch_indices
        self.write_on_batch_end(trainer, pl_module, outputs, batch_indices, batch, batch_idx, dataloader_idx)

    def on_predict_epoch_end(self, trainer: Trainer, pl_module: TrainModule) -> None:
        if not self.interval.on_epoch:
            return
        loop = trainer.predict_loop
        self.write_on_epoch_end(trainer, pl_module, loop.predictions, loop.epoch_batch_indices)


class WriteInterval(str):
    """``"batch"``, ``"epoch"`` or ``"batch_and_epoch"``, with `on_batch` / `on_epoch` (Lightning's enum)."""

    @property
    def on_batch(self) -> bool:
        return self in ("batch", "batch_and_epoch")

    @property
    def on_epoch(self) -> bool:
        return self in ("epoch", "batch_and_epoch")


class BatchIndexRecorder:
    """Stands in for a loader's batch sampler during `predict`, recording each batch's sample indices.

    The indices of batch ``i`` are ``seen_batch_indices[i]``; a loader with workers asks for indices ahead of
    the batches it returns, in order, so the list still lines up with ``batch_idx``.
    """

    def __init__(self, batch_sampler: Any) -> None:
        self.batch_sampler = batch_sampler
        self.seen_batch_indices: list[list[int]] = []

    def __iter__(self) -> Iterator[list[int]]:
        self.seen_batch_indices = []
        for indices in self.batch_sampler:
            self.seen_batch_indices.append(list(indices))
            yield indices

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __getattr__(self, name: str) -> Any:  # the sampler's own attributes (batch_size, drop_last, sampler)
        return getattr(self.__dict__["batch_sampler"], name)
