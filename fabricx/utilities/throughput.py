"""How fast training runs: samples, items (tokens) and FLOPs per second, and model FLOPs utilisation (MFU)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from fabricx.fabric import Fabric

# Dense peak FLOP/s per device from the vendors' data sheets (no sparsity). "tf32" is fp32 matmuls with
# torch.backends.cuda.matmul.allow_tf32 (or set_float32_matmul_precision("high")).
PEAK_FLOPS: dict[str, dict[str, float]] = {
    "h200": {"bf16": 989.4e12, "fp16": 989.4e12, "tf32": 494.7e12, "fp32": 66.9e12, "fp8": 1978.9e12},
    "h100 sxm": {"bf16": 989.4e12, "fp16": 989.4e12, "tf32": 494.7e12, "fp32": 66.9e12, "fp8": 1978.9e12},
    "h100 nvl": {"bf16": 835.5e12, "fp16": 835.5e12, "tf32": 417.5e12, "fp32": 60.0e12, "fp8": 1670.5e12},
    "h100 pcie": {"bf16": 756.5e12, "fp16": 756.5e12, "tf32": 378.0e12, "fp32": 51.2e12, "fp8": 1513.0e12},
    "a100": {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12},
    "a10g": {"bf16": 125e12, "fp16": 125e12, "tf32": 62.5e12, "fp32": 31.2e12},
    "l4": {"bf16": 121e12, "fp16": 121e12, "tf32": 60e12, "fp32": 30.3e12},
    "v100": {"fp16": 125e12, "fp32": 15.7e12},
}
_DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64"}


def measure_flops(
    model: nn.Module, forward_fn: Callable[[], Any], loss_fn: Callable[[Any], torch.Tensor] | None = None
) -> int:
    """FLOPs of one call of ``forward_fn`` (and of the backward of ``loss_fn(output)`` when given).

    Counted by ``torch.utils.flop_counter.FlopCounterMode``; build the model on the meta device
    (``torch.device("meta")``) to count without computing.

    Example::

        with torch.device("meta"):
            model = MyModel()
            x = torch.randn(8, 128)
        flops_per_step = measure_flops(model, lambda: model(x), lambda y: y.sum())
    """
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        output = forward_fn()
        if loss_fn is not None:
            loss_fn(output).backward()
    if loss_fn is not None:
        model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def peak_flops(device: torch.device | str, dtype: torch.dtype | str = torch.bfloat16) -> float | None:
    """Peak FLOP/s of one ``device`` for ``dtype`` from :data:`PEAK_FLOPS`, or ``None`` where unknown.

    For the CPU there is no data sheet figure: use :func:`measure_cpu_peak_flops` and pass its result.

    Example::

        peak_flops(torch.device("cuda", 0), torch.bfloat16)  # 989.4e12 on an H100 SXM or H200
    """
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    name = dtype if isinstance(dtype, str) else _DTYPE_NAMES.get(dtype, str(dtype))
    if name == "fp32" and torch.backends.cuda.matmul.allow_tf32:
        name = "tf32"
    return peak_flops_for(torch.cuda.get_device_name(device), name)


def peak_flops_for(device_name: str, dtype_name: str) -> float | None:
    """The :data:`PEAK_FLOPS` entry for a device name as CUDA reports it (``"NVIDIA H100 80GB HBM3"``).

    Example::

        peak_flops_for("NVIDIA A100-SXM4-80GB", "bf16")  # 312e12
    """
    lowered = device_name.lower()
    for key in sorted(PEAK_FLOPS, key=len, reverse=True):
        if all(part in lowered for part in key.split()):
            return PEAK_FLOPS[key].get(dtype_name)
    if "h100" in lowered:  # the SXM part reports no form factor in its name ("NVIDIA H100 80GB HBM3")
        return PEAK_FLOPS["h100 sxm"].get(dtype_name)
    return None


_data_sheet_peak = peak_flops  # ThroughputMonitor's argument of the same name shadows it


def measure_cpu_peak_flops(dtype: torch.dtype = torch.float32, size: int = 1024, seconds: float = 0.5) -> float:
    """The FLOP/s this process reaches on square matrix products on the CPU (an achievable peak).

    Example::

        monitor = ThroughputMonitor(fabric, peak_flops=measure_cpu_peak_flops())
    """
    a = torch.randn(size, size, dtype=dtype)
    b = torch.randn(size, size, dtype=dtype)
    torch.mm(a, b)  # warm-up: first call allocates and picks kernels
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or calls < 2:
        torch.mm(a, b)
        calls += 1
    return 2.0 * size**3 * calls / elapsed


class Throughput:
    """Rates over a sliding window of steps, for one process, from cumulative counts.

    Call :meth:`update` after each step with the totals so far (time since start, batches, samples,
    optionally items such as tokens, and FLOPs); :meth:`compute` gives per-second rates over the last
    ``window_size`` updates and, with ``peak_flops``, the MFU.

    Example::

        throughput = Throughput(window_size=10, peak_flops=989e12)
        throughput.update(time=elapsed, batches=step, samples=step * 8, items=step * 8 * 1024, flops=step * f)
        throughput.compute()["samples_per_sec"]
    """

    def __init__(self, window_size: int = 100, peak_flops: float | None = None) -> None:
        if window_size < 2:
            raise ValueError(f"window_size={window_size} must be at least 2 (rates need two points).")
        self.peak_flops = peak_flops
        self._history: deque[tuple[float, int, int, int | None, float | None]] = deque(maxlen=window_size)

    def update(
        self, *, time: float, batches: int, samples: int, items: int | None = None, flops: float | None = None
    ) -> None:
        """Record the cumulative counts at ``time`` seconds."""
        if self._history and time <= self._history[-1][0]:
            raise ValueError(f"time={time} must increase from one update to the next (last: {self._history[-1][0]}).")
        self._history.append((time, batches, samples, items, flops))

    def compute(self) -> dict[str, float]:
        """Per-second rates over the window (empty until two updates exist)."""
        if len(self._history) < 2:
            return {}
        t0, b0, s0, i0, f0 = self._history[0]
        t1, b1, s1, i1, f1 = self._history[-1]
        elapsed = t1 - t0
        rates = {"batches_per_sec": (b1 - b0) / elapsed, "samples_per_sec": (s1 - s0) / elapsed}
        if i0 is not None and i1 is not None:
            rates["items_per_sec"] = (i1 - i0) / elapsed
        if f0 is not None and f1 is not None:
            rates["flops_per_sec"] = (f1 - f0) / elapsed
            if self.peak_flops:
                rates["mfu"] = rates["flops_per_sec"] / self.peak_flops
        return rates

    def reset(self) -> None:
        self._history.clear()


class ThroughputMonitor:
    """Measures throughput in a Fabric loop, sums it over all ranks and logs it to the Fabric's loggers.

    Per step, call :meth:`update` with how much this rank processed (FLOPs per batch from
    :func:`measure_flops`); :meth:`compute` (a collective: call it on every rank) returns the global
    rates (``samples_per_sec`` and so on summed over ranks, ``mfu`` against ``world_size`` devices) and
    with several ranks also this rank's own under ``device/``; :meth:`compute_and_log` also logs them.

    Args:
        fabric: The Fabric whose ranks and loggers are used.
        window_size: How many recent steps the rates are averaged over.
        peak_flops: Peak FLOP/s of one device (default: the data sheet value for this device and
            ``dtype``; on the CPU pass :func:`measure_cpu_peak_flops` to get an MFU).
        dtype: The dtype the matrix products run in, for the default ``peak_flops``.

    Example::

        monitor = ThroughputMonitor(fabric, window_size=20)
        for step, (x, y) in enumerate(loader, 1):
            ...
            monitor.update(batch_size=len(x), items=x.numel(), flops=flops_per_batch)
            if step % 20 == 0:
                monitor.compute_and_log(step=step)
    """

    def __init__(
        self,
        fabric: Fabric,
        window_size: int = 100,
        peak_flops: float | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        self._fabric = fabric
        if peak_flops is None:
            peak_flops = _data_sheet_peak(fabric.device, dtype or _precision_dtype(fabric))
        self.throughput = Throughput(window_size=window_size, peak_flops=peak_flops)
        self._start = time.perf_counter()
        self._batches = 0
        self._samples = 0
        self._items: int | None = None
        self._flops: float | None = None

    def update(self, batch_size: int, items: int | None = None, flops: float | None = None) -> None:
        """Count one finished step of this rank: ``batch_size`` samples, ``items`` (tokens), ``flops``."""
        self._batches += 1
        self._samples += batch_size
        if items is not None:
            self._items = (self._items or 0) + items
        if flops is not None:
            self._flops = (self._flops or 0.0) + flops
        if self._fabric.device.type == "cuda":
            torch.cuda.synchronize(self._fabric.device)  # time the work, not its queueing
        self.throughput.update(
            time=time.perf_counter() - self._start,
            batches=self._batches,
            samples=self._samples,
            items=self._items,
            flops=self._flops,
        )

    def compute(self) -> dict[str, float]:
        """Global and per-device rates (a collective call when there are several ranks)."""
        local = self.throughput.compute()
        if not local:
            return {}
        names = [name for name in local if name != "mfu"]
        world_size = self._fabric.world_size
        values = torch.tensor([local[name] for name in names], dtype=torch.float64)
        metrics: dict[str, float] = {}
        if world_size > 1:
            values = self._fabric.all_reduce(values.to(self._fabric.device), reduce_op="sum").cpu()
            metrics.update({f"device/{name}": value for name, value in local.items()})
        metrics.update({name: float(value) for name, value in zip(names, values.tolist(), strict=True)})
        if "mfu" in local and self.throughput.peak_flops:
            metrics["mfu"] = metrics["flops_per_sec"] / (self.throughput.peak_flops * world_size)
        return metrics

    def compute_and_log(self, step: int | None = None) -> dict[str, float]:
        """:meth:`compute`, then log the result with ``fabric.log_dict`` under ``throughput/``."""
        metrics = self.compute()
        if metrics:
            self._fabric.log_dict({f"throughput/{name}": value for name, value in metrics.items()}, step=step)
        return metrics


def _precision_dtype(fabric: Fabric) -> torch.dtype:
    precision = fabric.precision
    for attribute in ("_desired_input_dtype", "dtype", "_dtype"):
        dtype = getattr(precision, attribute, None)
        if isinstance(dtype, torch.dtype):
            return dtype
    return torch.float32
