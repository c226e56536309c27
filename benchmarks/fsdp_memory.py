"""Per-rank bytes of parameters + gradients + optimizer state: one process, DDP(2) and FSDP(2).

A stack of transformer encoder layers (14 x d_model 768 = 99.2M parameters by default) takes one
AdamW step; then every rank adds up the bytes of the tensors it holds locally (a DTensor counts
its local shard): parameters, their gradients, and the optimizer state. Ratios are against the
single process; FSDP(2) should hold about half (target: at most 0.55x). Wall-clock is not measured.
Not counted: the transient full copy of one FSDP unit (here one layer) gathered for its forward and
backward, reported separately as ``fsdp_gathered_unit_bytes``.

Run: ``python -m benchmarks.fsdp_memory [--layers 14] [--d-model 768]`` (``--layers 2`` for a quick count).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import torch
from torch import nn


def _model(layers: int, d_model: int, nhead: int, ffn: int) -> nn.Module:
    torch.manual_seed(0)
    layer = [nn.TransformerEncoderLayer(d_model, nhead, ffn, dropout=0.0, batch_first=True) for _ in range(layers)]
    return nn.Sequential(*layer)


def _local_bytes(tensor: torch.Tensor) -> int:
    from torch.distributed.tensor import DTensor

    local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
    return local.numel() * local.element_size()


def _count(fabric: Any, config: dict[str, int]) -> list[dict[str, int]]:
    """Build, set up, take one AdamW step, count local bytes; every rank's counts (on rank 0)."""
    torch.set_num_threads(1)
    model = _model(config["layers"], config["d_model"], config["nhead"], config["ffn"])
    parameters_total = sum(p.numel() for p in model.parameters())
    model = fabric.setup_module(model)
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=1e-4))
    x = torch.randn(2, 8, config["d_model"])
    fabric.backward(model(x).pow(2).mean())
    optimizer.step()
    inner = fabric.unwrap(optimizer)
    params = [p for group in inner.param_groups for p in group["params"]]
    counts = {
        "parameters_total": parameters_total,
        "parameters": sum(_local_bytes(p) for p in params),
        "gradients": sum(_local_bytes(p.grad) for p in params if p.grad is not None),
        "optimizer": sum(
            _local_bytes(value) for state in inner.state.values() for value in state.values()
            if isinstance(value, torch.Tensor)
        ),
    }
    counts["total"] = counts["parameters"] + counts["gradients"] + counts["optimizer"]
    if fabric.world_size == 1:
        return [counts]
    gathered = fabric.all_gather({k: torch.tensor(v, dtype=torch.long) for k, v in counts.items()})
    return [{k: int(v[r]) for k, v in gathered.items()} for r in range(fabric.world_size)]


def measure(layers: int = 14, d_model: int = 768, nhead: int = 12, ffn: int = 3072, world: int = 2) -> dict[str, Any]:
    """Count bytes under the three layouts; ``*_ratio`` keys are the largest rank's total over one process's."""
    from fabricx import Fabric
    from fabricx.strategies import DDPStrategy, FSDPStrategy

    config = {"layers": layers, "d_model": d_model, "nhead": nhead, "ffn": ffn}
    single = Fabric(accelerator="cpu", devices=1).launch(_count, config)[0]
    ddp = Fabric(
        accelerator="cpu", devices=world, strategy=DDPStrategy(start_method="spawn", timeout=300)
    ).launch(_count, config)
    fsdp = Fabric(
        accelerator="cpu",
        devices=world,
        strategy=FSDPStrategy(start_method="spawn", timeout=300, auto_wrap_policy={nn.TransformerEncoderLayer}),
    ).launch(_count, config)
    base = single["total"]
    return {
        "parameters": single["parameters_total"],
        "world_size": world,
        "single_bytes": base,
        "ddp_bytes_per_rank": max(r["total"] for r in ddp),
        "fsdp_bytes_per_rank": max(r["total"] for r in fsdp),
        "ddp_ratio": max(r["total"] for r in ddp) / base,
        "fsdp_ratio": max(r["total"] for r in fsdp) / base,
        "fsdp_breakdown_rank0": fsdp[0],
        "fsdp_gathered_unit_bytes": 4 * single["parameters_total"] // layers,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=14)
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--nhead", type=int, default=12)
    parser.add_argument("--ffn", type=int, default=None, help="feed-forward width (default 4 x d_model)")
    args = parser.parse_args(argv)
    result = measure(args.layers, args.d_model, args.nhead, args.ffn or 4 * args.d_model)
    gib = 2**30
    print(f"{result['parameters'] / 1e6:.1f}M parameters; bytes of parameters + gradients + AdamW state per rank")
    print(f"  single process : {result['single_bytes'] / gib:6.3f} GiB   1.000x")
    print(f"  DDP({result['world_size']})         : {result['ddp_bytes_per_rank'] / gib:6.3f} GiB   "
          f"{result['ddp_ratio']:.3f}x")
    print(f"  FSDP({result['world_size']})        : {result['fsdp_bytes_per_rank'] / gib:6.3f} GiB   "
          f"{result['fsdp_ratio']:.3f}x")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
