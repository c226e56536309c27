"""Shared helpers: interleaved timing and the tiny workload every overhead benchmark uses."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator

import torch
from torch import nn


def tiny_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))


def tiny_data(steps: int, batch: int = 32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [
        (torch.randn(batch, 32, generator=generator), torch.randn(batch, 1, generator=generator)) for _ in range(steps)
    ]


def interleaved(runs: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """Call each run ``repeats`` times in alternation; return the median seconds per step of each."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            samples[name].append(run())
    return {name: statistics.median(values) for name, values in samples.items()}


_ENDED = object()


class StepPairs:
    """Times two training loops written as generators that yield after every optimizer step, by
    running them one step each in turn: both sides meet the same machine at the same moment, so a
    machine that slows down for a second slows both alike (alternating whole epochs does not).

    Every step's wall-clock and processor time is kept by name; who goes first alternates between
    calls with the same pair. The figures are medians over all steps of all calls.

    Example::

        pairs = StepPairs()
        pairs.run(("plain", plain_steps()), ("fabricx", fabric_steps()))
        ratio = pairs.median_step("fabricx") / pairs.median_step("plain")
    """

    def __init__(self) -> None:
        self.step_seconds: dict[str, list[float]] = {}
        self.cpu_seconds: dict[str, list[float]] = {}
        self.epoch_seconds: dict[str, list[float]] = {}
        self._calls: dict[tuple[str, str], int] = {}

    def run(self, first: tuple[str, Iterator[None]], second: tuple[str, Iterator[None]]) -> None:
        pair = (first[0], second[0])
        calls = self._calls.get(pair, 0)
        self._calls[pair] = calls + 1
        sides = [first, second] if calls % 2 == 0 else [second, first]
        walls = [self.step_seconds.setdefault(name, []) for name, _ in sides]
        cpus = [self.cpu_seconds.setdefault(name, []) for name, _ in sides]
        counts = [len(wall) for wall in walls]
        live = [True, True]
        clock, cpu_clock = time.perf_counter, time.process_time
        while live[0] or live[1]:
            for index, (_, steps) in enumerate(sides):
                if not live[index]:
                    continue
                start, start_cpu = clock(), cpu_clock()
                step = next(steps, _ENDED)
                wall, cpu = clock() - start, cpu_clock() - start_cpu
                if step is _ENDED:  # the epoch is over
                    live[index] = False
                    continue
                walls[index].append(wall)
                cpus[index].append(cpu)
        for (name, _), wall, count in zip(sides, walls, counts, strict=True):
            self.epoch_seconds.setdefault(name, []).append(sum(wall[count:]))

    def clear(self) -> None:
        for samples in (self.step_seconds, self.cpu_seconds, self.epoch_seconds):
            samples.clear()
        self._calls.clear()

    def median_step(self, name: str) -> float:
        return statistics.median(self.step_seconds[name])

    def median_cpu(self, name: str) -> float:
        return statistics.median(self.cpu_seconds[name])

    def median_epoch(self, name: str) -> float:
        return statistics.median(self.epoch_seconds[name])


def timed(fn: Callable[[], None], steps: int) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) / steps


def free_port() -> int:
    """A TCP port nobody listens on now (for a process group's rendezvous)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
