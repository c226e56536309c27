"""DeepSpeed engine files of an asynchronous save: serialized in the foreground, written in the background.

``engine.save_checkpoint`` has to run in the training thread: it runs collectives (barriers) on the
training process group, which the loop's own collectives must not interleave with, and reads live engine
state that the next step changes (tensors, and Python objects such as the fp16 loss scaler). Its files
all go through ``engine.checkpoint_engine.save(state_dict, path)``; during an asynchronous save that
checkpoint engine is replaced by one that serializes each state dict into memory instead (``torch.save``
into a buffer, DeepSpeed's own file format, which is also the copy that lets training go on), and the
buffers are written to their files by the background thread with the rest of the checkpoint, before the
commit. The serialization (a memory copy of the engine's state) is what the loop waits for; the disk
writes, fsyncs and uploads are not. Unlike a plain optimizer's state (see
`fabricx.checkpoint.step_guard`), the engine's tensors are not copied lazily: ZeRO changes some of
its state before it calls the wrapped torch optimizer's ``step`` (the loss scale), so a copy held back
until that step could mix two steps.

Example:
    ```python
    files = EngineFiles()
    with files.capture(engine):
        engine.save_checkpoint("ckpt.tmp/deepspeed", tag="model", save_latest=False)
    files.write()  # in the background thread
    ```
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["EngineFiles"]


class EngineFiles:
    """The files engines asked to write, held in memory until `write()`."""

    def __init__(self) -> None:
        self.files: list[tuple[str, memoryview]] = []

    @contextlib.contextmanager
    def capture(self, engine: Any) -> Iterator[None]:
        """While active, ``engine``'s checkpoint files are serialized into this object instead of written
        (DeepSpeed's default torch checkpoint engine; another one configured by the user writes as usual)."""
        from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

        original = engine.checkpoint_engine
        if not isinstance(original, TorchCheckpointEngine):
            yield
            return
        engine.checkpoint_engine = _CapturingEngine(original, self)
        try:
            yield
        finally:
            engine.checkpoint_engine = original

    def nbytes(self) -> int:
        return sum(data.nbytes for _, data in self.files)

    def write(self) -> None:
        """Write every captured file (background thread); the checkpoint's commit makes them durable."""
        files, self.files = self.files, []
        for path, data in files:
            with open(path, "wb") as handle:
                handle.write(data)


class _CapturingEngine:
    """DeepSpeed's checkpoint engine, except that ``save`` serializes into memory."""

    def __init__(self, inner: Any, files: EngineFiles) -> None:
        self._inner = inner
        self._files = files

    def save(self, state_dict: Any, path: str) -> None:
        buffer = io.BytesIO()
        torch.save(state_dict, buffer, _use_new_zipfile_serialization=self._inner.zipfile_serialization)
        self._files.files.append((os.fspath(path), buffer.getbuffer()))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
