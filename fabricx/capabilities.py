"""What Fabric needs from the objects it is given, as Protocols: the one place its capability checks live.

Loggers, checkpoint-I/O plugins and modules that hold their Fabric are recognised by what they can do,
not by their class, so Lightning's objects and a user's own duck-typed ones pass alike. The same Protocols
type ``Fabric``'s signatures and answer the checks at run time.

Example:

```python
from fabricx.capabilities import LoggerLike

class PrintLogger:
    def log_metrics(self, metrics, step=None):
        print(step, metrics)

    def log_hyperparams(self, params, *args, **kwargs):
        print(params)

fabric = Fabric(loggers=PrintLogger())  # a LoggerLike
```
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol, TypeGuard, runtime_checkable


class LoggerLike(Protocol):
    """A logger as Fabric uses it: fabricx's and Lightning's loggers, or any object with these methods."""

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None: ...

    def log_hyperparams(self, params: object, *args: object, **kwargs: object) -> None: ...


class CheckpointIOLike(Protocol):
    """A checkpoint-I/O plugin: the methods of ``fabricx.checkpoint.io.CheckpointIO``, by shape."""

    def stage(self, path: str | os.PathLike[str], token: str) -> Path: ...

    def staging_dir(self, path: str | os.PathLike[str], token: str) -> Path: ...

    def finish_rank(self, staging: Path, path: str | os.PathLike[str], rank: int) -> None: ...

    def manifest(self, staging: Path) -> dict[str, int]: ...

    def commit(self, staging: Path, path: str | os.PathLike[str]) -> None: ...

    def abort(self, staging: Path, path: str | os.PathLike[str]) -> None: ...

    def resolve(self, path: str | os.PathLike[str], is_complete: Callable[[Path], bool]) -> Path | None: ...

    def recover(self, path: str | os.PathLike[str], is_complete: Callable[[Path], bool]) -> None: ...

    def remove(self, path: str | os.PathLike[str]) -> None: ...


def _protocol_methods(protocol: type) -> tuple[str, ...]:
    return tuple(name for name, member in vars(protocol).items() if not name.startswith("_") and callable(member))


CHECKPOINT_IO_METHODS = _protocol_methods(CheckpointIOLike)


def is_checkpoint_io(plugin: object) -> TypeGuard[CheckpointIOLike]:
    """Whether ``plugin`` has every method of a checkpoint-I/O plugin, each callable."""
    return all(callable(getattr(plugin, name, None)) for name in CHECKPOINT_IO_METHODS)


class FileCheckpointIOLike(Protocol):
    """Lightning's ``CheckpointIO`` shape: one checkpoint dict to one file and back (a library's own format).

    The Trainer hands such a plugin the dict its single-file checkpoint holds (``Trainer(plugins=[...])``).
    """

    def save_checkpoint(self, checkpoint: dict, path: str, storage_options: object = None) -> None: ...

    def load_checkpoint(self, path: str) -> dict: ...

    def remove_checkpoint(self, path: str) -> None: ...


def is_file_checkpoint_io(plugin: object) -> TypeGuard[FileCheckpointIOLike]:
    """Whether ``plugin`` has Lightning's ``CheckpointIO`` methods (and is not a fabricx checkpoint I/O)."""
    methods = ("save_checkpoint", "load_checkpoint", "remove_checkpoint")
    return all(callable(getattr(plugin, name, None)) for name in methods) and not is_checkpoint_io(plugin)


@runtime_checkable
class HoldsFabric(Protocol):
    """A module that records the Fabric that set it up (``TrainModule``, Lightning's ``LightningModule``)."""

    _fabric: object


@runtime_checkable
class HoldsFabricOptimizers(Protocol):
    """A module whose ``optimizers()`` returns the optimizers Fabric set up with it."""

    _fabric_optimizers: object


class IncompatibleKeys(Protocol):
    """What ``nn.Module.load_state_dict`` returns: the keys that were missing and those left over."""

    @property
    def missing_keys(self) -> list[str]: ...

    @property
    def unexpected_keys(self) -> list[str]: ...


__all__ = [
    "CHECKPOINT_IO_METHODS",
    "CheckpointIOLike",
    "FileCheckpointIOLike",
    "HoldsFabric",
    "HoldsFabricOptimizers",
    "IncompatibleKeys",
    "LoggerLike",
    "is_checkpoint_io",
    "is_file_checkpoint_io",
]
