"""Prepared data loaders for the Accelerate adapter: which loader is being read, and which gathered
samples are the repeats a distributed sampler added to even out the last batches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DistributedSampler

from fabricx.data.loader import FabricDataLoader

__all__ = ["AcceleratedDataLoader", "SkipBatchesLoader", "padded_positions_mask"]


class _ActiveLoaders:
    """The prepared loaders currently being iterated, innermost last (an eval loop inside training)."""

    __slots__ = ("stack",)

    def __init__(self) -> None:
        self.stack: list[AcceleratedDataLoader] = []

    def current(self) -> AcceleratedDataLoader | None:
        return self.stack[-1] if self.stack else None

    def remove(self, loader: AcceleratedDataLoader) -> None:
        for index in range(len(self.stack) - 1, -1, -1):
            if self.stack[index] is loader:
                del self.stack[index]
                return


class AcceleratedDataLoader:
    """A loader returned by ``Accelerator.prepare``: this process's share of the data, batches on the
    device, and an exact position (``state_dict``/``load_state_dict``) for ``save_state``/``load_state``.

    Everything else (``dataset``, ``batch_size``, ``sampler``, ``len()``) is the underlying loader's.

    Example::

        loader = accelerator.prepare(DataLoader(dataset, batch_size=8, shuffle=True))
        for inputs, targets in loader: ...
    """

    _fabricx_per_rank = True
    # Checkpoints must call this object's own state_dict (the whole position), never an inner loader's.
    _fabricx_unwrapped = None

    def __init__(self, loader: FabricDataLoader, active: _ActiveLoaders, num_processes: int) -> None:
        self._inner = loader
        self._active = active
        self._num_processes = num_processes

    @property
    def base_dataloader(self) -> FabricDataLoader:
        """The fabricx loader doing the work."""
        return self._inner

    @property
    def total_batch_size(self) -> int | None:
        """Samples per step over all processes."""
        batch_size = self._inner.batch_size
        return None if batch_size is None else batch_size * self._num_processes

    @property
    def batches_consumed(self) -> int:
        """Batches handed out in the current epoch (restored by ``load_state``)."""
        return self._inner.batches_consumed

    @property
    def epoch(self) -> int:
        return self._inner.epoch

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch the next ``iter()`` starts (its shuffle order)."""
        self._inner.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self._inner)

    def __iter__(self) -> Iterator[Any]:
        # iter() of the inner loader now, so its epoch bookkeeping happens when the loop starts.
        return self._iterate(iter(self._inner))

    def _iterate(self, iterator: Iterator[Any]) -> Iterator[Any]:
        self._active.stack.append(self)
        try:
            yield from iterator
        finally:
            self._active.remove(self)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_inner":
            raise AttributeError(name)
        return getattr(self._inner, name)

    def state_dict(self) -> dict[str, Any]:
        return self._inner.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._inner.load_state_dict(state_dict)

    def current_batch_layout(self) -> tuple[int, int, int, int] | None:
        """``(dataset_length, num_replicas, first_local_index, local_batch_length)`` of the batch being
        processed, when the loader splits its data with a padding ``DistributedSampler``; else ``None``."""
        sampler = self._inner.sampler
        batch_size = self._inner.batch_size
        if not isinstance(sampler, DistributedSampler) or sampler.drop_last or batch_size is None:
            return None
        consumed = self._inner.batches_consumed
        if consumed < 1:
            return None
        first = (consumed - 1) * batch_size
        length = min(batch_size, sampler.num_samples - first)
        if length < 1:
            return None
        return len(sampler.dataset), sampler.num_replicas, first, length

    def __repr__(self) -> str:
        return f"AcceleratedDataLoader({self._inner!r})"


class SkipBatchesLoader:
    """Iterates a prepared loader, dropping the first ``num_batches`` batches of each pass.

    The skipped batches count as read, so gradient-accumulation windows and the saved position are
    those of an uninterrupted epoch.

    Example::

        for batch in accelerator.skip_first_batches(loader, 3): ...
    """

    def __init__(self, loader: Any, num_batches: int) -> None:
        if not isinstance(num_batches, int) or num_batches < 0:
            raise ValueError(f"num_batches={num_batches!r}; give an int >= 0.")
        self.loader = loader
        self.num_batches = num_batches

    def __len__(self) -> int:
        return max(0, len(self.loader) - self.num_batches)

    def __iter__(self) -> Iterator[Any]:
        for index, batch in enumerate(self.loader):
            if index >= self.num_batches:
                yield batch

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)


def padded_positions_mask(dataset_length: int, num_replicas: int, first: int, length: int) -> list[bool]:
    """Which rows of a gathered batch are real samples (``True``) and which are repeats (``False``).

    A padding ``DistributedSampler`` gives rank ``r`` the positions ``r, r + R, r + 2R, ...`` of a list
    that is the epoch's order followed by repeats up to a multiple of ``R``; positions at or past the
    dataset length are repeats. Gathered rows are rank-major: rank 0's ``length`` rows, then rank 1's...

    Example::

        padded_positions_mask(4, 3, 0, 2)  # [True, True, True, False, True, False]
    """
    return [
        rank + num_replicas * (first + offset) < dataset_length
        for rank in range(num_replicas)
        for offset in range(length)
    ]
