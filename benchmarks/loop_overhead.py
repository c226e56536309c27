"""Per-step time of the same tiny loop through Fabric and through plain PyTorch, one process (target <= 1.03x).

Both sides read a *shuffled* ``DataLoader`` (plain PyTorch iterates it directly; Fabric gets the same
loader through ``fabric.setup_dataloaders``, which adds exact resumption). Three loops, each timed as
a pair, pairs interleaved over the repeats, median time per step of each:

* ``ratio``: forward, backward, step, zero_grad;
* ``accumulation_ratio``: 4 micro-batches per optimizer step (``Fabric(grad_accum_steps=4)`` and
  ``fabric.accumulate``, against dividing the loss by 4 and stepping every 4th batch by hand);
* ``clipping_ratio``: gradient-norm clipping before each step (``fabric.clip_gradients`` against
  ``torch.nn.utils.clip_grad_norm_``).

``*_cpu_time_ratio`` compares processor time instead of wall-clock time (steadier on a loaded machine).

Each pair starts from the same weights and reads the same batches (each loader has its own generator
seeded alike), so the final losses must be equal: the benchmark fails if they are not.

Run: ``python -m benchmarks.loop_overhead [--steps 300 --repeats 15]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.common import interleaved, tiny_data, tiny_mlp

ACCUMULATION = 4
MAX_NORM = 1.0
VARIANTS = ("plain", "accumulation", "clipping")


def shuffled_loader(dataset: TensorDataset, sampler: Any = None) -> DataLoader:
    """Batches of 32 in a shuffled order (its own generator, so loaders built alike agree)."""
    generator = torch.Generator().manual_seed(0)
    if sampler is not None:
        return DataLoader(dataset, batch_size=32, sampler=sampler, generator=generator)
    return DataLoader(dataset, batch_size=32, shuffle=True, generator=generator)


def as_dataset(batches: list[tuple[torch.Tensor, torch.Tensor]]) -> TensorDataset:
    return TensorDataset(torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches]))


def plain_loop(variant: str, model: nn.Module, optimizer: torch.optim.Optimizer, loader: Any, last: list) -> None:
    """The hand-written PyTorch loop; ``last`` receives the final loss."""
    for index, (x, y) in enumerate(loader):
        if variant == "accumulation":
            boundary = (index + 1) % ACCUMULATION == 0
            with contextlib.nullcontext() if boundary or not hasattr(model, "no_sync") else model.no_sync():
                loss = nn.functional.mse_loss(model(x), y)
                (loss / ACCUMULATION).backward()
            if not boundary:
                continue
        else:
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
        if variant == "clipping":
            torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        optimizer.step()
        optimizer.zero_grad()
    last[:] = [loss.detach()]


def fabric_loop(variant: str, fabric: Any, model: Any, optimizer: Any, loader: Any, last: list) -> None:
    """The same loop written for Fabric."""
    if variant == "accumulation":
        for x, y in loader:
            with fabric.accumulate(model):
                loss = nn.functional.mse_loss(model(x), y)
                fabric.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
    else:
        clipping = variant == "clipping"
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            fabric.backward(loss)
            if clipping:
                fabric.clip_gradients(model, optimizer, max_norm=MAX_NORM)
            optimizer.step()
            optimizer.zero_grad()
    last[:] = [loss.detach()]


def check_losses(last: dict[str, list]) -> None:
    """Fail unless every Fabric loop ended with exactly the loss of its plain PyTorch twin."""
    for variant in VARIANTS:
        plain, fabricx = last[f"plain_{variant}"][0], last[f"fabricx_{variant}"][0]
        if not torch.equal(plain, fabricx):
            raise AssertionError(
                f"{variant}: the Fabric loop ended with loss {fabricx.item()!r}, plain PyTorch with {plain.item()!r}"
            )


def measure(steps: int = 300, repeats: int = 15) -> dict[str, float]:
    from fabricx import Fabric

    torch.set_num_threads(1)
    # Whole accumulation windows only: fabricx scales a shorter last window by its real length.
    steps = -(-steps // ACCUMULATION) * ACCUMULATION
    dataset = as_dataset(tiny_data(steps))
    runs: dict[str, Callable[[], float]] = {}
    last: dict[str, list] = {}
    cpu: dict[str, list[float]] = {}

    def timed(name: str, loop: Callable[[], None]) -> float:
        start, start_cpu = time.perf_counter(), time.process_time()
        loop()
        cpu.setdefault(name, []).append((time.process_time() - start_cpu) / steps)
        return (time.perf_counter() - start) / steps

    for variant in VARIANTS:
        torch.manual_seed(0)
        plain_model = tiny_mlp()
        plain_optimizer = torch.optim.SGD(plain_model.parameters(), lr=0.01)
        plain_data = shuffled_loader(dataset)

        fabric = Fabric(accelerator="cpu", grad_accum_steps=ACCUMULATION if variant == "accumulation" else 1)
        torch.manual_seed(0)
        model = tiny_mlp()
        fabric_model, fabric_optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
        fabric_data = fabric.setup_dataloaders(shuffled_loader(dataset))

        plain_last, fabric_last = last.setdefault(f"plain_{variant}", []), last.setdefault(f"fabricx_{variant}", [])
        args = (variant, plain_model, plain_optimizer, plain_data, plain_last)
        fargs = (variant, fabric, fabric_model, fabric_optimizer, fabric_data, fabric_last)
        runs[f"plain_{variant}"] = lambda a=args, n=f"plain_{variant}": timed(n, lambda: plain_loop(*a))
        runs[f"fabricx_{variant}"] = lambda a=fargs, n=f"fabricx_{variant}": timed(n, lambda: fabric_loop(*a))
    for run in runs.values():  # warm-up (one epoch each; both sides of a pair stay in step)
        run()
    cpu.clear()
    medians = interleaved(runs, repeats)
    cpu_medians = {name: statistics.median(values) for name, values in cpu.items()}
    check_losses(last)
    result: dict[str, float] = {
        "plain_us_per_step": medians["plain_plain"] * 1e6,
        "fabricx_us_per_step": medians["fabricx_plain"] * 1e6,
    }
    for variant in VARIANTS:
        key = "ratio" if variant == "plain" else f"{variant}_ratio"
        result[key] = medians[f"fabricx_{variant}"] / medians[f"plain_{variant}"]
        # Processor time: less sensitive to other work on a busy machine than the wall-clock ratio.
        result[f"{variant}_cpu_time_ratio"] = cpu_medians[f"fabricx_{variant}"] / cpu_medians[f"plain_{variant}"]
    result["final_loss"] = last["plain_plain"][0].item()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    print(json.dumps(measure(args.steps, args.repeats), indent=2))


if __name__ == "__main__":
    main()
