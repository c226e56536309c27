"""``ThroughputMonitor``: samples/s, items/s, FLOP/s and MFU of a Trainer run, logged and in the progress bar."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from fabricx.train.callbacks.base import Callback
from fabricx.utilities.device_flops import peak_flops as data_sheet_peak_flops
from fabricx.utilities.throughput import Throughput, compute_dtype

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer

_RATES = ("batches_per_sec", "samples_per_sec", "items_per_sec", "flops_per_sec")


class ThroughputMonitor(Callback):
    """Measure training throughput; log it every ``log_every_n_steps`` batches and show it in the progress bar.

    Each rank counts its own batches in a `fabricx.utilities.Throughput`; once its window of ``window_size``
    batches is full, the rates are logged summed over ranks: ``throughput/samples_per_sec``,
    ``throughput/batches_per_sec``, with ``length_fn`` also ``throughput/items_per_sec`` (e.g. tokens), and with
    FLOPs per batch (the argument, or a ``flops_per_batch`` attribute of the module)
    ``throughput/flops_per_sec`` and ``throughput/mfu``. With several ranks, per-rank values are logged under
    ``throughput/device/`` too.

    Args:
        batch_size_fn: Samples in a batch (default: the first dimension of the batch's first tensor).
        length_fn: Items (tokens) in a batch, if they are counted.
        flops_per_batch: FLOPs of one training batch (forward and backward), e.g. from
            `fabricx.utilities.measure_flops`.
        peak_flops: Peak FLOP/s of one device (default: the dense data sheet value for a known GPU).
        window_size: How many recent batches the rates are averaged over (rates appear once that many ran).
        log_every_n_steps: How often the rates are computed and logged.

    Example:
        ```python
        monitor = ThroughputMonitor(length_fn=lambda batch: batch[0].numel())
        trainer = Trainer(callbacks=[monitor])
        ```
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
        Throughput(window_size=window_size)  # the same argument checks as the class it uses
        self._batch_size_fn = batch_size_fn or _first_dimension
        self._length_fn = length_fn
        self._flops_per_batch = flops_per_batch
        self._peak_flops = peak_flops
        self._window_size = window_size
        self._every = log_every_n_steps
        self._throughput: Throughput | None = None
        self._start = 0.0
        self._batches = 0
        self._samples = 0
        self._lengths = 0
        self.last_metrics: dict[str, float] = {}

    def on_train_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        fabric = trainer.fabric
        peak = self._peak_flops
        if peak is None:
            peak = data_sheet_peak_flops(fabric.device, compute_dtype(fabric.precision))
        # One device's own rates (world_size=1): the sum over ranks is measured, not assumed.
        self._throughput = Throughput(available_flops=peak, window_size=self._window_size)
        self._start = time.perf_counter()
        self._batches = self._samples = self._lengths = 0

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: TrainModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        throughput = self._throughput
        if throughput is None:
            return
        flops = self._flops_per_batch
        if flops is None:
            flops = getattr(pl_module, "flops_per_batch", None)
        self._batches += 1
        self._samples += self._batch_size_fn(batch)
        lengths = None
        if self._length_fn is not None:
            self._lengths += self._length_fn(batch)
            lengths = self._lengths
        device = trainer.fabric.device
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # time the work, not its queueing
        throughput.update(
            time=time.perf_counter() - self._start, batches=self._batches, samples=self._samples, lengths=lengths,
            flops=flops,
        )  # fmt: skip
        if self._batches % self._every:
            return
        metrics = self._global_rates(trainer, throughput)  # every rank takes part in the sum
        if not metrics:
            return
        self.last_metrics = metrics
        named = {f"throughput/{name}": value for name, value in metrics.items()}
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(named, step=trainer.progress.batches_that_stepped)
        for name in ("samples_per_sec", "items_per_sec", "mfu"):
            if name in metrics:  # the progress bar shows these until the next measurement
                pl_module.log(
                    f"throughput/{name}", metrics[name], on_step=True, on_epoch=False, prog_bar=True, logger=False
                )

    def _global_rates(self, trainer: Trainer, throughput: Throughput) -> dict[str, float]:
        """This rank's rates summed over ranks (and, with several, each rank's own under ``device/``)."""
        computed = throughput.compute()
        local = {name: float(computed[f"device/{name}"]) for name in _RATES if f"device/{name}" in computed}
        if not local:
            return {}  # the window is not full yet (the same on every rank: each counts its own batches)
        if "device/mfu" in computed:
            local["mfu"] = float(computed["device/mfu"])
        names = [name for name in local if name != "mfu"]
        fabric = trainer.fabric
        world_size = fabric.world_size
        metrics: dict[str, float] = {}
        values = torch.tensor([local[name] for name in names], dtype=torch.float64)
        if world_size > 1:
            values = fabric.all_reduce(values.to(fabric.device), reduce_op="sum").cpu()
            metrics.update({f"device/{name}": value for name, value in local.items()})
        metrics.update({name: float(value) for name, value in zip(names, values.tolist(), strict=True)})
        if "mfu" in local and throughput.available_flops:
            metrics["mfu"] = metrics["flops_per_sec"] / (throughput.available_flops * world_size)
        return metrics


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
