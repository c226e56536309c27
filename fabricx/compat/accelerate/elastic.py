"""Continuing an Accelerate-adapter loader's interrupted pass at another number of processes (or
another batch size).

The position is kept as *samples of the pass's order consumed by all processes together*: every step
takes ``num_processes`` of the user's batches (one with ``split_batches``), so ``yielded`` steps have
consumed ``yielded * batch_size * num_processes`` samples of the sampler's order (``yielded *
batch_size`` when split). A run with another count draws the same order again (the saved pass's
random state), leaves out what was consumed, cuts the rest into its own batches and deals them to its
processes as Accelerate would, evening out the last round with samples from the start of the pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import BatchSampler

from fabricx.compat.accelerate.sharding import BatchShard

__all__ = ["ListedBatches", "consumed_samples", "rank_batches_of_the_rest", "resizable_batch_sampler"]


class ListedBatches:
    """Batches given as a list, with a batch sampler's ``batch_size`` and ``drop_last``.

    Example:
        ```python
        list(ListedBatches([[0, 1], [2]], batch_size=2, drop_last=False))  # [[0, 1], [2]]
        ```
    """

    def __init__(self, batches: list[list[int]], batch_size: int, drop_last: bool) -> None:
        self.batches = batches
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def resizable_batch_sampler(batch_sampler: Any) -> BatchSampler | None:
    """The user's batch sampler behind a prepared one when it is torch's plain ``BatchSampler`` (whose
    batches are consecutive runs of its sampler's order, so a position in samples is meaningful);
    ``None`` otherwise.

    Example:
        ```python
        resizable_batch_sampler(BatchShard(BatchSampler(range(8), 2, False), 2, 0))  # the BatchSampler
        ```
    """
    inner = batch_sampler.batch_sampler if isinstance(batch_sampler, BatchShard) else batch_sampler
    return inner if type(inner) is BatchSampler else None


def consumed_samples(steps: int, batch_size: int, num_processes: int, split_batches: bool, length: int) -> int:
    """Samples of the pass's order consumed after ``steps`` steps of every process.

    Example:
        ```python
        consumed_samples(3, batch_size=4, num_processes=2, split_batches=False, length=100)  # 24
        ```
    """
    per_step = batch_size if split_batches else batch_size * num_processes
    return min(steps * per_step, length)


def rank_batches_of_the_rest(
    order: list[int],
    consumed: int,
    batch_size: int,
    drop_last: bool,
    num_processes: int,
    process_index: int,
    split_batches: bool,
    even_batches: bool,
) -> list[list[int]]:
    """This process's batches of ``order[consumed:]``: cut into batches of ``batch_size`` as the user's
    ``BatchSampler`` would, then dealt in turn (or split) as Accelerate does; the last round is
    completed from the start of the pass (``order``), as an uninterrupted pass completes it.

    Example:
        ```python
        rank_batches_of_the_rest(list(range(10)), 6, 2, False, 3, 2, False, True)  # [[0, 1]]
        ```
    """
    rest = order[consumed:]
    batches = [rest[i : i + batch_size] for i in range(0, len(rest), batch_size)]
    if drop_last and batches and len(batches[-1]) < batch_size:
        batches.pop()
    if num_processes == 1:
        return batches
    shard = BatchShard(
        ListedBatches(batches, batch_size, drop_last),
        num_processes=num_processes,
        process_index=process_index,
        split_batches=split_batches,
        even_batches=even_batches,
    )
    shard.padding = order[: batch_size * (1 if split_batches else num_processes)]
    return list(shard)
