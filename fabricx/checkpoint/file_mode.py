"""The mode a new file gets in a folder: for files a library writes with a fixed mode of its own."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path


def new_file_mode(directory: str | os.PathLike[str]) -> int:
    """The permission bits a file created in `directory` gets: `0o666` less the user's umask (or what the
    folder's default ACL gives).

    safetensors creates its files `0600` whatever the umask; set them to this mode and a folder's files all
    have one mode. It is found by creating and removing an empty file, because reading the umask means
    changing it, for every thread of the process at once.

    Example:
        ```python
        os.chmod(weights_file, new_file_mode(weights_file.parent))
        ```
    """
    # The name is unique per process and thread, so two savers in one folder never share a probe.
    probe = Path(directory) / f".fabricx-mode-probe-{os.getpid()}-{threading.get_ident()}"
    descriptor = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        return stat.S_IMODE(os.fstat(descriptor).st_mode)
    finally:
        os.close(descriptor)
        probe.unlink()
