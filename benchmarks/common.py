"""Shared helpers: interleaved timing and the tiny workload every overhead benchmark uses."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from torch import nn


def tiny_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))


def tiny_data(steps: int, batch: int = 32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [
        (torch.randn(batch, 32, generator=generator), torch.randn(batch, 1, generator=generator))
        for _ in range(steps)
    ]


def interleaved(runs: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """Call each run ``repeats`` times in alternation; return the median seconds per step of each."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            samples[name].append(run())
    return {name: statistics.median(values) for name, values in samples.items()}


def timed(fn: Callable[[], None], steps: int) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) / steps
