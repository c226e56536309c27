"""``OnExceptionCheckpoint``: write a checkpoint when fit ends with an exception, to resume from it."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from fabricx.train.callbacks.base import Checkpoint

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer


class OnExceptionCheckpoint(Checkpoint):
    """Save `dirpath/filename.ckpt` when a run raises (a crash, a `KeyboardInterrupt`), as Lightning's does.

    A run that ends without an exception removes that file, so that what is left is always from the last
    failure. Resume with `trainer.fit(model, ckpt_path=callback.ckpt_path)`; a resume that fails before the
    checkpoint is restored whole writes nothing (the file it resumed from stays as it was).

    Example:
        ```python
        trainer = Trainer(callbacks=[OnExceptionCheckpoint("checkpoints")])
        ```
    """

    FILE_EXTENSION = ".ckpt"

    def __init__(self, dirpath: str | os.PathLike[str], filename: str = "on_exception") -> None:
        super().__init__()
        if not filename:
            raise ValueError("The filename cannot be empty")
        self.dirpath = dirpath
        self.filename = filename

    @property
    def ckpt_path(self) -> str:
        """Where the checkpoint is written."""
        return os.path.join(self.dirpath, self.filename + self.FILE_EXTENSION)

    def on_exception(self, trainer: Trainer, pl_module: TrainModule, exception: BaseException) -> None:
        if trainer.model is None or trainer.checkpoint_connector.restoring:
            # Raised before the module was set up (a ckpt_path that does not exist, say) or while the checkpoint
            # was restored (an optimizer that does not fit it): nothing has trained, and the checkpoint this fit
            # was to resume from, often this very file, must stay as it is (Lightning's overwrites it).
            return
        trainer.save_checkpoint(self.ckpt_path)

    def teardown(self, trainer: Trainer, pl_module: TrainModule, stage: str) -> None:
        # As Lightning's: teardown hooks run only after a run that did not raise.
        if trainer.is_global_zero and os.path.lexists(self.ckpt_path):
            trainer.checkpoint_connector.remove(self.ckpt_path)


__all__ = ["OnExceptionCheckpoint"]
