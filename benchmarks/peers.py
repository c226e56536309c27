"""The tiny loop of ``loop_overhead`` through Lightning Fabric and Accelerate, where they are installed.

Each peer runs interleaved with plain PyTorch and fabricx in the same process, so the three ratios
are comparable. With neither peer installed only plain PyTorch and fabricx run, and the result says so.

Run: ``python -m benchmarks.peers [--steps 300 --repeats 15]``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from collections.abc import Callable, Iterable

import torch
from torch import nn

from benchmarks.common import interleaved, timed, tiny_data, tiny_mlp


def _loop(model: nn.Module, optimizer: torch.optim.Optimizer, batches: Iterable, backward: Callable) -> Callable:
    def run() -> None:
        for x, y in batches:
            loss = nn.functional.mse_loss(model(x), y)
            backward(loss)
            optimizer.step()
            optimizer.zero_grad()

    return run


def _fresh() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = tiny_mlp()
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def measure(steps: int = 300, repeats: int = 15) -> dict[str, float]:
    """Median microseconds per step of each candidate and each one's ratio against plain PyTorch."""
    from fabricx import Fabric

    torch.set_num_threads(1)
    data = tiny_data(steps)

    def loader() -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(data, batch_size=None)

    loops: dict[str, Callable[[], None]] = {}
    model, optimizer = _fresh()
    loops["plain"] = _loop(model, optimizer, data, lambda loss: loss.backward())

    fabric = Fabric(accelerator="cpu")
    model, optimizer = fabric.setup(*_fresh())
    loops["fabricx"] = _loop(model, optimizer, fabric.setup_dataloaders(loader()), fabric.backward)

    result: dict[str, float] = {}
    if importlib.util.find_spec("lightning") is not None:
        from lightning.fabric import Fabric as LightningFabric

        lightning = LightningFabric(accelerator="cpu", devices=1)
        model, optimizer = lightning.setup(*_fresh())
        loops["lightning"] = _loop(model, optimizer, lightning.setup_dataloaders(loader()), lightning.backward)
    if importlib.util.find_spec("accelerate") is not None:
        from accelerate import Accelerator

        accelerator = Accelerator(cpu=True)
        model, optimizer, prepared = accelerator.prepare(*_fresh(), loader())
        loops["accelerate"] = _loop(model, optimizer, prepared, accelerator.backward)
    result["peers_installed"] = float(len(loops) - 2)

    for run in loops.values():
        run()  # warm-up
    medians = interleaved({name: (lambda run=run: timed(run, steps)) for name, run in loops.items()}, repeats)
    for name, seconds in medians.items():
        result[f"{name}_us_per_step"] = seconds * 1e6
    for name in medians:
        if name != "plain":
            result[f"{name}_ratio"] = medians[name] / medians["plain"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    print(json.dumps(measure(args.steps, args.repeats), indent=2))


if __name__ == "__main__":
    main()
