"""The one checkpoint pipeline: ``fabric.save``/``fabric.load``'s state becomes files and back, in any layout.

`save_checkpoint()` looks the layout up by its key (`fabricx.checkpoint.layouts`: decided by the path,
or asked for) and hands it the state and a save mode: synchronous and asynchronous saves are the same
steps, the mode says only where the write runs (`fabricx.checkpoint.save_modes`). `load_checkpoint()`
asks the layouts which one holds the saved path, reads it, and restores it into the live objects
(`fabricx.checkpoint.fabric_state`).

The caller is a `fabricx.checkpoint.host.CheckpointHost` (every strategy is one): this module imports no
strategy, not the façade, and no layout backend.

Example:

```python
save_checkpoint(fabric.strategy, "ckpt/step_10", {"model": model, "step": 10})
handle = save_checkpoint(fabric.strategy, "out/model.pth", {"model": model}, mode="async")
remainder = load_checkpoint(fabric.strategy, "ckpt/step_10", {"model": model})
```
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fabricx.checkpoint.background import wait_for_pending_save
from fabricx.checkpoint.contents import checkpoint_io_of
from fabricx.checkpoint.fabric_state import apply_checkpoint
from fabricx.checkpoint.layouts import get_layout, layout_for, saved_layout
from fabricx.checkpoint.save_modes import SaveModeName, save_mode
from fabricx.utilities.exceptions import CheckpointError

if TYPE_CHECKING:
    from fabricx.checkpoint.background import AsyncSave
    from fabricx.checkpoint.host import CheckpointHost

__all__ = ["load_checkpoint", "save_checkpoint"]

#: How many times a single process loads again when another save replaced the checkpoint meanwhile.
_LOAD_ATTEMPTS = 5


def save_checkpoint(
    host: CheckpointHost,
    path: str,
    state: dict[str, Any],
    filter: Mapping[str, Callable] | None = None,
    layout: str | None = None,
    mode: SaveModeName = "sync",
) -> AsyncSave | None:
    """Every rank: write ``state`` to ``path`` in the layout its name asks for (or ``layout``).

    A path naming a file (``.pt``, ``.pth``, ``.ckpt``, ``.bin``) becomes one ``torch.save`` file; any
    other path a fabricx checkpoint directory. ``mode="async"`` returns once the state is copied to host
    memory, with the handle of the write going on in the background; ``"sync"`` returns once committed.

    Example:

    ```python
    save_checkpoint(fabric.strategy, "ckpt/step_10", {"model": model, "step": 10})
    save_checkpoint(fabric.strategy, "out/model.pth", {"model": model})  # one file
    ```
    """
    backend = get_layout(layout_for(path, layout))
    wait_for_pending_save()  # one save at a time: the next one's agreement shares the background group
    return backend.save(host, path, state, filter, save_mode(mode))


def load_checkpoint(
    host: CheckpointHost, path: str, state: dict[str, Any] | None = None, strict: bool = True
) -> dict[str, Any]:
    """Every rank: read a checkpoint; restore it into ``state`` (or return all of it when ``state`` is None).

    Entries this strategy stores its own way and that the checkpoint stored that way are restored by its
    `fabricx.checkpoint.contents.EntryStorage`; entries another strategy stored are read in full and loaded
    like any other; per-rank entries follow `fabricx.checkpoint.fabric_state.rank_entries()`.

    Example:

    ```python
    remainder = load_checkpoint(fabric.strategy, "ckpt/step_10", {"model": model})
    ```
    """
    layout = saved_layout(path)
    for attempt in range(_LOAD_ATTEMPTS):
        loaded = layout.read(path, host.global_rank, checkpoint_io_of(host))
        try:
            match_state = getattr(layout, "match_state", None)  # optional: see Layout
            if state is not None and match_state is not None:
                match_state(loaded, host, state)
            result = apply_checkpoint(host, loaded, path, state, strict)
        finally:
            if loaded.pin is not None:
                loaded.pin.close()
                loaded.pin = None
        if result is not None:
            return result
        # A strategy's own files are read by name after the rest: another job replaced the checkpoint
        # meanwhile, so they may be another save's. Alone, load it again; with several ranks each would
        # decide on its own (and a collective load would hang), so say so.
        if host.world_size > 1 or attempt == _LOAD_ATTEMPTS - 1:
            raise CheckpointError(
                f"The checkpoint {path} was replaced by another save while being loaded, so its files may come "
                "from two saves; nothing of it counts. Load it again once no job is rewriting it."
            )
    raise AssertionError("unreachable")  # pragma: no cover
