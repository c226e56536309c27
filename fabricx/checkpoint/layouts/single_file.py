"""The single-file layout: a whole checkpoint as ONE ``torch.save`` zip file, written atomically.

`torch.load(path, weights_only=True)` reads it, and so do tools that expect a file (Lightning's
`Fabric.load`, downstream scripts, lazy loaders). What the file holds, how it is checked, written and read
code-free is `fabricx.checkpoint.torch_files` (shared with the other layouts); this module is the layout.

A per-rank entry of rank 0 is stored under its own key; the other ranks send theirs to rank 0, which
writes the file (temporary file in the same folder, fsync, rename, folder fsync: readers see the old
file or the new one).

Example:

```python
fabric.save("out/model.pth", {"model": model, "step": 3})  # this layout
torch.load("out/model.pth", weights_only=True)["step"]     # 3
```
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fabricx.checkpoint.contents import checkpoint_io_of
from fabricx.checkpoint.io import CheckpointIO
from fabricx.checkpoint.loaded import LoadedCheckpoint
from fabricx.checkpoint.one_file import save_one_file
from fabricx.checkpoint.storage import is_url
from fabricx.checkpoint.torch_files import load_single_file, write_file

if TYPE_CHECKING:
    from fabricx.checkpoint.background import AsyncSave
    from fabricx.checkpoint.save_request import SaveRequest

__all__ = ["LAYOUT", "SingleFileLayout"]


class SingleFileLayout:
    """The `fabricx.checkpoint.layouts.Layout` of one ``torch.save`` file."""

    def save(self, request: SaveRequest) -> AsyncSave | None:
        """Every rank: write the state as one file at the path (rank 0 writes; with an asynchronous mode
        from a host copy, in a background thread). Entries a strategy stores itself are written as their full
        state (FSDP gathers the shards to rank 0, as Lightning's ``state_dict_type="full"`` does); a strategy
        that has no full state for them (DeepSpeed engines) is refused.

        Example:

        ```python
        state = {"model": model, "step": 3}
        mode = save_mode("sync")
        LAYOUT.save(SaveRequest(fabric.strategy, "out/model.pth", state, None, mode))
        ```
        """
        io = checkpoint_io_of(request.host)
        return save_one_file(request, lambda to, contents: write_file(to, contents, io))

    def holds(self, path: str) -> bool:
        return not is_url(path) and Path(path).is_file()

    def read(self, path: str, rank: int, io: CheckpointIO) -> LoadedCheckpoint:
        return load_single_file(Path(path), rank)


LAYOUT = SingleFileLayout()
