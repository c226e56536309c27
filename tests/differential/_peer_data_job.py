"""One small training script run through plain PyTorch, Lightning Fabric and fabricx (see test_peer_data.py).

Usage: ``python _peer_data_job.py ROLE CKPT_DIR OUT_DIR``. Roles:

* ``single``: plain PyTorch, Lightning Fabric and fabricx on one process, for the ``global`` (shuffled,
  ``seed_everything`` only) and ``generator`` (shuffled with a user ``torch.Generator``) loaders; the
  fabricx run saves a checkpoint in the middle of epoch 0 without stopping;
* ``fabricx-resume``: a fresh process that loads that checkpoint and finishes the run;
* ``lightning-ddp`` / ``fabricx-ddp`` / ``fabricx-ddp-resume``: the ``ddp`` loader on 2 ranks.

Each run writes ``OUT_DIR/<role>-<mode>-rank<r>.pt``: the sample indices of every batch, the final
weights, and the states of torch's, NumPy's and Python's global generators at the end.
"""

from __future__ import annotations

import random
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from fabricx.utilities.process_group import release_process_group

EPOCHS = 2
SAVE_AT = (0, 2)  # (epoch, batch index): the checkpoint is taken after this batch's optimizer step
SEED = 7


def dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(24, 4, generator=generator)
    y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(24, 1, generator=generator)
    return TensorDataset(torch.arange(24), x, y)


def make_loader(mode: str) -> DataLoader:
    if mode == "generator":
        return DataLoader(dataset(), batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(42))
    return DataLoader(dataset(), batch_size=3, shuffle=True)


def make_model() -> torch.nn.Module:
    # Dropout draws from torch's global generator: any extra draw by a loader changes the weights.
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Dropout(0.25), torch.nn.Linear(8, 1))


def seed_all() -> None:
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)


def rng_snapshot() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state()[1].copy(), "python": random.getstate()}


def step(model, optimizer, batch, backward) -> None:
    _, x, y = batch
    loss = torch.nn.functional.mse_loss(model(x), y)
    backward(loss)
    optimizer.step()
    optimizer.zero_grad()


def plain(mode: str) -> dict:
    seed_all()
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = make_loader(mode)
    batches = []
    for _ in range(EPOCHS):
        for batch in loader:
            batches.append(batch[0].tolist())
            step(model, optimizer, batch, lambda loss: loss.backward())
    return {"batches": batches, "skipped": 0, "weights": model.state_dict(), "rng": rng_snapshot()}


def with_fabric(fabric_cls, mode: str, save_to: Path | None, resume_from: Path | None, **flags) -> dict:
    fabric = fabric_cls(accelerator="cpu", **flags)
    if flags.get("devices", 1) > 1:
        fabric.launch()
    fabric.seed_everything(SEED)
    raw = make_model()
    optimizer = torch.optim.SGD(raw.parameters(), lr=0.05, momentum=0.9)
    model, optimizer = fabric.setup(raw, optimizer)
    loader = fabric.setup_dataloaders(make_loader(mode))
    state = {"model": model, "optimizer": optimizer, "loader": loader, "epoch": 0}
    skipped = 0  # batches of this rank before the checkpoint (a resumed run records only the rest)
    if resume_from is not None:
        fabric.load(resume_from, state)
        skipped = state["epoch"] * len(loader) + loader.batches_consumed
    batches: list[list[int]] = []
    epoch = state["epoch"]
    while epoch < EPOCHS:
        for batch in loader:
            batches.append(batch[0].tolist())
            step(model, optimizer, batch, fabric.backward)
            if save_to is not None and (epoch, loader.batches_consumed - 1) == SAVE_AT:
                state["epoch"] = epoch
                fabric.save(save_to, state)
        epoch += 1
    weights = {name: value.detach().clone() for name, value in raw.state_dict().items()}
    rank = fabric.global_rank
    return {"batches": batches, "skipped": skipped, "weights": weights, "rng": rng_snapshot(), "rank": rank}


def main(role: str, ckpt_dir: Path, out_dir: Path) -> None:
    torch.set_num_threads(1)
    results: dict[str, dict] = {}
    if role == "single":
        from lightning.fabric import Fabric as LightningFabric

        from fabricx import Fabric

        for mode in ("global", "generator"):  # each run seeds afresh, so one process runs them all
            results[f"plain-{mode}"] = plain(mode)
            results[f"lightning-{mode}"] = with_fabric(LightningFabric, mode, None, None, devices=1)
            results[f"fabricx-{mode}"] = with_fabric(Fabric, mode, ckpt_dir / f"single-{mode}", None, devices=1)
    elif role == "fabricx-resume":
        from fabricx import Fabric

        for mode in ("global", "generator"):
            results[f"{role}-{mode}"] = with_fabric(Fabric, mode, None, ckpt_dir / f"single-{mode}", devices=1)
    elif role in ("lightning-ddp", "fabricx-ddp", "fabricx-ddp-resume"):
        if role == "lightning-ddp":
            from lightning.fabric import Fabric as fabric_cls
            from lightning.fabric.strategies import DDPStrategy
        else:
            from fabricx import Fabric as fabric_cls
            from fabricx.strategies import DDPStrategy
        ckpt = ckpt_dir / "ddp"
        resume = role.endswith("resume")
        strategy = DDPStrategy(timeout=timedelta(seconds=120))
        result = with_fabric(
            fabric_cls,
            "ddp",
            ckpt if role == "fabricx-ddp" else None,
            ckpt if resume else None,
            devices=2,
            strategy=strategy,
        )
        results[f"{role}-rank{result['rank']}"] = result
    else:
        raise SystemExit(f"unknown role {role!r}")
    out_dir.mkdir(parents=True, exist_ok=True)
    rank = next(iter(results.values())).get("rank", 0)
    torch.save(results, out_dir / f"{role}-rank{rank}.pt")
    # Lightning leaves the gloo group to interpreter exit, where it can abort a finished rank (SIGABRT,
    # see fabricx/utilities/process_group.py); every role ends the way fabricx ends a rank.
    release_process_group()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
