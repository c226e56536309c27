"""Checkpoints stored as a tracker's artifacts: Lightning's ``log_model`` for the MLflow and W&B loggers."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any, Literal

from fabricx.utilities.rank_zero import rank_zero_only


def _saved_checkpoint_path(saved: Any) -> str:
    """The checkpoint ``after_save_checkpoint(saved)`` reports: a path as it is, or the newest file of the
    ``ModelCheckpoint`` that saved it (what Lightning's Trainer hands its loggers)."""
    if isinstance(saved, (str, os.PathLike)):
        return os.fspath(saved)
    newest = getattr(saved, "_last_checkpoint_saved", None) or getattr(saved, "best_model_path", "")
    return os.fspath(newest)


class CheckpointArtifacts(ABC):
    """Mixin for a logger's ``log_model``: ``True`` stores the reported checkpoints at ``finalize()``
    (`_store_final_checkpoints()`), ``"all"`` as each is reported; subclasses store one in `_store_checkpoint()`."""

    _log_model: Literal[True, False, "all"]
    _checkpoints: list[str]

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        """Tell the logger a checkpoint was written; with ``log_model`` it becomes an artifact. The Trainer hands
        over its ``ModelCheckpoint`` (as Lightning's does: its newest file is the one); a path is taken as it is."""
        if not self._log_model:
            return
        path = _saved_checkpoint_path(checkpoint_callback)
        if path and path not in self._checkpoints:
            self._checkpoints.append(path)
        if self._log_model == "all":
            self._store_checkpoints()

    def _store_final_checkpoints(self) -> None:
        if self._log_model is True:
            self._store_checkpoints()

    @rank_zero_only
    def _store_checkpoints(self) -> None:
        for path in self._checkpoints:
            self._store_checkpoint(path)
        self._checkpoints = []

    @abstractmethod
    def _store_checkpoint(self, path: str) -> None:
        """Store the checkpoint file at ``path`` as one of the tracker's artifacts."""
