"""One rank of test_dcp_layout_lightning.py: fabricx's ``layout="dcp"`` against Lightning's ModelParallelStrategy.

Usage: ``python _dcp_layout_job.py OUT_DIR`` with torchrun's variables set (RANK, LOCAL_RANK, WORLD_SIZE,
GROUP_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Both frameworks share the process group:

1. fabricx (FSDP2) trains, saves ``layout="dcp"``; Lightning (ModelParallel, FSDP2) loads it into a model
   built from another seed;
2. Lightning trains one more step and saves its own sharded checkpoint; fabricx loads it into a third
   model, and reads it without a state (the full tensors, in this process alone).

Each step's full model and optimizer state (gathered to rank 0) is compared bit for bit; rank 0 writes
what differed to ``OUT_DIR/result.pt``.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from torch import nn

TIMEOUT = timedelta(seconds=60)


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def shard(model: nn.Module, mesh: Any) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    return fully_shard(model, mesh=mesh["data_parallel"])


def train(fabric: Any, model: nn.Module, optimizer: torch.optim.Optimizer, steps: int, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed + fabric.global_rank)
    for _ in range(steps):
        loss = model(torch.randn(5, 4, generator=generator)).pow(2).mean()
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()


def full_state(module: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The whole model and optimizer state on rank 0 (empty on the others); a collective."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return {
        "model": get_model_state_dict(module, options=options),
        "optimizer": get_optimizer_state_dict(module, optimizer, options=options),
    }


def differences(expected: Any, got: Any, where: str = "") -> list[str]:
    """Where ``got`` is not bit for bit ``expected`` (tensors: same dtype, shape and bits)."""
    if isinstance(expected, torch.Tensor):
        same = isinstance(got, torch.Tensor) and got.dtype == expected.dtype and torch.equal(got, expected)
        return [] if same else [where]
    if isinstance(expected, dict):
        if not isinstance(got, dict) or set(got) != set(expected):
            shown = sorted(map(str, got)) if isinstance(got, dict) else got
            return [f"{where} keys {sorted(map(str, expected))} != {shown}"]
        return [d for key in expected for d in differences(expected[key], got[key], f"{where}.{key}")]
    if isinstance(expected, list | tuple):
        if not isinstance(got, list | tuple) or len(got) != len(expected):
            return [f"{where}: {expected!r} != {got!r}"]
        pairs = enumerate(zip(expected, got, strict=True))
        return [d for i, (e, g) in pairs for d in differences(e, g, f"{where}[{i}]")]
    return [] if expected == got else [f"{where}: {expected!r} != {got!r}"]


def main(out: Path) -> None:
    from lightning.fabric import Fabric as LightningFabric
    from lightning.fabric.strategies import ModelParallelStrategy

    from fabricx import Fabric
    from fabricx.checkpoint.contents import unwrap_object
    from fabricx.checkpoint.sharded import optimizer_state_by_index
    from fabricx.strategies import FSDPStrategy
    from fabricx.utilities.process_group import release_process_group

    torch.set_num_threads(1)
    fabric = Fabric(accelerator="cpu", devices=2, strategy=FSDPStrategy(timeout=TIMEOUT))
    fabric.launch()
    strategy = ModelParallelStrategy(shard, data_parallel_size=2, tensor_parallel_size=1, timeout=TIMEOUT)
    lightning = LightningFabric(accelerator="cpu", devices=2, strategy=strategy)
    lightning.launch()  # the process group fabricx started is the one it uses
    found: dict[str, Any] = {}

    # 1. fabricx writes, Lightning reads.
    model = fabric.setup_module(make_model(0))
    optimizer = fabric.setup_optimizers(torch.optim.Adam(model.parameters(), lr=0.01))
    train(fabric, model, optimizer, 2, seed=10)
    written = full_state(unwrap_object(model), unwrap_object(optimizer))
    fabric.save(out / "by_fabricx", {"model": model, "optimizer": optimizer, "step": 2}, layout="dcp")
    l_model = lightning.setup_module(make_model(1))
    l_optimizer = lightning.setup_optimizers(torch.optim.Adam(l_model.parameters(), lr=0.01))
    state = {"model": l_model, "optimizer": l_optimizer, "step": 0}
    remainder = lightning.load(out / "by_fabricx", state)
    read = full_state(l_model.module, l_optimizer.optimizer)
    found["lightning_read"] = differences(written, read) if lightning.global_rank == 0 else []
    found["lightning_step"] = state["step"]
    found["lightning_remainder"] = sorted(remainder)

    # 2. Lightning writes, fabricx reads.
    train(lightning, l_model, l_optimizer, 1, seed=20)
    written = full_state(l_model.module, l_optimizer.optimizer)
    lightning.save(out / "by_lightning", {"model": l_model, "optimizer": l_optimizer, "step": 3})
    model = fabric.setup_module(make_model(2))
    optimizer = fabric.setup_optimizers(torch.optim.Adam(model.parameters(), lr=0.01))
    state = {"model": model, "optimizer": optimizer, "step": 0}
    remainder = fabric.load(out / "by_lightning", state)
    read = full_state(unwrap_object(model), unwrap_object(optimizer))
    found["fabricx_read"] = differences(written, read) if fabric.global_rank == 0 else []
    found["fabricx_step"] = state["step"]
    found["fabricx_remainder"] = sorted(remainder)
    if fabric.global_rank == 0:
        everything = fabric.load(out / "by_lightning")  # no state: read in full in this process alone
        expected = {"model": written["model"], "optimizer": optimizer_state_by_index(written["optimizer"]), "step": 3}
        found["fabricx_full_read"] = differences(expected, everything)
        torch.save(found, out / "result.pt")
    fabric.barrier()
    release_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
