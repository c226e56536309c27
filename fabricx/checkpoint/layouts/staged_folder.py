"""Atomic folder saves for layouts whose final folder holds only another tool's files (``"dcp"``, ``"deepspeed"``).

Every rank writes into one staging folder beside ``<path>`` (``<path>.tmp-<token>``, the token chosen by
rank 0 and broadcast); once every rank's files are in, rank 0 adds its last files, flushes the folder
and swaps it into place (`fabricx.checkpoint.atomic.commit_directory`: the previous checkpoint goes to
``<path>.old-<token>`` and is deleted only once the new one is in place). A save that dies midway leaves
the previous checkpoint as it was. A layout says which folders are its own (``is_layout``) and which it
refuses to replace (``refusal``).

Example:

```python
staging = open_staging(host, Path("ckpt"), is_dcp_folder, refusal)   # every rank
...                                                                   # every rank writes into staging
commit_staging(staging, Path("ckpt"), write_last=None)                # rank 0
```
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from fabricx.checkpoint import atomic
from fabricx.checkpoint.format import is_complete, write_failure
from fabricx.utilities.exceptions import CheckpointError

if TYPE_CHECKING:
    from fabricx.checkpoint.host import CheckpointHost

__all__ = ["FABRICX_META", "commit_staging", "committed_folder", "fabricx_directory_there", "open_staging"]

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
