"""Checkpoint save/load throughput on a ~200 MB model: torch.save, safetensors and ``fabric.save``.

The baseline is ``torch.save(model.state_dict())`` / ``torch.load(..., weights_only=True)``.
``fabric.save`` also writes RNG states and metadata and makes the checkpoint durable (fsync, then an
atomic rename), which ``torch.save`` does not; ``torch_save_fsync`` is the baseline made durable the
same way, so the cost of durability and the cost of fabricx can be told apart.

Run: ``python -m benchmarks.checkpoint_io [--megabytes 200 --repeats 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
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


def measure(megabytes: float = 200, repeats: int = 3) -> dict[str, float]:
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
