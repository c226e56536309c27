"""The ``"dcp"`` layout: a checkpoint as Lightning Fabric's FSDP / ModelParallel strategies write a sharded one.

    <path>/.metadata, __<r>_0.distcp   torch.distributed.checkpoint: every
                                       module's and optimizer's state dict
    <path>/meta.pt                     everything else: plain values, loader
                                       positions, fabricx's own entries

Modules and optimizers a strategy shards (`fabricx.checkpoint.contents.EntryStorage.sharded_state_dicts`)
go into the DCP folder as their shards, each rank writing its own: a model's keyed by parameter name, an
optimizer's by parameter names (``param_groups`` pickled by DCP), as Lightning's ``save_checkpoint``
writes them, so Lightning's ``fabric.load`` restores a checkpoint fabricx wrote and fabricx one Lightning
wrote. Other modules and optimizers go in as their full state dicts. ``meta.pt`` is a single-file
checkpoint of the remaining entries (`fabricx.checkpoint.torch_files`), written by rank 0 through
the host's `fabricx.checkpoint.io.CheckpointIO` (``write_file``, as a single-file save writes);
Lightning reads it with ``torch.load`` and returns fabricx's own entries as unrequested ones.

Reading never runs code: ``meta.pt`` is read weights-only, the DCP metadata with fabricx's restricted
unpickler and its non-tensor items weights-only (`fabricx.checkpoint.sharded.dcp_contents`). A folder
holds this layout when it has a ``.metadata`` file and no fabricx ``meta.json`` (`DcpLayout.is_layout`).

A save is atomic, as a directory's is: every rank writes its shards into one staging folder beside
``<path>`` (``<path>.tmp-<token>``, the token chosen by rank 0 and broadcast), rank 0 adds ``meta.pt``,
and once every rank's shards are written rank 0 flushes the folder and swaps it into place
(`fabricx.checkpoint.atomic.commit_directory`: the previous checkpoint goes to ``<path>.old-<token>``
and is deleted only once the new one is in place). A save that dies midway leaves the previous
checkpoint as it was; the final folder holds only what Lightning writes. A crash in the instant between
the swap's two renames leaves only the ``.old-`` copy, which fabricx reads (and the next save puts
back); Lightning, which reads ``<path>`` alone, needs that save first. A save replaces an empty folder
or a DCP one (also what an in-place save that died left) and refuses a folder of other files. With
``async_save=True`` the shards are written before the save returns, ``meta.pt`` and the commit in the
background.

Example:

```python
state = {"model": model, "optimizer": optimizer, "step": 10}
fabric.save("ckpt/step_10", state, layout="dcp")
# or a folder Lightning's FSDP/ModelParallel wrote
fabric.load("ckpt/step_10", state)
```
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.nn import Module
from torch.optim import Optimizer

from fabricx.checkpoint.contents import (
    checkpoint_io_of,
    entry_storage_of,
    filtered,
    object_state,
    unwrap_object,
)
from fabricx.checkpoint.loaded import LoadedCheckpoint
from fabricx.checkpoint.staged_folder import FABRICX_META, StagedFolderLayout
from fabricx.checkpoint.torch_files import file_contents, read_single_file
from fabricx.utilities.exceptions import CheckpointError

if TYPE_CHECKING:
    from fabricx.checkpoint.background import AsyncSave
    from fabricx.checkpoint.contents import EntryStorage
    from fabricx.checkpoint.io import CheckpointIO
    from fabricx.checkpoint.save_request import SaveRequest

__all__ = ["LAYOUT", "METADATA_FILE", "META_FILE", "DcpLayout", "read_dcp"]

#: The file of the entries that are not modules or optimizers (Lightning's ``_METADATA_FILENAME``).
META_FILE = "meta.pt"
#: torch.distributed.checkpoint's metadata file, which marks a folder of this layout.
METADATA_FILE = ".metadata"


def _state_dicts(request: SaveRequest, storage: EntryStorage | None) -> dict[str, Any]:
    """The modules' and optimizers' state dicts DCP writes: a strategy's shards where it has them, else full."""
    host, filter = request.host, request.filter
    claimed = request.claimed_by(storage)
    written: dict[str, Any] = {}
    if claimed and storage is not None:
        sharded = storage.sharded_state_dicts(claimed, filter)
        if sharded is None:
            raise CheckpointError(
                f"Cannot save {sorted(claimed)} in layout='dcp': {type(host).__name__} stores them as its own files, "
                "which have no torch.distributed.checkpoint form. Save without layout= for a checkpoint directory."
            )
        written.update(sharded)
    for key, obj in request.state.items():
        if key not in claimed and isinstance(unwrap_object(obj), Module | Optimizer):
            written[key] = filtered(key, object_state(host, obj), filter)
    return written


def _meta_writer(contents: dict[str, Any] | None, io: CheckpointIO) -> Callable[[Path], None] | None:
    """Rank 0's last file of the save: ``meta.pt``, written through the host's `CheckpointIO` (so a user's I/O
    plugin sees it, as it sees a single file); ``None`` on the other ranks, which write none."""
    if contents is None:
        return None
    return lambda staging: io.write_file(staging / META_FILE, lambda handle: torch.save(contents, handle))


def read_dcp(folder: Path, rank: int) -> LoadedCheckpoint:
    """Rank ``rank``'s view of a ``"dcp"`` folder (fabricx's or Lightning's), without running code.

    The DCP entries are described by a ``fabricx_sharded`` record whose folder is the checkpoint itself, so
    a sharding strategy restores them shard by shard and any other reads them in full.

    Example:

    ```python
    loaded = read_dcp(Path("lightning_ckpt"), rank=0)
    # {"model": "model", "optimizer": "optimizer"}
    loaded.meta["extra_meta"]["fabricx_sharded"]["entries"]
    ```
    """
    from fabricx.checkpoint.sharded import META_KEY, REST_KEY, dcp_contents, sharded_record

    kinds, rest = dcp_contents(folder)
    meta_file = folder / META_FILE
    if meta_file.exists():
        shared, per_rank, file_meta = read_single_file(meta_file, rank)
    else:
        shared, per_rank, file_meta = {}, None, {"world_size": 1}
    clash = sorted(key for key in kinds if key in shared)
    if clash:
        raise CheckpointError(f"{folder} is damaged: {clash} are both in its DCP shards and in {META_FILE}.")
    shared[REST_KEY] = rest
    meta = {
        "world_size": file_meta.get("world_size", 1),
        "layout": "dcp",
        "extra_meta": {META_KEY: sharded_record(kinds, directory=".")},
    }
    return LoadedCheckpoint(shared=shared, per_rank=per_rank, meta=meta, path=folder)


class DcpLayout(StagedFolderLayout):
    """The `fabricx.checkpoint.layouts.Layout` of torch.distributed.checkpoint folders with a ``meta.pt``."""

    key = "dcp"

    def is_layout(self, folder: Path) -> bool:
        return (folder / METADATA_FILE).is_file() and not (folder / FABRICX_META).exists()

    def own_names(self, names: list[str]) -> bool:
        """A DCP checkpoint's files, or what a crashed in-place save left."""
        return any(name in (METADATA_FILE, META_FILE) or name.endswith(".distcp") for name in names)

    def read_folder(self, folder: Path, rank: int) -> LoadedCheckpoint:
        return read_dcp(folder, rank)

    def save(self, request: SaveRequest) -> AsyncSave | None:
        """Every rank: write the state at the path as a DCP folder plus ``meta.pt``, atomically; the handle of an
        async save.

        Example:

        ```python
        state = {"model": model, "optimizer": optimizer, "step": 3}
        LAYOUT.save(SaveRequest(fabric.strategy, "ckpt", state, None, mode))
        ```
        """
        from torch.distributed.checkpoint import filesystem, state_dict_saver

        host = request.host
        folder = self.local_folder(request.path)
        tensors = _state_dicts(request, entry_storage_of(host))
        shared, per_rank = request.split({key: obj for key, obj in request.state.items() if key not in tensors})
        # Checked (every rank's entries weights-only) before anything on disk changes.
        contents = file_contents(host, folder / META_FILE, shared, per_rank)
        staged = None if contents is None else request.mode.copy(contents)

        def write_shards(staging: Path) -> None:
            with warnings.catch_warnings():  # one process without a process group is a save like any other
                warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
                # Every rank writes its own shards; DCP returns on every rank once all of them are written.
                state_dict_saver.save(tensors, storage_writer=filesystem.FileSystemWriter(staging))

        return self.save_staged(request, write_shards, _meta_writer(staged, checkpoint_io_of(host)))


LAYOUT = DcpLayout()
