"""What the user's state becomes in a checkpoint, in every layout: shared and per-rank contents.

Entries marked per rank (data loader positions, random generators) are this process's own; the others
(models, optimizers, plain values) are shared by every rank. A module or optimizer is stored as its
state dict through the host (which gathers shards where it has them); a strategy that stores some
entries its own way (DTensor shards, a DeepSpeed engine's files) says so with an `EntryStorage`.
fabricx's own entries sit under reserved keys (`reserved_key()`).

Example:

```python
shared, per_rank = split_state(fabric.strategy, {"model": model, "loader": loader, "step": 3})
```
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from torch.nn import Module
from torch.optim import Optimizer

from fabricx.checkpoint.io import CheckpointIO, default_io

if TYPE_CHECKING:
    from fabricx.checkpoint.host import CheckpointHost
    from fabricx.checkpoint.loaded import LoadedCheckpoint

__all__ = [
    "RESERVED_PREFIX",
    "TRAIN_LOADER_KEY",
    "EntryStorage",
    "checkpoint_io_of",
    "claimed_entries",
    "entry_storage_of",
    "filtered",
    "is_per_rank",
    "is_reserved",
    "lent_to_new_ranks",
    "object_state",
    "reserved_key",
    "split_state",
    "stores_engine_files",
    "unwrap_object",
]

#: Prefix of the entries fabricx adds to a checkpoint for its own state (RNG, precision, accumulation, ...).
RESERVED_PREFIX = "__fabricx_"


def reserved_key(name: str) -> str:
    """The checkpoint key of fabricx's own entry ``name``: ``reserved_key("rng") == "__fabricx_rng__"``."""
    return f"{RESERVED_PREFIX}{name}__"


def is_reserved(key: Any) -> bool:
    """Whether ``key`` is one of fabricx's own checkpoint entries (never reported to the user)."""
    return isinstance(key, str) and key.startswith(RESERVED_PREFIX)


#: The Trainer's training loader: fabricx's own per-rank entry that a rank the saving run did not have borrows.
TRAIN_LOADER_KEY = reserved_key("train_loader")


def lent_to_new_ranks(key: Any) -> bool:
    """Whether a rank the saving run did not have (more processes now) takes rank 0's per-rank entry ``key``:
    the user's entries and the Trainer's loader do (a loader's state names the world size it was saved with and
    decides itself how to continue, the same on every rank); fabricx's other per-rank entries, random states and
    accumulated gradients, are each rank's own.

    Example:
        ```python
        borrowed = {key: value for key, value in rank_0_entries.items() if lent_to_new_ranks(key)}
        ```
    """
    return not is_reserved(key) or key == TRAIN_LOADER_KEY


class EntryStorage(ABC):
    """How a strategy stores some entries of the user's state itself (shards, an engine's own files).

    The pipeline hands it the entries it `claims()`; everything else goes through the shared layout.
    Its `record()` lands in ``meta.json``'s ``extra_meta[meta_key]``; the
    `fabricx.checkpoint.records.StoredRecord` registered under that key reads the keys back from there and
    the entries in full, so any strategy (and ``fabricx consolidate``) can load them.

    Example:
        ```python
        class MyStorage(EntryStorage):
            meta_key = "my_shards"
            def claims(self, key, obj):
                return isinstance(unwrap_object(obj), MyShardedModule)
            ...
        ```
    """

    #: ``extra_meta`` key of this storage's record (a key of `fabricx.checkpoint.records`).
    meta_key: str = ""
    #: Whether the claimed entries' full state (the strategy's ``get_module_state_dict``/``get_optimizer_state``)
    #: can be written into one file instead (the single-file layout); ``False`` refuses a file path.
    full_state_in_one_file: bool = True
    #: The layout key whose folder this storage writes with its engine's own checkpoint call
    #: (`save_engine_folder()`, e.g. ``"deepspeed"``); ``None``: it has none.
    engine_folder_layout: str | None = None

    def claims(self, key: str, obj: Any) -> bool:
        """Whether this storage writes ``state[key]`` itself."""
        return False

    def check_filter(self, keys: list[str], filter: Mapping[str, Callable] | None) -> None:
        """Refuse a ``save(filter=...)`` on claimed entries that this storage cannot filter."""

    def sharded_state_dicts(
        self, entries: dict[str, Any], filter: Mapping[str, Callable] | None
    ) -> dict[str, dict[str, Any]] | None:
        """The claimed ``entries`` as state dicts ``torch.distributed.checkpoint`` writes as they are (a model's
        DTensor shards, an optimizer's state keyed by parameter names), or ``None`` when this storage has no
        such form (then ``layout="dcp"`` refuses them)."""
        return None

    @abstractmethod
    def record(self, entries: dict[str, Any]) -> dict[str, Any]:
        """The JSON record for ``meta.json`` describing the claimed ``entries``."""

    @abstractmethod
    def save(self, staging: Path, entries: dict[str, Any], filter: Mapping[str, Callable] | None) -> dict[str, Any]:
        """Every rank: write the claimed entries under ``staging``; return extra shared (JSON-side) entries."""

    def save_engine_folder(self, folder: Path, entries: dict[str, Any], client_state: dict[str, Any], tag: str) -> None:
        """Every rank: write the claimed ``entries`` into ``folder`` as the engine's own checkpoint (tag folder
        ``tag``), with ``client_state`` (this rank's other contents) stored beside them, as the engine does.

        Only a storage with an `engine_folder_layout` has this form.
        """
        raise NotImplementedError(f"{type(self).__name__} writes no engine checkpoint folder.")

    @abstractmethod
    def load(self, loaded: LoadedCheckpoint, entries: dict[str, Any], strict: bool) -> None:
        """Every rank: restore the live objects ``entries`` (stored by this storage) from ``loaded``."""


def is_per_rank(obj: Any) -> bool:
    """Whether ``obj`` (a data loader, a random generator) keeps one state per rank."""
    return bool(getattr(obj, "_fabricx_per_rank", False))


def unwrap_object(obj: Any) -> Any:
    """The user's own module or optimizer behind a fabricx wrapper (others unchanged).

    A data loader wrapper stays itself: its own state (epoch, position, random state) is what resumes.
    """
    inner = getattr(obj, "_fabricx_unwrapped", None)
    return inner if isinstance(inner, Module | Optimizer) else obj


def object_state(strategy: CheckpointHost, obj: Any) -> Any:
    """What to store for one entry of the user's state dict."""
    obj = unwrap_object(obj)
    if isinstance(obj, Module):
        return strategy.get_module_state_dict(obj)
    if isinstance(obj, Optimizer):
        return strategy.get_optimizer_state(obj)
    if hasattr(obj, "state_dict") and callable(obj.state_dict):
        return obj.state_dict()
    if isinstance(obj, dict):
        return {key: object_state(strategy, value) for key, value in obj.items()}
    return obj


def split_state(
    strategy: CheckpointHost, state: dict[str, Any], filter: Mapping[str, Callable] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split the user's state into (shared, per-rank) checkpoint contents."""
    shared: dict[str, Any] = {}
    per_rank: dict[str, Any] = {}
    for key, obj in state.items():
        target = per_rank if is_per_rank(obj) else shared
        value = object_state(strategy, obj)
        target[key] = filtered(key, value, filter)
    return shared, per_rank


def filtered(key: str, value: Any, filter: Mapping[str, Callable] | None) -> Any:
    """``value``, the state of entry ``key``, with only the items ``filter[key](name, item)`` keeps."""
    if not filter or key not in filter:
        return value
    if not isinstance(value, dict):
        raise TypeError(f"filter[{key!r}] was given but state[{key!r}] does not produce a dict to filter.")
    keep = filter[key]
    return {name: item for name, item in value.items() if keep(name, item)}


def checkpoint_io_of(strategy: Any) -> CheckpointIO:
    """The strategy's `CheckpointIO` (``checkpoint_io``), or the default one."""
    io = getattr(strategy, "checkpoint_io", None)
    return io if io is not None else default_io()


def entry_storage_of(strategy: Any) -> EntryStorage | None:
    """The `EntryStorage` of a strategy that stores some entries itself, or ``None``."""
    get = getattr(strategy, "checkpoint_storage", None)
    return cast("EntryStorage | None", get()) if callable(get) else None


def stores_engine_files(strategy: Any) -> bool:
    """Whether ``strategy`` writes some entries as its engines' own files, which have no one-file form
    (DeepSpeed): its checkpoints are folders."""
    storage = entry_storage_of(strategy)
    return storage is not None and not storage.full_state_in_one_file


def claimed_entries(storage: EntryStorage | None, state: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``state`` that ``storage`` writes itself."""
    if storage is None:
        return {}
    return {key: obj for key, obj in state.items() if storage.claims(key, obj)}
