"""One training loop written twice: in plain PyTorch, then with fabricx. Compare the two functions.

The data is scikit-learn's bundled 8x8 handwritten digits (no download; ``pip install fabricx[examples]``).
Lines that change for fabricx are marked ``# fabricx``; everything else is identical.

Run::

    python examples/convert_loop.py                                  # both loops on the CPU
    python examples/convert_loop.py --loop fabric --devices 2        # fabricx loop on 2 CPU processes (DDP)
    python examples/convert_loop.py --loop fabric --precision bf16-mixed
    fabricx run --devices 2 examples/convert_loop.py --loop fabric   # the same, started by torchrun
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def digits_datasets(seed: int = 0, limit: int | None = None) -> tuple[TensorDataset, TensorDataset]:
    """scikit-learn's digits as (train, test) tensors: 64 pixels scaled to [0, 1], labels 0-9."""
    try:
        from sklearn.datasets import load_digits
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            "convert_loop.py's data (the 8x8 digits) comes with scikit-learn, which is not installed. Install it "
            'from the package index with `pip install "fabricx[examples]"`.',
            name=error.name,
        ) from error

    images, labels = load_digits(return_X_y=True)
    x = torch.tensor(images, dtype=torch.float32) / 16.0
    y = torch.tensor(labels, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    if limit is not None:
        order = order[:limit]
    split = int(0.8 * len(order))
    train, test = order[:split], order[split:]
    return TensorDataset(x[train], y[train]), TensorDataset(x[test], y[test])


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 10))


# ---------------------------------------------------------------------------------------------------
# 1. Plain PyTorch
# ---------------------------------------------------------------------------------------------------
def train_plain(args: argparse.Namespace) -> float:
    torch.manual_seed(args.seed)
    device = torch.device("cpu")
    train_set, test_set = digits_datasets(args.seed, args.limit)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(test_set, batch_size=256)

    model = make_model().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)

    for epoch in range(args.epochs):
        model.train()
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"[plain]  epoch {epoch}  loss {loss.item():.4f}")

    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in test_loader:
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(dim=1) == y).sum().item()
            total += len(y)
    accuracy = correct / total
    print(f"[plain]  test accuracy {accuracy:.3f}")
    return accuracy


# ---------------------------------------------------------------------------------------------------
# 2. The same loop with fabricx
# ---------------------------------------------------------------------------------------------------
def train_fabric(args: argparse.Namespace) -> float:
    from fabricx import Fabric  # fabricx

    fabric = Fabric(  # fabricx: hardware, strategy and precision are flags now
        accelerator=args.accelerator, strategy=args.strategy, devices=args.devices, precision=args.precision
    )
    fabric.launch()  # fabricx: starts the other processes when devices > 1
    fabric.seed_everything(args.seed)  # fabricx: seeds torch, numpy and random on every rank
    train_set, test_set = digits_datasets(args.seed, args.limit)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(test_set, batch_size=256)

    model = make_model()  # fabricx: no .to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model, optimizer = fabric.setup(model, optimizer)  # fabricx
    train_loader, test_loader = fabric.setup_dataloaders(train_loader, test_loader)  # fabricx: each rank a share

    for epoch in range(args.epochs):
        model.train()
        for x, y in train_loader:  # fabricx: batches arrive on the right device
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            fabric.backward(loss)  # fabricx: instead of loss.backward()
            optimizer.step()
        fabric.print(f"[fabric] epoch {epoch}  loss {loss.item():.4f}")  # fabricx: prints on rank 0 only

    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in test_loader:
            correct += (model(x).argmax(dim=1) == y).sum().item()
            total += len(y)
    # fabricx: each rank saw part of the test set; add the counts up across ranks.
    counts = fabric.all_reduce(torch.tensor([correct, total], dtype=torch.float64), reduce_op="sum")
    accuracy = (counts[0] / counts[1]).item()
    fabric.print(f"[fabric] test accuracy {accuracy:.3f} on {fabric.world_size} process(es), {fabric.device}")
    return accuracy


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    # The module docstring is there unless Python runs with -OO, which strips it.
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--loop", choices=["plain", "fabric", "both"], default="both")
    parser.add_argument("--accelerator", default="auto", help="cpu, cuda, mps or auto")
    parser.add_argument("--strategy", default="auto", help="auto, ddp, ddp_spawn, fsdp, deepspeed, ...")
    parser.add_argument("--devices", default="auto", help="count (CPU: processes), '0,1' or auto")
    parser.add_argument("--precision", default=None, help="32-true (default), bf16-mixed, 16-mixed, ...")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--limit", type=int, default=None, help="use only this many samples (quick checks)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.devices not in ("auto",) and args.devices.lstrip("-").isdigit():
        args.devices = int(args.devices)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    # Ranks started by a launcher (fabricx, torchrun) have LOCAL_RANK set: they only run the Fabric loop.
    if args.loop in ("plain", "both") and "LOCAL_RANK" not in os.environ:
        start = time.perf_counter()
        train_plain(args)
        print(f"[plain]  took {time.perf_counter() - start:.1f} s\n")
    if args.loop in ("fabric", "both"):
        start = time.perf_counter()
        train_fabric(args)
        if int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))) == 0:
            print(f"[fabric] took {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
