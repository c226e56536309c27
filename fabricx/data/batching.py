"""Batches of indices taken in one slice each, with torchdata's resumable batch-sampler state."""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Iterator
from typing import Any

from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import BatchSampler as StatefulBatchSampler
from torchdata.stateful_dataloader.stateful import Stateful

__all__ = ["ReplayedBatchSampler", "ResumableBatchSampler", "replayed", "with_resumable_batches"]

_SAMPLES_YIELDED = "samples_yielded"
_SAMPLER_STATE = "sampler_state"
_SAMPLER_ITER_STATE = "sampler_iter_state"


class ResumableBatchSampler(StatefulBatchSampler):
    """torchdata's ``BatchSampler`` (same batches, same saved state) that takes each batch in one go.

    torchdata's iterator asks the sampler for one index at a time in Python; this one slices the
    sampler's iterator (or calls its ``take(n)`` where it has one), as torch's own ``BatchSampler``
    does. Draws from the sampler's generator happen at the same points, and ``state_dict()`` has
    torchdata's keys, so checkpoints written by either load into the other.

    Example:
        ```python
        batches = ResumableBatchSampler(ResumableRandomSampler(range(10)), batch_size=4, drop_last=False)
        iterator = iter(batches); first = next(iterator); state = iterator.state_dict()
        ```
    """

    def __iter__(self) -> Iterator[list[int]]:
        return _Batches(self.sampler, self.batch_size, self.drop_last)


class _Batches(Iterator[list[int]]):
    def __init__(self, sampler: Any, batch_size: int, drop_last: bool) -> None:
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.samples_yielded = 0
        self._start(iter(sampler))

    def _start(self, sampler_iter: Iterator[int]) -> None:
        self.sampler_iter = sampler_iter
        take = getattr(sampler_iter, "take", None)
        self._take: Callable[[int], list[int]] = (
            take if take is not None else (lambda count: list(itertools.islice(sampler_iter, count)))
        )

    def __iter__(self) -> Iterator[list[int]]:
        return self

    def __next__(self) -> list[int]:
        batch = self._take(self.batch_size)
        taken = len(batch)
        self.samples_yielded += taken
        if taken == 0 or (self.drop_last and taken < self.batch_size):
            raise StopIteration
        return batch

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {_SAMPLES_YIELDED: self.samples_yielded}
        if isinstance(self.sampler, Stateful):
            state[_SAMPLER_STATE] = self.sampler.state_dict()
        if isinstance(self.sampler_iter, Stateful):
            state[_SAMPLER_ITER_STATE] = self.sampler_iter.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.samples_yielded = state_dict[_SAMPLES_YIELDED]
        if _SAMPLER_STATE in state_dict:
            self.sampler.load_state_dict(state_dict[_SAMPLER_STATE])
        self._start(iter(self.sampler))
        if _SAMPLER_ITER_STATE in state_dict:
            self.sampler_iter.load_state_dict(state_dict[_SAMPLER_ITER_STATE])  # type: ignore[attr-defined]
        if not (isinstance(self.sampler, Stateful) or isinstance(self.sampler_iter, Stateful)):
            # A sampler without state (torch's SequentialSampler): skip what was already handed out.
            collections.deque(itertools.islice(self.sampler_iter, self.samples_yielded), maxlen=0)


def with_resumable_batches(loader: StatefulDataLoader) -> StatefulDataLoader:
    """``loader`` reading its default batch sampler through `ResumableBatchSampler`.

    ``sampler``, ``batch_size`` and ``drop_last`` stay what they were.
    """
    batch_sampler = loader.batch_sampler
    if type(batch_sampler) is StatefulBatchSampler:
        # DataLoader refuses to rebind batch_sampler after __init__ (to keep it consistent with
        # sampler and batch_size); the replacement batches the same sampler with the same settings.
        replacement = ResumableBatchSampler(batch_sampler.sampler, batch_sampler.batch_size, batch_sampler.drop_last)
        object.__setattr__(loader, "batch_sampler", replacement)
    return loader


class ReplayedBatchSampler(Stateful):
    """A user's batch sampler without state of its own, made resumable by replaying its epoch up to the position.

    Its iterator counts the batches handed out; restoring one builds the user's iterator again and takes that
    many batches at once. The replay happens while the loader rebuilds the epoch under the random state the epoch
    began with, so a sampler that draws its order from the global generator (``RandomSampler`` without a
    generator) draws the same order, and the training loop's own draws are not disturbed (torchdata's fallback
    skips lazily, at the first batch after the resume, drawing from whatever the generator holds then).
    Everything else (``sampler``, ``batch_size``, ``len()``) is the wrapped batch sampler's.

    Example:
        ```python
        batches = ReplayedBatchSampler(BatchSampler(RandomSampler(dataset), 4, drop_last=False))
        iterator = iter(batches); next(iterator); state = iterator.state_dict()  # {"yielded": 1}
        ```
    """

    def __init__(self, batch_sampler: Any) -> None:
        self.batch_sampler = batch_sampler

    def __iter__(self) -> Iterator[Any]:
        return _ReplayedBatches(self.batch_sampler)

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "batch_sampler":
            raise AttributeError(name)
        return getattr(self.batch_sampler, name)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        return None


class _ReplayedBatches(Iterator[Any], Stateful):
    def __init__(self, batch_sampler: Any) -> None:
        self._batch_sampler = batch_sampler
        self._batches = iter(batch_sampler)
        self.yielded = 0

    def __next__(self) -> Any:
        batch = next(self._batches)
        self.yielded += 1
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"yielded": self.yielded}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._batches = iter(self._batch_sampler)
        self.yielded = int(state_dict["yielded"])
        collections.deque(itertools.islice(self._batches, self.yielded), maxlen=0)


def replayed(batch_sampler: Any) -> Any:
    """``batch_sampler`` as it is when it keeps its own state, else in a `ReplayedBatchSampler`."""
    return batch_sampler if isinstance(batch_sampler, Stateful) else ReplayedBatchSampler(batch_sampler)
