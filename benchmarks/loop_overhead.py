"""Per-step time of the same tiny loop through Fabric and through plain PyTorch (target <= 1.05x).

Two comparisons, interleaved in one run:

* ``ratio``: the same loop with a data loader on both sides (torch's ``DataLoader`` for plain PyTorch,
  ``fabric.setup_dataloaders`` of the same loader for Fabric, which adds exact resumption).
* ``ratio_no_loader``: both loops iterate an in-memory list of batches, which isolates what Fabric adds
  around forward, backward, step and zero_grad.

Run: ``python -m benchmarks.loop_overhead [--steps 300 --repeats 15]``
"""

from __future__ import annotations

import argparse
import json

import torch
from torch import nn
from torch.utils.data import DataLoader

from benchmarks.common import interleaved, timed, tiny_data, tiny_mlp


def measure(steps: int = 300, repeats: int = 15) -> dict[str, float]:
    from fabricx import Fabric

    torch.set_num_threads(1)
    data = tiny_data(steps)

    torch.manual_seed(0)
    plain_model = tiny_mlp()
    plain_optimizer = torch.optim.SGD(plain_model.parameters(), lr=0.01)
    plain_loader = DataLoader(data, batch_size=None)

    torch.manual_seed(0)
    fabric = Fabric(accelerator="cpu")
    model = tiny_mlp()
    fabric_model, fabric_optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
    fabric_loader = fabric.setup_dataloaders(DataLoader(data, batch_size=None))

    def plain_loop(batches) -> None:
        for x, y in batches:
            loss = nn.functional.mse_loss(plain_model(x), y)
            loss.backward()
            plain_optimizer.step()
            plain_optimizer.zero_grad()

    def fabric_loop(batches) -> None:
        for x, y in batches:
            loss = nn.functional.mse_loss(fabric_model(x), y)
            fabric.backward(loss)
            fabric_optimizer.step()
            fabric_optimizer.zero_grad()

    runs = {
        "plain_loader": lambda: timed(lambda: plain_loop(plain_loader), steps),
        "fabricx_loader": lambda: timed(lambda: fabric_loop(fabric_loader), steps),
        "plain_list": lambda: timed(lambda: plain_loop(data), steps),
        "fabricx_list": lambda: timed(lambda: fabric_loop(data), steps),
    }
    for run in runs.values():  # warm-up
        run()
    medians = interleaved(runs, repeats)
    return {
        "plain_us_per_step": medians["plain_loader"] * 1e6,
        "fabricx_us_per_step": medians["fabricx_loader"] * 1e6,
        "ratio": medians["fabricx_loader"] / medians["plain_loader"],
        "plain_no_loader_us_per_step": medians["plain_list"] * 1e6,
        "fabricx_no_loader_us_per_step": medians["fabricx_list"] * 1e6,
        "ratio_no_loader": medians["fabricx_list"] / medians["plain_list"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    print(json.dumps(measure(args.steps, args.repeats), indent=2))


if __name__ == "__main__":
    main()
