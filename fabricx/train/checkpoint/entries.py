"""What a Trainer checkpoint holds, and where ``ckpt_path="last"`` points.

Everything goes through ``fabric.save``/``fabric.load``: the module, optimizers, schedulers and the
training data loader (its exact position) as objects with state, plus small stateful holders for the
trainer's progress, the callbacks' states, the logged metrics (per process) and the user's extras.
The top-level keys are Lightning's (see `fabricx.train.checkpoint.lightning_files`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import Tensor

from fabricx.checkpoint.contents import TRAIN_LOADER_KEY, stores_engine_files
from fabricx.train.checkpoint.lightning_files import (
    ENGINE_OPTIMIZER_KEY,
    METRICS_KEY,
    PROGRESS_KEY,
    hparams_entries,
    lightning_version,
)
from fabricx.train.data.loaders import load_lightning_loader_states
from fabricx.train.logging.logging_result import tensors_in
from fabricx.utilities.rank_zero import rank_zero_warn
from fabricx.wrappers import unwrap

if TYPE_CHECKING:
    from fabricx.strategies.strategy import Strategy
    from fabricx.train.run_context import RunContext
    from fabricx.train.trainer import Trainer


class ProgressState:
    """The trainer's counters and the metrics later decisions depend on."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.loaded = False
        # The restored (global_step, current_epoch): the fit loop's counters hold them (under ``loops``); a
        # checkpoint without that entry gives them to `FitLoop.count_from_checkpoint`.
        self.counts = (0, 0)

    def state_dict(self) -> dict[str, Any]:
        trainer = self.trainer
        progress = trainer.progress
        connector = trainer.run_context.logger_connector
        connector.take_step_values()
        return {
            "global_step": trainer.global_step,
            "current_epoch": trainer.current_epoch,
            "epoch_done": progress.epoch_done,
            "progress": progress.state_dict(),
            "epoch_metrics": {k: _detached(v) for k, v in tensors_in(connector.callback).items()},
            "epoch_prog_bar": {k: _detached(v) for k, v in tensors_in(connector.pbar).items()},
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        trainer = self.trainer
        progress = trainer.progress
        progress.load_state_dict(state_dict.get("progress", {}))
        self.counts = (int(state_dict["global_step"]), int(state_dict["current_epoch"]))
        progress.epoch_done = bool(state_dict.get("epoch_done", False))
        if "progress" not in state_dict:
            progress.batches_that_stepped = self.counts[0]
        connector = trainer.run_context.logger_connector
        connector.callback = dict(state_dict.get("epoch_metrics", {}))
        connector.pbar = dict(state_dict.get("epoch_prog_bar", {}))
        self.loaded = True


def datamodule_key(trainer: Trainer) -> str | None:
    """The checkpoint key of the trainer's DataModule state, Lightning's: the DataModule's class ``__qualname__``
    (``None`` without a DataModule)."""
    datamodule = trainer.datamodule
    return None if datamodule is None else type(datamodule).__qualname__


def datamodule_state(trainer: Trainer) -> dict[str, Any]:
    """The DataModule's ``state_dict()`` (empty without a DataModule or one that defines no state)."""
    # Through the run context: the profiler times it as Lightning's `[LightningDataModule]<class>.state_dict`.
    state = trainer.run_context.call_datamodule_hook("state_dict")
    return dict(state or {})


def restore_datamodule(trainer: Trainer, checkpoint: Mapping[str, Any]) -> bool:
    """Hand the DataModule its state from ``checkpoint`` (under Lightning's key), as Lightning does: before the
    callbacks' states and before any of its loaders is requested. Returns whether there was one to restore."""
    key = datamodule_key(trainer)
    datamodule = trainer.datamodule
    if key is None or key not in checkpoint or not hasattr(datamodule, "load_state_dict"):
        return False
    trainer.run_context.call_datamodule_hook("load_state_dict", checkpoint[key])
    return True


class DataModuleState:
    """The DataModule's ``state_dict`` (empty without one), as checkpoints of earlier fabricx versions stored it
    (under a reserved key); current ones store it under Lightning's key (`datamodule_key`)."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def state_dict(self) -> dict[str, Any]:
        state = self.trainer.run_context.call_datamodule_hook("state_dict")
        return {"state": state or {}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = state_dict.get("state") or {}
        if state:
            self.trainer.run_context.call_datamodule_hook("load_state_dict", state)


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
        missing = sorted(set(state_dict) - {_state_key(callback) for callback in self.callbacks})
        if missing:
            rank_zero_warn(
                "Be aware that when using `ckpt_path`, callbacks used to create the checkpoint need to be provided "
                f"during `Trainer` instantiation. Please add the following callbacks: {missing}. Their saved "
                "states are not restored."
            )
        for callback in self.callbacks:
            key = _state_key(callback)
            if key in state_dict and callable(getattr(callback, "load_state_dict", None)):
                callback.load_state_dict(state_dict[key])


class MetricStates:
    """The running aggregates and torchmetrics states of the training metrics (one per process)."""

    _fabricx_per_rank = True

    def __init__(self, run: RunContext) -> None:
        self.run = run

    def state_dict(self) -> dict[str, Any]:
        cut = self.run.cut_metric_state
        return {"train": cut if cut is not None else self.run.train_results.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.run.train_results.load_state_dict(state_dict.get("train", {}), device=self.run.fabric.device)


class Extras:
    """The dict ``on_save_checkpoint`` hooks fill in and ``on_load_checkpoint`` hooks read."""

    def __init__(self, values: dict[str, Any] | None = None) -> None:
        self.values: dict[str, Any] = values if values is not None else {}

    def state_dict(self) -> dict[str, Any]:
        return self.values

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.values = dict(state_dict)


#: Entries the ``on_save_checkpoint`` hooks see as plain values (cheap to make: small state dicts).
_PLAIN_FOR_HOOKS = ("loops", "callbacks", "lr_schedulers")


def hook_view(state: dict[str, Any], weights_from: Strategy | None) -> dict[str, Any]:
    """The checkpoint as Lightning's ``on_save_checkpoint`` hooks get it: Lightning's entries (fabricx's own
    exact-resume entries left out), ``loops``/``callbacks``/``lr_schedulers`` as plain values, and
    ``state_dict`` as the module's full state dict from ``weights_from`` where one file holds the whole module
    (a sharded module's gathered, as it goes into the file; ``None``: a folder holds the weights, the hooks see
    none).

    Example:
        ```python
        checkpoint = hook_view(state, weights_from=fabric.strategy)
        module.on_save_checkpoint(checkpoint)
        fabric.save(path, with_hook_changes(state, checkpoint))
        ```
    """
    view = {key: value for key, value in state.items() if not key.startswith("__fabricx_")}
    for key in _PLAIN_FOR_HOOKS:
        if key in view:
            view[key] = view[key].state_dict()
    if weights_from is not None and "state_dict" in view:
        view["state_dict"] = weights_from.get_module_state_dict(unwrap(view["state_dict"]))
    return view


def with_hook_changes(state: dict[str, Any], view: dict[str, Any]) -> dict[str, Any]:
    """`state` with what the hooks changed, added or removed in `view` (fabricx's own entries kept)."""
    return {**view, **{key: value for key, value in state.items() if key.startswith("__fabricx_")}}


class OptimizerStates:
    """``optimizer_states``: the list of every optimizer's state dict, as Lightning stores it."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.loaded = False

    def state_dict(self) -> list[Any]:
        strategy = self.trainer.strategy
        return [strategy.get_optimizer_state(unwrap(optimizer)) for optimizer in self.trainer.optimizers]

    def load_state_dict(self, state_dict: list[Any]) -> None:
        optimizers = self.trainer.optimizers
        if len(state_dict) != len(optimizers):
            raise ValueError(
                f"the checkpoint holds {len(state_dict)} optimizer state(s), configure_optimizers returned "
                f"{len(optimizers)}"
            )
        for optimizer, state in zip(optimizers, state_dict, strict=True):
            self.trainer.strategy.load_optimizer_state(unwrap(optimizer), state)
        self.loaded = True


class SchedulerStates:
    """``lr_schedulers``: the list of every learning-rate scheduler's state dict."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def state_dict(self) -> list[Any]:
        return [config.scheduler.state_dict() for config in self.trainer.lr_scheduler_configs]

    def load_state_dict(self, state_dict: list[Any]) -> None:
        for config, state in zip(self.trainer.lr_scheduler_configs, state_dict, strict=False):
            config.scheduler.load_state_dict(state)


class LoopStates:
    """``loops``: the counters of Lightning's loop objects (``trainer.fit_loop``, ``validate_loop``, ...).

    fabricx resumes from its own progress entry; the loop counters are restored too, so that they go on
    counting. A Lightning-written file has only this entry, from which `progress_from_lightning()` takes the
    epoch, whether it was done, and the batches that stepped.
    """

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.loaded: dict[str, Any] | None = None

    def _loops(self) -> dict[str, Any]:
        trainer = self.trainer
        return {"fit_loop": trainer.fit_loop, "validate_loop": trainer.validate_loop,
                "test_loop": trainer.test_loop, "predict_loop": trainer.predict_loop}

    def state_dict(self) -> dict[str, Any]:
        return {name: loop.state_dict() for name, loop in self._loops().items()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.loaded = dict(state_dict)
        for name, loop in self._loops().items():
            if isinstance(state_dict.get(name), dict):
                loop.load_state_dict(state_dict[name])


def progress_from_lightning(trainer: Trainer, loops: dict[str, Any] | None, epoch: int, global_step: int) -> None:
    """Set the trainer's progress from a Lightning-written checkpoint (no fabricx progress in it)."""
    progress = trainer.progress
    fit = (loops or {}).get("fit_loop") or {}
    batch_progress = fit.get("epoch_loop.batch_progress") or {}
    progress.epoch_done = bool(batch_progress.get("is_last_batch", True))
    if not fit:
        trainer.fit_loop.count_from_checkpoint(int(global_step), int(epoch), progress.epoch_done)
    stepped = (fit.get("epoch_loop.state_dict") or {}).get("_batches_that_stepped", global_step)
    progress.batches_that_stepped = int(stepped)
    loader_states = (fit.get("state_dict") or {}).get("combined_loader")
    if loader_states:
        load_lightning_loader_states(trainer.fit_loop.data.train_loader, loader_states)
    if not progress.epoch_done:
        rank_zero_warn(
            "This Lightning checkpoint was saved inside an epoch and holds no data-loader position; the epoch "
            "starts again from its first batch (as Lightning does with a loader it cannot resume)."
        )


def is_legacy_folder(path: str | os.PathLike) -> bool:
    """A checkpoint folder of an earlier fabricx Trainer (keys ``module``, ``trainer``, ...)."""
    from fabricx.checkpoint.format import read_meta
    from fabricx.utilities.exceptions import CheckpointError

    if not Path(path).is_dir():
        return False
    try:
        keys = read_meta(path).get("shared_keys") or []
    except CheckpointError:
        return False
    return "module" in keys and "state_dict" not in keys


def _state_key(callback: Any) -> str:
    key = getattr(callback, "state_key", None)
    return key if isinstance(key, str) else type(callback).__qualname__


def _detached(value: Any) -> Any:
    return value.detach() if isinstance(value, Tensor) else value


def checkpoint_state(trainer: Trainer, weights_only: bool = False) -> dict[str, Any]:
    """What ``trainer.save_checkpoint`` hands to ``fabric.save``: Lightning's top-level keys plus fabricx's.

    ``epoch``, ``global_step``, ``pytorch-lightning_version``, ``state_dict`` (the module), ``loops``,
    ``callbacks``, ``optimizer_states``, ``lr_schedulers`` (not with ``weights_only``), ``hparams_name`` and
    ``hyper_parameters`` (plain values only), ``datamodule_hyper_parameters``; fabricx's exact-resume entries
    under reserved keys. The ``on_save_checkpoint`` hooks change it through `hook_view()`.

    Example:

    ```python
    fabric.save("epoch=0-step=5.ckpt", checkpoint_state(trainer))
    ```
    """
    module = trainer.lightning_module
    assert module is not None and trainer.model is not None, "a checkpoint is written for a set-up module"
    state: dict[str, Any] = {
        "epoch": trainer.current_epoch,
        "global_step": trainer.global_step,
        "pytorch-lightning_version": lightning_version(),
        "state_dict": trainer.model,
        "loops": LoopStates(trainer),
        "callbacks": CallbackStates(trainer.callbacks),
    }
    if not weights_only:
        if stores_engine_files(trainer.fabric.strategy):
            # An engine's optimizer state has no plain form: the engine writes and reads it with its model, as
            # Lightning's DeepSpeedStrategy leaves `optimizer_states` out of the file to the engine's checkpoint.
            for index, optimizer in enumerate(trainer.optimizers):
                state[ENGINE_OPTIMIZER_KEY.format(index)] = optimizer
        else:
            state["optimizer_states"] = OptimizerStates(trainer)
        state["lr_schedulers"] = SchedulerStates(trainer)
    state.update(hparams_entries(module))
    state.update(hparams_entries(trainer.datamodule, "datamodule_"))
    state[PROGRESS_KEY] = ProgressState(trainer)
    train_loader = trainer.fit_loop.data.train_loader
    if train_loader is not None and not weights_only:
        state[TRAIN_LOADER_KEY] = train_loader
    state[METRICS_KEY] = MetricStates(trainer.run_context)
    key, value = datamodule_key(trainer), datamodule_state(trainer)
    if key is not None and value:
        state[key] = value  # Lightning's key and value: each Trainer reads the other's
    return state
