"""FLOP counting, rates over a window, MFU, and the monitor in a Fabric loop and a Trainer."""

from __future__ import annotations

import csv
import time

import pytest
import torch
from torch import nn

from fabricx import Fabric
from fabricx.callbacks import ThroughputMonitor as ThroughputCallback
from fabricx.loggers import CSVLogger
from fabricx.train import Trainer
from fabricx.utilities.throughput import (
    Throughput,
    ThroughputMonitor,
    measure_cpu_peak_flops,
    measure_flops,
    peak_flops,
    peak_flops_for,
)
from tests.train._train_helpers import Regressor, loader, regression_data

SIZES = [(32, 64), (64, 48), (48, 8)]


def _linear_stack() -> nn.Sequential:
    layers: list[nn.Module] = []
    for fan_in, fan_out in SIZES:
        layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def test_flops_of_a_linear_stack_equal_the_analytic_count():
    batch = 16
    forward = sum(2 * batch * fan_in * fan_out for fan_in, fan_out in SIZES)
    # Backward: weight gradients of every layer, input gradients of all but the first (x needs none).
    backward = forward + sum(2 * batch * fan_in * fan_out for fan_in, fan_out in SIZES[1:])
    model = _linear_stack()
    x = torch.randn(batch, 32)
    assert measure_flops(model, lambda: model(x)) == forward
    assert measure_flops(model, lambda: model(x), lambda out: out.sum()) == forward + backward
    assert all(p.grad is not None for p in model.parameters())  # left in .grad, as Lightning does
    with torch.device("meta"):  # counted without computing
        meta_model = _linear_stack()
        meta_x = torch.empty(batch, 32)
    assert measure_flops(meta_model, lambda: meta_model(meta_x)) == forward


def test_rates_and_mfu_over_the_window():
    throughput = Throughput(window_size=3, available_flops=1000.0)
    throughput.update(time=2.0, batches=1, samples=8, lengths=80)
    # No rates before the window is full.
    assert throughput.compute() == {"time": 2.0, "batches": 1, "samples": 8, "lengths": 80}
    for step in range(2, 6):  # 2 s per step, 8 samples, 80 items and 400 FLOPs each
        throughput.update(time=2.0 * step, batches=step, samples=8 * step, lengths=80 * step, flops=400.0)
    rates = throughput.compute()  # the last 3 updates: steps 3..5, 4 s
    assert rates == pytest.approx({
        "time": 10.0, "batches": 5, "samples": 40, "lengths": 400, "device/batches_per_sec": 0.5,
        "device/samples_per_sec": 4.0, "device/items_per_sec": 40.0, "device/flops_per_sec": 200.0,
        "device/mfu": 0.2,
    })  # fmt: skip
    with pytest.raises(ValueError, match="Expected the value to increase"):
        throughput.update(time=1.0, batches=6, samples=48)
    with pytest.raises(ValueError, match="at least 2"):
        Throughput(window_size=1)
    with pytest.raises(AssertionError):  # the type Lightning's check raises, too
        Throughput(world_size=0)


def test_peak_flops_table_by_device_name_and_dtype():
    assert peak_flops_for("NVIDIA H100 80GB HBM3", "bf16") == 989.4e12
    assert peak_flops_for("NVIDIA H100 PCIe", "bf16") == 756.5e12
    assert peak_flops_for("NVIDIA H200", "fp32") == 66.9e12
    assert peak_flops_for("NVIDIA A100-SXM4-80GB", "bf16") == 312e12
    assert peak_flops_for("Some Other GPU", "bf16") is None
    assert peak_flops("cpu", torch.float32) is None  # no data sheet value: measure it when asked
    assert measure_cpu_peak_flops(size=128, seconds=0.05) > 1e6


def test_monitor_logs_rates_of_a_fabric_loop(tmp_path):
    logger = CSVLogger(tmp_path, name="run")
    fabric = Fabric(accelerator="cpu", devices=1, loggers=logger)
    model = _linear_stack()
    x = torch.randn(16, 32)
    flops = measure_flops(model, lambda: model(x), lambda out: out.sum())
    monitor = ThroughputMonitor(fabric, window_size=4)
    assert monitor.available_flops is None and monitor.world_size == 1  # no figure for a CPU
    start = time.perf_counter()
    for step in range(1, 6):
        model(x).sum().backward()
        monitor.update(time=time.perf_counter() - start, batches=step, samples=16 * step, lengths=512 * step,
                       flops=flops)  # fmt: skip
    metrics = monitor.compute_and_log()
    assert monitor.step == 0
    assert metrics["device/samples_per_sec"] == pytest.approx(16 * metrics["device/batches_per_sec"])
    assert metrics["device/items_per_sec"] == pytest.approx(32 * metrics["device/samples_per_sec"])
    assert metrics["device/flops_per_sec"] > 0 and "samples_per_sec" not in metrics  # one device: no global keys
    logger.finalize("success")
    with open(logger.metrics_file_path, newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    assert float(row["device/samples_per_sec"]) == pytest.approx(metrics["device/samples_per_sec"])
    assert int(row["step"]) == 0


def test_trainer_callback_logs_throughput(tmp_path):
    trainer = Trainer(
        accelerator="cpu", max_epochs=1, default_root_dir=tmp_path, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False,
        callbacks=[ThroughputCallback(log_every_n_steps=2, window_size=3, flops_per_batch=1e6, peak_flops=1e10)],
    )
    trainer.fit(Regressor(), loader(regression_data(64), batch_size=8))
    callback = next(cb for cb in trainer.callbacks if isinstance(cb, ThroughputCallback))
    assert callback.last_metrics["samples_per_sec"] == pytest.approx(8 * callback.last_metrics["batches_per_sec"])
    assert callback.last_metrics["mfu"] == pytest.approx(callback.last_metrics["flops_per_sec"] / 1e10)
    with open(trainer.loggers[0].metrics_file_path, newline="") as handle:
        logged = [row for row in csv.DictReader(handle) if row.get("throughput/samples_per_sec")]
    assert len(logged) == 3  # batches 4, 6, 8 (the window of 3 batches is full from batch 3)


def _two_rank_rates(fabric: Fabric) -> list[dict[str, float]]:
    trainer_like = type("T", (), {"fabric": fabric})()
    callback = ThroughputCallback(window_size=3, peak_flops=1e9)
    callback.on_train_start(trainer_like, None)  # type: ignore[arg-type]
    batch = 8 * (fabric.global_rank + 1)
    assert callback._throughput is not None
    for step in range(1, 5):
        torch.mm(torch.randn(64, 64), torch.randn(64, 64))
        callback._throughput.update(time=0.01 * step * (fabric.global_rank + 1), batches=step, samples=batch * step,
                                    flops=1e5 * batch)  # fmt: skip
    metrics = callback._global_rates(trainer_like, callback._throughput)  # type: ignore[arg-type]
    return [metrics, fabric.all_gather(torch.tensor(metrics["device/samples_per_sec"])).tolist()]


@pytest.mark.distributed
def test_trainer_callback_sums_rates_over_ranks():
    fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp_spawn")
    metrics, per_rank = fabric.launch(_two_rank_rates)
    assert metrics["samples_per_sec"] == pytest.approx(sum(per_rank))
    assert metrics["mfu"] == pytest.approx(metrics["flops_per_sec"] / (2 * 1e9))
    assert metrics["device/mfu"] == pytest.approx(metrics["device/flops_per_sec"] / 1e9)
