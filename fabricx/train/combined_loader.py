"""``CombinedLoader``: several training loaders yielding one combined batch per step."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

_MODES = ("max_size_cycle", "min_size")


class CombinedLoader:
    """Iterate a dict or list of loaders together; each batch is a dict/list with one batch per loader.

    ``mode="max_size_cycle"`` (Lightning's default for training) runs until the longest loader is
    exhausted, restarting shorter ones; ``"min_size"`` stops with the shortest. The trainer builds
    one from ``train_dataloaders={"a": loader_a, "b": loader_b}`` (or a list); its position is saved
    in checkpoints like a single loader's.

    Example:
        ```python
        loader = CombinedLoader({"a": loader_a, "b": loader_b})
        for batch in loader:
            batch["a"], batch["b"]
        ```
    """

    def __init__(self, loaders: Mapping[str, Any] | Sequence[Any], mode: str = "max_size_cycle") -> None:
        if mode not in _MODES:
            raise ValueError(f"CombinedLoader(mode={mode!r}); allowed are {list(_MODES)}.")
        if isinstance(loaders, Mapping):
            self._keys: list[Any] | None = list(loaders)
            self.loaders: list[Any] = list(loaders.values())
        else:
            self._keys = None
            self.loaders = list(loaders)
        if not self.loaders:
            raise ValueError("CombinedLoader needs at least one loader.")
        self.mode = mode
        self.batches_consumed = 0
        self._epoch = 0
        self._iterators: list[Iterator[Any] | None] = []
        self._started = False

    @property
    def flattened(self) -> list[Any]:
        """The loaders, in order."""
        return list(self.loaders)

    def __len__(self) -> int:
        lengths = [len(loader) for loader in self.loaders]
        return max(lengths) if self.mode == "max_size_cycle" else min(lengths)

    def set_epoch(self, epoch: int) -> None:
        self._epoch = epoch
        for loader in self.loaders:
            if hasattr(loader, "set_epoch"):
                loader.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        if not self._resuming:
            self.batches_consumed = 0
        self._resuming = False
        self._started = True
        self._iterators = [iter(loader) for loader in self.loaders]
        length = len(self)
        while self.batches_consumed < length:
            parts = []
            for index, loader in enumerate(self.loaders):
                iterator = self._iterators[index]
                assert iterator is not None  # every loader's iterator was created at the start of this pass
                try:
                    parts.append(next(iterator))
                except StopIteration:
                    if self.mode == "min_size":
                        return
                    self._iterators[index] = iterator = iter(loader)
                    parts.append(next(iterator))
            self.batches_consumed += 1
            yield dict(zip(self._keys, parts, strict=True)) if self._keys is not None else parts

    _resuming = False

    def state_dict(self) -> dict[str, Any]:
        return {
            "batches_consumed": self.batches_consumed,
            "started": self._started and self.batches_consumed > 0,
            "finished": self.batches_consumed >= len(self),
            "loaders": [loader.state_dict() for loader in self.loaders],
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.batches_consumed = int(state_dict["batches_consumed"])
        for loader, state in zip(self.loaders, state_dict["loaders"], strict=True):
            loader.load_state_dict(state)
        self._resuming = self.batches_consumed > 0
        self._started = self._resuming


__all__ = ["CombinedLoader"]
