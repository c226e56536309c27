"""``CombinedLoader``: several iterables sampled together in one of four modes, as Lightning's."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import Any, Literal

from fabricx.train.data.loader_tree import TreeSpec, flatten, sized_length, unflatten

Mode = Literal["min_size", "max_size_cycle", "max_size", "sequential"]
MODES: tuple[str, ...] = ("min_size", "max_size_cycle", "max_size", "sequential")
# How each mode counts its batches from the lengths of the iterables (sequential: one after the other).
LENGTH_OF_MODE = {"min_size": min, "max_size_cycle": max, "max_size": max, "sequential": sum}
_EXHAUSTED = object()  # what next(iterator, default) gives at the end (a batch may itself be None)


class CombinedLoader(Iterable):
    """Combine iterables (a single one, or a dict/list/tuple of them, nested) under a sampling mode.

    Iterating yields `(batch, batch_idx, dataloader_idx)`, as Lightning's `CombinedLoader` does:

    * `"min_size"` (the default): stops with the shortest iterable;
    * `"max_size_cycle"`: stops with the longest, restarting the shorter ones;
    * `"max_size"`: stops with the longest, giving `None` for the exhausted ones;
    * `"sequential"`: each iterable to its end in turn; the batch is that iterable's own, and
      `dataloader_idx` says which one it came from.

    Give one to `Trainer.fit(train_dataloaders=...)` (any mode but `"sequential"`) or to
    `validate`/`test`/`predict`; a plain dict or list of training loaders is combined in
    `"max_size_cycle"` mode. A container of plain values (`[0, 1, 2]`) is one iterable, not several.

    Example:
        ```python
        loaders = {
            "a": DataLoader(range(6), batch_size=4),
            "b": DataLoader(range(15), batch_size=5),
        }
        combined = CombinedLoader(loaders, "max_size_cycle")
        for batch, batch_idx, dataloader_idx in combined:
            batch["a"], batch["b"]
        ```
    """

    def __init__(self, iterables: Any, mode: Mode = "min_size") -> None:
        if mode not in MODES:
            raise ValueError(f"Unsupported mode {mode!r}, please select one of: {list(MODES)}.")
        self._iterables = iterables
        self._flattened, self._spec = flatten(iterables)
        self._mode: str = mode
        self._iterator: _ModeIterator | None = None
        self._limits: list[float] | None = None

    @property
    def iterables(self) -> Any:
        """The collection of iterables as it was given."""
        return self._iterables

    @property
    def mode(self) -> str:
        """The sampling mode (`"min_size"`, `"max_size_cycle"`, `"max_size"` or `"sequential"`)."""
        return self._mode

    @property
    def spec(self) -> TreeSpec:
        """The shape of the collection: `unflatten(values, spec)` builds a batch of the same shape."""
        return self._spec

    @property
    def flattened(self) -> list[Any]:
        """The iterables, in the collection's order."""
        return self._flattened

    @flattened.setter
    def flattened(self, flattened: list[Any]) -> None:
        if len(flattened) != len(self._flattened):
            raise ValueError(
                f"Mismatch in flattened length ({len(flattened)}) and existing length ({len(self._flattened)})"
            )
        self._iterables = unflatten(flattened, self._spec)
        self._flattened = list(flattened)

    @property
    def limits(self) -> list[float] | None:
        """How many batches to take from each iterable at most (`None`: all)."""
        return self._limits

    @limits.setter
    def limits(self, limits: float | list[float] | None) -> None:
        if isinstance(limits, (int, float)):
            same: list[float] = [limits] * len(self._flattened)
            self._limits = same
            return
        if isinstance(limits, list) and len(limits) != len(self._flattened):
            raise ValueError(
                f"Mismatch in number of limits ({len(limits)}) and number of iterables ({len(self._flattened)})"
            )
        self._limits = limits

    @property
    def sampler(self) -> Any:
        """The iterables' samplers, in the collection's shape (`None` for an iterable without one)."""
        return unflatten([getattr(item, "sampler", None) for item in self._flattened], self._spec)

    @property
    def batch_sampler(self) -> Any:
        """The iterables' batch samplers, in the collection's shape (`None` for an iterable without one)."""
        return unflatten([getattr(item, "batch_sampler", None) for item in self._flattened], self._spec)

    def __iter__(self) -> CombinedLoader:
        self._iterator = _ITERATORS[self._mode](self._flattened, self._limits)
        return self

    def __next__(self) -> tuple[Any, int, int]:
        if self._iterator is None:
            iter(self)
        assert self._iterator is not None
        values, batch_idx, dataloader_idx = self._iterator.next()
        if self._mode == "sequential":
            return values, batch_idx, dataloader_idx
        return unflatten(values, self._spec), batch_idx, dataloader_idx

    def __len__(self) -> int:
        """The number of batches of a pass (call `iter()` first, as with Lightning's)."""
        if self._iterator is None:
            raise RuntimeError("Please call `iter(combined_loader)` first.")
        return int(combined_length(self._flattened, self._mode, self._limits))

    def reset(self) -> None:
        """Forget the current pass (the next `iter()` starts from the beginning)."""
        self._iterator = None


def combined_length(iterables: list[Any], mode: str, limits: list[float] | None = None) -> float:
    """Batches in a pass of `iterables` combined in `mode` (`inf` when one that decides has no length)."""
    lengths = [sized_length(item) for item in iterables]
    if limits is not None:
        lengths = [min(length, limit) for length, limit in zip(lengths, limits, strict=True)]
    return LENGTH_OF_MODE[mode](lengths) if lengths else 0


class _ModeIterator(ABC):
    """One pass over the flattened iterables; `next()` gives `(values, batch_idx, dataloader_idx)`.

    As in Lightning, limits shorten `len()` (the loops stop there), and only the sequential mode stops at them.
    """

    def __init__(self, iterables: list[Any], limits: list[float] | None) -> None:
        self.iterables = iterables
        self.limits = limits
        self.iterators: list[Iterator[Any]] = [iter(item) for item in iterables]
        self.index = 0

    @abstractmethod
    def next(self) -> tuple[Any, int, int]: ...

    def _advance(self) -> int:
        index = self.index
        self.index += 1
        return index


class _MinSize(_ModeIterator):
    def next(self) -> tuple[Any, int, int]:
        values = [next(iterator) for iterator in self.iterators]
        return values, self._advance(), 0


class _MaxSizeCycle(_ModeIterator):
    def __init__(self, iterables: list[Any], limits: list[float] | None) -> None:
        super().__init__(iterables, limits)
        self.consumed = [False] * len(iterables)

    def next(self) -> tuple[Any, int, int]:
        values = []
        for i, iterator in enumerate(self.iterators):
            try:
                values.append(next(iterator))
            except StopIteration:
                self.consumed[i] = True
                if all(self.consumed):
                    raise
                self.iterators[i] = iter(self.iterables[i])
                values.append(next(self.iterators[i]))
        return values, self._advance(), 0


class _MaxSize(_ModeIterator):
    def next(self) -> tuple[Any, int, int]:
        values: list[Any] = [None] * len(self.iterators)
        exhausted = True
        for i, iterator in enumerate(self.iterators):
            with contextlib.suppress(StopIteration):
                values[i] = next(iterator)
                exhausted = False
        if exhausted:
            raise StopIteration
        return values, self._advance(), 0


class _Sequential(_ModeIterator):
    def __init__(self, iterables: list[Any], limits: list[float] | None) -> None:
        self.iterables, self.limits, self.index = iterables, limits, 0
        self.current = 0
        self.iterators = [iter(iterables[0])] if iterables else []

    def next(self) -> tuple[Any, int, int]:
        while self.current < len(self.iterables):
            within_limit = self.limits is None or self.index < self.limits[self.current]
            value = next(self.iterators[0], _EXHAUSTED) if within_limit else _EXHAUSTED
            if value is not _EXHAUSTED:
                return value, self._advance(), self.current
            self.current += 1
            self.index = 0
            self.iterators = [iter(self.iterables[self.current])] if self.current < len(self.iterables) else []
        raise StopIteration


_ITERATORS: dict[str, type[_ModeIterator]] = {
    "min_size": _MinSize,
    "max_size_cycle": _MaxSizeCycle,
    "max_size": _MaxSize,
    "sequential": _Sequential,
}

__all__ = ["MODES", "CombinedLoader", "Mode", "combined_length"]
