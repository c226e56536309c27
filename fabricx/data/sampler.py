"""Giving each rank its own share of a dataset, with an order that depends on the epoch."""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch.utils.data import Dataset, DistributedSampler, RandomSampler, Sampler, SequentialSampler
from torchdata.stateful_dataloader.sampler import RandomSampler as StatefulRandomSampler
from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

_GENERATOR_STATE = "wrapped_generator_state"


class _IndexList(Dataset):
    def __init__(self, indices: list[int]) -> None:
        self.indices = indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, item: int) -> int:
        return self.indices[item]


class DistributedSamplerWrapper(StatefulDistributedSampler):
    """Splits the indices a custom sampler produces each epoch across ranks.

    Every rank draws the whole sequence from the wrapped sampler and keeps every
    ``num_replicas``-th index starting at its rank (padded like ``DistributedSampler`` unless
    ``drop_last``). The ranks must draw the same sequence:

    * a sampler without its own ``generator`` (e.g. ``WeightedRandomSampler(w, n)``) draws from
      torch's global generator, which is seeded here with ``seed + epoch`` for the draw and then
      put back as it was, so all ranks agree and each epoch differs;
    * a sampler with its own ``torch.Generator`` must be built with the same seed on every rank;
      its state at the start of the epoch is part of ``state_dict()``, so a resumed run redraws
      the same order.

    Example::

        DistributedSamplerWrapper(WeightedRandomSampler(weights, 100), num_replicas=2, rank=0)
    """

    def __init__(
        self, sampler: Sampler, num_replicas: int, rank: int, drop_last: bool = False, seed: int = 0
    ) -> None:
        if not isinstance(sampler, Sized):
            raise TypeError(
                f"{type(sampler).__name__} has no len(), so its indices cannot be split evenly across "
                f"{num_replicas} ranks. Give the sampler a __len__, or give each rank its own sampler and "
                "pass use_distributed_sampler=False to setup_dataloaders."
            )
        self._wrapped_sampler = sampler
        super().__init__(
            _IndexList(list(range(len(sampler)))), num_replicas, rank, shuffle=False, seed=seed, drop_last=drop_last
        )
        self._epoch_generator_state: torch.Tensor | None = None
        self._restored_generator_state: torch.Tensor | None = None

    @property
    def sampler(self) -> Sampler:
        """The wrapped sampler."""
        return self._wrapped_sampler

    def _draw(self) -> list[int]:
        generator = getattr(self._wrapped_sampler, "generator", None)
        if isinstance(generator, torch.Generator):
            if self._restored_generator_state is not None:
                generator.set_state(self._restored_generator_state)
                self._restored_generator_state = None
            self._epoch_generator_state = generator.get_state()
            return list(self._wrapped_sampler)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed + self.epoch)
            return list(self._wrapped_sampler)

    def __iter__(self) -> Iterator[int]:
        self.dataset = _IndexList(self._draw())
        for position in super().__iter__():
            yield self.dataset[position]

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        if hasattr(self._wrapped_sampler, "set_epoch"):
            self._wrapped_sampler.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self._epoch_generator_state is not None:
            state[_GENERATOR_STATE] = self._epoch_generator_state
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        restored = state_dict.get(_GENERATOR_STATE)
        self._restored_generator_state = restored if restored is None else torch.as_tensor(restored)


def distributed_sampler_for(
    sampler: Sampler, dataset: Sized, num_replicas: int, rank: int, seed: int, drop_last: bool = False
) -> Sampler:
    """The per-rank replacement for the sampler a single-process loader would use.

    Sequential order stays sequential (rank ``r`` gets ``r, r + n, ...``), plain shuffling (torch's
    or torchdata's ``RandomSampler``) becomes a shuffled ``StatefulDistributedSampler`` seeded with
    ``seed`` (the order changes with ``set_epoch`` and is the same permutation on every rank), a
    ``DistributedSampler`` is kept, and any other sampler is wrapped in
    :class:`DistributedSamplerWrapper`.

    Example::

        sampler = distributed_sampler_for(loader.sampler, dataset, num_replicas=2, rank=1, seed=0)
    """
    if isinstance(sampler, DistributedSampler):
        return sampler
    if type(sampler) is SequentialSampler:
        return StatefulDistributedSampler(dataset, num_replicas, rank, shuffle=False, seed=seed, drop_last=drop_last)
    if type(sampler) in (RandomSampler, StatefulRandomSampler) and not sampler.replacement and (
        sampler._num_samples is None
    ):
        return StatefulDistributedSampler(dataset, num_replicas, rank, shuffle=True, seed=seed, drop_last=drop_last)
    return DistributedSamplerWrapper(sampler, num_replicas, rank, drop_last=drop_last, seed=seed)


def is_shuffling(sampler: Any) -> bool:
    """Whether ``sampler`` hands out indices in a random order."""
    if isinstance(sampler, DistributedSamplerWrapper):
        return is_shuffling(sampler.sampler)
    return isinstance(sampler, RandomSampler | StatefulRandomSampler) or bool(getattr(sampler, "shuffle", False))
