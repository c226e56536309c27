"""Checkpoint save/load throughput, and how long a save blocks the training loop, on a ~200 MB model.

Throughput: the baseline is ``torch.save(model.state_dict())`` / ``torch.load(..., weights_only=True)``.
``fabric.save`` also writes RNG states and metadata and makes the checkpoint durable (fsync, then an
atomic rename), which ``torch.save`` does not; ``torch_save_fsync`` is the baseline made durable the
same way, so the cost of durability and the cost of fabricx can be told apart.

Blocking: the model's weights plus Adam's two moments (3x the weights, ~600 MB) are saved the way a
training loop would, and the time the loop is blocked is compared with ``torch.save`` + fsync of the
same state in the same run: ``fabric.save`` (synchronous, durable when it returns) and
``fabric.save(..., async_save=True)``. The asynchronous save returns once buffers, gradients and values
are copied; parameters and optimizer state are copied by the background thread while the loop runs the
next training step (forward and backward of a 16-row batch), whose ``optimizer.step()`` waits until that
copy is done. Its blocked time is the call plus that wait (``async_call_s`` + ``async_step_wait_s``);
``async_first_step_s`` is the whole first step after the call against ``train_step_s`` without a save (it
includes the wait and the background thread's competition for the CPU); ``async_staged_s`` is the time
from the call until the copy is done (what a step following at once would wait for:
``blocked_async_worst_ratio``); the write and the commit are ``async_background_s``. The peak extra
resident memory of each save, sampled every few milliseconds, is reported in MB and as a multiple of the
state (the host buffers an asynchronous save keeps for reuse by the next one count as extra memory).

Run: ``python -m benchmarks.checkpoint_io [--megabytes 200 --repeats 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from benchmarks.common import interleaved


def model_of_size(megabytes: float) -> nn.Module:
    """A stack of square float32 linear layers holding about ``megabytes`` MB of parameters."""
    width = 1024
    layer_bytes = (width * width + width) * 4
    layers = max(1, round(megabytes * 1e6 / layer_bytes))
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])


def _fsync(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@contextmanager
def peak_rss(result: dict[str, int], interval: float = 0.002) -> Iterator[None]:
    """Sample this process's resident memory while the block runs; ``result["extra"]``: peak minus start."""
    start = _rss_bytes()
    peak = [start]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _rss_bytes())
            stop.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield
    finally:
        stop.set()
        sampler.join()
        result["extra"] = max(peak[0], _rss_bytes()) - start


def _pooled_bytes() -> int:
    from fabricx.checkpoint.background import staging_buffers

    return staging_buffers.held_bytes()


def measure_blocking(megabytes: float = 200, repeats: int = 3) -> dict[str, float]:
    """Seconds a save blocks the loop (sync, async) vs torch.save + fsync of the same weights + Adam state."""
    from fabricx import Fabric

    torch.manual_seed(0)
    model = model_of_size(megabytes)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    fabric = Fabric(accelerator="cpu")
    model, optimizer = fabric.setup(model, optimizer)
    model(torch.randn(4, 1024)).sum().backward()
    optimizer.step()  # Adam's moments exist: the state is 3x the weights
    optimizer.zero_grad()  # saved where a loop saves, between steps (no gradients to store)
    state = {"model": model, "optimizer": optimizer, "step": 1}
    plain = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    tensors = [*plain["model"].values()] + [
        value for entry in plain["optimizer"]["state"].values() for value in entry.values()
    ]
    state_mb = sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor)) / 1e6
    root = Path(tempfile.mkdtemp(prefix="fabricx-bench-block-"))
    durable_file = root / "durable.pt"
    counter = iter(range(10**6))
    names = ("torch_fsync", "sync", "async", "async_call", "async_step_wait", "async_first_step", "train_step")
    samples: dict[str, list[float]] = {name: [] for name in (*names, "async_staged", "async_background")}
    peaks: dict[str, list[int]] = {"torch_fsync": [], "sync": [], "async": []}
    batch = torch.randn(16, 1024)

    def train_step() -> None:
        fabric.backward(model(batch).square().mean())
        optimizer.step()
        optimizer.zero_grad()

    def torch_fsync() -> None:
        torch.save(plain, durable_file)
        _fsync(durable_file)

    def fresh_dir() -> Path:
        for old in root.glob("ckpt_*"):
            shutil.rmtree(old, ignore_errors=True)
        return root / f"ckpt_{next(counter)}"

    try:
        # Warm-up: the first save of each kind pays one-off costs (imports, the staging buffers' first use).
        torch_fsync()
        fabric.save(fresh_dir(), state)
        handle = fabric.save(fresh_dir(), state, async_save=True)
        assert handle is not None
        handle.wait()
        train_step()
        for _ in range(repeats):
            peak: dict[str, int] = {}
            with peak_rss(peak):
                samples["torch_fsync"].append(_timed(torch_fsync))
            peaks["torch_fsync"].append(peak["extra"])
            target = fresh_dir()
            with peak_rss(peak):
                samples["sync"].append(_timed(lambda target=target: fabric.save(target, state)))
            peaks["sync"].append(peak["extra"])
            target = fresh_dir()
            held = _pooled_bytes()  # host buffers kept from the previous asynchronous save count as extra
            with peak_rss(peak):
                start = time.perf_counter()
                handle = fabric.save(target, state, async_save=True)
                assert handle is not None
                handle.wait_staged()  # what a step right after the call would wait for
                samples["async_staged"].append(time.perf_counter() - start)
                handle.wait()
                samples["async_background"].append(time.perf_counter() - start)
            peaks["async"].append(peak["extra"] + held)
            # The loop goes on after an asynchronous save: the call, then the next step (which may wait).
            samples["train_step"].append(_timed(train_step))
            target = fresh_dir()
            start = time.perf_counter()
            handle = fabric.save(target, state, async_save=True)
            call = time.perf_counter() - start
            assert handle is not None
            samples["async_first_step"].append(_timed(train_step))
            samples["async_call"].append(call)
            samples["async_step_wait"].append(handle.step_wait_s)
            samples["async"].append(call + handle.step_wait_s)
            handle.wait()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    seconds = {name: statistics.median(values) for name, values in samples.items()}
    result: dict[str, float] = {"blocking_state_mb": state_mb}
    for name, value in seconds.items():
        result[f"{name}_s"] = value
    result["blocked_sync_ratio"] = seconds["sync"] / seconds["torch_fsync"]
    result["blocked_async_ratio"] = seconds["async"] / seconds["torch_fsync"]
    # If the next optimizer.step() came at once (no forward/backward in between): the whole copy blocks.
    result["blocked_async_worst_ratio"] = seconds["async_staged"] / seconds["torch_fsync"]
    for name, values in peaks.items():
        result[f"peak_extra_{name}_mb"] = max(values) / 1e6
    result["peak_extra_sync_state_ratio"] = max(peaks["sync"]) / 1e6 / state_mb
    result["peak_extra_async_state_ratio"] = max(peaks["async"]) / 1e6 / state_mb
    return result


def measure(megabytes: float = 200, repeats: int = 3) -> dict[str, float]:
    """Median save and load seconds and MB/s of each method, ratios against torch.save / torch.load, and
    the blocking figures of :func:`measure_blocking`."""
    result = measure_throughput(megabytes, repeats)
    result.update(measure_blocking(megabytes, repeats))
    return result


def measure_throughput(megabytes: float = 200, repeats: int = 3) -> dict[str, float]:
    """Median save and load seconds and MB/s of each method; ratios against torch.save / torch.load."""
    from safetensors.torch import load_file, save_file

    from fabricx import Fabric

    torch.manual_seed(0)
    model = model_of_size(megabytes)
    state = model.state_dict()
    size_mb = sum(t.numel() * t.element_size() for t in state.values()) / 1e6
    fabric = Fabric(accelerator="cpu")
    fabric_model = fabric.setup_module(model)
    root = Path(tempfile.mkdtemp(prefix="fabricx-bench-"))
    torch_file, durable_file = root / "model.pt", root / "durable.pt"
    safetensors_file, fabric_dir = root / "model.safetensors", root / "fabricx_ckpt"

    def torch_save() -> None:
        torch.save(state, torch_file)

    def torch_save_fsync() -> None:
        torch.save(state, durable_file)
        _fsync(durable_file)

    def safetensors_save() -> None:
        save_file(state, safetensors_file)

    def fabricx_save() -> None:
        if fabric_dir.exists():
            shutil.rmtree(fabric_dir)
        fabric.save(fabric_dir, {"model": fabric_model})

    try:
        saves = {
            "torch": torch_save,
            "torch_fsync": torch_save_fsync,
            "safetensors": safetensors_save,
            "fabricx": fabricx_save,
        }
        for save in saves.values():
            save()  # warm-up, and the files the loads below read
        save_s = interleaved({name: (lambda fn=fn: _timed(fn)) for name, fn in saves.items()}, repeats)

        loads = {
            "torch": lambda: torch.load(torch_file, weights_only=True),
            "safetensors": lambda: load_file(safetensors_file),
            "fabricx": lambda: fabric.load(fabric_dir, {"model": fabric_model}),
        }
        for load in loads.values():
            load()
        load_s = interleaved({name: (lambda fn=fn: _timed(fn)) for name, fn in loads.items()}, repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    result: dict[str, float] = {"state_mb": size_mb}
    for name, seconds in save_s.items():
        result[f"save_{name}_mb_per_s"] = size_mb / seconds
    for name, seconds in load_s.items():
        result[f"load_{name}_mb_per_s"] = size_mb / seconds
    result["save_safetensors_ratio"] = save_s["safetensors"] / save_s["torch"]
    result["save_fabricx_ratio"] = save_s["fabricx"] / save_s["torch"]
    result["save_fabricx_vs_durable_ratio"] = save_s["fabricx"] / save_s["torch_fsync"]
    result["load_safetensors_ratio"] = load_s["safetensors"] / load_s["torch"]
    result["load_fabricx_ratio"] = load_s["fabricx"] / load_s["torch"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--megabytes", type=float, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(measure(args.megabytes, args.repeats), indent=2))


if __name__ == "__main__":
    main()
