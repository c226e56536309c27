"""Per-step time of the tiny loop on 2 CPU processes: Fabric DDP against hand-written torch DDP (target <= 1.03x).

Both loops run in the same two processes on the same gloo process group (set up once by Fabric) and
read a *shuffled* loader: plain PyTorch a ``DataLoader`` with a ``DistributedSampler`` (``set_epoch``
before each epoch), Fabric the same kind of ``DataLoader`` given to ``fabric.setup_dataloaders``. The
loops are those of :mod:`benchmarks.loop_overhead` (``ratio``: plain; ``accumulation_ratio``: 4
micro-batches per step, with ``no_sync`` by hand against ``fabric.accumulate``; ``clipping_ratio``:
gradient-norm clipping), run one optimizer step each in turn, pairs in turn over the repeats. Each
ratio is of the median of rank 0's step times over all steps of all repeats (ranks move in lockstep
through the gradient all-reduce), ``*_epoch_ratio`` of the median epoch time, ``*_cpu_time_ratio`` of
the median processor time of a step (all threads, gloo's included). ``control_ratio`` times two
identical hand-written DDP loops the same way: its distance from 1.0 is the noise of that run. Both
sides of a pair see the same batches from the same weights, so their final losses must be equal (checked).

``instruction_steps > 0`` also counts instructions per step of each loop on each rank under valgrind
(:mod:`benchmarks.instructions`: ``rank0_instructions_ratio``, ``rank1_accumulation_instructions_ratio``,
...), a unit that contention on a 2-core machine does not move, unlike the wall-clock ratios beside the
control's spread; "not available" without valgrind.

Run: ``python -m benchmarks.ddp_overhead [--steps 200 --repeats 5] [--profile] [--instruction-steps 20]``
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch
from torch import nn

from benchmarks.common import StepPairs, tiny_data, tiny_mlp
from benchmarks.loop_overhead import (
    ACCUMULATION,
    VARIANTS,
    as_dataset,
    check_losses,
    fabric_steps,
    plain_steps,
    ratios,
    run_pairs,
    shuffled_loader,
)

WORLD_SIZE = 2


def measure(steps: int = 200, repeats: int = 5, profile: bool = False, instruction_steps: int = 0) -> dict[str, Any]:
    result = _measure_time(steps, repeats, profile)
    if instruction_steps > 0:
        from benchmarks.instructions import measure_instructions

        result.update(measure_instructions(world=WORLD_SIZE, steps=instruction_steps))
    return result


def _measure_time(steps: int, repeats: int, profile: bool) -> dict[str, Any]:
    from fabricx import Fabric
    from fabricx.strategies import DDPStrategy

    fabric = Fabric(
        accelerator="cpu",
        devices=WORLD_SIZE,
        strategy=DDPStrategy(start_method="spawn", timeout=120),
        grad_accum_steps=ACCUMULATION,  # used by the accumulation loop only (the others never call accumulate())
    )
    return fabric.launch(_compare, steps, repeats, profile)


def _compare(fabric: Any, steps: int, repeats: int, profile: bool) -> dict[str, float]:
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DistributedSampler

    torch.set_num_threads(1)
    # Whole accumulation windows only: fabricx scales a shorter last window by its real length.
    steps = -(-steps // ACCUMULATION) * ACCUMULATION
    rank, world = fabric.global_rank, fabric.world_size
    dataset = as_dataset(tiny_data(steps * world))
    last: dict[str, list] = {}
    pairs: dict[str, Any] = {}
    pieces: dict[str, Any] = {}
    for variant in VARIANTS:
        torch.manual_seed(0)
        plain_model = DistributedDataParallel(tiny_mlp())
        plain_optimizer = torch.optim.SGD(plain_model.parameters(), lr=0.01)
        # What a hand-written DDP script does: a DistributedSampler, and set_epoch before every epoch.
        sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
        plain_data = shuffled_loader(dataset, sampler=sampler)

        torch.manual_seed(0)
        model = tiny_mlp()
        fabric_model, fabric_optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
        fabric_data = fabric.setup_dataloaders(shuffled_loader(dataset))
        assert len(fabric_data) == len(plain_data) == steps

        plain_last, fabric_last = last.setdefault(f"plain_{variant}", []), last.setdefault(f"fabricx_{variant}", [])

        def plain_epoch(v=variant, m=plain_model, o=plain_optimizer, d=plain_data, out=plain_last) -> Any:
            d.sampler.set_epoch(d.sampler.epoch + 1 if out else 0)
            return plain_steps(v, m, o, d, out)

        def make_pair(v=variant, m=fabric_model, o=fabric_optimizer, d=fabric_data, out=fabric_last, p=plain_epoch):
            return p(), fabric_steps(v, fabric, m, o, d, out)

        pairs[variant] = make_pair
        if variant == "plain":
            pieces = {"model": fabric_model, "optimizer": fabric_optimizer, "loader": fabric_data, "ddp": plain_model}
    pairs["control"] = _control_pair(dataset, rank, world)
    clock = StepPairs()
    # Both ranks start each pair together, so neither waits for the other inside the loops.
    run_pairs(clock, pairs, repeats, before_each=fabric.barrier)
    check_losses(last)
    result = ratios(clock, last, prefix="ddp_")
    # Two identical hand-written DDP loops timed like a pair: how far from 1.0 noise alone moves a ratio.
    result["control_ratio"] = clock.median_step("fabricx_control") / clock.median_step("plain_control")
    if profile:
        batches = [batch for batch in pieces["loader"]]
        result.update(
            _profile_parts(fabric, pieces["model"], pieces["optimizer"], pieces["loader"], pieces["ddp"], batches)
        )
    return result


def _control_pair(dataset: Any, rank: int, world: int) -> Any:
    """A pair of the same hand-written DDP loop (plain variant), built twice alike."""
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DistributedSampler

    sides = []
    for _ in range(2):
        torch.manual_seed(0)
        model = DistributedDataParallel(tiny_mlp())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
        sides.append((model, optimizer, shuffled_loader(dataset, sampler=sampler), []))

    def make_pair() -> tuple[Any, Any]:
        epochs = []
        for model, optimizer, loader, out in sides:
            loader.sampler.set_epoch(loader.sampler.epoch + 1)
            epochs.append(plain_steps("plain", model, optimizer, loader, out))
        return epochs[0], epochs[1]

    return make_pair


def _profile_parts(
    fabric: Any, fabric_model: Any, fabric_optimizer: Any, loader: Any, plain_model: Any, batches: list
) -> dict[str, float]:
    """Microseconds of this thread's processor time per call of each piece of the per-step path,
    Fabric's and the bare one's (processor time: waiting for the other rank or the scheduler is left out).
    """
    x, y = batches[0]
    n = len(batches)

    def per_call(fn: Any, calls: int = n) -> float:
        fabric.barrier()
        start = time.thread_time()
        for _ in range(calls):
            fn()
        return (time.thread_time() - start) / calls * 1e6

    inner_optimizer = fabric_optimizer.optimizer
    parts = {
        "forward_fabricx_us": per_call(lambda: fabric_model(x)),
        "forward_ddp_us": per_call(lambda: plain_model(x)),
        "backward_fabricx_us": per_call(lambda: fabric.backward(nn.functional.mse_loss(fabric_model(x), y))),
        "backward_plain_us": per_call(lambda: nn.functional.mse_loss(plain_model(x), y).backward()),
        "step_fabricx_us": per_call(fabric_optimizer.step),
        "step_plain_us": per_call(inner_optimizer.step),
        "zero_grad_fabricx_us": per_call(fabric_optimizer.zero_grad),
        "zero_grad_plain_us": per_call(inner_optimizer.zero_grad),
    }
    start = time.thread_time()
    for _ in loader:
        pass
    parts["loader_fabricx_us"] = (time.thread_time() - start) / n * 1e6
    start = time.thread_time()
    for _ in batches:
        pass
    parts["loader_plain_us"] = (time.thread_time() - start) / n * 1e6
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="also time each piece of the per-step path")
    parser.add_argument("--instruction-steps", type=int, default=0, help="also count instructions (valgrind)")
    args = parser.parse_args()
    print(json.dumps(measure(args.steps, args.repeats, args.profile, args.instruction_steps), indent=2))


if __name__ == "__main__":
    main()
