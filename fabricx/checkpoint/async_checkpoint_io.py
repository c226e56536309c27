"""Lightning's `AsyncCheckpointIO` shape: a checkpoint I/O plugin whose saves run in a background thread.

``Trainer(plugins=[AsyncCheckpointIO()])`` hands each checkpoint dict to the wrapped plugin (fabricx's
`TorchCheckpointIO` unless another is given) from one background thread, after copying its tensors in the
caller's thread, so training goes on while the file is written. A failed save is raised by the next save or by
`teardown()`, which the Trainer calls when ``fit`` returns and which waits for every save. Loading waits for the
saves still running (a resume in the same process reads a whole file); removing does not, as in Lightning.

Example:
    ```python
    checkpoint = ModelCheckpoint(save_top_k=-1)
    trainer = Trainer(plugins=[AsyncCheckpointIO()], callbacks=[checkpoint])
    trainer.fit(module, loader)   # the last save has finished when fit returns
    ```
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import torch
from lightning_utilities.core.apply_func import apply_to_collection

from fabricx.checkpoint.torch_checkpoint_io import TorchCheckpointIO

if TYPE_CHECKING:
    from fabricx.capabilities import FileCheckpointIOLike

__all__ = ["AsyncCheckpointIO"]


class AsyncCheckpointIO:
    """Save through ``checkpoint_io`` in one background thread; load and remove through it directly."""

    def __init__(self, checkpoint_io: FileCheckpointIOLike | None = None) -> None:
        self.checkpoint_io: FileCheckpointIOLike = checkpoint_io if checkpoint_io is not None else TorchCheckpointIO()
        self._executor: ThreadPoolExecutor | None = None
        self._pending: list[Future[None]] = []

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | os.PathLike, storage_options: Any | None = None
    ) -> None:
        """Copy the checkpoint's tensors now, write it in the background (a failure of an earlier save is raised)."""
        self._raise_failure(wait=False)
        # The copy is taken here, in the training thread: the next optimizer step changes the tensors in place.
        snapshot = apply_to_collection(checkpoint, torch.Tensor, lambda tensor: tensor.detach().clone())
        if self._executor is None:  # created again after a teardown: a Trainer may fit more than once
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fabricx-async-checkpoint")
        if storage_options is None:
            job = self._executor.submit(self.checkpoint_io.save_checkpoint, snapshot, os.fspath(path))
        else:
            job = self._executor.submit(self.checkpoint_io.save_checkpoint, snapshot, os.fspath(path), storage_options)
        self._pending.append(job)

    def load_checkpoint(self, path: str | os.PathLike, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The wrapped plugin's load, once every save still running has finished."""
        self._raise_failure(wait=True)
        return self.checkpoint_io.load_checkpoint(os.fspath(path), *args, **kwargs)

    def remove_checkpoint(self, path: str | os.PathLike) -> None:
        self.checkpoint_io.remove_checkpoint(os.fspath(path))

    def teardown(self) -> None:
        """Wait for every save; raise the first one's error, if any failed."""
        try:
            self._raise_failure(wait=True)
        finally:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None
            teardown = getattr(self.checkpoint_io, "teardown", None)
            if callable(teardown):
                teardown()

    def _raise_failure(self, wait: bool) -> None:
        done = [job for job in self._pending if wait or job.done()]
        self._pending = [job for job in self._pending if job not in done]
        for job in done:
            job.result()  # the save's own exception, raised here
