"""Batches per second of the tiny loop fed by two persistent worker processes: a loader set up by
``fabric.setup_dataloaders`` against the same plain ``DataLoader`` (target >= 0.98x).

Both loaders are ``DataLoader(num_workers=2, persistent_workers=True, shuffle=True)`` over the same
in-memory dataset, each with its own seeded generator; fabricx's adds exact resumption (the position
is saved in checkpoints, see tests/resume/test_workers_resume.py). The loop is that of
:mod:`benchmarks.loop_overhead` (forward, backward, step), so the figure is what a user sees: a loader
that costs more per batch slows the loop only where the workers cannot keep ahead. Epochs of the two
take turns after one warm-up epoch each (which also starts the persistent workers);
``batches_per_s_ratio`` is fabricx's median epoch rate over the plain loader's, ``ratio`` its inverse
(time, lower is better). Both loops see the same batches, so their final losses must be equal.

fabricx's loader snapshots its position and its workers' state every ``snapshot_every_n_steps`` batches; a resume
reads the batches since the last snapshot again. ``resume_s_at_snapshot`` is the time from ``load_state_dict`` of
a state saved right at a snapshot to the first resumed batch (new workers), ``resume_s_worst_offset`` the same for
a state saved ``snapshot_every_n_steps - 1`` batches later (the most a resume reads again), medians of three.

Run: ``python -m benchmarks.loader_workers [--batches 200 --repeats 5]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from benchmarks.common import tiny_data, tiny_mlp
from benchmarks.loop_overhead import as_dataset


def _loader(dataset: Any) -> DataLoader:
    return DataLoader(
        dataset, batch_size=32, shuffle=True, num_workers=2, persistent_workers=True,
        generator=torch.Generator().manual_seed(0),
    )


def _epoch(model: nn.Module, optimizer: Any, loader: Any, backward: Any) -> tuple[float, torch.Tensor]:
    start = time.perf_counter()
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    return time.perf_counter() - start, loss.detach()


def measure(batches: int = 200, repeats: int = 5) -> dict[str, float]:
    from fabricx import Fabric

    torch.set_num_threads(1)
    dataset = as_dataset(tiny_data(batches))
    torch.manual_seed(0)
    plain_model = tiny_mlp()
    plain_optimizer = torch.optim.SGD(plain_model.parameters(), lr=0.01)
    plain_loader = _loader(dataset)
    fabric = Fabric(accelerator="cpu", devices=1)
    torch.manual_seed(0)
    model = tiny_mlp()
    fabric_model, fabric_optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
    fabric_loader = fabric.setup_dataloaders(_loader(dataset))
    sides = {
        "plain": lambda: _epoch(plain_model, plain_optimizer, plain_loader, lambda loss: loss.backward()),
        "fabricx": lambda: _epoch(fabric_model, fabric_optimizer, fabric_loader, fabric.backward),
    }
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    losses: dict[str, torch.Tensor] = {}
    for repeat in range(repeats + 1):
        order = list(sides) if repeat % 2 == 0 else list(sides)[::-1]
        for name in order:
            elapsed, losses[name] = sides[name]()
            if repeat > 0:  # the first epoch starts the workers
                seconds[name].append(elapsed)
    if not torch.equal(losses["plain"], losses["fabricx"]):
        plain, fabricx = losses["plain"].item(), losses["fabricx"].item()
        raise AssertionError(f"final losses differ: plain {plain!r}, fabricx {fabricx!r}")
    rate = {name: batches / statistics.median(values) for name, values in seconds.items()}
    fabric_loader.shutdown_workers()
    return {
        "plain_batches_per_s": rate["plain"],
        "fabricx_batches_per_s": rate["fabricx"],
        "batches_per_s_ratio": rate["fabricx"] / rate["plain"],
        "ratio": rate["plain"] / rate["fabricx"],
        **resume_cost(fabric, dataset),
    }


def resume_cost(fabric: Any, dataset: Any, repeats: int = 3) -> dict[str, float]:
    """Seconds from ``load_state_dict`` to the first resumed batch, for a state saved at a snapshot and for one
    saved the most batches after it."""
    interval = fabric.setup_dataloaders(_loader(dataset)).loader.snapshot_every_n_steps
    result: dict[str, float] = {"snapshot_every_n_steps": interval}
    for name, stop in {"resume_s_at_snapshot": interval, "resume_s_worst_offset": 2 * interval - 1}.items():
        saving = fabric.setup_dataloaders(_loader(dataset))
        iterator = iter(saving)
        for _ in range(stop):
            next(iterator)
        state = saving.state_dict()
        saving.shutdown_workers()
        seconds = []
        for _ in range(repeats):
            resumed = fabric.setup_dataloaders(_loader(dataset))
            start = time.perf_counter()
            resumed.load_state_dict(state)
            next(iter(resumed))
            seconds.append(time.perf_counter() - start)
            resumed.shutdown_workers()
        result[name] = statistics.median(seconds)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(measure(args.batches, args.repeats), indent=2))


if __name__ == "__main__":
    main()
