"""Every rank's part of writing a whole checkpoint as one file: what the one-file layouts share.

The state is split into shared and per-rank entries, checked, every rank's entries are gathered to rank 0, and
rank 0 hands the file's dict to a writer (``torch.save`` for the single-file layout, a user's checkpoint I/O
plugin for `fabricx.checkpoint.layouts.plugin_file`), now or, with an asynchronous save mode, in the background
from a host copy.

Example:

```python
state = {"model": model}
request = SaveRequest(fabric.strategy, "model.pth", state, None, mode)
save_one_file(request, write=write_file)
```
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fabricx.checkpoint.contents import claimed_entries, entry_storage_of
from fabricx.checkpoint.torch_files import file_contents
from fabricx.utilities.exceptions import CheckpointError

if TYPE_CHECKING:
    from fabricx.checkpoint.background import AsyncSave
    from fabricx.checkpoint.save_request import SaveRequest

__all__ = ["save_one_file"]


def save_one_file(
    request: SaveRequest, write: Callable[[str, dict[str, Any]], None], *, check_shared: bool = True
) -> AsyncSave | None:
    """Every rank: gather the request's state into one file's dict and have rank 0 ``write(path, contents)`` it.

    Entries a strategy stores itself are written as their full state (FSDP gathers the shards to rank 0, as
    Lightning's ``state_dict_type="full"`` does); a strategy that has no full state for them (DeepSpeed engines)
    is refused. ``check_shared=False`` leaves the shared entries to the writer (a plugin stores objects its way).

    Example:

    ```python
    request = SaveRequest(host, "out/model.pth", state, None, save_mode("sync"))
    save_one_file(request, write=torch.save)
    ```
    """
    host, path, mode = request.host, request.path, request.mode
    storage = entry_storage_of(host)
    claimed = claimed_entries(storage, request.state)
    if claimed and storage is not None and not storage.full_state_in_one_file:
        raise CheckpointError(
            f"Cannot save {sorted(claimed)} into the single file {path}: {type(host).__name__} stores them "
            "as its engines' own files, which have no one-file form. Save to a path without a file suffix (or "
            "pass layout='directory') for a checkpoint directory; `fabricx consolidate` turns its weights "
            "into one file."
        )
    shared, per_rank = request.split(request.state)
    contents = file_contents(host, path, shared, per_rank, check_shared=check_shared)
    staged = None if contents is None else mode.copy(contents)
    return mode.run_rank_zero_write(host, path, None if staged is None else lambda: write(path, staged))
