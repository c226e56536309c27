"""Giving each rank its own share of a dataset, with an order that depends on the epoch."""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch.utils.data import Dataset, DistributedSampler, RandomSampler, Sampler, SequentialSampler
from torchdata.stateful_dataloader.sampler import RandomSampler as StatefulRandomSampler
from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

from fabricx._compat.sampler import draws_a_permutation

_GENERATOR_STATE = "wrapped_generator_state"


class ResumableRandomSampler(RandomSampler):
    """torch's ``RandomSampler`` that can save and restore its position in the current epoch.

    Each epoch draws exactly what torch's sampler draws, at the same moment (the first index
    asked for): without a ``generator``, one seed from torch's global generator; with one, the
    permutation straight from it. The iterator's ``state_dict()`` holds that seed (or the
    generator's state before the draw) and how many indices were handed out, so a restored
    iterator continues the same order without drawing anything.

    Example:
        ```python
        sampler = ResumableRandomSampler(dataset, generator=torch.Generator().manual_seed(0))
        iterator = iter(sampler); first = next(iterator)
        state = iterator.state_dict()
        ```
    """

    #: How the epoch being read drew its order (``{"seed": ...}`` or ``{"generator": ...}``), once drawn.
    last_start: dict[str, Any] | None = None

    def __iter__(self) -> Iterator[int]:
        return _ResumableRandomOrder(self)

    def order_from(self, start: dict[str, Any]) -> list[int]:
        """The whole order of an epoch that began with ``start`` (a ``last_start``); draws nothing
        from the global generator and leaves this sampler's generator as it was."""
        saved = self.generator.get_state() if self.generator is not None else None
        iterator = _ResumableRandomOrder(self)
        try:
            iterator._begin(start)
            return list(iterator._indices)  # type: ignore[arg-type]
        finally:
            if saved is not None:
                self.generator.set_state(saved)  # type: ignore[union-attr]


class _ResumableRandomOrder(Iterator[int]):
    """One epoch of a `ResumableRandomSampler` (a torchdata ``Stateful`` iterator)."""

    def __init__(self, sampler: ResumableRandomSampler) -> None:
        self._sampler = sampler
        self._indices: Iterator[int] | None = None
        self._start: dict[str, Any] | None = None  # {"seed": int} or {"generator": state}
        self.yielded = 0

    def _begin(self, start: dict[str, Any] | None) -> None:
        sampler = self._sampler
        if start is None:
            if sampler.generator is None:
                # The very draw torch's RandomSampler makes from the global generator.
                start = {"seed": int(torch.empty((), dtype=torch.int64).random_().item())}
            else:
                start = {"generator": sampler.generator.get_state()}
        if "seed" in start:
            generator = torch.Generator()
            generator.manual_seed(int(start["seed"]))
        else:
            generator = sampler.generator
            if generator is None:
                raise ValueError("This sampler state was saved with a generator; build the sampler with one.")
            generator.set_state(torch.as_tensor(start["generator"]))
        self._start = start
        sampler.last_start = start
        # torch's own iteration code, run with that generator: the same order for every torch version.
        view = copy.copy(sampler)
        view.generator = generator
        self._indices = RandomSampler.__iter__(view)

    def __iter__(self) -> Iterator[int]:
        return self

    def __next__(self) -> int:
        if self._indices is None:
            self._begin(None)
        index = next(self._indices)  # type: ignore[arg-type]
        self.yielded += 1
        return index

    def take(self, count: int) -> list[int]:
        """The next ``count`` indices (fewer at the end of the epoch), as ``count`` calls of ``next``."""
        if self._indices is None:
            self._begin(None)
        batch = list(itertools.islice(self._indices, count))  # type: ignore[arg-type]
        self.yielded += len(batch)
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"start": self._start, "yielded": self.yielded}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        start, yielded = state_dict.get("start"), int(state_dict.get("yielded", 0))
        self._indices, self._start, self.yielded = None, None, 0
        if start is None:
            return  # the epoch had not drawn its order yet; it draws it on the first next()
        self._begin(start)
        for _ in range(yielded):
            next(self._indices)  # type: ignore[arg-type]
        self.yielded = yielded


class _IndexList(Dataset):
    def __init__(self, indices: list[int]) -> None:
        self.indices = indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, item: int) -> int:
        return self.indices[item]


class ElasticDistributedSampler(StatefulDistributedSampler):
    """torch's ``DistributedSampler`` (the same indices for every rank and epoch) that can also deal
    the rest of an epoch begun at another number of ranks.

    Each epoch has one global order (a permutation seeded with ``seed + epoch``, or ``0..n-1``), which
    rank ``r`` of ``num_replicas`` reads as ``order[r::num_replicas]``, padded (or cut, with
    ``drop_last``) to equal shares. After `resume_epoch()` with ``start=c``, that epoch's first
    ``c`` samples of the order are left out and the remaining ones are dealt the same way across this
    run's ranks; other epochs are unaffected. ``order`` replaces the epoch's order (the remainder of a
    single-process epoch, whose order came from torch's global generator).

    Example:
        ```python
        sampler = ElasticDistributedSampler(dataset, num_replicas=3, rank=0, shuffle=True, seed=0)
        sampler.resume_epoch(epoch=1, start=24)  # 24 samples of epoch 1 were consumed at 2 ranks
        sampler.set_epoch(1)
        ```
    """

    _RESUME = "resume"

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        super().__init__(dataset, num_replicas, rank, shuffle, seed, drop_last)  # type: ignore[arg-type]
        self._full_shares = (self.num_samples, self.total_size)
        self._resume: dict[str, Any] | None = None

    def epoch_order(self, epoch: int | None = None) -> list[int]:
        """The global order of ``epoch`` (default: the current one), before padding and dealing."""
        epoch = self.epoch if epoch is None else epoch
        resume = self._resume
        if resume is not None and resume["epoch"] == epoch and resume.get("order") is not None:
            return list(resume["order"])
        length = len(self.dataset)  # type: ignore[arg-type]
        if not self.shuffle:
            return list(range(length))
        generator = torch.Generator()
        generator.manual_seed(self.seed + epoch)
        return torch.randperm(length, generator=generator).tolist()

    @property
    def start(self) -> int:
        """Samples of the current epoch's order consumed before this run's share of it began."""
        resume = self._resume
        return int(resume["start"]) if resume is not None and resume["epoch"] == self.epoch else 0

    def resume_epoch(self, epoch: int, start: int, order: list[int] | None = None) -> None:
        """Make ``epoch`` deal only its samples from position ``start`` of its order on."""
        length = len(order) if order is not None else len(self.dataset)  # type: ignore[arg-type]
        if not 0 <= start < length:
            raise ValueError(f"start={start} is outside the epoch's {length} samples.")
        self._resume = {"epoch": int(epoch), "start": int(start), "order": order}
        self._update_shares()

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        self._update_shares()

    def _update_shares(self) -> None:
        start = self.start
        if start == 0:
            self.num_samples, self.total_size = self._full_shares
            return
        remaining = len(self.epoch_order()) - start
        world = self.num_replicas
        if self.drop_last and remaining % world:
            self.num_samples = remaining // world
        else:
            self.num_samples = math.ceil(remaining / world)
        self.total_size = self.num_samples * world

    def _indices(self) -> list[int]:
        resume = self._resume
        if self.start == 0 and (resume is None or resume["epoch"] != self.epoch or resume.get("order") is None):
            return list(DistributedSampler.__iter__(self))  # exactly torch's DistributedSampler
        remaining = self.epoch_order()[self.start :]
        if len(remaining) < self.total_size:  # pad like DistributedSampler: from the beginning of the rest
            padding = self.total_size - len(remaining)
            remaining += (remaining * math.ceil(padding / len(remaining)))[:padding]
        return remaining[self.rank : self.total_size : self.num_replicas]

    def __iter__(self) -> Iterator[int]:
        return _CountedShare(self)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self._resume is not None:
            state[self._RESUME] = dict(self._resume)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        resume = state_dict.get(self._RESUME)
        self._resume = None if resume is None else dict(resume)
        self._update_shares()


class _CountedShare(Iterator[int]):
    """This rank's indices of an `ElasticDistributedSampler` epoch, counted into the sampler's
    ``yielded``. Like torchdata's generator, it starts (from a restored position, if any) at the
    first index asked for, not at ``iter()``."""

    def __init__(self, sampler: ElasticDistributedSampler) -> None:
        self._sampler = sampler
        self._share: list[int] | None = None
        self._position = 0

    def _make_share(self) -> list[int]:
        sampler = self._sampler
        sampler.yielded = 0
        if sampler.next_yielded is not None:  # restored by load_state_dict()
            sampler.yielded, sampler.next_yielded = sampler.next_yielded, None
        self._position = sampler.yielded
        self._share = sampler._indices()
        return self._share

    def __iter__(self) -> Iterator[int]:
        return self

    def __next__(self) -> int:
        share = self._share if self._share is not None else self._make_share()
        position = self._position
        if position >= len(share):
            raise StopIteration
        self._position = position + 1
        self._sampler.yielded += 1
        return share[position]

    def take(self, count: int) -> list[int]:
        """The next ``count`` indices (fewer at the end of the epoch), as ``count`` calls of ``next``."""
        share = self._share if self._share is not None else self._make_share()
        batch = share[self._position : self._position + count]
        self._position += len(batch)
        self._sampler.yielded += len(batch)
        return batch


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

    Example:
        ```python
        weighted = WeightedRandomSampler(weights, 100)
        DistributedSamplerWrapper(weighted, num_replicas=2, rank=0)
        ```
    """

    def __init__(self, sampler: Sampler, num_replicas: int, rank: int, drop_last: bool = False, seed: int = 0) -> None:
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
        wrapped_set_epoch = getattr(self._wrapped_sampler, "set_epoch", None)
        if wrapped_set_epoch is not None:
            wrapped_set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self._epoch_generator_state is not None:
            state[_GENERATOR_STATE] = self._epoch_generator_state
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        restored = state_dict.get(_GENERATOR_STATE)
        self._restored_generator_state = restored if restored is None else torch.as_tensor(restored)

    def close_restored_epoch(self) -> None:
        """The restored epoch was read to its end: its position must not reach the next epoch, and the
        wrapped sampler's generator moves on past that epoch's draw, as it had in the run that saved. The state
        then names the next epoch's start: where its order will be drawn from, and nothing yielded."""
        self.next_yielded = None
        if self._restored_generator_state is not None:
            self._draw()
        self.yielded = 0
        generator = getattr(self._wrapped_sampler, "generator", None)
        if isinstance(generator, torch.Generator):
            self._epoch_generator_state = generator.get_state()


def close_restored_epoch(sampler: Any) -> None:
    """Drop the position a sampler was restored to once that epoch is known to be over, so that its state names
    the start of the next epoch.

    torchdata's ``StatefulDistributedSampler`` keeps a restored position on the sampler itself (not on
    its iterator) until the next ``iter()`` reads it; restored at an epoch's end, that next ``iter()``
    is the following epoch's, which would then start past its end and yield nothing. Its count of indices
    handed out is reset only at the first one asked for, too late for torchdata's snapshot of a pass's start
    (taken before that): a resume from that snapshot would start past the epoch's end.

    Example:
        ```python
        sampler.load_state_dict({"yielded": 32})  # the whole share of an epoch that had ended
        close_restored_epoch(sampler)  # the next epoch starts at its first index
        ```
    """
    close = getattr(sampler, "close_restored_epoch", None)
    if close is not None:
        close()
    elif isinstance(sampler, StatefulDistributedSampler):
        sampler.next_yielded = None
        sampler.yielded = 0


def distributed_sampler_for(
    sampler: Sampler, dataset: Sized, num_replicas: int, rank: int, seed: int, drop_last: bool = False
) -> Sampler:
    """The per-rank replacement for the sampler a single-process loader would use.

    Sequential order stays sequential (rank ``r`` gets ``r, r + n, ...``), plain shuffling (torch's
    or torchdata's ``RandomSampler``) becomes a shuffled `ElasticDistributedSampler` seeded with
    ``seed`` (the order changes with ``set_epoch`` and is the same permutation on every rank), a
    ``DistributedSampler`` is kept, and any other sampler is wrapped in
    `DistributedSamplerWrapper`.

    Example:
        ```python
        sampler = distributed_sampler_for(loader.sampler, dataset, num_replicas=2, rank=1, seed=0)
        ```
    """
    if isinstance(sampler, DistributedSampler):
        return sampler
    if type(sampler) is SequentialSampler:
        return ElasticDistributedSampler(dataset, num_replicas, rank, shuffle=False, seed=seed, drop_last=drop_last)
    if is_plain_shuffle(sampler):
        return ElasticDistributedSampler(dataset, num_replicas, rank, shuffle=True, seed=seed, drop_last=drop_last)
    return DistributedSamplerWrapper(sampler, num_replicas, rank, drop_last=drop_last, seed=seed)


def is_plain_shuffle(sampler: Any) -> bool:
    """Whether ``sampler`` is a plain shuffle: each sample once per epoch, in a random order."""
    return type(sampler) in (RandomSampler, StatefulRandomSampler, ResumableRandomSampler) and draws_a_permutation(
        sampler
    )


def is_shuffling(sampler: Any) -> bool:
    """Whether ``sampler`` hands out indices in a random order."""
    if isinstance(sampler, DistributedSamplerWrapper):
        return is_shuffling(sampler.sampler)
    return isinstance(sampler, RandomSampler | StatefulRandomSampler) or bool(getattr(sampler, "shuffle", False))
