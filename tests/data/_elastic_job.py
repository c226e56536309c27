"""Elastic resumption job for test_elastic_processes.py: ``python _elastic_job.py PHASE WORLD CKPT OUT``.

``save``: DDP, FSDP2 and the Accelerate adapter (loader workers: :func:`loader_workers`) on WORLD ranks,
one after the other in the same processes: 2 epochs with a global batch of 12, a checkpoint after the
first step of epoch 0 (the run goes on uninterrupted). ``resume``: the same on WORLD ranks from those
checkpoints (the adapter at 1 and 3 ranks). Each rank writes the sample ids of every step it took and
the final full weights.
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
ACCELERATE_WORLDS = (1, 3)  # the adapter resumes at these (its resharding is the same code at 4)


def dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(48, 4, generator=generator)
    return TensorDataset(torch.arange(48), x, x.sum(dim=1, keepdim=True))


def loader_workers(strategy_name: str, phase: str, world: int) -> int:
    """Worker processes per loader: DDP has two (none when resuming at 4 ranks), FSDP2 none (two when
    resuming at 3), so each strategy resumes with and without workers, and across a change of the count."""
    if strategy_name == "ddp":
        return 0 if (phase, world) == ("resume", 4) else 2
    return 2 if (phase, world) == ("resume", 3) else 0


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _save_record(name: str, phase: str, world: int, rank: int, out: Path, record: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    torch.save(record, out / f"{name}-{phase}-{world}-rank{rank}.pt")


def run(strategy_name: str, phase: str, world: int, ckpt: Path, out: Path) -> None:
    strategy = (DDPStrategy if strategy_name == "ddp" else FSDPStrategy)(timeout=timedelta(seconds=120))
    fabric = Fabric(accelerator="cpu", devices=world, strategy=strategy)
    fabric.launch()
    fabric.seed_everything(0)
    model = _model()
    model, optimizer = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.05))
    workers = loader_workers(strategy_name, phase, world)
    loader = fabric.setup_dataloaders(
        DataLoader(dataset(), batch_size=1, shuffle=True, num_workers=workers), global_batch_size=GLOBAL_BATCH
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
    record = {"steps": steps, "weights": weights, "len": len(loader), "workers": loader.num_workers}
    _save_record(strategy_name, phase, world, fabric.global_rank, out, record)
    fabric.barrier()


def run_accelerate(phase: str, world: int, ckpt: Path, out: Path) -> None:
    """The same through the Accelerate adapter: each process's loader has batch_size 12 // WORLD (the
    global batch kept, as an Accelerate user would), ``save_state``/``load_state`` with stateful loaders."""
    from fabricx.compat.accelerate import Accelerator, DataLoaderConfiguration, set_seed

    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
    assert accelerator.num_processes == world
    set_seed(0)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    batches = DataLoader(dataset(), batch_size=GLOBAL_BATCH // world, shuffle=True, num_workers=2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, batches)
    path = ckpt / "accelerate"
    if phase == "resume":
        accelerator.load_state(path)
    steps: list[tuple[int, int, list[int]]] = []
    for epoch in range(loader.epoch, 2):
        for ids, x, y in loader:
            steps.append((epoch, loader.batches_consumed, ids.tolist()))
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
            if phase == "save" and (epoch, loader.batches_consumed) == (0, 1):
                accelerator.save_state(path)
    weights = {k: v.detach().clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}
    record = {"steps": steps, "weights": weights, "len": len(loader), "workers": loader.num_workers}
    _save_record("accelerate", phase, world, accelerator.process_index, out, record)
    accelerator.wait_for_everyone()


def main() -> None:
    phase, world, ckpt, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
    torch.set_num_threads(1)
    for strategy_name in ("ddp", "fsdp"):  # two Fabrics, one after the other, in the same processes
        run(strategy_name, phase, world, ckpt, out)
    if phase == "save" or world in ACCELERATE_WORLDS:
        run_accelerate(phase, world, ckpt, out)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
