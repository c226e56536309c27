"""One collective script run through Lightning Fabric and fabricx in the same 2 processes (see test_fabric_surface.py).

Usage: ``python -m torch.distributed.run --nproc_per_node 2 _fabric_surface_job.py OUT_DIR``. Each rank runs
``script(fabric)`` with Lightning Fabric first, then with fabricx (which joins the process group Lightning made),
and writes ``OUT_DIR/rank<r>.pt`` with both results and what fabricx printed.
"""

from __future__ import annotations

import contextlib
import io
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset


class RankStream(IterableDataset):
    """Shards itself by rank, as streaming datasets do."""

    def __iter__(self):
        rank, world = dist.get_rank(), dist.get_world_size()
        return iter(range(rank, 12, world))


class WholeStream(IterableDataset):
    """Does not shard: every rank reads all of it (the loader must not change that)."""

    def __iter__(self):
        return iter(range(6))


class EpochCountingLoader(DataLoader):
    """A map-style DataLoader subclass with its own ``__iter__`` (it counts its epochs)."""

    def __init__(self, dataset, batch_size: int, shuffle: bool = False, **kwargs) -> None:
        super().__init__(dataset, batch_size=batch_size, shuffle=shuffle, **kwargs)
        self.epochs = 0

    def __iter__(self):
        self.epochs += 1
        return super().__iter__()


def _tensors(value):
    # Plain values and CPU tensors with their dtype, for torch.equal in the parent.
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, dict):
        return {k: _tensors(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_tensors(v) for v in value)
    return value


def script(fabric, monitor_cls) -> dict:
    rank = fabric.global_rank
    out: dict = {"world_size": fabric.world_size}
    fabric.barrier()
    # all_reduce: in place on the given tensor, returned; every op; an integer mean; numbers; collections.
    for op in ("mean", "sum", "min", "max"):
        value = torch.tensor([1.0 + rank, 10.0 * rank, 0.25])
        returned = fabric.all_reduce(value, reduce_op=op)
        out[f"reduce_{op}"] = {"input_after": value.clone(), "returned": returned.clone(), "same": returned is value}
    loss = torch.tensor(2.0 + 3 * rank)
    fabric.all_reduce(loss)  # the return value ignored, as many scripts do
    out["ignored_return"] = loss
    integer = torch.tensor([rank, 3 * rank + 1])
    out["reduce_int_mean"] = {"returned": fabric.all_reduce(integer), "input_after": integer}
    out["reduce_number"] = fabric.all_reduce(1.5 + rank, reduce_op="sum")
    nested = {"a": torch.tensor(rank + 1.0), "b": [torch.tensor([rank, 2.0])]}
    out["reduce_nested"] = {"returned": fabric.all_reduce(nested, reduce_op="max"), "input_after": nested}
    out["reduce_op_enum"] = fabric.all_reduce(torch.tensor(rank + 1.0), reduce_op=dist.ReduceOp.SUM)
    # all_gather: numbers, scalars, vectors, collections.
    out["gather_number"] = fabric.all_gather(1.5)
    out["gather_int"] = fabric.all_gather(rank)
    out["gather_vector"] = fabric.all_gather(torch.tensor([rank, rank * 10]))
    out["gather_nested"] = fabric.all_gather({"a": torch.tensor(float(rank)), "b": [torch.ones(1, 2) * rank]})
    # broadcast: objects and tensors from either rank.
    out["broadcast_object"] = fabric.broadcast({"from": rank, "items": [rank, "x"]}, src=0)
    out["broadcast_tensor"] = fabric.broadcast(torch.arange(3.0) + rank, src=1)
    fabric.barrier("done")
    # An IterableDataset is passed through: no sampler, every rank reads what its dataset yields.
    for name, dataset in (("rank_stream", RankStream()), ("whole_stream", WholeStream())):
        loader = fabric.setup_dataloaders(DataLoader(dataset, batch_size=2))
        out[name] = [[batch.tolist() for batch in loader] for _ in range(2)]
    # A map-style DataLoader subclass with its own __iter__: built again with a distributed sampler, its class kept.
    dataset = torch.utils.data.TensorDataset(torch.arange(20))
    loader = fabric.setup_dataloaders(EpochCountingLoader(dataset, batch_size=3, shuffle=True))
    epochs = [[batch[0].tolist() for batch in loader] for _ in range(2)]
    inner = getattr(loader, "_dataloader", None) or loader.loader
    out["subclass_ddp"] = {"epochs": epochs, "class": type(inner).__name__, "counted": inner.epochs}
    if hasattr(loader, "state_dict"):  # fabricx: the sampler it built resumes exactly inside an epoch
        again = fabric.setup_dataloaders(EpochCountingLoader(dataset, batch_size=3, shuffle=True))
        iterator = iter(again)
        next(iterator), next(iterator)
        state = again.state_dict()
        resumed = fabric.setup_dataloaders(EpochCountingLoader(dataset, batch_size=3, shuffle=True))
        resumed.load_state_dict(state)
        out["subclass_ddp_resumed"] = [batch[0].tolist() for batch in resumed]
    # model.eval()/train() on the set-up (DDP) module: wrapper and inner module agree.
    model = fabric.setup_module(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5)))
    flags = []
    for mode in ("eval", "train"):
        getattr(model, mode)()
        flags.append((model.training, model.module.training, model.module[1].training))
    out["training_flags"] = flags
    # ThroughputMonitor: rank 0 alone counts and computes (the others get {}), global keys for 2 devices.
    monitor = monitor_cls(fabric, window_size=3)
    computed = []
    for step in range(1, 6):
        monitor.update(time=0.25 * step + 0.01 * rank, batches=step, samples=(4 + rank) * step, flops=100 + rank)
        computed.append(monitor.compute())
    out["throughput"] = {"computed": computed, "logged": monitor.compute_and_log(), "step": monitor.step,
                         "world_size": monitor.world_size}  # fmt: skip
    return _tensors(out)


def main(out_dir: Path) -> None:
    torch.set_num_threads(1)
    from lightning.fabric import Fabric as LightningFabric
    from lightning.fabric.strategies import DDPStrategy as LightningDDP
    from lightning.fabric.utilities import ThroughputMonitor as LightningMonitor

    from fabricx import Fabric
    from fabricx.strategies import DDPStrategy
    from fabricx.utilities import ThroughputMonitor

    timeout = timedelta(seconds=60)
    lightning = LightningFabric(accelerator="cpu", devices=2, strategy=LightningDDP(timeout=timeout))
    lightning.launch()
    results = {"lightning": script(lightning, LightningMonitor)}
    fabric = Fabric(accelerator="cpu", devices=2, strategy=DDPStrategy(timeout=timeout))
    fabric.launch()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        results["fabricx"] = script(fabric, ThroughputMonitor)
    results["fabricx_printed"] = printed.getvalue()
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.save(results, out_dir / f"rank{fabric.global_rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
