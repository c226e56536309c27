"""``ThroughputMonitor``: samples/s, items/s, FLOP/s and MFU of a Trainer run, logged and in the progress bar."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from fabricx.train.callbacks.base import Callback
from fabricx.utilities.throughput import ThroughputMonitor as _FabricThroughputMonitor

if TYPE_CHECKING:
    from fabricx.train.module import TrainModule
    from fabricx.train.trainer import Trainer


class ThroughputMonitor(Callback):
    """Measure training throughput; log it every ``log_every_n_steps`` batches and show it in the progress bar.

    Logged (summed over ranks): ``throughput/samples_per_sec``, ``throughput/batches_per_sec``, with
    ``length_fn`` also ``throughput/items_per_sec`` (e.g. tokens), and with FLOPs per batch (the argument,
    or a ``flops_per_batch`` attribute of the module) ``throughput/flops_per_sec`` and ``throughput/mfu``.
    With several ranks, per-rank values are logged under ``throughput/device/`` too.

    Args:
        batch_size_fn: Samples in a batch (default: the first dimension of the batch's first tensor).
        length_fn: Items (tokens) in a batch, if they are counted.
        flops_per_batch: FLOPs of one training batch (forward and backward), e.g. from
            :func:`fabricx.utilities.throughput.measure_flops`.
        peak_flops: Peak FLOP/s of one device (default: the data sheet value for a known GPU).
        window_size: How many recent batches the rates are averaged over.
        log_every_n_steps: How often the rates are computed and logged.

    Example::

        trainer = Trainer(callbacks=[ThroughputMonitor(length_fn=lambda batch: batch[0].numel())])
    """

    def __init__(
        self,
        batch_size_fn: Callable[[Any], int] | None = None,
        length_fn: Callable[[Any], int] | None = None,
        flops_per_batch: float | None = None,
        peak_flops: float | None = None,
        window_size: int = 50,
        log_every_n_steps: int = 10,
    ) -> None:
        if log_every_n_steps < 1:
            raise ValueError(f"log_every_n_steps={log_every_n_steps} must be at least 1.")
        self._batch_size_fn = batch_size_fn or _first_dimension
        self._length_fn = length_fn
        self._flops_per_batch = flops_per_batch
        self._peak_flops = peak_flops
        self._window_size = window_size
        self._every = log_every_n_steps
        self._monitor: _FabricThroughputMonitor | None = None
        self._batches = 0
        self.last_metrics: dict[str, float] = {}

    def on_train_start(self, trainer: Trainer, module: TrainModule) -> None:
        self._monitor = _FabricThroughputMonitor(
            trainer.fabric, window_size=self._window_size, peak_flops=self._peak_flops
        )
        self._batches = 0

    def on_train_batch_end(
        self, trainer: Trainer, module: TrainModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._monitor is None:
            return
        flops = self._flops_per_batch if self._flops_per_batch is not None else getattr(module, "flops_per_batch", None)
        items = self._length_fn(batch) if self._length_fn is not None else None
        self._monitor.update(batch_size=self._batch_size_fn(batch), items=items, flops=flops)
        self._batches += 1
        if self._batches % self._every:
            return
        metrics = self._monitor.compute()  # every rank takes part in the sum
        if not metrics:
            return
        self.last_metrics = metrics
        named = {f"throughput/{name}": value for name, value in metrics.items()}
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(named, step=trainer.progress.batches_that_stepped)
        for name in ("samples_per_sec", "items_per_sec", "mfu"):
            if name in metrics:  # the progress bar shows these until the next measurement
                module.log(
                    f"throughput/{name}", metrics[name], on_step=True, on_epoch=False, prog_bar=True, logger=False
                )


def _first_dimension(batch: Any) -> int:
    from lightning_utilities.core.apply_func import apply_to_collection

    sizes: list[int] = []
    apply_to_collection(batch, torch.Tensor, lambda t: sizes.append(t.shape[0] if t.dim() else 1))
    if not sizes:
        raise ValueError(
            f"ThroughputMonitor found no tensor in a batch of type {type(batch).__name__}; pass "
            "batch_size_fn=lambda batch: ... to say how many samples a batch holds."
        )
    return sizes[0]
