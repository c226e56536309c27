"""A failed checkpoint write as an error a person can act on: what was written, why it failed, what to do."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from fabricx.utilities.exceptions import CheckpointPermissionError, CheckpointWriteError

_OS_ERROR_CODE = re.compile(r"os error (\d+)")
_WRITE_HINTS = {
    errno.ENOSPC: "Free disk space (or keep fewer checkpoints) or save to another file system",
    errno.EDQUOT: "Free space in your quota or save to another file system",
    errno.EACCES: "Save to a directory this process may write to",
    errno.EPERM: "Save to a directory this process may write to",
    errno.EROFS: "The file system is read-only: save to another one",
    errno.ENOTDIR: "A regular file is in the way of a directory on that path: choose another path",
    errno.EEXIST: "A regular file is in the way of a directory on that path: choose another path",
}


def write_failure(path: Path | str, error: BaseException) -> CheckpointWriteError:
    """A failed write as an error that names the checkpoint, the reason and what to do: an ``OSError`` with the
    failure's ``errno`` (a ``PermissionError`` where writing was refused) that is also a `CheckpointError`."""
    code = error.errno if isinstance(error, OSError) else None
    if code is None:  # safetensors reports I/O failures as "... (os error 28)"
        found = _OS_ERROR_CODE.search(str(error))
        code = int(found.group(1)) if found else None
    reason = f"{os.strerror(code)} ({errno.errorcode.get(code, code)})" if code else str(error)
    where = getattr(error, "filename", None)
    hint = _WRITE_HINTS.get(code or 0, "Check that the directory is writable and has free space")
    kind = CheckpointPermissionError if code in (errno.EACCES, errno.EPERM) else CheckpointWriteError
    return kind(
        f"Could not write the checkpoint {path}: {reason}{f' at {where}' if where else ''}. This save was "
        f"abandoned: readers never see a half-written checkpoint, and what was at {path} before, and every "
        f"other checkpoint, is unchanged. {hint}.",
        errno=code,
    )


__all__ = ["write_failure"]
