"""Lightning's `TorchCheckpointIO` shape (one dict to one file, and back) over fabricx's code-free single file.

Libraries subclass Lightning's class to read and write checkpoints themselves (nn-template-core zips each file
with its data's metadata). Here the file is what `write_single_file` writes and `read_checkpoint` reads: tensors
and plain values, never code. The Trainer's checkpoints are written by its layouts, not by a plugin of this shape
(``Trainer(plugins=[...])`` refuses it, naming `fabricx.checkpoint.CheckpointIO`).

Example:
    ```python
    io = TorchCheckpointIO()
    io.save_checkpoint({"state_dict": model.state_dict(), "epoch": 3}, "run/last.ckpt")
    checkpoint = io.load_checkpoint("run/last.ckpt")
    ```
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["TorchCheckpointIO"]


class TorchCheckpointIO:
    """Save a checkpoint dict to one file, load it back, remove it (Lightning's methods and arguments)."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | os.PathLike, storage_options: Any | None = None
    ) -> None:
        from fabricx.checkpoint.format import write_single_file

        if storage_options is not None:
            raise TypeError(
                f"{type(self).__name__}.save_checkpoint got storage_options={storage_options!r}; it writes local "
                "files and takes none. Leave it out (fabricx.checkpoint.storage.FsspecCheckpointIO writes remote)."
            )
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_single_file(path, checkpoint)

    def load_checkpoint(
        self, path: str | os.PathLike, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """The file's dict, on the CPU (``map_location`` and ``weights_only`` are accepted for Lightning's
        signature: nothing in the file is code)."""
        from fabricx.checkpoint.format import read_checkpoint

        if not Path(path).is_file():
            raise FileNotFoundError(f"Checkpoint file not found: {os.fspath(path)}")
        return read_checkpoint(path).shared

    def remove_checkpoint(self, path: str | os.PathLike) -> None:
        Path(path).unlink(missing_ok=True)

    def teardown(self) -> None:
        """Nothing to release (Lightning's hook)."""
