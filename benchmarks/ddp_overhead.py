"""Per-step time of the tiny loop on 2 CPU processes: Fabric DDP against hand-written torch DDP.

Both loops run in the same two processes on the same gloo process group (set up once by Fabric),
so the only difference is the per-step path: ``FabricModule.forward``, ``fabric.backward``,
``FabricOptimizer.step``/``zero_grad`` and ``FabricDataLoader`` iteration against a bare
``DistributedDataParallel`` loop over the same batches. Runs alternate; each figure is the median
over repeats of rank 0's time per step (ranks move in lockstep through the gradient all-reduce).
``ratio`` compares with a bare loop over in-memory batches (target: <= 1.05);
``vs_torch_dataloader_ratio`` with the same DDP loop reading a ``DataLoader`` + ``DistributedSampler``.

Run: ``python -m benchmarks.ddp_overhead [--steps 200 --repeats 5] [--profile]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch
from torch import nn

from benchmarks.common import interleaved, tiny_data, tiny_mlp

WORLD_SIZE = 2


def measure(steps: int = 200, repeats: int = 5, profile: bool = False) -> dict[str, float]:
    from fabricx import Fabric
    from fabricx.strategies import DDPStrategy

    fabric = Fabric(
        accelerator="cpu", devices=WORLD_SIZE, strategy=DDPStrategy(start_method="spawn", timeout=120)
    )
    return fabric.launch(_compare, steps, repeats, profile)


def _compare(fabric: Any, steps: int, repeats: int, profile: bool) -> dict[str, float]:
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DistributedSampler

    torch.set_num_threads(1)
    rank, world = fabric.global_rank, fabric.world_size
    # The same batches for both loops: rank r takes batches r, r + world, ... (the distributed sampler's split).
    data = tiny_data(steps * world)
    own_batches = data[rank::world]

    torch.manual_seed(0)
    plain_model = DistributedDataParallel(tiny_mlp())
    plain_optimizer = torch.optim.SGD(plain_model.parameters(), lr=0.01)

    torch.manual_seed(0)
    model = tiny_mlp()
    fabric_model, fabric_optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
    loader = fabric.setup_dataloaders(torch.utils.data.DataLoader(data, batch_size=None))
    assert len(loader) == len(own_batches) == steps

    def plain_loop() -> None:
        for x, y in own_batches:
            loss = nn.functional.mse_loss(plain_model(x), y)
            loss.backward()
            plain_optimizer.step()
            plain_optimizer.zero_grad()

    def fabric_loop() -> None:
        for x, y in loader:
            loss = nn.functional.mse_loss(fabric_model(x), y)
            fabric.backward(loss)
            fabric_optimizer.step()
            fabric_optimizer.zero_grad()

    # What a hand-written DDP script that shards its data needs too: a DataLoader with a DistributedSampler.
    torch_loader = torch.utils.data.DataLoader(
        data, batch_size=None, sampler=DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False)
    )

    def plain_loader_loop() -> None:
        for x, y in torch_loader:
            loss = nn.functional.mse_loss(plain_model(x), y)
            loss.backward()
            plain_optimizer.step()
            plain_optimizer.zero_grad()

    wall: dict[str, list[float]] = {"plain": [], "plain_loader": [], "fabricx": []}
    cpu: dict[str, list[float]] = {"plain": [], "plain_loader": [], "fabricx": []}

    def timed(name: str, loop: Any) -> float:
        fabric.barrier()  # both ranks start together, so neither waits for the other inside the loop
        start, start_cpu = time.perf_counter(), time.process_time()
        loop()
        cpu[name].append((time.process_time() - start_cpu) / steps)
        wall[name].append((time.perf_counter() - start) / steps)
        return wall[name][-1]

    plain_loop(), plain_loader_loop(), fabric_loop()  # warm-up
    medians = interleaved(
        {
            "plain": lambda: timed("plain", plain_loop),
            "plain_loader": lambda: timed("plain_loader", plain_loader_loop),
            "fabricx": lambda: timed("fabricx", fabric_loop),
        },
        repeats,
    )
    cpu_medians = {name: statistics.median(values) for name, values in cpu.items()}
    result = {
        "plain_ddp_us_per_step": medians["plain"] * 1e6,
        "plain_ddp_with_dataloader_us_per_step": medians["plain_loader"] * 1e6,
        "fabricx_ddp_us_per_step": medians["fabricx"] * 1e6,
        "ratio": medians["fabricx"] / medians["plain"],
        "vs_torch_dataloader_ratio": medians["fabricx"] / medians["plain_loader"],
        # Fastest repeat and processor time (all threads): less sensitive to other work on a busy machine.
        "best_repeat_ratio": min(wall["fabricx"]) / min(wall["plain"]),
        "cpu_time_ratio": cpu_medians["fabricx"] / cpu_medians["plain"],
    }
    if profile:
        result.update(_profile_parts(fabric, fabric_model, fabric_optimizer, loader, plain_model, own_batches))
    return result


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
    args = parser.parse_args()
    print(json.dumps(measure(args.steps, args.repeats, args.profile), indent=2))


if __name__ == "__main__":
    main()
