"""Atomic folder saves for layouts whose final folder holds only another tool's files (``"dcp"``, ``"deepspeed"``).

Every rank writes into one staging folder beside ``<path>`` (``<path>.tmp-<token>``, the token chosen by
rank 0 and broadcast); once every rank's files are in, rank 0 adds its last files, flushes the folder
and swaps it into place (`fabricx.checkpoint.atomic.commit_directory`: the previous checkpoint goes to
``<path>.old-<token>`` and is deleted only once the new one is in place). A save that dies midway leaves
the previous checkpoint as it was. A layout (a `StagedFolderLayout`) says which folders are its own
(``is_layout``) and which files it may replace (``own_names``).

Example:

```python
# every rank, in a layout's save and read
self.save_staged(request, write_shards, write_last=None)
loaded = read_committed("ckpt", self.is_layout, lambda f: read_dcp(f, rank))
```
"""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fabricx.checkpoint import atomic
from fabricx.checkpoint.format import is_complete
from fabricx.checkpoint.storage import is_url
from fabricx.checkpoint.write_errors import write_failure
from fabricx.utilities.exceptions import CheckpointError, CheckpointNotFoundError

if TYPE_CHECKING:
    from fabricx.checkpoint.background import AsyncSave
    from fabricx.checkpoint.host import CheckpointHost
    from fabricx.checkpoint.io import CheckpointIO
    from fabricx.checkpoint.loaded import LoadedCheckpoint
    from fabricx.checkpoint.save_request import SaveRequest

__all__ = [
    "FABRICX_META",
    "StagedFolderLayout",
    "commit_staging",
    "committed_folder",
    "fabricx_directory_there",
    "open_staging",
    "read_committed",
    "refusal",
]

#: The metadata file of a fabricx checkpoint directory, which such a layout never replaces.
FABRICX_META = "meta.json"


def committed_folder(folder: Path, is_layout: Callable[[Path], bool]) -> Path | None:
    """Where the checkpoint saved at ``folder`` is: ``folder``, or the previous copy a crash in the middle
    of a commit's swap left (``<folder>.old-<token>``); ``None`` when ``is_layout`` accepts neither.

    Example:

    ```python
    committed_folder(Path("ckpt/step_10"), lambda f: (f / ".metadata").is_file())  # Path("ckpt/step_10")
    ```
    """
    if folder.exists():  # a commit never leaves a damaged folder under the name: no other copy to look for
        return folder if is_layout(folder) else None
    return atomic.resolve_directory(folder, is_layout)


def fabricx_directory_there(folder: Path) -> bool:
    """Whether ``folder`` is a fabricx checkpoint directory, or one whose commit a crash interrupted (a load
    still finds it), which an atomic folder save must not replace."""
    if folder.is_dir():
        return (folder / FABRICX_META).exists()
    return not folder.exists() and atomic.resolve_directory(folder, is_complete) is not None


def open_staging(
    host: CheckpointHost, folder: Path, is_layout: Callable[[Path], bool], refusal: Callable[[Path], str | None]
) -> Path:
    """Every rank: the staging folder of this save, which rank 0 creates (or every rank raises the same error).

    Rank 0 first asks ``refusal`` whether ``folder`` may be replaced, puts back or removes what crashed
    saves left beside it, then names the staging folder with a fresh token that every rank receives.
    """
    problem: str | None = None
    token: str | None = None
    if host.is_global_zero:
        problem = refusal(folder)
        if problem is None:
            token = secrets.token_hex(4)
            try:
                atomic.recover_directory(folder, is_layout)
                atomic.prepare_directory(folder, token)
            except OSError as error:
                problem = str(write_failure(folder, error))
    if host.world_size > 1:
        problem, token = host.broadcast((problem, token), src=0)
    if problem is not None:
        raise CheckpointError(problem)
    assert token is not None
    return atomic.temporary_name(folder, token)


def commit_staging(staging: Path, folder: Path, write_last: Callable[[Path], None] | None) -> None:
    """Rank 0, after every rank's files are in ``staging``: ``write_last(staging)``, flush, swap into place.

    On any failure the staging folder is removed and ``folder`` keeps the previous checkpoint.
    """
    try:
        if write_last is not None:
            write_last(staging)
        atomic.commit_directory(staging, folder)  # fsyncs every file first; the old copy goes last
    except BaseException as error:
        atomic.abort_directory(staging)
        if isinstance(error, OSError):
            raise write_failure(folder, error) from error
        raise


def refusal(folder: Path, layout: str, own_names: Callable[[list[str]], bool]) -> str | None:
    """Why ``folder`` must not be replaced by a save of ``layout`` (``None``: it may be): a file, a fabricx
    directory, or a folder of other files; ``own_names(names)`` says whether a folder's entries are the layout's
    own (or what a crashed save of it left).

    Example:

    ```python
    refusal(Path("notes"), "dcp", lambda names: ".metadata" in names)  # "Cannot save layout='dcp' to notes: ..."
    ```
    """
    if folder.is_file():
        what = "a file"
    elif fabricx_directory_there(folder):
        what = "a fabricx checkpoint directory (meta.json)"
    elif folder.is_dir():
        names = sorted(entry.name for entry in folder.iterdir())
        if not names or own_names(names):
            return None
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        what = f"a folder of other files ({shown}), which the save would replace,"
    else:
        return None
    return f"Cannot save layout={layout!r} to {folder}: {what} is there. Remove it or save to another path."


def read_committed(
    path: str, is_layout: Callable[[Path], bool], read: Callable[[Path], LoadedCheckpoint]
) -> LoadedCheckpoint:
    """`read` the committed folder of the checkpoint at ``path`` (see `committed_folder`), pinned: its files are
    read by name later, and the pin tells the loader whether a save replaced the folder meanwhile."""
    found = committed_folder(Path(path), is_layout)
    if found is None:
        raise CheckpointNotFoundError(f"No checkpoint found at {path}: it was removed while being loaded.")
    pin = atomic.DirectoryPin(found)
    try:
        loaded = read(found)
    except BaseException:
        pin.close()
        raise
    loaded.pin = pin
    return loaded


class StagedFolderLayout(ABC):
    """What the layouts of atomically swapped folders share: the local-folder check, `holds` and `read`.

    A subclass names its ``key`` and says which folders are its own (`is_layout`), which entries of a folder
    it may replace (`own_names`) and how it reads one (`read_folder`).
    """

    key: str

    @abstractmethod
    def is_layout(self, folder: Path) -> bool:
        """Whether ``folder`` holds a checkpoint of this layout."""

    @abstractmethod
    def own_names(self, names: list[str]) -> bool:
        """Whether a folder's entries are this layout's own files, or what a crashed save of it left."""

    @abstractmethod
    def read_folder(self, folder: Path, rank: int) -> LoadedCheckpoint:
        """Rank ``rank``'s view of the committed ``folder``."""

    def local_folder(self, path: str) -> Path:
        """``path`` as the local folder a save writes (a URL is refused: the swap renames local folders)."""
        if is_url(path):
            raise CheckpointError(
                f"layout={self.key!r} writes local folders; {path} is a URL. Save without layout= there."
            )
        return Path(path)

    def refusal(self, folder: Path) -> str | None:
        """Why ``folder`` must not be replaced by a save of this layout (``None``: it may be)."""
        return refusal(folder, self.key, self.own_names)

    def save_staged(
        self, request: SaveRequest, write: Callable[[Path], Any], write_last: Callable[[Path], None] | None
    ) -> AsyncSave | None:
        """Every rank: `write(staging)` its files into this save's staging folder; then rank 0 commits it (with
        ``write_last`` first; in the background for an async mode) and every rank learns the outcome.

        A failed write removes the staging folder and leaves the previous checkpoint.
        """
        host, folder = request.host, Path(request.path)
        staging = open_staging(host, folder, self.is_layout, self.refusal)
        try:
            write(staging)
        except BaseException:
            if host.is_global_zero:
                atomic.abort_directory(staging)
            raise
        commit = (lambda: commit_staging(staging, folder, write_last)) if host.is_global_zero else None
        return request.mode.run_rank_zero_write(host, request.path, commit)

    def holds(self, path: str) -> bool:
        return not is_url(path) and committed_folder(Path(path), self.is_layout) is not None

    def read(self, path: str, rank: int, io: CheckpointIO) -> LoadedCheckpoint:
        return read_committed(path, self.is_layout, lambda folder: self.read_folder(folder, rank))
