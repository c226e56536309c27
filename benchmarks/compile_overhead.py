"""A small transformer block trained on the CPU: Fabric with a compiled model against raw ``torch.compile``.

Both sides compile the same block with inductor (raw: ``torch.compile(model)`` in a plain loop; Fabric:
``fabric.setup(torch.compile(model))``), warm up, then are timed in interleaved repeats (median step time).
``ratio`` is Fabric-compiled over raw-compiled (target <= 1.03); ``compile_speedup`` is eager over compiled
for the raw loop. Both compiled runs start from the same weights and data, so their final losses must be
equal (the benchmark fails otherwise).

Run: ``python -m benchmarks.compile_overhead [--steps 40 --repeats 5]``
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable

import torch
from torch import nn

from benchmarks.common import interleaved, timed

WIDTH, HEADS, SEQUENCE, BATCH = 128, 4, 64, 8


class Block(nn.Module):
    """Pre-norm self-attention and MLP, as in a GPT layer."""

    def __init__(self) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(WIDTH)
        self.attention = nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)
        self.norm2 = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attention(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def _block() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(Block(), Block())


def _data(steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [(torch.randn(BATCH, SEQUENCE, WIDTH, generator=generator),) * 2 for _ in range(steps)]


def _plain(model: nn.Module, data: list) -> tuple[Callable[[], float], Callable[[], float]]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    last = [0.0]

    def loop() -> None:
        for x, y in data:
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        last[0] = loss.item()

    return (lambda: timed(loop, len(data))), (lambda: last[0])


def _fabric(data: list) -> tuple[Callable[[], float], Callable[[], float]]:
    from fabricx import Fabric

    fabric = Fabric(accelerator="cpu", devices=1)
    model = torch.compile(_block())
    model, optimizer = fabric.setup(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    last = [0.0]

    def loop() -> None:
        for x, y in data:
            loss = nn.functional.mse_loss(model(x), y)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        last[0] = loss.item()

    return (lambda: timed(loop, len(data))), (lambda: last[0])


def measure(steps: int = 40, repeats: int = 5) -> dict[str, float]:
    """Median seconds per step of raw-compiled, Fabric-compiled and raw-eager training; their ratios."""
    data = _data(steps)
    runs = {
        "raw_compiled": _plain(torch.compile(_block()), data),
        "fabric_compiled": _fabric(data),
        "raw_eager": _plain(_block(), data),
    }
    for run, _ in runs.values():  # compile and warm up outside the timed repeats
        run()
    medians = interleaved({name: run for name, (run, _) in runs.items()}, repeats)
    final = {name: loss() for name, (_, loss) in runs.items()}
    if final["raw_compiled"] != final["fabric_compiled"]:
        raise AssertionError(f"the compiled runs trained different models: final losses {final}")
    return {
        "ratio": medians["fabric_compiled"] / medians["raw_compiled"],
        "compile_speedup": medians["raw_eager"] / medians["raw_compiled"],
        "raw_compiled_step_ms": 1000 * medians["raw_compiled"],
        "fabric_compiled_step_ms": 1000 * medians["fabric_compiled"],
        "raw_eager_step_ms": 1000 * medians["raw_eager"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    print(json.dumps(measure(args.steps, args.repeats), indent=2))


if __name__ == "__main__":
    main()
