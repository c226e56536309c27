"""Checkpoint I/O: where a checkpoint's files are stored and how a set of them becomes visible at once.

Every save of a checkpoint directory goes through one `CheckpointIO` object (the strategy's
``checkpoint_io``, set with ``Fabric(plugins=[my_io])``) in these steps:

```python
staging = io.stage(path, token)          # rank 0: an empty local directory to fill
# barrier
staging = io.staging_dir(path, token)    # every rank: the same directory (or its own local one)
... every rank writes its files into `staging` ...
io.finish_rank(staging, path, rank)      # every rank: make its own files durable (fsync, upload)
# barrier
files = io.manifest(staging)             # rank 0: {relative path: size} of every rank's files
... rank 0 writes meta.json (with that manifest) into `staging` ...
io.commit(staging, path)                 # rank 0: publish atomically; readers see old or new, never a mix
# barrier
```

On any failure ``io.abort(staging, path)`` throws the staged files away. Readers ask
``io.resolve(path, is_complete)`` for a local directory holding one complete copy (the newest one
that ``is_complete`` accepts) and ``io.recover(path, is_complete)`` cleans what crashed saves left.
`LocalCheckpointIO` (the default) does this on a local or shared file system with renames.

Example:
    ```python
    class MyIO(LocalCheckpointIO):
        def finish_rank(self, staging, path, rank):
            super().finish_rank(staging, path, rank)
            print(f"rank {rank} wrote {path}")

    fabric = Fabric(plugins=[MyIO()])
    ```
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from fabricx.checkpoint import atomic

__all__ = ["CheckpointIO", "LocalCheckpointIO", "default_io"]

#: Says whether a directory holds one complete checkpoint (``meta.json`` and every file it lists).
Completeness = Callable[[Path], bool]


class CheckpointIO(ABC):
    """Storage for checkpoints: stage files, commit them atomically, find the complete copy, delete.

    Subclass it to store checkpoints elsewhere (object stores, ...). The methods run on the ranks named
    in their docstrings; fabricx puts the barriers between them.
    """

    # -- writing ------------------------------------------------------------------------------------------
    @abstractmethod
    def stage(self, path: str | os.PathLike[str], token: str) -> Path:
        """Rank 0, first: create the empty local directory that every rank then writes into."""

    @abstractmethod
    def staging_dir(self, path: str | os.PathLike[str], token: str) -> Path:
        """Every rank, after `stage()`: the local directory this rank writes its files into."""

    @abstractmethod
    def finish_rank(self, staging: Path, path: str | os.PathLike[str], rank: int) -> None:
        """Every rank, after writing: make this rank's files durable where `commit()` will find them."""

    @abstractmethod
    def manifest(self, staging: Path) -> dict[str, int]:
        """Rank 0, after every rank finished: ``{relative file path: size in bytes}`` of the whole checkpoint."""

    @abstractmethod
    def commit(self, staging: Path, path: str | os.PathLike[str]) -> None:
        """Rank 0, last: make the staged checkpoint (``meta.json`` included) visible at ``path`` atomically.

        An existing checkpoint at ``path`` is replaced; until the new one is visible it stays readable.
        """

    @abstractmethod
    def abort(self, staging: Path, path: str | os.PathLike[str]) -> None:
        """Rank 0: throw away an unfinished save; what was at ``path`` stays as it was."""

    @abstractmethod
    def write_file(self, path: str | os.PathLike[str], write: Callable[[BinaryIO], None]) -> None:
        """Write one file atomically (single-file checkpoints): ``write(handle)`` fills it."""

    # -- reading and housekeeping ---------------------------------------------------------------------------
    @abstractmethod
    def resolve(self, path: str | os.PathLike[str], is_complete: Completeness) -> Path | None:
        """A local directory (or file) holding the complete checkpoint saved at ``path``; ``None`` if none."""

    def has_complete(self, path: str | os.PathLike[str], is_complete: Completeness) -> bool:
        """Whether a complete checkpoint is saved at ``path`` (cheap where the storage can tell without a copy)."""
        return self.resolve(path, is_complete) is not None

    @abstractmethod
    def recover(self, path: str | os.PathLike[str], is_complete: Completeness) -> None:
        """Rank 0: after crashed saves, put the newest complete copy at ``path`` and delete the left-overs."""

    @abstractmethod
    def remove(self, path: str | os.PathLike[str]) -> None:
        """Delete the checkpoint at ``path`` so that no reader ever takes a half-deleted one for complete."""


class LocalCheckpointIO(CheckpointIO):
    """Checkpoints on a local or shared file system (the default).

    Files are written under ``<path>.tmp-<token>``, flushed, and renamed into place; a replaced
    checkpoint is first moved to ``<path>.old-<token>`` and deleted only after the new one is in place,
    its ``meta.json`` first, so a half-deleted copy is never taken for complete.

    Example:
        ```python
        fabric = Fabric(plugins=[LocalCheckpointIO()])
        ```
    """

    def stage(self, path: str | os.PathLike[str], token: str) -> Path:
        return atomic.prepare_directory(path, token)

    def staging_dir(self, path: str | os.PathLike[str], token: str) -> Path:
        return atomic.temporary_name(path, token)

    def finish_rank(self, staging: Path, path: str | os.PathLike[str], rank: int) -> None:
        # Rank 0 flushes the whole tree at commit (one pass on a shared file system).
        return None

    def manifest(self, staging: Path) -> dict[str, int]:
        return atomic.list_files(staging)

    def commit(self, staging: Path, path: str | os.PathLike[str]) -> None:
        atomic.commit_directory(staging, path)

    def abort(self, staging: Path, path: str | os.PathLike[str]) -> None:
        atomic.abort_directory(staging)

    def write_file(self, path: str | os.PathLike[str], write: Callable[[BinaryIO], None]) -> None:
        atomic.atomic_write_file(path, write)

    def resolve(self, path: str | os.PathLike[str], is_complete: Completeness) -> Path | None:
        return atomic.resolve_directory(path, is_complete)

    def recover(self, path: str | os.PathLike[str], is_complete: Completeness) -> None:
        atomic.recover_directory(path, is_complete)

    def remove(self, path: str | os.PathLike[str]) -> None:
        atomic.remove_directory(path)

    def __repr__(self) -> str:
        return "LocalCheckpointIO()"


_DEFAULT_IO = LocalCheckpointIO()


def default_io() -> CheckpointIO:
    """The checkpoint I/O used when none is given: local files."""
    return _DEFAULT_IO
