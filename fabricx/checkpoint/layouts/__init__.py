"""Checkpoint layouts: how the pipeline's contents are laid out on disk, looked up by a key.

``"directory"`` is the fabricx checkpoint directory (``meta.json``, shared and per-rank files, what a
strategy adds); ``"single_file"`` is one ``torch.save`` zip file; ``"dcp"`` is a torch.distributed.checkpoint
folder plus ``meta.pt``, as Lightning's FSDP / ModelParallel strategies write a sharded checkpoint;
``"deepspeed"`` is a DeepSpeed engine's own checkpoint folder, as Lightning's DeepSpeedStrategy writes one.
A path that names a file (``.pt``, ``.pth``, ``.ckpt``, ``.bin``) takes the single-file layout, any other
path the directory; ``fabric.save(path, state, layout="dcp")`` asks for one explicitly. Loading asks each
layout whether it holds the path, so ``fabric.load`` reads all four.

A layout is one backend module with a `Layout` object named ``LAYOUT``, plus one line in `_BUILT_IN`
(or a `register_layout()` call from outside fabricx). The registry imports a backend only when its key
is used, so the pipeline imports none of them.

Example:

```python
layout_for("out/model.pth")                        # "single_file"
layout_for("out/step_10")                          # "directory"
layout_for("out/model.pth", requested="directory")  # "directory"
layout_for("out/model.pth/")                       # "directory" (a trailing slash names a folder)
register_layout("toy", ToyLayout())                 # fabric.save(path, state, layout="toy")
```
"""

from __future__ import annotations

import importlib
import os
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Protocol, cast

from fabricx.checkpoint.save_request import SaveRequest

if TYPE_CHECKING:
    from fabricx.checkpoint.background import AsyncSave
    from fabricx.checkpoint.io import CheckpointIO
    from fabricx.checkpoint.loaded import LoadedCheckpoint

__all__ = [
    "FILE_SUFFIXES",
    "Layout",
    "SaveRequest",
    "get_layout",
    "layout_for",
    "layout_keys",
    "register_layout",
    "saved_layout",
    "unregister_layout",
]

#: Suffixes that make a path name one file.
FILE_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin")


class Layout(Protocol):
    """What the pipeline needs from a layout: write the user's state, recognise and read a saved one.

    Example:

    ```python
    class ToyLayout:
        def save(self, request): ...  # every rank; request.mode.run(path, job)
        def holds(self, path): return Path(path, "toy.pt").is_file()
        def read(self, path, rank, io): return LoadedCheckpoint(shared, None, {}, Path(path))
    ```
    """

    def save(self, request: SaveRequest) -> AsyncSave | None:
        """Every rank: write the request's state to its path; with an asynchronous mode, the save's handle."""
        ...

    def holds(self, path: str) -> bool:
        """Whether ``path`` is a checkpoint saved in this layout (cheap: no file is read in full)."""
        ...

    def read(self, path: str, rank: int, io: CheckpointIO) -> LoadedCheckpoint:
        """Rank ``rank``'s view of the checkpoint at ``path``, on the CPU, without running code.

        A directory read keeps its ``pin`` open (the pipeline closes it once the strategy's own files are read).
        A layout whose files do not name the entries' keys (Lightning's DeepSpeed folders) may also have
        ``match_state(loaded, host, state)``, which the pipeline calls after each read into a ``state`` to
        name them after the live objects.
        """
        ...


# One line per built-in layout: its key and the module whose ``LAYOUT`` it is (imported on first use).
_BUILT_IN: dict[str, str] = {
    "directory": "fabricx.checkpoint.layouts.directory",
    "single_file": "fabricx.checkpoint.layouts.single_file",
    "dcp": "fabricx.checkpoint.layouts.dcp",
    "deepspeed": "fabricx.checkpoint.layouts.deepspeed",
}
_registered: dict[str, Layout | str] = dict(_BUILT_IN)


def register_layout(key: str, layout: Layout) -> None:
    """Make ``layout`` the one ``fabric.save(..., layout=key)`` writes, and `saved_layout()` asks first.

    Example:

    ```python
    register_layout("toy", ToyLayout())
    ```
    """
    if not key or not isinstance(key, str):
        raise ValueError(f"A layout key must be a non-empty string, got {key!r}.")
    _registered.pop(key, None)  # a new registration is asked first by saved_layout()
    _registered[key] = layout


def unregister_layout(key: str) -> None:
    """Forget the layout registered as ``key`` (a built-in one goes back to fabricx's own)."""
    _registered.pop(key, None)
    if key in _BUILT_IN:
        _registered[key] = _BUILT_IN[key]


def layout_keys() -> tuple[str, ...]:
    """The keys ``fabric.save(..., layout=...)`` accepts."""
    return tuple(_registered)


def get_layout(key: str) -> Layout:
    """The layout registered as ``key`` (a built-in backend is imported here, on first use)."""
    if key not in _registered:
        raise ValueError(f"layout={key!r}; choose one of {list(_registered)} (or None: decided by the path).")
    found = _registered[key]
    if isinstance(found, str):
        found = cast("Layout", importlib.import_module(found).LAYOUT)
        _registered[key] = found
    return found


def layout_for(path: str | os.PathLike[str], requested: str | None = None) -> str:
    """The layout key for a save to ``path``: ``requested`` if given, else decided by the path's suffix."""
    if requested is not None:
        if requested not in _registered:
            raise ValueError(f"layout={requested!r}; choose one of {list(_registered)} (or None: decided by the path).")
        return requested
    text = os.fspath(path)
    if text.endswith(("/", os.sep)):  # "out/model.pth/" names a directory
        return "directory"
    name = PurePosixPath(text).name
    return "single_file" if name.lower().endswith(FILE_SUFFIXES) else "directory"


def saved_layout(path: str | os.PathLike[str]) -> Layout:
    """The layout of the checkpoint saved at ``path``: the last registered one that `Layout.holds` it.

    The directory layout is asked last and reads anything else (its reader says what is wrong with it).
    """
    text = os.fspath(path)
    for key in reversed(list(_registered)):
        if key == "directory":
            continue
        layout = get_layout(key)
        if layout.holds(text):
            return layout
    return get_layout("directory")
