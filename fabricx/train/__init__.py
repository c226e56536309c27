"""Structured training: subclass :class:`TrainModule`, run it with :class:`Trainer`.

Example::

    from fabricx.train import Trainer, TrainModule
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fabricx.train.module import TrainModule
    from fabricx.train.trainer import Trainer

__all__ = ["TrainModule", "Trainer"]


def __getattr__(name: str) -> Any:
    # Resolved on first use so that importing fabricx.train costs almost nothing.
    if name == "TrainModule":
        from fabricx.train.module import TrainModule

        return TrainModule
    if name == "Trainer":
        from fabricx.train.trainer import Trainer

        return Trainer
    raise AttributeError(f"module 'fabricx.train' has no attribute {name!r}")
