"""How Accelerate gives each process its share of a loader: whole batches dealt to the processes in
turn (or every batch split between them), iterable datasets cut the same way, and a shuffling sampler
seeded from a fixed seed plus the epoch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, Sampler

__all__ = ["BatchShard", "IterableShard", "SeedableRandomSampler", "loader_sampler"]


def check_split_batches(batch_size: int | None, num_processes: int) -> None:
    """Refuse ``split_batches=True`` for a batch size that does not cut into ``num_processes`` equal parts."""
    if batch_size is None or batch_size % num_processes:
        raise ValueError(
            f"split_batches=True cuts every batch into {num_processes} equal parts, but the batch size is "
            f"{batch_size}. Use a batch size that is a multiple of {num_processes}, or split_batches=False."
        )


def loader_sampler(loader: DataLoader) -> Sampler | None:
    """The index sampler behind a loader's batches (``None`` for a custom batch sampler without one).

    Example:
        ```python
        loader_sampler(DataLoader(range(8), batch_size=4, shuffle=True))  # its RandomSampler
        ```
    """
    holder = loader.sampler if isinstance(loader.sampler, BatchSampler) else loader.batch_sampler
    return getattr(holder, "sampler", None)


class SeedableRandomSampler(RandomSampler):
    """A ``RandomSampler`` whose order is a function of ``data_seed + epoch`` (Accelerate's
    ``use_seedable_sampler=True``): every process draws the same order without communicating, and
    iterating again after ``set_epoch(e)`` repeats epoch ``e``.

    ``data_seed`` defaults to torch's initial seed (what ``set_seed``/``manual_seed`` last set).

    Example:
        ```python
        sampler = SeedableRandomSampler(range(10), data_seed=42)
        list(sampler) == list(sampler)  # False: the second pass is epoch 1
        ```
    """

    def __init__(self, *args: Any, data_seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initial_seed = data_seed if data_seed is not None else torch.random.initial_seed()
        self.epoch = 0

    def __iter__(self) -> Iterator[int]:
        if self.generator is None:
            self.generator = torch.Generator()
        self.generator.manual_seed(self.initial_seed + self.epoch)
        yield from super().__iter__()
        self.set_epoch(self.epoch + 1)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch (and so the order) of the next pass."""
        self.epoch = epoch


class BatchShard(BatchSampler):
    """This process's batches out of a batch sampler shared by ``num_processes`` processes.

    Without ``split_batches`` the batches are dealt in turn (batch ``i`` goes to process
    ``i % num_processes``), so gathering one step's batches gives consecutive data. With
    ``split_batches`` every batch is cut into ``num_processes`` equal slices. With ``even_batches``
    (and not ``drop_last``) the last round is completed with samples from the start of the epoch so
    every process gets the same number of full batches; without it the last round is left short.

    Example:
        ```python
        shard = BatchShard(BatchSampler(range(10), 2, False), num_processes=2, process_index=1)
        list(shard)  # [[2, 3], [6, 7], [0, 1]]
        ```
    """

    def __init__(
        self,
        batch_sampler: Any,
        num_processes: int = 1,
        process_index: int = 0,
        split_batches: bool = False,
        even_batches: bool = True,
    ) -> None:
        self.batch_sampler = batch_sampler
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.even_batches = even_batches
        #: Samples that complete an uneven last round (default: the pass's first round).
        self.padding: list[Any] | None = None
        self.batch_size: int | None = getattr(batch_sampler, "batch_size", None)
        self.drop_last: bool = getattr(batch_sampler, "drop_last", False)
        if split_batches:
            check_split_batches(self.batch_size, num_processes)

    @property
    def sampler(self) -> Any:
        return getattr(self.batch_sampler, "sampler", None)

    @sampler.setter
    def sampler(self, value: Any) -> None:
        self.batch_sampler.sampler = value

    @property
    def total_length(self) -> int:
        return len(self.batch_sampler)

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.batch_sampler, "set_epoch"):
            self.batch_sampler.set_epoch(epoch)

    def __len__(self) -> int:
        total = len(self.batch_sampler)
        if self.split_batches:
            return total
        rounds, extra = divmod(total, self.num_processes)
        if extra == 0 or self.drop_last:
            return rounds
        if self.even_batches:
            return rounds + 1
        return rounds + (1 if self.process_index < extra else 0)

    def __iter__(self) -> Iterator[list[Any]]:
        return self._split() if self.split_batches else self._deal()

    def _split(self) -> Iterator[list[Any]]:
        size = self.batch_size
        assert size is not None
        part = size // self.num_processes
        mine = slice(part * self.process_index, part * (self.process_index + 1))
        first: list[Any] = []
        last: list[Any] = []
        for index, batch in enumerate(self.batch_sampler):
            if index == 0:
                first = list(batch)
            last = list(batch)
            if len(batch) == size:
                yield last[mine]
        if self.drop_last or not first or len(last) == size:
            return
        if not self.even_batches:
            if len(last) > mine.start:
                yield last[mine]
            return
        filler = list(first if self.padding is None else self.padding)
        while len(filler) < size:
            filler += filler
        yield (last + filler)[mine]

    def _deal(self) -> Iterator[list[Any]]:
        n, rank, size = self.num_processes, self.process_index, self.batch_size
        seen: list[Any] = []  # the first round's samples (or batches, without a batch size), to cycle
        mine: list[Any] | None = None
        index, batch = -1, []
        for index, batch in enumerate(self.batch_sampler):
            if not self.drop_last and index < n:
                if size is None:
                    seen.append(batch)
                else:
                    seen += list(batch)
            if index % n == rank:
                mine = batch
            if index % n == n - 1 and (size is None or len(batch) == size):
                yield mine  # type: ignore[misc]
                mine = None
        if self.drop_last or not seen:
            return
        if not self.even_batches:
            if mine:
                yield mine
            return
        if mine and (size is None or len(mine) == size):
            yield mine
        needed = n * size if size is not None else n
        if self.padding is not None:
            seen = list(self.padding)
        while len(seen) < needed:
            seen += seen
        # The round in progress is completed from the start of the epoch, batch by batch.
        pending: list[Any] = list(batch)
        if size is None or len(pending) == size:
            pending = []
            index += 1
        cursor = 0
        while index % n != 0 or pending:
            if size is None:
                filled = seen[cursor]
                cursor += 1
            else:
                end = cursor + size - len(pending)
                filled = pending + seen[cursor:end]
                cursor = end
            if index % n == rank:
                yield filled
            pending = []
            index += 1


class IterableShard(IterableDataset):
    """This process's samples of an iterable dataset every process reads in full.

    The stream is cut into rounds of ``batch_size * num_processes`` samples (``batch_size`` with
    ``split_batches``); each process keeps its contiguous slice of every round. Unless ``drop_last``,
    a short last round is completed with samples from the first one.

    Example:
        ```python
        list(IterableShard(range(8), batch_size=2, num_processes=2, process_index=1))  # [2, 3, 6, 7]
        ```
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        drop_last: bool = False,
        num_processes: int = 1,
        process_index: int = 0,
        split_batches: bool = False,
    ) -> None:
        if split_batches and batch_size > 1:
            check_split_batches(batch_size, num_processes)
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    def __len__(self) -> int:
        per_round = self.batch_size * self.num_processes
        rounds = len(self.dataset) // per_round if self.drop_last else -(-len(self.dataset) // per_round)
        return rounds * self.batch_size

    def __iter__(self) -> Iterator[Any]:
        generator = getattr(self.dataset, "generator", None)
        if not hasattr(self.dataset, "set_epoch") and isinstance(generator, torch.Generator):
            generator.manual_seed(self.epoch)
        round_size = self.batch_size if self.split_batches else self.batch_size * self.num_processes
        part = self.batch_size // self.num_processes if self.split_batches else self.batch_size
        mine = range(self.process_index * part, (self.process_index + 1) * part)
        first: list[Any] | None = None
        current: list[Any] = []
        for element in self.dataset:
            current.append(element)
            if len(current) == round_size:
                for i in mine:
                    yield current[i]
                if first is None:
                    first = list(current)
                current = []
        if self.drop_last or not current:
            return
        if first is None:
            first = list(current)
        while len(current) < round_size:
            current += first
        for i in mine:
            yield current[i]
