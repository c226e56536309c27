"""What a strategy stored its own way, read back by the key of its ``meta.json`` record.

An `fabricx.checkpoint.contents.EntryStorage` writes its `record()` under ``extra_meta[meta_key]``. Reading
the checkpoint back (under any strategy, or in ``fabricx consolidate``), the `StoredRecord` registered
under that key says which entries the record holds and reads them in full. The registry imports a
record's module only when a checkpoint holds its key, so `fabricx.checkpoint.fabric_state` names no
storage format: a new one is one module with a ``RECORD`` plus one line in `_BUILT_IN`.

Example:

```python
# {"model": "fabricx_sharded", "optimizer": "fabricx_sharded"}
stored_keys(read_meta("ckpt"))
# {"model": {...full CPU tensors...}}
stored_record("fabricx_sharded").read_full(loaded, ["model"])
```
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from fabricx.utilities.exceptions import CheckpointError

if TYPE_CHECKING:
    from fabricx.checkpoint.loaded import LoadedCheckpoint

__all__ = ["StoredRecord", "record_shared_keys", "records_in", "stored_keys", "stored_record"]


class StoredRecord(Protocol):
    """How to read back the entries one kind of `EntryStorage` stored (its record's key names it).

    Example:

    ```python
    class ToyRecord:
        shared_keys = ()
        def entries(self, meta): return list(meta["extra_meta"]["toy"]["keys"])
        def read_full(self, loaded, keys): return {key: torch.load(loaded.path / f"{key}.pt") for key in keys}
    ```
    """

    #: Reserved shared-state keys this record's storage adds beside its files (read with them, never an entry).
    shared_keys: tuple[str, ...]

    def entries(self, meta: Mapping[str, Any]) -> list[str]:
        """The state keys this record's storage holds in the checkpoint whose metadata is ``meta``."""
        ...

    def read_full(self, loaded: LoadedCheckpoint, keys: list[str]) -> dict[str, Any]:
        """The entries ``keys`` (of `entries()`) as full CPU state, in this process alone (no process group).

        An entry with no full form (a DeepSpeed engine's ZeRO optimizer state) is left out.
        """
        ...


# One line per record: its ``extra_meta`` key and the module whose ``RECORD`` reads it (imported on first use).
_BUILT_IN: dict[str, str] = {
    "fabricx_sharded": "fabricx.checkpoint.sharded",
    "deepspeed": "fabricx.checkpoint.deepspeed_consolidate",
}
_loaded: dict[str, StoredRecord] = {}


def stored_record(key: str) -> StoredRecord:
    """The `StoredRecord` of the ``extra_meta`` key ``key`` (its module is imported here, on first use)."""
    if key not in _loaded:
        if key not in _BUILT_IN:
            raise ValueError(f"No checkpoint record is registered as {key!r}; known ones: {list(_BUILT_IN)}.")
        _loaded[key] = cast("StoredRecord", importlib.import_module(_BUILT_IN[key]).RECORD)
    return _loaded[key]


def stored_keys(meta: Mapping[str, Any]) -> dict[str, str]:
    """``{state key: record key}`` for every entry a strategy stored its own way in the checkpoint of ``meta``.

    Example:

    ```python
    stored_keys(read_meta("ckpt"))  # {"model": "deepspeed", "optimizer": "deepspeed"}
    ```
    """
    found: dict[str, str] = {}
    for key in records_in(meta):
        found.update(dict.fromkeys(stored_record(key).entries(meta), key))
    return found


def records_in(meta: Mapping[str, Any]) -> list[str]:
    """The record keys the checkpoint of ``meta`` holds (a strategy stored entries its own way), even empty ones.

    Example:

    ```python
    records_in(read_meta("ckpt"))  # ["fabricx_sharded"]
    ```
    """
    extra = meta.get("extra_meta") or {}
    if not isinstance(extra, Mapping):
        raise CheckpointError(f"The checkpoint metadata's extra_meta is damaged: {extra!r:.200}.")
    return [key for key in _BUILT_IN if extra.get(key) is not None]


def record_shared_keys(meta: Mapping[str, Any]) -> set[str]:
    """The reserved shared-state keys the records of the checkpoint of ``meta`` added beside their files.

    Example:

    ```python
    record_shared_keys(read_meta("ckpt"))  # {"__fabricx_sharded_rest__"}
    ```
    """
    return {key for record in records_in(meta) for key in stored_record(record).shared_keys}
