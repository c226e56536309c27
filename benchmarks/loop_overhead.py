"""Per-step time of the same tiny loop through Fabric and through plain PyTorch (ratio; target <= 1.05x).

Run: ``python -m benchmarks.loop_overhead [--steps 300 --repeats 15]``
"""

from __future__ import annotations

import argparse
import json

import torch
from torch import nn

from benchmarks.common import interleaved, timed, tiny_data, tiny_mlp


def measure(steps: int = 300, repeats: int = 15) -> dict[str, float]:
    from fabricx import Fabric

    torch.set_num_threads(1)
    data = tiny_data(steps)

    torch.manual_seed(0)
    plain_model = tiny_mlp()
    plain_optimizer = torch.optim.SGD(plain_model.parameters(), lr=0.01)

    torch.manual_seed(0)
    fabric = Fabric(accelerator="cpu")
    model = tiny_mlp()
    fabric_model, fabric_optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
    loader = fabric.setup_dataloaders(torch.utils.data.DataLoader(data, batch_size=None))

    def plain_loop() -> None:
        for x, y in data:
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

    plain_loop(), fabric_loop()  # warm-up
    medians = interleaved(
        {"plain": lambda: timed(plain_loop, steps), "fabricx": lambda: timed(fabric_loop, steps)}, repeats
    )
    return {
        "plain_us_per_step": medians["plain"] * 1e6,
        "fabricx_us_per_step": medians["fabricx"] * 1e6,
        "ratio": medians["fabricx"] / medians["plain"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    result = measure(args.steps, args.repeats)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
