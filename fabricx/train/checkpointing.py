"""What a Trainer checkpoint holds, and where ``ckpt_path="last"`` points.

Everything goes through ``fabric.save``/``fabric.load``: the module, optimizers, schedulers and the
training data loader (its exact position) as objects with state, plus small stateful holders for the
trainer's progress, the callbacks' states, the logged metrics (per process) and the user's extras.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import Tensor

from fabricx.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from fabricx.train.trainer import Trainer


class ProgressState:
    """The trainer's counters and the metrics later decisions depend on."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def state_dict(self) -> dict[str, Any]:
        trainer = self.trainer
        return {
            "global_step": trainer.global_step,
            "current_epoch": trainer.current_epoch,
            "epoch_done": trainer._epoch_done,
            "epoch_metrics": {k: _detached(v) for k, v in trainer._epoch_metrics.items()},
            "epoch_prog_bar": {k: _detached(v) for k, v in trainer._epoch_prog_bar.items()},
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        trainer = self.trainer
        trainer.global_step = int(state_dict["global_step"])
        trainer.current_epoch = int(state_dict["current_epoch"])
        trainer._epoch_done = bool(state_dict.get("epoch_done", False))
        trainer._epoch_metrics = dict(state_dict.get("epoch_metrics", {}))
        trainer._epoch_prog_bar = dict(state_dict.get("epoch_prog_bar", {}))


class CallbackStates:
    """Every callback's ``state_dict``, keyed by its ``state_key``."""

    def __init__(self, callbacks: list[Any]) -> None:
        self.callbacks = callbacks

    def state_dict(self) -> dict[str, Any]:
        states = {}
        for callback in self.callbacks:
            state_dict = getattr(callback, "state_dict", None)
            if callable(state_dict):
                state = state_dict()
                if state:
                    states[_state_key(callback)] = state
        return states

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for callback in self.callbacks:
            key = _state_key(callback)
            if key in state_dict and callable(getattr(callback, "load_state_dict", None)):
                callback.load_state_dict(state_dict[key])


class MetricStates:
    """The running aggregates and torchmetrics states of the training metrics (one per process)."""

    _fabricx_per_rank = True

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def state_dict(self) -> dict[str, Any]:
        return {"train": self.trainer._train_results.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.trainer._train_results.load_state_dict(state_dict.get("train", {}), device=self.trainer.fabric.device)


class Extras:
    """The dict ``on_save_checkpoint`` hooks fill in and ``on_load_checkpoint`` hooks read."""

    def __init__(self, values: dict[str, Any] | None = None) -> None:
        self.values: dict[str, Any] = values if values is not None else {}

    def state_dict(self) -> dict[str, Any]:
        return self.values

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.values = dict(state_dict)


def _state_key(callback: Any) -> str:
    key = getattr(callback, "state_key", None)
    return key if isinstance(key, str) else type(callback).__qualname__


def _detached(value: Any) -> Any:
    return value.detach() if isinstance(value, Tensor) else value


def find_last_checkpoint(trainer: Trainer) -> str | None:
    """The newest ``last`` checkpoint among the ModelCheckpoint callbacks' folders, or ``None``."""
    from fabricx.checkpoint.format import is_checkpoint
    from fabricx.train.callbacks.model_checkpoint import ModelCheckpoint

    candidates: list[Path] = []
    folders = [cb.dirpath for cb in trainer.callbacks if isinstance(cb, ModelCheckpoint) and cb.dirpath]
    folders.append(os.path.join(trainer.default_root_dir, "checkpoints"))
    for folder in dict.fromkeys(os.fspath(f) for f in folders):
        path = Path(folder) / ModelCheckpoint.CHECKPOINT_NAME_LAST
        if is_checkpoint(path):
            candidates.append(path)
    if not candidates:
        return None
    return os.fspath(max(candidates, key=lambda p: p.stat().st_mtime))


def resolve_ckpt_path(trainer: Trainer, ckpt_path: str | os.PathLike | None) -> str | None:
    """``None``, a given path, or for ``"last"`` the newest last checkpoint (warning when there is none)."""
    if ckpt_path is None:
        return None
    if ckpt_path == "last":
        found = find_last_checkpoint(trainer)
        if found is None:
            rank_zero_warn(
                'fit(ckpt_path="last") found no last checkpoint (looked in the ModelCheckpoint folders and '
                f"{os.path.join(trainer.default_root_dir, 'checkpoints')}); training starts from scratch."
            )
        return found
    return os.fspath(ckpt_path)
