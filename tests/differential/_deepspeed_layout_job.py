"""One rank of test_deepspeed_layout_lightning.py: fabricx's ``layout="deepspeed"`` against Lightning's DeepSpeed.

Usage: ``python _deepspeed_layout_job.py OUT_DIR`` with torchrun's variables set (RANK, LOCAL_RANK, WORLD_SIZE,
GROUP_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and ``DS_ACCELERATOR=cpu``. Both frameworks share the
process group (gloo) and DeepSpeed ZeRO stage 2:

1. fabricx trains, saves ``layout="deepspeed"``; Lightning loads it into a model built from another seed;
2. Lightning trains one more step and saves its own checkpoint; fabricx loads it into a third model, and
   rank 0 reads it without a state (the full weights, in this process alone).

Each rank compares its own engine's model weights, fp32 master partition and Adam state bit for bit before
the save and after the load, and the client state; it writes what differed to ``OUT_DIR/result_<rank>.pt``.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from _dcp_layout_job import differences  # the same bit-for-bit comparison as the DCP job
from torch import nn

TIMEOUT = timedelta(seconds=60)


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def train(fabric: Any, model: nn.Module, optimizer: torch.optim.Optimizer, steps: int, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed + fabric.global_rank)
    for _ in range(steps):
        loss = model(torch.randn(5, 4, generator=generator)).pow(2).mean()
        fabric.backward(loss)
        optimizer.step()


def engine_of(model: nn.Module) -> Any:
    from deepspeed import DeepSpeedEngine

    return next(module for module in model.modules() if isinstance(module, DeepSpeedEngine))


def engine_state(model: nn.Module) -> dict[str, Any]:
    """This rank's part of the training state: the weights, the ZeRO fp32 partition and the Adam state."""
    engine = engine_of(model)
    zero = engine.optimizer
    adam = zero.optimizer
    state = [
        {key: value.clone() if torch.is_tensor(value) else value for key, value in adam.state[param].items()}
        for group in adam.param_groups
        for param in group["params"]
    ]
    return {
        "model": {name: value.detach().clone() for name, value in engine.module.state_dict().items()},
        "fp32_partitions": [part.detach().clone() for part in zero.single_partition_of_fp32_groups],
        "adam": state,
    }


def lightning_deepspeed_on_cpu(**kwargs: Any) -> Any:
    """Lightning's DeepSpeedStrategy with its CUDA-only check skipped: DeepSpeed runs on CPU here (gloo).

    Lightning refuses a CPU accelerator, and DeepSpeed needs a device index (``cpu:<local rank>`` is the CPU);
    the rest of its set-up runs as it is.
    """
    from lightning.fabric.strategies import DDPStrategy, DeepSpeedStrategy

    class OnCpu(DeepSpeedStrategy):
        def setup_environment(self) -> None:
            self.parallel_devices = [torch.device("cpu", index) for index in range(len(self.parallel_devices or []))]
            DDPStrategy.setup_environment(self)  # what DeepSpeedStrategy does after its CUDA check

    return OnCpu(**kwargs)


def main(out: Path) -> None:
    from lightning.fabric import Fabric as LightningFabric

    from fabricx import Fabric
    from fabricx.strategies import DeepSpeedStrategy
    from fabricx.utilities.process_group import release_process_group

    torch.set_num_threads(1)
    fabric = Fabric(accelerator="cpu", devices=2, strategy=DeepSpeedStrategy(stage=2, timeout=TIMEOUT))
    fabric.launch()
    lightning = LightningFabric(
        accelerator="cpu", devices=2, strategy=lightning_deepspeed_on_cpu(stage=2, timeout=TIMEOUT)
    )
    lightning.launch()  # the process group fabricx started is the one it uses
    rank = fabric.global_rank
    found: dict[str, Any] = {}

    # 1. fabricx writes, Lightning reads.
    net = make_model(0)
    model, optimizer = fabric.setup(net, torch.optim.Adam(net.parameters(), lr=0.01))
    train(fabric, model, optimizer, 2, seed=10)
    written = engine_state(model)
    extra = {"note": f"saved by fabricx on rank {rank}", "tensor": torch.arange(4.0) + rank}
    state = {"model": model, "optimizer": optimizer, "step": 2, "extra": extra}
    fabric.save(out / "by_fabricx", state, layout="deepspeed")
    l_net = make_model(1)
    l_model, l_optimizer = lightning.setup(l_net, torch.optim.Adam(l_net.parameters(), lr=0.01))
    state = {"model": l_model, "optimizer": l_optimizer, "step": 0, "extra": None}
    remainder = lightning.load(out / "by_fabricx", state)
    found["lightning_read"] = differences(written, engine_state(l_model))
    # A shared entry is rank 0's, as Lightning stores it (ZeRO-1/2: only rank 0 writes the model states file).
    saved = {"step": 2, "extra": {"note": "saved by fabricx on rank 0", "tensor": torch.arange(4.0)}}
    found["lightning_client"] = differences(saved, {"step": state["step"], "extra": state["extra"]})
    found["lightning_remainder"] = sorted(remainder)

    # 2. Lightning writes, fabricx reads.
    train(lightning, l_model, l_optimizer, 1, seed=20)
    written = engine_state(l_model)
    lightning.save(out / "by_lightning", {"model": l_model, "optimizer": l_optimizer, "step": 3, "note": "lightning"})
    net = make_model(2)
    model, optimizer = fabric.setup(net, torch.optim.Adam(net.parameters(), lr=0.01))
    state = {"net": model, "adam": optimizer, "step": 0, "note": ""}  # other keys than Lightning's: found anyway
    remainder = fabric.load(out / "by_lightning", state)
    found["fabricx_read"] = differences(written, engine_state(model))
    found["fabricx_client"] = differences({"step": 3, "note": "lightning"}, {k: state[k] for k in ("step", "note")})
    found["fabricx_remainder"] = sorted(remainder)
    fabric.barrier()
    if rank == 0:
        everything = fabric.load(out / "by_lightning")  # no state: the full weights, in this process alone
        expected = {"model": written["model"], "step": 3, "note": "lightning"}
        found["fabricx_full_read"] = differences(expected, everything)
    torch.save(found, out / f"result_{rank}.pt")
    fabric.barrier()
    release_process_group()


if __name__ == "__main__":
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    main(Path(sys.argv[1]))
