"""Datasets and loaders of the resume matrix: every sample carries its id, and map-style ones draw augmentation
noise."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    WeightedRandomSampler,
    get_worker_info,
)

BATCH = 4


def _sample(index: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.linspace(-1, 1, 4) * ((index % 13) / 13.0 - 0.5)
    return x, torch.tensor([x.sum().item() * 0.5 + (index % 3) * 0.1])


class IdDataset(Dataset):
    def __init__(self, size: int, augment: bool = False) -> None:
        self.size, self.augment = size, augment

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor, torch.Tensor]:
        x, y = _sample(index)
        if self.augment:  # from the generator of the process that reads it (a worker's, or the main one)
            x = x + 0.01 * torch.randn(4)
        return index, x, y


class IdIterable(IterableDataset):
    """Samples ``rank, rank + world, ...`` (each rank its own), split further across loader workers."""

    def __init__(self, size: int, rank: int, world: int) -> None:
        self.size, self.rank, self.world = size, rank, world

    def _ids(self) -> range:
        ids = range(self.rank, self.size, self.world)
        info = get_worker_info()
        return ids if info is None else ids[info.id :: info.num_workers]

    def __iter__(self):
        for index in self._ids():
            yield (index, *_sample(index))


class StatefulIdIterable(IdIterable):
    """`IdIterable` that records how far it has read and restarts there."""

    def __init__(self, size: int, rank: int, world: int) -> None:
        super().__init__(size, rank, world)
        self.position = 0

    def __iter__(self):
        ids = self._ids()
        start, self.position = self.position, 0
        for offset in range(start, len(ids)):
            self.position = offset + 1
            index = ids[offset]
            yield (index, *_sample(index))
        self.position = 0

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state["position"])


def iterable_batches(rank: int, world: int) -> int:
    """Batches of an epoch of the ``iterable`` loaders on ``rank`` (they have no length)."""
    return -(-len(range(rank, 40, world)) // BATCH)


def make_loader(name: str, rank: int, world: int) -> tuple[DataLoader, bool]:
    """The training loader a cell's ``loader`` names (`cells.LOADERS`) on ``rank`` of ``world``, and whether the
    framework should give it a distributed sampler (``False`` where the user built it per rank)."""
    size = 42 if name.startswith("uneven") or name.startswith("dist_sampler") else 40
    dataset: Dataset = IdDataset(size, augment=True)
    kwargs: dict[str, Any] = {"batch_size": BATCH}
    use_distributed_sampler = True
    if name in ("shuffle", "uneven", "set_epoch_loop"):
        kwargs["shuffle"] = True
    elif name == "uneven_drop_last":
        kwargs.update(shuffle=True, drop_last=True)
    elif name == "shuffle_generator":
        kwargs.update(shuffle=True, generator=torch.Generator().manual_seed(7))
    elif name.startswith("dist_sampler"):
        drop_last = name.endswith("drop_last")
        kwargs["sampler"] = DistributedSampler(dataset, world, rank, shuffle=True, seed=3, drop_last=drop_last)
    elif name == "custom_sampler":
        kwargs["sampler"] = WeightedRandomSampler(torch.linspace(0.1, 1.0, size), num_samples=size)
    elif name == "batch_sampler":
        sampler = RandomSampler(dataset)
        if world > 1:
            sampler = DistributedSampler(dataset, world, rank, shuffle=True, seed=5)
        kwargs = {"batch_sampler": BatchSampler(sampler, BATCH, drop_last=False)}
        use_distributed_sampler = False
    elif name == "iterable":
        dataset = IdIterable(size, rank, world)
    elif name == "iterable_stateful":
        dataset = StatefulIdIterable(size, rank, world)
    elif name.startswith("workers"):
        kwargs.update(shuffle=True, num_workers=2, persistent_workers=name.endswith("persistent"))
    else:
        raise ValueError(name)
    return DataLoader(dataset, **kwargs), use_distributed_sampler
