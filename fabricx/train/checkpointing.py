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
        progress = trainer.progress
        return {
            "global_step": progress.global_step,
            "current_epoch": progress.current_epoch,
            "epoch_done": progress.epoch_done,
            "progress": progress.state_dict(),
            "epoch_metrics": {k: _detached(v) for k, v in trainer._epoch_metrics.items()},
            "epoch_prog_bar": {k: _detached(v) for k, v in trainer._epoch_prog_bar.items()},
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        trainer = self.trainer
        progress = trainer.progress
        progress.load_state_dict(state_dict.get("progress", {}))
        progress.global_step = int(state_dict["global_step"])
        progress.current_epoch = int(state_dict["current_epoch"])
        progress.epoch_done = bool(state_dict.get("epoch_done", False))
        if "progress" not in state_dict:
            progress.batches_that_stepped = progress.global_step
        trainer._epoch_metrics = dict(state_dict.get("epoch_metrics", {}))
        trainer._epoch_prog_bar = dict(state_dict.get("epoch_prog_bar", {}))


class DataModuleState:
    """The DataModule's ``state_dict`` (empty without one)."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def state_dict(self) -> dict[str, Any]:
        datamodule = self.trainer.datamodule
        state = datamodule.state_dict() if datamodule is not None and hasattr(datamodule, "state_dict") else {}
        return {"state": state or {}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        datamodule = self.trainer.datamodule
        state = state_dict.get("state") or {}
        if datamodule is not None and state and hasattr(datamodule, "load_state_dict"):
            datamodule.load_state_dict(state)


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
        cut = getattr(self.trainer, "_cut_metric_state", None)
        return {"train": cut if cut is not None else self.trainer._train_results.state_dict()}

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


def resolve_ckpt_path(trainer: Trainer, ckpt_path: str | os.PathLike | None, stage: str = "fit") -> str | None:
    """``None``, a given path, ``"last"`` (the newest last checkpoint) or ``"best"`` (the ModelCheckpoint's best)."""
    if ckpt_path is None:
        return None
    if ckpt_path == "last":
        found = find_last_checkpoint(trainer)
        if found is None:
            rank_zero_warn(
                f'{stage}(ckpt_path="last") found no last checkpoint (looked in the ModelCheckpoint folders and '
                f"{os.path.join(trainer.default_root_dir, 'checkpoints')}); "
                + ("training starts from scratch." if stage == "fit" else "the module's current weights are used.")
            )
        return found
    if ckpt_path == "best":
        callback = trainer.checkpoint_callback
        best = getattr(callback, "best_model_path", "") if callback is not None else ""
        if not best:
            from fabricx.utilities.exceptions import MisconfigurationError

            raise MisconfigurationError(
                f'{stage}(ckpt_path="best") needs a ModelCheckpoint that saved a best checkpoint (one with '
                'monitor= and save_top_k >= 1), but none did. Pass ckpt_path="last" or a path.'
            )
        return os.fspath(best)
    if ckpt_path == "hpc":
        from fabricx.utilities.exceptions import MisconfigurationError

        raise MisconfigurationError(
            'ckpt_path="hpc" (Lightning\'s SLURM auto-requeue file) is not supported; pass "last".'
        )
    return os.fspath(ckpt_path)
