"""Elastic resumption job for test_elastic_processes.py: ``python _elastic_job.py PHASE WORLD CKPT OUT``.

``save``: DDP then FSDP2 on WORLD ranks, 2 epochs with a global batch of 12, a checkpoint after the first
step of epoch 0 (the run goes on uninterrupted). ``resume``: the same on WORLD ranks from that
checkpoint. Each rank writes the sample ids of every step it took and the final full weights.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from fabricx import Fabric
from fabricx.strategies import DDPStrategy, FSDPStrategy

GLOBAL_BATCH = 12


def dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(48, 4, generator=generator)
    return TensorDataset(torch.arange(48), x, x.sum(dim=1, keepdim=True))


def run(strategy_name: str, phase: str, world: int, ckpt: Path, out: Path) -> None:
    strategy = (DDPStrategy if strategy_name == "ddp" else FSDPStrategy)(timeout=timedelta(seconds=120))
    fabric = Fabric(accelerator="cpu", devices=world, strategy=strategy)
    fabric.launch()
    fabric.seed_everything(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.05))
    loader = fabric.setup_dataloaders(
        DataLoader(dataset(), batch_size=1, shuffle=True), global_batch_size=GLOBAL_BATCH
    )
    state = {"model": model, "optimizer": optimizer, "loader": loader, "epoch": 0}
    path = ckpt / strategy_name
    if phase == "resume":
        fabric.load(path, state)
    steps: list[tuple[int, int, list[int]]] = []  # (epoch, batches_consumed, ids)
    epoch = state["epoch"]
    while epoch < 2:
        for ids, x, y in loader:
            steps.append((epoch, loader.batches_consumed, ids.tolist()))
            fabric.backward(torch.nn.functional.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
            if phase == "save" and (epoch, loader.batches_consumed) == (0, 1):
                state["epoch"] = epoch
                fabric.save(path, state)
        epoch += 1
    weights = {
        name: (value.full_tensor() if hasattr(value, "full_tensor") else value).detach().clone()
        for name, value in model.state_dict().items()
    }
    out.mkdir(parents=True, exist_ok=True)
    record = {"steps": steps, "weights": weights, "len": len(loader)}
    torch.save(record, out / f"{strategy_name}-{phase}-{world}-rank{fabric.global_rank}.pt")
    fabric.barrier()


def main() -> None:
    phase, world, ckpt, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
    torch.set_num_threads(1)
    for strategy_name in ("ddp", "fsdp"):  # two Fabrics, one after the other, in the same processes
        run(strategy_name, phase, world, ckpt, out)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
