"""``OnExceptionCheckpoint``: write a checkpoint when fit ends with an exception, to resume from it."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from fabricx.train.callbacks.base import Callback

if TYPE_CHECKING:
    from fabricx.train.module import TrainModule
    from fabricx.train.trainer import Trainer


class OnExceptionCheckpoint(Callback):
    """Save `dirpath/filename.ckpt` when training raises (a crash, a `KeyboardInterrupt`), as Lightning's.

    Resume with `trainer.fit(model, ckpt_path=".../on_exception.ckpt")`.

    Example:
        ```python
        trainer = Trainer(callbacks=[OnExceptionCheckpoint("checkpoints")])
        ```
    """

    FILE_EXTENSION = ".ckpt"

    def __init__(self, dirpath: str | os.PathLike[str], filename: str = "on_exception") -> None:
        super().__init__()
        self.dirpath = os.fspath(dirpath)
        self.filename = filename

    @property
    def ckpt_path(self) -> str:
        """Where the checkpoint is written."""
        return os.path.join(os.path.expanduser(self.dirpath), self.filename + self.FILE_EXTENSION)

    def on_exception(self, trainer: Trainer, pl_module: TrainModule, exception: BaseException) -> None:
        trainer.save_checkpoint(self.ckpt_path)

    def teardown(self, trainer: Trainer, pl_module: TrainModule, stage: str) -> None:
        """Nothing to clean up: the checkpoint stays for the resume."""


__all__ = ["OnExceptionCheckpoint"]
