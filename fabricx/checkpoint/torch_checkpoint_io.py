"""Lightning's `TorchCheckpointIO` shape (one dict to one file, and back) over fabricx's code-free single file.

Libraries subclass Lightning's class to read and write checkpoints themselves (nn-template-core zips each file
with its data's metadata). Here the file is what `write_single_file` writes, read back through the checkpoint
gate: tensors and plain values, never code. ``Trainer(plugins=[MyCheckpointIO()])`` writes and reads the
Trainer's checkpoint files through such a plugin (`fabricx.checkpoint.layouts.plugin_file`), as Lightning's does.

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
        """The dict the file holds, as ``save_checkpoint`` was given it, on the CPU (``map_location`` and
        ``weights_only`` are accepted for Lightning's signature: nothing in the file is code). A file the Trainer
        wrote through this plugin keeps fabricx's entries (every rank's) for the Trainer to take apart."""
        from fabricx.checkpoint.safe_read import load_torch
        from fabricx.utilities.exceptions import CheckpointError

        file = Path(path)
        if not file.is_file():
            raise FileNotFoundError(f"Checkpoint file not found: {os.fspath(path)}")
        contents = load_torch(file, f"the checkpoint {file}")
        if not isinstance(contents, dict):
            raise CheckpointError(f"{file} holds a {type(contents).__name__}; a checkpoint file holds a dict.")
        return contents

    def remove_checkpoint(self, path: str | os.PathLike) -> None:
        Path(path).unlink(missing_ok=True)

    def teardown(self) -> None:
        """Nothing to release (Lightning's hook)."""
