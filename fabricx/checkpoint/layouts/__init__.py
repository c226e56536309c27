"""Checkpoint layouts: how the pipeline's contents are laid out on disk, chosen by a key.

``"directory"`` is the fabricx checkpoint directory (``meta.json``, shared and per-rank files, what a
strategy adds); ``"single_file"`` is one ``torch.save`` zip file (`.single_file`). A path that
names a file (``.pt``, ``.pth``, ``.ckpt``, ``.bin``) takes the single-file layout, any other path the
directory; ``fabric.save(path, state, layout="directory")`` asks for the directory explicitly.

Example:

```python
layout_for("out/model.pth")                        # "single_file"
layout_for("out/step_10")                          # "directory"
layout_for("out/model.pth", requested="directory")  # "directory"
layout_for("out/model.pth/")                       # "directory" (a trailing slash names a folder)
```
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath

__all__ = ["FILE_SUFFIXES", "LAYOUTS", "layout_for"]

#: The layout keys ``fabric.save(..., layout=...)`` accepts.
LAYOUTS = ("directory", "single_file")
#: Suffixes that make a path name one file.
FILE_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin")


def layout_for(path: str | os.PathLike[str], requested: str | None = None) -> str:
    """The layout key for a save to ``path``: ``requested`` if given, else decided by the path's suffix."""
    if requested is not None:
        if requested not in LAYOUTS:
            raise ValueError(f"layout={requested!r}; choose one of {list(LAYOUTS)} (or None: decided by the path).")
        return requested
    text = os.fspath(path)
    if text.endswith(("/", os.sep)):  # "out/model.pth/" names a directory
        return "directory"
    name = PurePosixPath(text).name
    return "single_file" if name.lower().endswith(FILE_SUFFIXES) else "directory"
