"""Reading DeepSpeed's own checkpoint files without running code.

DeepSpeed's engine writes ``torch.save`` pickles and reads them back with ``weights_only=False``.
The files it writes hold tensors, plain containers and four DeepSpeed types (the ZeRO stage enum,
the loss scalers and ``fragment_address``), so fabricx reads them with ``weights_only=True`` plus an
explicit allow-list of exactly those types (`DEEPSPEED_SAFE_GLOBALS`). A file that needs any
other global is refused with a `CheckpointError` naming it; ``allow_pickle=True`` is the
explicit opt-in for engine files you trust that were written by other tools (so is
``fabric.load(..., weights_only=False)``).

`safe_engine_loading()` routes DeepSpeed's own loads (``engine.load_checkpoint`` and
``zero_to_fp32``) through the same reader for the duration of a load.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from fabricx.checkpoint.safe_read import load_torch
from fabricx.utilities.exceptions import CheckpointError

__all__ = ["DEEPSPEED_SAFE_GLOBALS", "check_engine_folder", "load_engine_file", "safe_engine_loading"]

#: The DeepSpeed types its checkpoint files refer to; nothing else is allowed when unpickling them.
DEEPSPEED_SAFE_GLOBALS = (
    "deepspeed.runtime.zero.config.ZeroStageEnum",
    "deepspeed.runtime.fp16.loss_scaler.LossScaler",
    "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
    "deepspeed.utils.tensor_fragment.fragment_address",
)

_LOCK = threading.RLock()


def _safe_globals() -> list[Any]:
    found = []
    for dotted in DEEPSPEED_SAFE_GLOBALS:
        module, _, name = dotted.rpartition(".")
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue  # another DeepSpeed version: what it does not have, its files cannot hold
    return found


def load_engine_file(
    file: str | os.PathLike[str], map_location: Any = "cpu", *, allow_pickle: bool = False, mmap: bool = False
) -> Any:
    """Load one DeepSpeed engine file through the gate (`fabricx.checkpoint.safe_read.load_torch`): weights-only
    with DeepSpeed's own types allowed, uncompressed, every tensor backed by its own bytes.

    ``allow_pickle=True`` loads with full unpickling instead (it can run code stored in the file:
    only for files you trust).

    Example:
        ```python
        state = load_engine_file("ckpt/deepspeed/model/mp_rank_00_model_states.pt")
        ```
    """
    path = Path(file)
    return load_torch(
        path,
        f"the DeepSpeed file {path}",
        allowed_globals=_safe_globals(),
        allow_pickle=allow_pickle,
        trust_hint="If you trust the file, pass allow_pickle=True.",
        map_location=map_location,
        mmap=mmap,
    )


def check_engine_folder(folder: str | os.PathLike[str]) -> Path:
    """Refuse a DeepSpeed tag folder that is a symlink or holds anything but regular files.

    Example:
        ```python
        check_engine_folder("ckpt/deepspeed/model")
        ```
    """
    path = Path(folder)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise CheckpointError(f"The DeepSpeed checkpoint folder {path} is missing.") from None
    if not stat.S_ISDIR(info.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a folder"
        raise CheckpointError(f"Refusing to read the DeepSpeed checkpoint folder {path}: it is {kind}.")
    for child in path.iterdir():
        if child.is_symlink():
            raise CheckpointError(
                f"Refusing to read {path}: it holds the symbolic link {child.name}. A checkpoint holds its own files."
            )
    return path


class _SafeCheckpointEngine:
    """Wraps an engine's checkpoint engine so that its ``load`` goes through `load_engine_file()`."""

    def __init__(self, inner: Any, allow_pickle: bool) -> None:
        self._inner = inner
        self._allow_pickle = allow_pickle

    def load(self, path: str, map_location: Any = None) -> Any:
        return load_engine_file(path, map_location, allow_pickle=self._allow_pickle)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _TorchWithSafeLoad:
    """``torch`` as one DeepSpeed module sees it while a load runs: the same, except ``torch.load``."""

    def __init__(self, allow_pickle: bool) -> None:
        self._allow_pickle = allow_pickle

    def load(self, f: Any, map_location: Any = None, weights_only: Any = None, mmap: bool = False, **_: Any) -> Any:
        return load_engine_file(f, map_location, allow_pickle=self._allow_pickle, mmap=bool(mmap))

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


@contextlib.contextmanager
def safe_engine_loading(engine: Any = None, *, allow_pickle: bool = False) -> Iterator[None]:
    """While active, ``engine.load_checkpoint`` and ``deepspeed.utils.zero_to_fp32`` read files weights-only.

    Example:
        ```python
        with safe_engine_loading(engine):
            engine.load_checkpoint("ckpt/deepspeed", tag="model")
        ```
    """
    from deepspeed.utils import zero_to_fp32

    with _LOCK:
        original_torch = zero_to_fp32.torch
        original_engine = getattr(engine, "checkpoint_engine", None) if engine is not None else None
        zero_to_fp32.torch = _TorchWithSafeLoad(allow_pickle)  # type: ignore[assignment]
        if engine is not None and original_engine is not None:
            engine.checkpoint_engine = _SafeCheckpointEngine(original_engine, allow_pickle)
        try:
            yield
        finally:
            zero_to_fp32.torch = original_torch
            if engine is not None and original_engine is not None:
                engine.checkpoint_engine = original_engine
