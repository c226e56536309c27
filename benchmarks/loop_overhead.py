"""Per-step time of the same tiny loop through Fabric and through plain PyTorch, one process (target <= 1.03x).

Both sides read a *shuffled* ``DataLoader`` (plain PyTorch iterates it directly; Fabric gets the same
loader through ``fabric.setup_dataloaders``, which adds exact resumption). Three loops, each a pair:

* ``ratio``: forward, backward, step, zero_grad;
* ``accumulation_ratio``: 4 micro-batches per optimizer step (``Fabric(grad_accum_steps=4)`` and
  ``fabric.accumulate``, against dividing the loss by 4 and stepping every 4th batch by hand);
* ``clipping_ratio``: gradient-norm clipping before each step (``fabric.clip_gradients`` against
  ``torch.nn.utils.clip_grad_norm_``).

The two loops of a pair run one optimizer step each in turn (:class:`benchmarks.common.StepPairs`),
pairs in turn over the repeats. Each ratio is Fabric's median step time over plain PyTorch's, over
every step of every repeat: on a shared machine whose speed drifts from second to second, pairing
steps keeps that drift out of the ratio. ``*_epoch_ratio`` compares the median epoch time instead, and
``*_cpu_time_ratio`` the median processor time of a step.

``instruction_steps > 0`` also counts instructions per step of each loop under valgrind
(:mod:`benchmarks.instructions`: ``instructions_ratio``, ``accumulation_instructions_ratio``,
``clipping_instructions_ratio``), a figure a busy machine does not move; "not available" without valgrind.

Each pair starts from the same weights and reads the same batches (each loader has its own generator
seeded alike), so the final losses must be equal: the benchmark fails if they are not.

Run: ``python -m benchmarks.loop_overhead [--steps 300 --repeats 15]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.common import StepPairs, tiny_data, tiny_mlp

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


def plain_steps(
    variant: str, model: nn.Module, optimizer: torch.optim.Optimizer, loader: Any, last: list
) -> Iterator[None]:
    """One epoch of the hand-written PyTorch loop, pausing after each optimizer step; ``last`` receives
    the final loss."""
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
        yield
    last[:] = [loss.detach()]


def fabric_steps(variant: str, fabric: Any, model: Any, optimizer: Any, loader: Any, last: list) -> Iterator[None]:
    """The same epoch written for Fabric, pausing after each optimizer step."""
    if variant == "accumulation":
        for index, (x, y) in enumerate(loader):
            with fabric.accumulate(model):
                loss = nn.functional.mse_loss(model(x), y)
                fabric.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            if (index + 1) % ACCUMULATION == 0:
                yield
    else:
        clipping = variant == "clipping"
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            fabric.backward(loss)
            if clipping:
                fabric.clip_gradients(model, optimizer, max_norm=MAX_NORM)
            optimizer.step()
            optimizer.zero_grad()
            yield
    last[:] = [loss.detach()]


def check_losses(last: dict[str, list]) -> None:
    """Fail unless every Fabric loop ended with exactly the loss of its plain PyTorch twin."""
    for variant in VARIANTS:
        plain, fabricx = last[f"plain_{variant}"][0], last[f"fabricx_{variant}"][0]
        if not torch.equal(plain, fabricx):
            raise AssertionError(
                f"{variant}: the Fabric loop ended with loss {fabricx.item()!r}, plain PyTorch with {plain.item()!r}"
            )


def measure(steps: int = 300, repeats: int = 15, instruction_steps: int = 0) -> dict[str, Any]:
    result = _measure_time(steps, repeats)
    if instruction_steps > 0:
        from benchmarks.instructions import measure_instructions

        result.update(measure_instructions(world=1, steps=instruction_steps))
    return result


def _measure_time(steps: int, repeats: int) -> dict[str, Any]:
    from fabricx import Fabric

    torch.set_num_threads(1)
    # Whole accumulation windows only: fabricx scales a shorter last window by its real length.
    steps = -(-steps // ACCUMULATION) * ACCUMULATION
    dataset = as_dataset(tiny_data(steps))
    pairs: dict[str, Callable[[], tuple[Iterator[None], Iterator[None]]]] = {}
    last: dict[str, list] = {}
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
        pairs[variant] = lambda a=args, f=fargs: (plain_steps(*a), fabric_steps(*f))
    clock = StepPairs()
    run_pairs(clock, pairs, repeats)
    check_losses(last)
    return ratios(clock, last, prefix="")


def run_pairs(
    clock: StepPairs,
    pairs: dict[str, Callable[[], tuple[Iterator[None], Iterator[None]]]],
    repeats: int,
    before_each: Callable[[], None] = lambda: None,
) -> None:
    """One warm-up epoch of each pair, then ``repeats`` epochs of each, pairs in turn."""
    for repeat in range(repeats + 1):
        if repeat == 1:
            clock.clear()
        for variant, make in pairs.items():
            before_each()
            plain, fabricx = make()
            clock.run((f"plain_{variant}", plain), (f"fabricx_{variant}", fabricx))


def ratios(clock: StepPairs, last: dict[str, list], prefix: str) -> dict[str, float]:
    """Fabric over plain PyTorch for each loop: median step time (``ratio``, ``<variant>_ratio``), median
    epoch time (``*_epoch_ratio``) and median processor time per step (``*_cpu_time_ratio``)."""
    result: dict[str, float] = {
        f"plain_{prefix}us_per_step": clock.median_step("plain_plain") * 1e6,
        f"fabricx_{prefix}us_per_step": clock.median_step("fabricx_plain") * 1e6,
    }
    for variant in VARIANTS:
        plain, fabricx = f"plain_{variant}", f"fabricx_{variant}"
        key = "ratio" if variant == "plain" else f"{variant}_ratio"
        result[key] = clock.median_step(fabricx) / clock.median_step(plain)
        result[f"{variant}_epoch_ratio"] = clock.median_epoch(fabricx) / clock.median_epoch(plain)
        # Processor time: less sensitive to other work on a busy machine than the wall-clock ratio.
        result[f"{variant}_cpu_time_ratio"] = clock.median_cpu(fabricx) / clock.median_cpu(plain)
    result["final_loss"] = last["plain_plain"][0].item()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--instruction-steps", type=int, default=0, help="also count instructions (valgrind)")
    args = parser.parse_args()
    print(json.dumps(measure(args.steps, args.repeats, args.instruction_steps), indent=2))


if __name__ == "__main__":
    main()
