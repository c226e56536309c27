"""Giving each rank its own share of a dataset, with an order that depends on the epoch."""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

from torch.utils.data import Dataset, DistributedSampler, RandomSampler, Sampler, SequentialSampler
from torchdata.stateful_dataloader.sampler import RandomSampler as StatefulRandomSampler
from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler


class _IndexList(Dataset):
    def __init__(self, indices: list[int]) -> None:
        self.indices = indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, item: int) -> int:
        return self.indices[item]


class DistributedSamplerWrapper(StatefulDistributedSampler):
    """Splits the indices a custom sampler produces each epoch across ranks.

    Every rank draws the same sequence from the wrapped sampler (seed it identically on every
    rank) and keeps every ``num_replicas``-th index starting at its rank.

    Example::

        DistributedSamplerWrapper(WeightedRandomSampler(weights, 100), num_replicas=2, rank=0)
    """

    def __init__(self, sampler: Sampler, num_replicas: int, rank: int, drop_last: bool = False) -> None:
        self._wrapped_sampler = sampler
        super().__init__(_IndexList(list(range(len(sampler)))), num_replicas, rank, shuffle=False, drop_last=drop_last)

    def __iter__(self) -> Iterator[int]:
        self.dataset = _IndexList(list(self._wrapped_sampler))
        for position in super().__iter__():
            yield self.dataset[position]

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        if hasattr(self._wrapped_sampler, "set_epoch"):
            self._wrapped_sampler.set_epoch(epoch)


def distributed_sampler_for(
    sampler: Sampler, dataset: Sized, num_replicas: int, rank: int, seed: int, drop_last: bool = False
) -> Sampler:
    """The per-rank replacement for the sampler a single-process loader would use."""
    if isinstance(sampler, DistributedSampler):
        return sampler
    if isinstance(sampler, SequentialSampler):
        return StatefulDistributedSampler(dataset, num_replicas, rank, shuffle=False, seed=seed, drop_last=drop_last)
    if isinstance(sampler, RandomSampler | StatefulRandomSampler) and not sampler.replacement and (
        sampler._num_samples is None
    ):
        return StatefulDistributedSampler(dataset, num_replicas, rank, shuffle=True, seed=seed, drop_last=drop_last)
    return DistributedSamplerWrapper(sampler, num_replicas, rank, drop_last=drop_last)


def is_shuffling(sampler: Any) -> bool:
    return isinstance(sampler, RandomSampler | StatefulRandomSampler) or bool(getattr(sampler, "shuffle", False))
