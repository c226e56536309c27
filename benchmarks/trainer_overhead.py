"""Per-step cost of ``Trainer.fit`` against the same training written as a plain Fabric loop.

The model is the tiny MLP (32 -> 64 -> 1, batch 32, in-memory data, SGD, seeded). Both variants
run the same number of optimizer steps on one CPU process in float32 and include their own set-up
(building the Fabric, ``setup``, ``setup_dataloaders``). Repeats are interleaved (loop, trainer,
loop, trainer, ...) so that machine noise hits both alike; the median time per step is reported.

What is on in the Trainer run: ``training_step`` logs the loss with ``self.log`` (step values),
the default CSVLogger (written every ``log_every_n_steps=50`` steps), hook dispatch and progress
counting. Off: the progress bar, the model summary, checkpointing (``enable_checkpointing=False``)
and validation (no validation data).

Run::

    python benchmarks/trainer_overhead.py [--steps 2000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from fabricx import Fabric
from fabricx.train import Trainer, TrainModule
from fabricx.utilities.seed import seed_everything

BATCH = 32
SAMPLES = 32 * 64  # 64 batches per epoch


def _data() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 32, generator=generator)
    y = x.sum(dim=1, keepdim=True) * 0.1
    return TensorDataset(x, y)


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))


class MLPModule(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = _mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def run_loop(dataset: TensorDataset, steps: int) -> float:
    """The hand-written Fabric loop; returns seconds."""
    start = time.perf_counter()
    seed_everything(0)
    fabric = Fabric(accelerator="cpu", devices=1)
    model = _mlp()
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
    loader = fabric.setup_dataloaders(DataLoader(dataset, batch_size=BATCH, shuffle=True))
    done = 0
    while done < steps:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            done += 1
            if done >= steps:
                break
    return time.perf_counter() - start


def run_trainer(dataset: TensorDataset, steps: int, root: str) -> float:
    """The same training through Trainer.fit; returns seconds."""
    start = time.perf_counter()
    trainer = Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=root,
        seed=0,
    )
    trainer.fit(MLPModule(), DataLoader(dataset, batch_size=BATCH, shuffle=True))
    assert trainer.global_step == steps
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dataset = _data()
    loop_times, trainer_times = [], []
    with tempfile.TemporaryDirectory() as root:
        run_loop(dataset, 50)  # warm-up: first-call costs (imports, allocator) are not what we measure
        run_trainer(dataset, 50, root)
        for _ in range(args.repeats):
            loop_times.append(run_loop(dataset, args.steps) / args.steps)
            trainer_times.append(run_trainer(dataset, args.steps, root) / args.steps)
    loop_median = statistics.median(loop_times)
    trainer_median = statistics.median(trainer_times)
    print(f"steps per run: {args.steps}, repeats: {args.repeats} (interleaved), threads: 1")
    print(f"Fabric loop : median {loop_median * 1e6:8.1f} us/step")
    print(f"Trainer.fit : median {trainer_median * 1e6:8.1f} us/step")
    print(f"ratio       : {trainer_median / loop_median:.3f}x (target <= 1.10x)")


if __name__ == "__main__":
    main()
