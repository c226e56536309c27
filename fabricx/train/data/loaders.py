"""The Trainer's loaders: whatever Lightning accepts (DataLoaders, any iterable, collections of them,
`CombinedLoader`s) set up on the Fabric and iterated with a position that checkpoints can hold.

A `DataLoader` goes through `fabric.setup_dataloaders` (exact mid-epoch resume); any other iterable is an
`IterableLoader` (batches moved to the device, counted; its own `state_dict()` saved where it has one); a
collection of them is a `LoaderGroup`, which yields one combined batch per step in a `CombinedLoader` mode
(training, and evaluation of a `CombinedLoader` in a mode other than `"sequential"`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import DataLoader

from fabricx.accumulation.state import AccumulationState
from fabricx.data.loader import FabricDataLoader
from fabricx.train.data.combined_loader import CombinedLoader, combined_length
from fabricx.train.data.loader_tree import TreeSpec, flatten, is_stateful, sized_length, unflatten
from fabricx.utilities.rank_zero import rank_zero_warn
from fabricx.utilities.warnings import PossibleUserWarning

_NOT_RESUMABLE = (
    "You're resuming from a checkpoint that ended before the epoch ended and your dataloader is not resumable. "
    "This can cause unreliable results if further training is done. Consider using an end-of-epoch checkpoint or "
    "make your dataloader resumable by implementing the `state_dict` / `load_state_dict` interface."
)


_USER_LOADER = "_fabricx_user_loader"


def set_sampler_epoch(iterable: Any, epoch: int) -> None:
    """Call `set_epoch(epoch)` on the sampler and batch sampler of `iterable` where they have it."""
    batch_sampler = getattr(iterable, "batch_sampler", None)
    for holder in (getattr(iterable, "sampler", None), batch_sampler, getattr(batch_sampler, "sampler", None)):
        set_epoch = getattr(holder, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)


class IterableLoader:
    """An iterable that is not a `DataLoader` (a list, a generator, a custom class), as the Trainer runs it.

    Batches are moved to the device; `batches_consumed` counts the current pass. A checkpoint holds the
    count and, where the iterable has `state_dict()`/`load_state_dict()`, its own state, which it uses to
    continue; one without cannot continue inside a pass: it starts again, with a `PossibleUserWarning`.

    Example:
        ```python
        loader = IterableLoader(my_stream, to_device=fabric.to_device)
        for batch in loader: ...
        ```
    """

    _fabricx_per_rank = True

    def __init__(self, iterable: Any, to_device: Callable[[Any], Any] | None = None) -> None:
        self.loader = iterable
        self._to_device = to_device
        self.batches_consumed = 0
        self.epoch = 0
        self._started = False
        self._finished = False
        self._resume_pending = False

    def __len__(self) -> int:
        length = sized_length(self.loader)
        if length == float("inf"):
            raise TypeError(f"{type(self.loader).__name__} has no length")
        return int(length)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self._resume_pending = False
        set_sampler_epoch(self.loader, epoch)

    def __iter__(self) -> Iterator[Any]:
        if not self._resume_pending:
            self.batches_consumed = 0
        self._resume_pending = False
        self._started, self._finished = True, False
        return self._iterate(iter(self.loader))

    def _iterate(self, iterator: Iterator[Any]) -> Iterator[Any]:
        to_device = self._to_device
        for batch in iterator:
            self.batches_consumed += 1
            yield batch if to_device is None else to_device(batch)
        self._finished = True

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "started": self._started,
            "finished": self._finished,
            "batches_consumed": self.batches_consumed,
            "iterable": self.loader.state_dict() if is_stateful(self.loader) else None,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epoch = int(state_dict.get("epoch", 0))
        self._started = bool(state_dict["started"])
        self._finished = bool(state_dict["finished"])
        self.batches_consumed = int(state_dict["batches_consumed"])
        inner = state_dict.get("iterable")
        if inner is not None and is_stateful(self.loader):
            self.loader.load_state_dict(inner)
        self._resume_pending = self._started and not self._finished

    @property
    def resumable(self) -> bool:
        """Whether a pass cut by a checkpoint continues where it was (the iterable keeps its own state)."""
        return is_stateful(self.loader)


class LoaderGroup:
    """Several set-up loaders combined batch by batch (`mode` as `CombinedLoader`'s), yielding the batch only.

    Its state is each loader's state and the count of combined batches, so a run resumes inside a pass.

    Example:
        ```python
        combined = LoaderGroup([loader_a, loader_b], spec, "max_size_cycle")
        for batch in combined: batch[0], batch[1]
        ```
    """

    _fabricx_per_rank = True

    def __init__(
        self,
        loaders: list[Any],
        spec: TreeSpec,
        mode: str,
        source: CombinedLoader | None = None,
        accumulation: AccumulationState | None = None,
    ) -> None:
        self.loaders = loaders
        self.spec = spec
        self.mode = mode
        self.source = source
        self._accumulation = accumulation
        self.batches_consumed = 0
        self._started = False
        self._finished = False
        self._resuming = False

    @property
    def iterables(self) -> Any:
        """The user's loaders in the shape they were given (Lightning's `trainer.train_dataloader`)."""
        if self.source is not None:
            return self.source.iterables
        return unflatten([user_loader(loader) for loader in self.loaders], self.spec)

    def __len__(self) -> int:
        length = combined_length(self.loaders, self.mode)
        if length == float("inf"):
            raise TypeError("a combined loader with an iterable of no length")
        return int(length)

    def set_epoch(self, epoch: int) -> None:
        self._resuming = False
        for loader in self.loaders:
            loader.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        resuming, self._resuming = self._resuming, False
        if not resuming:
            self.batches_consumed = 0
        self._started = True
        self._finished = False
        # A resumed "max_size_cycle" pass no longer knows which loaders it had already cycled (that is what ends
        # an uninterrupted pass): it ends at the pass's length instead, the same place.
        limit = len(self) if resuming and self.mode == "max_size_cycle" else None
        combined = iter(CombinedLoader(self.loaders, self.mode))  # type: ignore[arg-type]
        while limit is None or self.batches_consumed < limit:
            try:
                values, _, _ = next(combined)
            except StopIteration:
                break
            self.batches_consumed += 1
            if self._accumulation is not None:
                # The group's pass bounds the accumulation windows, not the pass of whichever loader yielded last
                # (a shorter loader cycled by "max_size_cycle" would carry the last window into the next epoch).
                self._accumulation.set_active_loader(self)
            yield unflatten(values, self.spec)
        self._finished = True

    @property
    def resumable(self) -> bool:
        return all(getattr(loader, "resumable", True) for loader in self.loaders)

    def state_dict(self) -> dict[str, Any]:
        return {
            "batches_consumed": self.batches_consumed,
            "started": self._started and self.batches_consumed > 0,
            # The pass ran to its end (not only its last batch handed out: a loop still inside it continues it).
            "finished": self._finished,
            "loaders": [loader.state_dict() for loader in self.loaders],
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.batches_consumed = int(state_dict["batches_consumed"])
        for loader, state in zip(self.loaders, state_dict["loaders"], strict=True):
            loader.load_state_dict(state)
        saved = [int(state.get("batches_consumed", 0)) for state in state_dict["loaders"]]
        counts = [getattr(loader, "batches_consumed", count) for loader, count in zip(self.loaders, saved, strict=True)]
        if counts != saved:
            # Saved by another number of processes: each loader counts its batches at this size now, and the pass
            # is as far as the loader whose length bounds it (the longest but in "min_size").
            lengths = [sized_length(loader) for loader in self.loaders]
            pick = min if self.mode == "min_size" else max
            self.batches_consumed = counts[lengths.index(pick(lengths))]
        self._started = self.batches_consumed > 0
        self._resuming = self._started and not state_dict.get("finished", False)
        if not self._resuming:
            # The next pass of the group starts every loader's next pass, as it does in an uninterrupted run (a
            # shorter loader cycled by "max_size_cycle" stops in the middle of its own pass).
            for loader in self.loaders:
                end_pass = getattr(loader, "end_pass", None)
                if end_pass is not None:
                    end_pass()


def shutdown_workers(*loaders: Any) -> None:
    """End the worker processes of the set-up loaders given (groups included), keeping their positions: what
    the Trainer does when an entry point returns, as Lightning does (see `FabricDataLoader.shutdown_workers`).

    Example:
        ```python
        shutdown_workers(fit_data.train_loader, *fit_data.val_loaders)
        ```
    """
    for loader in loaders:
        if isinstance(loader, LoaderGroup):
            shutdown_workers(*loader.loaders)
        elif isinstance(loader, FabricDataLoader):
            loader.shutdown_workers()


def user_loader(loader: Any) -> Any:
    """The user's loader inside a set-up one (what `setup_one()` was given), or a group's collection of them."""
    if isinstance(loader, LoaderGroup):
        return loader.iterables
    if isinstance(loader, IterableLoader):
        return loader.loader
    try:
        # Read past a set-up loader's `__getattr__` (which asks the loader inside), and never through `__dict__`:
        # reading an instance's `__dict__` slows every attribute of it for good, the per-batch counting included.
        return object.__getattribute__(loader, _USER_LOADER)
    except AttributeError:
        return loader


def _stateful_user_loaders(loader: Any) -> list[Any]:
    flat = loader.loaders if isinstance(loader, LoaderGroup) else [] if loader is None else [loader]
    return [user for user in map(user_loader, flat) if is_stateful(user)]


def lightning_loader_states(loader: Any) -> list[dict[str, Any]]:
    """Lightning's `loops.fit_loop.state_dict.combined_loader`: the states of the user's stateful iterables."""
    return [user.state_dict() for user in _stateful_user_loaders(loader)]


def load_lightning_loader_states(loader: Any, states: list[dict[str, Any]]) -> None:
    """Give the user's stateful iterables their states from a Lightning-written checkpoint, in order."""
    stateful = _stateful_user_loaders(loader)
    if len(stateful) != len(states):
        raise RuntimeError(
            f"The CombinedLoader has {len(stateful)} stateful loaders, but found {len(states)} states in the "
            "checkpoint. Please make sure you define the same dataloaders that were used when saving the checkpoint."
        )
    for user, state in zip(stateful, states, strict=True):
        user.load_state_dict(state)


def warn_if_not_resumable(loader: Any) -> None:
    """After restoring a checkpoint written inside a pass: warn where the loader cannot continue it (a pass
    whose last batch was consumed has nothing to continue)."""
    if getattr(loader, "resumable", True) or loader.batches_consumed >= sized_length(loader):
        return
    rank_zero_warn(_NOT_RESUMABLE, category=PossibleUserWarning)


def setup_one(
    loader: Any, setup_dataloader: Callable[[DataLoader], Any], to_device: Callable[[Any], Any] | None, where: str
) -> Any:
    """A DataLoader set up by `setup_dataloader`; any other iterable as an `IterableLoader`."""
    if isinstance(loader, DataLoader):
        set_up = setup_dataloader(loader)
        setattr(set_up, _USER_LOADER, loader)  # Lightning's trainer.*_dataloader(s) give the user's loader
        return set_up
    if isinstance(loader, (IterableLoader, LoaderGroup, FabricDataLoader)):
        return loader
    if not hasattr(loader, "__iter__"):
        raise TypeError(
            f"{where} got a {type(loader).__name__}, which is not iterable. Pass a DataLoader, any iterable of "
            "batches, or a dict/list of them (a CombinedLoader)."
        )
    return IterableLoader(loader, to_device)


def flatten_loaders(given: Any) -> tuple[list[Any], TreeSpec, str | None, CombinedLoader | None]:
    """`(loaders, spec, mode, source)` of what was given: a `CombinedLoader`'s iterables and mode, or a plain
    collection (`mode=None`: the caller's default)."""
    if isinstance(given, CombinedLoader):
        return list(given.flattened), given.spec, given.mode, given
    loaders, spec = flatten(given)
    return loaders, spec, None, None


__all__ = [
    "IterableLoader",
    "LoaderGroup",
    "flatten_loaders",
    "is_stateful",
    "lightning_loader_states",
    "load_lightning_loader_states",
    "set_sampler_epoch",
    "setup_one",
    "shutdown_workers",
    "sized_length",
    "user_loader",
    "warn_if_not_resumable",
]
