"""What reading a checkpoint gives the pipeline, whatever its layout: `LoadedCheckpoint`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fabricx.checkpoint.atomic import DirectoryPin

__all__ = ["LoadedCheckpoint"]


@dataclass
class LoadedCheckpoint:
    """What a layout's reader found: the shared state, this rank's state (or ``None``), the metadata.

    Example:

    ```python
    loaded = read_checkpoint("run/ckpt", rank=0)
    model.load_state_dict(loaded.shared["model"])
    ```
    """

    shared: dict
    per_rank: dict | None
    meta: dict
    path: Path
    legacy: bool = field(default=False)
    #: With ``read_checkpoint(..., keep_pin=True)``: the open handle on the directory read, so that a
    #: caller reading more of its files by name (a strategy's shards) can tell whether they came from
    #: the same save (`fabricx.checkpoint.atomic.DirectoryPin.unchanged`); the caller closes it.
    pin: DirectoryPin | None = field(default=None, repr=False, compare=False)
    #: Whether every tensor was read into fresh memory of its own that only this object holds (a checkpoint
    #: directory's), so that a load that drops it afterwards may hand them to a model (`fabricx.checkpoint.hand_over`).
    fresh: bool = field(default=False, compare=False)
