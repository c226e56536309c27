"""A single-file checkpoint written and read by a library's own checkpoint I/O of Lightning's shape.

Lightning's Trainer hands ``Trainer(plugins=[MyCheckpointIO()])`` the checkpoint dict and a path; libraries use
that to zip the file with their data's metadata, or to store it elsewhere (nn-template-core's ``NNCheckpointIO``).
This layout writes the single-file layout's dict through the plugin and reads it back: the dict handed over is the one
the single file holds (Lightning's keys, fabricx's exact-resume entries, every rank's entries gathered to rank 0),
and what ``load_checkpoint`` returns is taken apart as a file read from disk would be. What the plugin stores
and how is its own affair: fabricx's weights-only check covers what travels between ranks, not the plugin's
file (its ``TorchCheckpointIO`` base, fabricx's alias, checks and writes code-free).

It is never registered: a path does not say which plugin wrote it, so the Trainer that holds the plugin names
the layout when it saves and reads (``Checkpointer.save(layout=...)``, ``Checkpointer.read_once(layout=...)``).

Example:

```python
layout = PluginFileLayout(NNCheckpointIO())
fabric.checkpointer.save("ckpt/epoch=0.ckpt", state, layout=layout)
with fabric.checkpointer.read_once("ckpt/epoch=0.ckpt", layout=layout):
    fabric.load("ckpt/epoch=0.ckpt", state)
```
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fabricx.checkpoint.loaded import LoadedCheckpoint
from fabricx.checkpoint.one_file import save_one_file
from fabricx.checkpoint.torch_files import split_contents
from fabricx.utilities.exceptions import CheckpointError

if TYPE_CHECKING:
    from fabricx.capabilities import FileCheckpointIOLike
    from fabricx.checkpoint.background import AsyncSave
    from fabricx.checkpoint.io import CheckpointIO
    from fabricx.checkpoint.save_request import SaveRequest

__all__ = ["PluginFileLayout"]


class PluginFileLayout:
    """A `fabricx.checkpoint.layouts.Layout` of one file that ``plugin.save_checkpoint(checkpoint, path)`` writes and
    ``plugin.load_checkpoint(path)`` reads."""

    def __init__(self, plugin: FileCheckpointIOLike, storage_options: Any = None) -> None:
        self.plugin = plugin
        self.storage_options = storage_options  # handed to the plugin's save, as Lightning's Trainer does

    def save(self, request: SaveRequest) -> AsyncSave | None:
        """Every rank: gather the state as the single file's dict; rank 0 hands it to the plugin."""
        return save_one_file(request, self._write, check_shared=False)

    def _write(self, path: str, contents: dict[str, Any]) -> None:
        if self.storage_options is None:  # plugins written for Lightning 1.x take no storage_options
            self.plugin.save_checkpoint(contents, path)
        else:
            self.plugin.save_checkpoint(contents, path, storage_options=self.storage_options)

    def holds(self, path: str) -> bool:
        return False  # nothing on disk says which plugin wrote a file: the Trainer holding it names this layout

    def read(self, path: str, rank: int, io: CheckpointIO) -> LoadedCheckpoint:
        contents = self.plugin.load_checkpoint(path)
        if not isinstance(contents, Mapping):
            raise CheckpointError(
                f"{type(self.plugin).__name__}.load_checkpoint({path!r}) returned a {type(contents).__name__}; a "
                "checkpoint I/O plugin must return the checkpoint dict its save_checkpoint was given."
            )
        shared, per_rank, meta = split_contents(Path(path), dict(contents), rank)
        legacy = bool(meta.get("legacy"))
        return LoadedCheckpoint(shared=shared, per_rank=per_rank, meta=meta, path=Path(path), legacy=legacy)
