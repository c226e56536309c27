"""On-disk checkpoints: a code-free format, atomic writing, automatic naming/retention, weight export.

This package only does file I/O (it imports neither the façade nor a strategy). Processes are
coordinated by the caller, which passes a ``barrier``
callable (and an agreed ``token``) where several ranks write one checkpoint.

Example:
    ```python
    from fabricx.checkpoint import CheckpointManager, read_checkpoint, write_checkpoint

    manager = CheckpointManager("runs/exp1", total_limit=3)
    write_checkpoint(manager.next_path(), {"model": model.state_dict()}, {"rng": torch.get_rng_state()})
    manager.apply_retention()
    loaded = read_checkpoint(manager.latest())
    ```
"""

from __future__ import annotations

from fabricx.checkpoint.atomic import (
    abort_directory,
    atomic_directory,
    atomic_write_file,
    commit_directory,
    prepare_directory,
    resolve_directory,
)
from fabricx.checkpoint.export import load_weights, load_weights_into, parse_size, save_weights
from fabricx.checkpoint.format import (
    FORMAT_VERSION,
    CheckpointWriter,
    is_checkpoint,
    is_complete,
    read_checkpoint,
    read_meta,
    write_checkpoint,
    write_single_file,
)
from fabricx.checkpoint.io import CheckpointIO, LocalCheckpointIO
from fabricx.checkpoint.loaded import LoadedCheckpoint
from fabricx.checkpoint.manager import CheckpointManager, remove_checkpoint
from fabricx.checkpoint.serialization import dump, load
from fabricx.utilities.exceptions import CheckpointError

__all__ = [
    "FORMAT_VERSION",
    "CheckpointError",
    "CheckpointIO",
    "CheckpointManager",
    "CheckpointWriter",
    "LoadedCheckpoint",
    "LocalCheckpointIO",
    "abort_directory",
    "atomic_directory",
    "atomic_write_file",
    "commit_directory",
    "dump",
    "is_checkpoint",
    "is_complete",
    "load",
    "load_weights",
    "load_weights_into",
    "parse_size",
    "prepare_directory",
    "read_checkpoint",
    "read_meta",
    "remove_checkpoint",
    "resolve_directory",
    "save_weights",
    "write_checkpoint",
    "write_single_file",
]
