"""A training script that runs unchanged on 1 process, on N processes, or on N processes per node on
several nodes: where it runs is decided by how it is started (``fabricx run``, ``torchrun`` or SLURM's
``srun``), not by the code.

Run::

    python train.py                                                  # 1 process
    fabricx run --devices 2 --accelerator cpu train.py               # 2 processes on this machine
    bash run_two_nodes_locally.sh                                    # 2 "nodes" on this machine
    sbatch train.sbatch                                              # 2 nodes on a SLURM cluster
"""

from __future__ import annotations

import argparse
import os
import socket

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fabricx import Fabric


def make_dataset(samples: int = 2048, seed: int = 0) -> TensorDataset:
    """y = sum of sines of 16 inputs, plus noise: the same on every node because it is seeded."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(samples, 16, generator=generator) * 6 - 3
    y = torch.sin(x).sum(dim=1, keepdim=True) + 0.05 * torch.randn(samples, 1, generator=generator)
    return TensorDataset(x, y)


def main() -> None:
    parser = argparse.ArgumentParser(description="multi-node example")
    parser.add_argument("--accelerator", default="auto")
    parser.add_argument("--precision", default=None)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--checkpoint", default=None, help="save here at the end (a folder all nodes can see)")
    args = parser.parse_args()

    # No devices/num_nodes/strategy here: fabricx takes the layout from the launcher
    # (`fabricx run --num-nodes 2 --devices 2`, torchrun or srun) and picks DDP for several processes.
    fabric = Fabric(accelerator=args.accelerator, precision=args.precision)
    fabric.launch()
    print(
        f"[{socket.gethostname()} pid {os.getpid()}] global rank {fabric.global_rank} of {fabric.world_size}, "
        f"node {fabric.node_rank}, local rank {fabric.local_rank}, device {fabric.device}",
        flush=True,
    )
    fabric.seed_everything(0)

    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(DataLoader(make_dataset(), batch_size=args.batch_size, shuffle=True))

    for epoch in range(args.epochs):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            fabric.backward(loss)
            optimizer.step()
        mean_loss = fabric.all_reduce(loss.detach(), reduce_op="mean")
        fabric.print(f"epoch {epoch}: loss {mean_loss.item():.4f} (mean over {fabric.world_size} processes)")

    # DDP keeps the replicas identical: every rank reports the same checksum.
    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    checksums = fabric.all_gather(torch.tensor(checksum, dtype=torch.float64))
    fabric.print(f"weight checksums of all ranks: {[f'{c:.8f}' for c in checksums.tolist()]}")
    if args.checkpoint:
        fabric.save(args.checkpoint, {"model": model, "optimizer": optimizer})
        fabric.print(f"saved {args.checkpoint}")


if __name__ == "__main__":
    main()
