"""How fast training runs, with Lightning Fabric's API: ``Throughput``, ``ThroughputMonitor``, ``measure_flops``.

``Throughput`` takes cumulative counts (time, batches, samples, optionally lengths) and per-update FLOPs and gives
per-second rates over a window of the most recent updates, under Lightning's keys: ``device/samples_per_sec``
and so on for one device, and with ``world_size > 1`` the global rates (the device's times ``world_size``).
``ThroughputMonitor`` does the same on global rank 0 of a Fabric run and logs the result.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from fabricx.utilities.device_flops import (
    PEAK_FLOPS,
    get_available_flops,
    measure_cpu_peak_flops,
    peak_flops,
    peak_flops_for,
)
from fabricx.utilities.rank_zero import rank_zero_only

if TYPE_CHECKING:
    from fabricx.fabric import Fabric

__all__ = [
    "PEAK_FLOPS",
    "Throughput",
    "ThroughputMonitor",
    "get_available_flops",
    "measure_cpu_peak_flops",
    "measure_flops",
    "peak_flops",
    "peak_flops_for",
]


class _InvalidThroughputArgument(ValueError, AssertionError):
    """A constructor argument out of range (an ``AssertionError`` too, the type Lightning's asserts raise)."""


class _IncreasingWindow:
    """The last ``maxlen`` values of a count that must grow with every update (else a ``ValueError``)."""

    __slots__ = ("maxlen", "values")

    def __init__(self, maxlen: int) -> None:
        self.maxlen = maxlen
        self.values: list[Any] = []

    def append(self, value: Any) -> None:
        if self.values and value <= self.values[-1]:
            raise ValueError(
                f"Expected the value to increase, last: {self.values[-1]}, current: {value}. Throughput.update() "
                "takes running totals (time since the start, batches and samples so far), not per-step amounts."
            )
        self.values.append(value)
        if len(self.values) > self.maxlen:
            del self.values[0]

    @property
    def full(self) -> bool:
        return len(self.values) == self.maxlen

    def __len__(self) -> int:
        return len(self.values)

    def clear(self) -> None:
        self.values.clear()


class Throughput:
    """Rates over the ``window_size`` most recent updates: batches, samples, items (lengths) and FLOPs per second.

    Keys of `compute`: ``time``, ``batches``, ``samples`` (and ``lengths``) hold the last totals; once the
    window is full, ``device/batches_per_sec``, ``device/samples_per_sec`` (and ``device/items_per_sec``);
    once ``window_size`` updates carried ``flops``, ``device/flops_per_sec`` and, with ``available_flops``,
    ``device/mfu``. With ``world_size > 1`` also ``batches_per_sec``, ``samples_per_sec``, ``items_per_sec`` and
    ``flops_per_sec`` for all devices together (the device's rate times ``world_size``). ``separator`` replaces
    the ``/`` in those names.

    Args:
        available_flops: Peak FLOP/s of one device (e.g. from `get_available_flops`), for the MFU.
        world_size: How many devices run alike (global rates are only reported for more than one).
        window_size: How many updates the rates are computed over (at least 2).
        separator: What joins ``device`` and the rate's name.

    Example:
        ```python
        throughput = Throughput(window_size=10)
        start = time.perf_counter()
        for step in range(1, 101):
            train_step()
            elapsed = time.perf_counter() - start
            throughput.update(time=elapsed, batches=step, samples=step * batch_size)
            if step % 10 == 0:
                print(throughput.compute()["device/samples_per_sec"])
        ```
    """

    def __init__(
        self, available_flops: float | None = None, world_size: int = 1, window_size: int = 100, separator: str = "/"
    ) -> None:
        if world_size <= 0:
            raise _InvalidThroughputArgument(f"world_size={world_size} must be at least 1.")
        if window_size <= 1:
            raise _InvalidThroughputArgument(f"window_size={window_size} must be at least 2 (rates need two points).")
        self.available_flops = available_flops
        self.world_size = world_size
        self.separator = separator
        self._time = _IncreasingWindow(window_size)
        self._batches = _IncreasingWindow(window_size)
        self._samples = _IncreasingWindow(window_size)
        self._lengths = _IncreasingWindow(window_size)
        # FLOPs of each update (not a running total), summed over the devices.
        self._flops: deque[float] = deque(maxlen=window_size)

    def update(
        self, *, time: float, batches: int, samples: int, lengths: int | None = None, flops: float | None = None
    ) -> None:
        """Record the totals so far on this device and the FLOPs done since the previous update.

        Args:
            time: Seconds since the start; must grow with every update.
            batches: Batches so far on this device; must grow.
            samples: Samples so far on this device (at least ``batches``); must grow.
            lengths: Items (e.g. tokens) so far on this device (at least ``samples``); must grow, and be given
                in every update once given.
            flops: FLOPs of this device since the previous update (e.g. `measure_flops` times the batches).
        """
        self._time.append(time)
        if samples < batches:
            raise ValueError(f"Expected samples ({samples}) to be greater or equal than batches ({batches})")
        self._batches.append(batches)
        self._samples.append(samples)
        if lengths is not None:
            if lengths < samples:
                raise ValueError(f"Expected lengths ({lengths}) to be greater or equal than samples ({samples})")
            self._lengths.append(lengths)
            if len(self._lengths) != len(self._samples):
                raise RuntimeError(
                    f"If lengths are passed ({len(self._lengths)}), there needs to be the same number of samples "
                    f"({len(self._samples)}): pass lengths to every update() from the first one (or since reset()), "
                    "or to none."
                )
        if flops is not None:
            self._flops.append(flops * self.world_size)

    def compute(self) -> dict[str, int | float]:
        """The last totals and, once the window is full, the rates over it (see the class for the keys)."""
        if not self._time.values:
            raise IndexError("Throughput.compute() needs at least one update() first.")
        times = self._time.values
        metrics: dict[str, int | float] = {
            "time": times[-1],
            "batches": self._batches.values[-1],
            "samples": self._samples.values[-1],
        }
        if self._lengths.values:
            metrics["lengths"] = self._lengths.values[-1]
        device = f"device{self.separator}"
        world_size = self.world_size
        if self._time.full:
            elapsed = times[-1] - times[0]
            batches_per_sec = (self._batches.values[-1] - self._batches.values[0]) / elapsed
            samples_per_sec = (self._samples.values[-1] - self._samples.values[0]) / elapsed
            metrics[f"{device}batches_per_sec"] = batches_per_sec
            metrics[f"{device}samples_per_sec"] = samples_per_sec
            if world_size > 1:
                metrics["batches_per_sec"] = batches_per_sec * world_size
                metrics["samples_per_sec"] = samples_per_sec * world_size
            if self._lengths.full:
                items_per_sec = (self._lengths.values[-1] - self._lengths.values[0]) / elapsed
                metrics[f"{device}items_per_sec"] = items_per_sec
                if world_size > 1:
                    metrics["items_per_sec"] = items_per_sec * world_size
        if len(self._flops) == self._flops.maxlen:
            # The first update's FLOPs were done before the window's first time stamp.
            flops_per_sec = (sum(self._flops) - self._flops[0]) / (times[-1] - times[0])
            if world_size > 1:
                metrics["flops_per_sec"] = flops_per_sec
            device_flops_per_sec = flops_per_sec / world_size
            metrics[f"{device}flops_per_sec"] = device_flops_per_sec
            if self.available_flops:
                metrics[f"{device}mfu"] = device_flops_per_sec / self.available_flops
        return metrics

    def reset(self) -> None:
        """Forget every update."""
        for window in (self._time, self._batches, self._samples, self._lengths):
            window.clear()
        self._flops.clear()


class ThroughputMonitor(Throughput):
    """`Throughput` for a Fabric run: the device's peak FLOP/s for the run's precision, the Fabric's world
    size, and `compute_and_log` to its loggers. Every method acts on global rank 0 only (elsewhere `compute`
    returns ``{}``), so call them on every rank without a collective.

    Args:
        fabric: The (launched) Fabric.
        **kwargs: ``window_size`` and ``separator`` of `Throughput`.

    Example:
        ```python
        throughput = ThroughputMonitor(fabric, window_size=50)
        start = time.perf_counter()
        for step, batch in enumerate(loader, 1):
            ...
            elapsed = time.perf_counter() - start
            throughput.update(time=elapsed, batches=step, samples=step * len(batch))
            if step % 50 == 0:
                throughput.compute_and_log(step=step)
        ```
    """

    def __init__(self, fabric: Fabric, **kwargs: Any) -> None:
        fabric._require_launched("ThroughputMonitor")  # the world size is only known once launched
        available_flops = get_available_flops(fabric.device, compute_dtype(fabric.precision))
        super().__init__(available_flops=available_flops, world_size=fabric.world_size, **kwargs)
        self._fabric = fabric
        self.step = -1

    def update(
        self, *, time: float, batches: int, samples: int, lengths: int | None = None, flops: float | None = None
    ) -> None:
        if rank_zero_only.rank == 0:
            super().update(time=time, batches=batches, samples=samples, lengths=lengths, flops=flops)

    def compute(self) -> dict[str, int | float]:
        if rank_zero_only.rank != 0:
            return {}
        return super().compute()

    def reset(self) -> None:
        if rank_zero_only.rank == 0:
            super().reset()

    def compute_and_log(self, step: int | None = None, **kwargs: Any) -> dict[str, int | float]:
        """`compute`, then ``fabric.log_dict`` at ``step`` (by default one more than the last logged step)."""
        if rank_zero_only.rank != 0:
            return {}
        self.step = self.step + 1 if step is None else step
        metrics = self.compute(**kwargs)
        self._fabric.log_dict(metrics=metrics, step=self.step)
        return metrics


def compute_dtype(precision: Any) -> torch.dtype:
    """The dtype matrix products run in under a fabricx precision plugin (the one Lightning picks for the same
    precision flag: the autocast or parameter dtype, float32 for ``"32-true"``).

    Example:
        ```python
        compute_dtype(fabric.precision)  # torch.bfloat16 with precision="bf16-mixed"
        ```
    """
    dtype = getattr(precision, "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) else torch.float32


def measure_flops(
    model: nn.Module,
    forward_fn: Callable[[], torch.Tensor],
    loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> int:
    """FLOPs of one call of ``forward_fn`` and, with ``loss_fn``, of the backward of ``loss_fn(output)`` too.

    Counted by ``torch.utils.flop_counter.FlopCounterMode``. Build the model and inputs on the meta device to
    count without computing; on a real model, the backward leaves its gradients in ``.grad`` (as Lightning's).

    Example:
        ```python
        with torch.device("meta"):
            model = MyModel()
            x = torch.randn(8, 128)
        flops_per_batch = measure_flops(model, lambda: model(x), lambda y: y.sum())
        ```
    """
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        if loss_fn is None:
            forward_fn()
        else:
            loss_fn(forward_fn()).backward()
    return counter.get_total_flops()
